"""Engines and sessions. One engine per database URL per process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

logger = logging.getLogger(__name__)

# PostgreSQL's "too many clients" / "too many connections for role|database" (per-role and
# per-database connection limits) and "the database system is starting up": transient
# refusals worth waiting out; anything else (bad password, no such database) fails at once.
# psycopg reports no SQLSTATE for a refused connection, only the server's message.
_RETRYABLE_SQLSTATES = frozenset({"53300", "57P03"})
_RETRYABLE_MESSAGES = (
    "too many clients",
    "too many connections for role",
    "too many connections for database",
    "remaining connection slots are reserved",
    "the database system is starting up",
)


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _retryable(error: BaseException) -> bool:
    if getattr(error, "sqlstate", None) in _RETRYABLE_SQLSTATES:
        return True
    message = str(error)
    return any(fragment in message for fragment in _RETRYABLE_MESSAGES)


@dataclass(frozen=True)
class PoolOptions:
    """Connection pool of one process (PostgreSQL only; SQLite opens a connection per use).

    ``size`` is a hard cap (no overflow): a burst of requests waits up to ``timeout`` seconds
    for a pooled connection instead of asking PostgreSQL for more than its share.
    """

    size: int = 10
    timeout: float = 30.0
    connect_retry_seconds: float = 5.0

    def __post_init__(self) -> None:
        if self.size < 1 or self.timeout <= 0 or self.connect_retry_seconds < 0:
            raise ValueError(f"invalid pool options: {self}")


_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_factories: dict[str, sessionmaker[Session]] = {}

AFTER_COMMIT_KEY = "rhosynth_after_commit"
READ_ONLY_OPTION = "rhosynth_read_only"


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event emit BEGIN itself (pysqlite's implicit BEGIN is deferred).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # BEGIN IMMEDIATE takes SQLite's write lock up front: the API and the worker are separate
        # processes, and a deferred transaction that reads and then writes could otherwise fail
        # with SQLITE_BUSY instead of waiting its turn. A transaction that only reads
        # (read_only_session) begins deferred: in WAL mode it reads a snapshot without the write
        # lock, so a burst of reads does not queue for it one at a time (each waiter polls in
        # SQLite's busy handler, sleeping up to 100 ms between tries).
        # query_only makes a write in a read-only transaction fail instead of being rolled back
        # unseen; it is set at every begin, so it never outlives its transaction on a pooled
        # connection.
        if conn.get_execution_options().get(READ_ONLY_OPTION):
            conn.exec_driver_sql("BEGIN")
            conn.exec_driver_sql("PRAGMA query_only = 1")
        else:
            conn.exec_driver_sql("PRAGMA query_only = 0")
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def connect_with_retry(
    connect: Callable[[], Any],
    budget_seconds: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Any:
    """``connect()``, retried with backoff while PostgreSQL refuses for want of slots.

    Gives up (re-raising the last refusal) once ``budget_seconds`` would be exceeded; errors that
    are not transient refusals are raised at once.
    """
    deadline = clock() + budget_seconds
    delay = 0.05
    while True:
        try:
            return connect()
        except Exception as error:
            if not _retryable(error) or clock() + delay > deadline:
                raise
            logger.warning(
                "PostgreSQL refused a connection (%s); retrying in %.2f s",
                _first_line(error),
                delay,
            )
            sleep(delay)
            delay = min(delay * 2, 1.0)


def _retry_refused_connections(engine: Engine, budget_seconds: float) -> None:
    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        return connect_with_retry(lambda: dialect.connect(*cargs, **cparams), budget_seconds)


def get_engine(url: str, pool: PoolOptions | None = None) -> Engine:
    """The process's engine for ``url`` (created on first use, with ``pool`` or the defaults)."""
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            if url.startswith("sqlite"):
                database = make_url(url).database
                if database and database != ":memory:":
                    Path(database).parent.mkdir(parents=True, exist_ok=True)
                engine = create_engine(
                    url, connect_args={"check_same_thread": False, "timeout": 30}
                )
                _configure_sqlite(engine)
            else:
                options = pool or PoolOptions()
                engine = create_engine(
                    url,
                    pool_pre_ping=True,
                    pool_size=options.size,
                    max_overflow=0,
                    pool_timeout=options.timeout,
                )
                _retry_refused_connections(engine, options.connect_retry_seconds)
            event.listen(engine, "before_cursor_execute", _refuse_writes_when_read_only)
            _engines[url] = engine
        return engine


class ReadOnlyViolation(RuntimeError):
    """An INSERT, UPDATE or DELETE in a read-only session."""


def _refuse_writes_when_read_only(
    conn: Any, _cursor: Any, statement: str, _parameters: Any, context: Any, _many: bool
) -> None:
    # A read-only session on PostgreSQL runs in autocommit (read_only_session), where a write
    # would commit at once: refuse every INSERT, UPDATE or DELETE SQLAlchemy compiles in one
    # (ORM flushes are refused earlier, by _refuse_flush; SQLite also has query_only).
    if not conn.get_execution_options().get(READ_ONLY_OPTION) or context is None:
        return
    if context.isinsert or context.isupdate or context.isdelete:
        raise ReadOnlyViolation(f"a write in a read-only session: {statement[:80]}")


