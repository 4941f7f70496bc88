"""All SQL for jobs and idempotency keys.

State changes are guarded UPDATEs (``... WHERE <expected state> RETURNING``): the row is the
truth, and a change that finds the job in another state changes nothing. That is what makes a
redelivered Celery message, a second worker, a reaper and a cancel safe against each other.

Claiming is fair between tenants: a Celery message is a doorbell, and the worker that takes one
claims the queued job that is fairest to start next (``claim_next``), not necessarily the job the
message names. Every queued job has a message of its own, so every job is still delivered once
per message; a message that finds nothing claimable does nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Select,
    bindparam,
    case,
    func,
    or_,
    select,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, aliased

from app.auth.models import Tenant
from app.datasets.models import Dataset
from app.datasets.repository import within
from app.jobs.models import IdempotencyKey, Job
from app.jobs.progress import DONE, QUEUED, REQUEUED_DETAIL, STARTING, ProgressPoint
from app.samples.models import Sample


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
    deadline_at: datetime


def add(session: Session, job: Job) -> Job:
    session.add(job)
    session.flush()
    return job


def get(session: Session, job_id: uuid.UUID) -> Job | None:
    return session.get(Job, job_id)


def get_for_tenant(
    session: Session,
    job_id: uuid.UUID,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
) -> Job | None:
    """The tenant's job, if its dataset is among ``datasets`` (None: any; see ``within``)."""
    return session.scalars(
        select(Job).where(
            Job.id == job_id, Job.tenant_id == tenant_id, within(Job.dataset_id, datasets)
        )
    ).one_or_none()


def lock_for_tenant(
    session: Session,
    job_id: uuid.UUID,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
) -> Job | None:
    # FOR UPDATE: a cancel must not interleave with a worker's claim; whichever takes the row
    # lock first wins and the other's guarded UPDATE then sees the new status.
    return session.scalars(
        select(Job)
        .where(Job.id == job_id, Job.tenant_id == tenant_id, within(Job.dataset_id, datasets))
        .with_for_update()
    ).one_or_none()


