"""All SQL for jobs and idempotency keys.

State changes are guarded UPDATEs (``... WHERE <expected state> RETURNING``): the row is the
truth, and a change that finds the job in another state changes nothing. That is what makes a
redelivered Celery message, a second worker, a reaper and a cancel safe against each other.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from app.jobs.models import IdempotencyKey, Job
from app.jobs.progress import DONE, QUEUED, REQUEUED_DETAIL, STARTING, ProgressPoint


@dataclass(frozen=True)
class Claim:
    job_id: uuid.UUID
    dataset_id: uuid.UUID
    attempt: int
    rho: Decimal
    charged: bool
    method: str
    params: dict[str, Any]
    rows: int | None
    seed: int | None


def add(session: Session, job: Job) -> Job:
    session.add(job)
    session.flush()
    return job


def get(session: Session, job_id: uuid.UUID) -> Job | None:
    return session.get(Job, job_id)


def get_for_tenant(session: Session, job_id: uuid.UUID, tenant_id: uuid.UUID) -> Job | None:
    return session.scalars(
        select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id)
    ).one_or_none()


def lock_for_tenant(session: Session, job_id: uuid.UUID, tenant_id: uuid.UUID) -> Job | None:
    # FOR UPDATE: a cancel must not interleave with a worker's claim; whichever takes the row
    # lock first wins and the other's guarded UPDATE then sees the new status.
    return session.scalars(
        select(Job).where(Job.id == job_id, Job.tenant_id == tenant_id).with_for_update()
    ).one_or_none()


def lock_active_for_dataset(session: Session, dataset_id: uuid.UUID) -> list[Job]:
    # FOR UPDATE for the same reason as lock_for_tenant, for every live job of a dataset.
    return list(
        session.scalars(
            select(Job)
            .where(Job.dataset_id == dataset_id, Job.status.in_(("queued", "running")))
            .order_by(Job.id)
            .with_for_update()
        )
    )


def job_ids_for_dataset(session: Session, dataset_id: uuid.UUID) -> list[uuid.UUID]:
    return list(session.scalars(select(Job.id).where(Job.dataset_id == dataset_id)))


def list_for_dataset(
    session: Session, dataset_id: uuid.UUID, *, limit: int, offset: int
) -> list[Job]:
    return list(
        session.scalars(
            select(Job)
            .where(Job.dataset_id == dataset_id)
            .order_by(Job.created_at, Job.id)
            .limit(limit)
            .offset(offset)
        )
    )


def _insert_for(session: Session):  # type: ignore[no-untyped-def]
    return pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert


def claim_idempotency_key(
    session: Session,
    tenant_id: uuid.UUID,
    key: str,
    request_hash: str,
    job_id: uuid.UUID,
    now: datetime,
) -> bool:
    """Take the key for this request; False if another request already holds it.

    On PostgreSQL a concurrent INSERT of the same key waits for the first transaction; if that
    one commits this becomes DO NOTHING (and the caller reads the winner's job), if it rolls back
    this insert goes ahead. So 50 identical parallel requests create one job and reserve once.
    """
    insert = _insert_for(session)
    result = session.execute(
        insert(IdempotencyKey)
        .values(
            tenant_id=tenant_id, key=key, request_hash=request_hash, job_id=job_id, created_at=now
        )
        .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
        .returning(IdempotencyKey.job_id)
    ).one_or_none()
    return result is not None


def get_idempotency_key(session: Session, tenant_id: uuid.UUID, key: str) -> IdempotencyKey | None:
    return session.get(IdempotencyKey, (tenant_id, key))


def claim(
    session: Session, job_id: uuid.UUID, *, now: datetime, lease_until: datetime, max_attempts: int
) -> Claim | None:
    """Atomically start an attempt: a queued job, or a running one whose lease ran out."""
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.cancel_requested.is_(False),
            Job.attempt < max_attempts,
            (Job.status == "queued") | ((Job.status == "running") & (Job.lease_expires_at < now)),
        )
        .values(
            status="running",
            attempt=Job.attempt + 1,
            lease_expires_at=lease_until,
            progress_stage=STARTING.stage,
            progress_fraction=STARTING.fraction,
            detail_stage=STARTING.stage,
            detail_fraction=STARTING.fraction,
        )
        .returning(
            Job.id,
            Job.dataset_id,
            Job.attempt,
            Job.rho,
            Job.charged_at,
            Job.method,
            Job.params,
            Job.rows,
            Job.seed,
        )
    ).one_or_none()
    if row is None:
        return None
    return Claim(
        job_id=row.id,
        dataset_id=row.dataset_id,
        attempt=row.attempt,
        rho=row.rho,
        charged=row.charged_at is not None,
        method=row.method,
        params=dict(row.params),
        rows=row.rows,
        seed=row.seed,
    )


def mark_charged(session: Session, job_id: uuid.UUID, attempt: int, now: datetime) -> bool:
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.charged_at.is_(None))
        .values(charged_at=now, started_at=now)
        .returning(Job.id)
    ).one_or_none()
    return result is not None


def renew_lease(
    session: Session, job_id: uuid.UUID, attempt: int, lease_until: datetime
) -> bool | None:
    """Extend the lease of the attempt that owns the job. None: the attempt lost the job;
    otherwise whether a cancel was requested."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status == "running")
        .values(lease_expires_at=lease_until)
        .returning(Job.cancel_requested)
    ).one_or_none()
    return None if row is None else bool(row.cancel_requested)


