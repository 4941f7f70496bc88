"""Arrow encoding of text columns gives exactly the codes of the pandas encoders."""

from __future__ import annotations

import random
import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engine.columns import MISSING, OUTSIDE, UNDECLARED, UNPARSEABLE
from engine.columns.arrow_text import _PLAIN_NUMBER, parse_numbers, strip
from engine.domain import narrowest_unsigned
from engine.tables.encoding import TableSchema, compact_codes, encode_array, encode_values

CELLS = [
    *(" 1e3", "+5", "3.0", "-0", "00012", "1.e5", ".5", "5.", "-.5", "1E2", "2.5e1", "1e-5"),
    *("inf", "-inf", "Infinity", "INF", "+inf", "iNf", "nan", "NaN", "-nan", "nan(1)", "1e400"),
    *("1_0", "0x10", "1,5", "e5", ".", "+", "5e", "5e+", "1e", "+-5", "1..2", "1d", "0b1"),
    *("", "  ", "\t4\n", "\x1c3\x1f", "\u00a07\u00a0", "\u30003", "１２", "١", "abc", "x"),
    *("NA", " NA ", "-", "?", "None", "null", "0", "1", "2", "3", "3.5", "99", "100", "101"),
    *("0.1", "0.30000000000000004", "12345678901234567890", "7.0000000000000001"),
    *("true", " Yes", "TRUE", "F", "ǅ", "İ", "a", "b", " a", "a ", "'=1"),
]
_random = random.Random(7)
CELLS += [str(round(_random.uniform(-5, 120), _random.randint(0, 17))) for _ in range(200)]

SCHEMAS: list[dict[str, Any]] = [
    {"columns": [{"name": "c", "type": "codes", "size": 100}]},
    {"columns": [{"name": "c", "type": "numeric", "bins": [0, 0.1, 1, 2, 3, 50, 100]}]},
    {
        "columns": [
            {"name": "c", "type": "numeric", "bins": [0, 1, 100], "clip": True, "nullable": True}
        ]
    },
    {
        "columns": [{"name": "c", "type": "numeric", "bins": [-1, 0, 10, 100], "integer": True}],
        "missing_values": ["?", "-1"],
    },
    {"columns": [{"name": "c", "type": "categorical", "categories": ["a", "b", " a", "1", "NA"]}]},
    {
        "columns": [{"name": "c", "type": "categorical", "categories": ["a"], "other": "o"}],
        "missing_values": [],
    },
    {"columns": [{"name": "c", "type": "boolean", "nullable": True}]},
    {
        "columns": [
            {
                "name": "c",
                "type": "boolean",
                "true_values": ["İ", "ǅ", " Yes"],
                "false_values": ["x"],
            }
        ]
    },
]


@pytest.mark.parametrize("raw", SCHEMAS, ids=lambda raw: str(raw["columns"][0]))
@pytest.mark.parametrize("kind", [pa.string(), pa.large_string()])
def test_arrow_codes_equal_pandas_codes_cell_by_cell_and_together(
    raw: dict[str, Any], kind: pa.DataType
) -> None:
    schema = TableSchema.from_json(raw)
    column, missing = schema.columns[0], schema.missing_values
    together = [*CELLS, None]
    expected = encode_values(column, pd.Series(together, dtype=object), missing)
    # Together: cells the cast refuses send the array down the per-notation path.
    assert encode_array(column, pa.array(together, type=kind), missing).tolist() == (
        expected.tolist()
    )
    # One by one: each cell the cast accepts goes down the whole-array cast.
    singles = [encode_array(column, pa.array([cell], type=kind), missing)[0] for cell in together]
    assert singles == expected.tolist()
    dictionary = pa.array(together, type=kind).dictionary_encode()
    assert encode_array(column, dictionary, missing).tolist() == expected.tolist()
    assert set(expected.tolist()) & {MISSING, OUTSIDE, UNPARSEABLE, UNDECLARED} or (
        column.type in ("categorical", "boolean")
    )


def test_arrow_cast_reads_finite_numbers_only_in_plain_notation() -> None:
    # The whole-array path relies on it: a finite number from Arrow's cast is a cell in the
    # notation that the per-notation path casts too.
    plain = re.compile(_PLAIN_NUMBER)
    for cell in CELLS:
        try:
            value = pc.cast(pa.array([cell]), pa.float64())[0].as_py()
        except pa.ArrowInvalid:
            continue
        assert not np.isfinite(value) or plain.match(cell), cell


def test_strip_and_parse_match_python() -> None:
    stripped = strip(pa.array(CELLS))
    assert stripped.to_pylist() == [cell.strip() for cell in CELLS]
    numbers = parse_numbers(stripped)
    reference = pd.to_numeric(pd.Series([c.strip() for c in CELLS]), errors="coerce")
    finite = np.isfinite(reference.to_numpy(dtype=np.float64))
    assert np.array_equal(np.isfinite(numbers), finite)
    assert np.array_equal(numbers[finite], reference.to_numpy(dtype=np.float64)[finite])


NUMBERS: list[Any] = [0, 1, 3, 7, 50, 99, 100, 101, -1, -5, 2**60]
FLOATS: list[Any] = [0.0, 0.05, 0.1, 1.5, 3.0, 99.0, 99.5, 100.0, -0.0, float("nan"), float("inf")]


