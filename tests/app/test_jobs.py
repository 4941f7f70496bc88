"""Job submission, budgets, idempotency and cancellation over real HTTP (no worker running)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal

import pytest

from engine.accounting import epsilon_from_rho_delta, rho_from_epsilon_delta
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit
from tests.support.ledger import D, assert_reconciled
from tests.support.stack import Stack


@pytest.fixture
def dataset(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict:
    return create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")


def _ledger(tenant: Tenant, dataset_id: str) -> list[tuple[str, str]]:
    items = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    return [(e["kind"], e["rho"]) for e in items]


def test_submit_reserves(api_stack: Stack, tenant: Tenant, dataset: dict) -> None:
    response = submit(tenant.analyst, dataset["id"], rho="0.3", rows=50, seed=11)
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued"
    assert job["rho"] == "0.3" and job["epsilon"] is None and job["delta"] is None
    assert job["rows"] == 50 and job["seed"] == 11
    assert job["progress"] == {"fraction": 0.0, "stage": "queued"}
    assert job["started_at"] is None and job["error"] is None
    assert budget(tenant.analyst, dataset["id"]) == {
        "total_rho": "1",
        "spent_rho": "0",
        "reserved_rho": "0.3",
        "remaining_rho": "0.7",
        "total_delta": "0",
        "spent_delta": "0",
        "remaining_delta": "0",
    }
    assert _ledger(tenant, dataset["id"]) == [("grant", "1"), ("reserve", "0.3")]
    read = tenant.analyst.get(f"/v1/jobs/{job['id']}").json()
    assert read["queue"]["position"] == 1  # GET only: where it stands
    assert read | {"queue": None} == job
    listed = tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"]
    assert [j["id"] for j in listed] == [job["id"]]
    assert_reconciled(api_stack, dataset["id"])


def test_epsilon_delta_budget_converted_safely(tenant: Tenant, dataset: dict) -> None:
    response = submit(tenant.analyst, dataset["id"], budget={"epsilon": 1, "delta": "1e-9"})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["epsilon"] == "1" and job["delta"] == "0.000000001"
    rho = Decimal(job["rho"])
    assert rho == rho_from_epsilon_delta(Decimal(1), Decimal("1e-9"))
    assert abs(rho - Decimal("0.0149730577")) < Decimal("1e-9")
    assert rho <= Decimal("0.0149730577") + Decimal("1e-12")


def test_a_queued_job_says_where_it_stands(tenant: Tenant, dataset: dict) -> None:
    """Issue 26 §3 over HTTP (the counts themselves: tests/app/test_queue_place.py). No worker
    runs here; other tests' tenants may have queued jobs, so only this tenant's part is exact."""
    first = submit(tenant.analyst, dataset["id"], rho="0.1").json()
    second = submit(tenant.analyst, dataset["id"], rho="0.1").json()
    assert first["queue"] is None  # GET /v1/jobs/{id} only
    place = tenant.analyst.get(f"/v1/jobs/{second['id']}").json()["queue"]
    # Submitted after the minute or not, the first counts ahead of the second.
    assert place["position"] == 2 and place["jobs_ahead"] >= 1
    as_of = datetime.fromisoformat(place["as_of"])
    assert as_of.second == as_of.microsecond == 0 and as_of <= datetime.now(UTC)
    assert tenant.analyst.get(f"/v1/jobs/{first['id']}").json()["queue"]["position"] == 1
    listed = tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"]
    assert [job["queue"] for job in listed] == [None, None]
    tenant.analyst.post(f"/v1/jobs/{first['id']}/cancel")
    assert tenant.analyst.get(f"/v1/jobs/{first['id']}").json()["queue"] is None
    place = tenant.analyst.get(f"/v1/jobs/{second['id']}").json()["queue"]
    # The cancel shows from the first whole minute after it (the owner sees its exact time).
    cancelled = tenant.owner.get(f"/v1/jobs/{first['id']}").json()
    as_of = datetime.fromisoformat(place["as_of"])
    gone = max(datetime.fromisoformat(cancelled[t]) for t in ("created_at", "finished_at"))
    assert place["position"] == (1 if gone <= as_of else 2)


def test_over_budget_is_refused_without_ledger_change(
    api_stack: Stack, tenant: Tenant, dataset: dict
) -> None:
    assert submit(tenant.analyst, dataset["id"], rho="0.75").status_code == 202
    before = _ledger(tenant, dataset["id"])
    response = submit(tenant.analyst, dataset["id"], rho="0.26")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "over the dataset's remaining privacy budget: the request needs ρ = 0.26, the "
        "dataset has ρ = 0.25 left. Ask for less, or ask an owner of the dataset to add budget "
        f"(POST /v1/datasets/{dataset['id']}/budget); nothing was reserved",
        "requested_rho": "0.26",
        "remaining_rho": "0.25",
        "limit": "dataset",
        "quota": None,
        "delta": None,
        "requested_epsilon": None,
        "remaining_epsilon": None,
    }
    # Asked in (ε, δ), the refusal answers in ε at that δ too (issue 26 §7).
    in_epsilon = submit(
        tenant.analyst, dataset["id"], rho=None, budget={"epsilon": 10, "delta": "1e-6"}
    )
    assert in_epsilon.status_code == 409, in_epsilon.text
    refused = in_epsilon.json()
    left = epsilon_from_rho_delta(Decimal("0.25"), Decimal("1e-6"))
    assert refused["remaining_epsilon"] == str(left) and refused["delta"] == "0.000001"
    assert refused["requested_epsilon"] == "10"
    assert f"ε = 10 at δ = 0.000001 (ρ = {refused['requested_rho']})" in refused["detail"]
    assert f"ε = {left} at that δ (ρ = 0.25) left" in refused["detail"]
    assert _ledger(tenant, dataset["id"]) == before
    assert submit(tenant.analyst, dataset["id"], rho="0.25").status_code == 202  # exactly fits
    assert budget(tenant.analyst, dataset["id"])["remaining_rho"] == "0"
    assert submit(tenant.analyst, dataset["id"], rho="0.000000000001").status_code == 409
    assert_reconciled(api_stack, dataset["id"])


@pytest.mark.parametrize(
    "body",
    [
        {"method": "nope", "budget": {"rho": 0.1}},
        {"method": "independent", "budget": {"rho": 0.1}, "params": {"unknown": 1}},
        {"method": "independent", "budget": {"rho": 0}},
        {"method": "independent", "budget": {"rho": -0.1}},
        {"method": "independent", "budget": {"rho": "0.1234567890123"}},
        {"method": "independent", "budget": {"rho": "abc"}},
        {"method": "independent", "budget": {"epsilon": 1, "delta": 0}},
        {"method": "independent", "budget": {"epsilon": 1, "delta": 1}},
        {"method": "independent", "budget": {"epsilon": 1, "delta": 1.5}},
        {"method": "independent", "budget": {"epsilon": 1, "delta": "0.9999999999999999"}},
        {"method": "independent", "budget": {"epsilon": 1, "delta": 0.0011}},
        {"method": "independent", "budget": {"epsilon": 0, "delta": 1e-6}},
        {"method": "independent", "budget": {"epsilon": 1}},
        {"method": "independent", "budget": {"rho": 0.1, "epsilon": 1, "delta": 1e-6}},
        {"method": "independent", "budget": {"epsilon": 1e-9, "delta": 1e-300}},
        {"method": "independent", "budget": {"rho": 0.1}, "rows": 0},
        {"method": "independent", "budget": {"rho": 0.1}, "rows": 10**12},
        {"method": "independent", "budget": {"rho": 0.1}, "seed": -1},
        {"method": "independent", "budget": {"rho": 0.1}, "surprise": True},
        {"budget": {"rho": 0.1}},
    ],
)
def test_invalid_requests_reserve_nothing(tenant: Tenant, dataset: dict, body: dict) -> None:
    response = tenant.analyst.post(f"/v1/datasets/{dataset['id']}/jobs", json=body)
    assert response.status_code == 422, response.text
    assert _ledger(tenant, dataset["id"]) == [("grant", "1")]


@pytest.mark.parametrize(
    ("given", "location", "says"),
    [
        # Issue 26 §2: each used to answer with the errors of both budget forms
        # ("budget.RhoBudgetIn.rho: Field required; budget.EpsilonDeltaBudgetIn.rho: Extra ...").
        ({"epsilon": 1}, ["body", "budget"], "delta is missing"),
        ({"delta": "1e-6"}, ["body", "budget"], "epsilon is missing"),
        ({"rho": 0.1, "epsilon": 1, "delta": 1e-6}, ["body", "budget"], "either rho, or epsilon"),
        ({}, ["body", "budget"], "either rho, or epsilon and delta"),
        ("0.1", ["body", "budget"], "either rho, or epsilon and delta"),
        ({"rho": "abc"}, ["body", "budget", "rho"], "expected a decimal number"),
        ({"epsilon": 1, "delta": 0.5}, ["body", "budget", "delta"], "less than or equal"),
        ({"rho": 0.1, "surprise": 1}, ["body", "budget", "surprise"], "Extra inputs"),
    ],
)
def test_a_malformed_budget_gets_one_error_of_its_own_form(
    tenant: Tenant, dataset: dict, given: object, location: list[str], says: str
) -> None:
    response = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs", json={"method": "independent", "budget": given}
    )
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == location and says in error["msg"], error
    assert "BudgetIn" not in response.text and "epsilon_delta" not in response.text


def test_idempotency_key(api_stack: Stack, tenant: Tenant, dataset: dict) -> None:
    key = {"Idempotency-Key": f"req-{uuid.uuid4()}"}
    first = submit(tenant.analyst, dataset["id"], rho="0.1", seed=3, headers=key)
    again = submit(tenant.analyst, dataset["id"], rho="0.1", seed=3, headers=key)
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    different = submit(tenant.analyst, dataset["id"], rho="0.2", seed=3, headers=key)
    assert different.status_code == 409
    assert "Idempotency-Key" in different.json()["detail"]
    assert _ledger(tenant, dataset["id"]) == [("grant", "1"), ("reserve", "0.1")]
    # A key is scoped to its tenant's requests; another key is another job.
    other = submit(
        tenant.analyst, dataset["id"], rho="0.1", seed=3, headers={"Idempotency-Key": "other"}
    )
    assert other.json()["id"] != first.json()["id"]
    assert_reconciled(api_stack, dataset["id"])


def test_idempotency_under_50_parallel_requests(
    api_stack: Stack, tenant: Tenant, dataset: dict
) -> None:
    key = {"Idempotency-Key": f"parallel-{uuid.uuid4()}"}

    def once(_: int) -> tuple[int, str]:
        with api_stack.client(tenant.analyst.headers["Authorization"].split()[1]) as client:
            response = submit(client, dataset["id"], rho="0.05", headers=key)
            return response.status_code, response.json().get("id", "")

    with ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(once, range(50)))
    assert {status for status, _ in results} == {202}
    assert len({job_id for _, job_id in results}) == 1
    assert _ledger(tenant, dataset["id"]) == [("grant", "1"), ("reserve", "0.05")]
    assert len(tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"]) == 1
    assert_reconciled(api_stack, dataset["id"])


def test_concurrent_submissions_never_overspend(
    api_stack: Stack, tenant: Tenant, dataset: dict
) -> None:
    """RELIABILITY.md test 1: N=100 concurrent requests against a budget for k=10.

    Each request behaves like a well-written client: its own Idempotency-Key, and a retry after
    a 503 (the documented answer when PostgreSQL has no connection to spare), which the key makes
    safe. Whatever the machine's load, exactly 10 are accepted.
    """
    token = tenant.analyst.headers["Authorization"].split()[1]
    burst = uuid.uuid4().hex

    def once(i: int) -> tuple[int, int]:
        key = {"Idempotency-Key": f"burst-{burst}-{i}"}
        with api_stack.client(token) as client:
            for attempt in range(20):
                response = submit(client, dataset["id"], rho="0.1", headers=key)
                if response.status_code != 503:
                    return response.status_code, attempt
                time.sleep(float(response.headers["Retry-After"]))
        return 503, attempt

    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(once, range(100)))
    statuses = [status for status, _ in results]
    accepted, refused = statuses.count(202), statuses.count(409)
    assert (accepted, refused) == (10, 90), Counter(statuses)
    assert not [s for s in statuses if s >= 500]
    state = budget(tenant.analyst, dataset["id"])
    assert state["reserved_rho"] == "1" and state["remaining_rho"] == "0"
    result = assert_reconciled(api_stack, dataset["id"])
    assert result.reserved == D("1")


def test_cancel_queued_releases(api_stack: Stack, tenant: Tenant, dataset: dict) -> None:
    job = submit(tenant.analyst, dataset["id"], rho="0.4").json()
    response = tenant.analyst.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 202
    cancelled = response.json()
    assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
    assert budget(tenant.analyst, dataset["id"])["remaining_rho"] == "1"
    assert _ledger(tenant, dataset["id"]) == [
        ("grant", "1"),
        ("reserve", "0.4"),
        ("release", "0.4"),
    ]
    assert tenant.analyst.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409
    assert tenant.analyst.get(f"/v1/jobs/{job['id']}/output").status_code == 409
    assert_reconciled(api_stack, dataset["id"])


def test_output_of_unfinished_job(tenant: Tenant, dataset: dict) -> None:
    job = submit(tenant.analyst, dataset["id"]).json()
    response = tenant.analyst.get(f"/v1/jobs/{job['id']}/output")
    assert response.status_code == 409
    assert (
        tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "xml"}).status_code
        == 422
    )


def test_methods_catalogue(tenant: Tenant) -> None:
    methods = tenant.analyst.get("/v1/methods").json()["items"]
    independent = next(m for m in methods if m["name"] == "independent")
    assert independent["description"]
    assert independent["params_schema"]["type"] == "object"
    assert independent["params_schema"].get("additionalProperties") is False


def test_json_body_cap(tenant: Tenant, dataset: dict) -> None:
    response = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs",
        content=b'{"method": "independent", "params": {"x": "' + b"a" * (2 * 1024 * 1024) + b'"}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413
