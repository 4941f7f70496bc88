"""Rules of derived samples: drawing more rows from a succeeded job's fitted model.

Privacy. The model was published with the job (it holds only what the mechanism released and
public information), so drawing rows from it is post-processing: a sample has no ρ, reserves
nothing and writes no ledger entry, and nothing here imports the budget. Every refusal below is
decided from public information (the job's method, params, status and the declared domain).
"""

from __future__ import annotations

import secrets
import uuid

from sqlalchemy.orm import Session

from app.audit import service as audit
from app.auth.service import Principal
from app.config import Settings
from app.datasets import repository as dataset_repository
from app.db.base import utcnow
from app.db.session import after_commit
from app.jobs import dispatch
from app.jobs import service as job_service
from app.jobs.resources import ResourcesExceeded, check_sampling_time, output_rows_limit
from app.reports.names import MODEL
from app.samples import repository
from app.samples.models import GONE_STATUSES, LIVE_STATUSES, Sample
from app.samples.schemas import SampleOut, SampleRequest
from app.storage import Storage, discard
from engine.mechanisms import get_mechanism
from engine.tables.encoding import TableSchema
from workers.celery_app import RUN_SAMPLE_TASK


class SampleNotFound(Exception):
    pass


class InvalidSample(Exception):
    """The request cannot be met (public message, 422)."""


class TooManySamples(Exception):
    """The tenant already has its limit of samples queued or running (429)."""


class SampleGone(Exception):
    """The sample's output was deleted: it expired or was deleted (410)."""

    def __init__(self, status: str) -> None:
        super().__init__(
            "the sample's output was deleted after the retention period "
            "(RHOSYNTH_SAMPLE_RETENTION_DAYS); draw a new sample"
            if status == "expired"
            else "the sample was deleted; draw a new sample"
        )


class SampleQuotaExceeded(Exception):
    """The tenant's samples would hold more rows than its quota (409)."""

    def __init__(self, held: int, rows: int, quota: int) -> None:
        super().__init__(
            f"the tenant's samples hold {held} rows (queued, running or stored) and this one "
            f"asks for {rows}: the quota is {quota} rows (RHOSYNTH_TENANT_SAMPLE_ROWS_QUOTA); "
            "delete samples you no longer need (DELETE /v1/samples/{id}) or wait for them to "
            "expire"
        )


def create_sample(
    session: Session,
    settings: Settings,
    principal: Principal,
    job_id: uuid.UUID,
    request: SampleRequest,
) -> Sample:
    """Queue a derived sample of a succeeded job; its message is sent after the commit."""
    job = job_service.get_job(session, principal, job_id)
    if job.status != "succeeded":
        raise job_service.JobConflict(
            f"only a succeeded job can be re-sampled (status: {job.status})"
        )
    mechanism = get_mechanism(job.method)
    if not mechanism.resamplable:
        raise InvalidSample(
            f"{job.method!r} keeps no reusable model (GET /v1/methods says which methods do)"
        )
    if MODEL not in (job.artefacts or []):
        raise InvalidSample("this release has no saved model (it predates saved models)")
    dataset = dataset_repository.get(session, job.dataset_id)
    if dataset is None or dataset.deleted_at is not None:
        raise job_service.OutputGone(job_id)
    rows = request.rows if request.rows is not None else job.output_rows
    if rows is None or rows < 1:
        raise InvalidSample("give rows: the job's output has no rows to match")
    domain = TableSchema.from_json(dataset.schema).domain()
    params = mechanism.validate_params(job.params)
    limit = output_rows_limit(settings, mechanism, domain, params)
    if rows > limit:
        raise InvalidSample(
            f"rows = {rows} is above the limit of {limit} rows for {job.method!r} on this "
            f"dataset (RHOSYNTH_MAX_OUTPUT_ROWS and the per-job memory limit)"
        )
    try:
        check_sampling_time(settings, mechanism, domain, params, rows)
    except ResourcesExceeded as exceeded:
        raise InvalidSample(str(exceeded)) from None
    # Counted under the tenant's row lock (repository.lock_tenant): a burst cannot pass the cap.
    repository.lock_tenant(session, principal.tenant_id)
    if repository.count_live(session, principal.tenant_id) >= settings.tenant_max_live_samples:
        raise TooManySamples(settings.tenant_max_live_samples)
    # The quota is counted under the same lock: a burst cannot pass it either.
    held = repository.rows_held(session, principal.tenant_id)
    if held + rows > settings.tenant_sample_rows_quota:
        raise SampleQuotaExceeded(held, rows, settings.tenant_sample_rows_quota)
    seed = request.seed if request.seed is not None else secrets.randbelow(2**53)
    sample = repository.add(
        session,
        Sample(
            tenant_id=principal.tenant_id,
            dataset_id=job.dataset_id,
            job_id=job.id,
            rows=rows,
            seed=seed,
            status="queued",
            attempt=0,
            requested_by=principal.key_id,
            created_at=utcnow(),
            enqueued_at=utcnow(),
        ),
    )
    sample_id = sample.id
    audit.record(
        session,
        principal,
        "sample.create",
        "sample",
        sample_id,
        {"job_id": str(job.id), "rows": request.rows, "seed_given": request.seed is not None},
    )
    after_commit(session, lambda: dispatch.ring(settings, sample_id, RUN_SAMPLE_TASK))
    return sample


