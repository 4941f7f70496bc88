"""Local tables read against a schema and synthetic tables written, for the engine's commands
(``rhosynth synthesize``, ``sample``, ``evaluate``, ``report``: engine/cli.py) and benchmarks.

:func:`load_table` reads a CSV or Parquet file, checks every value against the declared schema
(the service's rules: missing, duplicate or extra columns and values outside the declared domain
are refused with :class:`TableError`, whose messages name columns and count rows but never quote
a value) and returns the integer codes; :func:`write_table` decodes synthetic codes and writes
them in the original value space. Nothing here is DP: it reads the owner's own file on the
owner's machine.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from engine.columns.spreadsheet import csv_header, csv_rows, unescape_cell, unescape_text
from engine.domain import CodeArray, narrowest_unsigned
from engine.tables.buffers import Slabs, pool_array
from engine.tables.csv_blocks import CsvBlocks
from engine.tables.encoding import SchemaError, SchemaSpec, TableSchema, encode_array
from engine.tables.files import atomic_path
from engine.tables.prefetch import Prefetched
from engine.tables.raw_values import raw_values, value_columns
from engine.tables.synthetic_output import CSV_BATCH_ROWS
from engine.tables.typed_csv import (
    TypedReadRefused,
    check_typed_batch,
    csv_types,
    dictionary_candidates,
    repetitive_columns,
)

PARQUET_MAGIC = b"PAR1"
CSV_BLOCK_BYTES = 4 * 1024 * 1024
MAX_HEADER_BYTES = 16 * 1024 * 1024
PARQUET_BATCH_CELLS = 4_000_000
GATHER_THREADS = 2


class TableError(ValueError):
    """A table cannot be read against its schema. The message names columns, never values."""


def load_schema(path: Path) -> TableSchema:
    """Parse a schema file (either form of engine.tables.encoding); :class:`TableError` if it is bad
    or still has columns to discover (``synthesize`` discovers them, :func:`load_spec`)."""
    try:
        return load_spec(path).complete()
    except SchemaError as error:
        raise TableError(f"schema file {str(path)!r}: {error}") from None


def load_spec(path: Path) -> SchemaSpec:
    """Parse a schema file that may leave bins or categories to DP discovery."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TableError(f"schema file {str(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError):
        raise TableError(f"schema file {str(path)!r} cannot be read as UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise TableError(
            f"schema file {str(path)!r} is not valid JSON (line {error.lineno})"
        ) from None
    try:
        return SchemaSpec.from_json(raw)
    except SchemaError as error:
        raise TableError(f"schema file {str(path)!r}: {error}") from None


def _names(names: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _check_columns(found: Sequence[str], schema: TableSchema, allow_extra: bool) -> None:
    duplicates = sorted({name for name in found if list(found).count(name) > 1})
    if duplicates:
        raise TableError(f"duplicate columns: {_names(duplicates)}")
    missing = [name for name in schema.file_names if name not in found]
    extra = [name for name in found if name not in schema.file_names]
    problems = []
    if missing:
        problems.append(f"missing columns: {_names(missing)}")
    if extra and not allow_extra:
        problems.append(f"columns not in the schema: {_names(extra)}")
    if problems:
        raise TableError("; ".join(problems))


def _read_csv_header(path: Path) -> list[str]:
    with open(path, "rb") as handle:
        line = handle.readline(MAX_HEADER_BYTES + 1)
    if not line:
        raise TableError("the file is empty")
    if len(line) > MAX_HEADER_BYTES:
        raise TableError(f"the header row is longer than {MAX_HEADER_BYTES} bytes")
    if b"\x00" in line:
        raise TableError("the file is neither Parquet nor UTF-8 CSV text")
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise TableError("the file is neither Parquet nor UTF-8 CSV text") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0] or rows[0] == [""]:
        raise TableError("the CSV header row is empty")
    return [unescape_cell(name) for name in rows[0]]


def csv_batches(
    path: Path, schema: TableSchema, allow_extra: bool, *, typed: bool = False
) -> Generator[pa.RecordBatch]:
    """The stored columns of a CSV as text, in blocks; with ``typed``, converted where that is
    exact (:mod:`engine.tables.typed_csv`), raising :class:`TypedReadRefused` when it is not."""
    header = _read_csv_header(path)
    _check_columns(header, schema, allow_extra)
    repetitive = repetitive_columns(path, header, dictionary_candidates(schema)) if typed else None
    types = csv_types(schema, typed=typed, repetitive=repetitive)
    blocks = CsvBlocks(
        open(path, "rb"),  # noqa: SIM115 (closed below)
        header,
        block_bytes=CSV_BLOCK_BYTES,
        convert_options=types.convert_options(list(schema.names)),
    )
    try:
        for batch in blocks:
            check_typed_batch(batch, types.numbers)
            # Cells escaped against spreadsheet formulas (our own CSV output) read as written.
            columns = [unescape_text(column) for column in batch.columns]
            yield pa.RecordBatch.from_arrays(columns, names=batch.schema.names)
    except pa.ArrowInvalid as error:
        if typed:
            raise TypedReadRefused("the reader refused a cell") from None
        # pyarrow's messages can quote the offending row: classify them, never forward them.
        text = str(error)
        if "UTF8" in text or "UTF-8" in text:
            raise TableError("the file is not valid UTF-8 text") from None
        if "straddling" in text or "block" in text:
            raise TableError(f"a row is longer than {CSV_BLOCK_BYTES} bytes") from None
        if "Empty CSV file" in text:
            return
        raise TableError("the CSV could not be parsed") from None
    finally:
        blocks.close()
    if bad_rows := blocks.bad_rows:
        verb = "does" if bad_rows == 1 else "do"
        raise TableError(
            f"{bad_rows} row{'s' if bad_rows != 1 else ''} {verb} not have {len(header)} fields"
        )


def parquet_batches(
    path: Path, schema: TableSchema, allow_extra: bool, *, typed: bool = False
) -> Generator[pa.RecordBatch]:
    """The stored columns of a Parquet file in batches, with their own types; with ``typed``,
    the text columns that are dictionary-encoded in every row group arrive as dictionaries
    (each distinct text encoded once per batch)."""
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError):
        raise TableError("the file is neither a readable Parquet file nor CSV") from None
    arrow_schema = parquet.schema_arrow
    _check_columns(list(arrow_schema.names), schema, allow_extra)
    for name in schema.names:
        if pa.types.is_nested(arrow_schema.field(name).type):
            raise TableError(f"column {name!r}: nested Parquet types are not supported")
    batch_rows = max(1, min(65_536, PARQUET_BATCH_CELLS // len(schema.names)))
    try:
        if typed:
            dictionaries = _dictionary_text_columns(parquet, schema)
            if dictionaries:
                parquet = pq.ParquetFile(path, read_dictionary=dictionaries)
        yield from parquet.iter_batches(batch_size=batch_rows, columns=list(schema.names))
    except (pa.ArrowException, OSError):
        raise TableError("the Parquet file could not be read") from None


def _dictionary_text_columns(parquet: pq.ParquetFile, schema: TableSchema) -> list[str]:
    """The schema's text columns whose column chunks all have a dictionary page."""
    arrow_schema = parquet.schema_arrow
    metadata = parquet.metadata
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    found = []
    for name in schema.names:
        kind = arrow_schema.field(name).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)) or name not in leaves:
            continue
        groups = range(metadata.num_row_groups)
        column = leaves[name]
        if all(metadata.row_group(g).column(column).has_dictionary_page for g in groups):
            found.append(name)
    return found


