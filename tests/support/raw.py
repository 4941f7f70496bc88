"""The raw fixture from draft to release over HTTP, with the checks issue 12 asks for.

Shared by the production-mode test (tests/workers/test_raw_release.py) and the embedded-mode
test (tests/workers/test_embedded_mode.py): the draft the service proposes is uploaded as is,
discovery is charged, an `aim` release is downloaded and checked against the public domain, the
declared types and the input's missing-value rates.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq

from tests.support.api import create_dataset, submit, wait_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = FIXTURES / "raw-small.csv"
ROWS = 20_000
# Small enough to run in seconds on 200 rows; the released table is still an aim release.
AIM_PARAMS = {"rounds": 11, "round_iterations": 30, "iterations": 200}
ARROW_TYPES = {
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "datetime": pa.timestamp("ms"),
    "categorical": pa.dictionary(pa.int32(), pa.string()),
}


def _source_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def release_raw_fixture(
    owner: httpx.Client,
    analyst: httpx.Client,
    *,
    path: Path = RAW,
    budget_rho: str = "1125",  # a fifth to discovery, 900 left for the release
    job_rho: str = "900",
    rows: int = ROWS,
    null_tolerance: float | None = 0.05,
) -> dict[str, Any]:
    """Draft, upload as is, release with aim, check; returns the job.

    ``null_tolerance``: how far each nullable column's missing rate may be from the input's
    (None: not checked, for budgets too small to promise it).
    """
    data = path.read_bytes()
    drafted = owner.post("/v1/schema-drafts", files={"file": (path.name, data, "text/csv")})
    assert drafted.status_code == 200, drafted.text
    schema = drafted.json()["schema"]
    dataset = create_dataset(
        owner, data, json.dumps(schema), budget_rho=budget_rho, budget_delta="0.000001"
    )
    ledger = owner.get(f"/v1/datasets/{dataset['id']}/ledger").json()["items"]
    assert [e["kind"] for e in ledger] == ["grant", "discover"]
    discover = ledger[1]
    per_column = discover["detail"]["columns"].values()
    # The columns' mechanisms and the noisy row count that decided the split: exactly the charge.
    counted = Fraction(discover["detail"]["rows"]["rho"]) if "rows" in discover["detail"] else 0
    assert sum(Fraction(c["rho"]) for c in per_column) + counted == Fraction(discover["rho"])
    assert sum(Fraction(c["delta"]) for c in per_column) == Fraction(discover["delta"])
    assert dataset["budget"]["spent_rho"] == discover["rho"]

    response = submit(
        analyst, dataset["id"], rho=job_rho, method="aim", params=AIM_PARAMS, rows=rows, seed=5
    )
    assert response.status_code == 202, response.text
    job = wait_for(analyst, response.json()["id"], timeout=300)
    assert job["status"] == "succeeded", job

    shown = analyst.get(f"/v1/datasets/{dataset['id']}").json()
    columns = {c["name"]: c for c in shown["columns"]}
    drafted_types = {c["name"]: c["type"] for c in schema["columns"]}
    assert set(shown["dropped_columns"]) == {n for n, t in drafted_types.items() if t == "ignore"}

    parquet = analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "parquet"})
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.num_rows == rows
    assert table.schema.names == list(columns)
    source = _source_rows(path)
    spellings = set(schema["missing_values"])
    for field in table.schema:
        column = columns[field.name]
        kind = column["type"]
        if kind == "numeric":
            assert field.type == (pa.int64() if column["integer"] else pa.float64()), field
        else:
            assert field.type == ARROW_TYPES[kind], field
        values = table.column(field.name).to_pylist()
        present = [v for v in values if v is not None]
        # Every value inside the public (declared or discovered) domain.
        if kind == "categorical":
            assert set(present) <= set(column["categories"]) | {column["other"]}
        elif kind == "numeric":
            low, high = column["bins"][0], column["bins"][-1]
            assert all(low <= v <= high for v in present), field.name
        elif kind in ("date", "datetime"):
            low, high = column["bins"][0], column["bins"][-1]
            assert all(low[:10] <= v.isoformat()[:10] <= high[:10] for v in present), field.name
        # Missing rates: ρ = 900 on 200 rows makes the noise on a 1-way count negligible (σ about
        # 0.1 rows at this split), and 20,000 sampled rows have σ ≤ 0.0036 on a rate; 0.05 is
        # over 10 σ plus 2 rows in 200 of noise: false-failure rate below 1e-12 per column.
        expected = sum(r[field.name].strip() in spellings for r in source) / len(source)
        rate = (len(values) - len(present)) / len(values)
        if not column["nullable"]:
            assert rate == 0
        elif null_tolerance is not None:
            assert abs(rate - expected) < null_tolerance, (field.name, rate, expected)

    text = analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "csv"}).text
    cells: set[str] = set()
    # Dates and timestamps come back in the format they came in (no ".000" from Parquet's ms).
    for row in csv.DictReader(io.StringIO(text)):
        cells.update(value.lstrip("'") for value in row.values())
        for name, column in columns.items():
            if column["type"] in ("date", "datetime") and row[name]:
                datetime.strptime(row[name], column["format"])
    # No value of an ignored column is a cell of the release, unless it is also a public label
    # (a declared or discovered category of some column) or a number or date the synthesis can
    # draw by itself. (Substrings are not checked: real free text holds words like "manager".)
    public = {c["other"] for c in columns.values() if c.get("other")}
    public |= {v for c in columns.values() for v in (c.get("categories") or [])}
    ignored = {
        row[name].strip()
        for row in source
        for name, kind in drafted_types.items()
        if kind == "ignore"
    }
    leaked = {
        value
        for value in ignored & cells
        if value and value not in public and not _number_or_date(value)
    }
    assert not leaked, sorted(leaked)[:5]
    body = text.split("\n", 1)[1]  # the rows, not the header (column names are public)
    labels = " ".join([*public, *columns])
    for value in ignored - {""} - public:
        # Long enough to be distinctive, and not part of a public label: not even inside a cell.
        if len(value) >= 8 and value not in labels:
            assert value not in body, value
    return job


def _number_or_date(value: str) -> bool:
    try:
        float(value)
        return True
    except ValueError:
        pass
    try:
        datetime.fromisoformat(value)
        return True
    except ValueError:
        return False
