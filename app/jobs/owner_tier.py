"""The owner tier of a release's report, built by a reports worker after publication.

The owner tier compares the synthetic table with the real one, so it reads the real table and its
duration depends on the data. Built in the job's own worker slot, that duration decided when the
next queued job started, which an analyst can watch (issue 24 §2). So the job worker only leaves
what the owner tier needs and marks the job ``owner_tier = 'pending'`` in the transaction that
publishes it; after that commit it sends a message to the reports queue
(``RHOSYNTH_REPORTS_QUEUE``), which only ``rhosynth worker --reports`` consumes. Analysts' jobs
never wait for it: their workers do not take that queue.

* **What the job worker leaves.** The synthetic codes, as ``owner-input.npy`` in the published
  attempt's artefact folder (its size is rows × columns: public), not listed among the artefacts
  and removed once the owner tier is built or given up. Everything else is read from the job
  and its dataset.
* **Delivery.** The message is a doorbell, as for jobs: a build that finds the job not pending
  (built already, or the job erased) does nothing, and two builds of one job write the same
  files and record them once. Every build that starts counts a try (one killed by the OOM
  killer or a hard time limit too); after :data:`MAX_OWNER_TIER_TRIES` the job is marked
  ``failed`` and the owner tier left out. A job whose dataset was erased is left with nothing
  to build (``owner_tier`` NULL); a build that finds the dataset erased when it records
  removes what it wrote. The
  recovery loop resends the message of every job still pending whose last message is older than
  ``RHOSYNTH_REQUEUE_AFTER_SECONDS`` (a message lost with the broker, a reports worker killed
  mid-build, the database down while it ran: issue 24 §10).
"""

from __future__ import annotations

import gc
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.datasets import repository as dataset_repository
from app.datasets.ingest import read_stored_table
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import dispatch, repository
from app.reports.artefacts import (
    VALUES_NOT_KEPT,
    ArtefactWriter,
    published_values,
    stored_values,
    write_owner_report,
)
from app.reports.names import OWNER_HTML, OWNER_INPUT, OWNER_JSON, artefact_key, owner_input_key
from app.storage import Storage, dataset_values_key, open_storage
from engine.reports.unit import unit_phrase, unit_statement
from engine.reports.values import ValueSource
from engine.tables.encoding import TableSchema
from engine.tables.raw_values import value_columns
from workers.celery_app import BUILD_OWNER_TIER_TASK

logger = logging.getLogger(__name__)

MAX_OWNER_TIER_TRIES = 3
"""Builds of one job's owner tier that may fail before it is given up."""

RESEND_PAGE = 200
"""Pending owner tiers whose message one recovery pass resends at most."""


def release_title(job_id: uuid.UUID, method: str, rho: Decimal, max_rows: int | None = None) -> str:
    """The title of a release's reports (with a privacy unit: "per person, at most k rows"
    beside ρ)."""
    rho_text = format(Decimal(rho).normalize(), "f")
    unit = "" if max_rows is None else f", {unit_phrase(max_rows)}"
    return f"rhosynth release {job_id} ({method}, ρ = {rho_text}{unit})"


def save_owner_input(
    storage: Storage, job_id: uuid.UUID, attempt: int, synthetic: npt.NDArray[np.integer[Any]]
) -> None:
    """Leave the synthetic codes for the owner tier in the attempt's artefact folder."""
    temp = storage.temp_path(".npy")
    try:
        np.save(temp, np.ascontiguousarray(synthetic), allow_pickle=False)
        storage.put_file(temp, owner_input_key(job_id, attempt))
    finally:
        temp.unlink(missing_ok=True)


def send_owner_tier(settings: Settings, job_id: uuid.UUID) -> bool:
    """Send the job's owner-tier message to the reports queue (after the publishing commit)."""
    return dispatch.enqueue_job(
        settings, job_id, BUILD_OWNER_TIER_TASK, queue=settings.owner_tier_queue
    )


@dataclass(frozen=True)
class _Build:
    """What one build reads of the job and its dataset (in one short transaction)."""

    attempt: int
    seed: int | None
    title: str
    schema: TableSchema
    table_key: str
    values_key: str
    output_key: str
    unit: dict[str, Any] | None = None  # the privacy unit, with truncation's exact figures


