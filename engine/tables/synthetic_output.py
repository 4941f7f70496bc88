"""Writing a synthetic table of codes to a file, decoded and written one row batch at a time.

Decoding (values drawn inside bins with the job's seeded ``rng``) is post-processing of the
model's output; it costs no privacy budget. Memory is bounded per batch of
:data:`engine.tables.encoding.DECODE_BATCH_ROWS` rows beyond the codes themselves, and the file is
the same as a one-shot decode and write with the same ``rng`` (see ``TableSchema.decode_batches``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import numpy.typing as npt
import pyarrow.parquet as pq

from engine.columns.spreadsheet import csv_header, csv_rows
from engine.tables.encoding import DECODE_BATCH_ROWS, TableSchema

CSV_BATCH_ROWS = 65_536
"""Rows rendered to CSV text at a time."""


def write_synthetic(
    schema: TableSchema,
    codes: npt.NDArray[np.integer],
    rng: np.random.Generator,
    path: Path,
    file_format: Literal["csv", "parquet"],
    batch_rows: int = DECODE_BATCH_ROWS,
) -> None:
    """Decode ``codes`` with ``schema`` and write them to ``path`` (overwritten, not atomic).

    Parquet: zstd, one row group per batch, each column with its declared type
    (``TableSchema.to_arrow``). CSV: the service's download format, byte for byte
    (engine.columns.spreadsheet).
    """
    batches = schema.decode_batches(codes, rng, batch_rows)
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
