"""The typed CSV read (numbers converted by pyarrow's reader, text columns as dictionaries) and
the lookup-table binning give exactly what the text path gives: the same codes, or the same
refusal message, cell by cell and across blocks."""

from __future__ import annotations

import io
import itertools
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from app.datasets import ingest
from app.datasets.ingest import IngestLimits, SeparatorRuns, UploadRejected
from engine.columns.arrow_text import encode_number_array
from engine.columns.numeric import _general_bin_codes, bin_codes_compact
from engine.tables import local
from engine.tables.encoding import TableSchema, encode_values
from engine.tables.local import TableError
from engine.tables.typed_csv import TypedReadRefused, csv_types

LIMITS = IngestLimits(max_columns=50, max_rows=1_000_000, max_cell_bytes=200)

COLUMNS: list[dict[str, Any]] = [
    {"name": "n", "type": "numeric", "bins": [0, 10, 20, 50], "nullable": True},
    {"name": "c", "type": "numeric", "bins": [-60, 0, 30, 300], "clip": True, "nullable": True},
    {"name": "f", "type": "numeric", "bins": [0.5, 1.25, 2.0, 60.5]},
    {"name": "i", "type": "numeric", "bins": [-5, 0, 5, 50], "integer": True},
    {"name": "label", "type": "categorical", "categories": ["a", "b", "NA"], "other": "o"},
    {"name": "day", "type": "date", "min": "2013-01-01", "max": "2013-12-31", "unit": "month"},
    {"name": "flag", "type": "boolean"},
]
NUMERIC = ("n", "c", "f", "i")

# Cells put into a numeric column: numbers in every notation, whitespace, spellings written
# exactly and not, text pyarrow's reader converts to a non-finite number, and garbage.
CELLS = [
    *("12", " 12", "12 ", "\t5", "5\t", "+5", "-0", "00012", "1e1", "1E1", ".5", "5.", "-.5"),
    *("2.9999999999999996", "-4.000000000000001", "0.30000000000000004", "49.99999999999999"),
    *("50", "50.0", "60.5", "-60", "-100", "301", "1e400", "-1e400", "12345678901234567890"),
    *("inf", "-inf", "Infinity", "+inf", "nan", "NaN", "-nan", " nan", "nan ", "NaN\t"),
    *("", " ", "  ", "NA", " NA", "NA ", "\tNA", "-", " - ", "None", "null", "NULL", "n/a"),
    *("1_0", "0x10", "1,5", "e5", ".", "+", "5e", "1e", "+-5", "1..2", "1d", "abc", "'-5"),
    *(
        " x ",
        "x",
        "12\x0b",
        "\x0b12",
        "\x1c3",
        "\u00a07",
        "１２",
        "\u30003",
        "12\r",
        "1\n2",
        '"5"',
        "=",
    ),
    "0" * 250 + "1",
    " " * 250 + "3",
]