def _table_frames(path: Path, schema: TableSchema, allow_extra: bool) -> Iterator[pd.DataFrame]:
    """The file's rows in frames (:func:`_table_batches` converted to pandas)."""
    return (batch.to_pandas() for batch in _table_batches(path, schema, allow_extra))


def _table_batches(
    path: Path,
    schema: TableSchema,
    allow_extra: bool,
    *,
    typed: bool = False,
    prefetch: bool = False,
) -> Generator[pa.RecordBatch] | Prefetched[pa.RecordBatch]:
    """The file's rows in batches: Parquet when it starts with Parquet's magic bytes, else CSV
    (``typed``: see :func:`csv_batches`). ``prefetch``: a Parquet file's next batch is decoded
    on a thread while the caller encodes one (:class:`~engine.tables.prefetch.Prefetched`; CSV
    blocks are parsed on threads already); close what this returns to stop early."""
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except FileNotFoundError:
        raise TableError("the file does not exist") from None
    except IsADirectoryError:
        raise TableError("the path is a directory, not a file") from None
    except OSError:
        raise TableError("the file cannot be read") from None
    if magic == PARQUET_MAGIC:
        batches = parquet_batches(path, schema, allow_extra, typed=typed)
        return Prefetched(batches, name="parquet-batches") if prefetch else batches
    return csv_batches(path, schema, allow_extra, typed=typed)


def load_numeric_values(path: Path, schema: TableSchema) -> pa.Table:
    """The raw values of a table's numeric, date and datetime columns as float64 (numbers as
    read, unclamped; dates in days and datetimes in seconds since 1970-01-01 UTC; missing or
    unreadable cells as null: :mod:`engine.tables.raw_values`), in the same rows and order as
    :func:`load_table` encodes them (call it on a file that encoded); a cell is missing exactly
    where its code is the null code.

    ``rhosynth report`` compares the two tables on them (engine/reports/values.py) and
    correlates on them rather than on bin codes; extra columns are ignored."""
    columns = value_columns(schema)
    parts: dict[str, list[npt.NDArray[np.float64]]] = {c.name: [] for c in columns}
    with closing(_table_batches(path, schema, True)) as batches:
        for batch in batches:
            for column in columns:
                values = batch.column(column.name)
                codes = encode_array(column, values, schema.missing_values)
                parts[column.name].append(raw_values(column, values, codes))
    return pa.table(
        {
            name: pa.array(
                np.concatenate(chunks) if chunks else np.empty(0),
                type=pa.float64(),
                from_pandas=True,
            )
            for name, chunks in parts.items()
        }
    )


