"""Large releases stored as a partitioned Parquet dataset (issue 29 §2).

A job that asks for at least ``RHOSYNTH_PARTITIONED_OUTPUT_ROWS`` rows from a method with a
re-samplable model is not sampled in memory: the mechanism runs with ``max_rows=0`` (it fits its
model and draws no rows) and :func:`store_partitioned` draws the rows in chunks of
``RHOSYNTH_OUTPUT_CHUNK_ROWS`` (``RHOSYNTH_OUTPUT_WORKERS`` at once) with
:func:`engine.tables.partitioned.write_partitioned`, uploading each part as it is written and
deleting its local file, then a manifest. Memory and scratch disk are bounded by a few chunks
whatever the row count. The decision uses public facts only (the rows asked for, the method).

Layout under the attempt's folder (``outputs/<job>/attempt-<n>/``, erased with the job's
artefacts): ``parts/part-00000.parquet`` … and ``parts/manifest.json`` (``{"format":
"parquet", "rows": …, "parts": [{"name", "rows", "bytes"}, …]}``). The job's ``output_key`` is
the manifest's key; :func:`is_partitioned` tells the two kinds of output apart. Downloads: the
parts listing and each part (app/jobs/endpoints.py), or the whole table as one CSV stream.

Reports read a uniform subsample of at most ``RHOSYNTH_REPORT_SAMPLE_ROWS`` rows of the written
codes (their shares estimate the output's); the row count they state is the release's.
Post-processing of the fitted model only: no ρ, seeds drive the draws (each chunk its own child
of the job seed's SeedSequence).
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.config import Settings
from app.storage import Storage
from engine.constraints.keep import KeepReport, Sampler
from engine.mechanisms import Mechanism
from engine.tables.encoding import TableSchema
from engine.tables.partitioned import Part, write_partitioned

MANIFEST = "manifest.json"
PARTS_FOLDER = "parts"
PART_NAME = re.compile(r"part-[0-9]{5}\.parquet")


def applies(settings: Settings, mechanism: Mechanism, rows: int | None) -> bool:
    """Whether a job's output is drawn in chunks: rows asked for at or above the threshold, and
    a method that keeps a re-samplable model. Public facts only. Without ``rows`` (the noisy
    row count) the output stays in memory, capped as before (app/jobs/resources.py)."""
    return mechanism.resamplable and rows is not None and rows >= settings.partitioned_output_rows


def rows_in_memory(settings: Settings, mechanism: Mechanism, rows: int | None) -> int | None:
    """The output rows a job holds in memory at once, for its resource estimate: ``rows``, or
    for a chunked output the chunks in flight and the reports' subsample."""
    if rows is None or not applies(settings, mechanism, rows):
        return rows
    held = settings.output_workers * settings.output_chunk_rows + settings.report_sample_rows
    return min(rows, held)


def manifest_key(output_key: str) -> str:
    """The manifest's key for the attempt whose single-file output key is ``output_key``."""
    return f"{output_key.removesuffix('.parquet')}/{PARTS_FOLDER}/{MANIFEST}"


def is_partitioned(key: str) -> bool:
    return key.endswith(f"/{PARTS_FOLDER}/{MANIFEST}")


def part_key(key: str, name: str) -> str:
    """The key of part ``name`` of the partitioned output whose manifest is ``key``; KeyError
    for a name that is not a part's (so a request cannot name another object)."""
    if not PART_NAME.fullmatch(name):
        raise KeyError(name)
    return f"{key.removesuffix(MANIFEST)}{name}"


def read_manifest(storage: Storage, key: str) -> dict[str, Any]:
    data = b"".join(storage.iter_bytes(key))
    manifest: dict[str, Any] = json.loads(data)
    return manifest


@dataclass(frozen=True)
class StoredParts:
    """A partitioned output as stored: the manifest's key, the rows, the reports' subsample of
    codes and the summed rule report (None without rules)."""

    key: str
    rows: int
    sample: npt.NDArray[np.integer[Any]]
    rules: KeepReport | None


def store_partitioned(
    storage: Storage,
    settings: Settings,
    schema: TableSchema,
    sampler: Sampler,
    rows: int,
    seed: int | None,
    output_key: str,
    *,
    check: Callable[[], None] = lambda: None,
) -> StoredParts:
    """Draw, decode and store ``rows`` rows as parts under ``output_key``'s attempt folder, then
    the manifest (last: its presence means every part is there). ``check`` is called between
    chunks and may raise (cancellation, the time limit, a lost lease)."""
    key = manifest_key(output_key)
    folder = storage.temp_path("-parts")
    folder.mkdir(parents=True)
    try:

        def upload(part: Part) -> None:
            local = folder / part.name
            storage.put_file(local, part_key(key, part.name))
            local.unlink(missing_ok=True)

        def cancelled() -> bool:
            check()
            return False

        out = write_partitioned(
            schema,
            sampler,
            rows,
            seed,
            folder,
            chunk_rows=settings.output_chunk_rows,
            workers=settings.output_workers,
            sample_rows=settings.report_sample_rows,
            on_part=upload,
            cancelled=cancelled,
        )
        manifest = {
            "format": "parquet",
            "rows": out.rows,
            "parts": [part.to_json() for part in out.parts],
        }
        path = folder / MANIFEST
        path.write_text(json.dumps(manifest))
        storage.put_file(path, key)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return StoredParts(key, out.rows, out.sample, out.rules)


def part_names(storage: Storage, key: str) -> list[str]:
    return [str(part["name"]) for part in read_manifest(storage, key)["parts"]]


def iter_part_keys(storage: Storage, key: str) -> Iterator[str]:
    for name in part_names(storage, key):
        yield part_key(key, name)
