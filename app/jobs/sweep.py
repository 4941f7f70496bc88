"""Storage hygiene: remove files that no published state refers to.

Three kinds of leftovers can exist after crashes: temporary files of an upload or an attempt that
died before its rename; the table and outputs of a dataset whose deletion committed but whose
process died before erasing them; and outputs and artefacts of attempts (of jobs and of derived
samples) that were written but never published (the job was cancelled, or another attempt owned
it). Only files older than a grace period are
touched, so nothing that a live request or attempt is still writing is removed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.datasets.models import Dataset
from app.db.session import get_session_factory, transaction
from app.jobs.models import TERMINAL_STATUSES, Job
from app.samples.models import Sample
from app.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    removed: list[str] = field(default_factory=list)


def _age(path: Path) -> float:
    """Seconds since anything in ``path`` last changed (an attempt's artefact directory counts
    from its newest file, not from the directory's own time)."""
    newest = max(
        (p.stat().st_mtime for p in path.rglob("*") if p.is_file()),
        default=path.stat().st_mtime,
    )
    return time.time() - newest


def _as_uuid(name: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(name)
    except ValueError:
        return None


def sweep_storage(settings: Settings, *, grace_seconds: float | None = None) -> SweepReport:
    """Delete stale temporary files, erased datasets' leftovers and unpublished outputs."""
    grace = grace_seconds if grace_seconds is not None else settings.job_time_limit_seconds + 3600
    storage = Storage(settings.resolved_storage_dir)
    root = storage.root
    report = SweepReport()
    factory = get_session_factory(settings.sqlalchemy_url)

    def remove(path: Path) -> None:
        relative = str(path.relative_to(root))
        storage.delete_tree(relative)
        report.removed.append(relative)

    for path in sorted((root / "tmp").glob("*")) if (root / "tmp").is_dir() else []:
        if _age(path) > grace:
            remove(path)

    dataset_dirs = sorted((root / "datasets").iterdir()) if (root / "datasets").is_dir() else []
    ids = {p: _as_uuid(p.name) for p in dataset_dirs}
    with transaction(factory) as session:
        rows = session.execute(
            select(Dataset.id, Dataset.deleted_at).where(
                Dataset.id.in_([i for i in ids.values() if i])
            )
        ).all()
        known = {row.id: row.deleted_at for row in rows}
    for path, dataset_id in ids.items():
        if dataset_id in known:
            if known[dataset_id] is not None:  # deletion committed: nothing writes here again
                remove(path)
        elif _age(path) > grace:  # an upload puts its file just before its row commits
            remove(path)

    _sweep_outputs(factory, root, "outputs", Job, grace, remove)
    # Derived samples (app/samples): the same rule, their statuses are a subset of a job's.
    _sweep_outputs(factory, root, "samples", Sample, grace, remove)
    if report.removed:
        logger.info("storage sweep removed %d leftover files", len(report.removed))
    return report


def _sweep_outputs(
    factory: sessionmaker[Session],
    root: Path,
    folder: str,
    model: type[Job] | type[Sample],
    grace: float,
    remove: Callable[[Path], None],
) -> None:
    """``<folder>/<id>/…`` of jobs or samples: keep what a live attempt may still publish and,
    once finished, the published output and its attempt's artefacts (``attempt-<n>/``)."""
    directories = sorted((root / folder).iterdir()) if (root / folder).is_dir() else []
    ids = [i for i in (_as_uuid(p.name) for p in directories) if i]
    with transaction(factory) as session:
        rows = session.execute(
            select(model.id, model.status, model.output_key, Dataset.deleted_at)
            .join(Dataset, Dataset.id == model.dataset_id)
            .where(model.id.in_(ids))
        ).all()
    owners = {row.id: row for row in rows}
    for directory in directories:
        owner = owners.get(_as_uuid(directory.name) or uuid.uuid4())
        for output in sorted(directory.glob("*")):
            relative = str(output.relative_to(root))
            if owner is None or owner.deleted_at is not None:
                keep = False
            elif owner.status in TERMINAL_STATUSES:
                published = owner.output_key
                keep = published is not None and relative in (
                    published,
                    published.removesuffix(".parquet"),
                )
            else:
                keep = True  # a live attempt may still publish it
            if not keep and _age(output) > grace:
                remove(output)
