"""Typed columns over HTTP: the mixed raw fixture, refusals per reason, Parquet nulls."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import Tenant
from tests.support.api import create_dataset, upload
from tests.support.stack import Stack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RAW = (FIXTURES / "raw-small.csv").read_bytes()
RAW_SCHEMA = (FIXTURES / "raw-small-schema.json").read_text()


def _stored_tables(stack: Stack) -> int:
    root = stack.settings.resolved_storage_dir / "datasets"
    return len(list(root.glob("*/table.arrow"))) if root.exists() else 0


def test_raw_fixture_uploads_with_every_type(tenant: Tenant) -> None:
    dataset = create_dataset(tenant.owner, RAW, RAW_SCHEMA)
    assert dataset["n_rows"] == 200
    assert dataset["dropped_columns"] == ["id", "note"]
    columns = {c["name"]: c for c in dataset["columns"]}
    assert list(columns) == ["city", "grade", "age", "score", "joined", "month", "seen",
                             "active", "paid"]  # fmt: skip
    assert columns["city"]["other"] == "Other" and columns["city"]["size"] == 5
    assert columns["grade"]["ordered"] and columns["grade"]["nullable"]
    assert columns["age"]["integer"] and columns["age"]["clip"] and columns["age"]["size"] == 11
    assert columns["month"]["format"] == "%b-%Y" and columns["month"]["bins"][0] == "2018-01-01"
    assert columns["paid"]["true_values"] == ["paid"]
    assert "ID-100000" not in json.dumps(dataset)


SCHEMA = {
    "columns": [
        {"name": "c", "type": "categorical", "categories": ["a", "b"]},
        {"name": "n", "type": "numeric", "min": 0, "max": 100, "bins": 4},
        {"name": "d", "type": "date", "min": "2018-01-01", "max": "2019-12-31", "unit": "month",
         "format": "%b-%Y"},
        {"name": "b", "type": "boolean"},
    ]
}  # fmt: skip
GOOD = "a,5,Mar-2018,yes\n"


@pytest.mark.parametrize(
    ("rows", "expected", "secret"),
    [
        (",5,Mar-2018,yes\n" * 12, "column 'c': 12 missing values but the column is not nullable",
         None),
        ("a,340.5,Mar-2018,yes\n" * 3,
         "column 'n': 3 values outside [0, 100], set clip or widen the bounds", "340.5"),
        ("a,5,2018-03-01,yes\n" * 3,
         "column 'd': unparseable date in 3 rows, expected format %b-%Y", "2018-03-01"),
        ("zebra,5,Mar-2018,yes\n" * 2,
         "column 'c': 2 values not among the declared categories", "zebra"),
        ("a,5,Mar-2018,perhaps\n", "column 'b': unrecognised boolean in 1 row", "perhaps"),
    ],
)  # fmt: skip
def test_each_refusal_reason_is_named_with_its_count(
    api_stack: Stack, tenant: Tenant, rows: str, expected: str, secret: str | None
) -> None:
    before = _stored_tables(api_stack)
    body = ("c,n,d,b\n" + GOOD + rows + GOOD).encode()
    response = upload(tenant.owner, body, json.dumps(SCHEMA))
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    if secret is not None:
        assert secret not in response.text
    assert _stored_tables(api_stack) == before, "nothing is stored on refusal"


def test_a_discovery_upload_is_charged_before_anything_is_stored(tenant: Tenant) -> None:
    schema = {"columns": [{"name": "n", "type": "numeric", "min": 0, "max": 1,
                           "bins": {"quantiles": 4}}]}  # fmt: skip
    response = upload(tenant.owner, b"n\n0.5\n0.25\n", json.dumps(schema))
    assert response.status_code == 201, response.text
    assert response.json()["budget"]["spent_rho"] == "0.2"  # a fifth of budget_rho = 1
    assert response.json()["columns"][0]["discovered"] is True


def test_absurd_calendar_bins_are_refused_with_the_limit(tenant: Tenant) -> None:
    schema = {"columns": [{"name": "t", "type": "datetime", "min": "1900-01-01T00:00:00",
                           "max": "2100-01-01T00:00:00", "unit": "hour"}]}  # fmt: skip
    response = upload(tenant.owner, b"t\n2000-01-01T00:00:00\n", json.dumps(schema))
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "column 't' has 1753177 values; the limit is" in detail


def test_parquet_nulls_and_dictionary_nulls_are_missing_values(tenant: Tenant) -> None:
    schema = {
        "columns": [
            {"name": "c", "type": "categorical", "categories": ["a", "b"], "nullable": True},
            {"name": "n", "type": "numeric", "min": 0, "max": 10, "bins": 2, "integer": True,
             "nullable": True},
            {"name": "d", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 2,
             "nullable": True},
            {"name": "x", "type": "ignore"},
        ]
    }  # fmt: skip
    table = pa.table(
        {
            "c": pa.array(["a", None, "b", None]).dictionary_encode(),
            "n": pa.array([1, None, 7, 3], pa.int64()),
            "d": pa.array(["2020-02-01", "2020-11-30", None, "2020-06-01"]),
            "x": pa.array([[1], [2], [3], [4]]),  # nested, but ignored: never read
        }
    )
    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    dataset = create_dataset(tenant.owner, buffer.getvalue(), json.dumps(schema),
                             filename="t.parquet")  # fmt: skip
    assert dataset["n_rows"] == 4 and dataset["dropped_columns"] == ["x"]
    schema["columns"][0]["nullable"] = False
    response = upload(tenant.owner, buffer.getvalue(), json.dumps(schema), filename="t.parquet")
    assert response.status_code == 422
    assert "column 'c': 2 missing values but the column is not nullable" in response.text
