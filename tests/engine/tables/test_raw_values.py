"""Raw values beside the codes (engine/tables/raw_values.py): each cell's number or instant as the encoder
reads it, unclamped, missing exactly where the code is the null code."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engine.columns.numeric import NumericColumn
from engine.columns.temporal import DateColumn, DatetimeColumn
from engine.tables.encoding import TableSchema, encode_array
from engine.tables.raw_values import (
    UNIT_KEY,
    parse_values,
    raw_values,
    value_columns,
    values_arrow_schema,
)

MISSING = ("", "NA", "-1")


def _raw(column: NumericColumn | DateColumn | DatetimeColumn, cells: pa.Array) -> np.ndarray:
    codes = encode_array(column, cells, MISSING)
    assert codes.min() >= 0, "every cell of these tests is accepted by the encoder"
    return raw_values(column, cells, codes)


def _same(found: np.ndarray, expected: list[float | None]) -> None:
    wanted = np.array([np.nan if v is None else v for v in expected], dtype=np.float64)
    np.testing.assert_array_equal(found, wanted)


def test_text_numbers_are_kept_as_read_and_unclamped() -> None:
    column = NumericColumn("n", (0.0, 10.0, 20.0), nullable=True, clip=True)
    cells = pa.array([" 3.5", "1e1", "250", "NA", "", None, "-4"])
    # 250 and -4 were clamped into the end bins for the codes; their values stay as they were.
    _same(_raw(column, cells), [3.5, 10.0, 250.0, None, None, None, -4.0])


def test_a_numeric_spelling_is_missing_exactly_where_the_encoder_made_it_missing() -> None:
    # "-1" is a missing-value spelling. Outside the bounds (no clip) the encoder refuses its
    # number and reads it as missing; inside them, it bins it as the number -1.
    outside = NumericColumn("n", (0.0, 5.0, 10.0), nullable=True)
    inside = NumericColumn("n", (-5.0, 0.0, 5.0), nullable=True)
    cells = pa.array(["-1", "NA", "2"])
    assert encode_array(outside, cells, MISSING).tolist() == [outside.null_code] * 2 + [0]
    _same(_raw(outside, cells), [None, None, 2.0])
    assert encode_array(inside, cells, MISSING).tolist() == [0, inside.null_code, 1]
    _same(_raw(inside, cells), [-1.0, None, 2.0])


def test_typed_numbers_and_dictionaries() -> None:
    column = NumericColumn("n", (0.0, 10.0, 20.0), nullable=True)
    _same(_raw(column, pa.array([1, None, 20], type=pa.int64())), [1.0, None, 20.0])
    _same(_raw(column, pa.array([1.5, float("nan"), None])), [1.5, None, None])
    words = pa.array(["7", "NA", "7", None, "12.25"]).dictionary_encode()
    _same(_raw(column, words), [7.0, None, 7.0, None, 12.25])


def test_dates_in_days_and_datetimes_in_utc_seconds() -> None:
    date = DateColumn("d", (-3_650, 0, 36_500), format="%d/%m/%Y", nullable=True)
    cells = pa.array(["02/01/1970", "31/12/1969", "NA", " 01/01/2000 "])
    _same(_raw(date, cells), [1.0, -1.0, None, 10_957.0])
    # Typed: date32 as it is; the same column read from a Parquet file.
    typed = pa.array([1, None, 10_957], type=pa.int32()).cast(pa.date32())
    _same(_raw(date, typed), [1.0, None, 10_957.0])
    moment = DatetimeColumn("t", (0, 2_000_000_000), nullable=True)
    texts = pa.array(
        ["1970-01-01T00:01:00", "1970-01-01 02:00:00+02:00", "NA", "2001-09-09T01:46:40Z"]
    )
    _same(_raw(moment, texts), [60.0, 0.0, None, 1_000_000_000.0])
    stamps = pa.array([1_500, None], type=pa.timestamp("ms", tz="UTC"))
    _same(_raw(moment, stamps), [1.0, None])
    # A dictionary of texts (the typed CSV read of a repetitive column): each entry once.
    repeated = pa.array(["1970-01-01T00:00:05"] * 3 + [None]).dictionary_encode()
    _same(_raw(moment, repeated), [5.0, 5.0, 5.0, None])


def test_numbers_in_a_date_column_are_already_in_its_unit() -> None:
    """A stored values file holds float64 days or seconds; reading it back is the identity."""
    date = DateColumn("d", (0, 100))
    _same(parse_values(date, pa.array([3.0, None, 99.0])), [3.0, None, 99.0])


def test_each_value_lies_in_the_bin_of_its_code() -> None:
    rng = np.random.default_rng(5)
    edges = tuple(float(e) for e in np.linspace(-50, 50, 11))
    column = NumericColumn("n", edges, nullable=True, clip=True)
    numbers = rng.normal(0, 20, 2_000)
    text = [f"{v:.3f}" if v > -45 else "NA" for v in numbers]
    cells = pa.array(text)
    codes = encode_array(column, cells, MISSING)
    values = raw_values(column, cells, codes)
    present = ~np.isnan(values)
    assert np.array_equal(present, codes != column.null_code)
    assert (values[present] > 50).any(), "some values were clamped into the last bin"
    bins = np.searchsorted(np.asarray(edges), values[present], side="right") - 1
    assert np.array_equal(np.clip(bins, 0, 9), codes[present])


def test_the_values_schema_lists_value_columns_with_units() -> None:
    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "c", "type": "categorical", "categories": ["a", "b"]},
                {"name": "n", "type": "numeric", "bins": [0, 1, 2]},
                {"name": "d", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 4},
                {"name": "t", "type": "datetime", "min": "2020-01-01", "max": "2020-12-31",
                 "bins": 4},
            ]
        }
    )  # fmt: skip
    assert [c.name for c in value_columns(schema)] == ["n", "d", "t"]
    fields = values_arrow_schema(schema)
    assert fields.names == ["n", "d", "t"]
    assert all(f.type == pa.float64() and f.nullable for f in fields)
    units = [f.metadata[UNIT_KEY].decode() for f in fields]
    assert units == ["number", "days since 1970-01-01", "seconds since 1970-01-01 UTC"]


def test_codes_of_another_length_are_refused() -> None:
    column = NumericColumn("n", (0.0, 1.0))
    with pytest.raises(ValueError, match="2 codes for 3 values"):
        raw_values(column, pa.array([0.5, 0.5, 0.5]), np.zeros(2, dtype=np.int64))
