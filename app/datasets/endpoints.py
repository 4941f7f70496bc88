"""Dataset routes: upload, list, read, ledger, budget grants, erasure."""

from __future__ import annotations

import logging
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from app.api.deps import AnalystKey, Database, DatabaseDep, OwnerKey, SettingsDep, StorageDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.api.uploads import UploadSlots, spooled_file, storage_unavailable
from app.auth.service import Principal, actor_names
from app.budget import repository as budget_repository
from app.budget.service import BudgetLimitExceeded
from app.config import Settings
from app.datasets import service
from app.datasets.ingest import UploadRejected
from app.datasets.schemas import DatasetList, DatasetOut, GrantRequest, LedgerEntryOut, LedgerOut
from app.storage import Storage
from engine.reports.unit import unit_phrase
from engine.tables.encoding import SchemaSpec

logger = logging.getLogger(__name__)

router = APIRouter(
    prefix="/v1/datasets",
    tags=["datasets"],
    route_class=FiniteJSONRoute,
    responses=error_responses(400, 401, 403, 404, 413, 422),
)

_UPLOAD_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "schema", "name", "budget_rho"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": "the table: CSV (UTF-8, header row) or Parquet",
                        },
                        "schema": {
                            "type": "string",
                            "description": 'JSON text: a domain map {"col": size} or '
                            '{"columns": [...]} (categorical, numeric, codes)',
                        },
                        "name": {"type": "string", "maxLength": 200},
                        "budget_rho": {
                            "type": "string",
                            "description": "total ρ (zCDP) for this dataset, a positive decimal",
                        },
                        "budget_delta": {
                            "type": "string",
                            "default": "0",
                            "description": "total δ for discovery at upload ((ρ, δ)-approximate "
                            "zCDP): a decimal 0 ≤ δ < 1, at most 18 decimal places",
                        },
                        "discovery_rho": {
                            "type": "string",
                            "description": "ρ shared by the schema's discovery clauses that "
                            "give no rho of their own (default: a fifth of budget_rho; a "
                            "large table spends less); charged at upload as one `discover` "
                            "ledger entry",
                        },
                    },
                }
            }
        },
    }
}


def _not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "dataset not found")


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    openapi_extra=_UPLOAD_BODY,
    responses=error_responses(415, 503),
)
async def create_dataset(
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    storage: StorageDep,
    principal: OwnerKey,
) -> DatasetOut:
    """Upload a table with its declared schema and total ρ budget (owner keys)."""
    if principal.datasets is not None:
        # Its new dataset would be outside its own limits: a dataset-limited owner key
        # manages the datasets it was given, nothing more.
        raise HTTPException(403, "a dataset-limited key cannot create datasets")
    # The form is parsed here, after authentication, so an anonymous caller cannot make the
    # server spool an upload. The body cap is enforced earlier, by BodySizeLimitMiddleware.
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise HTTPException(
            415, "send multipart/form-data with fields file, schema, name, budget_rho"
        )
    try:
        # Two files at most: the table, and the schema when it is sent as one (curl's
        # -F schema=@schema.json; with one allowed, Starlette answered "Too many files").
        async with request.form(
            max_files=2, max_fields=10, max_part_size=settings.max_schema_bytes
        ) as form:
            upload = form.get("file")
            fields = {key: form.get(key) for key in ("schema", "name", "budget_rho")}
            if isinstance(fields["schema"], UploadFile):
                fields["schema"] = await _schema_file(fields["schema"], settings)
            budget_delta = form.get("budget_delta", "0")
            discovery_rho = form.get("discovery_rho")
            if not isinstance(upload, UploadFile):
                raise UploadRejected(422, "the form needs a file field named 'file'")
            files = [key for key, value in fields.items() if isinstance(value, UploadFile)]
            if files:
                raise UploadRejected(
                    422,
                    f"{', '.join(files)} must be text (-F {files[0]}=value), not a file "
                    f"(-F {files[0]}=@path); only 'file' and 'schema' may be files",
                )
            missing = [key for key, value in fields.items() if not isinstance(value, str)]
            if missing:
                raise UploadRejected(422, f"the form needs text fields: {', '.join(missing)}")
            if not isinstance(budget_delta, str):
                raise UploadRejected(422, "budget_delta must be a text field")
            if discovery_rho is not None and not isinstance(discovery_rho, str):
                raise UploadRejected(422, "discovery_rho must be a text field")
            # Parsing the schema is CPU work in proportion to its text: off the event loop.
            parsed = await run_in_threadpool(
                service.parse_upload_form,
                str(fields["name"]),
                str(fields["budget_rho"]),
                str(fields["schema"]),
                settings,
                budget_delta,
                discovery_rho,
            )
            slots: UploadSlots = request.app.state.upload_slots
            with slots.hold():  # 503 + Retry-After when the process's upload budget is full
                async with spooled_file(storage, upload, ".upload") as spooled:
                    return await run_in_threadpool(
                        _store_upload,
                        db,
                        settings,
                        storage,
                        principal,
                        name=parsed.name,
                        total_rho=parsed.total_rho,
                        total_delta=parsed.total_delta,
                        discovery_rho=parsed.discovery_rho,
                        schema=parsed.schema,
                        upload=spooled,
                    )
    except UploadRejected as rejected:
        raise HTTPException(rejected.status_code, rejected.message) from None
    except OSError as error:
        raise storage_unavailable("upload", error) from None