def _base(rows: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    return {
        "n": [str(round(rng.uniform(0, 50), 2)) if rng.random() > 0.1 else "" for _ in range(rows)],
        "c": [str(rng.randint(-100, 400)) for _ in range(rows)],
        "f": [str(round(rng.uniform(0.5, 60.5), rng.randint(0, 6))) for _ in range(rows)],
        "i": [str(rng.randint(-5, 50)) for _ in range(rows)],
        "label": [rng.choice(["a", "b", "NA", "zz"]) for _ in range(rows)],
        "day": [f"2013-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}" for _ in range(rows)],
        "flag": [rng.choice(["true", "no", " Yes "]) for _ in range(rows)],
    }


def _write(path: Path, columns: dict[str, list[str]], raw: dict[tuple[str, int], str]) -> None:
    """A CSV of ``columns`` (quoted only where needed); ``raw`` cells are written as given."""
    names = list(columns)
    out = io.StringIO()
    out.write(",".join(names) + "\n")
    for row in range(len(columns[names[0]])):
        cells = []
        for name in names:
            if (name, row) in raw:
                cells.append(raw[(name, row)])
            else:
                cells.append(_quoted(columns[name][row]))
        out.write(",".join(cells) + "\n")
    path.write_text(out.getvalue(), encoding="utf-8")


def _quoted(cell: str) -> str:
    """A cell as a CSV writer writes it (an empty cell stays empty, as pandas writes it)."""
    if any(char in cell for char in ',"\n\r'):
        return '"' + cell.replace('"', '""') + '"'
    return cell


def _loaded(path: Path, schema: TableSchema, *, typed: bool | None) -> tuple[str, Any]:
    """load_table (``typed`` None: the public function, which reads typed and falls back)."""
    try:
        if typed is None:
            return "codes", local.load_table(path, schema)
        return "codes", local._load_table(path, schema, False, typed=typed)
    except TableError as error:
        return "refused", str(error)


def _ingested(path: Path, schema: TableSchema, *, typed: bool | None) -> tuple[str, Any]:
    """ingest_table's stored codes or refusal (``typed`` None: the public function)."""
    target = path.with_name(f"codes-{typed}.arrow")
    try:
        if typed is None:
            ingest.ingest_table(path, schema, target, LIMITS)
        else:
            batches = ingest.read_batches(path, schema, LIMITS, typed=typed)
            ingest._write_encoded(batches, schema, target, LIMITS)
    except UploadRejected as rejected:
        return "refused", rejected.message
    return "codes", ingest.read_encoded_table(target, schema)


def _same(first: tuple[str, Any], second: tuple[str, Any]) -> bool:
    if first[0] != second[0]:
        return False
    if first[0] == "codes":
        return bool(first[1].dtype == second[1].dtype and np.array_equal(first[1], second[1]))
    return bool(first[1] == second[1])


SCHEMAS = [
    {"columns": COLUMNS},
    {"columns": COLUMNS, "missing_values": ["", "NA", "nan", "-", " x "]},
    {"columns": COLUMNS, "missing_values": ["?", "-1"]},  # a number: numeric columns stay text
]


@pytest.mark.parametrize("raw_schema", SCHEMAS, ids=["default", "nan-spelled", "numeric-spelling"])
@pytest.mark.parametrize("column", NUMERIC)
def test_each_cell_gives_the_text_paths_codes_or_message(
    tmp_path: Path, raw_schema: dict[str, Any], column: str
) -> None:
    schema = TableSchema.from_json(raw_schema)
    base = _base(30, 1)
    _write(tmp_path / "base.csv", base, {})
    if "" in schema.missing_values:  # the base's empty cells are missing values: all codes
        assert _loaded(tmp_path / "base.csv", schema, typed=True)[0] == "codes"
    for k, cell in enumerate(CELLS):
        path = tmp_path / f"cell{k}.csv"
        columns = {name: list(values) for name, values in base.items()}
        columns[column][7] = cell
        _write(path, columns, {})
        text = _loaded(path, schema, typed=False)
        assert _same(_loaded(path, schema, typed=None), text), (column, cell)
        stored = _ingested(path, schema, typed=False)
        assert _same(_ingested(path, schema, typed=None), stored), (column, cell)
        if text[0] == "codes" and stored[0] == "codes":
            assert np.array_equal(text[1], stored[1])


@pytest.mark.parametrize("cell", ['""', '"NA"', '" 12 "', '"7"', '"1e1"'])
def test_quoted_cells_give_the_text_paths_codes_or_message(tmp_path: Path, cell: str) -> None:
    schema = TableSchema.from_json({"columns": COLUMNS})
    path = tmp_path / "quoted.csv"
    _write(path, _base(30, 2), {("n", 4): cell})
    assert _same(_loaded(path, schema, typed=None), _loaded(path, schema, typed=False))
    assert _same(_ingested(path, schema, typed=None), _ingested(path, schema, typed=False))


def test_clean_cells_are_read_typed(tmp_path: Path) -> None:
    # Numbers, exact spellings and nulls: the typed read takes them, with no fallback.
    schema = TableSchema.from_json({"columns": COLUMNS})
    path = tmp_path / "clean.csv"
    columns = _base(400, 3)
    columns["n"][:4] = ["", "NA", " 12 ", "\t3"]
    _write(path, columns, {})
    typed = _loaded(path, schema, typed=True)
    assert typed[0] == "codes" and _same(typed, _loaded(path, schema, typed=False))
    batches = list(ingest.read_batches(path, schema, LIMITS, typed=True))
    assert batches[0].schema.field("n").type == pa.float64()
    assert pa.types.is_dictionary(batches[0].schema.field("label").type)  # 4 texts
    assert _same(_ingested(path, schema, typed=True), _ingested(path, schema, typed=False))


@pytest.mark.parametrize("cell", ["inf", " NA", "abc", "0" * 250 + "1"])
def test_a_cell_the_typed_read_cannot_stand_for_abandons_it(tmp_path: Path, cell: str) -> None:
    schema = TableSchema.from_json({"columns": COLUMNS})
    path = tmp_path / "odd.csv"
    columns = _base(40, 4)
    columns["n"][30] = cell
    _write(path, columns, {})
    with pytest.raises(TypedReadRefused):
        list(ingest.read_batches(path, schema, LIMITS, typed=True))
    if len(cell) < 200:  # load_table has no cell limit
        with pytest.raises(TypedReadRefused):
            local._load_table(path, schema, False, typed=True)


def test_typed_read_of_many_blocks_matches_the_text_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small blocks: refusals in late blocks only, after clean ones were encoded (and, for the
    # upload, written); mixed blocks of nulls, spellings and numbers.
    monkeypatch.setattr(local, "CSV_BLOCK_BYTES", 2048)
    monkeypatch.setattr(ingest, "CSV_BLOCK_BYTES", 2048)
    schema = TableSchema.from_json({"columns": COLUMNS})
    columns = _base(3000, 5)
    clean = tmp_path / "clean.csv"
    _write(clean, columns, {})
    for load in (_loaded, _ingested):
        typed = load(clean, schema, typed=True)
        assert typed[0] == "codes" and _same(typed, load(clean, schema, typed=False))
    for row, name, cell in [
        (2900, "n", "abc"),
        (2950, "c", "inf"),
        (2999, "i", "-9"),
        (5, "f", ""),
    ]:
        columns[name][row] = cell
        path = tmp_path / f"bad{row}.csv"
        _write(path, columns, {})
        for load in (_loaded, _ingested):
            text = load(path, schema, typed=False)
            assert text[0] == "refused"
            assert _same(load(path, schema, typed=None), text), (row, name, cell)


def test_numeric_cells_over_the_cell_limit_are_counted_as_before(tmp_path: Path) -> None:
    schema = TableSchema.from_json({"columns": COLUMNS})
    columns = _base(50, 6)
    columns["n"][3] = "0" * 300 + "1"
    columns["i"][9] = "1" + " " * 300
    columns["label"][11] = "b" * 300
    path = tmp_path / "long.csv"
    _write(path, columns, {})
    refused = _ingested(path, schema, typed=None)
    assert refused == (
        "refused",
        "cells longer than 200 bytes: column 'n': 1 rows; column 'i': 1 rows; "
        "column 'label': 1 rows",
    )
    assert refused == _ingested(path, schema, typed=False)


def test_spellings_that_are_numbers_keep_numeric_columns_as_text() -> None:
    types = csv_types(
        TableSchema.from_json({"columns": COLUMNS, "missing_values": ["-1"]}), typed=True
    )
    assert types.numbers == () and types.column_types["n"] == pa.string()
    types = csv_types(TableSchema.from_json({"columns": COLUMNS}), typed=True)
    assert types.numbers == NUMERIC and "" in types.null_values


def _longest_run(data: bytes) -> int:
    cuts = [-1, *(i for i, b in enumerate(data) if b in b",\n"), len(data)]
    return max(b - a - 1 for a, b in itertools.pairwise(cuts))


@pytest.mark.parametrize("commas", [1, 6], ids=["mixed", "comma-heavy"])
def test_separator_runs_are_measured_exactly(tmp_path: Path, commas: int) -> None:
    # Comma-heavy data has a comma in every window of most blocks (the scan then looks for
    # line feeds only near the ends); mixed data takes the other paths.
    rng = random.Random(8 + commas)
    for trial in range(300):
        pieces = [
            rng.choices(
                [b",", b"\n", b"x" * rng.choice([0, 1, 5, 15, 16, 17, 31, 32, 33, 64])],
                weights=[commas, 1, 1],
            )[0]
            for _ in range(rng.randint(0, 60 * commas))
        ]
        data = b"".join(pieces)
        path = tmp_path / f"runs{trial}.bin"
        path.write_bytes(data)
        for limit in (16, 17, 31, 32):
            for chunk in (1, 3, 7, 64, 1 << 20):
                runs = SeparatorRuns(path, limit)
                while runs.read(chunk):
                    pass
                runs.close()
                assert runs.too_long == (bool(data) and _longest_run(data) > limit)


@pytest.mark.parametrize(
    "edges",
    [
        (0.0, 10.0, 20.0, 50.0),
        (-60.0, 0.0, 30.0, 300.0),
        (-5.0, -4.0, 0.0, 5.0),
        (0.5, 1.25, 2.0, 60.5),
        (0.0, 1.0),
        (-(2.0**52), 0.0, 2.0**52),
        (0.0, 70_000.0),
    ],
)
@pytest.mark.parametrize("clip", [False, True])
def test_lookup_binning_equals_the_binary_search(edges: tuple[float, ...], clip: bool) -> None:
    rng = np.random.default_rng(9)
    low, high = edges[0], edges[-1]
    near = np.array([*edges, *np.nextafter(edges, -np.inf), *np.nextafter(edges, np.inf)])
    whole = np.floor(rng.uniform(max(low, -1e6), min(high, 1e6), 500))
    numbers = np.concatenate([near, whole, rng.uniform(low, high, 2000), [-0.0]])
    inside = numbers[(numbers >= low) & (numbers <= high)]
    outside = np.concatenate([numbers, [low - 1, high + 1, np.nan, np.inf]])
    for values in (inside, outside, inside.astype(np.int64), np.zeros(0)):
        fast = bin_codes_compact(values, edges, clip)
        slow = _general_bin_codes(values.astype(np.float64), np.asarray(edges), clip)
        assert fast.tolist() == slow.tolist()
        assert fast.dtype.kind == "u" or (slow < 0).any() or not values.size


@pytest.mark.parametrize("other", [None, "o"])
def test_integer_categories_by_table_equal_the_pandas_encoder(other: str | None) -> None:
    categories = ["07", "-0", "0", "-1", "7", "99", "x", "-3"]
    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "c", "type": "categorical", "categories": categories, "other": other}
            ]
        }
    )
    column = schema.columns[0]
    rng = np.random.default_rng(10)
    for values in (rng.integers(-3, 100, 3000), rng.integers(-10, 200, 3000), np.array([7, 0])):
        for kind in (pa.int64(), pa.int32(), pa.int16()):
            array = pa.array(values, type=kind)
            expected = encode_values(column, array.to_pandas(), schema.missing_values)
            assert encode_number_array(column, array, ()).tolist() == expected.tolist()


def test_only_columns_whose_texts_repeat_are_read_as_dictionaries(tmp_path: Path) -> None:
    # A sample of the file's head chooses; either read gives the text path's codes.
    schema = TableSchema.from_json({"columns": COLUMNS})
    columns = _base(3000, 7)
    columns["day"] = [f"2013-{1 + k % 12:02d}-{1 + k % 28:02d}" for k in range(3000)]
    columns["label"] = [f"x{k}" for k in range(3000)]  # distinct: the "other" bucket
    path = tmp_path / "sample.csv"
    _write(path, columns, {})
    batch = next(iter(ingest.read_batches(path, schema, LIMITS, typed=True)))
    assert pa.types.is_dictionary(batch.schema.field("day").type)
    assert batch.schema.field("label").type == pa.string()
    for load in (_loaded, _ingested):
        typed = load(path, schema, typed=True)
        assert typed[0] == "codes" and _same(typed, load(path, schema, typed=False))
