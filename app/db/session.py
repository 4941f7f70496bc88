"""Engines and sessions. One engine per database URL per process."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.orm import Session, sessionmaker

_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_factories: dict[str, sessionmaker[Session]] = {}

AFTER_COMMIT_KEY = "rhosynth_after_commit"


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
        # with SQLITE_BUSY instead of waiting its turn.
        conn.exec_driver_sql("BEGIN IMMEDIATE")


def get_engine(url: str) -> Engine:
    """The process's engine for ``url`` (created on first use)."""
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
                engine = create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)
            _engines[url] = engine
        return engine


def get_session_factory(url: str) -> sessionmaker[Session]:
    with _lock:
        factory = _factories.get(url)
    if factory is None:
        factory = sessionmaker(bind=get_engine(url), expire_on_commit=False, autoflush=False)
        with _lock:
            _factories.setdefault(url, factory)
    return _factories[url]


def dispose_engines() -> None:
    """Drop pooled connections (called in each forked worker: sockets must not be shared)."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=False)
        _engines.clear()
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
