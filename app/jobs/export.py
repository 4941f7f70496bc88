"""Streaming a stored synthetic table as CSV, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# A cell starting with one of these is executed as a formula by spreadsheet programs (OWASP
# "CSV injection"). Such text cells get a leading apostrophe; numbers are left as numbers.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
BATCH_ROWS = 65_536


def escape_cell(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_TRIGGERS) else value


def _is_text(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return _is_text(kind.value_type)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def _column_cells(column: pa.Array) -> list[str]:
    values = column.to_pylist()
    if _is_text(column.type):
        return ["" if v is None else escape_cell(v) for v in values]
    if pa.types.is_floating(column.type):
        return ["" if v is None else repr(float(v)) for v in values]
    return ["" if v is None else str(v) for v in values]


def stream_csv(path: Path) -> Iterator[bytes]:
    parquet = pq.ParquetFile(path)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([escape_cell(name) for name in parquet.schema_arrow.names])
    yield buffer.getvalue().encode()
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        buffer.seek(0)
        buffer.truncate()
        columns = [_column_cells(column) for column in batch.columns]
        writer.writerows(zip(*columns, strict=True))
        yield buffer.getvalue().encode()
