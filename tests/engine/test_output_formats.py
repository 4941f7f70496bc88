"""Issue 26 §6: values come back in the spelling and format they were read in, per column type.

A raw CSV (and a typed Parquet) is drafted (engine/schema_draft), encoded with the draft, decoded
inside its bins and written as the service writes its download (CSV and Parquet); every output
cell must be written the way the input wrote that column: boolean words, zones, decimal places,
date formats, plain (unquoted) typed values.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.columns.spreadsheet import csv_rows
from engine.schema_draft.inference import draft_schema
from engine.tables.encoding import SchemaLimits, TableSchema
from engine.tables.local import load_table
from engine.tables.synthetic_output import write_synthetic

LIMITS = SchemaLimits(max_columns=50, max_domain_size=10_000, max_total_domain_size=100_000)
ROWS = 60
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _cell(name: str, i: int) -> str:
    day, hour, minute, second = 1 + i % 27, i % 24, (7 * i) % 60, (13 * i) % 60
    clock = f"{hour:02d}:{minute:02d}:{second:02d}"
    if i % 10 == 9 and name not in ("code",):
        return ""  # a missing value in every column
    words = {
        "flag_upper": ("YES", "NO"),
        "flag_title": ("Yes", "No"),
        "flag_lower": ("true", "false"),
        "flag_y": ("Y", "N"),
        "flag_t": ("T", "F"),
    }
    if name in words:
        return words[name][i % 3 == 0]
    return {
        "zulu": f"2021-01-{day:02d}T{clock}Z",
        "offset": f"2021-01-{day:02d}T{clock}+02:00",
        "naive": f"2021-01-{day:02d} {clock}",
        "iso_t": f"2021-01-{day:02d}T{clock}",
        "day": f"2021-{1 + i % 12:02d}-{day:02d}",
        "day_us": f"{1 + i % 12:02d}/{day:02d}/2021",
        "month": f"{MONTHS[i % 12]}-{2014 + i % 5}",
        "age": str(18 + (7 * i) % 60),
        "score": ("1.25", "2.5", "0.75", "3", "4.05")[i % 5],
        "income": f"{40_000 + 500 * ((11 * i) % 90)}.0",
        "price": f"{1 + (3 * i) % 40}.{(17 * i) % 10}0",
        "city": ("Paris", "Lyon", "Nice")[i % 3],
        "code": str(i % 4),
    }[name]


# Each column: the pattern every non-empty output cell matches (as the input wrote it), and the
# Parquet type of the output (Parquet stores timestamp[s] as milliseconds).
EXPECTED: dict[str, tuple[str, pa.DataType]] = {
    "flag_upper": ("YES|NO", pa.bool_()),
    "flag_title": ("Yes|No", pa.bool_()),
    "flag_lower": ("true|false", pa.bool_()),
    "flag_y": ("Y|N", pa.bool_()),
    "flag_t": ("T|F", pa.bool_()),
    "zulu": (r"2021-01-\d\dT\d\d:\d\d:\d\dZ", pa.timestamp("ms", tz="UTC")),
    "offset": (r"202[01]-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", pa.timestamp("ms", tz="UTC")),
    "naive": (r"2021-01-\d\d \d\d:\d\d:\d\d", pa.timestamp("ms")),
    "iso_t": (r"2021-01-\d\dT\d\d:\d\d:\d\d", pa.timestamp("ms")),
    "day": (r"2021-\d\d-\d\d", pa.date32()),
    "day_us": (r"\d\d/\d\d/2021", pa.date32()),
    "month": (r"[A-Z][a-z]{2}-20\d\d", pa.date32()),
    "age": (r"\d+", pa.int64()),
    "score": (r"\d(\.\d{1,2})?", pa.float64()),
    "income": (r"\d{5}\.0", pa.int64()),
    "price": (r"\d+\.\d\d", pa.float64()),
    "city": ("Paris|Lyon|Nice", pa.dictionary(pa.int32(), pa.string())),
    "code": ("[0-3]", pa.int64()),
}
QUOTED = {"city"}  # text cells are quoted; typed values are written plain


def _complete(entry: dict[str, Any]) -> dict[str, Any]:
    """A show_values draft entry with its DP quantile bins replaced by four declared bins (the
    formats and spellings under test are the draft's own)."""
    entry = dict(entry)
    if isinstance(entry.get("bins"), dict):
        entry["bins"] = 4
    return entry


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("formats")
    source = folder / "input.csv"
    names = list(EXPECTED)
    lines = [",".join(names)] + [",".join(_cell(n, i) for n in names) for i in range(ROWS)]
    source.write_text("\n".join(lines) + "\n")
    draft = draft_schema(source, show_values=True)
    entries = {column.entry["name"]: _complete(column.entry) for column in draft.columns}
    entries["code"] = {"name": "code", "type": "codes", "size": 4}  # never drafted: declared
    schema = TableSchema.from_json({"columns": [entries[n] for n in names]}, LIMITS)
    codes = np.ascontiguousarray(load_table(source, schema))
    written = {}
    for kind in ("csv", "parquet"):
        written[kind] = folder / f"output.{kind}"
        write_synthetic(schema, codes, np.random.default_rng(3), written[kind], kind)  # type: ignore[arg-type]
    text = written["csv"].read_text()
    rows = list(csv.reader(io.StringIO(text)))
    return {
        "entries": entries,
        "schema": schema,
        "text": text,
        "cells": {name: [row[k] for row in rows[1:]] for k, name in enumerate(rows[0])},
        "parquet": pq.read_table(written["parquet"]),
        "csv_path": written["csv"],
    }


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_type_is_written_as_it_was_read(name: str, round_trip: dict[str, Any]) -> None:
    pattern, parquet_type = EXPECTED[name]
    cells = round_trip["cells"][name]
    present = [cell for cell in cells if cell != ""]
    assert len(present) >= ROWS // 2, name
    wrong = [cell for cell in present if not re.fullmatch(pattern, cell)]
    assert not wrong, f"{name}: {wrong[:3]}"
    # Typed values are plain CSV (no quotes); only text cells are quoted.
    position = list(EXPECTED).index(name)
    lines = round_trip["text"].split("\n")[1:-1]
    fields = [line.split(",")[position] for line in lines]  # no quoted comma in this table
    quoted = [field.startswith('"') for field in fields if field]  # nulls: empty cells
    assert all(quoted) if name in QUOTED else not any(quoted), name
    # The Parquet file keeps each column's type (and a zone where the input had one).
    field = round_trip["parquet"].schema.field(name)
    assert field.type == parquet_type, name


def test_the_output_drafts_and_reads_back_like_the_input(round_trip: dict[str, Any]) -> None:
    """The round trip closes: the output file is read by the same schema without a refused
    value, and a draft of it records the formats and spellings the input's draft recorded."""
    schema = round_trip["schema"]
    load_table(round_trip["csv_path"], schema)  # raises on any refused value
    again = draft_schema(round_trip["csv_path"], show_values=True)
    keys = ("type", "format", "true_values", "false_values", "integer")
    for column in again.columns:
        name = column.entry["name"]
        if name == "code":
            continue
        before = round_trip["entries"][name]
        assert {k: column.entry.get(k) for k in keys} == {k: before.get(k) for k in keys}, name


def test_what_the_draft_records_for_each_spelling(round_trip: dict[str, Any]) -> None:
    entries = round_trip["entries"]
    assert entries["flag_upper"]["true_values"][0] == "YES"
    assert entries["flag_upper"]["false_values"][0] == "NO"
    assert entries["flag_title"]["true_values"][0] == "Yes"
    assert "true_values" not in entries["flag_lower"]  # the default: no keys (stored as before)
    assert entries["flag_t"]["true_values"][0] == "T"
    assert entries["zulu"]["format"] == "%Y-%m-%dT%H:%M:%SZ"
    assert entries["offset"]["format"] == "%Y-%m-%dT%H:%M:%S%z"
    assert entries["income"]["format"] == "%.1f" and entries["income"]["integer"] is True
    assert entries["price"]["format"] == "%.2f"
    assert "format" not in entries["score"] and "format" not in entries["age"]


def test_a_typed_parquet_comes_back_with_its_types(tmp_path: Path) -> None:
    """Parquet in, Parquet out: a zoned timestamp stays zoned (UTC), a naive one naive, dates
    dates, booleans booleans, integers integers."""
    instants = pd.date_range("2021-01-01", periods=40, freq="7h")
    frame = pd.DataFrame(
        {
            "when": instants.tz_localize("UTC"),
            "local": instants,
            "day": instants.date,
            "flag": [i % 3 == 0 for i in range(40)],
            "count": np.arange(40, dtype=np.int64) % 7,
        }
    )
    source = tmp_path / "input.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), source)
    draft = draft_schema(source, show_values=True)
    entries = [_complete(column.entry) for column in draft.columns]
    schema = TableSchema.from_json({"columns": entries}, LIMITS)
    out = tmp_path / "output.parquet"
    codes = np.ascontiguousarray(load_table(source, schema))
    write_synthetic(schema, codes, np.random.default_rng(1), out, "parquet")
    types = {field.name: field.type for field in pq.read_schema(out)}
    assert types == {
        "when": pa.timestamp("ms", tz="UTC"),  # Parquet stores seconds as milliseconds
        "local": pa.timestamp("ms"),
        "day": pa.date32(),
        "flag": pa.bool_(),
        "count": pa.int64(),
    }
    written = pq.read_table(out).column("when").to_pandas()
    assert str(written.dt.tz) == "UTC"


def test_rendering_rules() -> None:
    from engine.columns.output import fixed_places, is_zoned, utc_format

    assert is_zoned("%Y-%m-%dT%H:%M:%SZ") and is_zoned("%Y-%m-%d %H:%M%z")
    assert not is_zoned("%Y-%m-%d %H:%M") and not is_zoned("%H:%M %Z") and not is_zoned(None)
    assert not is_zoned("%d%%z")  # a literal "%z"
    assert utc_format("%Y-%m-%dT%H:%M:%S%z") == "%Y-%m-%dT%H:%M:%S+00:00"
    assert utc_format("%%z %z") == "%%z +00:00"
    numbers = pa.array([52000.0, 1.05, None, -0.04, 2.5, 1e40])
    assert fixed_places(numbers, 1).to_pylist() == ["52000.0", "1.0", None, "0.0", "2.5", "1e+40"]
    assert fixed_places(pa.array([3, -12]), 2).to_pylist() == ["3.00", "-12.00"]


def test_a_rendered_value_that_needs_quotes_is_quoted() -> None:
    """A typed value is plain unless its rendered text holds a comma, quote or line break."""
    schema = TableSchema.from_json(
        {
            "columns": [
                {
                    "name": "d",
                    "type": "date",
                    "min": "2021-01-01",
                    "max": "2021-01-31",
                    "bins": 1,
                    "format": "%d %b, %Y",
                },
                {"name": "b", "type": "boolean", "true_values": ["o,k"], "false_values": ["-"]},
            ]
        },
        LIMITS,
    )
    table = schema.to_arrow(schema.decode(np.array([[0, 1], [0, 0]]), np.random.default_rng(0)))
    lines = csv_rows(table, schema.arrow_schema()).decode().splitlines()
    assert re.fullmatch(r'"\d\d Jan, 2021","o,k"', lines[0])
    assert re.fullmatch(r"\"\d\d Jan, 2021\",'-", lines[1])  # escaped like text, not quoted


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (["YES", "NO", "NO"], ("YES", "NO")),
        (["no", "no", "No"], ("yes", "no")),  # only false words: the pair is still complete
        (["Y", "N", "y"], ("y", "N")),  # Y and y tie: lower case first
        (["True", "FALSE", "false"], ("True", "false")),  # each side its own; lower wins ties
        # Each side by its own cells: which side is the majority does not change the words.
        (["YES"] * 3 + ["n"] * 5, ("YES", "n")),
        (["YES"] * 5 + ["n"] * 3, ("YES", "n")),
        (["yEs", "nO"], None),  # no recognised case
    ],
)
def test_boolean_spellings(cells: list[str], expected: tuple[str, str] | None) -> None:
    from engine.schema_draft.inference import _Stats

    stats = _Stats("x")
    stats.add_text(pa.array(cells), frozenset())
    assert stats.kind == "boolean" and stats.spellings == expected


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        (["52000.0", "61000.0", "7.5"], "%.1f"),  # one value off is tolerated
        (["52000.0", "61000", "7"], None),  # mostly without a point
        (["2.50", "1.25", "3.10"], "%.2f"),
        (["2.5", "1.25", "3.1", "4.75", "0.5", "1.05"], None),  # shortest form: nothing declared
        (["1e3", "2e3", "3e3"], None),
    ],
)
def test_number_format(cells: list[str], expected: str | None) -> None:
    from engine.schema_draft.inference import _Stats

    stats = _Stats("x")
    stats.add_text(pa.array(cells), frozenset())
    assert stats.kind == "numeric" and stats.number_format == expected


