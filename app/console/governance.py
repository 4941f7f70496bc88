"""The console's admin pages (issue 27 §6): the tenant's keys, webhook subscriptions and audit
trail. Only admin keys see them (``require_admin``, the rule of ``/v1/keys``, ``/v1/webhooks``
and ``/v1/audit``), and every action calls the API's own route function with the signed-in
admin's principal: the same services, validation and error text. A new secret (a key's, a
webhook's) is shown once, on the page that answers the POST that made it, and never again."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.api.deps import DatabaseDep, SettingsDep, resources
from app.audit import endpoints as audit_api
from app.audit import service as audit_service
from app.auth import endpoints as keys_api
from app.auth.schemas import KeyCreate, KeyExpiry, KeyOut, KeyPolicy, KeyRotate
from app.console import service
from app.console.endpoints import (
    PREFIX,
    AdminSessionDep,
    Refused,
    _checked_form,
    _detail,
    _page,
    _redirect,
    _texts,
    _validation_errors,
)
from app.db.base import utcnow
from app.webhooks import endpoints as webhooks_api
from app.webhooks.schemas import EMITTED_EVENTS, EVENT_NAMES, WebhookCreate

router = APIRouter(prefix=PREFIX, include_in_schema=False)

OVERLAPS = (
    (0, "none: the old key stops at once"),
    (3600, "1 hour"),
    (86400, "1 day"),
    (604800, "7 days (the longest)"),
)
"""The rotation form's choices of how long the old secret keeps working (the API's default is
one hour; its limit seven days)."""

AUDIT_PAGE = 50
DELIVERY_PAGE = 50


class FormError(ValueError):
    """A form value the console cannot turn into the API's request (names the field, never the
    value typed)."""


def _instant(text: str, label: str) -> datetime | None:
    """A ``datetime-local`` input's value (or an ISO 8601 instant) as an aware instant; a value
    without a zone is UTC, as the forms say. Empty: None."""
    text = text.strip()
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FormError(f"{label}: not a date and time (YYYY-MM-DD HH:MM, UTC)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _dataset_ids(text: str) -> list[str]:
    """The dataset limits typed as ids separated by commas, spaces or lines."""
    ids = [part for part in re.split(r"[\s,]+", text.strip()) if part]
    for part in ids:
        try:
            uuid.UUID(part)
        except ValueError:
            raise FormError("Datasets: each entry must be a dataset id (a UUID)") from None
    return ids


def _summary(text: str, target: str, label: str) -> dict[str, str]:
    """The error summary at the top of the page, linking to the form the error is about."""
    return {"text": text, "target": target, "label": label}


def _api_error(error: HTTPException) -> str:
    if error.status_code == status.HTTP_404_NOT_FOUND:
        raise Refused(error.status_code, _detail(error)) from None
    return _detail(error)


# ---------------------------------------------------------------- keys


def _aware(at: datetime) -> datetime:
    # Instants read back from SQLite (embedded mode) carry no zone; they are UTC.
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def key_state(key: KeyOut, now: datetime) -> str:
    """What the key can do now, in words: revoked, retired or retiring (rotated), expired,
    expiring, or active."""
    now = _aware(now)
    if key.revoked_at is not None:
        return f"revoked {key.revoked_at:%Y-%m-%d %H:%M} UTC"
    if key.retires_at is not None:
        word = "retired" if _aware(key.retires_at) <= now else "retiring (rotated): works until"
        return f"{word} {key.retires_at:%Y-%m-%d %H:%M} UTC"
    if key.expires_at is not None and _aware(key.expires_at) <= now:
        return f"expired {key.expires_at:%Y-%m-%d %H:%M} UTC"
    return "active"


def _keys_page(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    *,
    values: dict[str, str] | None = None,
    error: str | None = None,
    error_at: str = "new_key",
    status_code: int = 200,
) -> HTMLResponse:
    keys = keys_api.list_keys(db, signed.principal).items
    policy = keys_api.get_key_policy(db, signed.principal)
    now = utcnow()
    label = "the new key form" if error_at == "new_key" else "the key"
    return _page(
        request,
        "keys.html",
        {
            "keys": [
                {"key": k, "state": state, "rotatable": state == "active"}
                for k in keys
                for state in (key_state(k, now),)
            ],
            "values": values or {"role": "analyst"},
            "roles": ("analyst", "owner", "admin"),
            "overlaps": OVERLAPS,
            "policy": policy,
            "key_error": error,
            "error_at": error_at,
            "summary": _summary(error, error_at, label) if error else None,
        },
        status_code=status_code,
    )


@router.get("/keys", response_class=HTMLResponse)
def keys_page(request: Request, db: DatabaseDep, signed: AdminSessionDep) -> HTMLResponse:
    """The tenant's keys (``GET /v1/keys``) with the forms that manage them."""
    return _keys_page(request, db, signed)


