"""Fairness between tenants with real worker processes: one tenant's backlog does not starve
another's job, and an optional per-tenant cap on running jobs holds (and its queue still
drains)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit, wait_for
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack

# About one second of sampling each (the chaos tests' 10 million rows take 3-5 s).
SECOND_ROWS = 3_000_000


def _stack(name: str, workdir: Path, **overrides: Any) -> Iterator[Stack]:
    stack = Stack.create(name, workdir, **overrides)
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture
def fair_stack(_services: None, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack("fair", tmp_path / "fair-stack")


@pytest.fixture
def capped_stack(_services: None, tmp_path: Path) -> Iterator[Stack]:
    yield from _stack("capped", tmp_path / "capped-stack", tenant_max_running=1)


def _tenants(stack: Stack) -> Iterator[tuple[Tenant, Tenant]]:
    first, second = make_tenant(stack), make_tenant(stack)
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def _finished(tenant: Tenant, job_ids: list[str]) -> list[dict[str, Any]]:
    """Wait for the jobs, then read them with the owner key (exact timestamps)."""
    for job_id in job_ids:
        assert wait_for(tenant.analyst, job_id, timeout=180)["status"] == "succeeded"
    return [tenant.owner.get(f"/v1/jobs/{job_id}").json() for job_id in job_ids]


def _at(job: dict[str, Any], key: str) -> datetime:
    return datetime.fromisoformat(job[key].replace("Z", "+00:00"))


def test_a_backlog_does_not_starve_another_tenant(
    fair_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    """Tenant A queues five jobs, then tenant B one; a one-process worker starts. FIFO would
    start B's job last; fair claiming starts it second (A's first job is the oldest queued job
    when neither tenant has had a job started)."""
    for a, b in _tenants(fair_stack):
        dataset_a = create_dataset(a.owner, people_csv, people_schema, budget_rho="10")
        dataset_b = create_dataset(b.owner, people_csv, people_schema, budget_rho="10")
        backlog = [submit(a.analyst, dataset_a["id"]).json()["id"] for _ in range(5)]
        single = submit(b.analyst, dataset_b["id"]).json()["id"]
        fair_stack.start_worker(concurrency=1)
        jobs = _finished(a, backlog) + _finished(b, [single])
        order = [job["id"] for job in sorted(jobs, key=lambda job: _at(job, "started_at"))]
        assert order.index(single) == 1, (order, single)
        assert order[0] == backlog[0]
        # Within a tenant, jobs still start in submission order.
        assert [job_id for job_id in order if job_id != single] == backlog
        assert_reconciled(fair_stack, dataset_a["id"])
        assert_reconciled(fair_stack, dataset_b["id"])


def test_per_tenant_cap_holds_and_the_queue_drains(
    capped_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    """RHOSYNTH_TENANT_MAX_RUNNING=1 on a two-process worker: tenant A's three jobs never run
    at the same time, B's job runs beside A's first, and every job finishes (a freed slot rings
    the doorbell again: the messages of A's capped jobs found nothing to claim)."""
    for a, b in _tenants(capped_stack):
        dataset_a = create_dataset(a.owner, people_csv, people_schema, budget_rho="10")
        dataset_b = create_dataset(b.owner, people_csv, people_schema, budget_rho="10")
        backlog = [
            submit(a.analyst, dataset_a["id"], rows=SECOND_ROWS).json()["id"] for _ in range(3)
        ]
        single = submit(b.analyst, dataset_b["id"], rows=SECOND_ROWS).json()["id"]
        capped_stack.start_worker(concurrency=2)
        jobs_a = sorted(_finished(a, backlog), key=lambda job: _at(job, "started_at"))
        (job_b,) = _finished(b, [single])
        for earlier, later in itertools.pairwise(jobs_a):
            assert _at(earlier, "finished_at") <= _at(later, "started_at"), jobs_a
        assert _at(job_b, "started_at") < _at(jobs_a[1], "started_at")
        assert_reconciled(capped_stack, dataset_a["id"])
