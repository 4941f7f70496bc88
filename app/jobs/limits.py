"""The per-attempt limits on a job's work: wall time and memory.

Both are enforced by the worker, not trusted to the engine. The time limit is a deadline set at
each claim (``jobs.deadline_at``) and checked by the attempt's progress callback and its lease
thread (app/jobs/execution.py), with Celery's soft and hard time limits above it as a backstop
(workers/celery_app.py). The memory limit is an address-space limit on the pool process
(workers/limits.py); an allocation beyond it raises MemoryError inside the job.

A job that reaches a limit ends ``failed`` with one of the fixed texts below, stays charged and is
not retried: a retry would be a second noisy run for one charge. Whether a job reaches a limit
can depend on the data; docs/privacy.md lists this under residual risks.
"""

from __future__ import annotations

import math
import os
import uuid


class JobTimeLimitExceeded(Exception):
    """The attempt passed its deadline (raised at its next progress report)."""

    def __init__(self, job_id: uuid.UUID) -> None:
        super().__init__(f"job {job_id} passed its deadline")
        self.job_id = job_id


def time_limit_error(seconds: int) -> str:
    """The fixed, public text of a job that ran out of time."""
    return f"the job exceeded its time limit of {seconds} s; its budget stays spent"


def memory_limit_error(megabytes: int) -> str:
    """The fixed, public text of a job that ran out of memory."""
    return f"the job exceeded its memory limit of {megabytes} MB; its budget stays spent"


def caused_by_memory_error(error: BaseException) -> bool:
    """Whether ``error`` is, or was raised while handling or because of, a MemoryError.

    numpy raises a subclass of MemoryError, pyarrow's ArrowMemoryError is one, and libraries
    that wrap errors (SQLAlchemy, pandas) keep the original as ``__cause__`` or ``__context__``.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def physical_memory_mb() -> int | None:
    """The machine's physical memory in MB, where the platform tells (Linux, macOS)."""
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page_size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    if pages <= 0 or page_size <= 0:
        return None
    return int(pages * page_size // (1024 * 1024))


_enforced_memory_limit_mb: int | None = None


def record_enforced_memory_limit(megabytes: int | None) -> None:
    """Called by the pool process once it has set its address-space limit (workers/limits.py)."""
    global _enforced_memory_limit_mb
    _enforced_memory_limit_mb = megabytes


def enforced_memory_limit_mb() -> int | None:
    """The memory limit this process enforces on its jobs, if it enforces one."""
    return _enforced_memory_limit_mb


MEMORY_SHARE = 0.8  # of physical memory that the job processes of one worker may use together


def effective_memory_limit_mb(configured_mb: int, concurrency: int) -> int:
    """The memory limit a worker enforces per job: the configured one, lowered so that its
    ``concurrency`` job processes together fit in 80 % of the machine's physical memory."""
    total = physical_memory_mb()
    if total is None:
        return configured_mb
    share = math.floor(MEMORY_SHARE * total / max(1, concurrency))
    return max(64, min(configured_mb, share))
