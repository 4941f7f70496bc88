"""PostgreSQL and Redis for the test suite: reach them, start them if they are down, or explain.

URLs can be overridden with RHOSYNTH_TEST_POSTGRES_URL (an admin URL: the suite creates and
drops its own databases) and RHOSYNTH_TEST_REDIS_URL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import redis

from app.config import Settings

POSTGRES_URL = os.environ.get(
    "RHOSYNTH_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("RHOSYNTH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

HOW_TO_START = """\
The test suite needs PostgreSQL and Redis on loopback.
  PostgreSQL ({pg}): e.g. `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start`,
      `sudo systemctl start postgresql`, or `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16`
  Redis ({redis}): e.g. `redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no`,
      or `docker run -d -p 6379:6379 redis:7`
Or point the suite elsewhere with RHOSYNTH_TEST_POSTGRES_URL and RHOSYNTH_TEST_REDIS_URL.
"""


class ServiceUnavailable(RuntimeError):
    pass


_last_postgres_error: list[str] = []


def _postgres_up() -> bool:
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
        return True
    except psycopg.Error as error:
        _last_postgres_error[:] = [
            str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        ]
        return False


def _redis_up() -> bool:
    try:
        return bool(redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping())
    except redis.RedisError:
        return False


def _try(command: list[str]) -> None:
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(command, check=False, capture_output=True, timeout=60)


def _start_postgres() -> None:
    if shutil.which("pg_ctlcluster") and Path("/etc/postgresql").is_dir():
        for version in sorted(os.listdir("/etc/postgresql")):
            _try(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start"])
    elif shutil.which("systemctl"):
        _try(["systemctl", "start", "postgresql"])


def _start_redis() -> None:
    if shutil.which("redis-server"):
        _try(
            [
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
        )


def _wait(check: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.5)
    return False


def ensure_services() -> None:
    """Make sure both services answer; start local ones that are down; else raise with how-to."""
    missing = []
    if not _postgres_up():
        _start_postgres()
        if not _wait(_postgres_up, 20):
            missing.append("PostgreSQL")
    if not _redis_up():
        _start_redis()
        if not _wait(_redis_up, 10):
            missing.append("Redis")
    if missing:
        reason = (
            f" (PostgreSQL said: {_last_postgres_error[0]})"
            if "PostgreSQL" in missing and _last_postgres_error
            else ""
        )
        raise ServiceUnavailable(
            f"not reachable and could not be started: {', '.join(missing)}{reason}\n"
            + HOW_TO_START.format(pg=POSTGRES_URL, redis=REDIS_URL)
            + (
                "If PostgreSQL runs but refuses the connection, give the suite an admin URL it may "
                "use (it creates and drops databases named rhosynth_test_*).\n"
                if "PostgreSQL" in missing
                else ""
            )
        )


def database_url(name: str) -> str:
    """The admin URL with its database replaced by ``name``."""
    base, _, _ = POSTGRES_URL.rpartition("/")
    return f"{base}/{name}"


def create_database(name: str) -> str:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return database_url(name)


def drop_database(name: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def migrated_settings(backend: str, home: Path, name: str, **extra: object) -> Iterator[Settings]:
    """Settings on a fresh, migrated database of ``backend`` ("postgresql": a database of its own,
    dropped afterwards; "sqlite": a file under ``home``), with a Redis queue of its own."""
    import secrets
    import uuid

    from app.cli import run_migrations

    tag = uuid.uuid4().hex[:8]
    values: dict[str, object] = {
        "home": home,
        "queue": f"rhosynth-test-{name}-{tag}",
        "broker_url": REDIS_URL,
        **extra,
    }
    database = f"rhosynth_test_{name}_{tag}"
    if backend == "postgresql":
        values["database_url"] = create_database(database)
        values["secret_key"] = secrets.token_urlsafe(48)
        values["storage_dir"] = str(home / "storage")
    settings = Settings(**values)  # type: ignore[arg-type]
    run_migrations(settings)
    try:
        yield settings
    finally:
        if backend == "postgresql":
            drop_database(database)
