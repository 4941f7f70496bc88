"""The documented error body and the error responses each route declares in OpenAPI."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorOut, "description": _DESCRIPTIONS[code]} for code in codes}
