"""rhosynth.client against the real API of the test stacks (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from rhosynth.client import Client
from tests.conftest import FIXTURES, Tenant

PEOPLE_CSV = FIXTURES / "people.csv"
PEOPLE_SCHEMA = FIXTURES / "people-schema.json"


@dataclass
class Clients:
    owner: Client
    analyst: Client
    owner_key: str
    analyst_key: str
    url: str


def _key(tenant_client: object) -> str:
    headers = tenant_client.headers  # type: ignore[attr-defined]
    return str(headers["authorization"]).removeprefix("Bearer ")


def clients_of(tenant: Tenant) -> Iterator[Clients]:
    owner_key, analyst_key = _key(tenant.owner), _key(tenant.analyst)
    url = tenant.stack.base_url
    with Client(url, owner_key) as owner, Client(url, analyst_key, poll_interval=0.1) as analyst:
        yield Clients(owner, analyst, owner_key, analyst_key, url)


@pytest.fixture
def clients(tenant: Tenant) -> Iterator[Clients]:
    """Clients of a tenant of the API with no worker (jobs stay queued)."""
    yield from clients_of(tenant)


@pytest.fixture
def worker_clients(worker_tenant: Tenant) -> Iterator[Clients]:
    """Clients of a tenant of the API with a real worker (jobs run)."""
    yield from clients_of(worker_tenant)