def test_negative_numbers_in_a_declared_format_stay_numbers() -> None:
    """A number in its declared format is written bare: "-1.50", not the text escape "'-1.50"
    that a cell starting with '-' gets when it is text (a second reader's find)."""
    from engine.columns.output import FORMAT_KEY

    fields = [
        pa.field("x", pa.float64(), metadata={FORMAT_KEY: b"%.2f"}),
        pa.field("n", pa.int64(), metadata={FORMAT_KEY: b"%.1f"}),
        pa.field("t", pa.string()),
    ]
    table = pa.table(
        [pa.array([-1.5, 2.0, None]), pa.array([-3, 52000, 1]), pa.array(["-1", "a", "=b"])],
        schema=pa.schema(fields),
    )
    assert csv_rows(table, table.schema).decode().splitlines() == [
        '-1.50,-3.0,"\'-1"',
        '2.00,52000.0,"a"',
        ',1.0,"\'=b"',
    ]


@pytest.mark.parametrize(
    "values",
    [
        pa.array([3, 0, None, 7, 3], pa.uint8()),
        pa.array([-5, 12, -5, None, 0], pa.int16()),
        pa.array(list(range(-3000, 3000, 7)), pa.int64()),  # a span past the table: cast
        pa.array([-(2**63), 2**63 - 1, None], pa.int64()),
        pa.array([2**64 - 1, 0], pa.uint64()),
        pa.array([None, None], pa.int32()),
        pa.array([], pa.int64()),
        pa.array([9, 8, 7, 6, 5, 4], pa.int32()).slice(2, 3),
        # A narrow signed type spanning more than half its range: the positions in the table
        # (value - min) do not fit the type itself (127 - (-128) = 255).
        pa.array([-128, 0, 127] * 100, pa.int8()),
        pa.array([-128, 0, 127, None] * 100, pa.int8()),
        pa.array([-100, 100] * 300, pa.int8()),
    ],
)
def test_integer_cells_are_pyarrows_text(values: pa.Array) -> None:
    # Issue 25: integers are rendered from a table of the span's texts when the span is small;
    # the bytes must be those of pyarrow's cast, nulls empty.
    schema = pa.schema([pa.field("n", values.type)])
    expected = b"".join(
        (b"" if value is None else str(value).encode()) + b"\n" for value in values.to_pylist()
    )
    batch = pa.RecordBatch.from_arrays([values], schema=schema)
    assert csv_rows(batch, schema) == expected


