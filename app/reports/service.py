"""Rules for reading a release's artefacts: which key may read which, and when they exist."""

from __future__ import annotations

import uuid
from pathlib import Path

from sqlalchemy.orm import Session

from app.auth.service import Principal
from app.jobs import service as job_service
from app.jobs.models import Job
from app.reports.names import OWNER_ONLY, artefact_key
from app.storage import Storage


class OwnersOnly(Exception):
    """The owner tier of a report compares the release with the real table (privacy rule 7)."""


class ArtefactMissing(Exception):
    """The release has no such artefact (an older release, or one that could not be built)."""


def artefact_path(
    session: Session, storage: Storage, principal: Principal, job_id: uuid.UUID, name: str
) -> tuple[Job, Path]:
    """The stored file of artefact ``name`` of a succeeded job, for ``principal``.

    Raises JobNotFound (another tenant's job, too), OwnersOnly, JobConflict (no output yet),
    OutputGone (erased with its dataset) or ArtefactMissing."""
    job, _output = job_service.output_path(session, storage, principal, job_id)
    if name in OWNER_ONLY and not principal.is_owner:
        raise OwnersOnly(job_id)
    if name not in (job.artefacts or []):
        raise ArtefactMissing(name)
    # A succeeded job's attempt is the one that published (the guarded UPDATE matched it).
    path = storage.path(artefact_key(job.id, job.attempt, name))
    if not path.is_file():
        raise job_service.OutputGone(job_id)
    return job, path
