"""A unit of work that only reads: on SQLite it does not take the write lock; on PostgreSQL it
runs in autocommit (one round trip per statement) and refuses writes.

Every transaction used to begin with BEGIN IMMEDIATE, so each authenticated request took SQLite's
write lock twice (its key lookup, then its route) and a burst of reads queued for it one at a
time. ``read_only_session`` begins deferred: in WAL mode it reads a snapshot while another
connection holds the write lock. Here a second connection holds that lock; a read-only session
answers at once, an ordinary transaction waits until the lock is released.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, text
from sqlalchemy.exc import OperationalError

from app.auth.models import Tenant
from app.cli import run_migrations
from app.config import Settings
from app.db.base import utcnow
from app.db.session import (
    ReadOnlyViolation,
    get_session_factory,
    read_only_session,
    transaction,
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """An embedded home with its SQLite database migrated."""
    settings = Settings(home=tmp_path)
    run_migrations(settings)
    return settings


def test_a_read_only_session_reads_while_another_connection_holds_the_write_lock(
    settings: Settings,
) -> None:
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:  # WAL mode is set on connect
        assert session.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    database = settings.sqlalchemy_url.removeprefix("sqlite:///")
    holder = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, as a worker's claim holds it
    try:
        with read_only_session(factory) as session:
            assert session.execute(text("SELECT count(*) FROM api_keys")).scalar() == 0

        finished = threading.Event()

        def ordinary() -> None:
            with transaction(factory) as session:
                session.execute(text("SELECT count(*) FROM api_keys"))
            finished.set()

        waiter = threading.Thread(target=ordinary)
        waiter.start()
        assert not finished.wait(1.0)  # BEGIN IMMEDIATE waits for the lock
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    waiter.join(timeout=30)
    assert finished.is_set()


def test_a_write_in_a_read_only_session_fails_instead_of_vanishing(settings: Settings) -> None:
    factory = get_session_factory(settings.sqlalchemy_url)
    with pytest.raises(OperationalError, match="readonly"), read_only_session(factory) as session:
        session.execute(text("DELETE FROM api_keys"))  # SQLite's query_only refuses it
    with read_only_session(factory) as session:
        session.add(Tenant(id=uuid.uuid4(), name="t", created_at=utcnow()))
        with pytest.raises(RuntimeError, match="read-only"):
            session.flush()
    with transaction(factory) as session:  # the pooled connection writes again afterwards
        session.add(Tenant(id=uuid.uuid4(), name="t", created_at=utcnow()))
    with read_only_session(factory) as session:
        assert session.execute(text("SELECT count(*) FROM tenants")).scalar() == 1


@pytest.fixture
def postgres(_services: None, tmp_path: Path) -> Iterator[Settings]:
    """A migrated PostgreSQL database of its own (production-mode settings)."""
    from app.db.session import dispose_engines
    from tests.support import services

    name = f"rhosynth_test_readonly_{uuid.uuid4().hex[:8]}"
    url = services.create_database(name)
    settings = Settings(
        database_url=url,
        secret_key="x" * 64,
        broker_url=services.REDIS_URL,
        storage_dir=tmp_path / "storage",
    )
    run_migrations(settings)
    yield settings
    dispose_engines()
    services.drop_database(name)


def test_on_postgresql_a_read_only_session_reads_in_autocommit_and_refuses_writes(
    postgres: Settings,
) -> None:
    """Issue 24 §4: each statement of a read-only session is its own transaction (no BEGIN and
    ROLLBACK round trips): now(), the transaction's start, moves between two statements. A write
    would commit at once there, so every INSERT, UPDATE or DELETE is refused; the pooled
    connection is transactional again afterwards."""
    factory = get_session_factory(postgres.sqlalchemy_url)
    with transaction(factory) as session:
        session.add(Tenant(id=uuid.uuid4(), name="kept", created_at=utcnow()))
    with read_only_session(factory) as session:
        first = session.execute(text("SELECT now()")).scalar()
        session.execute(text("SELECT pg_sleep(0.05)"))
        assert session.execute(text("SELECT now()")).scalar() != first
    with pytest.raises(ReadOnlyViolation), read_only_session(factory) as session:
        session.execute(delete(Tenant))
    with read_only_session(factory) as session:
        session.add(Tenant(id=uuid.uuid4(), name="t", created_at=utcnow()))
        with pytest.raises(RuntimeError, match="read-only"):
            session.flush()
    with transaction(factory) as session:
        assert session.execute(text("SELECT count(*) FROM tenants")).scalar() == 1
        first = session.execute(text("SELECT now()")).scalar()
        session.execute(text("SELECT pg_sleep(0.05)"))
        assert session.execute(text("SELECT now()")).scalar() == first  # one transaction
