"""Job routes: submit, read, list, cancel, download; and the method catalogue."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, Header, HTTPException, Query, status
from fastapi.responses import JSONResponse, StreamingResponse
from sqlalchemy.orm import Session

from app.api.deps import (
    AnalystKey,
    AnalystRead,
    Database,
    DatabaseDep,
    OwnerKey,
    SettingsDep,
    StorageDep,
)
from app.api.errors import ErrorOut, error_responses
from app.api.limits import FiniteJSONRoute
from app.auth.service import Principal
from app.budget.service import BudgetExceeded, QuotaRequired
from app.jobs import approvals, partitioned_output, preview, service
from app.jobs.export import parts_download, table_download
from app.jobs.schemas import (
    ApprovalList,
    ApprovalOut,
    JobList,
    JobOut,
    JobPreview,
    JobRequest,
    MethodList,
    MethodOut,
    OutputPartOut,
    OutputPartsOut,
    OverBudgetOut,
    RejectIn,
)
from app.storage import Storage
from engine.mechanisms import MECHANISMS

router = APIRouter(
    prefix="/v1",
    tags=["jobs"],
    responses=error_responses(400, 401, 403, 404, 413, 422),
    route_class=FiniteJSONRoute,
)


def _job_not_found() -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, "job not found")


@router.post(
    "/datasets/{dataset_id}/jobs",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=JobOut,
    responses={
        200: {
            "model": JobPreview,
            "description": "dry_run=true: what the job would cost; nothing reserved or written",
        },
        409: {
            "model": OverBudgetOut | ErrorOut,
            "description": "over budget (OverBudgetOut), key reused, or dataset deleted",
        },
    },
)
def submit_job(
    dataset_id: uuid.UUID,
    body: JobRequest,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: AnalystKey,
    idempotency_key: Annotated[
        str | None,
        Header(max_length=255, description="repeat a request safely: same key + body = same job"),
    ] = None,
    dry_run: Annotated[
        bool,
        Query(
            description="validate exactly as a submission and answer 200 with the job's cost "
            "(ρ, (ε, δ), remaining budget, first noise, predicted time and memory); nothing is "
            "reserved or written and the Idempotency-Key is ignored"
        ),
    ] = False,
) -> JobOut | JSONResponse:
    """Ask for a synthetic release. Reserves the job's ρ now; a worker charges it when it starts.
    With ``dry_run=true``, only say what it would cost."""
    try:
        with db.transaction() as session:
            if dry_run:
                cost = preview.preview_job(session, settings, principal, dataset_id, body)
                return JSONResponse(cost.model_dump(mode="json"), status_code=status.HTTP_200_OK)
            job, _created = service.submit_job(
                session, settings, principal, dataset_id, body, idempotency_key
            )
            out = service.job_out(job, principal)
    except LookupError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "dataset not found") from None
    except service.InvalidJob as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
    except service.IdempotencyMismatch as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.DatasetUnavailable:
        raise HTTPException(status.HTTP_409_CONFLICT, "the dataset was deleted") from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except QuotaRequired as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except BudgetExceeded as error:
        body_out = service.over_budget_out(dataset_id, body, error)
        return JSONResponse(body_out.model_dump(mode="json"), status_code=status.HTTP_409_CONFLICT)
    return out


@router.get("/datasets/{dataset_id}/jobs", response_model=JobList)
def list_jobs(
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    principal: AnalystKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> JobList:
    """The dataset's jobs, oldest first."""
    try:
        with db.transaction() as session:
            jobs = service.list_jobs(session, principal, dataset_id, limit=limit + 1, offset=offset)
    except LookupError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "dataset not found") from None
    return JobList(
        items=[service.job_out(job, principal) for job in jobs[:limit]],
        next_offset=offset + limit if len(jobs) > limit else None,
    )


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job_id: uuid.UUID, read: AnalystRead) -> JobOut:
    """A job's status, progress and timing."""
    with read.session() as (session, principal):
        return _job_view(session, principal, job_id)


def job_for(job_id: uuid.UUID, db: Database, principal: Principal) -> JobOut:
    """What ``GET /v1/jobs/{id}`` answers, for a caller already authenticated (the console)."""
    with db.read() as session:
        return _job_view(session, principal, job_id)


def _job_view(session: Session, principal: Principal, job_id: uuid.UUID) -> JobOut:
    try:
        return service.job_read(session, principal, job_id)
    except service.JobNotFound:
        raise _job_not_found() from None


@router.post(
    "/jobs/{job_id}/cancel",
    response_model=JobOut,
    status_code=status.HTTP_202_ACCEPTED,
    responses=error_responses(409),
)
def cancel_job(
    job_id: uuid.UUID, db: DatabaseDep, settings: SettingsDep, principal: AnalystKey
) -> JobOut:
    """Cancel a job. Queued: cancelled and its reservation released. Running: stopped at the
    next stage; its budget stays spent and no output is released."""
    try:
        with db.transaction() as session:
            job = service.cancel_job(session, principal, job_id, settings)
    except service.JobNotFound:
        raise _job_not_found() from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    return service.job_out(job, principal)


@router.get(
    "/datasets/{dataset_id}/approvals",
    response_model=ApprovalList,
    tags=["approvals"],
)
def list_approvals(
    dataset_id: uuid.UUID,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: OwnerKey,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
) -> ApprovalList:
    """Jobs waiting for an owner's approval, oldest first, each with its dry-run cost."""
    try:
        with db.transaction() as session:
            pending = approvals.list_pending(session, settings, principal, dataset_id, limit)
            items = [
                ApprovalOut(
                    job=service.job_out(p.job, principal),
                    preview=p.preview,
                    preview_error=p.preview_error,
                )
                for p in pending
            ]
    except LookupError:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "dataset not found") from None
    return ApprovalList(items=items)


