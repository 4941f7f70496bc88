"""The dry run of a submission (``?dry_run=true``): validated exactly as a submission, nothing
reserved or written, and a body whose numbers match what the real submission then does (real
HTTP, no worker)."""

from __future__ import annotations

import math
import uuid
from decimal import Decimal
from typing import Any

import httpx
import pytest

from app.db.base import utcnow
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit, untouched_budget
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack


@pytest.fixture
def people(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict[str, Any]:
    return create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")


@pytest.fixture
def adult(tenant: Tenant, adult_csv: bytes, adult_schema: str) -> dict[str, Any]:
    return create_dataset(tenant.owner, adult_csv, adult_schema, budget_rho="1")


def dry_run(
    client: httpx.Client,
    dataset_id: str,
    body: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return client.post(
        f"/v1/datasets/{dataset_id}/jobs",
        params={"dry_run": "true"},
        json=body,
        headers=headers or {},
    )


def _assert_untouched(stack: Stack, tenant: Tenant, dataset_id: str) -> None:
    assert budget(tenant.analyst, dataset_id) == untouched_budget("1")
    items = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    assert [(e["kind"], e["rho"]) for e in items] == [("grant", "1")]
    assert tenant.analyst.get(f"/v1/datasets/{dataset_id}/jobs").json()["items"] == []
    assert_reconciled(stack, dataset_id)


def test_dry_run_reserves_and_writes_nothing(
    api_stack: Stack, tenant: Tenant, people: dict[str, Any]
) -> None:
    body = {"method": "mst", "budget": {"rho": "0.25"}}
    for _ in range(3):
        response = dry_run(tenant.analyst, people["id"], body, headers={"Idempotency-Key": "k1"})
        assert response.status_code == 200, response.text
    _assert_untouched(api_stack, tenant, people["id"])
    # The key was not claimed: a different request may use it for real.
    real = submit(tenant.analyst, people["id"], rho="0.5", headers={"Idempotency-Key": "k1"})
    assert real.status_code == 202, real.text
    assert real.json()["rho"] == "0.5"


def test_body_matches_what_the_submission_then_reserves(
    tenant: Tenant, people: dict[str, Any]
) -> None:
    body = {"method": "independent", "budget": {"rho": "0.3"}, "rows": 500}
    preview = dry_run(tenant.analyst, people["id"], body).json()
    assert preview["method"] == "independent"
    assert preview["params"] == {}
    assert preview["rows"] == 500
    assert preview["rho"] == "0.3"
    assert preview["epsilon"] is None and preview["delta"] is None
    assert preview["remaining_rho"] == "1"
    assert preview["remaining_rho_after"] == "0.7"
    assert preview["would_exceed_budget"] is False
    # ε falls as δ grows; each is positive.
    epsilons = [Decimal(p["epsilon"]) for p in preview["privacy_profile"]]
    deltas = [Decimal(p["delta"]) for p in preview["privacy_profile"]]
    assert deltas == sorted(deltas) and epsilons == sorted(epsilons, reverse=True)
    assert all(e > 0 for e in epsilons)
    # independent: one one-way marginal per column at ρ/d, σ = √(d/(2ρ)).
    columns = [
        c["name"] for c in tenant.owner.get(f"/v1/datasets/{people['id']}").json()["columns"]
    ]
    assert [n["attributes"] for n in preview["first_noise"]] == [[c] for c in columns]
    for noise in preview["first_noise"]:
        assert math.isclose(noise["sigma"], math.sqrt(len(columns) / (2 * 0.3)))
        assert math.isclose(noise["rho"], 0.3 / len(columns))
    assert preview["prediction"]["rows"] == 500
    assert preview["prediction"]["seconds"] > 0
    assert preview["prediction"]["seconds_factor"] >= 1
    assert preview["prediction"]["peak_memory_bytes"] > 0
    assert preview["limits"]["memory_limit_bytes"] == 3072 * 2**20
    assert 0 < preview["limits"]["memory_upper_bound_bytes"] <= 3072 * 2**20

    real = submit(tenant.analyst, people["id"], rho="0.3", rows=500)
    assert real.status_code == 202, real.text
    assert real.json()["rho"] == preview["rho"]
    after = budget(tenant.analyst, people["id"])
    assert after["reserved_rho"] == preview["rho"]
    assert after["remaining_rho"] == preview["remaining_rho_after"]


def test_epsilon_delta_form(tenant: Tenant, people: dict[str, Any]) -> None:
    body = {"method": "aim", "budget": {"epsilon": "1", "delta": "1e-6"}}
    preview = dry_run(tenant.analyst, people["id"], body).json()
    assert preview["epsilon"] == "1" and preview["delta"] == "0.000001"
    stated = {p["delta"]: Decimal(p["epsilon"]) for p in preview["privacy_profile"]}
    # ρ is the largest the CKS bound allows at (1, 1e-6), rounded down: ε at 1e-6 is at most 1.
    assert Decimal("0.99") < stated["0.000001"] <= 1
    real = submit(tenant.analyst, people["id"], rho=None, method="aim", budget=body["budget"])
    assert real.status_code == 202, real.text
    assert real.json()["rho"] == preview["rho"]
    assert budget(tenant.analyst, people["id"])["reserved_rho"] == preview["rho"]


def test_over_budget_reports_the_numbers_a_409_carries(
    api_stack: Stack, tenant: Tenant, people: dict[str, Any]
) -> None:
    body = {"method": "independent", "budget": {"rho": "1.5"}}
    preview = dry_run(tenant.analyst, people["id"], body)
    assert preview.status_code == 200, preview.text
    assert preview.json()["would_exceed_budget"] is True
    assert preview.json()["remaining_rho_after"] is None
    real = submit(tenant.analyst, people["id"], rho="1.5")
    assert real.status_code == 409
    assert real.json()["requested_rho"] == preview.json()["rho"]
    assert real.json()["remaining_rho"] == preview.json()["remaining_rho"]
    _assert_untouched(api_stack, tenant, people["id"])


@pytest.mark.parametrize(
    ("method", "params", "rows"),
    [
        pytest.param("mst", {"iterations": -3}, None, id="bad-param"),
        pytest.param("nope", {}, None, id="unknown-method"),
        pytest.param("aim", {"degree": 4, "max_model_size_mb": 4096}, None, id="memory-bound"),
        # Below RHOSYNTH_PARTITIONED_OUTPUT_ROWS (5 M), so drawn in memory: over 3 GiB.
        pytest.param("independent", {}, 4_900_000, id="rows-in-memory"),
    ],
)
def test_refusals_are_the_submissions_word_for_word(
    api_stack: Stack,
    tenant: Tenant,
    adult: dict[str, Any],
    method: str,
    params: dict[str, Any],
    rows: int | None,
) -> None:
    body: dict[str, Any] = {"method": method, "budget": {"rho": "0.01"}, "params": params}
    if rows is not None:
        body["rows"] = rows
    preview = dry_run(tenant.analyst, adult["id"], body)
    real = tenant.analyst.post(f"/v1/datasets/{adult['id']}/jobs", json=body)
    assert preview.status_code == real.status_code == 422, (preview.text, real.text)
    assert preview.json()["detail"] == real.json()["detail"]
    if method == "independent":
        assert "the limit per job is 3.0 GiB" in preview.json()["detail"]
    _assert_untouched(api_stack, tenant, adult["id"])


def test_unknown_dataset_is_404(tenant: Tenant) -> None:
    response = dry_run(
        tenant.analyst,
        "00000000-0000-4000-8000-000000000000",
        {"method": "independent", "budget": {"rho": "0.1"}},
    )
    assert response.status_code == 404


def test_prediction_needs_a_row_count_the_caller_may_see(
    tenant: Tenant, people: dict[str, Any]
) -> None:
    body = {"method": "independent", "budget": {"rho": "0.1"}}
    # The row count is private: an analyst who gives none gets no prediction ...
    assert dry_run(tenant.analyst, people["id"], body).json()["prediction"] is None
    # ... an owner, who sees it on the dataset, gets one for it.
    owned = dry_run(tenant.owner, people["id"], body).json()["prediction"]
    n_rows = tenant.owner.get(f"/v1/datasets/{people['id']}").json()["n_rows"]
    assert owned is not None and owned["rows"] == n_rows
    assert owned["rows_source"] == "dataset"
    assert (
        dry_run(tenant.analyst, people["id"], {**body, "rows": 77}).json()["prediction"][
            "rows_source"
        ]
        == "requested"
    )


def test_an_analyst_prediction_uses_the_latest_release_noisy_row_count(
    api_stack: Stack, tenant: Tenant, people: dict[str, Any]
) -> None:
    """Once a release sized by its mechanism exists, its output row count (a DP output the
    analyst sees on that job) sizes the prediction; a release with requested rows does not."""
    from sqlalchemy import update

    from app.jobs.models import Job

    body = {"method": "independent", "budget": {"rho": "0.1"}}
    sized = submit(tenant.analyst, people["id"], rho="0.1").json()["id"]
    requested = submit(tenant.analyst, people["id"], rho="0.1", rows=5).json()["id"]
    with api_stack.session() as session:
        for job_id, rows in ((sized, 391), (requested, 5)):
            session.execute(
                update(Job)
                .where(Job.id == uuid.UUID(job_id))
                .values(
                    status="succeeded",
                    output_key=f"outputs/{job_id}/attempt-1.parquet",
                    output_rows=rows,
                    finished_at=utcnow(),
                )
            )
    prediction = dry_run(tenant.analyst, people["id"], body).json()["prediction"]
    assert prediction["rows"] == 391 and prediction["rows_source"] == "previous_release"
