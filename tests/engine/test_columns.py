"""Typed columns: encode/decode round trips, missing values, refusal reasons, limits, specs."""

from __future__ import annotations

import io
import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from engine.columns import MISSING, OUTSIDE, UNDECLARED, UNPARSEABLE
from engine.columns.output import text_batch
from engine.tables.encoding import (
    DiscoveryRequired,
    SchemaError,
    SchemaLimits,
    SchemaSpec,
    TableSchema,
    encode_values,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LIMITS = SchemaLimits(max_columns=50, max_domain_size=1000, max_total_domain_size=5000)

ENTRIES: dict[str, dict[str, Any]] = {
    "categorical": {
        "type": "categorical",
        "categories": ["a", "b", "c"],
        "other": "zz",
        "ordered": True,
        "nullable": True,
    },
    "integer": {
        "type": "numeric",
        "min": 0,
        "max": 100,
        "bins": 7,
        "integer": True,
        "nullable": True,
    },
    "decimals": {"type": "numeric", "bins": [-1, 0, 0.5, 3], "decimals": 2, "nullable": True},
    "real": {"type": "numeric", "min": -5, "max": 5, "bins": 4},
    "date": {"type": "date", "min": "2018-01-15", "max": "2019-03-02", "unit": "month"},
    "week": {"type": "date", "min": "2024-01-03", "max": "2024-02-20", "unit": "week"},
    "date-format": {
        "type": "date",
        "min": "2018-01-01",
        "max": "2019-12-31",
        "unit": "month",
        "format": "%b-%Y",
        "nullable": True,
    },
    "datetime": {
        "type": "datetime",
        "min": "2021-01-01T00:00:00",
        "max": "2021-01-03T12:00:00",
        "bins": 9,
        "nullable": True,
    },
    "datetime-minutes": {
        "type": "datetime",
        "min": "2021-01-01T00:00",
        "max": "2021-01-01T05:59",
        "unit": "hour",
        "format": "%d/%m/%Y %H:%M",
    },
    "boolean": {"type": "boolean", "nullable": True},
    "spelled": {"type": "boolean", "true_values": ["J", "ja"], "false_values": ["N", "nein"]},
    "codes": {"type": "codes", "size": 6},
}


def _schema(kind: str) -> TableSchema:
    return TableSchema.from_json({"columns": [{"name": "x", **ENTRIES[kind]}]}, LIMITS)


def _csv_text(schema: TableSchema, frame: pd.DataFrame) -> pd.Series:
    """The decoded column as the CSV writers render it, read back as text (empty = null)."""
    table = schema.to_arrow(frame)
    rendered = pa.Table.from_arrays(text_batch(table, table.schema), names=table.column_names)
    buffer = io.BytesIO()
    pacsv.write_csv(rendered, buffer)
    return pd.read_csv(
        io.BytesIO(buffer.getvalue()), dtype=str, keep_default_na=False, skip_blank_lines=False
    )["x"]


@pytest.mark.parametrize("kind", sorted(ENTRIES))
def test_decoded_values_encode_back_to_their_codes(kind: str) -> None:
    schema = _schema(kind)
    size = schema.columns[0].size
    codes = np.tile(np.arange(size), 40).reshape(-1, 1)
    frame = schema.decode(codes, np.random.default_rng(7))
    # Typed values (Parquet-like) and their CSV text both land in the bin they came from.
    typed = schema.encode(frame)
    assert typed.problems == {} and typed.codes[:, 0].tolist() == codes[:, 0].tolist()
    text = _csv_text(schema, frame)
    again = encode_values(schema.columns[0], text, schema.missing_values)
    assert again.tolist() == codes[:, 0].tolist()


@pytest.mark.parametrize("kind", sorted(ENTRIES))
def test_schema_json_round_trips(kind: str) -> None:
    schema = _schema(kind)
    assert TableSchema.from_json(json.loads(json.dumps(schema.to_json())), LIMITS) == schema


def test_output_dtypes_and_arrow_types() -> None:
    schema = TableSchema.from_json(
        {"columns": [{"name": k, **v} for k, v in ENTRIES.items()]}, LIMITS
    )
    codes = np.zeros((3, len(schema.columns)), dtype=np.int64)
    frame = schema.decode(codes, np.random.default_rng(0))
    dtypes = {name: str(frame[name].dtype) for name in frame}
    assert dtypes["integer"] == "Int64" and dtypes["decimals"] == "Float64"
    assert dtypes["boolean"] == "boolean" and dtypes["categorical"] == "category"
    assert dtypes["date"] == "datetime64[s]" and dtypes["codes"] == "int64"
    arrow = schema.to_arrow(frame).schema
    assert arrow.field("integer").type == pa.int64()
    assert arrow.field("decimals").type == pa.float64()
    assert arrow.field("date").type == pa.date32()
    assert arrow.field("datetime").type == pa.timestamp("s")
    assert arrow.field("boolean").type == pa.bool_()
    assert arrow.field("categorical").type == pa.dictionary(pa.int32(), pa.string(), ordered=True)


def test_null_code_round_trips_as_a_missing_cell() -> None:
    for kind in ("categorical", "integer", "decimals", "date-format", "datetime", "boolean"):
        schema = _schema(kind)
        column = schema.columns[0]
        assert column.null_code == column.size - 1
        frame = schema.decode(np.array([[column.size - 1], [0]]), np.random.default_rng(1))
        assert frame["x"].isna().tolist() == [True, False], kind
        assert _csv_text(schema, frame).tolist()[0] == "", kind
        spelled = pd.Series(["", " NA ", None, "nan", "NaN"], dtype=object)
        assert encode_values(column, spelled).tolist() == [column.size - 1] * 5, kind


def test_missing_spellings_are_configurable_and_refused_when_not_nullable() -> None:
    schema = TableSchema.from_json(
        {
            "columns": [{"name": "x", "type": "numeric", "min": 0, "max": 9, "bins": 3}],
            "missing_values": ["?"],
        }
    )
    chunk = schema.encode(pd.DataFrame({"x": ["?", "", "1", "?"]}))
    # "?" is missing (and the column is not nullable); "" is no longer a missing spelling.
    assert chunk.codes[:, 0].tolist() == [MISSING, UNPARSEABLE, 0, MISSING]
    assert chunk.problems == {("x", MISSING): 2, ("x", UNPARSEABLE): 1}
    message = schema.describe_problems(chunk.problems)
    assert "column 'x': 2 missing values but the column is not nullable" in message
    assert "unparseable number in 1 row" in message
    assert schema.to_json()["missing_values"] == ["?"]


def test_each_refusal_reason_names_column_and_count_never_a_value() -> None:
    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "c", "type": "categorical", "categories": ["a"]},
                {"name": "n", "type": "numeric", "min": 0, "max": 100, "bins": 4},
                {"name": "d", "type": "date", "min": "2018-01-01", "max": "2019-12-31",
                 "bins": 2, "format": "%b-%Y"},
                {"name": "b", "type": "boolean"},
            ]
        }
    )  # fmt: skip
    frame = pd.DataFrame(
        {
            "c": ["a", "secretcat", "secretcat", ""],
            "n": ["1", "512.5", "-7", "3"],
            "d": ["Mar-2018", "2018-03-01", "Mar-2031", "Jan-2019"],
            "b": ["yes", "perhaps", "no", "no"],
        }
    )
    chunk = schema.encode(frame)
    assert chunk.problems == {
        ("c", UNDECLARED): 2,
        ("c", MISSING): 1,
        ("n", OUTSIDE): 2,
        ("d", UNPARSEABLE): 1,
        ("d", OUTSIDE): 1,
        ("b", UNPARSEABLE): 1,
    }
    message = schema.describe_problems(chunk.problems)
    assert message == (
        "values do not match the schema: "
        "column 'c': 1 missing value but the column is not nullable; "
        "column 'c': 2 values not among the declared categories, declare them or set \"other\"; "
        "column 'n': 2 values outside [0, 100], set clip or widen the bounds; "
        "column 'd': 1 value outside [2018-01-01, 2019-12-31], set clip or widen the bounds; "
        "column 'd': unparseable date in 1 row, expected format %b-%Y; "
        "column 'b': unrecognised boolean in 1 row, expected one of the declared spellings"
    )
    for value in ("secretcat", "512.5", "-7", "2031", "perhaps"):
        assert value not in message


