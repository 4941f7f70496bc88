"""The console's pages. Every action calls the API's own route functions with the signed-in key's
principal: the same services, the same role checks (``require_owner`` for the owner routes,
whose ``OwnerKey`` dependency is not resolved when the function is called directly), the same
error messages. The console adds sessions, CSRF checks and HTML, never a rule of its own."""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, UploadFile

from app.api.deps import (
    DatabaseDep,
    SettingsDep,
    StorageDep,
    client_address,
    require_admin,
    require_data_key,
    require_owner,
    resources,
    throttled,
)
from app.api.types import format_decimal, format_scientific, public_location
from app.api.uploads import storage_unavailable
from app.budget import endpoints as quotas_api
from app.budget.schemas import QuotaList
from app.console import service, staging
from app.console.domains import column_domain
from app.console.forms import ParamError, param_fields, parse_params
from app.console.plots import ledger_timeline_png
from app.console.schema_form import (
    BINNED,
    COLUMN_TYPES,
    EXTRA_FIELD,
    FIELDS_PER_COLUMN,
    UNIT_COLUMN_FIELD,
    UNIT_ROWS_FIELD,
    ColumnRow,
    SchemaFormError,
    apply_unit,
    apply_unit_to_json,
    rows_from_form,
    rows_from_schema,
    schema_extra,
    schema_from_rows,
    unit_values,
)
from app.console.security import ConsoleHeadersMiddleware
from app.datasets import endpoints as datasets_api
from app.datasets.schemas import BudgetOut, DatasetOut, GrantRequest, LedgerEntryOut
from app.drafts import endpoints as drafts_api
from app.jobs import endpoints as jobs_api
from app.jobs import service as jobs_service
from app.jobs.schemas import JobOut, JobRequest, MethodOut, OverBudgetOut
from app.reports import endpoints as reports_api
from app.samples import endpoints as samples_api
from app.samples.schemas import SampleRequest
from engine.accounting import epsilon_from_rho_delta
from engine.columns.base import SchemaError
from engine.constraints import describe, parse_rules
from engine.discovery.plan import CategoryRequest
from engine.discovery.schema import requests_for
from engine.tables.encoding import SchemaSpec

PREFIX = "/console"
UPLOAD_PATH = f"{PREFIX}/datasets/upload"
HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
# Decimals as the API writes them in JSON: plain notation, no trailing zeros.
templates.env.filters["dec"] = lambda value: format_decimal(Decimal(value))
# δ for people: exact, in scientific notation when small (issue 26 §4: "0.000000999999999999").
templates.env.filters["sci"] = lambda value: format_scientific(Decimal(value))
router = APIRouter(prefix=PREFIX, include_in_schema=False)


class NotSignedIn(Exception):
    """No live session: GET pages redirect to the sign-in page, POSTs answer 403."""


class Refused(Exception):
    """A request the console refuses with a page (403 forgery, 403 role, 404...)."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.detail = detail


def _signed_in(request: Request, db: DatabaseDep) -> service.SignedIn:
    with db.transaction() as session:
        signed = service.resolve(session, request.cookies.get(service.COOKIE))
    if signed is None:
        raise NotSignedIn
    request.state.signed = signed
    return signed


SignedInDep = Annotated[service.SignedIn, Depends(_signed_in)]


def _refused(error: HTTPException) -> Refused:
    return Refused(error.status_code, str(error.detail))


def _data_key(signed: SignedInDep) -> service.SignedIn:
    """The session of an owner or analyst key: the API's ``AnalystKey`` rule
    (``require_data_key``), so an admin key gets the API's 403 on every data page and action."""
    try:
        require_data_key(signed.principal)
    except HTTPException as error:
        raise _refused(error) from None
    return signed


def _admin_key(signed: SignedInDep) -> service.SignedIn:
    """The session of an admin key: the API's ``AdminKey`` rule (``require_admin``), which the
    key, webhook and audit route functions rely on (their dependency is not resolved when the
    console calls them directly)."""
    try:
        require_admin(signed.principal)
    except HTTPException as error:
        raise _refused(error) from None
    return signed


DataKeyDep = Annotated[service.SignedIn, Depends(_data_key)]
AdminSessionDep = Annotated[service.SignedIn, Depends(_admin_key)]


def home_path(signed: service.SignedIn) -> str:
    """Where a signed-in key starts: admin keys on the keys page, the others on the datasets."""
    return f"{PREFIX}/keys" if signed.principal.is_admin else f"{PREFIX}/datasets"


def _public_origin(request: Request) -> str | None:
    """The origin browsers reach the console at: RHOSYNTH_PUBLIC_ORIGIN behind a proxy, else
    the request's own scheme and Host."""
    configured: str | None = request.app.state.settings.public_origin
    if configured:
        return configured
    host = request.headers.get("host")
    return None if host is None else f"{request.url.scheme}://{host}"


def _secure(request: Request) -> bool:
    """Whether the session cookie is Secure: the public origin (or this request) is https."""
    origin = _public_origin(request)
    return request.url.scheme == "https" or bool(origin and origin.startswith("https://"))


def _check_origin(request: Request) -> None:
    if not service.same_origin(
        request.headers.get("origin"),
        request.headers.get("sec-fetch-site"),
        _public_origin(request),
    ):
        raise Refused(status.HTTP_403_FORBIDDEN, "cross-site request refused")


