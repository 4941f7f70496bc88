"""Budget rules (privacy rules 1 and 2).

* ``reserve_budget`` at submission: refuses, changing nothing, when the request does not fit.
* ``spend_reservation`` when a worker first claims the job, before it reads any data. Spent
  budget is never refunded: whether a job fails can depend on the data.
* ``release_reservation`` only for a job cancelled or expired while still queued, never charged.
* ``grant_budget`` raises the total; totals never go down.

Each function changes the account with one guarded UPDATE and appends the matching ledger entry
in the same transaction, so the entries always sum to the account's columns.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.orm import Session

from app.budget import repository
from app.budget.repository import AccountState


class BudgetExceeded(Exception):
    def __init__(self, requested_rho: Decimal, remaining_rho: Decimal) -> None:
        super().__init__(f"requested ρ {requested_rho} exceeds the remaining {remaining_rho}")
        self.requested_rho = requested_rho
        self.remaining_rho = remaining_rho


class BudgetLimitExceeded(Exception):
    """A grant would take the total past the service's maximum."""


class LedgerInconsistent(RuntimeError):
    """A transition found the account not in the state the job says it is in (a bug)."""


@dataclass(frozen=True)
class Reconciliation:
    account: AccountState
    granted: Decimal
    reserved: Decimal
    spent: Decimal
    released: Decimal

    @property
    def consistent(self) -> bool:
        return (
            self.granted == self.account.total_rho
            and self.spent == self.account.spent_rho
            and self.reserved - self.spent - self.released == self.account.reserved_rho
        )


def open_account(session: Session, dataset_id: uuid.UUID, total_rho: Decimal, actor: str) -> None:
    repository.create_account(session, dataset_id, total_rho)
    repository.append_entry(
        session, dataset_id=dataset_id, kind="grant", rho=total_rho, job_id=None, actor=actor
    )


def reserve_budget(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, job_id: uuid.UUID, actor: str
) -> AccountState:
    state = repository.reserve(session, dataset_id, rho)
    if state is None:
        current = repository.get_account(session, dataset_id)
        remaining = current.remaining_rho if current is not None else Decimal(0)
        raise BudgetExceeded(requested_rho=rho, remaining_rho=remaining)
    repository.append_entry(
        session, dataset_id=dataset_id, kind="reserve", rho=rho, job_id=job_id, actor=actor
    )
    return state


def spend_reservation(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, job_id: uuid.UUID, actor: str
) -> AccountState:
    state = repository.convert_reservation(session, dataset_id, rho)
    if state is None:
        raise LedgerInconsistent(f"job {job_id}: no reservation of {rho} to spend")
    repository.append_entry(
        session, dataset_id=dataset_id, kind="spend", rho=rho, job_id=job_id, actor=actor
    )
    return state


def release_reservation(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, job_id: uuid.UUID, actor: str
) -> AccountState:
    state = repository.release(session, dataset_id, rho)
    if state is None:
        raise LedgerInconsistent(f"job {job_id}: no reservation of {rho} to release")
    repository.append_entry(
        session, dataset_id=dataset_id, kind="release", rho=rho, job_id=job_id, actor=actor
    )
    return state


def grant_budget(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, max_total: Decimal, actor: str
) -> AccountState:
    state = repository.grant(session, dataset_id, rho, max_total)
    if state is None:
        raise BudgetLimitExceeded(f"the total budget of a dataset is limited to ρ = {max_total}")
    repository.append_entry(
        session, dataset_id=dataset_id, kind="grant", rho=rho, job_id=None, actor=actor
    )
    return state


def reconcile(session: Session, dataset_id: uuid.UUID) -> Reconciliation:
    """Compare the ledger's sums with the account's columns."""
    account = repository.get_account(session, dataset_id)
    if account is None:
        raise LookupError(dataset_id)
    sums = repository.sum_entries(session, dataset_id)
    return Reconciliation(
        account=account,
        granted=sums["grant"],
        reserved=sums["reserve"],
        spent=sums["spend"],
        released=sums["release"],
    )
