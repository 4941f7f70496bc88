"""All SQL for budget accounts and the ledger.

Every change to an account is a single guarded ``UPDATE ... WHERE <invariant still holds>
RETURNING``. On PostgreSQL concurrent updates of the same row queue on its row lock and each
re-checks the WHERE clause against the committed row (READ COMMITTED re-evaluation), so two
requests can never both see the same remaining budget; on SQLite writers are serialised by
``BEGIN IMMEDIATE``. The CHECK constraints repeat the invariant inside the database.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import BindParameter, Row, delete, func, literal, select, update
from sqlalchemy.orm import Session

from app.budget.models import (
    LEDGER_KINDS,
    BudgetAccount,
    BudgetQuota,
    DatasetPolicy,
    LedgerEntry,
    QuotaEntry,
    QuotaMember,
)
from app.db.base import utcnow
from app.db.types import Delta, Rho


@dataclass(frozen=True)
class AccountState:
    total_rho: Decimal
    spent_rho: Decimal
    reserved_rho: Decimal
    total_delta: Decimal
    spent_delta: Decimal

    @property
    def remaining_rho(self) -> Decimal:
        return self.total_rho - self.spent_rho - self.reserved_rho

    @property
    def remaining_delta(self) -> Decimal:
        return self.total_delta - self.spent_delta


_Amounts = Row[Decimal, Decimal, Decimal, Decimal, Decimal]


def _state(row: _Amounts | None) -> AccountState | None:
    if row is None:
        return None
    total_rho, spent_rho, reserved_rho, total_delta, spent_delta = row
    return AccountState(total_rho, spent_rho, reserved_rho, total_delta, spent_delta)


_RETURNING = (
    BudgetAccount.total_rho,
    BudgetAccount.spent_rho,
    BudgetAccount.reserved_rho,
    BudgetAccount.total_delta,
    BudgetAccount.spent_delta,
)


def create_account(
    session: Session, dataset_id: uuid.UUID, total_rho: Decimal, total_delta: Decimal
) -> None:
    session.add(
        BudgetAccount(
            dataset_id=dataset_id,
            total_rho=total_rho,
            spent_rho=Decimal(0),
            reserved_rho=Decimal(0),
            total_delta=total_delta,
            spent_delta=Decimal(0),
            updated_at=utcnow(),
        )
    )
    session.flush()


def get_account(session: Session, dataset_id: uuid.UUID) -> AccountState | None:
    row = session.execute(
        select(*_RETURNING).where(BudgetAccount.dataset_id == dataset_id)
    ).one_or_none()
    return _state(row)


def get_accounts(session: Session, dataset_ids: list[uuid.UUID]) -> dict[uuid.UUID, AccountState]:
    rows = session.execute(
        select(BudgetAccount.dataset_id, *_RETURNING).where(
            BudgetAccount.dataset_id.in_(dataset_ids)
        )
    ).all()
    return {row[0]: AccountState(row[1], row[2], row[3], row[4], row[5]) for row in rows}


def reserve(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, keep: Decimal = Decimal(0)
) -> AccountState | None:
    """Add ``rho`` to reserved if it fits and leaves at least ``keep`` unreserved (the quotas'
    shares in a ``reserved`` quota policy); None when it does not (nothing changed)."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetAccount)
        .where(
            BudgetAccount.dataset_id == dataset_id,
            BudgetAccount.spent_rho + BudgetAccount.reserved_rho + amount + _rho(keep)
            <= BudgetAccount.total_rho,
        )
        .values(reserved_rho=BudgetAccount.reserved_rho + amount, updated_at=utcnow())
        .returning(*_RETURNING)
    ).one_or_none()
    return _state(row)