async def _checked_form(
    request: Request,
    signed: service.SignedIn,
    *,
    multipart_limit: int | None = None,
    max_fields: int = 10,
) -> FormData:
    """The POST's form once its origin and CSRF token are checked (403 otherwise)."""
    _check_origin(request)
    if multipart_limit is None:
        form = await request.form(max_files=0, max_fields=60)
    else:
        form = await request.form(max_files=1, max_fields=max_fields, max_part_size=multipart_limit)
    if not service.csrf_matches(signed.csrf_token, form.get(service.CSRF_FIELD)):
        await form.close()
        raise Refused(status.HTTP_403_FORBIDDEN, "missing or wrong form token; reload the page")
    return form


def _owner(signed: service.SignedIn) -> None:
    try:
        require_owner(signed.principal)
    except HTTPException as error:
        raise Refused(error.status_code, str(error.detail)) from None


def _texts(form: FormData) -> dict[str, str]:
    return {key: value for key, value in form.items() if isinstance(value, str)}


def _detail(error: HTTPException | JSONResponse) -> str:
    """The API's error text: an HTTPException's detail, or an error body's ``detail`` (with an
    over-budget refusal's requested and remaining ρ)."""
    if isinstance(error, HTTPException):
        detail: Any = error.detail
    else:
        body = json.loads(bytes(error.body))
        detail = body.get("detail", "")
        if "requested_rho" in body and body.get("limit", "dataset") != "dataset":
            # Over a quota (issue 27 §2): the API's sentence names the quota (owners set it
            # on the dataset's page).
            return str(detail)
        if "requested_rho" in body:
            # The API's sentence names its route; the console's names its own button.
            needs, left = jobs_service.over_budget_terms(OverBudgetOut.model_validate(body))
            return (
                f"Over the dataset's remaining privacy budget: this release needs {needs}, the "
                f"dataset has {left} left. Ask for less, or ask an owner of the dataset to add "
                "budget (“Grant budget” on the dataset's page). Nothing was reserved."
            )
    if isinstance(detail, list):
        return "; ".join(_validation_text(item) for item in detail)
    return str(detail)


# The API's locations of the budget form's fields, in the console's own labels.
_FORM_LABELS = {"budget": "Budget", "budget.rho": "ρ", "budget.epsilon": "ε", "budget.delta": "δ"}


def _validation_text(item: Any) -> str:
    parts = public_location(item.get("loc", ()))
    location = ".".join(str(part) for part in parts if part != "body")
    label = _FORM_LABELS.get(location, location)
    if item.get("type") == "budget_form":
        # The API's sentence names its JSON keys; the form has fields.
        message = "fill in ρ, or both ε and δ"
    else:
        message = str(item.get("msg", "")).removeprefix("Value error, ")
    return f"{label}: {message}" if label else message


def _validation_errors(error: ValidationError) -> str:
    # Only the location and message: pydantic's "input" would echo what was typed.
    return "; ".join(_validation_text(item) for item in error.errors())


def _replace_form_field(
    request: Request, form: FormData, key: str, value: str | UploadFile
) -> FormData:
    """Make the request's parsed form (which the API handler reads again) carry ``value`` as
    ``key``: the schema written from the column form goes through the upload route unchanged.
    Returns the new form (later replacements must start from it)."""
    items = [(k, v) for k, v in form.multi_items() if k != key]
    request._form = FormData([*items, (key, value)])
    return request._form


# The API's words in upload errors, in the upload form's own labels (issue 26 §1).
_UPLOAD_WORDS = (
    ("give the upload a budget_delta > 0 (locally: --discovery-delta)", "give “Total δ” above 0"),
    ("budget_delta", "“Total δ”"),
    ("discovery_rho", "the discovery ρ"),
    ("budget_rho", "“Total budget ρ”"),
)

# Which field an error is about: (the error's context key, a word in its text, the field's id,
# the field's label), first match wins; the last entry of each key is its form.
_ERROR_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("upload_error", "Total δ", "budget_delta", "Total δ"),
    ("upload_error", "Total budget ρ", "budget_rho", "Total budget ρ"),
    ("upload_error", "name must", "name", "Name"),
    ("upload_error", "schema", "schema", "the schema"),
    ("upload_error", "column", "schema", "the schema"),
    ("upload_error", "", "upload", "the upload form"),
    ("job_error", "ρ:", "rho", "ρ"),
    ("job_error", "ε:", "epsilon", "ε"),
    ("job_error", "δ:", "delta", "δ"),
    ("job_error", "Budget:", "budget_rho_kind", "the budget"),
    ("job_error", "rows", "rows", "Rows"),
    ("job_error", "", "release", "the release form"),
    ("grant_error", "", "add_rho", "Grant budget"),
    ("sample_error", "", "samples", "the sample form"),
)


def upload_words(message: str) -> str:
    """An upload error in the console's labels instead of the API's field names."""
    for api, console in _UPLOAD_WORDS:
        message = message.replace(api, console)
    return message


def error_summary(context: dict[str, Any]) -> dict[str, str] | None:
    """The page's error, repeated at the top of the page with a link to its field (the inline
    message sits next to its form, which can be thousands of pixels down). A page that knows
    which form its error concerns passes it as ``summary``."""
    if context.get("summary"):
        summary: dict[str, str] = context["summary"]
        return summary
    for key, word, target, label in _ERROR_FIELDS:
        text = context.get(key)
        if text and word in str(text):
            return {"text": str(text), "target": target, "label": label}
    return None


