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
from app.sources import service
from app.sources.reading import SourceChanged, SourceSpec
from app.sources.schemas import RegisterRequest
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
