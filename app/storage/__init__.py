"""Where encoded tables, synthetic outputs and artefacts are stored, and under which keys.

Two backends behind one interface (app/storage/base.py): a local directory (LocalStorage, the
default and the embedded mode's) and an S3-compatible object store (S3Storage, chosen by
``RHOSYNTH_STORAGE_URL=s3://bucket/prefix``). Callers never assume a stored key is a local file:
they read through ``local_copy``/``iter_bytes`` and publish through ``put_file``.
"""

from __future__ import annotations

import logging
import os
import uuid
from functools import lru_cache
from pathlib import Path
from typing import Literal

from app.config import Settings
from app.storage.base import (
    ObjectMissing,
    Storage,
    StorageUnavailable,
    StoredObject,
    check_key,
)
from app.storage.local import LocalStorage

logger = logging.getLogger(__name__)

__all__ = [
    "CONSOLE_DRAFTS",
    "CONSOLE_DRAFT_TTL_SECONDS",
    "LocalStorage",
    "ObjectMissing",
    "Storage",
    "StorageUnavailable",
    "StoredObject",
    "check_key",
    "console_draft_prefix",
    "dataset_prefix",
    "dataset_table_key",
    "dataset_values_key",
    "discard",
    "job_attempt_prefix",
    "job_output_key",
    "job_output_prefix",
    "open_storage",
    "sample_output_key",
    "sample_prefix",
]


def open_storage(settings: Settings) -> Storage:
    """The storage ``settings`` configure. One object store client per process and
    configuration (clients are thread-safe; a forked worker process makes its own)."""
    if settings.storage_url is None:
        return LocalStorage(settings.resolved_storage_dir)
    return _s3_storage(
        settings.storage_url,
        settings.s3_endpoint_url,
        settings.s3_region,
        settings.s3_addressing_style,
        settings.resolved_scratch_dir,
        _transfer_threads(),
        os.getpid(),
    )


def discard(storage: Storage, key: str, *prefixes: str) -> None:
    """Remove what an attempt that will not publish wrote: the object ``key`` and everything
    under ``prefixes``. Best effort: storage that fails here must not keep the attempt from
    recording its outcome, and the storage sweep (app/jobs/sweep.py) removes what is left."""
    try:
        storage.delete(key)
        for prefix in prefixes:
            storage.delete_tree(prefix)
    except OSError:
        logger.warning("could not remove the unpublished files of %s", key, exc_info=True)


def _transfer_threads() -> int:
    """Parts moved at once by one upload or download: 4, or 1 (no transfer threads) in a process
    with an address-space limit, such as a worker's job process (workers/limits.py): each
    thread's stack and malloc arena count against that limit. Measured on a 200 MiB transfer to
    a loopback S3 server: 4 threads grew the address space by 360 MiB (upload) and 430 MiB
    (download) for about the same time; 1 thread grew it by nothing."""
    try:
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, AttributeError, ValueError, OSError):
        return 4
    return 4 if soft == resource.RLIM_INFINITY else 1


@lru_cache(maxsize=8)
def _s3_storage(
    url: str,
    endpoint_url: str | None,
    region: str | None,
    addressing_style: Literal["auto", "path", "virtual"],
    scratch: Path,
    transfer_threads: int,
    pid: int,
) -> Storage:
    del pid  # part of the cache key only: a client must not cross a fork
    from app.storage.s3 import S3Location, S3Options, S3Storage  # boto3 only when configured

    return S3Storage(
        S3Location.parse(url),
        scratch,
        S3Options(
            endpoint_url=endpoint_url,
            region=region,
            addressing_style=addressing_style,
            max_concurrency=transfer_threads,
        ),
    )


def dataset_table_key(dataset_id: uuid.UUID) -> str:
    """Where a new upload's encoded table is stored (an Arrow IPC file, app/datasets/ingest.py);
    each dataset row keeps its own key, so tables stored as ``table.parquet`` before still read."""
    return f"datasets/{dataset_id}/table.arrow"


def dataset_values_key(dataset_id: uuid.UUID) -> str:
    """Where an upload's raw numeric, date and datetime values are kept beside its table (an
    Arrow IPC file of float64 columns, app/datasets/ingest.py). Read only by the owner tier of
    the quality report (app/reports/artefacts.py), never by a mechanism, never served; erased
    with the dataset (it lies under :func:`dataset_prefix`). Datasets stored before it existed,
    and datasets with no such column, have none."""
    return f"{dataset_prefix(dataset_id)}/values.arrow"


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


CONSOLE_DRAFTS = "console-drafts"
"""Files a console draft read, kept for the upload that follows (app/console/staging.py)."""

CONSOLE_DRAFT_TTL_SECONDS = 3600
"""How long such a file may be used; the storage sweep removes older ones (app/jobs/sweep.py)."""


def console_draft_prefix(key_id: uuid.UUID) -> str:
    """The files kept for one owner key's console drafts."""
    return f"{CONSOLE_DRAFTS}/{key_id}"