def test_clip_and_other_take_what_would_be_refused() -> None:
    numeric = TableSchema.from_json(
        {"columns": [{"name": "x", "type": "numeric", "bins": [0, 1, 2], "clip": True}]}
    ).columns[0]
    assert encode_values(numeric, pd.Series(["-5", "0.5", "1e9", "2"])).tolist() == [0, 0, 1, 1]
    date = TableSchema.from_json(
        {"columns": [{"name": "x", "type": "date", "min": "2020-01-01", "max": "2020-12-31",
                      "unit": "year", "clip": True}]}
    ).columns[0]  # fmt: skip
    assert encode_values(date, pd.Series(["1999-01-01", "2031-05-05"])).tolist() == [0, 0]
    categorical = _schema("categorical").columns[0]
    codes = encode_values(categorical, pd.Series(["b", "elsewhere", "", "zz"]))
    assert codes.tolist() == [1, 3, 4, 3]  # undeclared and the label itself go to "other"


def test_declared_category_wins_over_a_missing_spelling() -> None:
    column = TableSchema.from_json(
        {"columns": [{"name": "r", "type": "categorical", "categories": ["NA", "EU"]}]}
    ).columns[0]
    assert encode_values(column, pd.Series(["NA", "EU", ""])).tolist() == [0, 1, MISSING]


