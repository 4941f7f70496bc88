"""Streaming a stored synthetic table as CSV, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

# A cell starting with one of these is executed as a formula by spreadsheet programs (OWASP
# "CSV injection"). Such text cells get a leading apostrophe; numbers are left as numbers.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_TRIGGER_PATTERN = "^[=+\\-@\\t\\r]"
BATCH_ROWS = 65_536


def escape_cell(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_TRIGGERS) else value


def _escape_text(array: pa.Array) -> pa.Array:
    """Escape formula-like strings, vectorised (for a dictionary column: its few values)."""
    if pa.types.is_dictionary(array.type):
        dictionary = _escape_text(array.dictionary)
        return pa.DictionaryArray.from_arrays(array.indices, dictionary).dictionary_decode()
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array
    risky = pc.fill_null(pc.match_substring_regex(array, _TRIGGER_PATTERN), False)
    escaped = pc.binary_join_element_wise(
        pa.scalar("'", array.type), array, pa.scalar("", array.type)
    )
    return pc.if_else(risky, escaped, array)


def stream_file(path: Path, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            yield block


def stream_csv(path: Path) -> Iterator[bytes]:
    parquet = pq.ParquetFile(path)
    names = [escape_cell(name) for name in parquet.schema_arrow.names]
    header = io.StringIO()
    csv.writer(header, lineterminator="\n").writerow(names)
    yield header.getvalue().encode()
    options = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        columns = [_escape_text(column) for column in batch.columns]
        buffer = io.BytesIO()
        pacsv.write_csv(pa.RecordBatch.from_arrays(columns, names=names), buffer, options)
        yield buffer.getvalue()
