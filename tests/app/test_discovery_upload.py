"""DP discovery at upload over HTTP: the schema is completed with DP bins and categories, the
ledger records one `discover` entry whose ρ and δ are exactly the sum of the mechanisms' costs,
the dataset marks what was discovered, and an analyst sees no value that was neither declared nor
released by a mechanism. Refusals (no δ for an open set, a budget too small) store nothing."""

from __future__ import annotations

import io
import json
import random
from fractions import Fraction
from typing import Any

import pandas as pd

from tests.conftest import Tenant
from tests.support.api import create_dataset, upload
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack

ROWS = 2_000
RARE = "Zanzibar-only-once"


def _table() -> bytes:
    rng = random.Random(12)
    rows = []
    for i in range(ROWS):
        rows.append(
            {
                "id": f"ID-{i:06d}",
                "age": str(rng.randint(18, 90)),
                "income": "" if i % 10 == 0 else f"{rng.lognormvariate(10, 1):.2f}",
                "city": rng.choice(["Lyon", "Paris", "Nantes", "Lyon", ""]),
                "tier": rng.choice(["a", "b"]),
                "joined": f"20{rng.randint(10, 19)}-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}",
            }
        )
    rows[7]["city"] = RARE
    frame = pd.DataFrame(rows)
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "ignore"},
        {"name": "age", "type": "numeric", "min": 0, "max": 100, "integer": True,
         "bins": {"quantiles": 4}},
        {"name": "income", "type": "numeric", "min": 0, "max": 1000000, "clip": True,
         "nullable": True, "decimals": 2, "bins": {"quantiles": 8}},
        {"name": "city", "type": "categorical", "other": "Other", "nullable": True,
         "categories": {"discover": True, "max": 10}},
        {"name": "tier", "type": "categorical",
         "categories": {"discover": True, "max": 4, "candidates": ["a", "b", "c", "d"],
                        "rho": 0.5}},
        {"name": "joined", "type": "date", "min": "2010-01-01", "max": "2019-12-31",
         "bins": {"quantiles": 4}},
    ]
}  # fmt: skip