def test_integer_and_decimal_values_are_drawn_inside_their_bins() -> None:
    column = TableSchema.from_json(
        {"columns": [{"name": "x", "type": "numeric", "bins": [0.5, 2.5, 4, 10], "integer": True}]}
    ).columns[0]
    values = column.decode(np.repeat([0, 1, 2], 500), np.random.default_rng(3))
    assert set(values[:500]) == {1, 2} and set(values[500:1000]) == {3}
    assert set(values[1000:]) == set(range(4, 11))  # the last bin includes its upper edge
    with pytest.raises(SchemaError, match="hold no integer"):
        TableSchema.from_json(
            {"columns": [{"name": "x", "type": "numeric", "bins": [0, 0.2, 0.8, 3],
                          "integer": True}]}
        )  # fmt: skip
    decimals = _schema("decimals").columns[0]
    drawn = decimals.decode(np.repeat([0, 1, 2], 300), np.random.default_rng(4)).to_numpy(float)
    assert np.all(drawn == np.round(drawn, 2))
    assert np.all((drawn[:300] >= -1) & (drawn[:300] < 0))
    assert np.all((drawn[600:] >= 0.5) & (drawn[600:] <= 3))


def test_calendar_bins_are_aligned_and_inclusive() -> None:
    month = _schema("date").columns[0]
    edges = [month.iso(e) for e in month.edges]
    assert edges[:3] == ["2018-01-15", "2018-02-01", "2018-03-01"]
    assert edges[-2:] == ["2019-03-01", "2019-03-03"]  # max 2019-03-02 included
    assert month.size == 15
    week = _schema("week").columns[0]
    assert [week.iso(e) for e in week.edges[:3]] == ["2024-01-03", "2024-01-08", "2024-01-15"]
    assert pd.Timestamp(week.iso(week.edges[1])).day_name() == "Monday"
    codes = encode_values(
        month, pd.Series(["2018-01-15", "2018-01-31", "2018-02-01", "2019-03-02"])
    )
    assert codes.tolist() == [0, 0, 1, 14]


