"""Streaming a stored synthetic table as CSV, safe to open in a spreadsheet."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq
from fastapi.responses import StreamingResponse

from app.storage import Storage
from engine.columns.spreadsheet import csv_header, csv_rows
from engine.constraints.keep import Sampler
from engine.tables.encoding import TableSchema
from engine.tables.synthetic_output import KeptRules, write_synthetic

BATCH_ROWS = 65_536


def stream_csv(path: Path) -> Iterator[bytes]:
    """A Parquet table as spreadsheet-safe CSV (engine.columns.spreadsheet), batch by batch."""
    parquet = pq.ParquetFile(path)
    schema = parquet.schema_arrow
    yield csv_header(schema.names)
    for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
        yield csv_rows(batch, schema)


def stream_stored_csv(storage: Storage, key: str) -> Iterator[bytes]:
    """A stored table as CSV. Parquet needs a seekable file: with an object store the table is
    first streamed to a local scratch copy, removed when the response ends or is abandoned."""
    with storage.local_copy(key) as path:
        yield from stream_csv(path)


def stream_parts_csv(storage: Storage, keys: Iterable[str]) -> Iterator[bytes]:
    """Stored Parquet parts (one schema) as one CSV: the header once, then each part's rows,
    one part's local copy at a time."""
    header = True
    for key in keys:
        with storage.local_copy(key) as path:
            parquet = pq.ParquetFile(path)
            schema = parquet.schema_arrow
            if header:
                yield csv_header(schema.names)
                header = False
            for batch in parquet.iter_batches(batch_size=BATCH_ROWS):
                yield csv_rows(batch, schema)


def parts_download(storage: Storage, keys: list[str], filename: str) -> StreamingResponse:
    """A partitioned output (app/jobs/partitioned_output.py) as one CSV download."""
    return StreamingResponse(
        stream_parts_csv(storage, keys),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}.csv"'},
    )


def table_download(storage: Storage, key: str, format: str, filename: str) -> StreamingResponse:
    """A stored synthetic table (a job's output or a derived sample) as a CSV or Parquet
    download. Streamed rather than served as a FileResponse: its Last-Modified and ETag headers
    would tell an analyst the exact second the file was written (run time depends on the
    data)."""
    disposition = {"Content-Disposition": f'attachment; filename="{filename}.{format}"'}
    if format == "parquet":
        return StreamingResponse(
            storage.iter_bytes(key),
            media_type="application/vnd.apache.parquet",
            headers=disposition,
        )
    return StreamingResponse(
        stream_stored_csv(storage, key), media_type="text/csv; charset=utf-8", headers=disposition
    )


def store_table(
    storage: Storage,
    schema: TableSchema,
    codes: npt.NDArray[np.integer[Any]],
    rng: np.random.Generator,
    key: str,
    *,
    sampler: Sampler | None = None,
) -> KeptRules | None:
    """Decode synthetic ``codes`` (``rng``: values drawn inside their bins; post-processing) and
    store them at ``key`` as Parquet, each column with its declared type (Int64, dates, booleans,
    nulls; see ``TableSchema.to_arrow``): a job's output and a derived sample alike. Decoded
    and written in row batches (engine.tables.synthetic_output), so memory beyond the codes is
    bounded per batch.

    A schema with rules keeps them (engine.constraints.keep): rows that break one are redrawn
    from ``sampler`` (the fitted model; None: repair only), then repaired; the written codes and
    the public counts are returned (None without rules). Post-processing only: no ρ."""
    temp = storage.temp_path(".parquet")
    try:
        kept = write_synthetic(schema, codes, rng, temp, "parquet", sampler=sampler)
        storage.put_file(temp, key)
    finally:
        temp.unlink(missing_ok=True)
    return kept
