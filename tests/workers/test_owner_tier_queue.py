"""Issue 24 §2 and §10: the owner tier of a report is built by its own worker, after
publication, so its data-dependent duration never decides when the next job starts; a lost
owner-tier message is sent again by the recovery loop.

Real processes: a job worker and, when a test starts one, a reports worker
(`rhosynth worker --reports`). Before the fix the job worker built the owner tier in its own
slot, right after publishing: with no reports worker at all, the owner tier was there anyway.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import make_tenant
from tests.support import services
from tests.support.api import create_dataset, submit, wait_for
from tests.support.stack import Stack

OWNER_REPORT = "report-owner.json"


@pytest.fixture
def jobs_only_stack(_services: None, tmp_path: Path) -> Iterator[Stack]:
    # A short resend interval: the recovery loop's resend of a lost message is under test.
    stack = Stack.create(
        "ownerq", tmp_path / "stack", workers=1, reports_worker=False, requeue_after_seconds=2.0
    )
    try:
        yield stack
    finally:
        stack.destroy()


def _artefacts(client: httpx.Client, job_id: str) -> list[str]:
    return list(client.get(f"/v1/jobs/{job_id}").json()["artefacts"])


def _wait_for_owner_tier(client: httpx.Client, job_id: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if OWNER_REPORT in _artefacts(client, job_id):
            return
        time.sleep(0.2)
    raise AssertionError(f"job {job_id}: no owner tier after {timeout} s")


def test_jobs_run_without_a_reports_worker_and_the_owner_tier_follows(
    jobs_only_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    stack = jobs_only_stack
    tenant = make_tenant(stack)
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="2")
    first = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    assert wait_for(tenant.analyst, first)["status"] == "succeeded"
    # The next job runs in the same (only) job slot while the first one's owner tier waits for
    # a reports worker: the job worker never builds it.
    second = submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"]
    assert wait_for(tenant.analyst, second)["status"] == "succeeded"
    for job_id in (first, second):
        assert OWNER_REPORT not in _artefacts(tenant.owner, job_id)
        release = tenant.analyst.get(f"/v1/jobs/{job_id}/report")
        assert release.status_code == 200, "the release tier is published with the job"
        waiting = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
        assert waiting.status_code == 202 and waiting.json()["status"] == "building"
        refused = tenant.analyst.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
        assert refused.status_code == 403, "analysts do not learn whether it exists"

    # A message lost with the broker: the recovery loop sends it again (every 2 s here).
    redis.Redis.from_url(services.REDIS_URL).delete(stack.settings.owner_tier_queue)
    stack.start_reports_worker()
    for job_id in (first, second):
        _wait_for_owner_tier(tenant.owner, job_id)
    owner = tenant.owner.get(f"/v1/jobs/{first}/report", params={"tier": "owner"})
    assert owner.status_code == 200 and owner.json()["verdict"]
    # Analysts see the same job as before the owner tier existed (its names are owner-only).
    seen = tenant.analyst.get(f"/v1/jobs/{first}").json()
    assert OWNER_REPORT not in seen["artefacts"]
