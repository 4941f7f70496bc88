"""Fixtures shared by the worker-stack tests."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import Tenant
from tests.support.api import create_dataset, submit, wait_for
from tests.support.stack import Stack


@pytest.fixture
def released(
    worker_stack: Stack, worker_tenant: Tenant, people_csv: bytes, people_schema: str
) -> dict[str, Any]:
    dataset = create_dataset(worker_tenant.owner, people_csv, people_schema, budget_rho="2")
    response = submit(worker_tenant.analyst, dataset["id"], rho="1", method="mst", seed=3)
    assert response.status_code == 202, response.text
    job = wait_for(worker_tenant.analyst, response.json()["id"])
    assert job["status"] == "succeeded", (job, worker_stack.logs())
    # The owner tier is built after the release is published; wait until it is listed.
    deadline = time.monotonic() + 60
    while (
        "report-owner.json"
        not in worker_tenant.owner.get(f"/v1/jobs/{job['id']}").json()["artefacts"]
    ):
        assert time.monotonic() < deadline, worker_stack.logs()
        time.sleep(0.1)
    return {"dataset": dataset, "job": job}
