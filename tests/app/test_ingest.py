"""Ingest of Parquet dictionary columns: each dictionary encoded once, correctly, within bounds.

In-process (no server): ``ingest_table`` on files built here. The review's dictionary bomb (one
column, millions of distinct values in one dictionary) was converted to Python objects once per
batch; these tests count the conversions rather than time them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import app.datasets.ingest as ingest
from app.datasets.ingest import IngestLimits, UploadRejected, ingest_table, read_encoded_table
from app.datasets.parquet_pages import MAX_DICTIONARY_READ_ENTRIES
from engine.encoding import TableSchema

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
        ingest_table(source, _schema(declared), tmp_path / "out.parquet", LIMITS)
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
        ingest_table(source, _schema(categories), tmp_path / "out.parquet", LIMITS)
    assert f"'a': {rows - 5000} values not among the declared categories" in refused.value.message
    assert sum(converted) == rows
    target = tmp_path / "ok.parquet"
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
    target = tmp_path / "out.parquet"
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
        ingest_table(source, _schema(["0000000"]), tmp_path / "out.parquet", LIMITS)
    assert refused.value.status_code == 422
    assert "column 'a': its Parquet dictionaries hold more than 65536 entries" in (
        refused.value.message
    )
    assert not (tmp_path / "out.parquet").exists()
