"""All SQL of derived samples. Every state change is a guarded UPDATE on the sample's status and
attempt, so two workers (or a worker and the recovery loop) can never both own an attempt."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import func, select, tuple_, update
from sqlalchemy.orm import Session

from app.auth.models import Tenant
from app.datasets.repository import within
from app.jobs.repository import tenants_in_fair_order
from app.samples.models import HOLDING_STATUSES, LIVE_STATUSES, Sample


def add(session: Session, sample: Sample) -> Sample:
    session.add(sample)
    session.flush()
    return sample


def get_for_tenant(
    session: Session,
    sample_id: uuid.UUID,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
) -> Sample | None:
    """The tenant's sample, if its dataset is among ``datasets`` (None: any; see ``within``)."""
    return session.scalars(
        select(Sample).where(
            Sample.id == sample_id,
            Sample.tenant_id == tenant_id,
            within(Sample.dataset_id, datasets),
        )
    ).one_or_none()


def get(session: Session, sample_id: uuid.UUID) -> Sample | None:
    return session.get(Sample, sample_id)


def list_for_job(session: Session, job_id: uuid.UUID, *, limit: int, offset: int) -> list[Sample]:
    return list(
        session.scalars(
            select(Sample)
            .where(Sample.job_id == job_id)
            .order_by(Sample.created_at, Sample.id)
            .limit(limit)
            .offset(offset)
        )
    )


def lock_tenant(session: Session, tenant_id: uuid.UUID) -> None:
    """Lock the tenant's row FOR NO KEY UPDATE until the transaction ends. Race: two requests
    that each count the tenant's live samples below the cap and both insert (40 simultaneous
    requests passed a cap of 20 with 26). Under this lock the second counts after the first
    committed. NO KEY: inserting jobs and samples (FOR KEY SHARE through their foreign keys) is
    not held up. SQLite (embedded mode) has no row locks; its writes are serialised."""
    session.execute(
        select(Tenant.id).where(Tenant.id == tenant_id).with_for_update(key_share=True)
    ).first()


def count_live(session: Session, tenant_id: uuid.UUID) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Sample)
            .where(Sample.tenant_id == tenant_id, Sample.status.in_(LIVE_STATUSES))
        )
        or 0
    )


def rows_held(session: Session, tenant_id: uuid.UUID) -> int:
    """Rows of the tenant's samples that are queued, running or stored (its quota's use)."""
    return int(
        session.scalar(
            select(func.coalesce(func.sum(Sample.rows), 0)).where(
                Sample.tenant_id == tenant_id, Sample.status.in_(HOLDING_STATUSES)
            )
        )
        or 0
    )


def mark_deleted(session: Session, sample_id: uuid.UUID) -> str | None:
    """A finished sample → ``deleted``; returns its output key to delete after the commit (None
    when it had none). Guarded: a queued or running sample is left as it is."""
    row = session.execute(
        update(Sample)
        .where(Sample.id == sample_id, Sample.status.not_in((*LIVE_STATUSES, "deleted")))
        .values(status="deleted")
        .returning(Sample.output_key)
    ).one_or_none()
    return None if row is None else row.output_key


