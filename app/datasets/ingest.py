"""Turn an uploaded file (CSV or Parquet) into the stored, encoded table — or a precise refusal.

The file is read in bounded chunks (CSV: blocks of whole rows parsed by pyarrow on two threads,
engine/tables/csv_blocks.py; Parquet: row batches sized from checked page headers), every row is
checked against the declared schema, and the integer codes are written to an Arrow IPC file as
they are produced. The raw values of the numeric, date and datetime columns can be written beside
them, batch by batch in the same loop, to a second IPC file that only the owner tier of the quality
report reads (engine/tables/raw_values.py). Error messages name columns and count rows; they never
echo a value from the file (the uploader's own data could still end up in logs and proxies).
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections import Counter
from collections.abc import Generator, Iterable
from contextlib import ExitStack, closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.datasets.parquet_pages import ParquetRefused, ReadPlan, plan_parquet_read
from app.storage import Storage
from engine.domain import narrowest_unsigned
from engine.tables.buffers import column_buffers
from engine.tables.csv_blocks import CsvBlocks
from engine.tables.encoding import (
    TableSchema,
    compact_codes,
    count_reasons,
    encode_array,
    gather_codes,
)
from engine.tables.prefetch import Prefetched
from engine.tables.raw_values import raw_values, value_columns, values_arrow_schema
from engine.tables.typed_csv import (
    TypedReadRefused,
    check_typed_batch,
    csv_types,
    dictionary_candidates,
    repetitive_columns,
)

PARQUET_MAGIC = b"PAR1"
CSV_BLOCK_BYTES = 4 * 1024 * 1024
# Decoding a Parquet upload is bounded by the service's own accounting, from page headers it
# checked itself (app/datasets/parquet_pages.py), never by the footer's claims:
PARQUET_MAX_FOOTER_BYTES = 16 * 1024 * 1024  # the footer is parsed whole
PARQUET_STREAM_BUFFER_BYTES = 64 * 1024  # per column: pages are streamed, never pre-buffered
PARQUET_PAGES_BUDGET = 192 * 1024 * 1024  # pages held at once for one row group
# Two batches of rows: the one being encoded and the next, decoded meanwhile on another thread
# (engine/tables/prefetch.py); each batch is sized for half of this.
PARQUET_BATCH_BUDGET = 128 * 1024 * 1024
PARQUET_CELL_WORK_BYTES = 64  # per cell: pandas conversion and encoding temporaries
PARQUET_MAX_BATCH_ROWS = 131_072
# A column's dictionaries together may hold at most max(rows in the file, this) entries: a writer
# only puts values that occur in a dictionary, so more entries can only be unused ones.
PARQUET_DICTIONARY_FLOOR = 65_536
DICTIONARY_SLICE = 65_536  # dictionary entries converted to Python objects at once


class UploadRejected(Exception):
    """The upload cannot be stored. ``message`` is safe to return to the uploader."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(frozen=True)
class IngestLimits:
    max_columns: int
    max_rows: int
    max_cell_bytes: int


def code_dtype(size: int) -> pa.DataType:
    """The narrowest unsigned integer type that holds codes ``0..size-1``, in Arrow."""
    return pa.from_numpy_dtype(narrowest_unsigned(size))


def encoded_arrow_schema(schema: TableSchema) -> pa.Schema:
    return pa.schema([pa.field(c.name, code_dtype(c.size), nullable=False) for c in schema.columns])


