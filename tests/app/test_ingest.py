"""Ingest of Parquet dictionary columns: each dictionary encoded once, correctly, within bounds.

In-process (no server): ``ingest_table`` on files built here. The review's dictionary bomb (one
column, millions of distinct values in one dictionary) was converted to Python objects once per
batch; these tests count the conversions rather than time them.
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import app.datasets.ingest as ingest
from app.datasets.ingest import IngestLimits, UploadRejected, ingest_table, read_encoded_table
from app.datasets.parquet_pages import MAX_DICTIONARY_READ_ENTRIES
from engine.tables.encoding import TableSchema

LIMITS = IngestLimits(max_columns=100, max_rows=10_000_000, max_cell_bytes=1024)


def _schema(categories: list[str]) -> TableSchema:
    return TableSchema.from_json(
        {"columns": [{"name": "a", "type": "categorical", "categories": categories}]}
    )


def _write(path: Path, table: pa.Table, **options: object) -> Path:
    pq.write_table(table, path, store_schema=False, **options)  # type: ignore[arg-type]
    return path


def test_each_dictionary_entry_is_converted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, distinct = 300_000, 16_000  # several batches of at most 65,536 rows, one dictionary
    assert distinct <= MAX_DICTIONARY_READ_ENTRIES
    values = [f"v{i % distinct:06d}" for i in range(rows)]
    source = _write(
        tmp_path / "repeated.parquet",
        pa.table({"a": pa.array(values).dictionary_encode()}),
        row_group_size=rows,
    )
    assert pq.ParquetFile(source).metadata.row_group(0).column(0).has_dictionary_page
    converted = _count_conversions(monkeypatch)
    declared = [f"v{i:06d}" for i in range(100)]
    with pytest.raises(UploadRejected) as refused:
        ingest_table(source, _schema(declared), tmp_path / "out.arrow", LIMITS)
    outside = sum(value not in declared for value in values)
    assert refused.value.message == (
        f"values do not match the schema: column 'a': {outside} values not among the declared "
        'categories, declare them or set "other"'
    )
    # Before the fix every batch converted the whole dictionary again: 5 batches, 80,000 values.
    assert sum(converted) == distinct


def test_long_dictionaries_are_decoded_to_plain_strings_and_encoded_once_per_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 100_000  # one dictionary of 100,000 distinct values, over the dictionary-read limit
    values = [f"v{i:06d}" for i in range(rows)]
    source = _write(
        tmp_path / "distinct.parquet",
        pa.table({"a": pa.array(values).dictionary_encode()}),
        row_group_size=rows,
        dictionary_pagesize_limit=32 * 1024 * 1024,
    )
    chunk = pq.ParquetFile(source).metadata.row_group(0).column(0)
    assert chunk.has_dictionary_page and "PLAIN" not in chunk.encodings[1:]
    converted = _count_conversions(monkeypatch)
    categories = values[::-1][:5000]  # declared in another order than the dictionary
    with pytest.raises(UploadRejected) as refused:
        ingest_table(source, _schema(categories), tmp_path / "out.arrow", LIMITS)
    assert f"'a': {rows - 5000} values not among the declared categories" in refused.value.message
    assert sum(converted) == rows
    target = tmp_path / "ok.arrow"
    assert ingest_table(source, _schema(values[::-1]), target, LIMITS) == rows
    codes = read_encoded_table(target, _schema(values[::-1]))[:, 0]
    assert codes.tolist() == list(range(rows - 1, -1, -1))


def _count_conversions(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    converted: list[int] = []
    original = ingest.encode_array

    def counting(column: object, values: pa.Array, *rest: object) -> np.ndarray:
        converted.append(len(values))
        return original(column, values, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest, "encode_array", counting)
    return converted


def test_row_groups_with_different_dictionaries_of_equal_length_encode_correctly(
    tmp_path: Path,
) -> None:
    categories = ["north", "south", "east", "west"]
    first = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 2, 3, 0, None], type=pa.int32()), pa.array(categories)
    )
    second = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 2, 3, 3, 0], type=pa.int32()), pa.array(categories[::-1])
    )
    source = tmp_path / "groups.parquet"
    schema = pa.schema([pa.field("a", pa.dictionary(pa.int32(), pa.string()))])
    with pq.ParquetWriter(source, schema, store_schema=False) as writer:
        writer.write_table(pa.table({"a": first.fill_null("north")}, schema=schema))
        writer.write_table(pa.table({"a": second}, schema=schema))
    assert pq.ParquetFile(source).metadata.num_row_groups == 2
    target = tmp_path / "out.arrow"
    table_schema = _schema(categories)
    assert ingest_table(source, table_schema, target, LIMITS) == 12
    codes = read_encoded_table(target, table_schema)[:, 0].tolist()
    assert codes == [0, 1, 2, 3, 0, 0, 3, 2, 1, 0, 0, 3]


def test_dictionary_with_more_entries_than_rows_is_refused_before_decoding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entries = 200_000  # over the 65,536 floor, and far more than the file's 10 rows
    column = pa.DictionaryArray.from_arrays(
        pa.array([0] * 10, type=pa.int32()), pa.array([f"{i:07d}" for i in range(entries)])
    )
    source = _write(
        tmp_path / "unused.parquet",
        pa.table({"a": column}),
        dictionary_pagesize_limit=32 * 1024 * 1024,
    )

    def fail(*_args: object) -> np.ndarray:
        raise AssertionError("nothing may be encoded")

    monkeypatch.setattr(ingest, "encode_array", fail)
    with pytest.raises(UploadRejected) as refused:
        ingest_table(source, _schema(["0000000"]), tmp_path / "out.arrow", LIMITS)
    assert refused.value.status_code == 422
    assert "column 'a': its Parquet dictionaries hold more than 65536 entries" in (
        refused.value.message
    )
    assert not (tmp_path / "out.arrow").exists()


@pytest.mark.parametrize("read_rows", [500, 300])  # 300: batches straddle the stored ones
def test_the_stored_table_is_a_compressed_arrow_file_of_narrow_codes_in_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read_rows: int
) -> None:
    monkeypatch.setattr(ingest, "PARQUET_MAX_BATCH_ROWS", read_rows)  # rows read at a time
    monkeypatch.setattr(ingest, "WRITE_MAX_ROWS", 1000)  # several stored record batches
    rng = np.random.default_rng(7)
    small = rng.integers(0, 3, 4321)
    wide = rng.integers(0, 300, 4321)
    source = _write(tmp_path / "codes.parquet", pa.table({"s": small, "w": wide}))
    schema = TableSchema.from_json({"s": 3, "w": 300})
    target = tmp_path / "table.arrow"
    assert ingest_table(source, schema, target, LIMITS) == 4321
    assert target.read_bytes()[:6] == b"ARROW1"
    with pa.OSFile(str(target)) as stored:
        reader = pa.ipc.open_file(stored)
        assert reader.schema.types == [pa.uint8(), pa.uint16()]  # not int32 per code
        assert reader.num_record_batches == 5  # 1000 rows each, then 321
        batch = reader.get_batch(0)
    plain = tmp_path / "plain.arrow"  # the same batches without compression
    with pa.OSFile(str(target)) as stored, pa.ipc.new_file(str(plain), batch.schema) as writer:
        reader = pa.ipc.open_file(stored)
        for i in range(reader.num_record_batches):
            writer.write_batch(reader.get_batch(i))
    assert target.stat().st_size < 0.8 * plain.stat().st_size  # zstd: 9 KB against 14 KB
    codes = read_encoded_table(target, schema)
    assert codes.dtype == np.int64
    assert codes[:, 0].tolist() == small.tolist() and codes[:, 1].tolist() == wide.tolist()
    narrow = read_encoded_table(target, schema, narrow=True)
    assert narrow.dtype == np.uint16 and (narrow == codes).all()


def test_a_table_stored_as_parquet_before_reads_as_it_did(tmp_path: Path) -> None:
    """Datasets uploaded before the Arrow format keep their ``table.parquet`` (the key is in
    their row): the reader tells the formats apart by their magic bytes."""
    rng = np.random.default_rng(8)
    schema = TableSchema.from_json({"a": 5, "b": 70_000})
    a = rng.integers(0, 5, 2000).astype(np.uint8)
    b = rng.integers(0, 70_000, 2000).astype(np.uint32)
    legacy = tmp_path / "table.parquet"
    pq.write_table(  # the options stored tables were written with
        pa.table({"a": a, "b": b}),
        legacy,
        compression="zstd",
        use_dictionary=False,
        column_encoding="BYTE_STREAM_SPLIT",
    )
    codes = read_encoded_table(legacy, schema, narrow=True)
    assert codes.dtype == np.uint32
    assert codes[:, 0].tolist() == a.tolist() and codes[:, 1].tolist() == b.tolist()
    source = _write(tmp_path / "upload.parquet", pa.table({"b": b, "a": a}))  # other order
    stored = tmp_path / "table.arrow"
    ingest_table(source, schema, stored, LIMITS)
    assert (read_encoded_table(stored, schema, narrow=True) == codes).all()


def _typed_csv(rows: int, rng: np.random.Generator) -> tuple[list[str], TableSchema]:
    """A CSV of a number, a category and a date; a quoted cell with a comma and a line break
    two thirds of the way down (from there the streaming reader takes over)."""
    lines = ["x,c,d"]
    for i in range(rows):
        lines.append(f"{rng.integers(0, 100)},{'abc'[i % 3]},2024-01-{1 + i % 28:02d}")
    lines[2 * rows // 3] = '7,"b",2024-02-03'
    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "x", "type": "numeric", "bins": [0, 25, 50, 75, 100]},
                {"name": "c", "type": "categorical", "categories": ["a", "b", "c", "d,\ne"]},
                {"name": "d", "type": "date", "min": "2024-01-01", "max": "2024-03-01", "bins": 4},
            ]
        }
    )
    lines[rows // 2] = '8,"d,\ne",2024-01-05'
    return lines, schema


@pytest.mark.parametrize("block", [64, 1000])
def test_csv_read_in_small_blocks_gives_the_codes_and_refusals_of_one_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """The CSV blocks parsed on threads (engine/tables/csv_blocks.py) and then, after the first quote,
    by the streaming reader: codes, and a refusal's message, as when one block holds it all."""
    rng = np.random.default_rng(11)
    lines, schema = _typed_csv(3000, rng)
    source = tmp_path / "t.csv"
    source.write_text("\n".join(lines) + "\n")
    whole = tmp_path / "whole.arrow"
    ingest_table(source, schema, whole, LIMITS)
    monkeypatch.setattr(ingest, "CSV_BLOCK_BYTES", block)
    blocks = tmp_path / "blocks.arrow"
    assert ingest_table(source, schema, blocks, LIMITS) == 3000
    expected = read_encoded_table(whole, schema)
    assert (read_encoded_table(blocks, schema) == expected).all()
    assert expected[1499, 1] == 3  # the quoted category with its comma and line break

    short = list(lines)
    for i in (10, 700, 2900):  # before and after the quote: one field too many
        short[i] += ",9"
    outside = list(lines)
    for i in (20, 1200, 2500):
        outside[i] = "150,a,2024-01-01"  # outside the bounds
    for bad, message in [
        (short, "3 rows do not have 3 fields"),
        (outside, "values do not match the schema: column 'x': 3 values outside"),
    ]:
        source.write_text("\n".join(bad) + "\n")
        for size in (block, 64 * 1024 * 1024):
            monkeypatch.setattr(ingest, "CSV_BLOCK_BYTES", size)
            with pytest.raises(UploadRejected) as refused:
                ingest_table(source, schema, tmp_path / "refused.arrow", LIMITS)
            assert refused.value.message.startswith(message)