def expire_finished_before(
    session: Session, cutoff: datetime, limit: int
) -> list[tuple[uuid.UUID, str]]:
    """Up to ``limit`` succeeded samples that finished before ``cutoff`` → ``expired``; returns
    (id, output key) of each, whose outputs are deleted after the commit. SKIP LOCKED: a
    concurrent delete of the same sample keeps its row and this pass takes the next."""
    ids = list(
        session.scalars(
            select(Sample.id)
            .where(Sample.status == "succeeded", Sample.finished_at < cutoff)
            .order_by(Sample.finished_at, Sample.id)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )
    if not ids:
        return []
    rows = session.execute(
        update(Sample)
        .where(Sample.id.in_(ids), Sample.status == "succeeded")
        .values(status="expired")
        .returning(Sample.id, Sample.output_key)
    ).all()
    return [(row.id, row.output_key) for row in rows]


def claim(
    session: Session, sample_id: uuid.UUID, *, now: datetime, lease_until: datetime
) -> Sample | None:
    """queued → running with the next attempt; None if it is not queued (claimed elsewhere)."""
    claimed = session.execute(
        update(Sample)
        .where(Sample.id == sample_id, Sample.status == "queued")
        .values(
            status="running",
            attempt=Sample.attempt + 1,
            started_at=now,
            lease_expires_at=lease_until,
        )
        .returning(Sample.id)
    ).one_or_none()
    return None if claimed is None else session.get(Sample, sample_id, populate_existing=True)


def claim_next(session: Session, *, now: datetime, lease_until: datetime) -> Sample | None:
    """Claim the queued sample fairest to draw next: the oldest queued sample of the first tenant
    in the jobs' fair order over samples (:func:`app.jobs.repository.tenants_in_fair_order`;
    issue 24 §5: claimed first-in first-out, one tenant's flood of samples made another's
    sample 18× slower). None when nothing is queued (or every queued sample is being claimed
    by another worker)."""
    for tenant_id, _running in tenants_in_fair_order(session, Sample):
        # FOR UPDATE SKIP LOCKED: two workers choosing at once take different samples instead
        # of queueing on the same row. SQLite ignores it; BEGIN IMMEDIATE serialises there.
        sample_id = session.scalars(
            select(Sample.id)
            .where(Sample.tenant_id == tenant_id, Sample.status == "queued")
            .order_by(Sample.created_at, Sample.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if sample_id is None:
            continue
        claimed = claim(session, sample_id, now=now, lease_until=lease_until)
        if claimed is not None:
            return claimed
    return None


def renew_lease(
    session: Session, sample_id: uuid.UUID, attempt: int, lease_until: datetime
) -> bool:
    """Extend a running sample's lease; False if this attempt no longer owns it."""
    row = session.execute(
        update(Sample)
        .where(Sample.id == sample_id, Sample.attempt == attempt, Sample.status == "running")
        .values(lease_expires_at=lease_until)
        .returning(Sample.id)
    ).one_or_none()
    return row is not None


def complete(
    session: Session,
    sample_id: uuid.UUID,
    attempt: int,
    *,
    output_key: str,
    output_rows: int,
    now: datetime,
) -> bool:
    """Publish a sample's rows, only if this attempt still owns it."""
    row = session.execute(
        update(Sample)
        .where(Sample.id == sample_id, Sample.attempt == attempt, Sample.status == "running")
        .values(
            status="succeeded",
            output_key=output_key,
            output_rows=output_rows,
            finished_at=now,
            lease_expires_at=None,
        )
        .returning(Sample.id)
    ).one_or_none()
    return row is not None


def fail(
    session: Session, sample_id: uuid.UUID, attempt: int, *, error: str, now: datetime
) -> None:
    session.execute(
        update(Sample)
        .where(Sample.id == sample_id, Sample.attempt == attempt, Sample.status == "running")
        .values(status="failed", error=error, finished_at=now, lease_expires_at=None)
    )


def expired_running(
    session: Session,
    now: datetime,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[tuple[datetime, uuid.UUID]]:
    """Running samples whose lease ran out, as (lease end, id) keys in order; ``after`` is the
    last key of the previous page (keyset paging, as for jobs)."""
    query = select(Sample.lease_expires_at, Sample.id).where(
        Sample.status == "running", Sample.lease_expires_at < now
    )
    if after is not None:
        query = query.where(tuple_(Sample.lease_expires_at, Sample.id) > tuple_(*after))
    rows = session.execute(query.order_by(Sample.lease_expires_at, Sample.id).limit(limit))
    return [(lease, sample_id) for lease, sample_id in rows if lease is not None]


def recover_expired(
    session: Session, sample_id: uuid.UUID, *, now: datetime, max_attempts: int, error: str
) -> str | None:
    """A running sample whose worker vanished: back to the queue, or failed after
    ``max_attempts`` attempts. Re-sampling releases nothing new, so a retry is harmless."""
    base = (Sample.id == sample_id, Sample.status == "running", Sample.lease_expires_at < now)
    failed = session.execute(
        update(Sample)
        .where(*base, Sample.attempt >= max_attempts)
        .values(status="failed", error=error, finished_at=now, lease_expires_at=None)
        .returning(Sample.id)
    ).one_or_none()
    if failed is not None:
        return "failed"
    requeued = session.execute(
        update(Sample)
        .where(*base)
        .values(status="queued", lease_expires_at=None, enqueued_at=now)
        .returning(Sample.id)
    ).one_or_none()
    return None if requeued is None else "requeued"


def touch_stale_queued(session: Session, *, now: datetime, older_than: datetime) -> list[uuid.UUID]:
    """Queued samples whose message may be lost: stamp them and return them for a resend."""
    stale = list(
        session.scalars(
            select(Sample.id)
            .where(
                Sample.status == "queued",
                func.coalesce(Sample.enqueued_at, Sample.created_at) < older_than,
            )
            .limit(1000)
        )
    )
    if stale:
        session.execute(update(Sample).where(Sample.id.in_(stale)).values(enqueued_at=now))
    return stale


def ids_for_dataset(session: Session, dataset_id: uuid.UUID) -> list[uuid.UUID]:
    return list(session.scalars(select(Sample.id).where(Sample.dataset_id == dataset_id)))
