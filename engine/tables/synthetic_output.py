"""Writing a synthetic table of codes to a file, decoded and written one row batch at a time.

Decoding (values drawn inside bins with the job's seeded ``rng``) is post-processing of the
model's output; it costs no privacy budget. Memory is bounded per batch of
:data:`engine.tables.encoding.DECODE_BATCH_ROWS` rows beyond the codes themselves, and the file is
the same as a one-shot decode and write with the same ``rng`` (see ``TableSchema.decode_batches``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from engine.columns.spreadsheet import csv_header, csv_rows
from engine.constraints.keep import DEFAULT_ROUNDS, KeepReport, Sampler
from engine.tables.encoding import DECODE_BATCH_ROWS, TableSchema

CSV_BATCH_ROWS = 65_536
"""Rows rendered to CSV text at a time."""


@dataclass(frozen=True)
class KeptRules:
    """A table written with its schema's rules kept: the codes as written (redrawn and repaired
    rows included) and what keeping the rules did (engine.constraints.keep; public counts)."""

    codes: npt.NDArray[np.integer[Any]]
    report: KeepReport


def write_synthetic(
    schema: TableSchema,
    codes: npt.NDArray[np.integer],
    rng: np.random.Generator,
    path: Path,
    file_format: Literal["csv", "parquet"],
    batch_rows: int = DECODE_BATCH_ROWS,
    *,
    sampler: Sampler | None = None,
    rounds: int = DEFAULT_ROUNDS,
) -> KeptRules | None:
    """Decode ``codes`` with ``schema`` and write them to ``path`` (overwritten, not atomic).

    Parquet: zstd, one row group per batch, each column with its declared type
    (``TableSchema.to_arrow``). CSV: the service's download format, byte for byte
    (engine.columns.spreadsheet).

    When the schema declares rules, rows that break one are redrawn from ``sampler`` (the fitted
    model's ``sample``; None: no re-samplable model) for up to ``rounds`` rounds, then repaired
    (``TableSchema.kept_batches``); the written codes and the counts are returned. Without rules
    nothing changes and None is returned.
    """
    if schema.rules:
        keeper, kept = schema.kept_batches(codes, rng, sampler, batch_rows, rounds)
        parts: list[npt.NDArray[np.integer[Any]]] = []

        def tables() -> Iterator[pa.Table]:
            for batch_codes, table in kept:
                parts.append(batch_codes)
                yield table

        _write(schema, tables(), path, file_format)
        written = np.concatenate(parts) if parts else codes[:0].copy()
        return KeptRules(written, keeper.report)
    _write(schema, schema.decode_batches(codes, rng, batch_rows), path, file_format)
    return None


def _write(
    schema: TableSchema,
    batches: Iterator[pa.Table],
    path: Path,
    file_format: Literal["csv", "parquet"],
) -> None:
    if file_format == "parquet":
        with pq.ParquetWriter(path, schema.arrow_schema(), compression="zstd") as writer:
            for table in batches:
                writer.write_table(table)
        return
    arrow_schema = schema.arrow_schema()
    with open(path, "wb") as handle:
        handle.write(csv_header(arrow_schema.names))
        for table in batches:
            for batch in table.to_batches(max_chunksize=CSV_BATCH_ROWS):
                handle.write(csv_rows(batch, arrow_schema))
