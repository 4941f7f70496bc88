"""Upload → submit → a real Celery worker process runs the job → download, over real HTTP."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engine.mechanisms import MECHANISMS
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit, wait_for
from tests.support.ledger import D, assert_reconciled
from tests.support.stack import Stack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _ledger_kinds(tenant: Tenant, dataset_id: str) -> list[tuple[str, str]]:
    items = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    return [(e["kind"], e["rho"]) for e in items]


def test_release_in_original_value_space(
    worker_stack: Stack, worker_tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="2")
    response = submit(tenant.analyst, dataset["id"], rho="1", rows=3000, seed=5)
    assert response.status_code == 202
    job = wait_for(tenant.analyst, response.json()["id"])
    assert job["status"] == "succeeded", (job, worker_stack.logs())
    assert job["output_rows"] == 3000
    assert job["progress"] == {"fraction": 1.0, "stage": "done"}
    assert job["started_at"] and job["finished_at"] and job["error"] is None

    # Budget: reserved at submission, spent when the worker claimed it, never released.
    assert _ledger_kinds(tenant, dataset["id"]) == [
        ("grant", "2"),
        ("reserve", "1"),
        ("spend", "1"),
    ]
    assert budget(tenant.analyst, dataset["id"]) == {
        "total_rho": "2",
        "spent_rho": "1",
        "reserved_rho": "0",
        "remaining_rho": "1",
        "total_delta": "0",
        "spent_delta": "0",
        "remaining_delta": "0",
    }
    assert_reconciled(worker_stack, dataset["id"])

    # CSV download: declared categories (formula-like ones escaped), values inside the bins.
    response = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "csv"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    assert "attachment" in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 3000
    declared = json.loads(people_schema)["columns"][0]["categories"]
    escaped = {c if c[0] not in "=+-@" else "'" + c for c in declared}
    assert {r["city"] for r in rows} <= escaped
    assert not any(r["city"].startswith(("=", "+", "-", "@")) for r in rows)
    assert all(0.0 <= float(r["age"]) <= 100.0 for r in rows)
    assert {r["tier"] for r in rows} <= {"0", "1", "2", "3"}
    assert all(0.0 <= float(r["income"]) <= 200000.0 for r in rows)
    # Numeric bins become values spread inside the bin, not the bin's edge.
    assert len({r["age"] for r in rows}) > 1000

    # Parquet download: the same table, typed.
    response = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "parquet"})
    assert response.status_code == 200
    table = pq.read_table(io.BytesIO(response.content))
    assert table.num_rows == 3000 and table.column_names == ["city", "age", "tier", "income"]
    parquet_cities = table.column("city").to_pylist()
    assert set(parquet_cities) <= set(declared)
    # The CSV is the same table: unescaping its cities gives the Parquet column, row for row.
    assert [
        r["city"][1:] if r["city"].startswith("'") else r["city"] for r in rows
    ] == parquet_cities
    assert [float(r["age"]) for r in rows] == table.column("age").to_pylist()

    # A finished job cannot be cancelled; times are coarse for analysts, exact for owners.
    assert tenant.analyst.post(f"/v1/jobs/{job['id']}/cancel").status_code == 409
    analyst_started = datetime.fromisoformat(job["started_at"])
    assert analyst_started.second == 0 and analyst_started.microsecond == 0
    owner_view = tenant.owner.get(f"/v1/jobs/{job['id']}").json()
    owner_started = datetime.fromisoformat(owner_view["started_at"])
    assert owner_started >= datetime.fromisoformat(owner_view["created_at"])
    assert owner_started.replace(second=0, microsecond=0) == analyst_started


def test_default_rows_come_from_the_noisy_estimate(
    worker_stack: Stack, worker_tenant: Tenant, adult_csv: bytes, adult_schema: str
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, adult_csv, adult_schema, budget_rho="10")
    response = submit(tenant.analyst, dataset["id"], budget={"epsilon": 5, "delta": "1e-6"})
    job = wait_for(tenant.analyst, response.json()["id"])
    assert job["status"] == "succeeded", worker_stack.logs()
    # 14 columns, ρ ≈ 0.4: the precision-weighted total has a standard deviation of a few rows.
    assert abs(job["output_rows"] - 1000) < 100
    body = tenant.analyst.get(f"/v1/jobs/{job['id']}/output").text.splitlines()
    # The header's cells are quoted since issue 11 (OWASP: every text cell quoted).
    assert next(csv.reader([body[0]])) == list(json.loads(adult_schema))
    assert len(body) == job["output_rows"] + 1
    sizes = list(json.loads(adult_schema).values())
    for line in body[1:200]:
        values = [int(v) for v in line.split(",")]
        assert all(0 <= v < s for v, s in zip(values, sizes, strict=True))
    spent = D(tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]["spent_rho"])
    assert spent == D(job["rho"])
    assert_reconciled(worker_stack, dataset["id"])


def test_deleting_the_dataset_erases_outputs(
    worker_stack: Stack, worker_tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job = wait_for(tenant.analyst, submit(tenant.analyst, dataset["id"], rho="0.5").json()["id"])
    assert job["status"] == "succeeded"
    outputs = worker_stack.settings.resolved_storage_dir / "outputs" / job["id"]
    assert any(outputs.iterdir())
    assert tenant.owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 200
    assert not outputs.exists()
    assert tenant.analyst.get(f"/v1/jobs/{job['id']}/output").status_code == 410
    assert tenant.analyst.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded"
    kinds = [k for k, _ in _ledger_kinds(tenant, dataset["id"])]
    assert kinds == ["grant", "reserve", "spend"]


@pytest.mark.parametrize("budget_rho", ["0.3"])
def test_many_jobs_spend_exactly_the_total(
    worker_stack: Stack,
    worker_tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    budget_rho: str,
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho=budget_rho)
    ids = [submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"] for _ in range(3)]
    assert submit(tenant.analyst, dataset["id"], rho="0.1").status_code == 409
    for job_id in ids:
        assert wait_for(tenant.analyst, job_id)["status"] == "succeeded"
    state = budget(tenant.analyst, dataset["id"])
    assert state == {
        "total_rho": "0.3",
        "spent_rho": "0.3",
        "reserved_rho": "0",
        "remaining_rho": "0",
        "total_delta": "0",
        "spent_delta": "0",
        "remaining_delta": "0",
    }
    assert_reconciled(worker_stack, dataset["id"])


def test_progress_is_reported_while_running(
    worker_stack: Stack, worker_tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = submit(tenant.analyst, dataset["id"], rho="0.5", rows=8_000_000).json()["id"]
    seen: list[tuple[float, str]] = []
    while True:
        job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
        seen.append((job["progress"]["fraction"], job["progress"]["stage"]))
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
    assert job["status"] == "succeeded", worker_stack.logs()
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions), "progress never goes backwards"
    assert any(0 < f < 1 for f in fractions), seen
    assert {stage for _, stage in seen} & {"load", "measure", "estimate", "sample", "write"}
    assert seen[-1] == (1.0, "done")


# Quick settings per method (defaults otherwise); every registered method must be listed.
SERVICE_PARAMS: dict[str, dict] = {
    "independent": {},
    "mst": {"iterations": 300},
    "aim": {"rounds": 8, "round_iterations": 30, "iterations": 300},
    "privsyn": {"iterations": 20},
    "ppsyn": {"rounds": 6, "round_iterations": 30, "iterations": 300},
    "privmrf": {"round_iterations": 10, "iterations": 100},
    "dpcopula": {},
    "cipher": {},
}


def test_every_registered_method_is_exercised() -> None:
    assert set(SERVICE_PARAMS) == set(MECHANISMS)


@pytest.mark.parametrize(("method", "params"), sorted(SERVICE_PARAMS.items()))
def test_every_method_through_the_service(
    worker_stack: Stack,
    worker_tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    method: str,
    params: dict,
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="2")
    methods = {m["name"]: m for m in tenant.analyst.get("/v1/methods").json()["items"]}
    assert set(params) <= set(methods[method]["params_schema"]["properties"])
    response = submit(tenant.analyst, dataset["id"], rho="1", method=method, params=params, seed=3)
    assert response.status_code == 202, response.text
    job = wait_for(tenant.analyst, response.json()["id"], timeout=180)
    assert job["status"] == "succeeded", (job, worker_stack.logs()[-4000:])
    rows = list(
        csv.DictReader(io.StringIO(tenant.analyst.get(f"/v1/jobs/{job['id']}/output").text))
    )
    assert abs(len(rows) - 400) < 60  # the noisy estimate of the row count
    declared = json.loads(people_schema)["columns"][0]["categories"]
    escaped = {c if c[0] not in "=+-@" else "'" + c for c in declared}
    assert {r["city"] for r in rows} <= escaped
    assert all(0.0 <= float(r["age"]) <= 100.0 for r in rows)
    assert {r["tier"] for r in rows} <= {"0", "1", "2", "3"}
    assert _ledger_kinds(tenant, dataset["id"]) == [
        ("grant", "2"),
        ("reserve", "1"),
        ("spend", "1"),
    ]
    bad = submit(tenant.analyst, dataset["id"], rho="0.1", method=method, params={"nope": 1})
    assert bad.status_code == 422 and "invalid params" in bad.json()["detail"]
