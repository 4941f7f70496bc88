"""Issue 24 §5: the live-sample cap is counted under a lock. 40 simultaneous requests, released
together by a barrier, against a cap of 20 accepted 26 before (60: 31); now exactly 20."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx

from app.db.session import get_session_factory
from app.jobs import execution
from app.jobs.execution import claim_and_charge
from app.samples import repository as sample_repository
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack

BURST = 40


def test_a_burst_of_samples_cannot_pass_the_cap(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings = api_stack.settings
    cap = settings.tenant_max_live_samples
    assert cap < BURST
    factory = get_session_factory(settings.sqlalchemy_url)
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = uuid.UUID(submit(tenant.analyst, dataset["id"], rho="0.5").json()["id"])
    claim = claim_and_charge(factory, settings, job_id)
    assert claim is not None
    # The job runs in this process (this stack has no worker, so the samples stay queued).
    assert execution._run_attempt(factory, settings, claim).status == "succeeded"

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
