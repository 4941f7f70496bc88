"""Typed errors of the rhosynth API: every error response becomes one of these, carrying the
server's ``detail`` (which never contains a value of an uploaded table) and its HTTP status."""

from __future__ import annotations

from decimal import Decimal
from typing import Any


class ApiError(Exception):
    """An error answer of the API (or no answer at all: ``status`` is None).

    ``detail`` is the server's ``detail``: a sentence, or FastAPI's list of validation errors.
    """

    def __init__(self, status: int | None, detail: str | list[dict[str, Any]]) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{status}: {describe(detail)}" if status else describe(detail))


class BadRequest(ApiError):
    """400: a malformed request."""


class Unauthorized(ApiError):
    """401: a missing or invalid API key."""


class Forbidden(ApiError):
    """403: the key's role does not allow this (e.g. an analyst key uploading)."""


class NotFound(ApiError):
    """404: no such object for this tenant."""


class Conflict(ApiError):
    """409: the object's state does not allow this (job not finished, dataset deleted, ...)."""


class OverBudget(Conflict):
    """409: the job's ρ exceeds the dataset's remaining ρ; nothing was reserved."""

    def __init__(
        self,
        detail: str,
        requested_rho: Decimal,
        remaining_rho: Decimal,
        delta: Decimal | None = None,
        requested_epsilon: Decimal | None = None,
        remaining_epsilon: Decimal | None = None,
        limit: str = "dataset",
        quota: str | None = None,
    ) -> None:
        super().__init__(409, detail)
        self.requested_rho = requested_rho
        self.remaining_rho = remaining_rho
        # Which limit refused ("dataset", "quota" or "unallocated") and the quota, if one did.
        self.limit = limit
        self.quota = quota
        # Set when the request gave (ε, δ): the ε of the request and of the remaining ρ at δ.
        self.delta = delta
        self.requested_epsilon = requested_epsilon
        self.remaining_epsilon = remaining_epsilon

    def __str__(self) -> str:
        return (
            f"409: {self.detail} (requested ρ {self.requested_rho}, "
            f"remaining ρ {self.remaining_rho})"
        )


class Gone(ApiError):
    """410: erased with its dataset."""


class TooLarge(ApiError):
    """413: the request body is over the server's limit."""


class UnsupportedMedia(ApiError):
    """415: unsupported content type or file format."""


class Invalid(ApiError):
    """422: an invalid request; nothing was changed."""


class RateLimited(ApiError):
    """429: too many requests of this kind in progress; ``retry_after`` seconds, if given."""

    def __init__(
        self, status: int | None, detail: str | list[dict[str, Any]], retry_after: float | None
    ) -> None:
        super().__init__(status, detail)
        self.retry_after = retry_after


class Unavailable(ApiError):
    """503 after every retry, or no connection to the service (``status`` None)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: TooLarge,
    415: UnsupportedMedia,
    422: Invalid,
    503: Unavailable,
}


def describe(detail: str | list[dict[str, Any]]) -> str:
    """One line for a ``detail``: the sentence, or each validation error as ``loc: msg``."""
    if isinstance(detail, str):
        return detail
    parts = []
    for item in detail:
        location = ".".join(str(part) for part in item.get("loc", ()))
        message = str(item.get("msg", item))
        parts.append(f"{location}: {message}" if location else message)
    return "; ".join(parts)


def error_for(status: int, body: Any, retry_after: float | None = None) -> ApiError:
    """The typed error for an error response's status and (decoded JSON) body."""
    detail: str | list[dict[str, Any]]
    if isinstance(body, dict) and isinstance(body.get("detail"), str | list):
        detail = body["detail"]
    else:
        detail = str(body)[:500] if body else f"HTTP {status}"
    if (
        status == 409
        and isinstance(body, dict)
        and "requested_rho" in body
        and "remaining_rho" in body
        and isinstance(detail, str)
    ):
        optional = {
            key: None if body.get(key) is None else Decimal(str(body[key]))
            for key in ("delta", "requested_epsilon", "remaining_epsilon")
        }
        return OverBudget(
            detail,
            Decimal(str(body["requested_rho"])),
            Decimal(str(body["remaining_rho"])),
            **optional,
            limit=str(body.get("limit") or "dataset"),
            quota=None if body.get("quota") is None else str(body["quota"]),
        )
    if status == 429:
        return RateLimited(status, detail, retry_after)
    return _BY_STATUS.get(status, ApiError)(status, detail)
