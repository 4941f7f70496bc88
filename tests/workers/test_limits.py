"""Per-job limits enforced by real worker processes: a job that passes its time limit or its
memory limit ends failed with a fixed text, is charged once, is not retried, and the same pool
process then runs the next job to success.

The worker runs with smaller limits than the API (a worker on a smaller machine than the API
assumes): the API's submission checks (app/jobs/resources.py) would refuse, up front, jobs that
cannot fit the limits by their public estimates, and the worker's enforcement is what stops the
jobs those estimates let through."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

from app.jobs.models import Job
from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit, wait_for
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack

TIME_LIMIT_SECONDS = 10
MEMORY_LIMIT_MB = 300

# ppsyn with 3000 warm-started iterations per round: 62.6 s in-process on adult-sample here at
# ρ = 0.5 on an idle machine (defaults: 10 s), reporting progress every few iterations.
SLOW_METHOD, SLOW_PARAMS = "ppsyn", {"round_iterations": 3000}
# independent with 10 million rows on the 4-column people table: the synthetic codes alone are
# 10e6 × 4 × 8 bytes = 305 MiB, and sampling a column needs 76 MiB arrays on top, so the job
# runs out of its 300 MB (+ allowance) part-way through, on one of many moderate allocations.
# The chaos tests run the same job to success under the default limit.
BIG_ROWS = 10_000_000


@pytest.fixture(scope="module")
def limits_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack.create(
        "limits",
        tmp_path_factory.mktemp("limits-stack"),
        workers=1,
        # BIG_ROWS drawn in memory (the point of the memory-limit test), not as parts.
        partitioned_output_rows=10 * BIG_ROWS,
        worker_overrides={
            "job_time_limit_seconds": TIME_LIMIT_SECONDS,
            "job_memory_limit_mb": MEMORY_LIMIT_MB,
        },
    )
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture
def limits_tenant(limits_stack: Stack) -> Iterator[Tenant]:
    tenant = make_tenant(limits_stack)
    yield tenant
    tenant.close()


def _pool_processes(stack: Stack) -> list[int]:
    return sorted(child.pid for child in psutil.Process(stack.workers[0].pid).children())


def _attempt(stack: Stack, job_id: str) -> int:
    with stack.session() as session:
        job = session.get(Job, uuid.UUID(job_id))
        assert job is not None
        return job.attempt


def _kinds(tenant: Tenant, dataset_id: str) -> list[str]:
    items = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    return [e["kind"] for e in items]


def _then_a_job_succeeds(stack: Stack, tenant: Tenant, dataset_id: str, pool: list[int]) -> None:
    job = wait_for(tenant.analyst, submit(tenant.analyst, dataset_id, rho="0.1").json()["id"])
    assert job["status"] == "succeeded", stack.logs()
    assert _pool_processes(stack) == pool, "the pool process was replaced"


def test_job_past_its_time_limit_fails_once_and_the_worker_goes_on(
    limits_stack: Stack, limits_tenant: Tenant, adult_csv: bytes, adult_schema: str
) -> None:
    stack, tenant = limits_stack, limits_tenant
    dataset = create_dataset(tenant.owner, adult_csv, adult_schema)
    pool = _pool_processes(stack)
    started = time.monotonic()
    response = submit(
        tenant.analyst, dataset["id"], rho="0.5", method=SLOW_METHOD, params=SLOW_PARAMS
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    job = wait_for(tenant.analyst, job_id, timeout=120)
    elapsed = time.monotonic() - started
    assert job["status"] == "failed", stack.logs()
    assert job["error"] == (
        f"the job exceeded its time limit of {TIME_LIMIT_SECONDS} s; its budget stays spent"
    )
    assert job["output_rows"] is None
    # Several recovery passes (every second here) later it is still failed, after one attempt.
    time.sleep(3 * stack.settings.recovery_interval_seconds + stack.settings.job_lease_seconds)
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "failed"
    assert _attempt(stack, job_id) == 1
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "spend"]
    _then_a_job_succeeds(stack, tenant, dataset["id"], pool)
    assert_reconciled(stack, dataset["id"])
    print(f"\ntime limit {TIME_LIMIT_SECONDS} s: job failed {elapsed:.1f} s after submission")


def test_job_past_its_memory_limit_fails_once_and_the_worker_goes_on(
    limits_stack: Stack, limits_tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    stack, tenant = limits_stack, limits_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    pool = _pool_processes(stack)
    response = submit(tenant.analyst, dataset["id"], rho="0.5", rows=BIG_ROWS)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    job = wait_for(tenant.analyst, job_id, timeout=120)
    assert job["status"] == "failed", stack.logs()
    assert job["error"] == (
        f"the job exceeded its memory limit of {MEMORY_LIMIT_MB} MB; its budget stays spent"
    )
    time.sleep(3 * stack.settings.recovery_interval_seconds + stack.settings.job_lease_seconds)
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "failed"
    assert _attempt(stack, job_id) == 1
    assert _kinds(tenant, dataset["id"]) == ["grant", "reserve", "spend"]
    _then_a_job_succeeds(stack, tenant, dataset["id"], pool)
    assert_reconciled(stack, dataset["id"])