def test_a_byte_order_mark_before_a_data_row_is_part_of_its_cell(tmp_path: Path) -> None:
    """Only the file's first bytes may be a BOM (pyarrow drops one at the start of any bytes it
    is given, and each CSV block starts a row): a mark before a row's first cell is text."""
    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "c", "type": "categorical", "categories": ["a", "a,b", "z"]},
                {"name": "x", "type": "numeric", "bins": [0, 5, 10]},
            ]
        }
    )
    source = tmp_path / "bom.csv"
    source.write_bytes(b"\xef\xbb\xbfc,x\na,1\n\xef\xbb\xbfa,2\n")  # the first BOM is the file's
    with pytest.raises(UploadRejected) as refused:
        ingest_table(source, schema, tmp_path / "t.arrow", LIMITS)
    assert refused.value.message.startswith(
        "values do not match the schema: column 'c': 1 value not among the declared categories"
    )
    source.write_bytes(b'c,x\n\xef\xbb\xbf"a,b",1\nz,2\n')  # no quoted cell: three fields
    with pytest.raises(UploadRejected) as refused:
        ingest_table(source, schema, tmp_path / "t.arrow", LIMITS)
    assert refused.value.message == "1 row does not have 2 fields"


def _reader_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "parquet-batches"]


@pytest.mark.parametrize("late", [None, "undeclared", "too long"])
def test_parquet_batches_decoded_ahead_on_a_thread_that_ends_with_the_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, late: str | None
) -> None:
    # Batches of 500 rows: the reader thread decodes the next while one is encoded. A refusal
    # found by the encoder (an undeclared value) or by the reader (a cell over the limit) in
    # the last batches still counts every row, removes the file and leaves no thread behind.
    monkeypatch.setattr(ingest, "PARQUET_MAX_BATCH_ROWS", 500)
    readers: set[int] = set()
    check = ingest._oversized_cells

    def spied(batch: pa.RecordBatch, limit: int) -> Counter[str]:
        readers.add(threading.get_ident())
        return check(batch, limit)

    monkeypatch.setattr(ingest, "_oversized_cells", spied)
    values = [f"c{i % 7}" for i in range(5000)]
    if late == "undeclared":
        values[4200] = values[4900] = "c9"
    elif late == "too long":
        values[4700] = "x" * 2000
    source = _write(tmp_path / "t.parquet", pa.table({"a": values}), row_group_size=2000)
    schema = _schema([f"c{i}" for i in range(7)])
    target = tmp_path / "table.arrow"
    if late is None:
        assert ingest_table(source, schema, target, LIMITS) == 5000
        codes = read_encoded_table(target, schema)
        assert codes[:, 0].tolist() == [i % 7 for i in range(5000)]
    else:
        with pytest.raises(UploadRejected) as refused:
            ingest_table(source, schema, target, LIMITS)
        expected = {
            "undeclared": "column 'a': 2 values not among the declared categories",
            "too long": "cells longer than 1024 bytes: column 'a': 1 rows",
        }[late]
        assert expected in refused.value.message
        assert not target.exists()
    assert readers and threading.get_ident() not in readers
    assert _reader_threads() == []


