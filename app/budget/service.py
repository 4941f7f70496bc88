"""Budget rules (privacy rules 1 and 2).

* ``reserve_budget`` at submission: refuses, changing nothing, when the request does not fit.
* ``spend_reservation`` when a worker first claims the job, before it reads any data. Spent
  budget is never refunded: whether a job fails can depend on the data.
* ``release_reservation`` only for a job cancelled or expired while still queued, never charged.
* Quotas (issue 27 §2, app/budget/quotas.py) ride on the same three steps: a job of a key with
  a quota reserves on the dataset's account and then on the quota, spends on both at its first
  claim and releases both only if it never ran. The account is always changed first, so the lock
  order is account, then quota (no deadlock between two transactions).
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
        quota: str | None = None,
        limit: str = "dataset",
    ) -> None:
        message = f"requested ρ {requested_rho} exceeds the remaining {remaining_rho}"
        if quota is not None:
            message = f"requested ρ {requested_rho} exceeds what is left of {quota}"
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
        # Which limit refused: "dataset" (its remaining budget), "unallocated" (what a
        # ``reserved`` quota policy leaves beside the quotas' shares) or "quota" (``quota``
        # names it).
        self.quota = quota
        self.limit = limit


class QuotaRequired(Exception):
    """The dataset's policy needs a quota for analyst keys, and this key has none (409)."""


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
    session: Session,
    dataset_id: uuid.UUID,
    rho: Decimal,
    job_id: uuid.UUID,
    actor: str,
    quota_key: uuid.UUID | None = None,
) -> AccountState:
    """Reserve ``rho`` for a job on the dataset's account and, when ``quota_key`` (an analyst
    key; None for owners) has a quota on the dataset, on that quota too.

    Raises BudgetExceeded (``limit`` says which limit) or QuotaRequired. The account may have
    been changed before the quota refuses: the caller's transaction rolls back on the exception
    (the request owns the transaction), so nothing of it is committed.
    """
    # FOR UPDATE on the account before reading the policy and the key's quota: a grant, removal
    # or policy change takes this lock first too, so the quota and policy read here are those
    # committed before this submission, and stay so until it commits (a key given a quota at
    # the same instant cannot reserve past it on a stale read). It also keeps the quotas'
    # unused shares still for the ``reserved`` test below; the lock order stays account, quota.
    repository.lock_account(session, dataset_id)
    policy = repository.get_policy(session, dataset_id)
    quota = (
        repository.quota_of_key(session, dataset_id, quota_key) if quota_key is not None else None
    )
    if quota is None and quota_key is not None and policy is not None and policy.quota_required:
        raise QuotaRequired(
            "this dataset needs a quota for analyst keys and this key has none: ask an owner "
            f"of the dataset for one (PUT /v1/datasets/{dataset_id}/quotas/{quota_key}); "
            "nothing was reserved"
        )
    keep = Decimal(0)
    if quota is None and policy is not None and policy.mode == "reserved":
        # Under the account lock taken above, no grant or other submission moves the shares.
        keep = repository.quotas_unused(session, dataset_id)
    state = repository.reserve(session, dataset_id, rho, keep)
    if state is None:
        current = repository.get_account(session, dataset_id)
        remaining = current.remaining_rho if current is not None else Decimal(0)
        if keep > 0:
            raise BudgetExceeded(
                requested_rho=rho,
                remaining_rho=max(remaining - keep, Decimal(0)),
                limit="unallocated",
            )
        raise BudgetExceeded(requested_rho=rho, remaining_rho=remaining)
    repository.append_entry(
        session, dataset_id=dataset_id, kind="reserve", rho=rho, job_id=job_id, actor=actor
    )
    if quota is not None:
        # After the account (lock order: account, then quota). One guarded UPDATE: two
        # submissions of the same quota's keys never both take its last share.
        quota_state = repository.reserve_quota(session, quota.id, rho)
        if quota_state is None:
            left = repository.get_quota_state(session, quota.id)
            raise BudgetExceeded(
                requested_rho=rho,
                remaining_rho=left.remaining_rho if left is not None else Decimal(0),
                quota=quota_label(quota.key_id, quota.group_name),
                limit="quota",
            )
        repository.append_quota_entry(
            session, quota_id=quota.id, kind="reserve", rho=rho, job_id=job_id, actor=actor
        )
    return state


@dataclass(frozen=True)
class SubmitterLimits:
    """What limits a key's next submission on a dataset besides the dataset's remaining ρ: its
    quota (label and rest) or, under a ``reserved`` policy, the quotas' unused shares it must
    leave. Read without locks: for previews only."""

    quota: str | None
    quota_remaining_rho: Decimal | None
    keep_rho: Decimal


def submitter_limits(
    session: Session, dataset_id: uuid.UUID, quota_key: uuid.UUID | None
) -> SubmitterLimits:
    quota = (
        repository.quota_of_key(session, dataset_id, quota_key) if quota_key is not None else None
    )
    if quota is not None:
        rest = quota.granted_rho - quota.reserved_rho - quota.spent_rho
        return SubmitterLimits(quota_label(quota.key_id, quota.group_name), rest, Decimal(0))
    policy = repository.get_policy(session, dataset_id)
    keep = (
        repository.quotas_unused(session, dataset_id)
        if policy is not None and policy.mode == "reserved"
        else Decimal(0)
    )
    return SubmitterLimits(None, None, keep)


def quota_label(key_id: uuid.UUID | None, group_name: str | None) -> str:
    """How a 409 names a quota: ``the quota of key <id>`` or ``the quota of group '<name>'``."""
    if group_name is not None:
        return f"the quota of group {group_name!r}"
    return f"the quota of key {key_id}"


def spend_reservation(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, job_id: uuid.UUID, actor: str
) -> AccountState:
    """At the job's first claim: reserved → spent on the account, then on its quota if any."""
    state = repository.convert_reservation(session, dataset_id, rho)
    if state is None:
        raise LedgerInconsistent(f"job {job_id}: no reservation of {rho} to spend")
    repository.append_entry(
        session, dataset_id=dataset_id, kind="spend", rho=rho, job_id=job_id, actor=actor
    )
    quota_id = repository.quota_of_job(session, job_id)
    if quota_id is not None:
        if repository.convert_quota_reservation(session, quota_id, rho) is None:
            raise LedgerInconsistent(f"job {job_id}: no quota reservation of {rho} to spend")
        repository.append_quota_entry(
            session, quota_id=quota_id, kind="spend", rho=rho, job_id=job_id, actor=actor
        )
    return state


def release_reservation(
    session: Session, dataset_id: uuid.UUID, rho: Decimal, job_id: uuid.UUID, actor: str
) -> AccountState:
    """For a job that never ran: the reservation goes back to the account and to its quota."""
    state = repository.release(session, dataset_id, rho)
    if state is None:
        raise LedgerInconsistent(f"job {job_id}: no reservation of {rho} to release")
    repository.append_entry(
        session, dataset_id=dataset_id, kind="release", rho=rho, job_id=job_id, actor=actor
    )
    quota_id = repository.quota_of_job(session, job_id)
    if quota_id is not None:
        if repository.release_quota_reservation(session, quota_id, rho) is None:
            raise LedgerInconsistent(f"job {job_id}: no quota reservation of {rho} to release")
        repository.append_quota_entry(
            session, quota_id=quota_id, kind="release", rho=rho, job_id=job_id, actor=actor
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
