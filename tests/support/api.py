"""Small helpers for talking to a running rhosynth in tests."""

from __future__ import annotations

import time
from typing import Any

import httpx


def upload(
    client: httpx.Client,
    data: bytes,
    schema: str,
    *,
    name: str = "table",
    budget_rho: str = "1",
    filename: str = "table.csv",
    budget_delta: str | None = None,
    discovery_rho: str | None = None,
) -> httpx.Response:
    fields = {"schema": schema, "name": name, "budget_rho": budget_rho}
    if budget_delta is not None:
        fields["budget_delta"] = budget_delta
    if discovery_rho is not None:
        fields["discovery_rho"] = discovery_rho
    return client.post(
        "/v1/datasets",
        files={"file": (filename, data, "application/octet-stream")},
        data=fields,
    )


def create_dataset(
    client: httpx.Client, data: bytes, schema: str, budget_rho: str = "1", **kw: Any
) -> dict[str, Any]:
    response = upload(client, data, schema, budget_rho=budget_rho, **kw)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def submit(
    client: httpx.Client,
    dataset_id: str,
    *,
    rho: str | None = "0.1",
    method: str = "independent",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> httpx.Response:
    body: dict[str, Any] = {"method": method, **extra}
    if "budget" not in body:
        body["budget"] = {"rho": rho}
    return client.post(f"/v1/datasets/{dataset_id}/jobs", json=body, headers=headers or {})


def wait_for(
    client: httpx.Client,
    job_id: str,
    statuses: tuple[str, ...] = ("succeeded", "failed", "cancelled"),
    timeout: float = 120,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in statuses:
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not reach {statuses} in {timeout}s: {job}")


def wait_for_sample(client: httpx.Client, sample_id: str, timeout: float = 120) -> dict[str, Any]:
    """The derived sample once it succeeded or failed (AssertionError after ``timeout``)."""
    deadline = time.monotonic() + timeout
    sample: dict[str, Any] = {}
    while time.monotonic() < deadline:
        sample = client.get(f"/v1/samples/{sample_id}").json()
        if sample["status"] in ("succeeded", "failed"):
            return sample
        time.sleep(0.1)
    raise AssertionError(f"sample {sample_id} did not finish in {timeout}s: {sample}")


def untouched_budget(total_rho: str, total_delta: str = "0") -> dict[str, str]:
    """The ``budget`` a dataset shows before anything was reserved or spent."""
    return {
        "total_rho": total_rho,
        "spent_rho": "0",
        "reserved_rho": "0",
        "remaining_rho": total_rho,
        "total_delta": total_delta,
        "spent_delta": "0",
        "remaining_delta": total_delta,
    }


def budget(client: httpx.Client, dataset_id: str) -> dict[str, str]:
    body: dict[str, str] = client.get(f"/v1/datasets/{dataset_id}").json()["budget"]
    return body


def succeeded_job(stack: Any, tenant: Any, data: bytes, schema: str, **submit_kwargs: Any) -> str:
    """A new dataset and a job of it run to success in this process (for stacks without a
    worker); returns the job's id. ``submit_kwargs`` go to :func:`submit` (default ρ 0.5)."""
    import uuid

    from app.db.session import get_session_factory
    from app.jobs import execution

    settings = stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    dataset = create_dataset(tenant.owner, data, schema)
    response = submit(tenant.analyst, dataset["id"], **{"rho": "0.5", **submit_kwargs})
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    claim = execution.claim_and_charge(factory, settings, uuid.UUID(job_id))
    assert claim is not None
    assert execution._run_attempt(factory, settings, claim).status == "succeeded"
    return job_id
