"""FastAPI dependencies, as ``Annotated`` aliases routes use directly.

The request owns the transaction: ``SessionDep`` commits once after the route returns (and before
the response is sent, ``scope="function"``), then runs the after-commit callbacks (enqueueing
Celery work). Services only flush. Any exception rolls everything back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from app.auth.service import Principal, authenticate
from app.config import Settings
from app.db.session import PoolOptions, get_session_factory, transaction
from app.storage import Storage


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(_settings)]


def pool_options(settings: Settings) -> PoolOptions:
    """The API process's connection pool, from the ``RHOSYNTH_DB_*`` settings."""
    return PoolOptions(
        size=settings.db_pool_size,
        timeout=settings.db_pool_timeout_seconds,
        connect_retry_seconds=settings.db_connect_retry_seconds,
    )


def _factory(settings: Settings) -> sessionmaker[Session]:
    return get_session_factory(settings.sqlalchemy_url, pool_options(settings))


def _session(settings: SettingsDep) -> Iterator[Session]:
    with transaction(_factory(settings)) as session:
        yield session


SessionDep = Annotated[Session, Depends(_session, scope="function")]


def _storage(settings: SettingsDep) -> Storage:
    return Storage(settings.resolved_storage_dir)


StorageDep = Annotated[Storage, Depends(_storage)]

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer rhs_...`")


def _principal(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or malformed Authorization header (expected: Bearer <key>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    # A short session of its own: the request's unit of work should not hold a transaction
    # (on SQLite: the write lock) open while, say, an upload is parsed.
    with _factory(settings)() as session:
        principal = authenticate(session, settings.secret_key_bytes(), credentials.credentials)
        session.rollback()
    if principal is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid API key", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


CurrentKey = Annotated[Principal, Depends(_principal)]


def _owner(principal: CurrentKey) -> Principal:
    if not principal.is_owner:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this action needs an owner key")
    return principal


OwnerKey = Annotated[Principal, Depends(_owner)]
# Analyst actions (reading datasets, submitting and cancelling jobs, downloading outputs) are
# open to both roles: an owner can do everything an analyst of the same tenant can.
AnalystKey = CurrentKey