def report_progress(
    session: Session,
    job_id: uuid.UUID,
    attempt: int,
    *,
    detail: ProgressPoint,
    public: ProgressPoint | None,
    lease_until: datetime,
) -> bool | None:
    """Record the owning attempt's detail progress and, at a point of the public schedule, its
    public progress (``None`` leaves it as it is). None: lost the job; else cancel requested?"""
    values: dict[str, object] = {
        "detail_fraction": detail.fraction,
        "detail_stage": detail.stage[:64],
        "lease_expires_at": lease_until,
    }
    if public is not None:
        values.update(progress_fraction=public.fraction, progress_stage=public.stage[:64])
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status == "running")
        .values(**values)
        .returning(Job.cancel_requested)
    ).one_or_none()
    return None if row is None else bool(row.cancel_requested)


def complete(
    session: Session,
    job_id: uuid.UUID,
    attempt: int,
    *,
    output_key: str,
    output_rows: int,
    now: datetime,
) -> bool:
    """Publish the output, only if this attempt still owns the job and no cancel arrived."""
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.attempt == attempt,
            Job.status == "running",
            Job.cancel_requested.is_(False),
        )
        .values(
            status="succeeded",
            output_key=output_key,
            output_rows=output_rows,
            finished_at=now,
            lease_expires_at=None,
            progress_fraction=DONE.fraction,
            progress_stage=DONE.stage,
            detail_fraction=DONE.fraction,
            detail_stage=DONE.stage,
        )
        .returning(Job.id)
    ).one_or_none()
    return row is not None


def finish(
    session: Session,
    job_id: uuid.UUID,
    attempt: int,
    *,
    status: str,
    error: str | None,
    now: datetime,
) -> bool:
    """End the owning attempt as failed or cancelled (the charge stays)."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status == "running")
        .values(
            status=status,
            error=error,
            finished_at=now,
            lease_expires_at=None,
            progress_stage=status,
            detail_stage=status,
        )
        .returning(Job.id)
    ).one_or_none()
    return row is not None


def expired_running(session: Session, now: datetime, limit: int = 100) -> list[uuid.UUID]:
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "running", Job.lease_expires_at < now)
            .order_by(Job.lease_expires_at)
            .limit(limit)
        )
    )


def recover_expired(
    session: Session, job_id: uuid.UUID, *, now: datetime, max_attempts: int
) -> str | None:
    """Deal with one job whose worker stopped renewing its lease. Returns what was done."""
    base = (Job.id == job_id, Job.status == "running", Job.lease_expires_at < now)
    cancelled = session.execute(
        update(Job)
        .where(*base, Job.cancel_requested.is_(True))
        .values(
            status="cancelled",
            finished_at=now,
            lease_expires_at=None,
            progress_stage="cancelled",
            detail_stage="cancelled",
        )
        .returning(Job.id)
    ).one_or_none()
    if cancelled is not None:
        return "cancelled"
    requeued = session.execute(
        update(Job)
        .where(*base, Job.attempt < max_attempts)
        .values(
            status="queued",
            lease_expires_at=None,
            enqueued_at=now,
            # The lost attempt's progress must not stay visible: it ran with noise the next
            # attempt will not use. Analysts see the job queued again; owners see why.
            progress_fraction=QUEUED.fraction,
            progress_stage=QUEUED.stage,
            detail_fraction=REQUEUED_DETAIL.fraction,
            detail_stage=REQUEUED_DETAIL.stage,
        )
        .returning(Job.id)
    ).one_or_none()
    if requeued is not None:
        return "requeued"
    failed = session.execute(
        update(Job)
        .where(*base, Job.attempt >= max_attempts)
        .values(
            status="failed",
            finished_at=now,
            lease_expires_at=None,
            progress_stage="failed",
            detail_stage="failed",
            error="the job's worker stopped responding on every attempt; its budget stays spent",
        )
        .returning(Job.id)
    ).one_or_none()
    return "failed" if failed is not None else None


def touch_stale_queued(
    session: Session, *, now: datetime, older_than: datetime, limit: int = 100
) -> list[uuid.UUID]:
    """Queued jobs whose message may have been lost: stamp them and return them to re-send."""
    ids = list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "queued", Job.enqueued_at < older_than)
            .order_by(Job.enqueued_at)
            .limit(limit)
        )
    )
    if not ids:
        return []
    rows = session.execute(
        update(Job)
        .where(Job.id.in_(ids), Job.status == "queued", Job.enqueued_at < older_than)
        .values(enqueued_at=now)
        .returning(Job.id)
    ).all()
    return [row.id for row in rows]


def expired_queued(
    session: Session, *, created_before: datetime, limit: int = 100
) -> list[uuid.UUID]:
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "queued", Job.created_at < created_before)
            .order_by(Job.created_at)
            .limit(limit)
        )
    )


def cancel_queued(
    session: Session, job_id: uuid.UUID, *, now: datetime, reason: str | None
) -> Job | None:
    """Cancel a job that is still queued; returns it (with ``charged_at``) if it was."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "queued")
        .values(
            status="cancelled",
            finished_at=now,
            progress_stage="cancelled",
            detail_stage="cancelled",
            error=reason,
        )
        .returning(Job.id)
    ).one_or_none()
    if row is None:
        return None
    job = session.get(Job, job_id, populate_existing=True)
    return job


def request_cancel(session: Session, job_id: uuid.UUID) -> bool:
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "running")
        .values(cancel_requested=True)
        .returning(Job.id)
    ).one_or_none()
    return row is not None