def test_dates_decode_at_the_input_resolution_and_format() -> None:
    schema = _schema("date-format")
    frame = schema.decode(np.arange(24).reshape(-1, 1), np.random.default_rng(5))
    assert (frame["x"].dt.day == 1).all()  # %b-%Y has month resolution
    assert _csv_text(schema, frame).tolist()[:3] == ["Jan-2018", "Feb-2018", "Mar-2018"]
    minutes = _schema("datetime-minutes")
    out = minutes.decode(np.repeat(np.arange(6), 50).reshape(-1, 1), np.random.default_rng(6))
    assert (out["x"].dt.second == 0).all() and out["x"].dt.minute.nunique() > 10
    text = _csv_text(minutes, out)
    assert text.str.fullmatch(r"01/01/2021 0\d:\d\d").all()


def test_parquet_typed_values_and_nulls_encode() -> None:
    schema = TableSchema.from_json(
        {"columns": [{"name": k, **v} for k, v in ENTRIES.items() if k != "codes"]}
    )
    table = pa.table(
        {
            "categorical": pa.array(["a", None, "q"]).dictionary_encode(),
            "integer": pa.array([5, None, 100], pa.int64()),
            "decimals": pa.array([0.25, float("nan"), None]),
            "real": pa.array([0.0, -5.0, 5.0]),
            "date": pa.array([date(2018, 2, 3), date(2019, 3, 2), date(2018, 1, 15)]),
            "week": pa.array(["2024-01-03", "2024-02-20", "2024-01-08"]),
            "date-format": pa.array([None, "Feb-2019", "Dec-2019"]),
            "datetime": pa.array(
                [datetime(2021, 1, 1), None, datetime(2021, 1, 3, 12)], pa.timestamp("us")
            ),
            "datetime-minutes": pa.array(["01/01/2021 00:00"] * 3),
            "boolean": pa.array([True, None, False]),
            "spelled": pa.array(["JA", " nein ", "j"]),
        }
    )  # fmt: skip
    chunk = schema.encode(table.to_pandas())
    assert chunk.problems == {}
    codes = {name: chunk.codes[:, j].tolist() for j, name in enumerate(schema.names)}
    assert codes["categorical"] == [0, 4, 3]
    assert codes["integer"] == [0, 7, 6]
    assert codes["decimals"] == [1, 3, 3]
    assert codes["date"] == [1, 14, 0]
    assert codes["datetime"] == [0, 9, 8]
    assert codes["boolean"] == [1, 2, 0]
    assert codes["spelled"] == [1, 0, 1]


def test_ignored_columns_are_not_stored_and_listed() -> None:
    raw = json.loads((FIXTURES / "raw-small-schema.json").read_text())
    schema = TableSchema.from_json(raw, LIMITS)
    assert schema.ignored == ("id", "note")
    assert "id" not in schema.names and "id" in schema.file_names
    assert schema.domain().attributes == schema.names
    with pytest.raises(SchemaError, match="no columns to store"):
        TableSchema.from_json({"columns": [{"name": "id", "type": "ignore"}]})


def test_old_stored_schemas_parse_and_normalise_as_before() -> None:
    raw = json.loads((FIXTURES / "people-schema.json").read_text())
    schema = TableSchema.from_json(raw)
    stored = schema.to_json()
    assert set(stored) == {"columns"}
    assert stored["columns"][1] == {
        "name": "age",
        "type": "numeric",
        "bins": [float(x) for x in range(0, 101, 10)],
    }
    assert stored["columns"][0] == {
        "name": "city",
        "type": "categorical",
        "categories": raw["columns"][0]["categories"],
    }
    assert TableSchema.from_json(stored) == schema
    assert TableSchema.from_json({"a": 3}).to_json() == {
        "columns": [{"name": "a", "type": "codes", "size": 3}]
    }


