"""Storage hygiene: remove stored objects that no published state refers to.

Three kinds of leftovers can exist after crashes: temporary files of an upload or an attempt that
died before publishing (and, on an object store, multipart uploads it never completed); the table
and outputs of a dataset whose deletion committed but whose process died before erasing them; and
outputs and artefacts of attempts (of jobs and of derived samples) that were written but never
published (the job was cancelled, or another attempt owned it). Only entries older than a grace
period are touched, so nothing that a live request or attempt is still writing is removed. Files
the console keeps between a draft and its upload (app/console/staging.py) are removed once their
hour is over.

The sweep works from listings (app/storage: a directory walk, or a paginated object listing with
LastModified), so it is the same on both backends. Every worker host runs it; sweeps on several
hosts at once only repeat each other's idempotent deletes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.datasets.models import Dataset
from app.db.session import get_session_factory, transaction
from app.jobs.models import TERMINAL_STATUSES, Job
from app.samples.models import GONE_STATUSES, Sample
from app.storage import (
    CONSOLE_DRAFT_TTL_SECONDS,
    CONSOLE_DRAFTS,
    Storage,
    StoredObject,
    open_storage,
)

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    removed: list[str] = field(default_factory=list)


# The DB is asked about this many ids per query.
ID_BATCH = 1000


def _entries(objects: Iterable[StoredObject], depth: int) -> dict[str, float]:
    """The stored entries ``depth`` key parts deep (``datasets/<id>``, ``outputs/<job>/attempt-1``
    or ``outputs/<job>/attempt-1.parquet``), each with its newest object's time: an attempt's
    artefact folder counts from its newest file."""
    newest: dict[str, float] = {}
    for stored in objects:
        entry = "/".join(stored.key.split("/")[:depth])
        newest[entry] = max(newest.get(entry, stored.modified), stored.modified)
    return newest


def _as_uuid(name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(name)
    except ValueError:
        return None


def _batches(ids: Iterable[uuid.UUID]) -> Iterator[list[uuid.UUID]]:
    batch: list[uuid.UUID] = []
    for item in ids:
        batch.append(item)
        if len(batch) == ID_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def sweep_storage(
    settings: Settings, *, grace_seconds: float | None = None, now: float | None = None
) -> SweepReport:
    """Delete stale temporary files, erased datasets' leftovers and unpublished outputs."""
    grace = grace_seconds if grace_seconds is not None else settings.job_time_limit_seconds + 3600
    now = time.time() if now is None else now
    storage = open_storage(settings)
    report = SweepReport()
    factory = get_session_factory(settings.sqlalchemy_url)

    def remove(entry: str) -> None:
        storage.delete_tree(entry)
        report.removed.append(entry)

    report.removed.extend(storage.sweep_scratch(grace, now))
    # Files kept for a console upload after its draft (app/console/staging.py) live an hour.
    for stored in storage.list_objects(CONSOLE_DRAFTS):
        if now - stored.modified > CONSOLE_DRAFT_TTL_SECONDS:
            remove(stored.key)

    datasets = _entries(storage.list_objects("datasets"), 2)
    ids = {entry: _as_uuid(entry.split("/")[1]) for entry in datasets}
    known: dict[uuid.UUID, object] = {}
    for batch in _batches(i for i in ids.values() if i):
        with transaction(factory) as session:
            rows = session.execute(
                select(Dataset.id, Dataset.deleted_at).where(Dataset.id.in_(batch))
            ).all()
        known.update({row.id: row.deleted_at for row in rows})
    for entry, dataset_id in ids.items():
        if dataset_id in known:
            if known[dataset_id] is not None:  # deletion committed: nothing writes here again
                remove(entry)
        elif now - datasets[entry] > grace:  # an upload puts its file just before its row commits
            remove(entry)

    _sweep_outputs(factory, storage, "outputs", Job, grace, now, remove)
    # Derived samples (app/samples): the same rule, their statuses are a subset of a job's.
    _sweep_outputs(factory, storage, "samples", Sample, grace, now, remove)
    if report.removed:
        logger.info("storage sweep removed %d leftover entries", len(report.removed))
    return report


def _sweep_outputs(
    factory: sessionmaker[Session],
    storage: Storage,
    folder: str,
    model: type[Job] | type[Sample],
    grace: float,
    now: float,
    remove: Callable[[str], None],
) -> None:
    """``<folder>/<id>/…`` of jobs or samples: keep what a live attempt may still publish and,
    once finished, the published output and its attempt's artefacts (``attempt-<n>/``)."""
    entries = _entries(storage.list_objects(folder), 3)
    owner_ids = {entry: _as_uuid(entry.split("/")[1]) for entry in entries}
    owners: dict[uuid.UUID, Any] = {}
    for batch in _batches({i for i in owner_ids.values() if i}):
        with transaction(factory) as session:
            rows = session.execute(
                select(model.id, model.status, model.output_key, Dataset.deleted_at)
                .join(Dataset, Dataset.id == model.dataset_id)
                .where(model.id.in_(batch))
            ).all()
        owners.update({row.id: row for row in rows})
    for entry, newest in sorted(entries.items()):
        owner_id = owner_ids[entry]
        owner = owners.get(owner_id) if owner_id is not None else None
        if owner is None or owner.deleted_at is not None or owner.status in GONE_STATUSES:
            keep = False
        elif owner.status in TERMINAL_STATUSES:
            published = owner.output_key
            # A partitioned output's manifest lies inside its attempt's folder.
            keep = published is not None and (
                entry in (published, published.removesuffix(".parquet"))
                or published.startswith(entry + "/")
            )
        else:
            keep = True  # a live attempt may still publish it
        if not keep and now - newest > grace:
            remove(entry)
