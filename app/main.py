"""Builds the FastAPI application."""

from __future__ import annotations

import contextlib
import gc
import logging
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy import exc, text
from starlette.types import Scope

from app.api.deps import ApiResources
from app.api.docs import install_docs
from app.api.errors import database_unavailable_response, validation_error_handler
from app.api.limits import BodySizeLimitMiddleware
from app.api.request_id import RequestIdMiddleware
from app.api.strict_json import StrictJSONMiddleware
from app.api.uploads import UploadSlots
from app.audit.endpoints import router as audit_router
from app.auth.endpoints import keys_router
from app.auth.endpoints import router as auth_router
from app.auth.throttle import FailedAuthThrottle
from app.budget.endpoints import router as quotas_router
from app.config import Settings, get_settings
from app.console import endpoints as console
from app.datasets.endpoints import router as datasets_router
from app.db.session import get_health_engine, pool_health
from app.drafts.endpoints import router as drafts_router
from app.jobs.endpoints import router as jobs_router
from app.jobs.polled_read import PolledJobRead
from app.reports.endpoints import router as reports_router
from app.samples.endpoints import router as samples_router
from app.sources.endpoints import drafts_router as source_drafts_router
from app.sources.endpoints import router as sources_router
from app.storage import StorageUnavailable, open_storage
from app.webhooks.endpoints import router as webhooks_router

logger = logging.getLogger(__name__)
HEALTH_DEADLINE_SECONDS = 1.0

DESCRIPTION = """\
Differentially private (ρ-zCDP) synthetic copies of tabular datasets.

Owners upload a table with a declared schema and a total privacy budget ρ; analysts request
releases, which are charged to the dataset's append-only ledger. A request that would exceed the
remaining budget is refused. Authenticate with `Authorization: Bearer <key>`.
"""


