"""Builds the FastAPI application."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc, text
from starlette.types import Scope

from app.api.deps import pool_options
from app.api.errors import validation_error_handler
from app.api.limits import BodySizeLimitMiddleware
from app.auth.endpoints import router as auth_router
from app.config import Settings, get_settings
from app.datasets.endpoints import router as datasets_router
from app.db.session import get_engine
from app.jobs.endpoints import router as jobs_router

logger = logging.getLogger(__name__)

DESCRIPTION = """\
Differentially private (ρ-zCDP) synthetic copies of tabular datasets.

Owners upload a table with a declared schema and a total privacy budget ρ; analysts request
releases, which are charged to the dataset's append-only ledger. A request that would exceed the
remaining budget is refused. Authenticate with `Authorization: Bearer <key>`.
"""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # redirect_slashes=False: Starlette's slash redirect builds an absolute URL from the Host
    # header (http://evil.example/...); "/v1/datasets/" answers 404 instead.
    app = FastAPI(
        title="rhosynth", version="0.1.0", description=DESCRIPTION, redirect_slashes=False
    )
    app.state.settings = settings
    app.include_router(datasets_router)
    app.include_router(jobs_router)
    app.include_router(auth_router)

    def body_limit(scope: Scope) -> int:
        if scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == "/v1/datasets":
            return settings.max_upload_bytes
        return settings.max_json_body_bytes

    app.add_middleware(BodySizeLimitMiddleware, limit_for=body_limit)
    app.add_exception_handler(RequestValidationError, validation_error_handler)

    @app.exception_handler(exc.OperationalError)
    @app.exception_handler(exc.TimeoutError)
    def database_unavailable(_request: Request, error: Exception) -> JSONResponse:
        # No pooled connection came free in time, or PostgreSQL kept refusing new ones, or the
        # connection dropped. The request's transaction was rolled back (if the connection died
        # during COMMIT the outcome is unknown); a retry with the same Idempotency-Key is safe.
        logger.warning("database unavailable: %s", type(error).__name__, exc_info=True)
        return JSONResponse(
            {"detail": "the service is busy or its database is unreachable; retry shortly"},
            status_code=503,
            headers={"Retry-After": "1"},
        )

    @app.get(
        "/healthz",
        tags=["health"],
        responses={200: {"description": "ready"}, 503: {"description": "database unreachable"}},
    )
    def healthz() -> JSONResponse:
        """200 once the API can reach its database."""
        try:
            engine = get_engine(settings.sqlalchemy_url, pool_options(settings))
            with engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception:
            logger.warning("health check: database unreachable", exc_info=True)
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return app
