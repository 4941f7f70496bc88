"""Derived-sample routes: draw more rows from a succeeded job's model, for free."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from fastapi import APIRouter, HTTPException, Query, status
from fastapi.responses import StreamingResponse

from app.api.deps import AnalystKey, DatabaseDep, SettingsDep, StorageDep
from app.api.errors import error_responses
from app.api.limits import FiniteJSONRoute
from app.jobs import service as job_service
from app.jobs.export import table_download
from app.samples import service
from app.samples.schemas import SampleList, SampleOut, SampleRequest

router = APIRouter(
    prefix="/v1",
    tags=["samples"],
    responses=error_responses(400, 401, 404, 422),
    route_class=FiniteJSONRoute,
)


def _not_found(what: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"{what} not found")


@router.post(
    "/jobs/{job_id}/samples",
    status_code=status.HTTP_202_ACCEPTED,
    response_model=SampleOut,
    responses=error_responses(409, 410, 429),
)
def create_sample(
    job_id: uuid.UUID,
    body: SampleRequest,
    db: DatabaseDep,
    settings: SettingsDep,
    principal: AnalystKey,
) -> SampleOut:
    """Draw a new synthetic table from the job's fitted model: post-processing of the published
    release, so it costs no ρ and leaves the ledger untouched. The same seed gives the same rows."""
    try:
        with db.transaction() as session:
            sample = service.create_sample(session, settings, principal, job_id, body)
            out = service.sample_out(sample)
    except job_service.JobNotFound:
        raise _not_found("job") from None
    except job_service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except job_service.OutputGone:
        raise HTTPException(
            status.HTTP_410_GONE, "the release was erased with its dataset"
        ) from None
    except service.InvalidSample as error:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, str(error)) from None
    except service.SampleQuotaExceeded as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except service.TooManySamples as error:
        raise HTTPException(
            status.HTTP_429_TOO_MANY_REQUESTS,
            f"this tenant already has {error.args[0]} samples queued or running; retry later",
            headers={"Retry-After": "5"},
        ) from None
    return out


@router.get("/jobs/{job_id}/samples", response_model=SampleList)
def list_samples(
    job_id: uuid.UUID,
    db: DatabaseDep,
    principal: AnalystKey,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**31)] = 0,
) -> SampleList:
    """The job's derived samples, oldest first."""
    try:
        with db.transaction() as session:
            samples = service.list_samples(
                session, principal, job_id, limit=limit + 1, offset=offset
            )
            items = [service.sample_out(s) for s in samples[:limit]]
    except job_service.JobNotFound:
        raise _not_found("job") from None
    return SampleList(items=items, next_offset=offset + limit if len(samples) > limit else None)


@router.get("/samples/{sample_id}", response_model=SampleOut)
def get_sample(sample_id: uuid.UUID, db: DatabaseDep, principal: AnalystKey) -> SampleOut:
    """A derived sample's status."""
    try:
        with db.transaction() as session:
            return service.sample_out(service.get_sample(session, principal, sample_id))
    except service.SampleNotFound:
        raise _not_found("sample") from None


@router.get(
    "/samples/{sample_id}/output",
    response_model=None,
    responses={
        200: {"content": {"text/csv": {}, "application/vnd.apache.parquet": {}}},
        **error_responses(409, 410),
    },
)
def download_sample(
    sample_id: uuid.UUID,
    db: DatabaseDep,
    storage: StorageDep,
    principal: AnalystKey,
    format: Annotated[Literal["csv", "parquet"], Query()] = "csv",
) -> StreamingResponse:
    """Download a derived sample (CSV or Parquet), typed like the job's output."""
    try:
        with db.transaction() as session:
            sample, key = service.output_key(session, storage, principal, sample_id)
    except service.SampleNotFound:
        raise _not_found("sample") from None
    except job_service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
    except job_service.OutputGone:
        raise HTTPException(
            status.HTTP_410_GONE, "the sample was erased with its dataset"
        ) from None
    except service.SampleGone as error:
        raise HTTPException(status.HTTP_410_GONE, str(error)) from None
    return table_download(storage, key, format, f"rhosynth-sample-{sample.id}")


@router.delete(
    "/samples/{sample_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    response_model=None,
    responses=error_responses(409),
)
def delete_sample(
    sample_id: uuid.UUID, db: DatabaseDep, storage: StorageDep, principal: AnalystKey
) -> None:
    """Delete a finished sample's output; its rows stop counting against the tenant's quota.
    The sample stays listed with status `deleted`. A queued or running sample answers 409."""
    try:
        with db.transaction() as session:
            service.delete_sample(session, storage, principal, sample_id)
    except service.SampleNotFound:
        raise _not_found("sample") from None
    except job_service.JobConflict as error:
        raise HTTPException(status.HTTP_409_CONFLICT, str(error)) from None
