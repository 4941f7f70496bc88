"""The console's quota and approval pages (issue 27 §6, over §2–§3). Owners set a dataset's quota
policy and its quotas on the dataset's page, and decide the jobs waiting for approval on the
approvals queue. Every action calls the API's own route function (``app.budget.endpoints``,
``app.jobs.endpoints``) with the signed-in key's principal, after the API's owner rule
(``require_owner``, which the route's ``OwnerKey`` dependency would apply); the services, their
validation and their error text are the API's."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, status
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.deps import DatabaseDep, SettingsDep
from app.budget import endpoints as quotas_api
from app.budget.schemas import (
    GROUP_NAME_PATTERN,
    QuotaGroupIn,
    QuotaIn,
    QuotaPolicyIn,
)
from app.console import service
from app.console.endpoints import (
    PREFIX,
    DataKeyDep,
    Refused,
    _checked_form,
    _dataset_page,
    _detail,
    _owner,
    _page,
    _redirect,
    _texts,
    _validation_errors,
)
from app.console.governance import _confirm_page
from app.datasets import endpoints as datasets_api
from app.jobs import endpoints as jobs_api
from app.jobs.schemas import ApprovalOut, RejectIn

router = APIRouter(prefix=PREFIX, include_in_schema=False)

GroupName = Annotated[str, Path(pattern=GROUP_NAME_PATTERN)]
APPROVALS_PER_DATASET = 100
"""The API's largest page of ``GET /v1/datasets/{id}/approvals``; the queue shows the oldest."""


class FormError(ValueError):
    """A form value the console cannot turn into the API's request (names the field only)."""


def _key_ids(text: str, label: str) -> list[str]:
    ids = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    for part in ids:
        try:
            uuid.UUID(part)
        except ValueError:
            raise FormError(f"{label}: each entry must be a key id (a UUID)") from None
    return ids


def _again(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    dataset_id: uuid.UUID,
    error: str,
    status_code: int,
    values: dict[str, str],
    at: str,
) -> HTMLResponse:
    return _dataset_page(
        request,
        db,
        signed,
        dataset_id,
        quota_error=error,
        quota_at=at,
        quota_values=values,
        status_code=status_code,
    )


def _quota_action(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    dataset_id: uuid.UUID,
    values: dict[str, str],
    at: str,
    call: Callable[[], object],
) -> Response:
    """Run one quota route function; its refusal is shown beside the form it came from."""
    try:
        call()
    except FormError as error:
        return _again(request, db, signed, dataset_id, str(error), 422, values, at)
    except ValidationError as error:
        text = _validation_errors(error)
        return _again(request, db, signed, dataset_id, text, 422, values, at)
    except HTTPException as error:
        if error.status_code in (status.HTTP_403_FORBIDDEN, status.HTTP_404_NOT_FOUND):
            raise Refused(error.status_code, _detail(error)) from None
        text = _detail(error)
        return _again(request, db, signed, dataset_id, text, error.status_code, values, at)
    return _redirect(f"{PREFIX}/datasets/{dataset_id}#quotas")


@router.post("/datasets/{dataset_id}/quota-policy", response_model=None)
async def set_policy(
    request: Request, dataset_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep
) -> Response:
    """The dataset's quota policy (``PUT /v1/datasets/{id}/quota-policy``): all three at once."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)

    def call() -> None:
        body = QuotaPolicyIn.model_validate(
            {
                "mode": form.get("mode", ""),
                "quota_required": form.get("quota_required") == "yes",
                "approval_required": form.get("approval_required") == "yes",
            }
        )
        quotas_api.set_quota_policy(dataset_id, body, db, signed.principal)

    return await run_in_threadpool(
        _quota_action, request, db, signed, dataset_id, form, "quota_policy", call
    )


@router.post("/datasets/{dataset_id}/quotas", response_model=None)
async def set_key_quota(
    request: Request, dataset_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep
) -> Response:
    """Give an analyst key a quota, or change it (``PUT /v1/datasets/{id}/quotas/{key_id}``)."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)

    def call() -> None:
        try:
            key_id = uuid.UUID(form.get("key_id", "").strip())
        except ValueError:
            raise FormError("Key id: give the analyst key's id (a UUID)") from None
        body = QuotaIn.model_validate({"rho": form.get("rho", "").strip()})
        quotas_api.set_key_quota(dataset_id, key_id, body, db, signed.principal)

    return await run_in_threadpool(
        _quota_action, request, db, signed, dataset_id, form, "key_quota", call
    )