async def _schema_file(part: UploadFile, settings: Settings) -> str:
    """The schema sent as a file part, read up to its cap (the cap of the text field)."""
    raw = await part.read(settings.max_schema_bytes + 1)
    if len(raw) > settings.max_schema_bytes:
        raise UploadRejected(422, f"the schema is limited to {settings.max_schema_bytes} bytes")
    try:
        return raw.decode("utf-8-sig")  # a byte-order mark is accepted, as on the table
    except UnicodeDecodeError:
        raise UploadRejected(422, "the schema file is not UTF-8 text") from None


def _store_upload(
    db: Database,
    settings: Settings,
    storage: Storage,
    principal: Principal,
    *,
    name: str,
    total_rho: Decimal,
    total_delta: Decimal,
    discovery_rho: Decimal | None,
    schema: SchemaSpec,
    upload: Path,
) -> DatasetOut:
    """Validate and store the table, then record it, in one transaction on one thread.

    The session connects at its first statement, after the table has been read and written, so
    no connection (on SQLite: no write lock) is held while the upload is parsed.
    """
    with db.transaction() as session:
        dataset = service.create_dataset(
            session,
            settings,
            storage,
            principal,
            name=name,
            total_rho=total_rho,
            total_delta=total_delta,
            discovery_rho=discovery_rho,
            schema=schema,
            upload=upload,
        )
        state = service.account_of(session, dataset.id)
    return service.dataset_out(dataset, state, principal)


@router.get("", response_model=DatasetList)
def list_datasets(
    db: DatabaseDep,
    principal: AnalystKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> DatasetList:
    """The tenant's datasets with their budgets (deleted ones included, marked)."""
    with db.transaction() as session:
        datasets = service.list_datasets(session, principal, limit=limit + 1, offset=offset)
        page = datasets[:limit]
        accounts = budget_repository.get_accounts(session, [d.id for d in page])
    return DatasetList(
        items=[service.dataset_out(d, accounts[d.id], principal) for d in page],
        next_offset=offset + limit if len(datasets) > limit else None,
    )


@router.get("/{dataset_id}", response_model=DatasetOut)
def get_dataset(dataset_id: uuid.UUID, db: DatabaseDep, principal: AnalystKey) -> DatasetOut:
    """One dataset: its columns and its budget (the exact row count for owners only)."""
    try:
        with db.transaction() as session:
            dataset = service.get_dataset(session, principal, dataset_id)
            state = service.account_of(session, dataset_id)
    except service.DatasetNotFound:
        raise _not_found() from None
    return service.dataset_out(dataset, state, principal)


@router.get("/{dataset_id}/ledger", response_model=LedgerOut)
def get_ledger(
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    principal: OwnerKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    after: Annotated[
        int | None, Query(ge=0, le=2**62, description="return entries after this id")
    ] = None,
) -> LedgerOut:
    """The dataset's append-only privacy ledger, oldest first (owner keys)."""
    try:
        with db.transaction() as session:
            dataset = service.get_dataset(session, principal, dataset_id)
            privacy = unit_phrase(dataset.unit_max_rows)
            entries = budget_repository.list_entries(
                session, dataset_id, limit=limit + 1, after_id=after
            )
            state = service.account_of(session, dataset_id)
            page = entries[:limit]
            names = actor_names(session, principal.tenant_id, {e.actor for e in page})
    except service.DatasetNotFound:
        raise _not_found() from None
    return LedgerOut(
        dataset_id=dataset_id,
        budget=service.budget_out(state),
        privacy=privacy,
        items=[
            LedgerEntryOut(
                id=e.id,
                kind=e.kind,
                rho=e.rho,
                delta=e.delta,
                job_id=e.job_id,
                actor=e.actor,
                at=e.at,
                detail=e.detail,
                privacy=privacy,
                actor_name=names.get(e.actor),
            )
            for e in page
        ],
        next_after=page[-1].id if len(entries) > limit else None,
    )


@router.post("/{dataset_id}/budget", response_model=DatasetOut, responses=error_responses(409))
def grant_budget(
    dataset_id: uuid.UUID,
    body: GrantRequest,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: OwnerKey,
) -> DatasetOut:
    """Raise the dataset's total ρ, and optionally its total δ (owner keys). Budgets never go
    down; the total δ stays below 1."""
    try:
        with db.transaction() as session:
            dataset = service.grant_budget(
                session, settings, principal, dataset_id, body.add_rho, body.add_delta
            )
            state = service.account_of(session, dataset_id)
    except service.DatasetNotFound:
        raise _not_found() from None
    except service.DatasetDeleted:
        raise HTTPException(status.HTTP_409_CONFLICT, "the dataset was deleted") from None
    except BudgetLimitExceeded as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
    return service.dataset_out(dataset, state, principal)


@router.delete("/{dataset_id}", response_model=DatasetOut)
def delete_dataset(
    dataset_id: uuid.UUID, db: DatabaseDep, storage: StorageDep, principal: OwnerKey
) -> DatasetOut:
    """Erase the stored table and all outputs; the record, jobs and ledger stay (owner keys)."""
    try:
        with db.transaction() as session:
            dataset = service.delete_dataset(session, storage, principal, dataset_id)
            state = service.account_of(session, dataset_id)
    except service.DatasetNotFound:
        raise _not_found() from None
    return service.dataset_out(dataset, state, principal)
