"""Rules for reading a release's artefacts: which key may read which, and when they exist."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.service import Principal
from app.jobs import service as job_service
from app.jobs.models import Job
from app.reports.names import OWNER_ONLY, artefact_key
from app.storage import Storage


class OwnersOnly(Exception):
    """The owner tier of a report compares the release with the real table (privacy rule 7)."""


class OwnerTierBuilding(Exception):
    """The owner tier is still to be built by a reports worker (app/jobs/owner_tier.py)."""


class ArtefactMissing(Exception):
    """The release has no such artefact (an older release, or one that could not be built)."""


def stored_artefact(
    session: Session, storage: Storage, principal: Principal, job_id: uuid.UUID, name: str
) -> tuple[Job, str]:
    """The key of artefact ``name`` of a succeeded job, for ``principal``.

    Raises JobNotFound (another tenant's job, too), OwnersOnly, JobConflict (no output yet),
    OutputGone (erased with its dataset), OwnerTierBuilding (owner keys, while a reports worker
    has it to build) or ArtefactMissing."""
    job, dataset = job_service.published_job(session, principal, job_id)
    if name in OWNER_ONLY and not principal.is_owner:
        raise OwnersOnly(job_id)
    if name not in (job.artefacts or []):
        if name in OWNER_ONLY and job.owner_tier == "pending":
            raise OwnerTierBuilding(job_id)
        raise ArtefactMissing(name)
    # A succeeded job's attempt is the one that published (the guarded UPDATE matched it).
    key = artefact_key(job.id, job.attempt, name)
    job_service.require_stored(session, storage, dataset, key, job_id)
    audit.record(
        session,
        principal,
        "job.download",
        "job",
        job.id,
        {"dataset_id": str(job.dataset_id), "artefact": name},
    )
    return job, key
