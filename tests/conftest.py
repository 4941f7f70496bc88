"""Test session setup: real PostgreSQL and Redis (started if down), real API and worker processes.

Each stack gets its own database (built by the Alembic migrations), Redis queue and storage
directory; tests isolate from each other by creating their own tenant.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import services
from tests.support.s3 import S3Server, S3Unavailable, credentials, start_server
from tests.support.stack import Stack

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def _services() -> None:
    try:
        services.ensure_services()
    except services.ServiceUnavailable as error:
        pytest.exit(str(error), returncode=3)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto's S3 server in its own process with this run's bucket; the fake credentials are in
    this process's environment (and so in every stack's processes) while it runs."""
    try:
        server = start_server(tmp_path_factory.mktemp("s3"))
    except S3Unavailable as error:
        pytest.skip(str(error))
    try:
        with credentials():
            yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def api_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API with no worker: submitted jobs stay queued (deterministic ledger tests)."""
    stack = Stack.create("api", tmp_path_factory.mktemp("api-stack"))
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture(scope="session")
def worker_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The API and one real Celery worker process: jobs run end to end."""
    stack = Stack.create("worker", tmp_path_factory.mktemp("worker-stack"), workers=1)
    try:
        yield stack
    finally:
        stack.destroy()


@dataclass
class Tenant:
    name: str
    owner: httpx.Client
    analyst: httpx.Client
    stack: Stack

    def close(self) -> None:
        self.owner.close()
        self.analyst.close()


def make_tenant(stack: Stack) -> Tenant:
    name = f"tenant-{uuid.uuid4().hex[:10]}"
    return Tenant(
        name=name,
        owner=stack.client(stack.create_key(name, "owner")),
        analyst=stack.client(stack.create_key(name, "analyst")),
        stack=stack,
    )


@pytest.fixture
def tenant(api_stack: Stack) -> Iterator[Tenant]:
    t = make_tenant(api_stack)
    yield t
    t.close()


@pytest.fixture
def worker_tenant(worker_stack: Stack) -> Iterator[Tenant]:
    t = make_tenant(worker_stack)
    yield t
    t.close()


@pytest.fixture(scope="session")
def people_csv() -> bytes:
    return (FIXTURES / "people.csv").read_bytes()


@pytest.fixture(scope="session")
def people_schema() -> str:
    return (FIXTURES / "people-schema.json").read_text()


@pytest.fixture(scope="session")
def adult_csv() -> bytes:
    return (FIXTURES / "adult-sample.csv").read_bytes()


@pytest.fixture(scope="session")
def adult_schema() -> str:
    return (FIXTURES / "adult-domain.json").read_text()