@router.post(
    "/jobs/{job_id}/approve",
    response_model=JobOut,
    responses=error_responses(409),
    tags=["approvals"],
)
def approve_job(
    job_id: uuid.UUID, db: DatabaseDep, settings: SettingsDep, principal: OwnerKey
) -> JobOut:
    """Approve a job waiting for approval: it is queued (its budget is already reserved)."""
    try:
        with db.transaction() as session:
            job = approvals.approve_job(session, settings, principal, job_id)
            out = service.job_out(job, principal)
    except service.JobNotFound:
        raise _job_not_found() from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    return out


@router.post(
    "/jobs/{job_id}/reject",
    response_model=JobOut,
    responses=error_responses(409),
    tags=["approvals"],
)
def reject_job(
    job_id: uuid.UUID,
    body: RejectIn,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: OwnerKey,
) -> JobOut:
    """Reject a job waiting for approval, with a reason the analyst sees; its reservation is
    released (it never ran)."""
    try:
        with db.transaction() as session:
            job = approvals.reject_job(session, principal, job_id, body.reason, settings)
            out = service.job_out(job, principal)
    except service.JobNotFound:
        raise _job_not_found() from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    return out


@router.get(
    "/jobs/{job_id}/output",
    response_model=None,
    responses={
        200: {"content": {"text/csv": {}, "application/vnd.apache.parquet": {}}},
        **error_responses(409, 410),
    },
)
def download_output(
    job_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    format: Annotated[Literal["csv", "parquet"], Query()] = "csv",
) -> StreamingResponse:
    """Download the synthetic table in the original value space (CSV or Parquet)."""
    try:
        with db.transaction() as session:
            job, key = service.output_key(session, storage, principal, job_id)
    except service.JobNotFound:
        raise _job_not_found() from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.OutputGone:
        raise HTTPException(
            status.HTTP_410_GONE, "the output was erased with its dataset"
        ) from None
    if partitioned_output.is_partitioned(key):
        # A large release: one CSV stream of every part; Parquet comes as parts (below).
        if format == "parquet":
            raise HTTPException(
                status.HTTP_409_CONFLICT,
                f"this release is a partitioned Parquet dataset: list its parts with GET "
                f"/v1/jobs/{job.id}/output/parts and download each one, or ask for format=csv",
            )
        keys = list(partitioned_output.iter_part_keys(storage, key))
        return parts_download(storage, keys, f"rhosynth-{job.id}")
    return table_download(storage, key, format, f"rhosynth-{job.id}")


def _partitioned_key(
    db: Database, storage: Storage, principal: Principal, job_id: uuid.UUID
) -> str:
    """The manifest key of a job's partitioned output (404, 409, 410 as for the output)."""
    try:
        with db.transaction() as session:
            _job, key = service.output_key(session, storage, principal, job_id)
    except service.JobNotFound:
        raise _job_not_found() from None
    except service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.OutputGone:
        raise HTTPException(
            status.HTTP_410_GONE, "the output was erased with its dataset"
        ) from None
    if not partitioned_output.is_partitioned(key):
        raise HTTPException(
            status.HTTP_409_CONFLICT,
            f"this release is one file: download it with GET /v1/jobs/{job_id}/output",
        )
    return key


@router.get(
    "/jobs/{job_id}/output/parts",
    response_model=OutputPartsOut,
    responses=error_responses(409, 410),
)
def list_output_parts(
    job_id: uuid.UUID, db: DatabaseDep, storage: StorageDep, principal: AnalystKey
) -> OutputPartsOut:
    """The parts of a large release stored as a partitioned Parquet dataset, in row order."""
    key = _partitioned_key(db, storage, principal, job_id)
    manifest = partitioned_output.read_manifest(storage, key)
    return OutputPartsOut(
        format=str(manifest["format"]),
        rows=int(manifest["rows"]),
        parts=[
            OutputPartOut(
                name=str(part["name"]),
                rows=int(part["rows"]),
                bytes=int(part["bytes"]),
                url=f"/v1/jobs/{job_id}/output/parts/{part['name']}",
            )
            for part in manifest["parts"]
        ],
    )


@router.get(
    "/jobs/{job_id}/output/parts/{name}",
    response_model=None,
    responses={
        200: {"content": {"text/csv": {}, "application/vnd.apache.parquet": {}}},
        **error_responses(409, 410),
    },
)
def download_output_part(
    job_id: uuid.UUID,
    name: str,
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    format: Annotated[Literal["csv", "parquet"], Query()] = "parquet",
) -> StreamingResponse:
    """One part of a partitioned release (Parquet as stored, or CSV)."""
    key = _partitioned_key(db, storage, principal, job_id)
    if name not in partitioned_output.part_names(storage, key):
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such part")
    stem = name.removesuffix(".parquet")
    return table_download(
        storage, partitioned_output.part_key(key, name), format, f"rhosynth-{job_id}-{stem}"
    )


@router.get("/methods", response_model=MethodList, tags=["methods"])
def list_methods(principal: AnalystKey) -> MethodList:
    """The synthesis methods and the JSON schema of each one's params."""
    return MethodList(
        items=[
            MethodOut(
                name=m.name,
                description=m.description,
                params_schema=m.params_schema(),
                resamplable=m.resamplable,
            )
            for m in MECHANISMS.values()
        ]
    )
