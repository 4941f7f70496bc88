"""``GET /v1/jobs/{id}`` answered below the framework (issue 24 §4).

Clients poll a job's status, so a burst of 200 simultaneous reads of it is the API's heaviest
read, and its p99 is about the API's own CPU for 200 reads under one GIL (1.19–1.38 s in three
runs through the FastAPI route against the 1 s target; docs/benchmarks.md, "Bursts of
simultaneous requests"). Part of that CPU is FastAPI's: routing over every route, dependency
solving, response validation, and two hops between the event loop and the thread pool.

:class:`PolledJobRead` is a pure ASGI middleware that answers the canonical form of this one
request itself, from the same functions the FastAPI route calls, and hands everything else to
the app unchanged. It answers only ``GET /v1/jobs/<lower-case hyphenated UUID>`` without a body;
any other spelling of the path, a body, or another method goes to the route, so edge cases keep
the framework's answers (422 for a malformed id, 405, 413, ...). It is the outermost of the
app's own middlewares, still inside Starlette's error middleware: an unexpected exception is
answered 500 and logged as before.

What it keeps, in the route's order (:class:`app.api.deps.KeyedRead`):

1. the failed-key throttle of the peer address (429 with ``Retry-After``) before anything else;
2. the ``Authorization: Bearer`` header, parsed as :class:`fastapi.security.HTTPBearer` does
   (401 with ``WWW-Authenticate`` when missing or malformed), before any database work;
3. the key looked up in the read's own session on a thread of the API's request pool (the same
   AnyIO limiter as FastAPI's sync routes), a failed lookup counted by the throttle (401);
4. the job read for the key's tenant only (404 "job not found" for another tenant's job, by the
   same query as for an unknown one) and shown by :func:`app.jobs.service.job_read`, the route's
   own view (owner-only fields by role; a queued job's place, counted on the queue of the
   minute before the last whole one), serialised by pydantic-core as FastAPI's fast path does;
5. the database's unavailability answered 503 as the app's handler does.

Its answers are byte for byte those of the route: ``tests/app/test_polled_read.py`` compares
both, with the middleware on and off (``RHOSYNTH_POLLED_JOB_READ``), for every job status, both
roles, parameters whose floats JSON writers spell differently, every refusal, a database that
times out or fails, and an unexpected error. The route stays: it is the reference, it is what
OpenAPI documents, and it answers every request this middleware hands on.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import anyio.to_thread
from fastapi import HTTPException, status
from fastapi.responses import JSONResponse
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy import exc
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import (
    ApiResources,
    check_key,
    missing_key,
    require_data_key,
    throttle_refusal,
)
from app.api.errors import database_unavailable_response
from app.auth.throttle import FailedAuthThrottle
from app.db.session import read_only_session
from app.jobs import service

# The canonical spelling only (what the API itself writes in every job's URL and id): anything
# else, e.g. upper-case or unhyphenated ids that FastAPI's UUID parser also accepts, goes to the
# route, so that both paths agree on what each spelling means.
_PATH = re.compile(
    r"/v1/jobs/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})",
)


def _route_path(scope: Scope) -> str:
    """The path as Starlette's router matches it: without the server's ``root_path`` (as
    ``starlette._utils.get_route_path``, a private helper, does it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root) :] if path[len(root)] == "/" else path


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower case), as Starlette's ``Headers.get`` gives."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def _has_body(scope: Scope) -> bool:
    """Whether the request announces a body (the route's middleware limits and reads those)."""
    if _header(scope, b"transfer-encoding") is not None:
        return True
    length = _header(scope, b"content-length")
    return length is not None and length.strip() != b"0"


def _error(error: HTTPException) -> Response:
    """FastAPI's answer to ``error`` (``fastapi.exception_handlers.http_exception_handler``)."""
    return JSONResponse({"detail": error.detail}, error.status_code, headers=error.headers)


class PolledJobRead:
    """Answers ``GET /v1/jobs/{id}`` as the route does, without the framework (module doc)."""

    def __init__(self, app: ASGIApp, *, enabled: bool = True) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            not self.enabled
            or scope["type"] != "http"
            or scope["method"] != "GET"
            # The path as the router matches it (without the server's root_path).
            or (match := _PATH.fullmatch(_route_path(scope))) is None
            or _has_body(scope)
        ):
            await self.app(scope, receive, send)
            return
        response = await self._answer(scope, uuid.UUID(match.group(1)))
        await response(scope, receive, send)

    async def _answer(self, scope: Scope, job_id: uuid.UUID) -> Response:
        state: Any = scope["app"].state
        resources: ApiResources = state.resources
        throttle: FailedAuthThrottle = state.auth_throttle
        client = scope.get("client")
        address = client[0] if client else "unknown"
        if (refused := throttle_refusal(throttle, address)) is not None:
            return _error(refused)
        # HTTPBearer(auto_error=False): no header, no scheme or no credentials → None.
        authorization = _header(scope, b"authorization")
        scheme, presented = get_authorization_scheme_param(
            authorization.decode("latin-1") if authorization is not None else None
        )
        if not (authorization and scheme and presented) or scheme.lower() != "bearer":
            return _error(missing_key())

        def read() -> Response:
            with read_only_session(resources.factory) as session:
                principal = require_data_key(
                    check_key(session, resources.secret, throttle, address, presented)
                )
                try:
                    out = service.job_read(session, principal, job_id)
                except service.JobNotFound:
                    raise HTTPException(status.HTTP_404_NOT_FOUND, "job not found") from None
            # FastAPI's fast path for a response model: pydantic-core writes the JSON (its
            # floats are spelled unlike json.dumps's: 0.00001, not 1e-05).
            return Response(out.model_dump_json(), media_type="application/json")

        try:
            return await anyio.to_thread.run_sync(read)
        except HTTPException as error:
            return _error(error)
        except (exc.OperationalError, exc.TimeoutError) as error:
            return database_unavailable_response(error)
