"""Small files that decode into far more memory than their size (for upload-memory tests).

Each builder returns ``(file bytes, schema JSON)``; every file is well under the test stacks'
8 MiB upload cap.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq


def _parquet(table: pa.Table, **options: object) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd", **options)  # type: ignore[arg-type]
    return buffer.getvalue()


def _categorical_schema(names: list[str], categories: list[str]) -> str:
    return json.dumps(
        {"columns": [{"name": n, "type": "categorical", "categories": categories} for n in names]}
    )


def dictionary_bomb(
    columns: int = 64, rows: int = 262_144, cell_bytes: int = 1000
) -> tuple[bytes, str]:
    """Dictionary-encoded columns whose one value (within the cell limit) repeats on every row.

    A few hundred KB on disk; decoded as plain strings it is ``columns × rows × cell_bytes``
    (16 GiB with the defaults), 4 GiB per batch of 65,536 rows.
    """
    value = "x" * cell_bytes
    names = [f"c{i}" for i in range(columns)]
    column = pa.DictionaryArray.from_arrays(
        pa.array([0] * rows, type=pa.int32()), pa.array([value])
    )
    table = pa.table({name: column for name in names})
    # store_schema=False: without the stored Arrow schema a reader sees plain strings, not a
    # dictionary type (which is how files from other writers look).
    data = _parquet(table, row_group_size=rows, store_schema=False)
    return data, _categorical_schema(names, [value])


def distinct_dictionary_bomb(rows: int = 2_300_000) -> tuple[bytes, str]:
    """One text column of ``rows`` distinct 7-character values, all in one dictionary page.

    6.4 MB on disk (the review's file had 4,000,000 values in 11.5 MB; at 2,500,000 the page
    budget refuses the file before decoding). Every value lies outside the declared categories,
    so the upload is refused, but only after the whole file is read. Read as an Arrow dictionary
    and converted to Python objects once per batch, 2,500,000 values cost 142 s of CPU and
    1.3 GiB.
    """
    dictionary = pa.array([f"{i:07d}" for i in range(rows)])
    column = pa.DictionaryArray.from_arrays(pa.array(range(rows), type=pa.int32()), dictionary)
    data = _parquet(
        pa.table({"a": column}),
        row_group_size=rows,
        store_schema=False,
        dictionary_pagesize_limit=60 * 1024 * 1024,
    )
    return data, _categorical_schema(["a"], ["x"])


def long_cell_bomb(rows: int = 24, cell_bytes: int = 48 * 1024 * 1024) -> tuple[bytes, str]:
    """Plain-encoded cells far over the cell limit, a few KB each once compressed.

    Every row group stays under 512 MiB uncompressed (the footer check the service used to
    rely on), while a batch of rows decodes to ``rows × cell_bytes`` (1.1 GiB).
    """
    value = "y" * cell_bytes
    table = pa.table({"a": pa.array([value] * rows, type=pa.large_string())})
    data = _parquet(table, use_dictionary=False, row_group_size=8)
    return data, _categorical_schema(["a"], ["y"])


def many_tiny_rows_csv(size: int = 7 * 1024 * 1024) -> tuple[bytes, str]:
    """A CSV of one-character cells: the most cells (and per-cell overhead) per byte."""
    width = 64
    header = ",".join(f"c{i}" for i in range(width)).encode() + b"\n"
    row = ",".join(["1"] * width).encode() + b"\n"
    body = header + row * ((size - len(header)) // len(row))
    schema = json.dumps({f"c{i}": 2 for i in range(width)})
    return body, schema


def _numeric_schema(names: list[str]) -> str:
    return json.dumps(
        {"columns": [{"name": n, "type": "numeric", "bins": [0, 1, 2]} for n in names]}
    )


def many_tiny_numbers_csv(size: int = 7 * 1024 * 1024) -> tuple[bytes, str]:
    """:func:`many_tiny_rows_csv` with numeric columns: each one-character cell also becomes a
    float64 raw value kept beside the codes (eight bytes per two bytes of file)."""
    body, _ = many_tiny_rows_csv(size)
    return body, _numeric_schema([f"c{i}" for i in range(64)])


def constant_numbers_parquet(columns: int = 16, rows: int = 2_000_000) -> tuple[bytes, str]:
    """Float columns of one repeated value: a few hundred KB on disk, ``columns × rows`` raw
    values (256 MB of float64 with the defaults) kept beside the codes."""
    names = [f"c{i}" for i in range(columns)]
    column = pa.array([1.5] * rows, type=pa.float64())
    table = pa.table({name: column for name in names})
    return _parquet(table, row_group_size=rows // 4), _numeric_schema(names)
