"""Owner approval of jobs (issue 27 §3).

With approval on for a dataset, a job of an analyst key is created ``pending_approval`` with its
budget reserved (on the dataset and its quota) at submission, exactly as a queued job: an
approval can then never fail for budget, and the analyst learns of a refusal for budget at once.
An owner approves it (it becomes ``queued`` and is enqueued after commit, as any submission) or
rejects it with a reason (``rejected``); undecided, it expires after
``Settings.approval_ttl_seconds`` (``expired``, in the recovery pass). A rejected or expired job
never ran, so its reservation is released (privacy rule 1: release only for jobs that never
ran). The states and the reason are shown to every key of the tenant: owners decide on the
request and its dry-run preview, never on the data (docs/privacy.md).

Services flush, never commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from app.audit import service as audit
from app.auth.service import Principal
from app.budget import service as budget_service
from app.config import Settings
from app.datasets import repository as dataset_repository
from app.db.base import utcnow
from app.db.session import after_commit, transaction
from app.jobs import dispatch, preview, repository
from app.jobs.models import Job
from app.jobs.schemas import JobPreview, JobRequest
from app.jobs.service import (
    SYSTEM_ACTOR,
    DatasetUnavailable,
    InvalidJob,
    JobConflict,
    JobNotFound,
)
from app.webhooks import outbox


@dataclass(frozen=True)
class PendingJob:
    job: Job
    preview: JobPreview | None
    preview_error: str | None


def request_of(job: Job) -> JobRequest:
    """The request a job was made from (its budget as the analyst gave it)."""
    budget: dict[str, object] = (
        {"epsilon": job.epsilon, "delta": job.delta}
        if job.epsilon is not None and job.delta is not None
        else {"rho": job.rho}
    )
    return JobRequest(
        method=job.method, budget=budget, rows=job.rows, seed=job.seed, params=job.params
    )


def list_pending(
    session: Session, settings: Settings, principal: Principal, dataset_id: uuid.UUID, limit: int
) -> list[PendingJob]:
    """The dataset's jobs waiting for approval, oldest first, each with its dry-run preview."""
    if (
        dataset_repository.get_for_tenant(
            session, dataset_id, principal.tenant_id, datasets=principal.datasets
        )
        is None
    ):
        raise LookupError(dataset_id)
    out: list[PendingJob] = []
    for job in repository.pending_for_dataset(session, dataset_id, limit=limit):
        try:
            cost = preview.preview_job(session, settings, principal, dataset_id, request_of(job))
        except (InvalidJob, DatasetUnavailable, JobConflict) as error:
            out.append(PendingJob(job, None, str(error) or "the dataset was deleted"))
            continue
        # The job's reservation is already out of ``remaining_rho``: the dry run, which asks
        # whether the request would fit on top of it, said a job reserving more than what was
        # left beside it "would exceed the budget". It cannot: approving needs no budget.
        cost = cost.model_copy(
            update={"would_exceed_budget": False, "remaining_rho_after": cost.remaining_rho}
        )
        out.append(PendingJob(job, cost, None))
    return out


def _locked_pending(session: Session, principal: Principal, job_id: uuid.UUID) -> Job:
    job = repository.lock_for_tenant(
        session, job_id, principal.tenant_id, datasets=principal.datasets
    )
    if job is None:
        raise JobNotFound(job_id)
    if job.status != "pending_approval":
        raise JobConflict(f"the job is not waiting for approval (status: {job.status})")
    return job


def approve_job(
    session: Session, settings: Settings, principal: Principal, job_id: uuid.UUID
) -> Job:
    """pending_approval → queued; the job's budget is already reserved. Enqueued after commit."""
    job = _locked_pending(session, principal, job_id)
    if not repository.approve_pending(session, job.id, now=utcnow(), decided_by=principal.key_id):
        raise JobConflict("the job is not waiting for approval")  # pragma: no cover - locked
    after_commit(session, lambda: dispatch.ring(settings, job.id))
    outbox.record_approval(session, job.id, settings)
    session.refresh(job)
    # The audit entry last: its per-tenant lock is then held only until the commit.
    audit.record(
        session, principal, "job.approve", "job", job.id, {"dataset_id": str(job.dataset_id)}
    )
    return job


def reject_job(
    session: Session,
    principal: Principal,
    job_id: uuid.UUID,
    reason: str,
    settings: Settings | None = None,
) -> Job:
    """pending_approval → rejected with ``reason``; the job never ran, its reservation goes
    back to the dataset and its quota."""
    job = _locked_pending(session, principal, job_id)
    closed = repository.close_pending(
        session,
        job.id,
        status="rejected",
        now=utcnow(),
        reason=reason,
        decided_by=principal.key_id,
    )
    if closed is None:  # pragma: no cover - the row is locked and pending
        raise JobConflict("the job is not waiting for approval")
    budget_service.release_reservation(session, job.dataset_id, job.rho, job.id, principal.actor)
    outbox.record_approval(session, job.id, settings)
    # Last (see approve_job). The reason is the owner's free text, shown to the tenant's keys
    # with the job; the trail keeps ids and public parameters only, so it is left out.
    audit.record(
        session, principal, "job.reject", "job", job.id, {"dataset_id": str(job.dataset_id)}
    )
    return closed


def expire_pending(factory: sessionmaker[Session], settings: Settings) -> list[uuid.UUID]:
    """Expire jobs that waited longer than ``approval_ttl_seconds``; each in a transaction of
    its own, releasing its reservation. Part of the recovery pass (app/jobs/recovery.py)."""
    ttl = settings.approval_ttl_seconds
    with transaction(factory) as session:
        due = repository.expired_pending(session, created_before=utcnow() - timedelta(seconds=ttl))
    expired: list[uuid.UUID] = []
    days = ttl / 86400
    reason = (
        f"no owner approved or rejected the job within {days:g} days"
        if ttl % 86400 == 0
        else f"no owner approved or rejected the job within {ttl} seconds"
    )
    for job_id in due:
        with transaction(factory) as session:
            # The guarded UPDATE decides a race with an approval: whichever commits first.
            job = repository.close_pending(
                session, job_id, status="expired", now=utcnow(), reason=reason, decided_by=None
            )
            if job is not None:
                budget_service.release_reservation(
                    session, job.dataset_id, job.rho, job.id, SYSTEM_ACTOR
                )
                outbox.record_approval(session, job.id, settings)
                # Last (see approve_job): the service's own decision, by no key.
                audit.record_as(
                    session,
                    job.tenant_id,
                    SYSTEM_ACTOR,
                    None,
                    "job.expire",
                    "job",
                    job.id,
                    {"dataset_id": str(job.dataset_id), "ttl_seconds": ttl},
                )
                expired.append(job_id)
    return expired