def get_sample(session: Session, principal: Principal, sample_id: uuid.UUID) -> Sample:
    sample = repository.get_for_tenant(
        session, sample_id, principal.tenant_id, datasets=principal.datasets
    )
    if sample is None:
        raise SampleNotFound(sample_id)
    return sample


def list_samples(
    session: Session, principal: Principal, job_id: uuid.UUID, *, limit: int, offset: int
) -> list[Sample]:
    job_service.get_job(session, principal, job_id)
    return repository.list_for_job(session, job_id, limit=limit, offset=offset)


def delete_sample(
    session: Session, storage: Storage, principal: Principal, sample_id: uuid.UUID
) -> None:
    """Delete a finished sample's output (status ``deleted``; the row stays, as a record). Its
    rows stop counting against the quota. A queued or running sample is refused (409): it may
    still publish. Deleting a deleted sample again does nothing."""
    sample = get_sample(session, principal, sample_id)
    if sample.status == "deleted":
        return
    if sample.status in LIVE_STATUSES:
        raise job_service.JobConflict(
            f"a {sample.status} sample cannot be deleted; wait until it has finished"
        )
    key = repository.mark_deleted(session, sample_id)
    audit.record(session, principal, "sample.delete", "sample", sample_id)
    if key is not None:
        after_commit(session, lambda: discard(storage, key))


def output_key(
    session: Session, storage: Storage, principal: Principal, sample_id: uuid.UUID
) -> tuple[Sample, str]:
    """The sample and the key of its published output, which is stored (else OutputGone)."""
    sample = get_sample(session, principal, sample_id)
    if sample.status in GONE_STATUSES:
        raise SampleGone(sample.status)
    if sample.status != "succeeded" or sample.output_key is None:
        raise job_service.JobConflict(f"the sample has no output (status: {sample.status})")
    dataset = job_service.live_dataset(session, sample.dataset_id, sample_id)
    job_service.require_stored(session, storage, dataset, sample.output_key, sample_id)
    audit.record(
        session, principal, "sample.download", "sample", sample_id, {"job_id": str(sample.job_id)}
    )
    return sample, sample.output_key


def sample_out(sample: Sample) -> SampleOut:
    return SampleOut(
        id=sample.id,
        job_id=sample.job_id,
        dataset_id=sample.dataset_id,
        rows=sample.rows,
        seed=sample.seed,
        status=sample.status,
        created_at=sample.created_at,
        started_at=sample.started_at,
        finished_at=sample.finished_at,
        error=sample.error,
        output_rows=sample.output_rows,
    )
