"""File storage for encoded tables and synthetic outputs, under one root directory.

Objects are addressed by keys relative to the root (``datasets/<id>/table.parquet``,
``outputs/<job>/attempt-<n>.parquet``), so the root can move. Files are written to a temporary
name in the same filesystem and renamed into place, so a reader never sees a partial file.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


class Storage:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if self.root.resolve() not in path.parents:
            raise ValueError("storage key escapes the storage root")
        return path

    def temp_path(self, suffix: str = "") -> Path:
        """A fresh path under ``tmp/`` on the same filesystem as the final location."""
        directory = self.root / "tmp"
        directory.mkdir(parents=True, exist_ok=True)
        return directory / f"{uuid.uuid4().hex}{suffix}"

    def put(self, temp: Path, key: str) -> None:
        """Atomically move a finished temporary file to ``key``."""
        target = self.path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(temp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temp, target)

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def delete_tree(self, prefix: str) -> None:
        """Erase everything under ``prefix`` (a dataset's table, a job's outputs)."""
        path = self.path(prefix)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def dataset_table_key(dataset_id: uuid.UUID) -> str:
    return f"datasets/{dataset_id}/table.parquet"


def dataset_prefix(dataset_id: uuid.UUID) -> str:
    return f"datasets/{dataset_id}"


def job_attempt_prefix(job_id: uuid.UUID, attempt: int) -> str:
    """Where an attempt's artefacts live (app/reports/artefacts.py): its output's key without
    ``.parquet``, so the published output names its artefacts' directory too."""
    return f"outputs/{job_id}/attempt-{attempt}"


def job_output_key(job_id: uuid.UUID, attempt: int) -> str:
    return f"{job_attempt_prefix(job_id, attempt)}.parquet"


def sample_prefix(sample_id: uuid.UUID) -> str:
    return f"samples/{sample_id}"


def sample_output_key(sample_id: uuid.UUID, attempt: int) -> str:
    return f"{sample_prefix(sample_id)}/attempt-{attempt}.parquet"


def job_output_prefix(job_id: uuid.UUID) -> str:
    return f"outputs/{job_id}"