def lock_active_for_dataset(session: Session, dataset_id: uuid.UUID) -> list[Job]:
    # FOR UPDATE for the same reason as lock_for_tenant, for every live job of a dataset.
    return list(
        session.scalars(
            select(Job)
            .where(
                Job.dataset_id == dataset_id,
                Job.status.in_(("pending_approval", "queued", "running")),
            )
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


def _lost_before_deadline(now: datetime) -> ColumnElement[bool]:
    """A running job whose lease ran out (its worker died) before the attempt reached its
    deadline. A lost attempt whose last lease ran to its deadline or past it is not claimable
    again: the recovery loop fails it with the time-limit text (``recover_expired``)."""
    return (
        (Job.status == "running")
        & (Job.lease_expires_at < now)
        & (Job.deadline_at.is_(None) | (Job.lease_expires_at < Job.deadline_at))
    )


def claim(
    session: Session,
    job_id: uuid.UUID,
    *,
    now: datetime,
    lease_until: datetime,
    deadline_at: datetime,
    max_attempts: int,
    lost_only: bool = False,
) -> Claim | None:
    """Atomically start an attempt of this job: a queued job (unless ``lost_only``), or a running
    one whose lease ran out before its deadline. The attempt must end by ``deadline_at``."""
    claimable = _lost_before_deadline(now)
    if not lost_only:
        claimable = (Job.status == "queued") | claimable
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.cancel_requested.is_(False),
            Job.attempt < max_attempts,
            claimable,
        )
        .values(
            status="running",
            attempt=Job.attempt + 1,
            lease_expires_at=lease_until,
            deadline_at=deadline_at,
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
            Job.deadline_at,
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
        deadline_at=row.deadline_at,
    )


def _fair_order(
    running: Any, last_start: Any, oldest: Any, tenant_id: Any
) -> tuple[ColumnElement[Any], ...]:
    """The claim order between tenants, as ORDER BY terms: fewest running first; then the tenant
    whose latest start is oldest (never started: first); then the oldest queued; then the id.
    One rule for the claims (``tenants_in_fair_order``) and for a queued job's place counted at
    a past minute (``queue_at``)."""
    return (running, last_start.asc().nulls_first(), oldest, tenant_id)


def tenants_in_fair_order(
    session: Session, model: type[Job] | type[Sample] = Job
) -> list[tuple[uuid.UUID, int]]:
    """Tenants with queued jobs (or, with ``model=Sample``, derived samples), fairest first,
    with their number of running ones.

    Fewest running first; then the tenant whose latest one started longest ago (a tenant that
    never had one started comes first), which is round-robin when every tenant has nothing
    running, as on a worker with one process; then the oldest queued one.
    """
    queued = (
        select(model.tenant_id.label("tenant_id"), func.min(model.created_at).label("oldest"))
        .where(model.status == "queued")
        .group_by(model.tenant_id)
        .subquery()
    )
    running_rows = aliased(model)
    running = (
        select(func.count())
        .select_from(running_rows)
        .where(running_rows.tenant_id == queued.c.tenant_id, running_rows.status == "running")
        .scalar_subquery()
    )
    started_rows = aliased(model)
    last_start = (
        select(func.max(started_rows.started_at))
        .where(started_rows.tenant_id == queued.c.tenant_id)
        .scalar_subquery()
    )
    rows = session.execute(
        select(queued.c.tenant_id, running.label("running")).order_by(
            *_fair_order(running, last_start, queued.c.oldest, queued.c.tenant_id)
        )
    ).all()
    return [(row.tenant_id, int(row.running)) for row in rows]


@dataclass(frozen=True)
class QueuedTenant:
    """One tenant of the queue as it stood at a past minute T (``queue_at``): its jobs queued at
    T, its jobs running at T, and (for the asking job's tenant) how many of its queued jobs the
    claim order takes before the asking job."""

    tenant_id: uuid.UUID
    queued: int
    running: int
    before: int


def queue_at(
    session: Session,
    job_id: uuid.UUID,
    tenant_id: uuid.UUID,
    created_at: datetime,
    as_of: datetime,
) -> list[QueuedTenant]:
    """The tenants with jobs queued at ``as_of`` (T), in the order ``tenants_in_fair_order``
    would have given at T, from timestamps alone: nothing that happened after T changes it.

    A job was queued at T if it was submitted by T (``created_at``) and had neither started
    (``started_at``: its first claim, which a requeue after a lost worker does not move) nor
    ended (cancelled, expired or finished: ``finished_at``) by T; running at T if it had started
    by T and not ended. So a job put back in the queue after a lost worker counts as running
    from its first start to its end: when a worker is lost can depend on the data (an
    out-of-memory kill), so requeues are left out of the count altogether, at the price of an
    estimate that treats such a job as holding its slot. The asking job (queued now) counts as
    queued at T even if it was submitted, or put back, after T, and so do the jobs its tenant
    submitted after T before it: it stands at the end of its tenant's queue of T behind those,
    or at its place by creation when requeued.

    One statement (built once, with bound parameters): the live jobs (``ix_jobs_status_tenant``)
    and those finished after T (``ix_jobs_finished_at``), grouped by tenant, plus each such
    tenant's latest start by T (``ix_jobs_tenant_started``). Its cost grows with the live jobs,
    not with the table (docs/api.md, "Where a queued job stands")."""
    rows = session.execute(
        _queue_at_statement(),
        {"job_id": job_id, "tenant_id": tenant_id, "created_at": created_at, "as_of": as_of},
    ).all()
    return [
        QueuedTenant(
            tenant_id=row.tenant_id,
            queued=int(row.queued),
            running=int(row.running),
            before=int(row.before),
        )
        for row in rows
    ]


@cache
def _queue_at_statement() -> Select[tuple[uuid.UUID, int, int, int]]:
    """``queue_at``'s statement; building it costs more than running it, so it is built once."""
    as_of = bindparam("as_of", type_=Job.created_at.type)
    job_id = bindparam("job_id", type_=Job.id.type)
    tenant_id = bindparam("tenant_id", type_=Job.tenant_id.type)
    created_at = bindparam("created_at", type_=Job.created_at.type)
    left = Job.finished_at.is_not(None) & (Job.finished_at <= as_of)
    started = Job.started_at.is_not(None) & (Job.started_at <= as_of)
    # A job held for an owner's approval (issue 27 §3) was not queued until its decision:
    # approved after T, or rejected, expired or cancelled after T while pending, it was not
    # queued at T (counting it would change T's answer at the instant of the decision).
    undecided_or_before = Job.decided_at.is_(None) | (Job.decided_at <= as_of)
    queued = (Job.created_at <= as_of) & undecided_or_before & ~started & ~left
    running = started & ~left
    ahead_of_mine = (Job.created_at < created_at) | (
        (Job.created_at == created_at) & (Job.id < job_id)
    )
    # The asking job, and its own tenant's jobs submitted after T before it (their submission
    # times are shown to every key of the tenant), count as queued at T and not running.
    mine = (Job.id == job_id) | (
        (Job.tenant_id == tenant_id) & (Job.created_at > as_of) & ahead_of_mine
    )
    columns = (
        Job.tenant_id.label("tenant_id"),
        case((mine | queued, 1), else_=0).label("q"),
        case((mine, 0), (running, 1), else_=0).label("r"),
        case((mine | queued, Job.created_at), else_=None).label("qc"),
        case(((mine | queued) & (Job.tenant_id == tenant_id) & ahead_of_mine, 1), else_=0).label(
            "b"
        ),
    )
    # Every job queued or running at T, and every job of ``mine``, is live now or finished after
    # T: two indexed halves (a UNION ALL, so that SQLite too uses an index for each, rather than
    # scanning the table in tenant order for the GROUP BY).
    live = ("queued", "running")
    snapshot = union_all(
        select(*columns).where(Job.status.in_(live)),
        select(*columns).where(Job.finished_at > as_of, Job.status.not_in(live)),
    ).subquery()
    tenants = (
        select(
            snapshot.c.tenant_id,
            func.sum(snapshot.c.q).label("queued"),
            func.sum(snapshot.c.r).label("running"),
            func.min(snapshot.c.qc).label("oldest"),
            func.sum(snapshot.c.b).label("before"),
        )
        .group_by(snapshot.c.tenant_id)
        .having(func.sum(snapshot.c.q) > 0)
        .subquery()
    )
    started_rows = aliased(Job)
    last_start = (
        select(func.max(started_rows.started_at))
        .where(started_rows.tenant_id == tenants.c.tenant_id, started_rows.started_at <= as_of)
        .scalar_subquery()
    )
    return select(
        tenants.c.tenant_id, tenants.c.queued, tenants.c.running, tenants.c.before
    ).order_by(*_fair_order(tenants.c.running, last_start, tenants.c.oldest, tenants.c.tenant_id))


def claim_next(
    session: Session,
    *,
    now: datetime,
    lease_until: datetime,
    deadline_at: datetime,
    max_attempts: int,
    tenant_max_running: int | None,
) -> Claim | None:
    """Claim the queued job that is fairest to start next: the oldest queued job of the first
    tenant in ``tenants_in_fair_order`` that is below ``tenant_max_running``. None: nothing is
    claimable (no queued job, or every tenant with one is at its cap)."""
    holding_tenant_lock = False
    for tenant_id, running in tenants_in_fair_order(session):
        if tenant_max_running is not None:
            if running >= tenant_max_running:
                continue
            # FOR NO KEY UPDATE on the tenant: two workers claiming for one tenant at once must
            # not both see it below its cap, so the count is taken again under the lock. (NO KEY:
            # inserting a job, which locks its tenant FOR KEY SHARE through the foreign key, is
            # not held up.) Only the first tenant lock of a transaction waits; once one is held,
            # a tenant another claimer has locked is passed over (SKIP LOCKED), since two claimers
            # that each hold one tenant and wait for the other's, having computed the fair order
            # at different moments, would deadlock. The claimer holding it has taken that
            # tenant's count under the lock and claims its job if it is below its cap.
            locked = session.execute(
                select(Tenant.id)
                .where(Tenant.id == tenant_id)
                .with_for_update(key_share=True, skip_locked=holding_tenant_lock)
            ).first()
            if locked is None:
                continue
            holding_tenant_lock = True
            if running_count(session, tenant_id) >= tenant_max_running:
                continue
        # FOR UPDATE SKIP LOCKED: two workers choosing at once take different jobs instead of
        # queueing on the same row (and a job that a cancel holds locked is passed over). SQLite
        # ignores it; there BEGIN IMMEDIATE has already serialised the two transactions.
        job_id = session.scalars(
            select(Job.id)
            .where(
                Job.tenant_id == tenant_id,
                Job.status == "queued",
                Job.cancel_requested.is_(False),
                Job.attempt < max_attempts,
            )
            .order_by(Job.created_at, Job.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if job_id is None:
            continue
        claimed = claim(
            session,
            job_id,
            now=now,
            lease_until=lease_until,
            deadline_at=deadline_at,
            max_attempts=max_attempts,
        )
        if claimed is not None:
            return claimed
    return None


def running_count(session: Session, tenant_id: uuid.UUID) -> int:
    return int(
        session.scalar(
            select(func.count()).where(Job.tenant_id == tenant_id, Job.status == "running")
        )
        or 0
    )


def oldest_queued(session: Session) -> uuid.UUID | None:
    """Any queued job (the oldest), to ring the doorbell for when a capped tenant's slot frees."""
    return session.scalars(
        select(Job.id).where(Job.status == "queued").order_by(Job.created_at, Job.id).limit(1)
    ).first()


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
    artefacts: Sequence[str] = (),
) -> bool:
    """Publish the output and the names of its artefacts, only if this attempt still owns the
    job, no cancel arrived and its deadline has not passed (a run that overran its time limit
    without a progress report in between is not published late: issue 24 §9)."""
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.attempt == attempt,
            Job.status == "running",
            Job.cancel_requested.is_(False),
            or_(Job.deadline_at.is_(None), Job.deadline_at >= now),
        )
        .values(
            status="succeeded",
            output_key=output_key,
            output_rows=output_rows,
            artefacts=list(artefacts),
            # Built by a reports worker after this commit (app/jobs/owner_tier.py).
            owner_tier="pending",
            owner_tier_sent_at=now,
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


def owner_tier_built(
    session: Session, job_id: uuid.UUID, attempt: int, names: Sequence[str]
) -> bool:
    """Add the owner tier's artefact names to the published attempt's and mark it built; only
    while it is still that attempt's pending owner tier and its dataset is not erased.

    Locks the dataset row shared, then the job row: an erasure (which locks the dataset
    exclusively first) either committed before, and nothing is recorded (the caller removes
    what it wrote), or waits until this commits and then erases the attempt's files with the
    rest. Two builds of one job that finish together are ordered by the job row lock: the
    second finds it built and adds nothing."""
    dataset_id = session.execute(select(Job.dataset_id).where(Job.id == job_id)).scalar()
    if dataset_id is None:
        return False
    erased = session.execute(
        select(Dataset.deleted_at).where(Dataset.id == dataset_id).with_for_update(read=True)
    ).one_or_none()
    if erased is None or erased[0] is not None:
        return False
    job = session.execute(
        select(Job)
        .where(
            Job.id == job_id,
            Job.attempt == attempt,
            Job.status == "succeeded",
            Job.owner_tier == "pending",
        )
        .with_for_update()
    ).scalar_one_or_none()
    if job is None:
        return False
    known = list(job.artefacts or [])
    job.artefacts = known + [name for name in names if name not in known]
    job.owner_tier = "built"
    return True


def begin_owner_tier(
    session: Session, job_id: uuid.UUID, attempt: int, max_tries: int, now: datetime
) -> int | None:
    """Count one try of building the owner tier as it starts (so a build killed by the OOM
    killer or a hard time limit counts too) and stamp the time, so the recovery loop resends
    only ``requeue_after`` after this start. Returns the try's number, or None when the owner
    tier is not pending or its tries are used up (then it is marked failed)."""
    row = session.execute(
        update(Job)
        .where(
            Job.id == job_id,
            Job.attempt == attempt,
            Job.status == "succeeded",
            Job.owner_tier == "pending",
        )
        .values(
            owner_tier_tries=Job.owner_tier_tries + 1,
            owner_tier_sent_at=now,
            owner_tier=case((Job.owner_tier_tries >= max_tries, "failed"), else_="pending"),
        )
        .returning(Job.owner_tier, Job.owner_tier_tries)
    ).one_or_none()
    if row is None or row[0] != "pending":
        return None
    return int(row[1])


def end_owner_tier(session: Session, job_id: uuid.UUID, attempt: int, state: str) -> bool:
    """Mark a pending owner tier ``failed`` (given up) or NULL (nothing to build: its dataset
    was erased); False if it was no longer pending."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.owner_tier == "pending")
        .values(owner_tier=None if state == "none" else state)
        .returning(Job.id)
    ).one_or_none()
    return row is not None


def stale_owner_tiers(session: Session, before: datetime, limit: int) -> list[uuid.UUID]:
    """Jobs whose owner tier is pending and whose last message was sent before ``before``."""
    rows = session.execute(
        select(Job.id)
        .join(Dataset, Dataset.id == Job.dataset_id)
        .where(
            Job.status == "succeeded",
            Job.owner_tier == "pending",
            Dataset.deleted_at.is_(None),
            or_(Job.owner_tier_sent_at.is_(None), Job.owner_tier_sent_at < before),
        )
        .order_by(Job.finished_at)
        .limit(limit)
    ).scalars()
    return list(rows)


def mark_owner_tier_sent(
    session: Session, job_ids: Sequence[uuid.UUID], before: datetime, now: datetime
) -> list[uuid.UUID]:
    """Stamp the owner-tier messages about to be resent; returns the jobs this caller stamped.
    Guarded by the same staleness test, so two recovery loops never both resend one job."""
    if not job_ids:
        return []
    rows = session.execute(
        update(Job)
        .where(
            Job.id.in_(list(job_ids)),
            Job.owner_tier == "pending",
            or_(Job.owner_tier_sent_at.is_(None), Job.owner_tier_sent_at < before),
        )
        .values(owner_tier_sent_at=now)
        .returning(Job.id)
    ).scalars()
    return list(rows)


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


def expired_running(
    session: Session,
    now: datetime,
    limit: int = 100,
    after: tuple[datetime, uuid.UUID] | None = None,
) -> list[tuple[datetime, uuid.UUID]]:
    """Running jobs whose lease ran out, oldest lease first, as (lease end, id) keys.

    ``after`` is the last key of the previous page (keyset paging), so a caller walks every
    expired lease, however many there are, in pages of ``limit``.
    """
    query = select(Job.lease_expires_at, Job.id).where(
        Job.status == "running", Job.lease_expires_at < now
    )
    if after is not None:
        query = query.where(tuple_(Job.lease_expires_at, Job.id) > tuple_(*after))
    rows = session.execute(query.order_by(Job.lease_expires_at, Job.id).limit(limit))
    return [(lease, job_id) for lease, job_id in rows if lease is not None]


def recover_expired(
    session: Session,
    job_id: uuid.UUID,
    *,
    now: datetime,
    max_attempts: int,
    time_limit_error: str,
) -> str | None:
    """Deal with one job whose worker stopped renewing its lease. Returns what was done.

    An attempt whose last lease ran to its deadline or past it (the hard time limit killed its
    process, or it died in its last lease before the deadline) ends failed with
    ``time_limit_error`` instead of being retried: a retry would be a second noisy run for one
    charge, and it would most likely run out of time again.
    """
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
    timed_out = session.execute(
        update(Job)
        .where(*base, Job.deadline_at.is_not(None), Job.lease_expires_at >= Job.deadline_at)
        .values(
            status="failed",
            finished_at=now,
            lease_expires_at=None,
            progress_stage="failed",
            detail_stage="failed",
            error=time_limit_error,
        )
        .returning(Job.id)
    ).one_or_none()
    if timed_out is not None:
        return "timed_out"
    requeued = session.execute(
        update(Job)
        .where(*base, Job.attempt < max_attempts, _lost_before_deadline(now))
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
    """Jobs queued since before ``created_before``. A job held for an owner's approval
    (issue 27 §3) was queued only from its approval (``decided_at``): counted from its
    submission, a job approved after days of waiting expired at the next recovery pass."""
    queued_since = func.coalesce(Job.decided_at, Job.created_at)
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "queued", queued_since < created_before)
            .order_by(queued_since)
            .limit(limit)
        )
    )


def expired_pending(
    session: Session, *, created_before: datetime, limit: int = 100
) -> list[uuid.UUID]:
    """Jobs that waited for approval since before ``created_before``."""
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status == "pending_approval", Job.created_at < created_before)
            .order_by(Job.created_at)
            .limit(limit)
        )
    )


def pending_for_dataset(session: Session, dataset_id: uuid.UUID, *, limit: int) -> list[Job]:
    return list(
        session.scalars(
            select(Job)
            .where(Job.dataset_id == dataset_id, Job.status == "pending_approval")
            .order_by(Job.created_at, Job.id)
            .limit(limit)
        )
    )


def approve_pending(
    session: Session, job_id: uuid.UUID, *, now: datetime, decided_by: uuid.UUID
) -> bool:
    """pending_approval → queued (guarded: a concurrent rejection or expiry wins or loses)."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "pending_approval")
        .values(
            status="queued",
            progress_stage="queued",
            enqueued_at=now,
            decided_by=decided_by,
            decided_at=now,
        )
        .returning(Job.id)
    ).one_or_none()
    return row is not None


def close_pending(
    session: Session,
    job_id: uuid.UUID,
    *,
    status: str,
    now: datetime,
    reason: str,
    decided_by: uuid.UUID | None,
) -> Job | None:
    """pending_approval → rejected, expired or cancelled (guarded); the job if it was pending.
    A pending job was never claimed, so its reservation is the caller's to release."""
    row = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status == "pending_approval", Job.charged_at.is_(None))
        .values(
            status=status,
            finished_at=now,
            progress_stage=status,
            detail_stage=status,
            decided_by=decided_by,
            decided_at=now,
            decision_reason=reason,
        )
        .returning(Job.id)
    ).one_or_none()
    if row is None:
        return None
    return session.get(Job, job_id, populate_existing=True)


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


def latest_noisy_row_count(session: Session, dataset_id: uuid.UUID) -> int | None:
    """The output row count of the dataset's latest succeeded job that asked for no ``rows``:
    max(1, round(N̂)) of its mechanism's noisy total (capped by the output limits), a DP output
    every key of the tenant sees on that job."""
    return session.scalar(
        select(Job.output_rows)
        .where(Job.dataset_id == dataset_id, Job.status == "succeeded", Job.rows.is_(None))
        .order_by(Job.finished_at.desc())
        .limit(1)
    )