def ingest_table(
    source: TableFiles,
    schema: TableSchema,
    target: Path,
    limits: IngestLimits,
    *,
    values_target: Path | None = None,
    keep: np.ndarray | None = None,
) -> int:
    """Validate ``source`` against ``schema`` and write its codes to ``target``; return the rows.

    With ``keep`` (one flag per row of the file, from the privacy unit's truncation,
    app/datasets/units.py), every row is still checked but only the kept rows are written, and
    their number is returned.

    With ``values_target``, the raw values of the schema's numeric, date and datetime columns
    are written there too (:mod:`engine.tables.raw_values`: float64, row-aligned with the codes, in
    the same batches; nothing is written when the schema has no such column). They are for the owner
    tier of the quality report only (docs/privacy.md).

    Raises :class:`UploadRejected` (nothing is left at ``target`` or ``values_target``) when
    the file is not CSV or Parquet, is not UTF-8, lacks or adds columns, has values the schema
    refuses (missing in a column that is not nullable, outside the bounds, unparseable,
    undeclared; counted per column and reason, never quoted), has no rows, or breaks a limit.
    Ignored columns are never read.
    """
    try:
        try:
            with closing(
                read_batches(source, schema, limits, typed=True, prefetch=True)
            ) as batches:
                return _write_encoded(batches, schema, target, limits, values_target, keep)
        except TypedReadRefused:
            # A cell only the text path reads exactly (engine/tables/typed_csv.py): read it as text.
            with closing(read_batches(source, schema, limits, prefetch=True)) as batches:
                return _write_encoded(batches, schema, target, limits, values_target, keep)
    except BaseException:
        target.unlink(missing_ok=True)
        if values_target is not None:
            values_target.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class PartitionFile:
    """A file of a hive-partitioned source and the columns its directories name
    (``city=Lyon/part-0.parquet``: ``(("city", "Lyon"),)``; None: a missing value)."""

    path: Path
    values: tuple[tuple[str, str | None], ...]


TableFiles = Path | tuple[Path | PartitionFile, ...]
"""An upload (one file), or the files of a registered source read one after the other as one
table (app/sources/reading.py), each checked as an upload of its own would be."""


def read_batches(
    source: TableFiles,
    schema: TableSchema,
    limits: IngestLimits,
    *,
    typed: bool = False,
    prefetch: bool = False,
) -> Generator[pa.RecordBatch] | Prefetched[pa.RecordBatch]:
    """The file's stored columns (``schema.names``) as record batches, read within the bounds
    of the upload (CSV: text in 4 MiB blocks; Parquet: its types, page-checked). Parquet text
    columns with short dictionaries arrive as dictionary arrays. With ``typed``, CSV cells are
    converted by the reader where that is exact (:mod:`engine.tables.typed_csv`); the batches raise
    :class:`~engine.tables.typed_csv.TypedReadRefused` where it is not. With ``prefetch``, a Parquet
    file's next batch is decoded on a thread while the caller encodes one
    (:class:`~engine.tables.prefetch.Prefetched`; the batches are sized for two at once); CSV blocks
    are parsed on threads already (:class:`~engine.tables.csv_blocks.CsvBlocks`). Close what this
    returns (``contextlib.closing``) to stop the reading early.

    A tuple of files is read file by file in its order, each within the same bounds (the row
    limit applies to the whole table: callers count rows over every batch)."""
    if isinstance(source, tuple):
        if len(source) == 1 and isinstance(source[0], Path):
            source = source[0]
        else:
            return _files_batches(source, schema, limits, typed=typed, prefetch=prefetch)
    with open(source, "rb") as handle:
        magic = handle.read(4)
    if magic == PARQUET_MAGIC:
        batches = _parquet_batches(source, schema, limits)
        return Prefetched(batches, name="parquet-batches") if prefetch else batches
    return _csv_batches(source, schema, limits, typed=typed)


def _files_batches(
    files: tuple[Path | PartitionFile, ...],
    schema: TableSchema,
    limits: IngestLimits,
    *,
    typed: bool,
    prefetch: bool,
) -> Generator[pa.RecordBatch]:
    if not files:
        raise UploadRejected(422, "the source holds no file to read")
    for item in files:
        if isinstance(item, Path):
            with closing(read_batches(item, schema, limits, typed=typed, prefetch=prefetch)) as one:
                yield from one
            continue
        # Columns named by the file's directories (hive partitions) that the schema stores: the
        # file is read without them, and each batch gets them as text, as a CSV cell would be.
        given = {k: v for k, v in item.values if k in schema.names}
        if not given:
            with closing(
                read_batches(item.path, schema, limits, typed=typed, prefetch=prefetch)
            ) as one:
                yield from one
            continue
        for value in given.values():
            if value is not None and len(value.encode()) > limits.max_cell_bytes:
                raise UploadRejected(
                    422, f"a partition value is longer than {limits.max_cell_bytes} bytes"
                )
        kept = tuple(c for c in schema.columns if c.name not in given)
        if not kept:
            raise UploadRejected(422, "every column would come from the directory names")
        reduced = dataclasses.replace(
            schema,
            columns=kept,
            discovered=tuple(n for n in schema.discovered if n not in given),
            rules=(),
        )
        with closing(
            read_batches(item.path, reduced, limits, typed=typed, prefetch=prefetch)
        ) as one:
            for batch in one:
                yield pa.RecordBatch.from_arrays(
                    [
                        pa.array([given[name]] * batch.num_rows, type=pa.string())
                        if name in given
                        else batch.column(name)
                        for name in schema.names
                    ],
                    names=list(schema.names),
                )