def test_limits_are_named_and_checked_before_building() -> None:
    hourly = {"name": "t", "type": "datetime", "min": "1000-01-01T00:00:00",
              "max": "2999-12-31T23:00:00", "unit": "hour"}  # fmt: skip
    with pytest.raises(SchemaError, match=r"column 't' has 17531\d+ values; the limit is 1000"):
        TableSchema.from_json({"columns": [hourly]}, LIMITS)
    daily = {"name": "d", "type": "date", "min": "2000-01-01", "max": "2002-12-31", "unit": "day"}
    with pytest.raises(SchemaError, match="column 'd' has 1096 values; the limit is 1000"):
        TableSchema.from_json({"columns": [daily]}, LIMITS)
    many = {"name": "c", "type": "categorical",
            "categories": {"discover": True, "max": 10, "candidates": list(range(2000))}}  # fmt: skip
    with pytest.raises(
        SchemaError, match="lists 2000 candidates or profile points; the limit is 1000"
    ):
        TableSchema.from_json({"columns": [many]}, LIMITS)
    nullable = {"name": "n", "type": "numeric", "min": 0, "max": 1, "bins": 1000, "nullable": True}
    with pytest.raises(SchemaError, match="column 'n' has 1001 values"):
        TableSchema.from_json({"columns": [nullable]}, LIMITS)
    with pytest.raises(SchemaError, match="narrower than one day"):
        TableSchema.from_json(
            {"columns": [{"name": "d", "type": "date", "min": "2020-01-01",
                          "max": "2020-01-02", "bins": 3}]}
        )  # fmt: skip


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "numeric", "min": 0, "max": 1, "bins": 2, "integer": True, "decimals": 1},
         "integer or decimals"),
        ({"type": "date", "min": "2020-01-01", "max": "2020-02-01", "unit": "hour"},
         "unit must be one of"),
        ({"type": "date", "min": "yesterday", "max": "2020-02-01", "bins": 2}, "ISO 8601"),
        ({"type": "date", "min": "2020-01-01", "max": "2020-02-01", "bins": 2, "format": "x"},
         "no date directive"),
        ({"type": "boolean", "true_values": ["y"], "false_values": ["Y"]}, "both true and false"),
        ({"type": "categorical", "categories": ["a"], "other": "a"}, "distinct"),
        ({"type": "categorical", "categories": ["a"], "nullable": "yes"}, "true or false"),
        ({"type": "codes", "size": 3, "nullable": True}, "unknown keys nullable"),
        ({"type": "ignore", "bins": 3}, "unknown keys bins"),
    ],
)  # fmt: skip
def test_malformed_entries_are_refused(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        TableSchema.from_json({"columns": [{"name": "x", **entry}]})


def test_discovery_specs_parse_and_resolve_but_never_encode_unresolved() -> None:
    raw = {
        "columns": [
            {"name": "n", "type": "numeric", "min": 0, "max": 100, "bins": {"quantiles": 4},
             "integer": True, "nullable": True},
            {"name": "d", "type": "date", "min": "2020-01-01", "max": "2020-12-31",
             "bins": {"quantiles": 3}},
            {"name": "c", "type": "categorical", "other": "rest",
             "categories": {"discover": True, "max": 5, "candidates": ["a", "b", "c"]}},
        ]
    }  # fmt: skip
    with pytest.raises(DiscoveryRequired, match="DP discovery of quantile bins for column 'n'"):
        TableSchema.from_json(raw, LIMITS)
    spec = SchemaSpec.from_json(raw, LIMITS)
    assert [p.name for p in spec.pending] == ["n", "d", "c"]
    assert [p.size for p in spec.pending] == [5, 3, 6]
    assert SchemaSpec.from_json(spec.to_json()) == spec
    quantiles = spec.pending[0]
    values = quantiles.values(pd.Series(["3", "", "250"]), spec.missing_values)  # type: ignore[union-attr]
    assert values[0] == 3 and np.isnan(values[1]) and values[2] == 250
    dates = spec.pending[1].values(pd.Series(["2020-01-02"]), ())  # type: ignore[union-attr]
    assert dates.tolist() == [float(np.datetime64("2020-01-02", "D").astype(np.int64))]
    with pytest.raises(DiscoveryRequired, match="categories for column 'c'"):
        spec.resolve({"n": [10.2, 50.7, 80], "d": [18400]})
    schema = spec.resolve({"n": [10.2, 50.7, 80], "d": [18400, 18500], "c": ["b", "a"]})
    n, d, c = schema.columns
    assert n.to_json()["bins"] == [0.0, 10.0, 51.0, 80.0, 100.0] and n.size == 5
    assert d.size == 3 and c.to_json()["categories"] == ["b", "a"] and c.size == 3
    with pytest.raises(SchemaError, match="not a candidate"):
        spec.resolve({"n": [], "d": [], "c": ["zzz"]})


@pytest.mark.parametrize(
    "rho",
    [
        "1e-30000000",  # Fraction(Decimal(...)) of it alone took 33 s: refused from its digits
        "1e30000000",
        "1e400",
        "1234567890123456",  # 16 digits before the point
        "1e-19",
        "0e-5",
        "NaN",
        "-0.5",
    ],
)
def test_clause_budgets_are_bounded_before_any_arithmetic(rho: str) -> None:
    entry = {"name": "n", "type": "numeric", "min": 0, "max": 1,
             "bins": {"quantiles": 4, "rho": rho}}  # fmt: skip
    with pytest.raises(SchemaError, match="at most 12 decimal places and below 1e15"):
        SchemaSpec.from_json({"columns": [entry]})
    delta = {"name": "c", "type": "categorical",
             "categories": {"discover": True, "max": 3, "delta": rho}}  # fmt: skip
    with pytest.raises(SchemaError, match="at most 18 decimal places and below 1"):
        SchemaSpec.from_json({"columns": [delta]})


@pytest.mark.parametrize(
    ("rho", "exact"),
    [("0.000000000001000", "1/1000000000000"), ("1E-12", "1/1000000000000"), ("10.50", "21/2"),
     ("123456789012345", "123456789012345"), (0.25, "1/4"), (3, "3")],
)  # fmt: skip
def test_clause_budgets_keep_exact_values(rho: Any, exact: str) -> None:
    entry = {"name": "n", "type": "numeric", "min": 0, "max": 1,
             "bins": {"quantiles": 4, "rho": rho}}  # fmt: skip
    (pending,) = SchemaSpec.from_json({"columns": [entry]}).pending
    assert str(pending.rho) == exact


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"type": "numeric", "min": 0, "max": 1, "bins": {"quantiles": 4097}},
         "quantiles must be an integer from 1 to 4096"),
        ({"type": "date", "min": "2000-01-01", "max": "2030-01-01",
          "bins": {"quantiles": 5000}}, "from 1 to 4096"),
        ({"type": "categorical", "categories": {"discover": True, "max": 100_001}},
         "max must be an integer from 1 to 100000"),
        ({"type": "categorical",
          "categories": {"discover": True, "max": 5, "candidates": list(range(100_001))}},
         "at most 100000 candidates"),
    ],
)  # fmt: skip
def test_discovery_clauses_beyond_the_mechanisms_limits_are_refused_at_parse(
    entry: dict[str, Any], message: str
) -> None:
    limits = SchemaLimits(max_columns=5, max_domain_size=10**6, max_total_domain_size=10**7)
    with pytest.raises(SchemaError, match=message):
        SchemaSpec.from_json({"columns": [{"name": "x", **entry}]}, limits)