MIXED_SCHEMA = TableSchema.from_json(
    {
        "columns": [
            {"name": "city", "type": "categorical", "categories": ["a", "b"]},
            {"name": "n", "type": "numeric", "min": 0, "max": 10, "bins": 5, "clip": True,
             "nullable": True},
            {"name": "day", "type": "date", "min": "2020-01-01", "max": "2020-12-31",
             "unit": "month", "nullable": True},
            {"name": "at", "type": "datetime", "min": "2020-01-01", "max": "2021-01-01",
             "bins": 4},
            {"name": "skip", "type": "ignore"},
        ]
    }
)  # fmt: skip


def _stored_values(path: Path) -> pa.Table:
    with pa.OSFile(str(path)) as source:
        return pa.ipc.open_file(source).read_all()


def test_raw_values_are_stored_beside_the_codes_row_aligned_and_unclamped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 5_000
    rng = np.random.default_rng(8)
    numbers = rng.uniform(-2, 12, rows).round(3)  # some outside [0, 10]: clamped in the codes
    days = rng.integers(18_262, 18_627, rows)  # 2020
    seconds = rng.integers(1_577_836_800, 1_609_459_199, rows)
    text_numbers = [("NA" if i % 7 == 0 else f"{v:g}") for i, v in enumerate(numbers)]
    text_days = [
        ("" if i % 11 == 0 else str(np.datetime64(int(d), "D"))) for i, d in enumerate(days)
    ]
    text_times = [str(np.datetime64(int(t), "s")) for t in seconds]
    lines = ["city,n,day,at,skip"] + [
        f"{'ab'[i % 2]},{text_numbers[i]},{text_days[i]},{text_times[i]},x" for i in range(rows)
    ]
    source = tmp_path / "mixed.csv"
    source.write_text("\n".join(lines) + "\n")
    # Small write buffers: the values file is written in several record batches, as the codes.
    monkeypatch.setattr(ingest, "WRITE_BUFFER_BYTES", 4_096)
    target, values_target = tmp_path / "table.arrow", tmp_path / "values.arrow"
    assert ingest_table(source, MIXED_SCHEMA, target, LIMITS, values_target=values_target) == rows
    codes = read_encoded_table(target, MIXED_SCHEMA)
    with pa.OSFile(str(values_target)) as handle:
        assert pa.ipc.open_file(handle).num_record_batches > 1
    stored = _stored_values(values_target)
    assert stored.column_names == ["n", "day", "at"]
    n = np.asarray(stored.column("n").to_numpy(zero_copy_only=False), dtype=np.float64)
    expected = np.where(np.arange(rows) % 7 == 0, np.nan, numbers)
    np.testing.assert_array_equal(n, expected)
    assert n[~np.isnan(n)].min() < 0 and n[~np.isnan(n)].max() > 10, "kept unclamped"
    null = MIXED_SCHEMA.column("n").null_code
    assert np.array_equal(np.isnan(n), codes[:, 1] == null)
    day = np.asarray(stored.column("day").to_numpy(zero_copy_only=False), dtype=np.float64)
    np.testing.assert_array_equal(day, np.where(np.arange(rows) % 11 == 0, np.nan, days))
    assert stored.column("day").null_count == len(range(0, rows, 11)), "missing cells are nulls"
    np.testing.assert_array_equal(stored.column("at").to_numpy(), seconds.astype(np.float64))