def test_adjacent_integer_columns_joined_give_the_same_line() -> None:
    # Issue 25: adjacent integer columns of small spans are rendered as one joined column; the
    # line must be the columns' cells joined by commas, whatever runs they form.
    rng = np.random.default_rng(5)
    n = 300
    columns = {
        "a": pa.array(rng.integers(0, 85, n), pa.uint8()),
        "b": pa.array(rng.integers(-4, 5, n), pa.int8()),
        "c": pa.array(rng.integers(0, 200, n), pa.int64()),  # a * b * c past the pair limit
        "d": pa.array(rng.integers(0, 2, n), pa.uint8()),
        "t": pa.array([f"x{v}" for v in rng.integers(0, 3, n)], pa.string()),
        "e": pa.array([None if v == 0 else int(v) for v in rng.integers(0, 4, n)], pa.int32()),
        "f": pa.array(rng.integers(0, 10**9, n), pa.int64()),  # cast
        "g": pa.array(rng.integers(7, 9, n), pa.uint16()),
    }
    table = pa.table(columns)
    lines = []
    for row in table.to_pylist():
        cells = []
        for name, value in row.items():
            if name == "t":
                cells.append(f'"{value}"')
            else:
                cells.append("" if value is None else str(value))
        lines.append(",".join(cells) + "\n")
    assert csv_rows(table, table.schema) == "".join(lines).encode()
