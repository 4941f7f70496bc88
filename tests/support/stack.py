"""A running rhosynth for tests: its own PostgreSQL database, Redis queue and storage directory,
the API as a real uvicorn process on a free port, and real Celery worker processes."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.cli import run_migrations
from app.config import Settings
from app.db.session import get_session_factory, transaction
from tests.support import services

REPO = Path(__file__).resolve().parents[2]

DEFAULT_SETTINGS: dict[str, Any] = {
    "max_upload_bytes": 8 * 1024 * 1024,
    "max_output_rows": 30_000_000,
    "job_lease_seconds": 4.0,
    "job_heartbeat_seconds": 1.0,
    "recovery_interval_seconds": 1.0,
    "requeue_after_seconds": 3.0,
    "job_max_attempts": 3,
    "log_level": "INFO",
    # The suite's many deliberate bad keys all come from 127.0.0.1 and one server per stack;
    # the throttle itself is tested with its defaults' shape on an app of its own
    # (tests/app/test_request_hardening.py).
    "auth_failure_burst": 100_000,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Stack:
    name: str
    database: str
    workdir: Path
    values: dict[str, Any]
    port: int
    server: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    reports_workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # Settings that only the worker processes get (a worker on a smaller machine, say).
    worker_values: dict[str, Any] = field(default_factory=dict)
    _logs: list[Path] = field(default_factory=list)

    @classmethod
    def create(
        cls,
        name: str,
        workdir: Path,
        *,
        workers: int = 0,
        reports_worker: bool | None = None,
        worker_overrides: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> Stack:
        """A stack with ``workers`` job workers and (default: when there are job workers) one
        reports worker, which builds the owner tier of reports (`rhosynth worker --reports`)."""
        tag = uuid.uuid4().hex[:8]
        database = f"rhosynth_test_{name}_{tag}"
        database_url = services.create_database(database)
        workdir.mkdir(parents=True, exist_ok=True)
        values: dict[str, Any] = {
            **DEFAULT_SETTINGS,
            "database_url": database_url,
            "broker_url": services.REDIS_URL,
            "storage_dir": str(workdir / "storage"),
            "home": str(workdir / "home"),
            "secret_key": secrets.token_urlsafe(48),
            "queue": f"rhosynth-test-{name}-{tag}",
            **overrides,
        }
        stack = cls(
            name=name,
            database=database,
            workdir=workdir,
            values=values,
            port=free_port(),
            worker_values=dict(worker_overrides or {}),
        )
        run_migrations(stack.settings)
        stack.start_server()
        for _ in range(workers):
            stack.start_worker()
        if reports_worker if reports_worker is not None else workers > 0:
            stack.start_reports_worker()
        return stack

    @property
    def settings(self) -> Settings:
        return Settings(**self.values)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return self._env(self.values)

    def _env(self, values: dict[str, Any]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RHOSYNTH_")}
        env.update({f"RHOSYNTH_{k.upper()}": str(v) for k, v in values.items()})
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _spawn(
        self, label: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.workdir / f"{label}-{len(self._logs)}.log"
        self._logs.append(log)
        handle = open(log, "wb")  # noqa: SIM115 - owned by the child process
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            cwd=REPO,
            env=self.env if env is None else env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: chaos tests kill the whole group
        )

    def start_server(self) -> None:
        self.server = self._spawn("api", "serve", "--port", str(self.port))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.server.poll() is not None:
                raise RuntimeError(f"API exited early:\n{self.logs()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"API did not become healthy:\n{self.logs()}")

    def start_worker(self, concurrency: int = 1) -> subprocess.Popen[bytes]:
        worker = self._spawn(
            "worker",
            "worker",
            f"--concurrency={concurrency}",
            env=self._env({**self.values, **self.worker_values}),
        )
        self.workers.append(worker)
        return self._ready(worker)

    def start_reports_worker(self) -> subprocess.Popen[bytes]:
        """A worker of the owner-tier queue only (kept apart from ``workers``)."""
        worker = self._spawn(
            "reports",
            "worker",
            "--reports",
            env=self._env({**self.values, **self.worker_values}),
        )
        self.reports_workers.append(worker)
        return self._ready(worker)

    def _ready(self, worker: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        deadline = time.monotonic() + 60
        log = self._logs[-1]
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.logs()}")
            if b"ready." in log.read_bytes():
                return worker
            time.sleep(0.2)
        raise RuntimeError(f"worker did not become ready:\n{self.logs()}")

    def kill(self, process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """Kill a process and everything it started (a worker's pool children included)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
        if process in self.workers:
            self.workers.remove(process)
        if process in self.reports_workers:
            self.reports_workers.remove(process)

    def stop_workers(self) -> None:
        for worker in list(self.workers):
            self.kill(worker, signal.SIGTERM)

    def destroy(self) -> None:
        for worker in [*self.workers, *self.reports_workers]:
            self.kill(worker)
        if self.server is not None:
            self.kill(self.server, signal.SIGTERM)
        with contextlib.suppress(Exception):
            redis.Redis.from_url(services.REDIS_URL).delete(
                self.values["queue"], self.settings.owner_tier_queue
            )
        with contextlib.suppress(Exception):
            from app.db.session import dispose_engines

            dispose_engines()
        services.drop_database(self.database)

    def logs(self) -> str:
        parts = []
        for log in self._logs:
            if log.exists():
                parts.append(f"==> {log.name}\n{log.read_text(errors='replace')[-6000:]}")
        return "\n".join(parts)

    def flush_queue(self) -> int:
        """Drop every pending message of this stack's queue (simulates a broker losing them)."""
        return int(redis.Redis.from_url(services.REDIS_URL).delete(self.values["queue"]))

    def queued_messages(self, at_least: int = 1, timeout: float = 10.0) -> int:
        """The number of messages in this stack's queue, once at least ``at_least`` arrived
        (the API sends them from a background thread after its response) or ``timeout``
        passed."""
        client = redis.Redis.from_url(services.REDIS_URL)
        deadline = time.monotonic() + timeout
        while True:
            count = int(client.llen(self.values["queue"]))
            if count >= at_least or time.monotonic() >= deadline:
                return count
            time.sleep(0.02)

    @contextlib.contextmanager
    def session(self) -> Iterator[Session]:
        with transaction(get_session_factory(self.settings.sqlalchemy_url)) as session:
            yield session

    def create_key(self, tenant: str, role: str, name: str = "test") -> str:
        settings = self.settings
        with self.session() as session:
            return create_key(session, settings.secret_key_bytes(), tenant, role, name).key

    def client(self, key: str | None = None, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60, **kwargs)


SHORT_LEASE: dict[str, Any] = {"job_lease_seconds": 5, "job_heartbeat_seconds": 1}
"""Overrides that let a stack have a short job time limit (the lease and heartbeat must be
shorter than it)."""


@contextlib.contextmanager
def temporary_stack(name: str, workdir: Path, **kwargs: Any) -> Iterator[Stack]:
    """A stack of its own for a test module or test, destroyed afterwards."""
    stack = Stack.create(name, workdir, **kwargs)
    try:
        yield stack
    finally:
        stack.destroy()
