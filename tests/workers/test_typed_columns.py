"""The mixed raw fixture released by a real worker: typed output, public domain, nulls kept."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.conftest import Tenant
from tests.support.api import create_dataset, submit, wait_for
from tests.support.stack import Stack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = FIXTURES / "raw-small.csv"
ROWS = 20_000


def _source_null_rates() -> dict[str, float]:
    schema = json.loads((FIXTURES / "raw-small-schema.json").read_text())
    spellings = set(schema["missing_values"])
    with open(RAW, newline="") as handle:
        table = list(csv.DictReader(handle))
    names = [c["name"] for c in schema["columns"] if c["type"] != "ignore"]
    return {n: sum(r[n].strip() in spellings for r in table) / len(table) for n in names}


def test_typed_columns_released_end_to_end(worker_stack: Stack, worker_tenant: Tenant) -> None:
    tenant = worker_tenant
    schema = (FIXTURES / "raw-small-schema.json").read_text()
    dataset = create_dataset(tenant.owner, RAW.read_bytes(), schema, budget_rho="2000")
    response = submit(tenant.analyst, dataset["id"], rho="1000", method="mst",
                      params={"iterations": 300}, rows=ROWS, seed=11)  # fmt: skip
    assert response.status_code == 202, response.text
    job = wait_for(tenant.analyst, response.json()["id"], timeout=300)
    assert job["status"] == "succeeded", (job, worker_stack.logs())

    parquet = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "parquet"})
    table = pq.read_table(io.BytesIO(parquet.content))
    types = {field.name: field.type for field in table.schema}
    assert types == {
        "city": pa.dictionary(pa.int32(), pa.string()),
        "grade": pa.dictionary(pa.int32(), pa.string(), ordered=True),
        "age": pa.int64(),
        "score": pa.float64(),
        "joined": pa.date32(),
        "month": pa.date32(),
        "seen": pa.timestamp("ms"),  # Parquet has no seconds unit; values are whole seconds
        "active": pa.bool_(),
        "paid": pa.bool_(),
    }
    columns = table.to_pydict()
    present = {name: [v for v in values if v is not None] for name, values in columns.items()}
    assert set(present["city"]) <= {"Lyon", "Paris", "Nantes", "Other"}
    assert set(present["grade"]) <= {"low", "mid", "high"}
    assert all(isinstance(v, int) and 0 <= v <= 100 for v in present["age"])
    assert all(0 <= v <= 1 and round(v, 2) == v for v in present["score"])
    assert all("2018-01-01" <= v.isoformat() <= "2020-12-31" for v in present["joined"])
    assert all(v.day == 1 and 2018 <= v.year <= 2019 for v in present["month"])
    assert all("2021-01-01" <= v.isoformat() <= "2021-01-07T23:59:59" for v in present["seen"])

    # Null rates: ρ = 1000 makes the noise on 200 rows negligible (σ of a 1-way count < 1),
    # and sampling 20,000 rows has σ ≤ 0.0036 on a rate; 0.04 is over 10 σ of the sampling
    # error plus 2 counts of noise in 200 (0.01): false-failure rate below 1e-12 per column.
    expected = _source_null_rates()
    for name, values in columns.items():
        rate = sum(v is None for v in values) / ROWS
        assert abs(rate - expected[name]) < 0.04, (name, rate, expected[name])
        assert expected[name] > 0.05 and rate > 0

    csv_out = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "csv"})
    text = csv_out.text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert len(rows) == ROWS and list(rows[0]) == list(types)
    assert all(r["age"] == "" or r["age"].lstrip("-").isdigit() for r in rows)  # no ".0"
    assert {r["active"] for r in rows} <= {"true", "false", ""}
    assert {r["paid"] for r in rows} <= {"paid", "unpaid", ""}
    months = {r["month"] for r in rows} - {""}
    assert months and all(len(m) == 8 and m[3] == "-" for m in months)  # e.g. Mar-2018
    assert all(r["joined"] == "" or len(r["joined"]) == 10 for r in rows)
    assert any(r["city"] == "" for r in rows)
    # Nothing of the ignored columns anywhere in either output.
    for marker in ("ID-1", "calc", "vip", "call back", "note"):
        assert marker not in text and marker.encode() not in parquet.content
