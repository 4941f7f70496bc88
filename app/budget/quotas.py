"""Quota rules (issue 27 §2): an owner gives an analyst key, or a named group of keys, a share
of a dataset's ρ. Quotas only restrict: every job still reserves on the dataset's account, so
the dataset's cap and its DP guarantee are unchanged; a quota adds a second limit on the same
ledger (app/budget/service.py reserves, spends and releases both).

Every change here holds the dataset (FOR SHARE, as submissions do) and then the account's row
lock (FOR UPDATE), then touches quotas: the same order as a submission (dataset, account,
quota), so the two never deadlock, and under the account lock the quotas' unused shares are
stable for the ``reserved`` policy's test.

Services flush, never commit.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy.orm import Session

from app.api.types import format_decimal
from app.audit import service as audit
from app.auth import repository as key_repository
from app.auth.service import Principal
from app.budget import repository
from app.budget.models import BudgetQuota
from app.budget.repository import AccountState
from app.datasets import repository as dataset_repository
from app.db.types import quantize_rho_exact

SYSTEM_DEFAULT_MODE = "shared"


class QuotaNotFound(LookupError):
    pass


class QuotaConflict(Exception):
    """The change would break a rule (409); nothing changed."""


class InvalidQuota(ValueError):
    """The request names keys that cannot hold a quota (422)."""


@dataclass(frozen=True)
class QuotaView:
    id: uuid.UUID
    key_id: uuid.UUID | None
    group_name: str | None
    members: list[uuid.UUID]
    granted_rho: Decimal
    reserved_rho: Decimal
    spent_rho: Decimal
    dataset_remaining_rho: Decimal

    @property
    def remaining_rho(self) -> Decimal:
        return self.granted_rho - self.reserved_rho - self.spent_rho

    @property
    def available_rho(self) -> Decimal:
        """What a job of a member could reserve now: the quota's rest, up to the dataset's."""
        return max(Decimal(0), min(self.remaining_rho, self.dataset_remaining_rho))


@dataclass(frozen=True)
class PolicyView:
    mode: str
    quota_required: bool
    approval_required: bool
    quotas_unused_rho: Decimal
    account: AccountState


def _locked_account(session: Session, principal: Principal, dataset_id: uuid.UUID) -> AccountState:
    dataset = dataset_repository.lock_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets, exclusive=False
    )
    if dataset is None:
        raise LookupError(dataset_id)
    if dataset.deleted_at is not None:
        raise QuotaConflict("the dataset was deleted")
    # FOR UPDATE on the account: a grant must not pass the ``reserved`` policy's test while a
    # submission or another grant moves the quotas or the remaining budget under it.
    account = repository.lock_account(session, dataset_id)
    if account is None:  # pragma: no cover - every dataset has an account
        raise LookupError(dataset_id)
    return account


def _mode(session: Session, dataset_id: uuid.UUID) -> tuple[str, bool, bool]:
    policy = repository.get_policy(session, dataset_id)
    if policy is None:
        return SYSTEM_DEFAULT_MODE, False, False
    return policy.mode, policy.quota_required, policy.approval_required


def _check_reserved(
    session: Session, dataset_id: uuid.UUID, account: AccountState, extra: Decimal
) -> None:
    """In ``reserved`` mode, the quotas' unused shares plus ``extra`` must fit what is left."""
    unused = repository.quotas_unused(session, dataset_id)
    if unused + extra > account.remaining_rho:
        raise QuotaConflict(
            "the dataset's quotas are reserved: their unused shares would come to "
            f"ρ = {format_decimal(unused + extra)}, more than the "
            f"ρ = {format_decimal(account.remaining_rho)} the dataset has "
            "left. Grant less, lower another quota, or add budget to the dataset"
        )


def _check_members(
    session: Session,
    principal: Principal,
    dataset_id: uuid.UUID,
    key_ids: list[uuid.UUID],
    quota_id: uuid.UUID | None,
) -> None:
    for key_id in key_ids:
        key = key_repository.get_key(session, principal.tenant_id, key_id)
        if key is None:
            raise InvalidQuota(f"no key {key_id} in this tenant")
        if key.role != "analyst":
            raise InvalidQuota(f"key {key_id} is an {key.role} key: quotas limit analyst keys only")
    taken = repository.member_quotas(session, dataset_id, key_ids)
    for key_id, other in taken.items():
        if other != quota_id:
            raise QuotaConflict(
                f"key {key_id} already has a quota on this dataset (its own or a group's); "
                "a key has at most one: remove it first"
            )


def _put(
    session: Session,
    principal: Principal,
    dataset_id: uuid.UUID,
    rho: Decimal,
    *,
    key_id: uuid.UUID | None,
    group_name: str | None,
    key_ids: list[uuid.UUID],
) -> QuotaView:
    rho = quantize_rho_exact(rho)
    if rho < 0:
        raise InvalidQuota("a quota's ρ is 0 or more")
    account = _locked_account(session, principal, dataset_id)
    mode, _required, _approval = _mode(session, dataset_id)
    quota = repository.live_quota(session, dataset_id, key_id=key_id, group_name=group_name)
    _check_members(session, principal, dataset_id, key_ids, quota.id if quota else None)
    if quota is None:
        if mode == "reserved":
            _check_reserved(session, dataset_id, account, rho)
        quota = repository.add_quota(
            session, dataset_id, key_id=key_id, group_name=group_name, granted_rho=rho
        )
    else:
        if mode == "reserved" and rho > quota.granted_rho:
            _check_reserved(session, dataset_id, account, rho - quota.granted_rho)
        if not repository.set_granted(session, quota.id, rho):
            raise QuotaConflict(
                f"ρ = {format_decimal(rho)} is below what the quota has reserved and spent "
                f"(ρ = {format_decimal(quota.reserved_rho + quota.spent_rho)}); spent budget "
                "is never refunded"
            )
    repository.set_members(session, dataset_id, quota.id, key_ids)
    repository.append_quota_entry(
        session, quota_id=quota.id, kind="set", rho=rho, job_id=None, actor=principal.actor
    )
    session.refresh(quota)
    view = _view(session, quota, account)
    # The audit entry last: its per-tenant lock is then held only until the commit.
    audit.record(
        session,
        principal,
        "quota.set",
        "quota",
        quota.id,
        {
            "dataset_id": str(dataset_id),
            "key_id": audit.text_of(key_id),
            "group_name": group_name,
            "members": [str(k) for k in key_ids],
            "granted_rho": format_decimal(rho),
        },
    )
    return view


