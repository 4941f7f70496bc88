"""The artefacts a job attempt writes next to its output, and who may read each.

An attempt writes the release artefacts under ``outputs/<job>/attempt-<n>/`` before it publishes;
the names of those that were written are published with the output in the same guarded UPDATE
(``jobs.artefacts``), so an analyst never sees an artefact of an attempt that did not publish.

Release artefacts (every key of the tenant) are built from the release alone: the record of the
noisy measurements, the fitted model, the synthetic rows. They are DP post-processing and cost
nothing. The owner tier of the report compares the release with the real table: a reports worker
builds it after publication (app/jobs/owner_tier.py), stores it under its own names and adds
them to the job's artefacts, served to owner keys only (privacy rule 7). It compares values
from the raw values kept beside the dataset's table (``stored_values``, the only reader of that
file) and the published output (``published_values``: what analysts download).

A release artefact that cannot be built (a bug) is left out and logged; the release itself is
still published. What is left out depends only on the release (and, for the owner tier, which
analysts never see listed, on the real table).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq

from app.jobs import partitioned_output
from app.reports.names import (
    MEASUREMENTS_JSON,
    MEASUREMENTS_PARQUET,
    MODEL,
    OWNER_HTML,
    OWNER_JSON,
    RECORD,
    RELEASE_HTML,
    RELEASE_JSON,
    artefact_key,
)
from app.storage import Storage, job_attempt_prefix
from engine.models.fitted import FittedModel
from engine.release.model_file import model_file_bytes
from engine.release.record import ReleaseRecord
from engine.release.tables import TooLarge, measurements_arrow, measurements_json
from engine.reports.html import render_html
from engine.reports.owner import build_owner_report
from engine.reports.release import build_release_report
from engine.reports.values import ValueSource
from engine.tables.encoding import TableSchema
from engine.tables.raw_values import value_columns

logger = logging.getLogger(__name__)


class ArtefactWriter:
    """Writes one attempt's artefacts; each goes to a temporary file, then into place."""

    def __init__(
        self,
        storage: Storage,
        job_id: uuid.UUID,
        attempt: int,
        past_deadline: Callable[[], bool] | None = None,
    ) -> None:
        self._storage = storage
        self._job_id = job_id
        self._attempt = attempt
        self._past_deadline = past_deadline
        self.written: list[str] = []

    def put_file(self, name: str, write: Callable[[Any], None], suffix: str) -> None:
        temp = self._storage.temp_path(suffix)
        try:
            write(temp)
            self._storage.put_file(temp, artefact_key(self._job_id, self._attempt, name))
        finally:
            temp.unlink(missing_ok=True)
        self.written.append(name)

    def put_bytes(self, name: str, data: bytes) -> None:
        self.put_file(name, lambda path: path.write_bytes(data), ".bin")

    def put_text(self, name: str, text: str) -> None:
        self.put_file(name, lambda path: path.write_text(text, encoding="utf-8"), ".txt")

    def put_json(self, name: str, value: Any) -> None:
        self.put_text(name, json.dumps(value, allow_nan=False, separators=(",", ":")))

    def attempt(self, what: str, build: Callable[[], None]) -> bool:
        """Run ``build``; a failure is logged for the operator and leaves the artefact out,
        except past the attempt's deadline (``past_deadline``): then the failure (Celery's soft
        time limit, or anything else raised there) is the time limit's and goes to the caller,
        which ends the job failed instead of publishing it without the artefact."""
        try:
            build()
        except MemoryError:
            raise  # the caller decides (the owner tier catches it after publication)
        except Exception:
            if self._past_deadline is not None and self._past_deadline():
                raise
            logger.exception(
                "job %s attempt %d: could not build the %s", self._job_id, self._attempt, what
            )
            return False
        return True

    @property
    def prefix(self) -> str:
        """Where this attempt's artefacts are stored (erase it with Storage.delete_tree)."""
        return job_attempt_prefix(self._job_id, self._attempt)