def convert_reservation(
    session: Session, dataset_id: uuid.UUID, rho: Decimal
) -> AccountState | None:
    """Move ``rho`` from reserved to spent; None if the reservation is not there."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetAccount)
        .where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.reserved_rho >= amount)
        .values(
            reserved_rho=BudgetAccount.reserved_rho - amount,
            spent_rho=BudgetAccount.spent_rho + amount,
            updated_at=utcnow(),
        )
        .returning(*_RETURNING)
    ).one_or_none()
    return _state(row)


def release(session: Session, dataset_id: uuid.UUID, rho: Decimal) -> AccountState | None:
    """Return a reservation to the remaining budget; None if the reservation is not there."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetAccount)
        .where(BudgetAccount.dataset_id == dataset_id, BudgetAccount.reserved_rho >= amount)
        .values(reserved_rho=BudgetAccount.reserved_rho - amount, updated_at=utcnow())
        .returning(*_RETURNING)
    ).one_or_none()
    return _state(row)


def spend_discovery(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, delta: Decimal
) -> AccountState | None:
    """Add ``rho`` to spent ρ and ``delta`` to spent δ if both fit; None when not (nothing changed).

    The race this guards: two uploads cannot share an account, but any other writer of the same
    account (a job submission reserving ρ, a second discovery) could read the remaining budget
    and then both charge it. Here the test and the change are one statement: on PostgreSQL a
    concurrent writer waits for this row's lock and re-evaluates the WHERE clause against the
    committed row, so the ρ and δ remaining are never both taken; on SQLite ``BEGIN IMMEDIATE``
    serialises the writers.
    """
    amount = _rho(rho)
    delta_amount = _delta(delta)
    row = session.execute(
        update(BudgetAccount)
        .where(
            BudgetAccount.dataset_id == dataset_id,
            BudgetAccount.spent_rho + BudgetAccount.reserved_rho + amount
            <= BudgetAccount.total_rho,
            BudgetAccount.spent_delta + delta_amount <= BudgetAccount.total_delta,
        )
        .values(
            spent_rho=BudgetAccount.spent_rho + amount,
            spent_delta=BudgetAccount.spent_delta + delta_amount,
            updated_at=utcnow(),
        )
        .returning(*_RETURNING)
    ).one_or_none()
    return _state(row)


def grant(
    session: Session,
    dataset_id: uuid.UUID,
    rho: Decimal,
    max_total: Decimal,
    delta: Decimal,
    delta_below: Decimal,
) -> AccountState | None:
    """Raise the totals if ρ stays within ``max_total`` and δ below ``delta_below``."""
    amount = _rho(rho)
    delta_amount = _delta(delta)
    row = session.execute(
        update(BudgetAccount)
        .where(
            BudgetAccount.dataset_id == dataset_id,
            BudgetAccount.total_rho + amount <= max_total,
            BudgetAccount.total_delta + delta_amount < _delta(delta_below),
        )
        .values(
            total_rho=BudgetAccount.total_rho + amount,
            total_delta=BudgetAccount.total_delta + delta_amount,
            updated_at=utcnow(),
        )
        .returning(*_RETURNING)
    ).one_or_none()
    return _state(row)


def append_entry(
    session: Session,
    *,
    dataset_id: uuid.UUID,
    kind: str,
    rho: Decimal,
    job_id: uuid.UUID | None,
    actor: str,
    delta: Decimal = Decimal(0),
    detail: dict[str, Any] | None = None,
) -> LedgerEntry:
    entry = LedgerEntry(
        dataset_id=dataset_id,
        kind=kind,
        rho=rho,
        delta=delta,
        job_id=job_id,
        actor=actor,
        at=utcnow(),
        detail=detail,
    )
    session.add(entry)
    session.flush()
    return entry


def list_entries(
    session: Session, dataset_id: uuid.UUID, *, limit: int, after_id: int | None
) -> list[LedgerEntry]:
    query = select(LedgerEntry).where(LedgerEntry.dataset_id == dataset_id)
    if after_id is not None:
        query = query.where(LedgerEntry.id > after_id)
    return list(session.scalars(query.order_by(LedgerEntry.id).limit(limit)))


