"""Registering a dataset from a source instead of uploading it (docs/sources.md)."""

from __future__ import annotations

import json
from decimal import Decimal

from fastapi import APIRouter, HTTPException, Request, status
from starlette.concurrency import run_in_threadpool

from app.api.deps import Database, DatabaseDep, OwnerKey, SettingsDep, StorageDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.api.uploads import UploadSlots, storage_unavailable
from app.auth.service import Principal
from app.config import Settings
from app.datasets import service as dataset_service
from app.datasets.ingest import UploadRejected
from app.datasets.schemas import DatasetOut
from app.drafts import service as draft_service
from app.drafts.schemas import SchemaDraftOut
from app.sources import service
from app.sources.reading import SourceChanged, SourceSpec, head
from app.sources.schemas import RegisterRequest, SourceDraftRequest
from app.storage import Storage

router = APIRouter(
    prefix="/v1/datasets",
    tags=["datasets"],
    route_class=FiniteJSONRoute,
    responses=error_responses(400, 401, 403, 404, 413, 422),
)


@router.post(
    "/sources",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetOut,
    responses=error_responses(409, 503),
)
async def register_dataset(
    body: RegisterRequest,
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    storage: StorageDep,
    principal: OwnerKey,
) -> DatasetOut:
    """Register a dataset that lives in a source (owner keys): a Parquet or CSV file or
    directory on the object store or an allowed local path, or a PostgreSQL table or query
    through an operator-named connection. Every row is checked as an upload's would be; nothing
    is kept unless ``keep_copy``."""
    if principal.datasets is not None:
        raise HTTPException(403, "a dataset-limited key cannot create datasets")
    try:
        spec = SourceSpec(**body.source.model_dump())
        parsed = await run_in_threadpool(
            dataset_service.parse_upload_form,
            body.name,
            str(body.budget_rho),
            json.dumps(body.schema_),
            settings,
            str(body.budget_delta),
            None if body.discovery_rho is None else str(body.discovery_rho),
        )
        slots: UploadSlots = request.app.state.upload_slots
        with slots.hold():
            return await run_in_threadpool(
                _register,
                db,
                settings,
                storage,
                principal,
                spec,
                parsed,
                body.keep_copy,
            )
    except UploadRejected as rejected:
        raise HTTPException(rejected.status_code, rejected.message) from None
    except SourceChanged as changed:
        raise HTTPException(409, f"{changed} (it changed while it was read)") from None
    except OSError as error:
        raise storage_unavailable("registration", error) from None


def _register(
    db: Database,
    settings: Settings,
    storage: Storage,
    principal: Principal,
    spec: SourceSpec,
    parsed: dataset_service.UploadForm,
    keep_copy: bool,
) -> DatasetOut:
    with db.transaction() as session:
        dataset = service.register_dataset(
            session,
            settings,
            storage,
            principal,
            name=parsed.name,
            spec=spec,
            schema=parsed.schema,
            total_rho=parsed.total_rho,
            total_delta=parsed.total_delta or Decimal(0),
            discovery_rho=parsed.discovery_rho,
            keep_copy=keep_copy,
        )
        state = dataset_service.account_of(session, dataset.id)
    return dataset_service.dataset_out(dataset, state, principal)


drafts_router = APIRouter(
    prefix="/v1/schema-drafts",
    tags=["datasets"],
    route_class=FiniteJSONRoute,
    responses=error_responses(400, 401, 403, 404, 413, 415, 422, 503),
)

# Rows of a PostgreSQL source a draft reads (a file source: its first file, at most
# RHOSYNTH_MAX_DRAFT_BYTES; the draft then samples RHOSYNTH_DRAFT_SAMPLE_BYTES of values).
DRAFT_HEAD_ROWS = 100_000


@drafts_router.post("/sources", response_model=SchemaDraftOut)
async def draft_from_source(
    body: SourceDraftRequest,
    request: Request,
    settings: SettingsDep,
    storage: StorageDep,
    principal: OwnerKey,
) -> SchemaDraftOut:
    """Propose a schema for a source (owner keys), from its head: the first file of a
    directory or prefix, or the first rows of a PostgreSQL source. Nothing is stored.

    Not for dataset-limited keys: unlike an upload's draft (the caller's own file), this reads
    data the key was not given (with ``show_values``, its raw values), as registering would."""
    if principal.datasets is not None:
        raise HTTPException(403, "a dataset-limited key cannot read sources")
    try:
        spec = SourceSpec(**body.source.model_dump())
        missing = draft_service.parse_missing_values(
            None if body.missing_values is None else json.dumps(body.missing_values)
        )
        slots: UploadSlots = request.app.state.upload_slots
        with slots.hold():
            return await run_in_threadpool(
                _draft, settings, storage, spec, missing, body.show_values
            )
    except UploadRejected as rejected:
        raise HTTPException(rejected.status_code, rejected.message) from None
    except OSError as error:
        raise storage_unavailable("schema draft", error) from None


def _draft(
    settings: Settings,
    storage: Storage,
    spec: SourceSpec,
    missing: tuple[str, ...],
    show_values: bool,
) -> SchemaDraftOut:
    with head(
        spec, settings, storage, max_bytes=settings.max_draft_bytes, rows=DRAFT_HEAD_ROWS
    ) as path:
        return draft_service.draft_for_upload(
            path, settings, missing_values=missing, show_values=show_values
        )
