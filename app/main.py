"""Builds the FastAPI application."""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import text
from starlette.types import Scope

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
    app = FastAPI(title="rhosynth", version="0.1.0", description=DESCRIPTION)
    app.state.settings = settings
    app.include_router(datasets_router)
    app.include_router(jobs_router)
    app.include_router(auth_router)

    def body_limit(scope: Scope) -> int:
        if scope.get("method") == "POST" and scope.get("path", "").rstrip("/") == "/v1/datasets":
            return settings.max_upload_bytes
        return settings.max_json_body_bytes

    app.add_middleware(BodySizeLimitMiddleware, limit_for=body_limit)

    @app.get(
        "/healthz",
        tags=["health"],
        responses={200: {"description": "ready"}, 503: {"description": "database unreachable"}},
    )
    def healthz() -> JSONResponse:
        """200 once the API can reach its database."""
        try:
            with get_engine(settings.sqlalchemy_url).connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception:
            logger.warning("health check: database unreachable", exc_info=True)
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok"})

    return app