@dataclass(frozen=True)
class EntrySums:
    """Per kind, the sums of the ledger's ρ and δ (for reconciliation)."""

    rho: dict[str, Decimal]
    delta: dict[str, Decimal]


def sum_entries(session: Session, dataset_id: uuid.UUID) -> EntrySums:
    rows = session.execute(
        select(LedgerEntry.kind, LedgerEntry.rho, LedgerEntry.delta).where(
            LedgerEntry.dataset_id == dataset_id
        )
    ).all()
    sums = EntrySums(
        rho=dict.fromkeys(LEDGER_KINDS, Decimal(0)), delta=dict.fromkeys(LEDGER_KINDS, Decimal(0))
    )
    # Summed in Python with exact Decimals: SQLite stores integer units, and an SQL SUM over
    # PostgreSQL NUMERIC would be exact too, but one code path is easier to trust.
    for kind, rho, delta in rows:
        sums.rho[kind] += rho
        sums.delta[kind] += delta
    return sums


def count_entries(session: Session, dataset_id: uuid.UUID) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(LedgerEntry)
            .where(LedgerEntry.dataset_id == dataset_id)
        )
        or 0
    )


def lock_account(session: Session, dataset_id: uuid.UUID) -> AccountState | None:
    """Read the account and hold its row lock to the end of the transaction (FOR UPDATE).

    Every change of a quota takes this lock first (a reservation takes it through its guarded
    UPDATE of the account), so the lock order is always account, then quota: two transactions
    never hold them the other way round (no deadlock). Under it the quotas' unused shares
    (:func:`quotas_unused`) are a stable number until commit: a grant or a submission of a key
    without a quota can test "fits beside the reserved shares" without another writer moving
    the shares in between. (SQLite: ``BEGIN IMMEDIATE`` serialises writers instead.)
    """
    row = session.execute(
        select(*_RETURNING).where(BudgetAccount.dataset_id == dataset_id).with_for_update()
    ).one_or_none()
    return _state(row)


def get_policy(session: Session, dataset_id: uuid.UUID) -> DatasetPolicy | None:
    return session.get(DatasetPolicy, dataset_id)


def set_policy(
    session: Session,
    dataset_id: uuid.UUID,
    mode: str,
    quota_required: bool,
    approval_required: bool,
) -> DatasetPolicy:
    """Insert or change the policy; the caller holds the account lock (one writer at a time)."""
    policy = session.get(DatasetPolicy, dataset_id)
    if policy is None:
        policy = DatasetPolicy(
            dataset_id=dataset_id,
            mode=mode,
            quota_required=quota_required,
            approval_required=approval_required,
        )
        session.add(policy)
    policy.mode, policy.quota_required, policy.updated_at = mode, quota_required, utcnow()
    policy.approval_required = approval_required
    session.flush()
    return policy


def quota_of_key(session: Session, dataset_id: uuid.UUID, key_id: uuid.UUID) -> BudgetQuota | None:
    """The live quota that limits ``key_id`` on the dataset (its own or its group's), if any."""
    return session.scalars(
        select(BudgetQuota)
        .join(QuotaMember, QuotaMember.quota_id == BudgetQuota.id)
        .where(QuotaMember.dataset_id == dataset_id, QuotaMember.key_id == key_id)
    ).one_or_none()


def live_quota(
    session: Session, dataset_id: uuid.UUID, *, key_id: uuid.UUID | None, group_name: str | None
) -> BudgetQuota | None:
    query = select(BudgetQuota).where(
        BudgetQuota.dataset_id == dataset_id, BudgetQuota.removed_at.is_(None)
    )
    if key_id is not None:
        query = query.where(BudgetQuota.key_id == key_id)
    else:
        query = query.where(BudgetQuota.group_name == group_name)
    return session.scalars(query).one_or_none()


def live_quotas(session: Session, dataset_id: uuid.UUID) -> list[BudgetQuota]:
    return list(
        session.scalars(
            select(BudgetQuota)
            .where(BudgetQuota.dataset_id == dataset_id, BudgetQuota.removed_at.is_(None))
            .order_by(BudgetQuota.created_at, BudgetQuota.id)
        )
    )