INTEGER_LABELS = {
    "columns": [
        {"name": "c", "type": "categorical", "categories": ["07", "-0", "0", "-1", "7", "99", "x"]}
    ]
}


@pytest.mark.parametrize(
    "raw", [*SCHEMAS[:6], INTEGER_LABELS], ids=lambda raw: str(raw["columns"][0])
)
@pytest.mark.parametrize(
    "array",
    [
        pa.array(NUMBERS, type=pa.int64()),
        pa.array(NUMBERS[:8], type=pa.int16()),
        pa.array([0, 7, 99, 3, 2**62], type=pa.uint64()),
        pa.array([*NUMBERS, None], type=pa.int64()),
        pa.array(FLOATS, type=pa.float64()),
        pa.array([*FLOATS, None], type=pa.float32()),
    ],
    ids=["int64", "int16", "uint64", "int64 with nulls", "float64", "float32 with nulls"],
)
def test_arrow_codes_of_numbers_equal_pandas_codes(raw: dict[str, Any], array: pa.Array) -> None:
    schema = TableSchema.from_json(raw)
    column, missing = schema.columns[0], schema.missing_values
    expected = encode_values(column, array.to_pandas(), missing)
    assert encode_array(column, array, missing).tolist() == expected.tolist()
    chunked = pa.chunked_array([array.slice(0, 3), array.slice(3)])
    assert encode_array(column, chunked, missing).tolist() == expected.tolist()


def test_a_large_unsigned_integer_is_not_read_as_a_negative_category() -> None:
    # The pandas encoder wraps 2**64 - 1 to "-1" (int64); Arrow writes its decimal text.
    column = TableSchema.from_json(INTEGER_LABELS).columns[0]
    array = pa.array([2**64 - 1, 7], type=pa.uint64())
    assert encode_array(column, array).tolist() == [UNDECLARED, 4]


@pytest.mark.parametrize(("count", "kind"), [(5, np.int8), (127, np.int8), (200, np.int16)])
def test_integer_categories_come_in_the_narrowest_signed_type(count: int, kind: type) -> None:
    """Codes of integers through the lookup table of the categories (the even numbers here):
    one byte for up to 127 categories (a refusal code is negative), and the same codes and
    refusals as the pandas encoder."""
    categories = [str(2 * i) for i in range(count)]
    schema = TableSchema.from_json(
        {"columns": [{"name": "c", "type": "categorical", "categories": categories}]}
    )
    column = schema.columns[0]
    values = pa.array([0, 2 * (count - 1), 1, 6, 3], type=pa.int64())
    codes = encode_array(column, values)
    assert codes.dtype == kind
    assert codes.tolist() == [0, count - 1, UNDECLARED, 3, UNDECLARED]
    assert codes.tolist() == encode_values(column, values.to_pandas()).tolist()
    valid = encode_array(column, values.slice(0, 2))
    compact = compact_codes(valid, column.size)
    assert compact.dtype == narrowest_unsigned(column.size)
    assert compact.tolist() == [0, count - 1]


NULLABLE_NUMERIC = [
    {"name": "c", "type": "numeric", "bins": [0, 1, 100], "clip": True, "nullable": True},
    {
        "name": "c",
        "type": "numeric",
        "bins": [-60, -30, 0, 30, 300],
        "clip": True,
        "nullable": True,
    },
    {"name": "c", "type": "numeric", "bins": [0, 10, 20, 2400], "nullable": True},
    {"name": "c", "type": "numeric", "bins": [0, 0.5, 99.5, 100], "nullable": True},
]
_IN_RANGE = [0.0, 0.5, 99.0, None, 1.5, None, 100.0, 7.25, None, 30.0, 0.999]


@pytest.mark.parametrize("column", NULLABLE_NUMERIC, ids=lambda column: str(column["bins"]))
@pytest.mark.parametrize(
    "array",
    [
        pa.array(_IN_RANGE, type=pa.float64()),
        pa.array([None, -75.5, *_IN_RANGE, 2500.0, -0.5], type=pa.float64()).slice(1),
        pa.array([None, *_IN_RANGE], type=pa.float32()).slice(3, 6),
        pa.array([*_IN_RANGE, float("nan")], type=pa.float64()),
        pa.array([None] * 9, type=pa.float64()),
    ],
    ids=["in range", "sliced, out of range", "float32 slice", "a NaN", "all null"],
)
def test_nullable_numbers_with_nulls_equal_pandas_codes(
    column: dict[str, Any], array: pa.Array
) -> None:
    # Nulls filled in Arrow and given the null code from the validity bitmap (the fast path),
    # clipped in place below a negative lowest edge: the codes pandas gives, cell by cell.
    schema = TableSchema.from_json({"columns": [column]})
    encoded, missing = schema.columns[0], schema.missing_values
    expected = encode_values(encoded, array.to_pandas(), missing)
    assert encode_array(encoded, array, missing).tolist() == expected.tolist()
    for start in range(len(array)):
        part = array.slice(start, 4)
        assert (
            encode_array(encoded, part, missing).tolist()
            == encode_values(encoded, part.to_pandas(), missing).tolist()
        )
