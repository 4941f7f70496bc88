"""Routes of a release's artefacts: the two-tier report and the noisy measurements."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import JSONResponse, Response, StreamingResponse

from app.api.deps import AnalystKey, DatabaseDep, StorageDep
from app.api.errors import error_responses
from app.jobs import service as job_service
from app.reports import names, service

router = APIRouter(
    prefix="/v1",
    tags=["reports"],
    responses=error_responses(401, 403, 404, 409, 410, 422),
)

# A report is one self-contained page: it may show its inline styles and data: images, and
# nothing else (no script, no request to any host).
REPORT_CSP = (
    "default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
OWNER_TIER_RETRY_AFTER_SECONDS = 5
"""Retry-After of the owner tier's 202 while a reports worker builds it."""

MEDIA_TYPES = {
    "json": "application/json",
    "html": "text/html; charset=utf-8",
    "parquet": "application/vnd.apache.parquet",
    "npz": "application/octet-stream",
}


def _serve(
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    job_id: uuid.UUID,
    name: str,
    format: str,
    missing: str,
) -> Response:
    try:
        with db.transaction() as session:
            job, key = service.stored_artefact(session, storage, principal, job_id, name)
    except job_service.JobNotFound:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "job not found") from None
    except service.OwnersOnly:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            "the owner tier compares the release with the real table: owner keys only",
        ) from None
    except job_service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except job_service.OutputGone:
        raise HTTPException(
            status.HTTP_410_GONE, "the release was erased with its dataset"
        ) from None
    except service.OwnerTierBuilding:
        return JSONResponse(
            {
                "status": "building",
                "detail": "the owner tier of this report is being built after the release; "
                "ask again in a few seconds",
            },
            status_code=status.HTTP_202_ACCEPTED,
            headers={"Retry-After": str(OWNER_TIER_RETRY_AFTER_SECONDS)},
        )
    except service.ArtefactMissing:
        raise HTTPException(status.HTTP_404_NOT_FOUND, missing) from None
    headers = {"X-Content-Type-Options": "nosniff"}
    if format == "html":
        headers["Content-Security-Policy"] = REPORT_CSP
    else:
        filename = f"rhosynth-{job.id}-{name}"
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return StreamingResponse(
        storage.iter_bytes(key), media_type=MEDIA_TYPES[format], headers=headers
    )


@router.get(
    "/jobs/{job_id}/report",
    response_model=None,
    responses={
        200: {"content": {"application/json": {}, "text/html": {}}},
        202: {"description": "owner tier: still being built (`status: building`, Retry-After)"},
    },
)
def get_report(
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    format: Annotated[Literal["json", "html"], Query()] = "json",
    tier: Annotated[Literal["release", "owner"], Query()] = "release",
) -> Response:
    """The quality report of a succeeded job. ``tier=release`` (every key): built from the
    release alone (its noisy measurements, model and rows), at no privacy cost. ``tier=owner``
    (owner keys): the release compared with the real table. docs/reports.md explains each
    number."""
    if tier == "owner":
        name = names.OWNER_HTML if format == "html" else names.OWNER_JSON
    else:
        name = names.RELEASE_HTML if format == "html" else names.RELEASE_JSON
    return _serve(
        db,
        storage,
        principal,
        job_id,
        name,
        format,
        f"this release has no {tier}-tier report (it predates reports, or it could not be built)",
    )


@router.get(
    "/jobs/{job_id}/measurements",
    response_model=None,
    responses={200: {"content": {"application/json": {}, "application/vnd.apache.parquet": {}}}},
)
def get_measurements(
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    format: Annotated[Literal["json", "parquet", "npz"], Query()] = "json",
) -> Response:
    """Every noisy marginal the job measured (the contingency tables), labelled with the
    dataset's public domain: one row per cell in Parquet; per marginal in JSON; ``npz``: the
    release record itself, for ``rhosynth report --record``. These are the DP measurements
    themselves; the synthetic rows are post-processing of them."""
    name = {
        "parquet": names.MEASUREMENTS_PARQUET,
        "json": names.MEASUREMENTS_JSON,
        "npz": names.RECORD,
    }[format]
    missing = (
        "this release has no measurements in JSON (it predates them, or it measured too many "
        "cells to list: use format=parquet)"
        if format == "json"
        else "this release has no stored measurements (it predates them)"
    )
    return _serve(db, storage, principal, job_id, name, format, missing)


@router.get(
    "/jobs/{job_id}/model",
    response_model=None,
    responses={200: {"content": {"application/octet-stream": {}}}},
)
def get_model(
    job_id: uuid.UUID, db: DatabaseDep, storage: StorageDep, principal: AnalystKey
) -> Response:
    """The job's fitted model with the dataset's public schema: a DP output (built from the
    noisy measurements only). ``rhosynth sample MODEL --rows n --seed s`` draws rows from it
    locally, at no privacy cost, as ``POST /v1/jobs/{id}/samples`` does on the server."""
    return _serve(
        db,
        storage,
        principal,
        job_id,
        names.MODEL,
        "npz",
        "this release has no saved model (its method keeps none, or it predates saved models)",
    )
