"""Turn an uploaded file (CSV or Parquet) into the stored, encoded table — or a precise refusal.

The file is read in bounded chunks (pyarrow's block reader for CSV, row batches for Parquet),
every row is checked against the declared schema, and the integer codes are written to a
Parquet file as they are produced. Error messages name columns and count rows; they never echo a
value from the file (the uploader's own data could still end up in logs and proxies).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from engine.encoding import TableSchema

PARQUET_MAGIC = b"PAR1"
CSV_BLOCK_BYTES = 4 * 1024 * 1024
PARQUET_MAX_ROW_GROUP_BYTES = 512 * 1024 * 1024
PARQUET_BATCH_CELLS = 4_000_000


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
    """The narrowest unsigned integer type that holds codes ``0..size-1``."""
    if size <= 2**8:
        return pa.uint8()
    if size <= 2**16:
        return pa.uint16()
    return pa.uint32()


def encoded_arrow_schema(schema: TableSchema) -> pa.Schema:
    return pa.schema([pa.field(c.name, code_dtype(c.size), nullable=False) for c in schema.columns])


def ingest_table(source: Path, schema: TableSchema, target: Path, limits: IngestLimits) -> int:
    """Validate ``source`` against ``schema`` and write its codes to ``target``; return the rows.

    Raises :class:`UploadRejected` (nothing is left at ``target``) when the file is not CSV or
    Parquet, is not UTF-8, lacks or adds columns, has values outside the declared domain, has no
    rows, or breaks a limit.
    """
    try:
        with open(source, "rb") as handle:
            magic = handle.read(4)
        batches = _parquet_frames if magic == PARQUET_MAGIC else _csv_frames
        return _write_encoded(batches(source, schema, limits), schema, target, limits)
    except BaseException:
        target.unlink(missing_ok=True)
        raise


def _write_encoded(
    frames: Iterator[pd.DataFrame], schema: TableSchema, target: Path, limits: IngestLimits
) -> int:
    arrow_schema = encoded_arrow_schema(schema)
    invalid: Counter[str] = Counter()
    rows = 0
    with pq.ParquetWriter(target, arrow_schema, compression="zstd") as writer:
        for frame in frames:
            rows += len(frame)
            if rows > limits.max_rows:
                raise UploadRejected(422, f"the table has more than {limits.max_rows} rows")
            chunk = schema.encode(frame)
            invalid.update(chunk.invalid_rows)
            if invalid or not len(frame):
                continue  # keep counting so the report is complete; stop writing
            arrays = [
                pa.array(chunk.codes[:, j], type=field.type) for j, field in enumerate(arrow_schema)
            ]
            writer.write_table(pa.Table.from_arrays(arrays, schema=arrow_schema))
    if invalid:
        parts = [
            f"column {name!r}: {count} row{'s' if count != 1 else ''} outside the declared domain"
            for name, count in sorted(invalid.items(), key=lambda item: schema.names.index(item[0]))
        ]
        raise UploadRejected(422, "values do not match the schema: " + "; ".join(parts))
    if rows == 0:
        raise UploadRejected(422, "the table has no rows")
    return rows


def _check_columns(found: list[str], schema: TableSchema, limits: IngestLimits) -> None:
    if len(found) > limits.max_columns:
        raise UploadRejected(422, f"the file has more than {limits.max_columns} columns")
    duplicates = sorted({name for name in found if found.count(name) > 1})
    if duplicates:
        raise UploadRejected(422, f"duplicate columns in the file: {_names(duplicates)}")
    missing = [name for name in schema.names if name not in found]
    extra = [name for name in found if name not in schema.names]
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


def _read_csv_header(source: Path, limits: IngestLimits) -> tuple[list[str], bool]:
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
        if (
            pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
            or pa.types.is_binary(column.type)
        ):
            over = pc.sum(pc.greater(pc.binary_length(column), limit)).as_py()
            if over:
                counts[name] += int(over)
    return counts


def _raise_cells(oversized: Counter[str], limit: int) -> None:
    if oversized:
        parts = [f"column {name!r}: {count} rows" for name, count in oversized.items()]
        raise UploadRejected(422, f"cells longer than {limit} bytes: " + "; ".join(parts))


def _csv_frames(source: Path, schema: TableSchema, limits: IngestLimits) -> Iterator[pd.DataFrame]:
    header, more = _read_csv_header(source, limits)
    _check_columns(header, schema, limits)
    if not more:
        return
    bad_field_counts = 0

    def count_bad_row(_row: Any) -> str:
        nonlocal bad_field_counts
        bad_field_counts += 1
        return "skip"

    try:
        reader = pacsv.open_csv(
            source,
            read_options=pacsv.ReadOptions(
                column_names=header, skip_rows=1, block_size=CSV_BLOCK_BYTES
            ),
            parse_options=pacsv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=count_bad_row
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        oversized: Counter[str] = Counter()
        for batch in _iterate(reader.read_next_batch):
            oversized.update(_oversized_cells(batch, limits.max_cell_bytes))
            if oversized:
                continue
            yield batch.to_pandas()
    except pa.ArrowInvalid as error:
        raise _csv_error(error, limits) from None
    _raise_cells(oversized, limits.max_cell_bytes)
    if bad_field_counts:
        raise UploadRejected(
            422,
            f"{bad_field_counts} row{' does' if bad_field_counts == 1 else 's do'} "
            f"not have {len(header)} fields",
        )


def _iterate(read_next: Callable[[], pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            yield read_next()
        except StopIteration:
            return


def _csv_error(error: pa.ArrowInvalid, limits: IngestLimits) -> UploadRejected:
    # pyarrow's messages can quote the offending row, so they are classified, never forwarded.
    text = str(error)
    if "UTF8" in text or "UTF-8" in text:
        return UploadRejected(422, "the file is not valid UTF-8 text")
    if "straddling" in text or "block" in text:
        return UploadRejected(422, f"a row is longer than {CSV_BLOCK_BYTES} bytes")
    return UploadRejected(422, "the CSV could not be parsed")


def _parquet_frames(
    source: Path, schema: TableSchema, limits: IngestLimits
) -> Iterator[pd.DataFrame]:
    try:
        parquet = pq.ParquetFile(source)
    except (pa.ArrowException, OSError):
        raise UploadRejected(415, "the file is neither a readable Parquet file nor CSV") from None
    arrow_schema = parquet.schema_arrow
    _check_columns(list(arrow_schema.names), schema, limits)
    for field in arrow_schema:
        if pa.types.is_nested(field.type):
            raise UploadRejected(
                422, f"column {field.name!r}: nested Parquet types are not supported"
            )
    metadata = parquet.metadata
    if metadata.num_rows > limits.max_rows:
        raise UploadRejected(422, f"the table has more than {limits.max_rows} rows")
    for group in range(metadata.num_row_groups):
        if metadata.row_group(group).total_byte_size > PARQUET_MAX_ROW_GROUP_BYTES:
            raise UploadRejected(
                422,
                f"Parquet row groups over {PARQUET_MAX_ROW_GROUP_BYTES} bytes uncompressed are "
                "not accepted; write the file with smaller row groups",
            )
    batch_rows = max(1, min(65_536, PARQUET_BATCH_CELLS // max(1, len(schema.names))))
    try:
        oversized: Counter[str] = Counter()
        for batch in parquet.iter_batches(batch_size=batch_rows, columns=list(schema.names)):
            oversized.update(_oversized_cells(batch, limits.max_cell_bytes))
            if oversized:
                continue
            yield batch.to_pandas()
    except (pa.ArrowException, OSError):
        raise UploadRejected(422, "the Parquet file could not be read") from None
    _raise_cells(oversized, limits.max_cell_bytes)


def read_encoded_table(path: Path, schema: TableSchema) -> np.ndarray:
    """Load a stored table as a 2-D int64 array with columns in schema order."""
    table = pq.read_table(path, columns=list(schema.names))
    codes = np.empty((table.num_rows, len(schema.names)), dtype=np.int64)
    for j, column in enumerate(table.columns):
        codes[:, j] = column.to_numpy()
    return codes