def _ledger(tenant: Tenant, dataset_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()[
        "items"
    ]
    return items


def test_discovery_completes_the_schema_and_is_charged_exactly(
    api_stack: Stack, tenant: Tenant
) -> None:
    dataset = create_dataset(
        tenant.owner, _table(), json.dumps(SCHEMA), budget_rho="10", budget_delta="0.000001"
    )
    entries = _ledger(tenant, dataset["id"])
    assert [e["kind"] for e in entries] == ["grant", "discover"]
    discover = entries[1]
    # The noisy row count and four clauses share the default pool (a fifth of ρ = 10; each share
    # rounded down to the ledger's 1e-12, none capped by need at 2,000 rows), tier brings its own
    # 0.5; the one open set (city) takes all of budget_delta.
    spent = Fraction(discover["rho"])
    assert Fraction(5, 2) - Fraction(5, 10**12) <= spent <= Fraction(5, 2)
    assert (discover["delta"], discover["job_id"]) == ("0.000001", None)
    columns = discover["detail"]["columns"]
    assert set(columns) == {"age", "income", "city", "tier", "joined"}
    rows = discover["detail"]["rows"]
    assert sum(Fraction(c["rho"]) for c in columns.values()) + Fraction(rows["rho"]) == spent
    assert sum(Fraction(c["delta"]) for c in columns.values()) == Fraction(1, 10**6)
    assert Fraction(columns["tier"]["rho"]) == Fraction(1, 2)
    account = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    assert (Fraction(account["spent_rho"]), account["spent_delta"]) == (spent, "0.000001")
    assert_reconciled(api_stack, dataset["id"])

    shown = tenant.analyst.get(f"/v1/datasets/{dataset['id']}")
    assert shown.status_code == 200
    by_name = {c["name"]: c for c in shown.json()["columns"]}
    assert {n for n, c in by_name.items() if c["discovered"]} == set(columns)
    assert shown.json()["dropped_columns"] == ["id"]
    age = by_name["age"]["bins"]
    assert age[0] == 0 and age[-1] == 100 and 2 <= len(age) <= 5
    assert all(float(e).is_integer() for e in age)
    assert by_name["joined"]["bins"][0] == "2010-01-01"
    # A value one row holds is released with probability at most δ = 1e-6 (docs/discovery.md).
    assert set(by_name["city"]["categories"]) <= {"Lyon", "Paris", "Nantes"}
    assert {"Lyon", "Paris", "Nantes"} <= set(by_name["city"]["categories"])  # ~500 rows each
    assert RARE not in shown.text and "ID-000001" not in shown.text
    assert {"a", "b"} <= set(by_name["tier"]["categories"]) <= {"a", "b", "c", "d"}
    assert shown.json()["n_rows"] is None


def test_open_set_without_delta_and_overdrawn_budgets_store_nothing(tenant: Tenant) -> None:
    before = tenant.owner.get("/v1/datasets").json()["items"]
    response = upload(tenant.owner, _table(), json.dumps(SCHEMA), budget_rho="10")
    assert response.status_code == 422
    assert "budget_delta > 0" in response.json()["detail"]
    response = upload(
        tenant.owner,
        _table(),
        json.dumps(SCHEMA),
        budget_rho="0.4",  # tier alone asks for 0.5
        budget_delta="0.000001",
    )
    assert response.status_code == 422
    assert "more than the upload's budget" in response.json()["detail"]
    response = upload(
        tenant.owner,
        _table(),
        json.dumps({**SCHEMA, "discovered": ["age"]}),
        budget_rho="10",
        budget_delta="0.000001",
    )
    assert response.status_code == 422
    assert tenant.owner.get("/v1/datasets").json()["items"] == before


def test_discovery_rho_sets_the_shared_pool(tenant: Tenant) -> None:
    dataset = create_dataset(
        tenant.owner,
        _table(),
        json.dumps(SCHEMA),
        budget_rho="10",
        budget_delta="0.000001",
        discovery_rho="2",
    )
    discover = _ledger(tenant, dataset["id"])[1]
    # The pool of 2 (each share rounded down to 1e-12), and 0.5 for tier.
    assert Fraction(5, 2) - Fraction(5, 10**12) <= Fraction(discover["rho"]) <= Fraction(5, 2)
    too_much = upload(tenant.owner, _table(), json.dumps(SCHEMA), budget_rho="1", discovery_rho="2")
    assert too_much.status_code == 422


def _quantile_columns(count: int) -> tuple[bytes, str]:
    names = [f"q{i:03d}" for i in range(count)]
    schema = {
        "columns": [
            {"name": n, "type": "numeric", "min": 0, "max": 100, "bins": {"quantiles": 4}}
            for n in names
        ]
    }
    data = ",".join(names) + "\n" + ",".join("5" for _ in names) + "\n"
    return data.encode(), json.dumps(schema)


def test_many_discovered_columns_are_refused_before_reading_or_stored(tenant: Tenant) -> None:
    # 260 quantile columns once made a ledger detail over 64 KiB: HTTP 500 after the release.
    before = tenant.owner.get("/v1/datasets").json()["items"]
    response = upload(tenant.owner, *_quantile_columns(260), budget_rho="10")
    assert response.status_code == 422, response.text
    assert "65536 bytes" in response.json()["detail"]
    assert tenant.owner.get("/v1/datasets").json()["items"] == before
    # 200 still fit (the compact detail takes about 200 bytes a column).
    dataset = create_dataset(tenant.owner, *_quantile_columns(200), budget_rho="10")
    (discover,) = [e for e in _ledger(tenant, dataset["id"]) if e["kind"] == "discover"]
    assert len(discover["detail"]["columns"]) == 200


def test_clauses_beyond_the_mechanisms_limits_are_422_before_counting(tenant: Tenant) -> None:
    data, raw = _quantile_columns(1)
    schema = json.loads(raw)
    schema["columns"][0]["bins"] = {"quantiles": 5000}  # once a 500 after counting
    response = upload(tenant.owner, data, json.dumps(schema), budget_rho="10")
    assert response.status_code == 422, response.text
    assert "from 1 to 4096" in response.json()["detail"]