def members(session: Session, quota_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[uuid.UUID]]:
    rows = session.execute(
        select(QuotaMember.quota_id, QuotaMember.key_id)
        .where(QuotaMember.quota_id.in_(quota_ids))
        .order_by(QuotaMember.key_id)
    ).all()
    out: dict[uuid.UUID, list[uuid.UUID]] = {q: [] for q in quota_ids}
    for quota_id, key_id in rows:
        out[quota_id].append(key_id)
    return out


def member_quotas(
    session: Session, dataset_id: uuid.UUID, key_ids: list[uuid.UUID]
) -> dict[uuid.UUID, uuid.UUID]:
    """key id → the quota it belongs to now, for those of ``key_ids`` that belong to one."""
    rows = session.execute(
        select(QuotaMember.key_id, QuotaMember.quota_id).where(
            QuotaMember.dataset_id == dataset_id, QuotaMember.key_id.in_(key_ids)
        )
    ).all()
    return {key_id: quota_id for key_id, quota_id in rows}


def set_members(
    session: Session, dataset_id: uuid.UUID, quota_id: uuid.UUID, key_ids: list[uuid.UUID]
) -> None:
    """Replace the quota's members (membership is not the ledger: rows come and go)."""
    session.execute(delete(QuotaMember).where(QuotaMember.quota_id == quota_id))
    for key_id in key_ids:
        session.add(QuotaMember(dataset_id=dataset_id, key_id=key_id, quota_id=quota_id))
    session.flush()


def add_quota(
    session: Session,
    dataset_id: uuid.UUID,
    *,
    key_id: uuid.UUID | None,
    group_name: str | None,
    granted_rho: Decimal,
) -> BudgetQuota:
    now = utcnow()
    quota = BudgetQuota(
        dataset_id=dataset_id,
        key_id=key_id,
        group_name=group_name,
        granted_rho=granted_rho,
        reserved_rho=Decimal(0),
        spent_rho=Decimal(0),
        created_at=now,
        updated_at=now,
    )
    session.add(quota)
    session.flush()
    return quota


def set_granted(session: Session, quota_id: uuid.UUID, rho: Decimal) -> bool:
    """Set the quota's granted ρ if it stays at or above what is reserved and spent."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetQuota)
        .where(
            BudgetQuota.id == quota_id,
            BudgetQuota.reserved_rho + BudgetQuota.spent_rho <= amount,
        )
        .values(granted_rho=amount, updated_at=utcnow())
        .returning(BudgetQuota.id)
    ).one_or_none()
    return row is not None


def remove_quota(session: Session, quota_id: uuid.UUID) -> None:
    now = utcnow()
    session.execute(delete(QuotaMember).where(QuotaMember.quota_id == quota_id))
    session.execute(
        update(BudgetQuota)
        .where(BudgetQuota.id == quota_id)
        .values(removed_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    session.flush()


def quotas_unused(session: Session, dataset_id: uuid.UUID) -> Decimal:
    """Σ (granted − reserved − spent) over the dataset's live quotas, exactly (in Python)."""
    rows = session.execute(
        select(BudgetQuota.granted_rho, BudgetQuota.reserved_rho, BudgetQuota.spent_rho).where(
            BudgetQuota.dataset_id == dataset_id, BudgetQuota.removed_at.is_(None)
        )
    ).all()
    return sum((g - r - s for g, r, s in rows), Decimal(0))


@dataclass(frozen=True)
class QuotaState:
    granted_rho: Decimal
    reserved_rho: Decimal
    spent_rho: Decimal

    @property
    def remaining_rho(self) -> Decimal:
        return self.granted_rho - self.reserved_rho - self.spent_rho


_QUOTA_RETURNING = (BudgetQuota.granted_rho, BudgetQuota.reserved_rho, BudgetQuota.spent_rho)


