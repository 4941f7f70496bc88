"""The documented error body and the error responses each route declares in OpenAPI."""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy import exc

from app.api.types import public_location
from app.db.session import note_pool_timeout

logger = logging.getLogger(__name__)


class ErrorOut(BaseModel):
    """Every error is ``{"detail": ...}``: a sentence, or FastAPI's list of validation errors."""

    detail: str | list[dict[str, Any]] = Field(
        description="what went wrong; never contains values from an uploaded table"
    )


_DESCRIPTIONS = {
    400: "malformed request",
    401: "missing or invalid API key",
    403: "the key's role does not allow this",
    404: "no such object for this tenant",
    409: "the object's state does not allow this",
    410: "erased with its dataset",
    413: "request body over the limit",
    415: "unsupported content type or file format",
    422: "invalid request (nothing was changed)",
    429: "too many requests of this kind in progress; retry after the Retry-After delay",
    503: "temporarily unavailable; retry after the Retry-After delay",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": _DESCRIPTIONS[code]} for code in codes}


def _json_safe(value: Any) -> Any:
    """``value`` if it can be written as strict JSON, else its text (e.g. ``nan``, ``inf``)."""
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return str(value)[:200]
    return value


async def validation_error_handler(_request: Request, error: Exception) -> JSONResponse:
    """FastAPI's 422 body, with any value strict JSON cannot hold turned into text and union
    tags left out of each location (app.api.types.public_location).

    FastAPI's own handler fails (500) when an error's ``input`` or ``ctx`` holds NaN or
    Infinity, for example a query parameter ``nan`` given for a float.
    """
    assert isinstance(error, RequestValidationError)
    details = []
    for item in error.errors():
        encoded = jsonable_encoder(item)
        if "loc" in encoded:
            encoded["loc"] = public_location(encoded["loc"])
        details.append({str(key): _json_safe(value) for key, value in encoded.items()})
    return JSONResponse({"detail": details}, status_code=422)


def database_unavailable_response(error: Exception) -> JSONResponse:
    """The answer to a request whose database work failed for want of the database: 503 with
    ``Retry-After`` (the app's handler of SQLAlchemy's OperationalError and TimeoutError, and
    app.jobs.polled_read's)."""
    # No pooled connection came free in time, or PostgreSQL kept refusing new ones, or the
    # connection dropped. The request's transaction was rolled back (if the connection died
    # during COMMIT the outcome is unknown); a retry with the same Idempotency-Key is safe.
    # exc_info=error, not True: Starlette calls the app's handler outside the except block,
    # where exc_info=True would log "NoneType: None" instead of the cause.
    if isinstance(error, exc.TimeoutError):
        note_pool_timeout()  # /healthz reports the pool while this lasts
    logger.warning(
        "database unavailable, answering 503: %s: %s",
        type(error).__name__,
        str(error).strip().splitlines()[0] if str(error).strip() else "",
        exc_info=error,
    )
    return JSONResponse(
        {"detail": "the service is busy or its database is unreachable; retry shortly"},
        status_code=503,
        headers={"Retry-After": "1"},
    )
