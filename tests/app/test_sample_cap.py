"""Issue 24 §5: the live-sample cap is counted under a lock (40 simultaneous requests, released
together by a barrier, against a cap of 20 accepted 26 before (60: 31); now exactly 20), and
samples are drawn in the same fair order across tenants as jobs."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.samples import repository as sample_repository
from app.samples.execution import execute_sample
from tests.conftest import Tenant, make_tenant
from tests.support.api import succeeded_job
from tests.support.stack import Stack, temporary_stack

BURST = 40


def test_a_burst_of_samples_cannot_pass_the_cap(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings = api_stack.settings
    cap = settings.tenant_max_live_samples
    assert cap < BURST
    # The job runs in this process (this stack has no worker, so the samples stay queued).
    job_id = succeeded_job(api_stack, tenant, people_csv, people_schema)

    barrier = threading.Barrier(BURST)
    authorization = tenant.analyst.headers["Authorization"]

    def ask(seed: int) -> int:
        with httpx.Client(
            base_url=api_stack.base_url, headers={"Authorization": authorization}, timeout=60
        ) as client:
            barrier.wait()
            response = client.post(f"/v1/jobs/{job_id}/samples", json={"rows": 5, "seed": seed})
            return response.status_code

    with ThreadPoolExecutor(BURST) as pool:
        codes = list(pool.map(ask, range(BURST)))
    assert codes.count(202) == cap, codes
    assert set(codes) == {202, 429}, codes
    tenant_id = uuid.UUID(tenant.analyst.get("/v1/me").json()["tenant_id"])
    with api_stack.session() as session:
        assert sample_repository.count_live(session, tenant_id) == cap


@pytest.fixture
def own_stack(_services: None, tmp_path: Path) -> Iterator[Stack]:
    """An API of its own (no worker): no other test's queued samples are in its order."""
    with temporary_stack("fair-samples", tmp_path / "stack") as stack:
        yield stack


def test_samples_are_drawn_in_fair_order_across_tenants(
    own_stack: Stack, people_csv: bytes, people_schema: str
) -> None:
    """Issue 24 §5: samples were claimed first-in first-out, so one tenant's flood delayed
    another's sample behind all of it. A message is now a doorbell that draws the fairest queued
    sample, as for jobs: tenant A queues 5 samples, then B one; the second message (which names
    A's second sample) draws B's, since A has just had one drawn and B none."""
    api_stack = own_stack
    flood, other = make_tenant(api_stack), make_tenant(api_stack)
    try:
        flood_job = uuid.UUID(succeeded_job(api_stack, flood, people_csv, people_schema))
        other_job = uuid.UUID(succeeded_job(api_stack, other, people_csv, people_schema))

        def ask(tenant: Tenant, job_id: uuid.UUID) -> uuid.UUID:
            response = tenant.analyst.post(f"/v1/jobs/{job_id}/samples", json={"rows": 5})
            assert response.status_code == 202, response.text
            return uuid.UUID(response.json()["id"])

        flooded = [ask(flood, flood_job) for _ in range(5)]
        late = ask(other, other_job)
        settings = api_stack.settings
        drawn = []
        for message in [*flooded, late]:  # the messages in the order they were sent
            assert execute_sample(settings, message) == "succeeded"
            with api_stack.session() as session:
                newest = max(
                    (sample_repository.get(session, s) for s in [*flooded, late]),
                    key=lambda s: (s is not None and s.started_at is not None, s and s.started_at),
                )
                assert newest is not None
                drawn.append(newest.id)
        assert drawn[0] == flooded[0]
        assert drawn[1] == late, "the other tenant's sample waited behind the flood"
        assert drawn[2:] == flooded[1:]
        assert execute_sample(settings, late) == "skipped"  # a redelivered message: nothing left
    finally:
        flood.close()
        other.close()
