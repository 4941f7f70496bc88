"""Streaming a stored synthetic table as CSV, safe to open in a spreadsheet."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from fastapi.responses import StreamingResponse

from app.storage import Storage
from engine.columns.output import text_batch
from engine.encoding import TableSchema

# OWASP "CSV Injection": a spreadsheet runs a cell as a formula when it starts with = + - @, a
# tab or a carriage return; some also after leading whitespace, and some read the fullwidth
# forms (U+FF1D, U+FF0B, U+FF0D, U+FF20) as the ASCII ones. Such text cells get a leading
# apostrophe. Every text cell is written quoted with embedded quotes doubled (pyarrow's CSV
# writer does this for strings); numeric columns are typed and stay numbers, unescaped.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
CONTROL_TRIGGERS = ("\t", "\r")
# Whitespace that may come before a trigger: ASCII and the Unicode spaces (NBSP, ideographic).
LEADING_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _re2_class(chars: str) -> str:
    return "".join(f"\\x{{{ord(c):04X}}}" for c in chars)


# One rule, two engines: Python's re for single cells, RE2 (pyarrow) for columns.
_TRIGGER_RE = re.compile(
    f"^(?:[{re.escape(LEADING_SPACE)}]*[{re.escape(''.join(FORMULA_TRIGGERS))}]"
    f"|[{re.escape(''.join(CONTROL_TRIGGERS))}])"
)
_TRIGGER_PATTERN = (
    f"^(?:[{_re2_class(LEADING_SPACE)}]*[{_re2_class(''.join(FORMULA_TRIGGERS))}]"
    f"|[{_re2_class(''.join(CONTROL_TRIGGERS))}])"
)
BATCH_ROWS = 65_536


def escape_cell(value: str) -> str:
    return "'" + value if _TRIGGER_RE.match(value) else value


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
    csv.writer(header, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow(names)
    yield header.getvalue().encode()
    options = pacsv.WriteOptions(include_header=False, quoting_style="needed")
    schema = parquet.schema_arrow
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        # Declared date formats and boolean spellings first: their text is escaped too.
        columns = [_escape_text(column) for column in text_batch(batch, schema)]
        buffer = io.BytesIO()
        pacsv.write_csv(pa.RecordBatch.from_arrays(columns, names=names), buffer, options)
        yield buffer.getvalue()


def table_download(path: Path, format: str, filename: str) -> StreamingResponse:
    """A stored synthetic table (a job's output or a derived sample) as a CSV or Parquet
    download. Streamed rather than served as a FileResponse: its Last-Modified and ETag headers
    would tell an analyst the exact second the file was written (run time depends on the
    data)."""
    disposition = {"Content-Disposition": f'attachment; filename="{filename}.{format}"'}
    if format == "parquet":
        return StreamingResponse(
            stream_file(path), media_type="application/vnd.apache.parquet", headers=disposition
        )
    return StreamingResponse(
        stream_csv(path), media_type="text/csv; charset=utf-8", headers=disposition
    )


def store_table(
    storage: Storage,
    schema: TableSchema,
    codes: npt.NDArray[np.int64],
    rng: np.random.Generator,
    key: str,
) -> None:
    """Decode synthetic ``codes`` (``rng``: values drawn inside their bins; post-processing) and
    store them at ``key`` as Parquet, each column with its declared type (Int64, dates, booleans,
    nulls; see ``TableSchema.to_arrow``): a job's output and a derived sample alike."""
    frame = schema.decode(codes, rng)
    temp = storage.temp_path(".parquet")
    try:
        pq.write_table(schema.to_arrow(frame), temp, compression="zstd")
        storage.put(temp, key)
    finally:
        temp.unlink(missing_ok=True)