def _secret_page(
    request: Request, kind: Literal["key", "rotated", "webhook"], item: Any, secret: str
) -> HTMLResponse:
    return _page(request, "secret.html", {"kind": kind, "item": item, "secret": secret})


@router.post("/keys", response_model=None)
async def create_key(request: Request, db: DatabaseDep, signed: AdminSessionDep) -> Response:
    """A new key (``POST /v1/keys``); its secret is on the answer's page only."""
    form = _texts(await _checked_form(request, signed))
    values = {k: form.get(k, "") for k in ("name", "role", "expires_at", "datasets")}

    def run() -> Response:
        try:
            body = KeyCreate.model_validate(
                {
                    "name": values["name"],
                    "role": values["role"],
                    "expires_at": _instant(values["expires_at"], "Expires"),
                    "datasets": _dataset_ids(values["datasets"]),
                }
            )
            created = keys_api.create_key(body, db, resources(request).secret, signed.principal)
        except FormError as error:
            return _keys_page(request, db, signed, values=values, error=str(error), status_code=422)
        except ValidationError as error:
            text = _validation_errors(error)
            return _keys_page(request, db, signed, values=values, error=text, status_code=422)
        except HTTPException as error:
            text = _api_error(error)
            return _keys_page(
                request, db, signed, values=values, error=text, status_code=error.status_code
            )
        return _secret_page(request, "key", created, created.key)

    return await run_in_threadpool(run)


@router.post("/keys/{key_id}/rotate", response_model=None)
async def rotate_key(
    request: Request, key_id: uuid.UUID, db: DatabaseDep, signed: AdminSessionDep
) -> Response:
    """A successor key (``POST /v1/keys/{id}/rotate``); the new secret is shown once."""
    form = _texts(await _checked_form(request, signed))

    def run() -> Response:
        again: dict[str, Any] = {"error_at": f"key-{key_id}"}
        try:
            body = KeyRotate.model_validate({"overlap_seconds": form.get("overlap_seconds", "")})
            created = keys_api.rotate_key(
                key_id, db, resources(request).secret, signed.principal, body
            )
        except ValidationError as error:
            return _keys_page(
                request, db, signed, error=_validation_errors(error), status_code=422, **again
            )
        except HTTPException as error:
            text = _api_error(error)
            return _keys_page(
                request, db, signed, error=text, status_code=error.status_code, **again
            )
        return _secret_page(request, "rotated", created, created.key)

    return await run_in_threadpool(run)


def _confirm_page(
    request: Request, *, title: str, action: str, what: str, consequence: str, back: str
) -> HTMLResponse:
    """The second step of a destructive action: the console has no script for a confirm
    dialog, so the first POST answers with this page, whose own form says ``confirm=yes``."""
    return _page(
        request,
        "confirm.html",
        {
            "title": title,
            "action": action,
            "what": what,
            "consequence": consequence,
            "back": back,
        },
    )


@router.post("/keys/{key_id}/revoke", response_model=None)
async def revoke_key(
    request: Request, key_id: uuid.UUID, db: DatabaseDep, signed: AdminSessionDep
) -> Response:
    """Revoke a key (``POST /v1/keys/{id}/revoke``) once the confirmation page said yes."""
    form = _texts(await _checked_form(request, signed))

    def run() -> Response:
        try:
            if form.get("confirm") != "yes":
                key = keys_api.get_key(key_id, db, signed.principal)
                return _confirm_page(
                    request,
                    title=f"Revoke the key “{key.name}”?",
                    action=f"{PREFIX}/keys/{key_id}/revoke",
                    what=f"Revoke “{key.name}” ({key.role}, {key.prefix}…)",
                    consequence="It stops working at once, for the API and for its console "
                    "sessions; a revoked key cannot be restored (create a new one instead).",
                    back=f"{PREFIX}/keys",
                )
            keys_api.revoke_key(key_id, db, signed.principal)
        except HTTPException as error:
            text = _api_error(error)
            return _keys_page(
                request,
                db,
                signed,
                error=text,
                error_at=f"key-{key_id}",
                status_code=error.status_code,
            )
        return _redirect(f"{PREFIX}/keys")

    return await run_in_threadpool(run)


@router.post("/keys/policy", response_model=None)
async def set_key_policy(request: Request, db: DatabaseDep, signed: AdminSessionDep) -> Response:
    """Turn owner-created analyst keys on (the checkbox ticked) or off
    (``PUT /v1/keys/policy``)."""
    form = _texts(await _checked_form(request, signed))
    body = KeyPolicy(owners_create_analyst_keys=form.get("owners_create_analyst_keys") == "on")

    def run() -> Response:
        keys_api.set_key_policy(body, db, signed.principal)
        return _redirect(f"{PREFIX}/keys")

    return await run_in_threadpool(run)