# Routes whose bodies are files (RHOSYNTH_MAX_UPLOAD_BYTES, RHOSYNTH_MAX_DRAFT_BYTES); every
# other body is JSON. A multipart body carries the file plus its form fields and boundaries.
UPLOAD_PATH = "/v1/datasets"
DRAFT_PATH = "/v1/schema-drafts"
MULTIPART_OVERHEAD_BYTES = 64 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # Sync routes and dependencies run on AnyIO's default thread limiter (40 by default).
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        # Everything built so far (imported modules, the app, its routes and models) lives as
        # long as the process: move it out of the collector's generations, so that a full
        # collection during a burst walks only the requests' own objects. Without this, a burst
        # of 200 job reads set off full collections of 180-260 ms each (all requests paused);
        # with it, 14 ms (docs/benchmarks.md, "Bursts of simultaneous requests").
        gc.collect()
        gc.freeze()
        yield
        gc.unfreeze()  # an app built again in the same process (tests) starts afresh

    # redirect_slashes=False: Starlette's slash redirect builds an absolute URL from the Host
    # header (http://evil.example/...); "/v1/datasets/" answers 404 instead.
    app = FastAPI(
        title="rhosynth",
        version="0.1.0",
        description=DESCRIPTION,
        redirect_slashes=False,
        lifespan=lifespan,
        # FastAPI's own pages load Swagger UI and ReDoc from a CDN: these are served locally.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.resources = resources = ApiResources(settings)
    # Uploads and drafts reading at once, by the process's memory budget (app/api/uploads.py).
    app.state.upload_slots = UploadSlots(settings.upload_memory_budget_mb)
    # Failed key checks per client address (app/auth/throttle.py), per API process.
    app.state.auth_throttle = FailedAuthThrottle(
        settings.auth_failure_burst, settings.auth_failures_per_second
    )
    install_docs(app)
    app.include_router(sources_router)
    app.include_router(datasets_router)
    app.include_router(source_drafts_router)
    app.include_router(drafts_router)
    app.include_router(jobs_router)
    app.include_router(reports_router)
    app.include_router(samples_router)
    app.include_router(auth_router)
    app.include_router(keys_router)
    app.include_router(audit_router)
    app.include_router(webhooks_router)
    app.include_router(quotas_router)

    def body_limit(scope: Scope) -> int:
        path = scope.get("path", "").rstrip("/") if scope.get("method") == "POST" else None
        if path in (UPLOAD_PATH, console.UPLOAD_PATH):
            return settings.max_upload_bytes
        if path == DRAFT_PATH:
            draft = settings.max_draft_bytes + MULTIPART_OVERHEAD_BYTES
            return min(draft, settings.max_upload_bytes)
        return settings.max_json_body_bytes

    # Inside the body limit (added first: Starlette's last-added middleware is the outermost),
    # so it reads only bodies within the cap.
    app.add_middleware(StrictJSONMiddleware)
    app.add_middleware(BodySizeLimitMiddleware, limit_for=body_limit)
    # After the body limit, so the console's headers middleware wraps it and its 413s too.
    console.install(app)
    # The outermost of the app's middlewares (Starlette's error middleware still wraps it): the
    # polled job read answers below the framework (app/jobs/polled_read.py); it takes no body,
    # so the body limits inside it have nothing to check.
    app.add_middleware(PolledJobRead, enabled=settings.polled_job_read)
    # Outermost: every answer, the polled read's and the console's too, carries the request's
    # X-Request-ID, and the audit entries a request writes name it (app/api/request_id.py).
    app.add_middleware(RequestIdMiddleware)
    app.add_exception_handler(RequestValidationError, validation_error_handler)

    @app.exception_handler(exc.OperationalError)
    @app.exception_handler(exc.TimeoutError)
    def database_unavailable(_request: Request, error: Exception) -> JSONResponse:
        return database_unavailable_response(error)

    @app.exception_handler(StorageUnavailable)
    def storage_unavailable(_request: Request, error: Exception) -> JSONResponse:
        # The object store is unreachable or refused the request (app/storage/s3.py): the same
        # retryable answer as a full disk on an upload (app/api/uploads.py).
        logger.error("storage unavailable, answering 503: %s", error, exc_info=error)
        return JSONResponse(
            {"detail": "the service cannot reach its storage right now; retry later"},
            status_code=503,
            headers={"Retry-After": "60"},
        )

    # /healthz must answer within a second even while a burst occupies every thread of the
    # request pool and every pooled connection: it has its own thread (one check at a time), its
    # own one-connection engine and a deadline.
    health_limiter = anyio.CapacityLimiter(1)

    def check_database() -> None:
        with get_health_engine(resources.url).connect() as connection:
            connection.execute(text("SELECT 1"))

    def check_storage() -> None:
        open_storage(settings).check()

    @app.get(
        "/healthz",
        tags=["health"],
        responses={
            200: {"description": "ready"},
            503: {
                "description": "database or storage unreachable or not answering within 1 s, "
                "or the request pool exhausted (requests answered 503 for want of a "
                "connection in the last 5 s); the body says which"
            },
        },
    )
    async def healthz() -> JSONResponse:
        """200 once the API can reach its database and its storage (a local directory it can
        write, or the object store's bucket)."""
        # One thread call and one deadline for both checks: whatever has not answered within
        # it counts as unavailable.
        checks: dict[str, str] = {}

        def run_checks() -> None:
            for name, check in (("database", check_database), ("storage", check_storage)):
                try:
                    check()
                except Exception:
                    logger.warning("health check: %s unreachable", name, exc_info=True)
                    checks[name] = "unavailable"
                else:
                    checks[name] = "ok"

        try:
            with anyio.fail_after(HEALTH_DEADLINE_SECONDS):
                await anyio.to_thread.run_sync(
                    run_checks, limiter=health_limiter, abandon_on_cancel=True
                )
        except TimeoutError:
            logger.warning("health check: no answer within %s s", HEALTH_DEADLINE_SECONDS)
        result = {name: checks.get(name, "unavailable") for name in ("database", "storage")}
        # The request pool (its own counters, no I/O): exhausted while every connection is out
        # and requests are being answered 503 for want of one.
        result["pool"] = pool_health(resources.url)
        if any(value != "ok" for value in result.values()):
            return JSONResponse({"status": "unavailable", **result}, status_code=503)
        return JSONResponse({"status": "ok", **result})

    return app
