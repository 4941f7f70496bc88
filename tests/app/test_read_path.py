"""The read clients poll, ``GET /v1/jobs/{id}``: one session and one thread-pool call for the key
check and the read together (issue 24 §4), with every check of the key kept.

Before, the key was looked up in a session of its own (a sync dependency, its own thread-pool
call) and the job in a second one: two connection checkouts, two BEGIN/ROLLBACKs and two hops
per read. Under a burst of 200 simultaneous reads that CPU is what the p99 waits for
(docs/benchmarks.md, "Bursts of simultaneous requests").
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, text

from app.config import Settings
from app.db.session import get_engine, get_session_factory, transaction
from app.main import create_app
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


@pytest.fixture
def app_settings(api_stack: Stack, tmp_path: Path) -> Settings:
    """The stack's database under a URL of its own, so the engine counted here is this test's."""
    url = api_stack.settings.sqlalchemy_url + "?application_name=rhosynth-read-path-test"
    return api_stack.settings.model_copy(
        update={
            "database_url": url,
            "storage_dir": tmp_path / "storage",
            "auth_failure_burst": 3,
            # One failure back every 1,000 s: the fourth bad key is refused however slow the
            # machine (at 0.5/s a run taking over 2 s for three requests would see a refill).
            "auth_failures_per_second": 0.001,
        }
    )


@pytest.fixture
def client(app_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(app_settings), raise_server_exceptions=False) as test_client:
        yield test_client
    get_engine(app_settings.sqlalchemy_url).dispose()


@pytest.fixture
def job_id(tenant: Tenant, people_csv: bytes, people_schema: str) -> str:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    response = submit(tenant.analyst, dataset["id"], rho="0.1")
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _checkouts(settings: Settings) -> list[int]:
    """A list that grows by one at every connection checkout from the app's engine."""
    seen: list[int] = []

    def on_checkout(*_args: Any) -> None:
        seen.append(1)

    event.listen(get_engine(settings.sqlalchemy_url), "checkout", on_checkout)
    return seen


def test_a_job_read_checks_the_key_and_reads_in_one_session(
    client: TestClient, app_settings: Settings, tenant: Tenant, job_id: str
) -> None:
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).status_code == 200  # warm
    checkouts = _checkouts(app_settings)
    for _ in range(5):
        response = client.get(f"/v1/jobs/{job_id}", headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["id"] == job_id
    assert len(checkouts) == 5  # was 10: one session for the key, one for the job


def test_a_job_read_refuses_a_revoked_key_at_once(
    client: TestClient, app_settings: Settings, tenant: Tenant, job_id: str
) -> None:
    """Nothing about the key is remembered between requests: revoking it takes effect on the next
    read, in the same process that has just answered it."""
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    assert client.get(f"/v1/jobs/{job_id}", headers=headers).status_code == 200
    key = tenant.analyst.headers["Authorization"].removeprefix("Bearer ")
    me = client.get("/v1/me", headers=headers).json()
    with transaction(get_session_factory(app_settings.sqlalchemy_url)) as session:
        session.execute(
            text("UPDATE api_keys SET revoked_at = :now WHERE id = :id"),
            {"now": datetime.now(UTC), "id": me["key_id"]},
        )
    refused = client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 401 and refused.json()["detail"] == "invalid API key"
    assert refused.headers["WWW-Authenticate"] == "Bearer"


def test_a_job_read_answers_the_same_refusals_as_before(
    client: TestClient, tenant: Tenant, job_id: str
) -> None:
    """No header: 401 before any lookup (not counted). Bad keys: 401, counted by the address's
    throttle, then 429 with Retry-After even for a valid key, before its key is checked. A key
    of another tenant: 404, as for a job that does not exist."""
    missing = client.get(f"/v1/jobs/{job_id}")
    assert missing.status_code == 401 and "missing or malformed" in missing.json()["detail"]
    other = make_other_tenant_header(tenant)
    assert client.get(f"/v1/jobs/{job_id}", headers=other).status_code == 404
    codes = [
        client.get(f"/v1/jobs/{job_id}", headers={"Authorization": f"Bearer rhs_bad{i}"})
        for i in range(5)
    ]
    assert [c.status_code for c in codes] == [401, 401, 401, 429, 429]
    valid = {"Authorization": tenant.analyst.headers["Authorization"]}
    throttled = client.get(f"/v1/jobs/{job_id}", headers=valid)
    assert throttled.status_code == 429 and int(throttled.headers["Retry-After"]) >= 1


def make_other_tenant_header(tenant: Tenant) -> dict[str, str]:
    stack = tenant.stack
    return {"Authorization": f"Bearer {stack.create_key(tenant.name + '-other', 'analyst')}"}


def test_the_started_app_keeps_its_long_lived_objects_out_of_garbage_collection(
    app_settings: Settings,
) -> None:
    """At start-up the API moves what it has built (modules, app, routes) out of the collector's
    generations (gc.freeze), so full collections in a burst walk only the requests' objects."""
    import gc

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        with TestClient(create_app(app_settings)):
            frozen = gc.get_freeze_count()
        assert frozen > 10_000, frozen  # the app and its imports: some 10^5 objects
    finally:
        gc.unfreeze()
        get_engine(app_settings.sqlalchemy_url).dispose()