def set_key_quota(
    session: Session, principal: Principal, dataset_id: uuid.UUID, key_id: uuid.UUID, rho: Decimal
) -> QuotaView:
    """Give analyst key ``key_id`` a quota of ``rho`` on the dataset, or change it."""
    return _put(
        session, principal, dataset_id, rho, key_id=key_id, group_name=None, key_ids=[key_id]
    )


def set_group_quota(
    session: Session,
    principal: Principal,
    dataset_id: uuid.UUID,
    name: str,
    rho: Decimal,
    key_ids: list[uuid.UUID],
) -> QuotaView:
    """Give the named group of analyst keys one shared quota, or change it and its members.
    A key that leaves the group is no longer limited by it (its queued jobs still settle on
    the group's quota, where they reserved)."""
    return _put(
        session,
        principal,
        dataset_id,
        rho,
        key_id=None,
        group_name=name,
        key_ids=sorted(set(key_ids)),
    )


def remove_quota(
    session: Session,
    principal: Principal,
    dataset_id: uuid.UUID,
    *,
    key_id: uuid.UUID | None,
    group_name: str | None,
) -> None:
    """Remove a live quota: its keys are unlimited again (or refused under ``quota_required``).
    Its row and entries stay; jobs that reserved on it still spend or release on it."""
    _locked_account(session, principal, dataset_id)
    quota = repository.live_quota(session, dataset_id, key_id=key_id, group_name=group_name)
    if quota is None:
        raise QuotaNotFound(key_id or group_name)
    repository.remove_quota(session, quota.id)
    repository.append_quota_entry(
        session,
        quota_id=quota.id,
        kind="remove",
        rho=Decimal(0),
        job_id=None,
        actor=principal.actor,
    )
    audit.record(  # last (see _put)
        session,
        principal,
        "quota.remove",
        "quota",
        quota.id,
        {"dataset_id": str(dataset_id), "key_id": audit.text_of(key_id), "group_name": group_name},
    )


def list_quotas(session: Session, principal: Principal, dataset_id: uuid.UUID) -> list[QuotaView]:
    dataset = dataset_repository.get_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets
    )
    if dataset is None:
        raise LookupError(dataset_id)
    account = repository.get_account(session, dataset_id)
    assert account is not None
    quotas = repository.live_quotas(session, dataset_id)
    members = repository.members(session, [q.id for q in quotas])
    return [_view(session, q, account, members[q.id]) for q in quotas]


def _view(
    session: Session,
    quota: BudgetQuota,
    account: AccountState,
    members: list[uuid.UUID] | None = None,
) -> QuotaView:
    if members is None:
        members = repository.members(session, [quota.id])[quota.id]
    current = repository.get_account(session, quota.dataset_id) or account
    return QuotaView(
        id=quota.id,
        key_id=quota.key_id,
        group_name=quota.group_name,
        members=members,
        granted_rho=quota.granted_rho,
        reserved_rho=quota.reserved_rho,
        spent_rho=quota.spent_rho,
        dataset_remaining_rho=current.remaining_rho,
    )


def set_policy(
    session: Session,
    principal: Principal,
    dataset_id: uuid.UUID,
    mode: str,
    quota_required: bool,
    approval_required: bool = False,
) -> PolicyView:
    """Choose ``shared`` or ``reserved`` quotas, whether analyst keys need one, and whether their
    jobs wait for an owner's approval. Switching to ``reserved`` is refused while the quotas'
    unused shares pass what the dataset has left. Turning approval off leaves jobs already
    pending as they are (an owner still decides them, or they expire)."""
    account = _locked_account(session, principal, dataset_id)
    if mode == "reserved":
        _check_reserved(session, dataset_id, account, Decimal(0))
    repository.set_policy(session, dataset_id, mode, quota_required, approval_required)
    unused = repository.quotas_unused(session, dataset_id)
    audit.record(  # last (see _put)
        session,
        principal,
        "quota.policy",
        "dataset",
        dataset_id,
        {"mode": mode, "quota_required": quota_required, "approval_required": approval_required},
    )
    return PolicyView(mode, quota_required, approval_required, unused, account)


def get_policy(session: Session, principal: Principal, dataset_id: uuid.UUID) -> PolicyView:
    dataset = dataset_repository.get_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets
    )
    if dataset is None:
        raise LookupError(dataset_id)
    account = repository.get_account(session, dataset_id)
    assert account is not None
    mode, required, approval = _mode(session, dataset_id)
    unused = repository.quotas_unused(session, dataset_id)
    return PolicyView(mode, required, approval, unused, account)