@router.post("/keys/{key_id}/expiry", response_model=None)
async def set_key_expiry(
    request: Request, key_id: uuid.UUID, db: DatabaseDep, signed: AdminSessionDep
) -> Response:
    """Set (``action=set``) or clear (``action=clear``) a key's expiry (``PATCH /v1/keys/{id}``)."""
    form = _texts(await _checked_form(request, signed))

    def run() -> Response:
        again: dict[str, Any] = {"error_at": f"key-{key_id}"}
        try:
            if form.get("action") == "clear":
                expires_at = None
            else:
                expires_at = _instant(form.get("expires_at", ""), "Expires")
                if expires_at is None:
                    raise FormError("Expires: give a date and time, or clear the expiry")
            body = KeyExpiry.model_validate({"expires_at": expires_at})
            keys_api.set_key_expiry(key_id, body, db, signed.principal)
        except FormError as error:
            return _keys_page(request, db, signed, error=str(error), status_code=422, **again)
        except ValidationError as error:
            return _keys_page(
                request, db, signed, error=_validation_errors(error), status_code=422, **again
            )
        except HTTPException as error:
            text = _api_error(error)
            return _keys_page(
                request, db, signed, error=text, status_code=error.status_code, **again
            )
        return _redirect(f"{PREFIX}/keys")

    return await run_in_threadpool(run)


# ---------------------------------------------------------------- webhooks


