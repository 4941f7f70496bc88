"""Quota routes under a dataset (issue 27 §2; owner keys)."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Response, status

from app.api.deps import DatabaseDep, OwnerKey
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.budget import quotas
from app.budget.schemas import (
    GROUP_NAME_PATTERN,
    QuotaGroupIn,
    QuotaIn,
    QuotaList,
    QuotaOut,
    QuotaPolicyIn,
    QuotaPolicyOut,
)

router = APIRouter(
    prefix="/v1/datasets",
    tags=["quotas"],
    route_class=FiniteJSONRoute,
    responses=error_responses(400, 401, 403, 404, 409, 422),
)

GroupName = Annotated[str, Path(pattern=GROUP_NAME_PATTERN)]


def _out(view: quotas.QuotaView) -> QuotaOut:
    return QuotaOut(
        id=view.id,
        kind="group" if view.group_name is not None else "key",
        key_id=view.key_id,
        group=view.group_name,
        keys=view.members,
        granted_rho=view.granted_rho,
        reserved_rho=view.reserved_rho,
        spent_rho=view.spent_rho,
        remaining_rho=view.remaining_rho,
        available_rho=view.available_rho,
    )


def _policy_out(view: quotas.PolicyView) -> QuotaPolicyOut:
    return QuotaPolicyOut(
        mode="reserved" if view.mode == "reserved" else "shared",
        quota_required=view.quota_required,
        approval_required=view.approval_required,
        quotas_unused_rho=view.quotas_unused_rho,
        dataset_remaining_rho=view.account.remaining_rho,
    )


def _errors(error: Exception) -> HTTPException:
    if isinstance(error, quotas.QuotaNotFound):
        return HTTPException(status.HTTP_404_NOT_FOUND, "quota not found")
    if isinstance(error, LookupError):
        return HTTPException(status.HTTP_404_NOT_FOUND, "dataset not found")
    if isinstance(error, quotas.QuotaConflict):
        return HTTPException(status.HTTP_409_CONFLICT, str(error))
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error))


_HANDLED = (LookupError, quotas.QuotaConflict, quotas.InvalidQuota)


@router.get("/{dataset_id}/quotas", response_model=QuotaList)
def list_quotas(dataset_id: uuid.UUID, db: DatabaseDep, principal: OwnerKey) -> QuotaList:
    """The dataset's quota policy and live quotas, each with reserved, spent and remaining ρ."""
    try:
        with db.transaction() as session:
            policy = quotas.get_policy(session, principal, dataset_id)
            items = quotas.list_quotas(session, principal, dataset_id)
    except _HANDLED as error:
        raise _errors(error) from None
    return QuotaList(policy=_policy_out(policy), items=[_out(v) for v in items])


@router.put("/{dataset_id}/quotas/{key_id}", response_model=QuotaOut)
def set_key_quota(
    dataset_id: uuid.UUID, key_id: uuid.UUID, body: QuotaIn, db: DatabaseDep, principal: OwnerKey
) -> QuotaOut:
    """Give an analyst key a quota of ρ on the dataset, or change it (never below what it has
    reserved and spent)."""
    try:
        with db.transaction() as session:
            view = quotas.set_key_quota(session, principal, dataset_id, key_id, body.rho)
    except _HANDLED as error:
        raise _errors(error) from None
    return _out(view)


@router.delete("/{dataset_id}/quotas/{key_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove_key_quota(
    dataset_id: uuid.UUID, key_id: uuid.UUID, db: DatabaseDep, principal: OwnerKey
) -> Response:
    """Remove a key's quota; jobs that reserved on it still settle on it."""
    try:
        with db.transaction() as session:
            quotas.remove_quota(session, principal, dataset_id, key_id=key_id, group_name=None)
    except _HANDLED as error:
        raise _errors(error) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/{dataset_id}/quota-groups/{name}", response_model=QuotaOut)
def set_group_quota(
    dataset_id: uuid.UUID, name: GroupName, body: QuotaGroupIn, db: DatabaseDep, principal: OwnerKey
) -> QuotaOut:
    """Give a named group of analyst keys one shared quota of ρ, or change it and its keys."""
    try:
        with db.transaction() as session:
            view = quotas.set_group_quota(session, principal, dataset_id, name, body.rho, body.keys)
    except _HANDLED as error:
        raise _errors(error) from None
    return _out(view)


@router.delete("/{dataset_id}/quota-groups/{name}", status_code=status.HTTP_204_NO_CONTENT)
def remove_group_quota(
    dataset_id: uuid.UUID, name: GroupName, db: DatabaseDep, principal: OwnerKey
) -> Response:
    """Remove a group's quota; jobs that reserved on it still settle on it."""
    try:
        with db.transaction() as session:
            quotas.remove_quota(session, principal, dataset_id, key_id=None, group_name=name)
    except _HANDLED as error:
        raise _errors(error) from None
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/{dataset_id}/quota-policy", response_model=QuotaPolicyOut)
def set_quota_policy(
    dataset_id: uuid.UUID, body: QuotaPolicyIn, db: DatabaseDep, principal: OwnerKey
) -> QuotaPolicyOut:
    """Choose shared or reserved quotas, whether analyst keys need a quota to submit, and
    whether their jobs wait for an owner's approval."""
    try:
        with db.transaction() as session:
            view = quotas.set_policy(
                session,
                principal,
                dataset_id,
                body.mode,
                body.quota_required,
                body.approval_required,
            )
    except _HANDLED as error:
        raise _errors(error) from None
    return _policy_out(view)
