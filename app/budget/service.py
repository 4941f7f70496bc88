"""Budget rules (privacy rules 1 and 2).

* ``reserve_budget`` at submission: refuses, changing nothing, when the request does not fit.
* ``spend_reservation`` when a worker first claims the job, before it reads any data. Spent
  budget is never refunded: whether a job fails can depend on the data.
* ``release_reservation`` only for a job cancelled or expired while still queued, never charged.
* ``grant_budget`` raises the total ρ (and δ); totals never go down.
* ``spend_discovery`` at upload, in the transaction that opens the account: spends ρ and δ for
  learning part of the domain with DP (one ``discover`` entry, no job), or refuses.

δ is spent only by discovery ((ρ, δ)-approximate zCDP); jobs spend ρ only.

Each function changes the account with one guarded UPDATE and appends the matching ledger entry
in the same transaction, so the entries always sum to the account's columns.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy.orm import Session

from app.budget import repository
from app.budget.repository import AccountState
from app.db.types import quantize_delta_exact, quantize_rho_exact

# δ is a probability: a dataset's total δ stays below 1 (the database checks it too).
DELTA_BELOW = Decimal(1)
# A discover entry's detail (mechanism, parameters, per-column costs) as JSON text, at most.
MAX_DETAIL_BYTES = 64 * 1024


class BudgetExceeded(Exception):
    """The request does not fit the remaining budget; nothing changed.

    ``requested_delta``/``remaining_delta`` are set for discovery, which spends δ too.
    """

    def __init__(
        self,
        requested_rho: Decimal,
        remaining_rho: Decimal,
        requested_delta: Decimal | None = None,
        remaining_delta: Decimal | None = None,
    ) -> None:
        message = f"requested ρ {requested_rho} exceeds the remaining {remaining_rho}"
        if requested_delta is not None:
            message = (
                f"requested ρ {requested_rho} and δ {requested_delta} exceed the remaining "
                f"ρ {remaining_rho} and δ {remaining_delta}"
            )
        super().__init__(message)
        self.requested_rho = requested_rho
        self.remaining_rho = remaining_rho
        self.requested_delta = requested_delta
        self.remaining_delta = remaining_delta


class BudgetLimitExceeded(Exception):
    """A grant would take the total past the service's maximum."""


class LedgerInconsistent(RuntimeError):
    """A transition found the account not in the state the job says it is in (a bug)."""


@dataclass(frozen=True)
class Reconciliation:
    """The ledger's sums next to the account. ``spent`` is the job spends only; ``discovered``
    the ρ of discover entries; both count in ``spent_rho``."""

    account: AccountState
    granted: Decimal
    reserved: Decimal
    spent: Decimal
    released: Decimal
    discovered: Decimal
    granted_delta: Decimal
    discovered_delta: Decimal
    job_entries_delta: Decimal

    @property
    def consistent(self) -> bool:
        return (
            self.granted == self.account.total_rho
            and self.spent + self.discovered == self.account.spent_rho
            and self.reserved - self.spent - self.released == self.account.reserved_rho
            and self.granted_delta == self.account.total_delta
            and self.discovered_delta == self.account.spent_delta
            and self.job_entries_delta == 0
        )


def open_account(
    session: Session,
    dataset_id: uuid.UUID,
    total_rho: Decimal,
    actor: str,
    total_delta: Decimal = Decimal(0),
) -> None:
    """Open the dataset's account with its totals, recorded in one ``grant`` entry."""
    repository.create_account(session, dataset_id, total_rho, total_delta)
    repository.append_entry(
        session,
        dataset_id=dataset_id,
        kind="grant",
        rho=total_rho,
        delta=total_delta,
        job_id=None,
        actor=actor,
    )


def spend_discovery(
    session: Session,
    dataset_id: uuid.UUID,
    rho: Decimal,
    delta: Decimal,
    detail: dict[str, Any],
    actor: str,
) -> AccountState:
    """Charge discovery (learning part of the domain with DP at upload): ρ and δ at once.

    One guarded UPDATE adds ``rho`` to ``spent_rho`` and ``delta`` to ``spent_delta`` only if
    spent + reserved + ρ ≤ total ρ and spent δ + δ ≤ total δ, then one ``discover`` entry (no
    job) records both amounts and ``detail`` (the mechanism, its parameters and per-column costs;
    never a value from the data). Raises :class:`BudgetExceeded`, with what remains, changing
    nothing, if either does not fit. It runs in the transaction that creates the dataset and
    its account, before any job can exist; spent budget is never refunded.
    """
    rho = quantize_rho_exact(rho)
    delta = quantize_delta_exact(delta)
    if rho < 0 or delta < 0 or (rho == 0 and delta == 0):
        raise ValueError("discovery spends ρ ≥ 0 and δ ≥ 0, not both 0")
    if len(json.dumps(detail, allow_nan=False).encode()) > MAX_DETAIL_BYTES:
        raise ValueError(f"a discover entry's detail is limited to {MAX_DETAIL_BYTES} bytes")
    state = repository.spend_discovery(session, dataset_id, rho, delta)
    if state is None:
        current = repository.get_account(session, dataset_id)
        if current is None:
            raise LookupError(dataset_id)
        raise BudgetExceeded(
            requested_rho=rho,
            remaining_rho=current.remaining_rho,
            requested_delta=delta,
            remaining_delta=current.remaining_delta,
        )
    repository.append_entry(
        session,
        dataset_id=dataset_id,
        kind="discover",
        rho=rho,
        delta=delta,
        job_id=None,
        actor=actor,
        detail=detail,
    )
    return state


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
    session: Session,
    dataset_id: uuid.UUID,
    rho: Decimal,
    max_total: Decimal,
    actor: str,
    add_delta: Decimal = Decimal(0),
) -> AccountState:
    """Raise the total ρ by ``rho`` (and the total δ by ``add_delta``) in one ``grant`` entry."""
    add_delta = quantize_delta_exact(add_delta)
    if add_delta < 0:
        raise ValueError("a grant never lowers δ")
    state = repository.grant(session, dataset_id, rho, max_total, add_delta, DELTA_BELOW)
    if state is None:
        current = repository.get_account(session, dataset_id)
        if current is not None and current.total_delta + add_delta >= DELTA_BELOW:
            raise BudgetLimitExceeded(f"the total δ of a dataset must stay below {DELTA_BELOW}")
        raise BudgetLimitExceeded(f"the total budget of a dataset is limited to ρ = {max_total}")
    repository.append_entry(
        session,
        dataset_id=dataset_id,
        kind="grant",
        rho=rho,
        delta=add_delta,
        job_id=None,
        actor=actor,
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
        granted=sums.rho["grant"],
        reserved=sums.rho["reserve"],
        spent=sums.rho["spend"],
        released=sums.rho["release"],
        discovered=sums.rho["discover"],
        granted_delta=sums.delta["grant"],
        discovered_delta=sums.delta["discover"],
        job_entries_delta=sums.delta["reserve"] + sums.delta["spend"] + sums.delta["release"],
    )