@router.post("/datasets/{dataset_id}/quota-groups", response_model=None)
async def set_group_quota(
    request: Request, dataset_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep
) -> Response:
    """Give a group of analyst keys one quota, or change it and its keys
    (``PUT /v1/datasets/{id}/quota-groups/{name}``)."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)

    def call() -> None:
        name = form.get("group", "").strip()
        if re.fullmatch(GROUP_NAME_PATTERN, name) is None:
            # The API checks the name in its path; called directly, the console checks it.
            raise FormError(
                "Group name: letters, digits and _ . - (starting with a letter or digit), "
                "at most 100"
            )
        body = QuotaGroupIn.model_validate(
            {"rho": form.get("rho", "").strip(), "keys": _key_ids(form.get("keys", ""), "Keys")}
        )
        quotas_api.set_group_quota(dataset_id, name, body, db, signed.principal)

    return await run_in_threadpool(
        _quota_action, request, db, signed, dataset_id, form, "group_quota", call
    )


def _delete_quota(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    dataset_id: uuid.UUID,
    form: dict[str, str],
    *,
    label: str,
    action: str,
    remove: Callable[[], object],
) -> Response:
    if form.get("confirm") != "yes":
        return _confirm_page(
            request,
            title=f"Remove the quota of {label}?",
            action=action,
            what=f"Remove the quota of {label}",
            consequence="Its keys are no longer limited by it (only by the dataset's budget, "
            "or refused if the dataset requires a quota). Jobs that reserved on it still "
            "settle on it; its history stays.",
            back=f"{PREFIX}/datasets/{dataset_id}#quotas",
        )
    try:
        remove()
    except HTTPException as error:
        if error.status_code in (status.HTTP_403_FORBIDDEN, status.HTTP_404_NOT_FOUND):
            raise Refused(error.status_code, _detail(error)) from None
        return _again(
            request, db, signed, dataset_id, _detail(error), error.status_code, {}, "quotas"
        )
    return _redirect(f"{PREFIX}/datasets/{dataset_id}#quotas")


@router.post("/datasets/{dataset_id}/quotas/{key_id}/delete", response_model=None)
async def delete_key_quota(
    request: Request, dataset_id: uuid.UUID, key_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep
) -> Response:
    """Remove a key's quota (``DELETE /v1/datasets/{id}/quotas/{key_id}``) once confirmed."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)
    return await run_in_threadpool(
        _delete_quota,
        request,
        db,
        signed,
        dataset_id,
        form,
        label=f"key {key_id}",
        action=f"{PREFIX}/datasets/{dataset_id}/quotas/{key_id}/delete",
        remove=lambda: quotas_api.remove_key_quota(dataset_id, key_id, db, signed.principal),
    )