def build_owner_tier(settings: Settings, job_id: uuid.UUID) -> str:
    """Build the job's owner tier if it is pending; return what happened (``built``,
    ``skipped``, ``failed``, ``retry``). Safe to call any number of times: each start counts a
    try (:func:`repository.begin_owner_tier`), so a build that keeps killing its process is
    given up too."""
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = open_storage(settings)
    with transaction(factory) as session:
        found = _pending(session, job_id)
        if found is None:
            return "skipped"
        if isinstance(found, _Erased):
            # Nothing to build for an erased dataset: the erasure removes the attempt's files.
            repository.end_owner_tier(session, job_id, found.attempt, "none")
            return "skipped"
        build = found
        tries = repository.begin_owner_tier(
            session, job_id, build.attempt, MAX_OWNER_TIER_TRIES, utcnow()
        )
    if tries is None:  # built meanwhile, or its tries are used up (now marked failed)
        storage.delete(owner_input_key(job_id, build.attempt))
        return "skipped"
    writer = ArtefactWriter(storage, job_id, build.attempt)
    try:
        synthetic = _read_owner_input(storage, job_id, build.attempt)
        real_values, synthetic_values, unavailable = _value_sources(storage, build)
        write_owner_report(
            writer,
            build.schema,
            # Narrow, like the synthetic table: the owner tier widens a column at a time where
            # it does arithmetic (at 10 M rows × 14 columns, 140 MB instead of 1.1 GB).
            lambda: read_stored_table(storage, build.table_key, build.schema, narrow=True),
            synthetic,
            # Subsampling and the holdout split: post-processing, owners only (a job without
            # a seed gets fresh entropy, as before).
            np.random.default_rng(build.seed),
            build.title,
            real_values=real_values,
            synthetic_values=synthetic_values,
            values_unavailable=unavailable,
            privacy_unit=build.unit,
        )
        if not {OWNER_JSON, OWNER_HTML} <= set(writer.written):
            raise RuntimeError("the owner report was not written (see the log above)")
    except Exception:  # MemoryError included: the release is published whatever happens here
        logger.exception("job %s: building the owner tier of its report failed", job_id)
        _remove_unless_built(factory, storage, job_id, build.attempt, writer.written)
        del writer
        gc.collect()
        if tries >= MAX_OWNER_TIER_TRIES:
            with transaction(factory) as session:
                repository.end_owner_tier(session, job_id, build.attempt, "failed")
            storage.delete(owner_input_key(job_id, build.attempt))
            return "failed"
        return "retry"
    with transaction(factory) as session:
        recorded = repository.owner_tier_built(session, job_id, build.attempt, writer.written)
    if not recorded:  # built by a duplicate meanwhile, or the dataset was erased
        _remove_unless_built(factory, storage, job_id, build.attempt, writer.written)
    storage.delete(owner_input_key(job_id, build.attempt))
    logger.info("job %s: owner tier %s", job_id, "built" if recorded else "not recorded")
    return "built" if recorded else "skipped"


def _remove_unless_built(
    factory: sessionmaker[Session],
    storage: Storage,
    job_id: uuid.UUID,
    attempt: int,
    written: list[str],
) -> None:
    """Remove the owner-tier files a build wrote and did not record (never release files),
    unless a duplicate build recorded the same names meanwhile."""
    with transaction(factory) as session:
        job = repository.get(session, job_id)
        if job is not None and job.owner_tier == "built":
            return
    for name in written:
        if name in (OWNER_JSON, OWNER_HTML):
            storage.delete(artefact_key(job_id, attempt, name))


def resend_owner_tiers(settings: Settings) -> list[uuid.UUID]:
    """Resend the message of every pending owner tier whose last one is older than
    ``requeue_after_seconds`` (the recovery loop); returns the jobs it sent."""
    factory = get_session_factory(settings.sqlalchemy_url)
    now = utcnow()
    before = now - timedelta(seconds=settings.requeue_after_seconds)
    with transaction(factory) as session:
        # Marked sent in the same transaction that picks them: two recovery loops (two worker
        # hosts) running at once pick disjoint sets (the guarded UPDATE in mark_owner_tier_sent).
        stale = repository.stale_owner_tiers(session, before, RESEND_PAGE)
        sent = repository.mark_owner_tier_sent(session, stale, before, now)
    for job_id in sent:
        send_owner_tier(settings, job_id)
    return sent


@dataclass(frozen=True)
class _Erased:
    """A pending owner tier whose dataset was erased meanwhile."""

    attempt: int


def _pending(session: Session, job_id: uuid.UUID) -> _Build | _Erased | None:
    job = repository.get(session, job_id)
    if job is None or job.status != "succeeded" or job.owner_tier != "pending":
        return None
    dataset = dataset_repository.get(session, job.dataset_id)
    if (
        dataset is None
        or dataset.deleted_at is not None
        or dataset.storage_key is None  # erased, or a registered source without a copy
        or job.output_key is None
    ):
        return _Erased(job.attempt)
    return _Build(
        attempt=job.attempt,
        seed=job.seed,
        title=release_title(job.id, job.method, job.rho, dataset.unit_max_rows),
        schema=TableSchema.from_json(dataset.schema),
        unit=unit_statement(
            dataset.unit_max_rows, dataset.truncation_release, exact=dataset.truncation
        ),
        table_key=dataset.storage_key,
        values_key=dataset_values_key(dataset.id),
        output_key=job.output_key,
    )


def _read_owner_input(
    storage: Storage, job_id: uuid.UUID, attempt: int
) -> npt.NDArray[np.integer[Any]]:
    with storage.local_copy(owner_input_key(job_id, attempt)) as path:
        codes: npt.NDArray[np.integer[Any]] = np.load(path, allow_pickle=False)
    return codes


def _value_sources(
    storage: Storage, build: _Build
) -> tuple[ValueSource | None, ValueSource | None, str | None]:
    """The owner tier's values: the raw values kept beside the table, the published output's,
    and why there are none (a dataset stored before raw values were kept). Read here, after
    publication, and nowhere else: no mechanism reads the raw values."""
    if not value_columns(build.schema):
        return None, None, None
    if not storage.exists(build.values_key):
        return None, None, VALUES_NOT_KEPT
    return (
        stored_values(storage, build.values_key),
        published_values(storage, build.output_key, build.schema),
        None,
    )


__all__ = [
    "MAX_OWNER_TIER_TRIES",
    "OWNER_INPUT",
    "build_owner_tier",
    "release_title",
    "resend_owner_tiers",
    "save_owner_input",
    "send_owner_tier",
]
