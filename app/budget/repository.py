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

from sqlalchemy import BindParameter, Row, func, literal, select, update
from sqlalchemy.orm import Session

from app.budget.models import LEDGER_KINDS, BudgetAccount, LedgerEntry
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


def reserve(session: Session, dataset_id: uuid.UUID, rho: Decimal) -> AccountState | None:
    """Add ``rho`` to reserved if it fits; None when it does not (nothing changed)."""
    amount = _rho(rho)
    row = session.execute(
        update(BudgetAccount)
        .where(
            BudgetAccount.dataset_id == dataset_id,
            BudgetAccount.spent_rho + BudgetAccount.reserved_rho + amount
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


def _rho(value: Decimal) -> BindParameter[Decimal]:
    """A ρ amount bound with the exact Rho type (integer units on SQLite, NUMERIC elsewhere)."""
    return literal(value, type_=Rho())


def _delta(value: Decimal) -> BindParameter[Decimal]:
    """A δ amount bound with the exact Delta type (integer units on SQLite, NUMERIC elsewhere)."""
    return literal(value, type_=Delta())