def write_release_artefacts(
    writer: ArtefactWriter,
    schema: TableSchema,
    record: ReleaseRecord,
    model: FittedModel | None,
    synthetic: npt.NDArray[np.integer[Any]],
    title: str,
    *,
    discovery_delta: float = 0.0,
    privacy_unit: Mapping[str, Any] | None = None,
    rules: dict[str, Any] | None = None,
    synthetic_rows: int | None = None,
) -> None:
    """The record, the model, the measurements as tables and the release tier of the report
    (its privacy profile adds ``discovery_delta``, the dataset's discovery δ, to each δ;
    ``rules``: what keeping the schema's rules did, engine.constraints.keep;
    ``privacy_unit``: :func:`engine.reports.unit.unit_statement` with the DP truncation count;
    ``synthetic_rows``: the release's rows when ``synthetic`` is a subsample of them, a
    partitioned output's, app/jobs/partitioned_output.py)."""
    writer.put_bytes(RECORD, record.to_bytes())
    if model is not None:
        # The CLI's model file (model + public schema): `rhosynth sample` reads a download.
        writer.attempt(
            "fitted model", lambda: writer.put_bytes(MODEL, model_file_bytes(model, schema))
        )

    def measurements() -> None:
        table = measurements_arrow(record, schema)
        writer.put_file(
            MEASUREMENTS_PARQUET,
            lambda path: pq.write_table(table, path, compression="zstd"),
            ".parquet",
        )
        try:
            writer.put_json(MEASUREMENTS_JSON, measurements_json(record, schema))
        except TooLarge:
            logger.info("job measurements too large for JSON; Parquet only")

    writer.attempt("measurements", measurements)

    def report() -> None:
        built = build_release_report(
            schema,
            record,
            synthetic,
            model_marginal=model.marginal if model is not None else None,
            discovery_delta=discovery_delta,
            rules=rules,
            privacy_unit=privacy_unit,
            synthetic_rows=synthetic_rows,
        )
        writer.put_json(RELEASE_JSON, built)
        writer.put_text(RELEASE_HTML, render_html(built, title=title))

    writer.attempt("release report", report)


VALUES_NOT_KEPT = (
    "This dataset was stored before rhosynth kept an upload's raw numeric and date values beside "
    "its codes, so its numeric and date columns are compared on their bins only: bins cannot "
    "show values outside the real range or far inside a wide bin. Upload the table again to get "
    "value metrics."
)
VALUE_BATCH_ROWS = 65_536
"""Rows of the published output read at a time for the value comparison."""


def stored_values(storage: Storage, key: str) -> ValueSource:
    """The raw values kept beside a dataset's table (``dataset_values_key``), read one stored
    record batch at a time (each at most the ingest's write buffer, 16 MiB; an object store's
    file through a local copy held while it is read). For the owner tier only."""

    def batches() -> Iterator[pa.RecordBatch]:
        with storage.local_copy(key) as path, pa.OSFile(str(path)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    return ValueSource(batches)


def published_values(storage: Storage, key: str, schema: TableSchema) -> ValueSource:
    """The numeric, date and datetime columns of a published output (Parquet at ``key``): the
    values analysts download, read :data:`VALUE_BATCH_ROWS` rows at a time."""
    names = [column.name for column in value_columns(schema)]
    # A partitioned output (app/jobs/partitioned_output.py): its parts in row order.
    keys = (
        list(partitioned_output.iter_part_keys(storage, key))
        if partitioned_output.is_partitioned(key)
        else [key]
    )

    def batches() -> Iterator[pa.RecordBatch]:
        for part in keys:
            with storage.local_copy(part) as path:
                parquet = pq.ParquetFile(path)
                yield from parquet.iter_batches(batch_size=VALUE_BATCH_ROWS, columns=names)

    return ValueSource(batches, names=frozenset(names))


def write_owner_report(
    writer: ArtefactWriter,
    schema: TableSchema,
    load_real: Callable[[], npt.NDArray[np.integer[Any]]],
    synthetic: npt.NDArray[np.integer[Any]],
    rng: np.random.Generator,
    title: str,
    *,
    real_values: ValueSource | None = None,
    synthetic_values: ValueSource | None = None,
    values_unavailable: str | None = None,
    privacy_unit: Mapping[str, Any] | None = None,
) -> None:
    """The owner tier: real against synthetic (reads the real table and, when given, its raw
    values; owner keys only). ``synthetic_values`` must be the published rows' values;
    ``privacy_unit`` the unit's statement with truncation's exact figures (owner-only)."""

    def report() -> None:
        built = build_owner_report(
            schema,
            load_real(),
            synthetic,
            real_values=real_values,
            synthetic_values=synthetic_values,
            values_unavailable=values_unavailable,
            rng=rng,
        )
        if privacy_unit is not None:
            built["privacy_unit"] = dict(privacy_unit)
        writer.put_json(OWNER_JSON, built)
        writer.put_text(OWNER_HTML, render_html(built, title=title))

    writer.attempt("owner report", report)
