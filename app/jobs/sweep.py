"""Storage hygiene: remove files that no published state refers to.

Three kinds of leftovers can exist after crashes: temporary files of an upload or an attempt that
died before its rename; the table and outputs of a dataset whose deletion committed but whose
process died before erasing them; and outputs of attempts that were written but never published
(the job was cancelled, or another attempt owned it). Only files older than a grace period are
touched, so nothing that a live request or attempt is still writing is removed.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from app.config import Settings
from app.datasets.models import Dataset
from app.db.session import get_session_factory, transaction
from app.jobs.models import TERMINAL_STATUSES, Job
from app.storage import Storage

logger = logging.getLogger(__name__)


@dataclass
class SweepReport:
    removed: list[str] = field(default_factory=list)


def _age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


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

    job_dirs = sorted((root / "outputs").iterdir()) if (root / "outputs").is_dir() else []
    job_ids = [i for i in (_as_uuid(p.name) for p in job_dirs) if i]
    with transaction(factory) as session:
        job_rows = session.execute(
            select(Job.id, Job.status, Job.output_key, Dataset.deleted_at)
            .join(Dataset, Dataset.id == Job.dataset_id)
            .where(Job.id.in_(job_ids))
        ).all()
    jobs = {row.id: row for row in job_rows}
    for directory in job_dirs:
        job = jobs.get(_as_uuid(directory.name) or uuid.uuid4())
        for output in sorted(directory.glob("*")):
            relative = str(output.relative_to(root))
            if job is None or job.deleted_at is not None:
                keep = False
            elif job.status in TERMINAL_STATUSES:
                # The published output and its attempt's artefacts (``attempt-<n>/``).
                published = job.output_key
                keep = published is not None and relative in (
                    published,
                    published.removesuffix(".parquet"),
                )
            else:
                keep = True  # a live attempt may still publish it
            if not keep and _age(output) > grace:
                remove(output)
    if report.removed:
        logger.info("storage sweep removed %d leftover files", len(report.removed))
    return report
