"""The three raw tables of ../shared/data/raw over HTTP, in production mode (PostgreSQL, Redis, a
Celery worker) and embedded mode (SQLite): the service's draft accepted as is, discovery charged
at upload, an `aim` release downloaded and checked (tests/support/raw.py). Marker `benchmark`:
it reads ../shared and takes minutes, so `make test` leaves it out; run it with
`pytest -m benchmark tests/workers/test_raw_tables.py`."""

from __future__ import annotations

import subprocess

import httpx
import pytest

from tests.conftest import Tenant
from tests.support.raw import release_raw_fixture
from tests.support.stack import REPO, Stack
from tests.workers.test_embedded_mode import _key, embedded  # noqa: F401 - the fixture

RAW = REPO.parent / "shared" / "data" / "raw"
TABLES = ("diamonds", "loans", "flights")

pytestmark = [
    pytest.mark.benchmark,
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not RAW.is_dir(), reason=f"needs the raw tables in {RAW}"),
]


def _release(owner: httpx.Client, analyst: httpx.Client, table: str) -> None:
    # ρ = 1 for the dataset (a tenth to discovery), 0.9 for the release; missing rates are not
    # promised at this budget, the rest of the checks are.
    release_raw_fixture(
        owner,
        analyst,
        path=RAW / f"{table}.csv",
        budget_rho="1",
        job_rho="0.9",
        rows=5_000,
        null_tolerance=None,
    )


@pytest.mark.parametrize("table", TABLES)
def test_raw_table_production(worker_stack: Stack, worker_tenant: Tenant, table: str) -> None:
    _release(worker_tenant.owner, worker_tenant.analyst, table)


@pytest.mark.parametrize("table", TABLES)
def test_raw_table_embedded(
    embedded: tuple[str, dict[str, str], subprocess.Popen[bytes]],  # noqa: F811
    table: str,
) -> None:
    base, env, _ = embedded
    owner_key, analyst_key = _key(env, "owner"), _key(env, "analyst")
    with (
        httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {owner_key}"}, timeout=600
        ) as owner,
        httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {analyst_key}"}, timeout=600
        ) as analyst,
    ):
        _release(owner, analyst, table)