def _write_encoded(
    batches: Iterable[pa.RecordBatch],
    schema: TableSchema,
    target: Path,
    limits: IngestLimits,
    values_target: Path | None = None,
    keep: np.ndarray | None = None,
) -> int:
    arrow_schema = encoded_arrow_schema(schema)
    kept_rows = 0
    encoder = _BatchEncoder(schema)
    problems: Counter[tuple[str, int]] = Counter()
    rows = 0
    kept = value_columns(schema) if values_target is not None else ()
    positions = [schema.names.index(column.name) for column in kept]
    # The writer does not close a file it opened from a path (only when it is collected): the
    # sink is ours, so a refused upload's file is closed before ingest_table removes it.
    with ExitStack() as files:
        sink = files.enter_context(pa.OSFile(str(target), "wb"))
        writer = files.enter_context(
            pa.ipc.new_file(sink, arrow_schema, options=STORED_IPC_OPTIONS)
        )
        pending = _PendingCodes(arrow_schema, writer)
        pending_values = None
        if kept and values_target is not None:
            values_schema = values_arrow_schema(schema)
            values_sink = files.enter_context(pa.OSFile(str(values_target), "wb"))
            values_writer = files.enter_context(
                pa.ipc.new_file(values_sink, values_schema, options=STORED_IPC_OPTIONS)
            )
            pending_values = _PendingCodes(values_schema, values_writer, nan_is_null=True)
        for batch in batches:
            batch_rows = batch.num_rows
            rows += batch_rows
            if rows > limits.max_rows:
                raise UploadRejected(422, f"the table has more than {limits.max_rows} rows")
            codes = encoder.encode(batch)
            for name, column_codes in zip(schema.names, codes, strict=True):
                for reason, count in count_reasons(column_codes).items():
                    problems[(name, reason)] += count
            values = None
            if pending_values is not None and not problems and batch_rows:
                # The raw values of the same cells, missing exactly where the code is the null
                # code (engine/tables/raw_values.py): a float64 per value cell of this batch.
                values = [
                    raw_values(column, batch.column(column.name), codes[j])
                    for column, j in zip(kept, positions, strict=True)
                ]
            # Let go of the batch before asking for the next: with a prefetching reader the
            # next is decoded meanwhile, and two batches at once is what the reader budgets.
            del batch
            if problems or not batch_rows:
                continue  # keep counting so the report is complete; stop writing
            if keep is not None:
                mask = keep[rows - batch_rows : rows]
                if not mask.all():
                    codes = [column_codes[mask] for column_codes in codes]
                    if values is not None:
                        values = [column_values[mask] for column_values in values]
                if not mask.any():
                    continue
            kept_rows += len(codes[0])
            pending.add(codes)
            if pending_values is not None and values is not None:
                pending_values.add(values)
                del values
        if not problems:
            pending.flush()
            if pending_values is not None:
                pending_values.flush()
    if problems:
        raise UploadRejected(422, schema.describe_problems(problems))
    if rows == 0:
        raise UploadRejected(422, "the table has no rows")
    if keep is not None and rows != len(keep):
        # The truncation pass read another number of rows: never store a misaligned choice.
        raise RuntimeError("the truncation pass and the encoding read different row counts")
    if kept_rows == 0:
        raise UploadRejected(422, "no row has a privacy unit: every row was dropped")
    return kept_rows


