"""The three raw tables of ../shared/data/raw over HTTP, in production mode (PostgreSQL, Redis, a
Celery worker) and embedded mode (SQLite): the service's draft accepted as is, discovery charged
at upload, an `aim` release downloaded and checked (tests/support/raw.py). Marker `benchmark`:
it reads ../shared and takes minutes, so `make test` leaves it out; run it with
`pytest -m benchmark tests/workers/test_raw_tables.py`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import make_tenant
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
    # ρ = 1.125 for the dataset (a fifth to discovery), 0.9 for the release; missing rates are not
    # promised at this budget, the rest of the checks are.
    release_raw_fixture(
        owner,
        analyst,
        path=RAW / f"{table}.csv",
        budget_rho="1.125",
        job_rho="0.9",
        rows=5_000,
        null_tolerance=None,
    )


@pytest.fixture(scope="module")
def raw_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A production stack with room for the raw tables (the shared test stacks cap uploads at
    8 MiB; flights is 34 MB)."""
    stack = Stack.create(
        "raw",
        tmp_path_factory.mktemp("raw-stack"),
        workers=1,
        max_upload_bytes=128 * 1024**2,
        max_draft_bytes=128 * 1024**2,
    )
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.mark.parametrize("table", TABLES)
def test_raw_table_production(raw_stack: Stack, table: str) -> None:
    tenant = make_tenant(raw_stack)
    try:
        tenant.owner.timeout = tenant.analyst.timeout = httpx.Timeout(600)
        _release(tenant.owner, tenant.analyst, table)
    finally:
        tenant.close()


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