def load_table(
    path: Path, schema: TableSchema, *, allow_extra_columns: bool = False, narrow: bool = False
) -> CodeArray:
    """Read a CSV or Parquet file and encode it with ``schema``: int64 codes (with ``narrow``,
    the narrowest unsigned type of the schema's domain, as the worker hands them to the engine),
    schema order, column-major.

    The format is decided by the content (Parquet's magic bytes), not the file name. CSV is read
    in blocks with every column as text; Parquet in row batches with its own types. Raises
    :class:`TableError` when the file is unreadable, lacks a schema column, repeats a column, has
    a column the schema does not declare (unless ``allow_extra_columns``, which ignores them),
    has rows with the wrong number of fields, has no rows, or holds values outside the declared
    domain; the last is reported per column as a number of rows, never as values.
    """
    try:
        return _load_table(path, schema, allow_extra_columns, typed=True, narrow=narrow)
    except TypedReadRefused:
        # A cell only the text path reads exactly (engine/tables/typed_csv.py): read it all as text.
        return _load_table(path, schema, allow_extra_columns, typed=False, narrow=narrow)


def _load_table(
    path: Path, schema: TableSchema, allow_extra: bool, *, typed: bool, narrow: bool = False
) -> CodeArray:
    # Each column's codes are kept per batch in the narrowest unsigned type, and copied once
    # into the column-major result (so a column of the result is contiguous memory).
    parts: list[list[npt.NDArray[np.unsignedinteger[Any]]]] = [[] for _ in schema.columns]
    slabs = Slabs()  # the kept codes in a few large pieces (engine/tables/buffers.py)
    problems: Counter[tuple[str, int]] = Counter()
    rows = 0
    batches = _table_batches(path, schema, allow_extra, typed=typed, prefetch=True)
    with closing(batches):
        for batch in batches:
            count = batch.num_rows
            if not count:
                continue
            columns, found = schema.encode_columns(batch)
            del batch  # before the next: two batches at once with prefetching (Prefetched)
            problems.update(found)
            if not problems:
                for part, codes in zip(parts, columns, strict=True):
                    part.append(slabs.keep(codes))
                rows += count
    if problems:
        raise TableError(schema.describe_problems(problems))
    if not rows:
        raise TableError("the table has no rows")
    largest = max(schema.domain().sizes, default=1)
    dtype = narrowest_unsigned(largest) if narrow else np.dtype(np.int64)
    out = _column_major(rows, len(schema.columns), dtype)

    def gather(j: int) -> None:
        np.concatenate(parts[j], out=out[:, j])
        parts[j].clear()

    # Columns gathered on two threads (NumPy copies without the GIL): widening adult x40's
    # one-byte codes into its 218 MB int64 result took 0.027 s on one, 0.015 s on two.
    with ThreadPoolExecutor(GATHER_THREADS, thread_name_prefix="gather") as pool:
        list(pool.map(gather, range(len(parts))))
    return out


def _column_major(rows: int, columns: int, dtype: np.dtype[Any]) -> CodeArray:
    """An uninitialised (rows, columns) array of ``dtype``, column-major, in memory from Arrow's
    pool.

    The result of a large table is hundreds of MB; NumPy's allocation maps fresh pages each
    time (page faults on first write, on this kernel huge-page compaction too: 0.2 s of CPU
    for 307 MB), while Arrow's pool (mimalloc or jemalloc) keeps freed memory for the next
    allocation, as pyarrow's own readers do. The array keeps its buffer alive."""
    out: CodeArray = pool_array(rows * columns, dtype).reshape(columns, rows).T
    return out


def write_table(
    frame: pd.DataFrame,
    out: Path,
    schema: TableSchema | None = None,
    *,
    file_format: Literal["csv", "parquet"] | None = None,
) -> None:
    """Write ``frame`` as Parquet if ``out`` ends with .parquet (or ``file_format`` says so),
    else as CSV; atomically.

    With ``schema`` (a decoded synthetic table), each column keeps its declared type: Parquet
    logical types, and CSV with integers as integers, dates ISO 8601 or in the declared format,
    booleans as declared, empty cells for nulls. The CSV is the service's download, byte for
    byte (engine.columns.spreadsheet): RFC 4180, every text cell quoted, and a text cell a
    spreadsheet could run as a formula (``=…``, ``+…``, ``-…``, ``@…``) gets a leading
    apostrophe, so such cells do not read back as the values they were drawn from (Parquet keeps
    them unchanged).
    """
    table = (
        schema.to_arrow(frame)
        if schema is not None
        else pa.Table.from_pandas(frame, preserve_index=False)
    )
    parquet = file_format == "parquet" if file_format is not None else is_parquet_name(out)
    with atomic_path(out) as temporary:
        if parquet:
            pq.write_table(table, temporary, compression="zstd")
        else:
            with open(temporary, "wb") as handle:
                handle.write(csv_header(table.column_names))
                for batch in table.to_batches(max_chunksize=CSV_BATCH_ROWS):
                    handle.write(csv_rows(batch, table.schema))


def is_parquet_name(out: Path) -> bool:
    """Whether ``out`` names a Parquet file (by its suffix); anything else is written as CSV."""
    return out.suffix.lower() == ".parquet"