@router.post("/datasets/{dataset_id}/quota-groups/{name}/delete", response_model=None)
async def delete_group_quota(
    request: Request, dataset_id: uuid.UUID, name: GroupName, db: DatabaseDep, signed: DataKeyDep
) -> Response:
    """Remove a group's quota (``DELETE /v1/datasets/{id}/quota-groups/{name}``) once
    confirmed."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)
    return await run_in_threadpool(
        _delete_quota,
        request,
        db,
        signed,
        dataset_id,
        form,
        label=f"the group “{name}”",
        action=f"{PREFIX}/datasets/{dataset_id}/quota-groups/{name}/delete",
        remove=lambda: quotas_api.remove_group_quota(dataset_id, name, db, signed.principal),
    )


# ---------------------------------------------------------------- approvals


def _approvals_page(
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: service.SignedIn,
    *,
    error: str | None = None,
    error_job: uuid.UUID | None = None,
    reasons: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    """The jobs waiting for approval on every dataset of the owner's key: the API lists them
    per dataset (``GET /v1/datasets/{id}/approvals``), so the queue asks once per dataset."""
    principal = signed.principal
    listing = datasets_api.list_datasets(db, principal, limit=1000, offset=0)
    groups: list[dict[str, Any]] = []
    for dataset in listing.items:
        if dataset.deleted_at is not None:
            continue
        try:
            pending: list[ApprovalOut] = jobs_api.list_approvals(
                dataset.id, db, settings, principal, limit=APPROVALS_PER_DATASET
            ).items
        except HTTPException as problem:
            if problem.status_code == status.HTTP_404_NOT_FOUND:
                continue  # deleted since the listing
            raise Refused(problem.status_code, _detail(problem)) from None
        if pending:
            groups.append({"dataset": dataset, "items": pending})
    target = f"job-{error_job}" if error_job else "approvals"
    return _page(
        request,
        "approvals.html",
        {
            "groups": groups,
            "approval_error": error,
            "error_job": error_job,
            "reasons": reasons or {},
            "summary": {"text": error, "target": target, "label": "the job"} if error else None,
        },
        status_code=status_code,
    )


@router.get("/approvals", response_class=HTMLResponse)
def approvals_page(
    request: Request, db: DatabaseDep, settings: SettingsDep, signed: DataKeyDep
) -> HTMLResponse:
    """Jobs waiting for an owner's decision, oldest first per dataset, with their previews."""
    _owner(signed)
    return _approvals_page(request, db, settings, signed)


def _decision(
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: service.SignedIn,
    job_id: uuid.UUID,
    decide: Callable[[], object],
    reason: str = "",
) -> Response:
    try:
        decide()
    except ValidationError as error:
        return _approvals_page(
            request,
            db,
            settings,
            signed,
            error=_validation_errors(error).replace("reason:", "Reason:"),
            error_job=job_id,
            reasons={str(job_id): reason},
            status_code=422,
        )
    except HTTPException as error:
        if error.status_code in (status.HTTP_403_FORBIDDEN, status.HTTP_404_NOT_FOUND):
            raise Refused(error.status_code, _detail(error)) from None
        return _approvals_page(
            request,
            db,
            settings,
            signed,
            error=_detail(error),
            error_job=job_id,
            status_code=error.status_code,
        )
    return _redirect(f"{PREFIX}/approvals")


@router.post("/jobs/{job_id}/approve", response_model=None)
async def approve(
    request: Request,
    job_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    """Approve a pending job (``POST /v1/jobs/{id}/approve``): queued, enqueued after commit."""
    await _checked_form(request, signed)
    _owner(signed)
    return await run_in_threadpool(
        _decision,
        request,
        db,
        settings,
        signed,
        job_id,
        lambda: jobs_api.approve_job(job_id, db, settings, signed.principal),
    )


@router.post("/jobs/{job_id}/reject", response_model=None)
async def reject(
    request: Request,
    job_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    """Reject a pending job with a reason the analyst sees (``POST /v1/jobs/{id}/reject``)."""
    form = _texts(await _checked_form(request, signed))
    _owner(signed)
    reason = form.get("reason", "")

    def decide() -> None:
        body = RejectIn.model_validate({"reason": reason.strip()})
        jobs_api.reject_job(job_id, body, db, settings, signed.principal)

    return await run_in_threadpool(_decision, request, db, settings, signed, job_id, decide, reason)