# The stored table is an Arrow IPC file (the Feather V2 format) of codes in the narrowest
# unsigned type, each record batch's buffers compressed with zstd (level 1). Parquet has no 8-bit
# physical type: it wrote each one-byte code as a 4-byte INT32 and compressed four times the
# bytes (adult x40 with its rows shuffled: 0.30 s to write and 0.08 s to read 9.1 MB, against
# 0.07 s and 0.02 s for 8.9 MB here; docs/benchmarks.md, "Loading 2 M rows"). Tables stored as
# Parquet before still read (read_encoded_table tells the two apart by their magic bytes).
STORED_IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=1))
ARROW_MAGIC = b"ARROW1"
WRITE_BUFFER_BYTES = 16 * 1024 * 1024
WRITE_MAX_ROWS = 1_048_576


class _PendingCodes:
    """Valid codes gathered over batches into one buffer per column (the stored types) and
    written as one record batch once the buffers hold :data:`WRITE_BUFFER_BYTES` or
    :data:`WRITE_MAX_ROWS`: an upload's batch is often a few ten thousand rows, and each stored
    batch is compressed buffer by buffer (small buffers compress worse and cost a frame each).

    The buffers are allocated once, from Arrow's pool (:mod:`engine.tables.buffers`), and written
    again after each flush (the writer has compressed and written a batch when ``write_batch``
    returns): keeping each batch's codes and concatenating them at a flush touched fresh
    memory twice per code, and the page faults were most of the encoding's time (13,000 on
    adult x40, about 0.1 s).
    """

    def __init__(
        self,
        arrow_schema: pa.Schema,
        writer: pa.ipc.RecordBatchFileWriter,
        *,
        nan_is_null: bool = False,
    ) -> None:
        self._schema = arrow_schema
        self._writer = writer
        self._nan_is_null = nan_is_null  # float buffers (raw values): a NaN is written as null
        row_bytes = sum(field.type.bit_width // 8 for field in arrow_schema)
        self._capacity = max(1, min(WRITE_MAX_ROWS, WRITE_BUFFER_BYTES // max(1, row_bytes)))
        self._buffers: list[np.ndarray] = []  # allocated with the first codes
        self._rows = 0

    def add(self, codes: list[np.ndarray]) -> None:
        """Copy one batch's codes (valid: ``0..size-1`` in any integer type) in."""
        if not self._buffers:
            self._buffers = column_buffers(
                [np.dtype(field.type.to_pandas_dtype()) for field in self._schema], self._capacity
            )
        rows, start = len(codes[0]), 0
        while start < rows:
            count = min(rows - start, self._capacity - self._rows)
            for buffer, column_codes in zip(self._buffers, codes, strict=True):
                buffer[self._rows : self._rows + count] = column_codes[start : start + count]
            self._rows += count
            start += count
            if self._rows == self._capacity:
                self.flush()

    def flush(self) -> None:
        if not self._rows:
            return
        # Arrow wraps each buffer's filled part without a copy.
        arrays = [
            pa.array(buffer[: self._rows], type=field.type, from_pandas=self._nan_is_null)
            for buffer, field in zip(self._buffers, self._schema, strict=True)
        ]
        self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self._schema))
        self._rows = 0


class _BatchEncoder:
    """Encodes record batches column by column; each Parquet dictionary is encoded once.

    A dictionary-encoded column arrives in every batch of a row group with the same dictionary,
    which can hold millions of entries (the review's 11.5 MB file: 4,000,000 distinct values in
    one dictionary). Converting it to Python objects for every batch cost 142 s of CPU and
    1.3 GiB; here its codes are computed once, in slices of :data:`DICTIONARY_SLICE` entries,
    kept as ``int32`` (at most the dictionary's own size), and gathered by each batch's indices
    in Arrow; each later batch's dictionary is compared with the cached one in Arrow. A null
    index (a missing value) gets the column's code for missing values.
    """

    def __init__(self, schema: TableSchema) -> None:
        self._schema = schema
        self._cached: dict[int, tuple[pa.Array, np.ndarray]] = {}

    def encode(self, batch: pa.RecordBatch) -> list[np.ndarray]:
        out = []
        for j, column in enumerate(self._schema.columns):
            values = batch.column(column.name)
            if isinstance(values, pa.DictionaryArray):
                distinct = self._dictionary_codes(j, values.dictionary)
                out.append(gather_codes(distinct, values.indices, column.absent_code))
            else:
                out.append(encode_array(column, values, self._schema.missing_values))
        return out

    def _dictionary_codes(self, j: int, dictionary: pa.Array) -> np.ndarray:
        cached = self._cached.get(j)
        if cached is not None and _same_array(cached[0], dictionary):
            return cached[1]
        column = self._schema.columns[j]
        codes = np.empty(len(dictionary), dtype=np.int32)
        for start in range(0, len(dictionary), DICTIONARY_SLICE):
            part = dictionary.slice(start, DICTIONARY_SLICE)
            codes[start : start + len(part)] = encode_array(
                column, part, self._schema.missing_values
            )
        if not codes.size or codes.min() >= 0:
            codes = compact_codes(codes, column.size)  # each gathered row: a byte, usually
        self._cached[j] = (dictionary, codes)
        return codes


def _same_array(held: pa.Array, other: pa.Array) -> bool:
    """Whether ``other`` holds the same values as ``held``.

    pyarrow hands every batch of a row group its own copy of the dictionary, so the comparison
    is by content (Arrow's own comparison, at memory speed); a view of the same memory, which
    ``held`` keeps alive, is recognised without reading it.
    """
    if held.type != other.type or len(held) != len(other):
        return False
    if held.offset == other.offset and [b.address if b else 0 for b in held.buffers()] == [
        b.address if b else 0 for b in other.buffers()
    ]:
        return True
    return bool(held.equals(other))


def _check_columns(found: list[str], schema: TableSchema, limits: IngestLimits) -> None:
    if len(found) > limits.max_columns:
        raise UploadRejected(422, f"the file has more than {limits.max_columns} columns")
    duplicates = sorted({name for name in found if found.count(name) > 1})
    if duplicates:
        raise UploadRejected(422, f"duplicate columns in the file: {_names(duplicates)}")
    expected = schema.file_names  # the stored columns and the ignored ones
    missing = [name for name in expected if name not in found]
    extra = [name for name in found if name not in expected]
    problems = []
    if missing:
        problems.append(f"missing columns: {_names(missing)}")
    if extra:
        problems.append(f"columns not in the schema: {_names(extra)}")
    if problems:
        raise UploadRejected(422, "; ".join(problems))


def _names(names: list[str], limit: int = 20) -> str:
    shown = ", ".join(repr(name) for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def read_csv_header(source: Path, limits: IngestLimits) -> tuple[list[str], bool]:
    """The header row's field names, and whether the file has anything after it."""
    max_header = (limits.max_columns + 1) * (limits.max_cell_bytes + 3)
    with open(source, "rb") as handle:
        line = handle.readline(max_header + 1)
        more = bool(handle.read(1))
    if not line:
        raise UploadRejected(422, "the file is empty")
    if len(line) > max_header and not line.endswith(b"\n"):
        raise UploadRejected(422, "the header row is longer than the limits allow")
    if b"\x00" in line:
        raise UploadRejected(415, "the file is neither Parquet nor UTF-8 CSV text")
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UploadRejected(415, "the file is neither Parquet nor UTF-8 CSV text") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0] or rows[0] == [""]:
        raise UploadRejected(422, "the CSV header row is empty")
    return rows[0], more


def _oversized_cells(batch: pa.RecordBatch, limit: int) -> Counter[str]:
    counts: Counter[str] = Counter()
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        if pa.types.is_dictionary(column.type) and _is_text(column.type.value_type):
            # Check each distinct value once, then count the rows that use an oversized one.
            long_values = pc.greater(pc.binary_length(column.dictionary), limit)
            if not pc.any(long_values).as_py():
                continue
            over = pc.sum(pc.take(long_values, column.indices)).as_py()
        elif _is_text(column.type):
            over = pc.sum(pc.greater(pc.binary_length(column), limit)).as_py()
        else:
            continue
        if over:
            counts[name] += int(over)
    return counts


def _raise_cells(oversized: Counter[str], limit: int) -> None:
    if oversized:
        parts = [f"column {name!r}: {count} rows" for name, count in oversized.items()]
        raise UploadRejected(422, f"cells longer than {limit} bytes: " + "; ".join(parts))


def _csv_batches(
    source: Path, schema: TableSchema, limits: IngestLimits, *, typed: bool = False
) -> Generator[pa.RecordBatch]:
    header, more = read_csv_header(source, limits)
    _check_columns(header, schema, limits)
    if not more:
        return
    repetitive = (
        repetitive_columns(source, header, dictionary_candidates(schema)) if typed else None
    )
    types = csv_types(schema, typed=typed, repetitive=repetitive)
    # Cells converted to numbers have no length left to check: their bytes are checked as read.
    runs = SeparatorRuns(source, limits.max_cell_bytes) if types.numbers else None
    blocks = CsvBlocks(
        open(source, "rb") if runs is None else runs,  # noqa: SIM115 (closed below)
        header,
        block_bytes=CSV_BLOCK_BYTES,
        convert_options=types.convert_options(list(schema.names)),
    )
    try:
        oversized: Counter[str] = Counter()
        for batch in blocks:
            if runs is not None and runs.too_long:
                raise TypedReadRefused("a run of bytes longer than a cell may be")
            check_typed_batch(batch, types.numbers)
            oversized.update(_oversized_cells(batch, limits.max_cell_bytes))
            if oversized:
                continue
            yield batch
        if runs is not None and runs.too_long:  # read with the last block
            raise TypedReadRefused("a run of bytes longer than a cell may be")
    except pa.ArrowInvalid as error:
        if typed:
            raise TypedReadRefused("the reader refused a cell") from None
        raise _csv_error(error, limits) from None
    finally:
        blocks.close()
    _raise_cells(oversized, limits.max_cell_bytes)
    if blocks.bad_rows:
        raise UploadRejected(
            422,
            f"{blocks.bad_rows} row{' does' if blocks.bad_rows == 1 else 's do'} "
            f"not have {len(header)} fields",
        )


class SeparatorRuns:
    """A CSV file read through this object is checked for runs of bytes with no comma and no
    line break: ``too_long`` once a run is longer than ``limit`` bytes.

    A cell that pyarrow's reader converts to a number holds neither (the conversion refuses
    them), so when no run is longer than ``limit`` no such cell is either, quotes included:
    the cell-length limit holds for the cells that reach the encoder as numbers, not as text.
    The check is exact and costs a few passes over each block's bytes: a separator in every
    aligned window of ``(limit + 2) // 2`` bytes bounds every run by ``limit``; a block that
    fails that test is measured exactly.
    """

    def __init__(self, path: Path, limit: int) -> None:
        self._file = open(path, "rb")  # noqa: SIM115 (closed by close(), after the reader)
        self.limit = limit
        self.too_long = False
        self._run = 0  # bytes since the last separator
        self._window = max(1, (limit + 2) // 2)
        self._scratch = np.empty(0, dtype=bool), np.empty(0, dtype=bool)

    @property
    def closed(self) -> bool:
        return self._file.closed

    def read(self, size: int = -1) -> bytes:
        chunk = self._file.read(size)
        if chunk and not self.too_long:
            self._scan(np.frombuffer(chunk, dtype=np.uint8))
        return chunk

    def close(self) -> None:
        self._file.close()

    def _scan(self, data: np.ndarray) -> None:
        n = len(data)
        if len(self._scratch[0]) < n:
            self._scratch = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        separator, newline = self._scratch[0][:n], self._scratch[1][:n]
        window = self._window
        # Commas first: in a table of several columns every window holds one, and the line
        # feeds are then needed only near the block's ends (half the passes over the block).
        np.equal(data, ord(","), out=separator)
        if self._every_window(separator):
            inner = 0
            head = data[:window]  # holds a comma
            first = int(np.argmax((head == ord(",")) | (head == ord("\n"))))
            start = max(0, n - 2 * window)  # the last window, aligned or not, holds a comma
            tail = data[start:]
            last = start + int(np.flatnonzero((tail == ord(",")) | (tail == ord("\n")))[-1])
        else:
            np.equal(data, ord("\n"), out=newline)
            np.logical_or(separator, newline, out=separator)
            if self._every_window(separator):
                # No run inside the block exceeds 2 * window - 2.
                inner = 0
                first = int(separator.argmax())
                start = (-(-n // window) - 1) * window
                last = start + int(np.flatnonzero(separator[start:])[-1])
            else:
                positions = np.flatnonzero(separator)
                if not positions.size:
                    self._run += n
                    self.too_long = self._run > self.limit
                    return
                inner = int(np.diff(positions).max()) - 1 if positions.size > 1 else 0
                first, last = int(positions[0]), int(positions[-1])
        self._run, head_run = n - 1 - last, self._run + first
        self.too_long = max(head_run, inner, self._run) > self.limit

    def _every_window(self, separator: np.ndarray) -> bool:
        """Whether every aligned window of ``self._window`` bytes (the last one may be
        shorter) holds a separator."""
        window, n = self._window, len(separator)
        whole = n // window
        if whole and not separator[: whole * window].reshape(whole, window).any(axis=1).all():
            return False
        return whole * window == n or bool(separator[whole * window :].any())


def _csv_error(error: pa.ArrowInvalid, limits: IngestLimits) -> UploadRejected:
    # pyarrow's messages can quote the offending row, so they are classified, never forwarded.
    text = str(error)
    if "UTF8" in text or "UTF-8" in text:
        return UploadRejected(422, "the file is not valid UTF-8 text")
    if "straddling" in text or "block" in text:
        return UploadRejected(422, f"a row is longer than {CSV_BLOCK_BYTES} bytes")
    return UploadRejected(422, "the CSV could not be parsed")


def _parquet_batches(
    source: Path, schema: TableSchema, limits: IngestLimits
) -> Generator[pa.RecordBatch]:
    check_parquet_footer(source)
    options: dict[str, Any] = {
        "pre_buffer": False,
        "buffer_size": PARQUET_STREAM_BUFFER_BYTES,
        "thrift_string_size_limit": PARQUET_MAX_FOOTER_BYTES,
        "thrift_container_size_limit": PARQUET_MAX_FOOTER_BYTES,
    }
    try:
        parquet = pq.ParquetFile(source, **options)
    except (pa.ArrowException, OSError):
        raise UploadRejected(415, "the file is neither a readable Parquet file nor CSV") from None
    arrow_schema = parquet.schema_arrow
    _check_columns(list(arrow_schema.names), schema, limits)
    text_columns = []
    for field in (arrow_schema.field(name) for name in schema.names):
        if pa.types.is_nested(field.type):
            raise UploadRejected(
                422, f"column {field.name!r}: nested Parquet types are not supported"
            )
        if pa.types.is_fixed_size_binary(field.type) and field.type.byte_width > (
            limits.max_cell_bytes
        ):
            raise UploadRejected(
                422, f"column {field.name!r}: cells longer than {limits.max_cell_bytes} bytes"
            )
        if _is_text(field.type):
            text_columns.append(field.name)
    metadata = parquet.metadata
    if metadata.num_rows > limits.max_rows:
        raise UploadRejected(422, f"the table has more than {limits.max_rows} rows")
    leaves = parquet_leaves(arrow_schema, metadata)
    if leaves is None or not set(schema.names) <= set(leaves):
        raise UploadRejected(422, "the Parquet file could not be read")
    try:
        plan = upload_read_plan(
            source,
            metadata,
            [leaves[name] for name in schema.names],
            [leaves[name] for name in text_columns],
            limits.max_cell_bytes,
        )
        # Text columns with short dictionaries are read as dictionaries: such a column is never
        # expanded into one copy of its value per row (the plan sizes batches for the others).
        dictionary_names = [n for n in schema.names if leaves[n] in plan.dictionary_columns]
        parquet = pq.ParquetFile(source, read_dictionary=dictionary_names, **options)
    except ParquetRefused as refused:
        raise UploadRejected(422, refused.message) from None
    except (pa.ArrowException, OSError):
        raise UploadRejected(422, "the Parquet file could not be read") from None
    try:
        oversized: Counter[str] = Counter()
        for group in plan.row_groups:
            batches = parquet.iter_batches(
                batch_size=group.batch_rows, row_groups=[group.index], columns=list(schema.names)
            )
            for batch in batches:
                oversized.update(_oversized_cells(batch, limits.max_cell_bytes))
                if oversized:
                    continue
                yield batch
    except (pa.ArrowException, OSError):
        raise UploadRejected(422, "the Parquet file could not be read") from None
    _raise_cells(oversized, limits.max_cell_bytes)


def parquet_leaves(arrow_schema: pa.Schema, metadata: Any) -> dict[str, int] | None:
    """The Parquet leaf column (its index in the footer, what the page check reads) of each
    top-level field that is not nested; None when the footer's leaves do not match.

    A nested field has one leaf per primitive inside it, so an Arrow field's index is its
    leaf's only while no nested field comes before it (an ignored column may be nested)."""
    found: dict[str, int] = {}
    leaf = 0
    for field in arrow_schema:
        if pa.types.is_nested(field.type):
            leaf += _leaf_count(field.type)
            continue
        found[field.name] = leaf
        leaf += 1
    if leaf != metadata.num_columns:
        return None
    if any(metadata.schema.column(i).path != name for name, i in found.items()):
        return None
    return found


def _leaf_count(kind: pa.DataType) -> int:
    if pa.types.is_struct(kind):
        return sum(_leaf_count(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaf_count(kind.value_type)
    return 1


def upload_read_plan(
    source: Path, metadata: Any, columns: list[int], text_columns: list[int], max_cell_bytes: int
) -> ReadPlan:
    """The page-checked plan for reading ``columns`` of an uploaded Parquet file within the
    upload's budgets (:func:`app.datasets.parquet_pages.plan_parquet_read`); raises
    :class:`~app.datasets.parquet_pages.ParquetRefused`."""
    return plan_parquet_read(
        source,
        metadata,
        columns,
        text_columns=text_columns,
        max_cell_bytes=max_cell_bytes,
        stream_buffer_bytes=PARQUET_STREAM_BUFFER_BYTES,
        pages_budget=PARQUET_PAGES_BUDGET,
        batch_budget=PARQUET_BATCH_BUDGET // 2,  # two batches at once (read_batches)
        cell_work_bytes=PARQUET_CELL_WORK_BYTES,
        max_batch_rows=PARQUET_MAX_BATCH_ROWS,
        max_dictionary_entries=max(metadata.num_rows, PARQUET_DICTIONARY_FLOOR),
    )


def check_parquet_footer(source: Path) -> None:
    """Refuse a footer over its cap before pyarrow parses it (it is read and parsed whole)."""
    with open(source, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        if size < 12:
            raise UploadRejected(415, "the file is neither a readable Parquet file nor CSV")
        handle.seek(size - 8)
        tail = handle.read(8)
    footer = int.from_bytes(tail[:4], "little")
    if tail[4:] != PARQUET_MAGIC:
        raise UploadRejected(415, "the file is neither a readable Parquet file nor CSV")
    if footer > PARQUET_MAX_FOOTER_BYTES or footer > size - 12:
        raise UploadRejected(
            422, f"Parquet footers over {PARQUET_MAX_FOOTER_BYTES // (1024 * 1024)} MiB are refused"
        )


def _is_text(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
    )


def read_stored_table(
    storage: Storage, key: str, schema: TableSchema, *, narrow: bool = False
) -> np.ndarray:
    """:func:`read_encoded_table` of the table stored at ``key`` (from an object store: via a
    local copy, removed after)."""
    with storage.local_copy(key) as path:
        return read_encoded_table(path, schema, narrow=narrow)


def read_encoded_table(path: Path, schema: TableSchema, *, narrow: bool = False) -> np.ndarray:
    """Load a stored table as a 2-D array with columns in schema order (column-major: each
    column is copied once into contiguous memory): int64, or with ``narrow`` the smallest
    unsigned type that holds every column's codes (a byte per cell for most tables instead of
    eight; every mechanism gives the same release for it, tests/engine/test_narrow_codes.py).

    The stored file is an Arrow IPC file (:data:`STORED_IPC_OPTIONS`), or a Parquet file from
    before it: the two are told apart by their magic bytes."""
    with open(path, "rb") as handle:
        magic = handle.read(len(ARROW_MAGIC))
    if magic == ARROW_MAGIC:
        with pa.OSFile(str(path)) as source:
            table = pa.ipc.open_file(source).read_all().select(list(schema.names))
    else:
        table = pq.read_table(path, columns=list(schema.names))
    largest = max((column.size for column in schema.columns), default=1)
    dtype = narrowest_unsigned(largest) if narrow else np.dtype(np.int64)
    codes = np.empty((table.num_rows, len(schema.names)), dtype=dtype, order="F")
    for j, column in enumerate(table.columns):
        codes[:, j] = column.to_numpy()
    return codes