def _page(
    request: Request,
    name: str,
    context: dict[str, Any],
    status_code: int = 200,
) -> HTMLResponse:
    signed: service.SignedIn | None = getattr(request.state, "signed", None)
    return templates.TemplateResponse(
        request,
        name,
        {
            "signed": signed,
            "csrf_field": service.CSRF_FIELD,
            "error_summary": error_summary(context),
            **context,
        },
        status_code=status_code,
    )


def _redirect(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=status.HTTP_303_SEE_OTHER)


GAUGE_CONVERSION_DELTA = Decimal("1e-6")
"""The δ at which the budget gauge states the ρ it shows as ε (issue 26 §4): ρ-zCDP implies
(ε(ρ, δ), δ)-DP for every δ; the dataset's discovery δ adds to it (docs/privacy.md)."""


@functools.lru_cache(maxsize=4096)
def epsilon_text(rho: Decimal, delta: Decimal) -> str:
    """ε(ρ, δ) rounded up to four significant digits: a larger ε is still a true statement.
    Cached: each conversion is a bisection (about 1 ms) and a page shows two per dataset, most
    with the same few totals."""
    epsilon = epsilon_from_rho_delta(rho, delta)
    if epsilon == 0:
        return "0"
    quantum = Decimal(1).scaleb(epsilon.adjusted() - 3)
    return format_decimal(epsilon.quantize(quantum, rounding=ROUND_CEILING))


def as_epsilon(rho: Decimal | str) -> str:
    """A release's ρ as (ε, δ)-DP at :data:`GAUGE_CONVERSION_DELTA` (issue 27 §6: ε beside ρ
    wherever a budget is shown). The release's own ρ only: discovery's δ is the dataset's."""
    delta = format_scientific(GAUGE_CONVERSION_DELTA)
    return f"ε = {epsilon_text(Decimal(rho), GAUGE_CONVERSION_DELTA)} at δ = {delta}"


templates.env.filters["as_epsilon"] = as_epsilon


def gauge(budget: BudgetOut) -> dict[str, Any]:
    """The budget gauge's numbers: ρ total, spent, reserved, remaining and the used share, and
    the total and remaining ρ as ε at :data:`GAUGE_CONVERSION_DELTA` plus the dataset's
    discovery δ. Spent and reserved have no ε of their own: ε does not add up as ρ does."""
    total = Decimal(budget.total_rho)
    used = Decimal(budget.spent_rho) + Decimal(budget.reserved_rho)
    discovery = Decimal(budget.spent_delta)
    return {
        "epsilon_total": epsilon_text(total, GAUGE_CONVERSION_DELTA),
        "epsilon_remaining": epsilon_text(Decimal(budget.remaining_rho), GAUGE_CONVERSION_DELTA),
        "delta": format_scientific(GAUGE_CONVERSION_DELTA + discovery),
        "discovery_delta": format_scientific(discovery) if discovery > 0 else None,
        "total": format_decimal(budget.total_rho),
        "spent": format_decimal(budget.spent_rho),
        "reserved": format_decimal(budget.reserved_rho),
        "remaining": format_decimal(budget.remaining_rho),
        "used": float(used),
        "max": float(total) if total > 0 else 1.0,
        "percent": round(float(used / total * 100), 1) if total > 0 else 0.0,
    }


def quota_rows(listing: QuotaList) -> list[dict[str, Any]]:
    """The quotas as the dataset page lists them (issue 27 §6): ρ, with ε at
    :data:`GAUGE_CONVERSION_DELTA` beside the granted, remaining and available ρ (ε does not add
    up as ρ does, so reserved and spent stay in ρ)."""
    return [
        {
            "quota": q,
            "label": f"group “{q.group}”" if q.kind == "group" else f"key {q.key_id}",
            "granted_epsilon": as_epsilon(Decimal(q.granted_rho)),
            "remaining_epsilon": as_epsilon(Decimal(q.remaining_rho)),
            "available_epsilon": as_epsilon(Decimal(q.available_rho)),
        }
        for q in listing.items
    ]


def spent_epsilons(entries: list[LedgerEntryOut]) -> dict[int, str]:
    """For each entry that spends (``discover``, ``spend``): the ρ spent up to and including it,
    as ε at :data:`GAUGE_CONVERSION_DELTA` plus the discovery δ spent so far (issue 26 §4: ε
    beside ρ in the ledger). A running total, because ε of one entry would not add up. The
    entries must start at the ledger's first (the console lists its first page)."""
    spent = discovery = Decimal(0)
    shown: dict[int, str] = {}
    for entry in sorted(entries, key=lambda e: e.id):
        if entry.kind not in ("discover", "spend"):
            continue
        spent += Decimal(entry.rho)
        discovery += Decimal(entry.delta)
        delta = format_scientific(GAUGE_CONVERSION_DELTA + discovery)
        shown[entry.id] = f"{epsilon_text(spent, GAUGE_CONVERSION_DELTA)} at δ = {delta}"
    return shown


# ---------------------------------------------------------------- sign-in


@router.get("", response_model=None)
def home(request: Request, db: DatabaseDep) -> RedirectResponse:
    with db.transaction() as session:
        signed = service.resolve(session, request.cookies.get(service.COOKIE))
    return _redirect(home_path(signed) if signed else f"{PREFIX}/login")


