"""A job on a registered dataset: its source encoded into a scratch Parquet file of codes, and
the counting engine the operator chose over it (issue 29 §2).

The worker reads the source through :func:`app.sources.reading.fetched` (fingerprint checked),
encodes it with the upload's encoder (:func:`app.datasets.ingest.ingest_table`: every row
checked against the schema again) into an Arrow IPC file, rewrites that batch by batch as Parquet
in the stored layout (:mod:`engine.counting.parquet`: one non-nullable unsigned column per
attribute), and counts on DuckDB (``memory_limit`` and ``threads`` from the settings; out of
core) or Spark (the settings' master). Nothing is kept: the scratch files are removed when the
block ends. No FastAPI here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from app.config import Settings
from app.datasets.ingest import IngestLimits, TableFiles, UploadRejected, ingest_table
from app.sources.reading import SourceChanged, SourceSpec, fetched
from app.storage import Storage
from engine.counting import CountingEngine
from engine.tables.encoding import TableSchema

logger = logging.getLogger(__name__)


def ingest_limits(settings: Settings) -> IngestLimits:
    return IngestLimits(
        max_columns=settings.max_columns,
        max_rows=settings.max_rows,
        max_cell_bytes=settings.max_cell_bytes,
    )


DUCKDB_OVERHEAD_BYTES = 256 * 2**20
"""DuckDB's address space beyond its buffer pool (``memory_limit``): its threads' stacks, the
library's code and allocations outside the buffer manager."""

_UNITS = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def duckdb_limit_bytes(memory_limit: str) -> int:
    """DuckDB's ``memory_limit`` setting in bytes: ``KB``/``MB``/``GB``/``TB`` are powers of
    1000 and ``KiB``… powers of 1024, as DuckDB reads them (the setting's pattern is checked
    in app/config.py)."""
    text = memory_limit.strip().replace(" ", "")
    binary = text.endswith("iB")
    unit = text[-3] if binary else text[-2]
    number = float(text[: -3 if binary else -2])
    scale = 1024 ** ("KMGT".index(unit) + 1) if binary else _UNITS[unit]
    return int(number * scale)


SPARK_JVM_OVERHEAD_BYTES = 3 * 2**30
"""The driver JVM's address space beyond its heap (class space and code cache reservations,
thread stacks, malloc arenas): a JVM with a 1 GiB heap failed to start under a 3 GiB address-space
limit on this machine and started under 4 GiB (docs/sources.md)."""


def _spark_heap_bytes(driver_memory: str) -> int:
    scale: int = 1024 ** ("kmgt".index(driver_memory[-1]) + 1)
    return int(driver_memory[:-1]) * scale


def engine_allowance_bytes(settings: Settings, engine: str) -> int:
    """What a job counting a registered source adds to its memory limit while it runs, fixed by
    settings (public), so that whether the job fits does not depend on the source's size:
    DuckDB's buffer pool and overhead; for Spark, the driver JVM's heap and overhead (the JVM is
    started by the first Spark job of a worker process, a child inheriting that limit)."""
    if engine == "duckdb":
        return duckdb_limit_bytes(settings.duckdb_memory_limit) + DUCKDB_OVERHEAD_BYTES
    return _spark_heap_bytes(settings.spark_driver_memory) + SPARK_JVM_OVERHEAD_BYTES


def write_codes_parquet(
    files: TableFiles, schema: TableSchema, limits: IngestLimits, target: Path, scratch: Path
) -> int:
    """Encode ``files`` (an upload's checks) and write the codes to ``target`` as Parquet in
    the stored layout; returns the rows. ``scratch`` holds the intermediate IPC file."""
    try:
        rows = ingest_table(files, schema, scratch, limits)
        with pa.OSFile(str(scratch)) as source:
            reader = pa.ipc.open_file(source)
            with pq.ParquetWriter(str(target), reader.schema) as writer:
                for i in range(reader.num_record_batches):
                    writer.write_batch(reader.get_batch(i))
        return rows
    finally:
        scratch.unlink(missing_ok=True)


@contextlib.contextmanager
def source_engine(
    settings: Settings,
    storage: Storage,
    spec: SourceSpec,
    fingerprint: dict[str, Any],
    schema: TableSchema,
    engine_name: str,
    registered_rows: int,
) -> Iterator[CountingEngine]:
    """The counting engine over the registered source's codes, for the length of the block.

    The rows are bounded by ``registered_rows`` (what registration counted), not by the
    operator's current limits: a limit lowered since would make whether the job fails depend on
    the private row count. More rows than registered is a changed source.

    Raises :class:`app.sources.reading.SourceChanged` when the source no longer matches
    ``fingerprint`` (before it is read, or for local files, after)."""
    limits = IngestLimits(
        max_columns=len(schema.columns),
        max_rows=registered_rows,
        max_cell_bytes=settings.max_cell_bytes,
    )
    codes = storage.temp_path(".parquet")
    try:
        with fetched(spec, settings, storage, expected=fingerprint, max_rows=None) as source:
            try:
                write_codes_parquet(
                    source.files,
                    schema,
                    limits,
                    codes,
                    storage.temp_path(".arrow"),
                )
            except UploadRejected:
                # Registration checked every row of what the fingerprint still matches: rows
                # refused now were changed during the read. Its message (counts per column) is
                # not passed on.
                raise SourceChanged() from None
        domain = schema.domain()
        logger.info("counting a registered source with %s", engine_name)
        if engine_name == "spark":
            from engine.counting.spark import SparkCounts

            yield SparkCounts(
                codes,
                domain,
                master=settings.spark_master,
                driver_memory=settings.spark_driver_memory,
            )
        else:
            from engine.counting.duckdb import DuckDBCounts

            engine = DuckDBCounts(
                codes,
                domain,
                memory_limit=settings.duckdb_memory_limit,
                threads=settings.duckdb_threads,
            )
            try:
                yield engine
            finally:
                engine.close()
    finally:
        codes.unlink(missing_ok=True)
