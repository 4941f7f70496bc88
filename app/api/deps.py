"""FastAPI dependencies, as ``Annotated`` aliases routes use directly.

The request owns the transaction, and the transaction lives inside one call of the route's body:
a route takes ``DatabaseDep`` and writes ``with db.transaction() as session: ...``; the block
commits when it ends (then runs the after-commit callbacks, e.g. enqueueing Celery work) or rolls
back on an exception. Services only flush.

Why not a yield dependency that commits after the route returns: FastAPI runs a sync route and
the teardown of a sync dependency as two separate thread-pool calls. Under a burst every
thread-pool thread can be busy with a request that waits for a row lock or a pooled connection
held by a transaction whose commit is itself waiting for a free thread: the API stalls until the
pool timeout (issue 11: "idle in transaction" for minutes while the budget row stayed locked).
Inside one route body the commit runs on the thread that did the work, so no transaction is ever
open while its request waits for anything but the database.

The cheap dependencies (settings, storage, role checks) are ``async def``: they run on the event
loop and take no thread-pool slot.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from app.auth.service import Principal, authenticate
from app.auth.throttle import FailedAuthThrottle
from app.config import Settings
from app.db.session import PoolOptions, get_session_factory, read_only_session, transaction
from app.storage import Storage, open_storage


async def _settings(request: Request) -> Settings:
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


class ApiResources:
    """What every request of one app needs from its settings, worked out once (issue 24 §4).

    The API-key checks, the console's sign-in and ``/healthz`` use them. Each request used to
    derive them again: the database URL (``Path.resolve`` of the home
    folder, a system call per path component), the session factory (a locked lookup) and, in
    embedded mode, the API-key secret (a read of its file). Together about 3 % of a read's CPU.
    The factory is made on first use, not here: an app is built before its database exists.
    """

    def __init__(self, settings: Settings) -> None:
        self.url = settings.sqlalchemy_url
        self._pool = pool_options(settings)
        self._settings = settings
        self._factory: sessionmaker[Session] | None = None
        self._secret: bytes | None = None

    @property
    def factory(self) -> sessionmaker[Session]:
        if self._factory is None:
            # Race: two first requests at once both ask; get_session_factory returns the
            # process's one factory for the URL to both, so either assignment is the same.
            self._factory = get_session_factory(self.url, self._pool)
        return self._factory

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            # Race: two first requests at once both read it; embedded mode creates the key file
            # whole, once (Settings.secret_key_bytes links it into place), so both read the
            # same key and either assignment is the same.
            self._secret = self._settings.secret_key_bytes()
        return self._secret


def resources(request: Request) -> ApiResources:
    """The app's :class:`ApiResources` (made by ``create_app``)."""
    found: ApiResources = request.app.state.resources
    return found


async def _key_secret(request: Request) -> bytes:
    return resources(request).secret


KeySecretDep = Annotated[bytes, Depends(_key_secret)]
"""The secret API keys are hashed with (HMAC-SHA256)."""


@dataclass(frozen=True)
class Database:
    """The request's way to the database: one transaction per request, opened in the route."""

    factory: sessionmaker[Session]

    def transaction(self) -> AbstractContextManager[Session]:
        """Commit at the end of the block (then run the after-commit callbacks); roll back on
        an exception."""
        return transaction(self.factory)

    def read(self) -> AbstractContextManager[Session]:
        """A transaction that only reads (on SQLite it does not take the write lock)."""
        return read_only_session(self.factory)


async def _database(request: Request) -> Database:
    return Database(resources(request).factory)


DatabaseDep = Annotated[Database, Depends(_database)]


async def _storage(settings: SettingsDep) -> Storage:
    return open_storage(settings)


StorageDep = Annotated[Storage, Depends(_storage)]

_bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer rhs_...`")


def client_address(request: Request) -> str:
    """The connection's peer address (the throttle's key)."""
    return request.client.host if request.client is not None else "unknown"


def throttle_refusal(throttle: FailedAuthThrottle, address: str) -> HTTPException | None:
    """429 with Retry-After when ``address`` has used up its failed key checks."""
    wait = throttle.retry_after(address)
    if wait is None:
        return None
    return HTTPException(
        status.HTTP_429_TOO_MANY_REQUESTS,
        "too many failed key checks from this address; retry after the Retry-After delay",
        headers={"Retry-After": str(wait)},
    )


def throttled(request: Request) -> HTTPException | None:
    """429 with Retry-After when the client's address has used up its failed key checks."""
    return throttle_refusal(request.app.state.auth_throttle, client_address(request))


def missing_key() -> HTTPException:
    """401 for a request without a usable ``Authorization: Bearer <key>`` header."""
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED,
        "missing or malformed Authorization header (expected: Bearer <key>)",
        headers={"WWW-Authenticate": "Bearer"},
    )


def _presented_key(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str:
    """The bearer key of a request from an address that is not throttled (429 and 401 before
    any database work)."""
    if (refused := throttled(request)) is not None:
        raise refused
    if credentials is None or credentials.scheme.lower() != "bearer" or not credentials.credentials:
        raise missing_key()
    return credentials.credentials


def check_key(
    session: Session, secret: bytes, throttle: FailedAuthThrottle, address: str, presented: str
) -> Principal:
    """The key's principal, looked up in ``session``; 401 (counted by the throttle) if none."""
    principal = authenticate(session, secret, presented)
    if principal is None:
        throttle.failed(address)
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED, "invalid API key", headers={"WWW-Authenticate": "Bearer"}
        )
    return principal


def _authenticated(request: Request, session: Session, presented: str) -> Principal:
    """The key's principal, looked up in ``session``; 401 (counted by the throttle) if none."""
    throttle: FailedAuthThrottle = request.app.state.auth_throttle
    return check_key(
        session, resources(request).secret, throttle, client_address(request), presented
    )


def _principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    presented = _presented_key(request, credentials)
    # A short session of its own: the request's unit of work should not hold a transaction
    # (on SQLite: the write lock) open while, say, an upload is parsed.
    with read_only_session(resources(request).factory) as session:
        return _authenticated(request, session, presented)


CurrentKey = Annotated[Principal, Depends(_principal)]


def require_owner(principal: Principal) -> Principal:
    """``principal`` if it is an owner key; 403 otherwise (the rule of every owner route)."""
    if not principal.is_owner:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this action needs an owner key")
    return principal


async def _owner(principal: CurrentKey) -> Principal:
    return require_owner(principal)


OwnerKey = Annotated[Principal, Depends(_owner)]


def require_data_key(principal: Principal) -> Principal:
    """``principal`` if it is an owner or analyst key; 403 for admin keys, which manage keys
    and nothing else (issue 27 §1)."""
    if principal.is_admin:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, "admin keys manage keys only; use an owner or analyst key"
        )
    return principal


async def _analyst(principal: CurrentKey) -> Principal:
    return require_data_key(principal)


# Analyst actions (reading datasets, submitting and cancelling jobs, downloading outputs) are
# open to owner and analyst keys: an owner can do everything an analyst of the same tenant can.
AnalystKey = Annotated[Principal, Depends(_analyst)]


def require_admin(principal: Principal) -> Principal:
    """``principal`` if it is an admin key; 403 otherwise (the rule of the /v1/keys routes
    owners may not use: the policy and expiries)."""
    if not principal.is_admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this action needs an admin key")
    return principal


async def _admin(principal: CurrentKey) -> Principal:
    return require_admin(principal)


# Admin keys manage the tenant's keys; they are not owners (they see no dataset), and owners
# are not admins.
AdminKey = Annotated[Principal, Depends(_admin)]


def require_key_manager(principal: Principal) -> Principal:
    """``principal`` if it is an admin or an owner key; 403 otherwise. An owner key then manages
    only the analyst keys it creates, and only if the tenant's admin allows it (checked by
    app/auth/service.py in the request's transaction)."""
    if not (principal.is_admin or principal.is_owner):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "this action needs an admin key")
    return principal


async def _key_manager(principal: CurrentKey) -> Principal:
    return require_key_manager(principal)


KeyManagerKey = Annotated[Principal, Depends(_key_manager)]


@dataclass(frozen=True)
class KeyedRead:
    """A read-only unit of work that checks the caller's key in its own session (issue 24 §4).

    For the routes clients poll (a job's status): the key lookup and the read share one
    session and one thread-pool call, where ``AnalystKey`` plus ``db.read()`` take two of each.
    The checks are the same, in the same order: throttle, header (both before the route runs),
    then the key, before anything is read. One difference: the key is looked up only once the
    path has been validated, so a malformed job id with an unknown key answers 422, not 401
    (input validation, which reveals nothing about any tenant).
    """

    request: Request
    presented: str

    @contextmanager
    def session(self) -> Iterator[tuple[Session, Principal]]:
        """The session and the caller's principal; 401 if the key is unknown, revoked, expired
        or retired, 403 for an admin key."""
        with read_only_session(resources(self.request).factory) as session:
            principal = _authenticated(self.request, session, self.presented)
            yield session, require_data_key(principal)


async def _keyed_read(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> KeyedRead:
    return KeyedRead(request, _presented_key(request, credentials))


AnalystRead = Annotated[KeyedRead, Depends(_keyed_read)]
"""A read by any key of the tenant (owner or analyst), authenticated inside the read."""