def test_no_values_file_without_value_columns_and_none_left_by_a_refusal(tmp_path: Path) -> None:
    source = tmp_path / "cities.csv"
    source.write_text("a\nx\ny\n")
    values_target = tmp_path / "values.arrow"
    ingest_table(
        source, _schema(["x", "y"]), tmp_path / "t.arrow", LIMITS, values_target=values_target
    )
    assert not values_target.exists()
    refused = tmp_path / "refused.csv"
    refused.write_text(
        "city,n,day,at,skip\na,1,2020-01-01,2020-01-01T00:00:00,x\nc,2,,2020-02-01T00:00:00,x\n"
    )
    with pytest.raises(UploadRejected, match="not among the declared categories"):
        ingest_table(
            refused, MIXED_SCHEMA, tmp_path / "t2.arrow", LIMITS, values_target=values_target
        )
    assert not values_target.exists() and not (tmp_path / "t2.arrow").exists()


def test_parquet_values_are_stored_as_read(tmp_path: Path) -> None:
    rows = 200_000  # several prefetched batches
    rng = np.random.default_rng(2)
    numbers = rng.uniform(0, 10, rows)
    numbers[::13] = np.nan
    days = pa.array(rng.integers(18_262, 18_627, rows).astype(np.int32)).cast(pa.date32())
    seconds = pa.array(rng.integers(1_577_836_800, 1_609_459_199, rows), type=pa.timestamp("s"))
    table = pa.table(
        {
            "city": pa.array(["a", "b"] * (rows // 2)),
            "n": pa.array(numbers, from_pandas=True),
            "day": days,
            "at": seconds,
            "skip": pa.array(np.zeros(rows)),
        }
    )
    source = _write(tmp_path / "mixed.parquet", table, row_group_size=50_000)
    values_target = tmp_path / "values.arrow"
    ingest_table(source, MIXED_SCHEMA, tmp_path / "t.arrow", LIMITS, values_target=values_target)
    stored = _stored_values(values_target)
    np.testing.assert_array_equal(stored.column("n").to_numpy(zero_copy_only=False), numbers)
    np.testing.assert_array_equal(
        stored.column("day").to_numpy(), days.cast(pa.int32()).to_numpy().astype(np.float64)
    )
    np.testing.assert_array_equal(
        stored.column("at").to_numpy(), seconds.cast(pa.int64()).to_numpy().astype(np.float64)
    )