def _webhooks_page(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    *,
    values: dict[str, Any] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    hooks = webhooks_api.list_webhooks(db, signed.principal).items
    return _page(
        request,
        "webhooks.html",
        {
            "hooks": hooks,
            "values": values or {"events": [], "enabled": True},
            "events": EVENT_NAMES,
            "emitted": EMITTED_EVENTS,
            "webhook_error": error,
            "summary": _summary(error, "new_webhook", "the new subscription form")
            if error
            else None,
        },
        status_code=status_code,
    )


@router.get("/webhooks", response_class=HTMLResponse)
def webhooks_page(request: Request, db: DatabaseDep, signed: AdminSessionDep) -> HTMLResponse:
    """The tenant's webhook subscriptions (``GET /v1/webhooks``) and the form for a new one."""
    return _webhooks_page(request, db, signed)


@router.post("/webhooks", response_model=None)
async def create_webhook(
    request: Request, db: DatabaseDep, settings: SettingsDep, signed: AdminSessionDep
) -> Response:
    """A new subscription (``POST /v1/webhooks``); its signing secret is shown once."""
    form = await _checked_form(request, signed)
    texts = _texts(form)
    values: dict[str, Any] = {
        "url": texts.get("url", ""),
        "description": texts.get("description", ""),
        "events": [e for e in form.getlist("events") if isinstance(e, str)],
        "enabled": texts.get("enabled") == "yes",
        "budget_threshold_rho": texts.get("budget_threshold_rho", ""),
    }

    def run() -> Response:
        body: dict[str, Any] = {
            key: values[key] for key in ("url", "description", "events", "enabled")
        }
        if values["budget_threshold_rho"].strip():
            body["budget_threshold_rho"] = values["budget_threshold_rho"].strip()
        try:
            request_body = WebhookCreate.model_validate(body)
            created = webhooks_api.create_webhook(request_body, db, settings, signed.principal)
        except ValidationError as error:
            text = _validation_errors(error)
            return _webhooks_page(request, db, signed, values=values, error=text, status_code=422)
        except HTTPException as error:
            text = _api_error(error)
            return _webhooks_page(
                request, db, signed, values=values, error=text, status_code=error.status_code
            )
        return _secret_page(request, "webhook", created, created.secret)

    return await run_in_threadpool(run)


@router.get("/webhooks/{webhook_id}", response_class=HTMLResponse)
def webhook_page(
    request: Request,
    webhook_id: uuid.UUID,
    db: DatabaseDep,
    signed: AdminSessionDep,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> HTMLResponse:
    """One subscription and its delivery log, newest event first
    (``GET /v1/webhooks/{id}/deliveries``), each delivery with a replay button."""
    try:
        hook = webhooks_api.get_webhook(webhook_id, db, signed.principal)
        log = webhooks_api.list_deliveries(
            webhook_id, db, signed.principal, limit=DELIVERY_PAGE, offset=offset
        )
    except HTTPException as error:
        raise Refused(error.status_code, _detail(error)) from None
    return _page(
        request,
        "webhook.html",
        {
            "hook": hook,
            "deliveries": log.items,
            "offset": offset,
            "next_offset": log.next_offset,
            "previous_offset": max(offset - DELIVERY_PAGE, 0) if offset else None,
        },
    )


@router.post("/webhooks/{webhook_id}/delete", response_model=None)
async def delete_webhook(
    request: Request, webhook_id: uuid.UUID, db: DatabaseDep, signed: AdminSessionDep
) -> Response:
    """Delete a subscription (``DELETE /v1/webhooks/{id}``) once the confirmation said yes."""
    form = _texts(await _checked_form(request, signed))

    def run() -> Response:
        try:
            if form.get("confirm") != "yes":
                hook = webhooks_api.get_webhook(webhook_id, db, signed.principal)
                return _confirm_page(
                    request,
                    title="Delete this webhook subscription?",
                    action=f"{PREFIX}/webhooks/{webhook_id}/delete",
                    what=f"Delete the subscription to {hook.url}",
                    consequence="No event is sent to it any more, and what it is still owed is "
                    "discarded.",
                    back=f"{PREFIX}/webhooks/{webhook_id}",
                )
            webhooks_api.delete_webhook(webhook_id, db, signed.principal)
        except HTTPException as error:
            raise Refused(error.status_code, _detail(error)) from None
        return _redirect(f"{PREFIX}/webhooks")

    return await run_in_threadpool(run)


@router.post("/webhooks/deliveries/{delivery_id}/replay", response_model=None)
async def replay_delivery(
    request: Request,
    delivery_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: AdminSessionDep,
) -> Response:
    """Send a delivery again (``POST /v1/webhooks/deliveries/{id}/replay``)."""
    form = _texts(await _checked_form(request, signed))
    try:
        back = f"{PREFIX}/webhooks/{uuid.UUID(form.get('webhook_id', ''))}"
    except ValueError:
        back = f"{PREFIX}/webhooks"

    def run() -> Response:
        try:
            webhooks_api.replay_delivery(delivery_id, db, settings, signed.principal)
        except HTTPException as error:
            raise Refused(error.status_code, _detail(error)) from None
        return _redirect(f"{back}#delivery-{delivery_id}")

    return await run_in_threadpool(run)


# ---------------------------------------------------------------- audit trail


def _audit_filters(since: str, until: str) -> tuple[datetime | None, datetime | None]:
    return _instant(since, "Since"), _instant(until, "Until")


def _query(**params: object) -> str:
    kept = {k: str(v) for k, v in params.items() if v not in (None, "")}
    return f"?{urlencode(kept)}" if kept else ""


@router.get("/audit", response_class=HTMLResponse)
def audit_page(
    request: Request,
    db: DatabaseDep,
    signed: AdminSessionDep,
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> HTMLResponse:
    """The tenant's audit trail, newest first, a page at a time (the entries
    ``GET /v1/audit`` exports, read by ``app.audit.service``), with its downloads."""
    error = None
    entries: list[dict[str, Any]] = []
    try:
        start, end = _audit_filters(since, until)
    except FormError as problem:
        error = str(problem)
    else:
        with db.read() as session:
            entries = audit_service.latest_entries(
                session,
                signed.principal.tenant_id,
                before_seq=before,
                since=start,
                until=end,
                limit=AUDIT_PAGE,
            )
    for entry in entries:
        entry["details_text"] = json.dumps(entry["details"], sort_keys=True, ensure_ascii=False)
    filters = {"since": since.strip(), "until": until.strip()}
    return _page(
        request,
        "audit.html",
        {
            "entries": entries,
            "filters": filters,
            "older": f"{PREFIX}/audit{_query(**filters, before=entries[-1]['seq'])}"
            if len(entries) == AUDIT_PAGE
            else None,
            "newest": f"{PREFIX}/audit{_query(**filters)}" if before is not None else None,
            "download": {f: _query(**filters, format=f) for f in ("jsonl", "csv")},
            "audit_error": error,
            "summary": _summary(error, "since", "the filters") if error else None,
        },
        status_code=422 if error else 200,
    )


@router.get("/audit/export", response_model=None)
def audit_export(
    db: DatabaseDep,
    signed: AdminSessionDep,
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
    format: Annotated[Literal["jsonl", "csv"], Query()] = "jsonl",
) -> Response:
    """The API's export (``GET /v1/audit``), cookie-authenticated: JSON Lines or CSV."""
    try:
        start, end = _audit_filters(since, until)
    except FormError as problem:
        raise Refused(status.HTTP_422_UNPROCESSABLE_CONTENT, str(problem)) from None
    return audit_api.export_audit(
        db, signed.principal, since=start, until=end, limit=None, format=format
    )