def _login_page(request: Request, error: str | None, status_code: int = 200) -> HTMLResponse:
    """The sign-in form with a fresh form token, also set as the sign-in cookie."""
    token = service.new_login_token()
    response = _page(request, "login.html", {"error": error, "login_token": token}, status_code)
    response.set_cookie(
        service.LOGIN_COOKIE,
        token,
        max_age=int(service.LOGIN_FORM_LIFETIME.total_seconds()),
        path=f"{PREFIX}/login",
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> HTMLResponse:
    return _login_page(request, None)


@router.post("/login", response_model=None)
async def login(request: Request, db: DatabaseDep) -> Response:
    _check_origin(request)
    form = await request.form(max_files=0, max_fields=5)
    # Login CSRF: the form's token must equal the sign-in cookie, which only this site's own
    # sign-in page can have set in this browser.
    expected = request.cookies.get(service.LOGIN_COOKIE)
    if not expected or not service.csrf_matches(expected, form.get(service.CSRF_FIELD)):
        return _login_page(
            request, "the sign-in form expired; sign in again", status.HTTP_403_FORBIDDEN
        )
    key = form.get("api_key")
    if (refused := throttled(request)) is not None:  # failed sign-ins per address
        page = _login_page(request, refused.detail, status.HTTP_429_TOO_MANY_REQUESTS)
        page.headers.update(refused.headers or {})
        return page

    def create() -> tuple[str, service.SignedIn] | None:
        if not isinstance(key, str) or not key.strip() or len(key) > 200:
            return None
        with db.transaction() as session:
            # A browser signing in again ends the session it held (logout could not reach it).
            service.sign_out(session, request.cookies.get(service.COOKIE))
            return service.sign_in(session, resources(request).secret, key)

    created = await run_in_threadpool(create)
    if created is None:
        request.app.state.auth_throttle.failed(client_address(request))
        return _login_page(request, "invalid API key", status.HTTP_401_UNAUTHORIZED)
    token, signed = created
    response = _redirect(home_path(signed))
    response.delete_cookie(service.LOGIN_COOKIE, path=f"{PREFIX}/login")
    response.set_cookie(
        service.COOKIE,
        token,
        max_age=int(service.SESSION_LIFETIME.total_seconds()),
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


@router.post("/logout", response_model=None)
async def logout(request: Request, db: DatabaseDep) -> Response:
    """End the session and clear the cookie. A live session needs its CSRF token; an expired or
    unknown one is just cleared (nothing is left to protect)."""
    with db.transaction() as session:
        signed = service.resolve(session, request.cookies.get(service.COOKIE))
    if signed is not None:
        await _checked_form(request, signed)
    else:
        _check_origin(request)

    def delete() -> None:
        with db.transaction() as session:
            service.sign_out(session, request.cookies.get(service.COOKIE))

    await run_in_threadpool(delete)
    response = _redirect(f"{PREFIX}/login")
    response.delete_cookie(
        service.COOKIE,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )
    return response


# ---------------------------------------------------------------- datasets


DRAFT_DISCOVERY_DELTA = "0.000001"
"""The δ the upload form takes when a draft discovers categories without candidates and the form
said 0: a fixed public value (one derived from the row count would publish it in the ledger)."""


def open_set_columns(schema: Any) -> list[str]:
    """Columns of a (drafted) schema whose categories are discovered without a candidate list:
    the discovery requests that need δ > 0 (engine/discovery/plan.py, ``allocate``)."""
    try:
        requests = requests_for(SchemaSpec.from_json(schema))
    except SchemaError:
        return []  # the upload reports what is wrong with it
    return [r.column for r in requests if isinstance(r, CategoryRequest) and r.open_set]


def _columns_text(names: list[str]) -> str:
    shown = ", ".join(f"“{name}”" for name in names[:5])
    more = f" and {len(names) - 5} more" if len(names) > 5 else ""
    return f"{'column' if len(names) == 1 else 'columns'} {shown}{more}"


KEPT_FIELD = "kept_file"
KEPT_NAME_FIELD = "kept_name"
NO_FILE = "choose the table's file (CSV or Parquet)"
KEPT_GONE = (
    "the file read by the draft is no longer kept (a draft's file is kept for an hour, until "
    "it is uploaded, or until three newer drafts replace it): choose the file again"
)


def _delta_reason(open_sets: list[str], rows: int) -> str:
    """Why the console set δ for a draft that discovers categories (issue 26 §1)."""
    reason = (
        f"δ is set to {DRAFT_DISCOVERY_DELTA}: {_columns_text(open_sets)} "
        f"{'discovers its' if len(open_sets) == 1 else 'discover their'} "
        "categories from the data, which is (ρ, δ)-DP and needs "
        "δ > 0 (keep δ far below 1 / the number of rows). To upload with δ = 0, "
        "declare or list those columns' categories instead."
    )
    if rows * Decimal(DRAFT_DISCOVERY_DELTA) > Decimal("0.01"):
        # The owner's own page (the draft read the file): nothing is published.
        reason += (
            f" With {rows} rows, {DRAFT_DISCOVERY_DELTA} is not far below "
            f"1/{rows}: consider a smaller δ."
        )
    return reason


def _is_zero(text: str) -> bool:
    try:
        return Decimal(text.strip() or "0") == 0
    except ArithmeticError:
        return False


def _datasets_page(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    *,
    upload: dict[str, str] | None = None,
    upload_error: str | None = None,
    draft: dict[str, Any] | None = None,
    columns: list[ColumnRow] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    listing = datasets_api.list_datasets(db, signed.principal, limit=1000, offset=0)
    rows = [{"dataset": d, "gauge": gauge(d.budget)} for d in listing.items]
    upload = upload or {"budget_delta": "0"}
    return _page(
        request,
        "datasets.html",
        {
            "rows": rows,
            "upload": upload,
            "upload_error": upload_error,
            "draft": draft,
            "columns": columns,
            "column_types": COLUMN_TYPES,
            "binned_types": BINNED,
            "upload_path": UPLOAD_PATH,
        },
        status_code=status_code,
    )


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(request: Request, db: DatabaseDep, signed: DataKeyDep) -> HTMLResponse:
    return _datasets_page(request, db, signed)


@router.post("/datasets/upload", response_model=None)
async def upload(
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    storage: StorageDep,
    signed: DataKeyDep,
) -> Response:
    """Upload a table (``action=upload``) or draft its schema (``action=draft``): the API's
    ``POST /v1/datasets`` and ``POST /v1/schema-drafts`` handlers, on the form parsed here.

    With ``schema_source=form`` the schema is the column form (a draft shown as one row per
    column) written back as JSON; with ``json`` (or no draft) it is the raw JSON textarea.

    A draft keeps the file it read (app/console/staging.py) and the page carries its token: an
    upload or a new draft sent without a newly chosen file uses the kept one, so the owner
    chooses the file once (issue 26 §1)."""
    _owner(signed)
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise Refused(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "send the upload form")
    form = await _checked_form(
        request,
        signed,
        multipart_limit=settings.max_schema_bytes,
        max_fields=22 + FIELDS_PER_COLUMN * settings.max_columns,
    )
    texts = _texts(form)
    # The API handlers read the same (already parsed) form from the request.
    fields = {k: v for k, v in texts.items() if k in ("name", "budget_rho", "schema")}
    fields["budget_delta"] = str(form.get("budget_delta") or "0")
    fields["schema_source"] = "form" if texts.get("schema_source") == "form" else "json"
    fields[EXTRA_FIELD] = texts.get(EXTRA_FIELD, "")
    for unit_field in (UNIT_COLUMN_FIELD, UNIT_ROWS_FIELD):
        fields[unit_field] = texts.get(unit_field, "")
    kept = staging.valid_token(texts.get(KEPT_FIELD))
    fields[KEPT_FIELD] = kept or ""
    fields[KEPT_NAME_FIELD] = texts.get(KEPT_NAME_FIELD, "")[:200] if kept else ""
    chosen = form.get("file")
    new_file = chosen if isinstance(chosen, UploadFile) and chosen.size else None
    key_id = signed.principal.key_id
    columns: list[ColumnRow] | None = None

    def again(error: str, code: int) -> Response:
        if new_file is not None and form.get("action") != "draft":
            # This upload sent a new file, which is not kept: the page must not offer the
            # draft's older file in its place (a resubmission would upload that one).
            fields[KEPT_FIELD] = fields[KEPT_NAME_FIELD] = ""
        return _datasets_page(
            request,
            db,
            signed,
            upload=fields,
            upload_error=upload_words(error),
            columns=columns,
            status_code=code,
        )

    async with contextlib.AsyncExitStack() as stack:
        try:
            if new_file is None and kept:
                # No file chosen on this page: the draft's kept file takes the field's place.
                path = await run_in_threadpool(
                    stack.enter_context, staging.kept_copy(storage, key_id, kept)
                )
                handle = stack.enter_context(open(path, "rb"))  # noqa: SIM115 - the stack closes it
                name = fields[KEPT_NAME_FIELD]
                form = _replace_form_field(request, form, "file", UploadFile(handle, filename=name))
            elif new_file is None:
                raise SchemaFormError(NO_FILE)
            if form.get("action") == "draft":
                if new_file is not None:
                    # Keep the file this draft reads: the upload needs no second choice of it.
                    token = await run_in_threadpool(staging.keep, storage, key_id, new_file.file)
                    if kept:
                        await run_in_threadpool(staging.drop, storage, key_id, kept)
                    kept = fields[KEPT_FIELD] = token
                    fields[KEPT_NAME_FIELD] = (new_file.filename or "the chosen file")[:200]
                draft = await drafts_api.create_draft(request, settings, storage, signed.principal)
                fields["schema"] = json.dumps(draft.schema_, indent=2)
                fields["schema_source"] = "form"
                fields[EXTRA_FIELD] = schema_extra(draft.schema_)
                fields.update(unit_values(draft.schema_))
                shown = draft.model_dump(by_alias=True)
                open_sets = open_set_columns(draft.schema_)
                if open_sets and _is_zero(fields["budget_delta"]):
                    # Issue 26 §1: the form's δ of 0 refused the console's own draft at upload.
                    fields["budget_delta"] = DRAFT_DISCOVERY_DELTA
                    shown["delta_reason"] = _delta_reason(open_sets, draft.rows)
                return await run_in_threadpool(
                    _datasets_page,
                    request,
                    db,
                    signed,
                    upload=fields,
                    draft=shown,
                    columns=rows_from_schema(draft.schema_),
                )
            if texts.get("col.count") is not None:
                columns = rows_from_form(texts, settings.max_columns)
            if fields["schema_source"] == "form" and columns is not None:
                schema = apply_unit(schema_from_rows(columns, fields[EXTRA_FIELD]), texts)
                fields["schema"] = json.dumps(schema, indent=2)
                if len(fields["schema"].encode()) > settings.max_schema_bytes:
                    raise SchemaFormError(
                        f"the schema is limited to {settings.max_schema_bytes} bytes"
                    )
                form = _replace_form_field(request, form, "schema", fields["schema"])
            elif fields["schema_source"] == "json":
                # The unit's inputs show for either source: never drop a chosen unit silently.
                with_unit = apply_unit_to_json(texts.get("schema", ""), texts)
                if with_unit is not None:
                    if len(with_unit.encode()) > settings.max_schema_bytes:
                        raise SchemaFormError(
                            f"the schema is limited to {settings.max_schema_bytes} bytes"
                        )
                    fields["schema"] = with_unit
                    form = _replace_form_field(request, form, "schema", with_unit)
            created = await datasets_api.create_dataset(
                request, db, settings, storage, signed.principal
            )
        except staging.StagedFileGone:
            fields[KEPT_FIELD] = fields[KEPT_NAME_FIELD] = ""
            await form.close()
            return await run_in_threadpool(again, KEPT_GONE, 422)
        except SchemaFormError as error:
            await form.close()
            return await run_in_threadpool(again, str(error), 422)
        except HTTPException as error:
            return await run_in_threadpool(again, _detail(error), error.status_code)
        except OSError as error:  # the kept file could not be written or read
            raise storage_unavailable("console draft", error) from None
    if kept:  # used by this upload, or replaced by the file chosen for it
        await run_in_threadpool(staging.drop, storage, key_id, kept)
    return _redirect(f"{PREFIX}/datasets/{created.id}")


def _dataset_page(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    dataset_id: uuid.UUID,
    *,
    method: str | None = None,
    values: dict[str, str] | None = None,
    job_error: str | None = None,
    preview: dict[str, Any] | None = None,
    grant_error: str | None = None,
    quota_error: str | None = None,
    quota_at: str = "quotas",
    quota_values: dict[str, str] | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    principal = signed.principal
    try:
        dataset: DatasetOut = datasets_api.get_dataset(dataset_id, db, principal)
        ledger = (
            datasets_api.get_ledger(dataset_id, db, principal, limit=1000, after=None)
            if principal.is_owner
            else None
        )
        # Quotas and their policy (issue 27 §2): owner keys only, as GET .../quotas.
        quotas = (
            quotas_api.list_quotas(dataset_id, db, principal)
            if principal.is_owner and dataset.deleted_at is None
            else None
        )
        jobs = jobs_api.list_jobs(dataset_id, db, principal, limit=1000, offset=0)
    except HTTPException as error:
        raise Refused(error.status_code, _detail(error)) from None
    methods = jobs_api.list_methods(principal).items
    chosen: MethodOut = next(
        (m for m in methods if m.name == method),
        next((m for m in methods if m.name == "mst"), methods[0]),
    )
    return _page(
        request,
        "dataset.html",
        {
            "dataset": dataset,
            "domains": {c.name: column_domain(c) for c in dataset.columns},
            "rules": [describe(rule) for rule in parse_rules(dataset.rules)],
            "gauge": gauge(dataset.budget),
            "ledger": ledger,
            "spent_epsilon": spent_epsilons(ledger.items) if ledger else {},
            "jobs": jobs.items,
            "methods": methods,
            "method": chosen,
            "fields": param_fields(chosen.params_schema),
            "values": values or {"budget_kind": "rho"},
            "job_error": job_error,
            "preview": preview,
            "grant_error": grant_error,
            "quotas": quotas,
            "quota_rows": quota_rows(quotas) if quotas else [],
            "quota_error": quota_error,
            "quota_at": quota_at,
            "quota_values": quota_values or {},
            "summary": {"text": quota_error, "target": quota_at, "label": "the quota form"}
            if quota_error
            else None,
            "idempotency_key": str(uuid.uuid4()),
        },
        status_code=status_code,
    )


@router.get("/datasets/{dataset_id}", response_class=HTMLResponse)
def dataset_page(
    request: Request,
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    signed: DataKeyDep,
    method: Annotated[str | None, Query(max_length=64)] = None,
) -> HTMLResponse:
    return _dataset_page(request, db, signed, dataset_id, method=method)


def _all_ledger_entries(
    db: DatabaseDep, signed: service.SignedIn, dataset_id: uuid.UUID
) -> list[LedgerEntryOut]:
    """Every ledger entry, page by page through the API's handler."""
    entries: list[LedgerEntryOut] = []
    after: int | None = None
    while True:
        page = datasets_api.get_ledger(dataset_id, db, signed.principal, limit=1000, after=after)
        entries.extend(page.items)
        if page.next_after is None:
            return entries
        after = page.next_after


@router.get("/datasets/{dataset_id}/ledger.png", response_model=None)
def ledger_plot(dataset_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep) -> Response:
    """The ledger as a timeline (owner keys, like ``GET /v1/datasets/{id}/ledger``)."""
    _owner(signed)
    try:
        entries = _all_ledger_entries(db, signed, dataset_id)
    except HTTPException as error:
        raise Refused(error.status_code, _detail(error)) from None
    return Response(ledger_timeline_png(entries), media_type="image/png")


@router.post("/datasets/{dataset_id}/grant", response_model=None)
async def grant(
    request: Request,
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    form = _texts(await _checked_form(request, signed))
    _owner(signed)

    def run() -> Response:
        try:
            body = GrantRequest.model_validate(
                {"add_rho": form.get("add_rho", ""), "add_delta": form.get("add_delta") or "0"}
            )
            datasets_api.grant_budget(dataset_id, body, db, settings, signed.principal)
        except ValidationError as error:
            return _dataset_page(
                request,
                db,
                signed,
                dataset_id,
                grant_error=_validation_errors(error),
                status_code=422,
            )
        except HTTPException as error:
            if error.status_code == status.HTTP_404_NOT_FOUND:
                raise Refused(error.status_code, _detail(error)) from None
            return _dataset_page(
                request,
                db,
                signed,
                dataset_id,
                grant_error=_detail(error),
                status_code=error.status_code,
            )
        return _redirect(f"{PREFIX}/datasets/{dataset_id}")

    return await run_in_threadpool(run)


@router.post("/datasets/{dataset_id}/delete", response_model=None)
async def delete(
    request: Request,
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    signed: DataKeyDep,
) -> Response:
    form = _texts(await _checked_form(request, signed))
    _owner(signed)
    if form.get("confirm") != "yes":
        raise Refused(status.HTTP_422_UNPROCESSABLE_CONTENT, "tick the box to confirm erasure")

    def run() -> Response:
        try:
            datasets_api.delete_dataset(dataset_id, db, storage, signed.principal)
        except HTTPException as error:
            raise Refused(error.status_code, _detail(error)) from None
        return _redirect(f"{PREFIX}/datasets/{dataset_id}")

    return await run_in_threadpool(run)


def _job_request(form: dict[str, str], method: MethodOut) -> JobRequest:
    """The API's ``JobRequest`` from the form (raises ValidationError or ParamError).

    The budget is the form the radio button names, unless its fields are empty and the other
    form's are not: a user who typed ε and δ without switching the button means (ε, δ)."""
    filled = {name: bool(form.get(name, "").strip()) for name in ("rho", "epsilon", "delta")}
    kind = form.get("budget_kind")
    if kind == "epsilon_delta" and not (filled["epsilon"] or filled["delta"]) and filled["rho"]:
        kind = "rho"
    elif kind != "epsilon_delta" and not filled["rho"] and (filled["epsilon"] or filled["delta"]):
        kind = "epsilon_delta"
    if kind == "epsilon_delta":
        budget: dict[str, str] = {
            "epsilon": form.get("epsilon", ""),
            "delta": form.get("delta", ""),
        }
    else:
        budget = {"rho": form.get("rho", "")}
    body: dict[str, Any] = {
        "method": method.name,
        "budget": budget,
        "params": parse_params(param_fields(method.params_schema), form),
    }
    for name in ("rows", "seed"):
        if form.get(name, "").strip():
            body[name] = form[name].strip()
    return JobRequest.model_validate(body)


@router.post("/datasets/{dataset_id}/jobs", response_model=None)
async def submit(
    request: Request,
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    """Preview the cost (``action=preview``: the API's dry run) or submit the job."""
    form = _texts(await _checked_form(request, signed))
    methods = {m.name: m for m in jobs_api.list_methods(signed.principal).items}
    method = methods.get(form.get("method", ""))
    if method is None:
        raise Refused(status.HTTP_422_UNPROCESSABLE_CONTENT, "unknown method")
    dry_run = form.get("action") == "preview"

    def run() -> Response:
        def again(
            error: str | None = None, preview: dict[str, Any] | None = None, code: int = 200
        ) -> HTMLResponse:
            return _dataset_page(
                request,
                db,
                signed,
                dataset_id,
                method=method.name,
                values=form,
                job_error=error,
                preview=preview,
                status_code=code,
            )

        try:
            body = _job_request(form, method)
            result = jobs_api.submit_job(
                dataset_id,
                body,
                db,
                settings,
                signed.principal,
                idempotency_key=form.get("idempotency_key") or None,
                dry_run=dry_run,
            )
        except ParamError as error:
            return again(str(error), code=422)
        except ValidationError as error:
            return again(_validation_errors(error), code=422)
        except HTTPException as error:
            if error.status_code == status.HTTP_404_NOT_FOUND:
                raise Refused(error.status_code, _detail(error)) from None
            return again(_detail(error), code=error.status_code)
        if isinstance(result, JobOut):
            return _redirect(f"{PREFIX}/jobs/{result.id}")
        if result.status_code != status.HTTP_200_OK:
            return again(_detail(result), code=result.status_code)
        return again(preview=json.loads(bytes(result.body)))

    return await run_in_threadpool(run)


# ---------------------------------------------------------------- jobs


def _job_page(
    request: Request,
    db: DatabaseDep,
    signed: service.SignedIn,
    job_id: uuid.UUID,
    *,
    sample_values: dict[str, str] | None = None,
    sample_error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    try:
        job = jobs_api.job_for(job_id, db, signed.principal)
        samples = (
            samples_api.list_samples(job_id, db, signed.principal, limit=1000, offset=0).items
            if job.status == "succeeded"
            else []
        )
    except HTTPException as error:
        raise Refused(error.status_code, _detail(error)) from None
    return _page(
        request,
        "job.html",
        {
            "job": job,
            "running": job.status in ("queued", "running"),
            "error": None,
            "samples": samples,
            "sample_values": sample_values or {},
            "sample_error": sample_error,
        },
        status_code=status_code,
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(
    request: Request, job_id: uuid.UUID, db: DatabaseDep, signed: DataKeyDep
) -> HTMLResponse:
    return _job_page(request, db, signed, job_id)


@router.post("/jobs/{job_id}/samples", response_model=None)
async def draw_sample(
    request: Request,
    job_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    """More rows from the job's fitted model (``POST /v1/jobs/{id}/samples``): no ρ."""
    form = _texts(await _checked_form(request, signed))
    values = {k: form.get(k, "").strip() for k in ("rows", "seed")}

    def run() -> Response:
        try:
            body = SampleRequest.model_validate({k: v for k, v in values.items() if v})
            samples_api.create_sample(job_id, body, db, settings, signed.principal)
        except ValidationError as error:
            return _job_page(
                request,
                db,
                signed,
                job_id,
                sample_values=values,
                sample_error=_validation_errors(error),
                status_code=422,
            )
        except HTTPException as error:
            if error.status_code == status.HTTP_404_NOT_FOUND:
                raise Refused(error.status_code, _detail(error)) from None
            return _job_page(
                request,
                db,
                signed,
                job_id,
                sample_values=values,
                sample_error=_detail(error),
                status_code=error.status_code,
            )
        return _redirect(f"{PREFIX}/jobs/{job_id}#samples")

    return await run_in_threadpool(run)


def _through(call: Callable[[], Response]) -> Response:
    """Answer with the API route function's response; its refusal becomes a console page."""
    try:
        return call()
    except HTTPException as error:
        raise Refused(error.status_code, _detail(error)) from None


@router.get("/samples/{sample_id}/output", response_model=None)
def sample_download(
    sample_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    signed: DataKeyDep,
    format: Annotated[Literal["csv", "parquet"], Query()] = "csv",
) -> Response:
    """The API's sample download (``GET /v1/samples/{id}/output``), cookie-authenticated."""
    return _through(
        lambda: samples_api.download_sample(sample_id, db, storage, signed.principal, format)
    )


@router.get("/jobs/{job_id}/measurements", response_model=None)
def measurements(
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    signed: DataKeyDep,
    format: Annotated[Literal["json", "parquet"], Query()] = "json",
) -> Response:
    """The noisy measurements (``GET /v1/jobs/{id}/measurements``), cookie-authenticated."""
    return _through(
        lambda: reports_api.get_measurements(job_id, db, storage, signed.principal, format)
    )


@router.post("/jobs/{job_id}/cancel", response_model=None)
async def cancel(
    request: Request,
    job_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    signed: DataKeyDep,
) -> Response:
    await _checked_form(request, signed)

    def run() -> Response:
        try:
            jobs_api.cancel_job(job_id, db, settings, signed.principal)
        except HTTPException as error:
            raise Refused(error.status_code, _detail(error)) from None
        return _redirect(f"{PREFIX}/jobs/{job_id}")

    return await run_in_threadpool(run)


@router.get("/jobs/{job_id}/output", response_model=None)
def download(
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    signed: DataKeyDep,
    format: Annotated[Literal["csv", "parquet"], Query()] = "csv",
) -> Response:
    """The API's download handler (``GET /v1/jobs/{id}/output``), cookie-authenticated."""
    return _through(lambda: jobs_api.download_output(job_id, db, storage, signed.principal, format))


@router.get("/jobs/{job_id}/report", response_model=None)
def report(
    request: Request,
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    signed: DataKeyDep,
    tier: Annotated[Literal["release", "owner"], Query()] = "release",
) -> Response:
    """The HTML report through the API's handler: the owner tier for owner keys only. While the
    owner tier is still being built (the API's ``202``), a page that says so and reloads itself
    (issue 26 §3: the console showed the API's JSON)."""

    def run() -> Response:
        answer = reports_api.get_report(job_id, db, storage, signed.principal, "html", tier)
        if answer.status_code != status.HTTP_202_ACCEPTED:
            return answer
        retry = answer.headers.get("Retry-After", "5")
        page = _page(
            request,
            "building.html",
            {"job_id": job_id, "retry_after": retry},
            status_code=status.HTTP_202_ACCEPTED,
        )
        page.headers["Retry-After"] = retry
        return page

    return _through(run)


# ---------------------------------------------------------------- wiring


def install(app: FastAPI) -> None:
    """Serve the console on ``app``: its pages, its stylesheet, its headers and error pages."""
    from app.console import governance, quotas  # they build on this module's helpers

    app.include_router(router)
    app.include_router(governance.router)
    app.include_router(quotas.router)
    app.mount(f"{PREFIX}/static", StaticFiles(directory=HERE / "static"), name="console-static")
    app.add_middleware(ConsoleHeadersMiddleware)

    async def not_signed_in(request: Request, _error: Exception) -> Response:
        if request.method in ("GET", "HEAD"):
            return _redirect(f"{PREFIX}/login")
        return _page(
            request,
            "error.html",
            {"status": 403, "detail": "not signed in (or the session ended): sign in again"},
            status_code=status.HTTP_403_FORBIDDEN,
        )

    async def refused(request: Request, error: Exception) -> Response:
        assert isinstance(error, Refused)
        return _page(
            request,
            "error.html",
            {"status": error.status_code, "detail": error.detail},
            status_code=error.status_code,
        )

    app.add_exception_handler(NotSignedIn, not_signed_in)
    app.add_exception_handler(Refused, refused)