def _quota_state(row: Row[Decimal, Decimal, Decimal] | None) -> QuotaState | None:
    return None if row is None else QuotaState(row[0], row[1], row[2])


def get_quota_state(session: Session, quota_id: uuid.UUID) -> QuotaState | None:
    row = session.execute(select(*_QUOTA_RETURNING).where(BudgetQuota.id == quota_id)).one_or_none()
    return _quota_state(row)


def reserve_quota(session: Session, quota_id: uuid.UUID, rho: Decimal) -> QuotaState | None:
    """Add ``rho`` to the quota's reserved ρ if it fits; None when not (nothing changed).

    The race: two submissions of a group's keys both reading the same remaining share. The test
    and the change are one statement; a concurrent one waits for the row lock and re-evaluates
    the WHERE against the committed row (PostgreSQL READ COMMITTED), so one of them fails. A
    removed quota (``removed_at``) takes no new reservations.
    """
    amount = _rho(rho)
    row = session.execute(
        update(BudgetQuota)
        .where(
            BudgetQuota.id == quota_id,
            BudgetQuota.removed_at.is_(None),
            BudgetQuota.reserved_rho + BudgetQuota.spent_rho + amount <= BudgetQuota.granted_rho,
        )
        .values(reserved_rho=BudgetQuota.reserved_rho + amount, updated_at=utcnow())
        .returning(*_QUOTA_RETURNING)
    ).one_or_none()
    return _quota_state(row)


def convert_quota_reservation(
    session: Session, quota_id: uuid.UUID, rho: Decimal
) -> QuotaState | None:
    """Move ``rho`` from the quota's reserved to spent; None if the reservation is not there."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetQuota)
        .where(BudgetQuota.id == quota_id, BudgetQuota.reserved_rho >= amount)
        .values(
            reserved_rho=BudgetQuota.reserved_rho - amount,
            spent_rho=BudgetQuota.spent_rho + amount,
            updated_at=utcnow(),
        )
        .returning(*_QUOTA_RETURNING)
    ).one_or_none()
    return _quota_state(row)


def release_quota_reservation(
    session: Session, quota_id: uuid.UUID, rho: Decimal
) -> QuotaState | None:
    """Return a reservation to the quota; None if the reservation is not there."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetQuota)
        .where(BudgetQuota.id == quota_id, BudgetQuota.reserved_rho >= amount)
        .values(reserved_rho=BudgetQuota.reserved_rho - amount, updated_at=utcnow())
        .returning(*_QUOTA_RETURNING)
    ).one_or_none()
    return _quota_state(row)


def quota_of_job(session: Session, job_id: uuid.UUID) -> uuid.UUID | None:
    """The quota a job reserved on at submission (its ``reserve`` quota entry), if any."""
    return session.scalar(
        select(QuotaEntry.quota_id).where(QuotaEntry.job_id == job_id, QuotaEntry.kind == "reserve")
    )


def append_quota_entry(
    session: Session,
    *,
    quota_id: uuid.UUID,
    kind: str,
    rho: Decimal,
    job_id: uuid.UUID | None,
    actor: str,
) -> None:
    session.add(
        QuotaEntry(quota_id=quota_id, kind=kind, rho=rho, job_id=job_id, actor=actor, at=utcnow())
    )
    session.flush()


def quota_entries(session: Session, quota_id: uuid.UUID) -> list[QuotaEntry]:
    return list(
        session.scalars(
            select(QuotaEntry).where(QuotaEntry.quota_id == quota_id).order_by(QuotaEntry.id)
        )
    )


def _rho(value: Decimal) -> BindParameter[Decimal]:
    """A ρ amount bound with the exact Rho type (integer units on SQLite, NUMERIC elsewhere)."""
    return literal(value, type_=Rho())


def _delta(value: Decimal) -> BindParameter[Decimal]:
    """A δ amount bound with the exact Delta type (integer units on SQLite, NUMERIC elsewhere)."""
    return literal(value, type_=Delta())