POOL_HEALTH_WINDOW_SECONDS = 5.0
"""/healthz reports the pool exhausted while every connection is checked out and a request
timed out waiting for one (answered 503) within this many seconds."""
_last_pool_timeout: float | None = None


def note_pool_timeout() -> None:
    """A request waited for a pooled connection past its timeout (and was answered 503)."""
    global _last_pool_timeout
    _last_pool_timeout = time.monotonic()


def pool_health(url: str) -> str:
    """``"exhausted"`` when the process's pool for ``url`` has every connection checked out and
    a request timed out waiting for one within :data:`POOL_HEALTH_WINDOW_SECONDS`; else
    ``"ok"``. No I/O (the pool's own counters)."""
    engine = _engines.get(url)
    if engine is None or _last_pool_timeout is None:
        return "ok"
    if time.monotonic() - _last_pool_timeout > POOL_HEALTH_WINDOW_SECONDS:
        return "ok"
    pool = engine.pool
    size, checked_out = getattr(pool, "size", None), getattr(pool, "checkedout", None)
    if not callable(size) or not callable(checked_out):
        return "ok"
    return "exhausted" if checked_out() >= size() else "ok"


_health_engines: dict[str, Engine] = {}
HEALTH_CONNECT_TIMEOUT_SECONDS = 2


def get_health_engine(url: str) -> Engine:
    """A separate one-connection engine for ``/healthz``.

    A health check must not queue behind a burst of requests for the API's pool, and on SQLite it
    must not wait for the write lock (it runs ``SELECT 1`` without ``BEGIN IMMEDIATE``).
    """
    with _lock:
        engine = _health_engines.get(url)
        if engine is None:
            if url.startswith("sqlite"):
                engine = create_engine(
                    url,
                    connect_args={"check_same_thread": False, "timeout": 1},
                    pool_size=1,
                    max_overflow=0,
                    pool_timeout=HEALTH_CONNECT_TIMEOUT_SECONDS,
                )
            else:
                engine = create_engine(
                    url,
                    pool_pre_ping=True,
                    pool_size=1,
                    max_overflow=0,
                    pool_timeout=HEALTH_CONNECT_TIMEOUT_SECONDS,
                    connect_args={"connect_timeout": HEALTH_CONNECT_TIMEOUT_SECONDS},
                )
            _health_engines[url] = engine
        return engine


def get_session_factory(url: str, pool: PoolOptions | None = None) -> sessionmaker[Session]:
    with _lock:
        factory = _factories.get(url)
    if factory is None:
        factory = sessionmaker(bind=get_engine(url, pool), expire_on_commit=False, autoflush=False)
        with _lock:
            _factories.setdefault(url, factory)
    return _factories[url]


def dispose_engines() -> None:
    """Drop pooled connections (called in each forked worker: sockets must not be shared)."""
    with _lock:
        for engine in (*_engines.values(), *_health_engines.values()):
            engine.dispose(close=False)
        _engines.clear()
        _health_engines.clear()
        _factories.clear()


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run ``callback`` once the session's transaction has committed (never on rollback).

    Used to enqueue Celery work only after the row that describes it is durable.
    """
    session.info.setdefault(AFTER_COMMIT_KEY, []).append(callback)


def rollback(session: Session) -> None:
    """Roll back and forget the callbacks registered for the abandoned transaction."""
    session.rollback()
    session.info.pop(AFTER_COMMIT_KEY, None)


def commit_and_run_callbacks(session: Session) -> None:
    session.commit()
    callbacks: list[Callable[[], None]] = session.info.pop(AFTER_COMMIT_KEY, [])
    for callback in callbacks:
        callback()


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A unit of work outside HTTP (workers, CLI): commit on success, roll back on error."""
    session = factory()
    try:
        yield session
        commit_and_run_callbacks(session)
    except BaseException:
        rollback(session)
        raise
    finally:
        session.close()


@contextmanager
def read_only_session(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session for a unit of work that only reads; rolled back at the end.

    On SQLite its transaction begins deferred instead of taking the write lock (_on_begin) and
    refuses writes (``query_only``). On PostgreSQL its connection runs in autocommit: each
    statement is its own transaction, so a read costs one round trip instead of BEGIN, the
    statement and ROLLBACK (issue 24 §4: the API-key lookup and the read of every GET, 8 round
    trips with the pool's pre-ping, now 4). This gives up nothing: at READ COMMITTED, the
    service's level, every statement of a transaction takes a snapshot of its own anyway, and a
    read-only unit of work holds no locks it needs. On every database an ORM flush in it
    raises, so a write put in one by mistake fails loudly instead of being rolled back unseen
    (in autocommit it would otherwise commit)."""
    session = factory()
    session.info[READ_ONLY_OPTION] = True  # _refuse_flush
    try:
        options: dict[str, Any] = {READ_ONLY_OPTION: True}
        if session.get_bind().dialect.name == "postgresql":
            options["isolation_level"] = "AUTOCOMMIT"
        session.connection(execution_options=options)
        yield session
    finally:
        session.rollback()
        session.close()


@event.listens_for(Session, "before_flush")
def _refuse_flush(session: Session, _context: Any, _instances: Any) -> None:
    # One listener for every session (not one registered per read-only session: the API-key
    # lookup of every request is one).
    if session.info.get(READ_ONLY_OPTION):
        raise RuntimeError("a read-only session was asked to write")
