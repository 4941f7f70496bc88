"""The per-attempt limits on a job's work: wall time and memory.

Both are enforced by the worker, not trusted to the engine. The time limit is a deadline set at
each claim (``jobs.deadline_at``) and checked by the attempt's progress callback and its lease
thread (app/jobs/execution.py), with Celery's soft and hard time limits above it as a backstop
(workers/celery_app.py). The memory limit is an address-space limit on the pool process
(workers/limits.py); an allocation beyond it raises MemoryError inside the job.

A job that reaches a limit ends ``failed`` with one of the fixed texts below, stays charged and is
not retried: a retry would be a second noisy run for one charge.

Whether a job reaches the memory limit must not depend on the data (issue 24 §1): the submission
checks the method's public estimate of everything but the input table against the limit, and the
worker raises each job's address-space limit by :func:`input_allowance_bytes` of the dataset's
own table (its exact row count, which the worker knows and never shows) for as long as the job
runs. What a job holds because of its input rows is inside that allowance, so the outcome is a
function of the public estimate and the limit. Time is not closed this way: docs/privacy.md,
"Residual risks".
"""

from __future__ import annotations

import contextlib
import math
import os
import uuid
from collections.abc import Iterator

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]


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


INPUT_BYTES_PER_CELL = 24
"""Address space per input cell beyond the stored codes' own width (twice: the loaded table and
a re-coded copy, :func:`input_allowance_bytes`): Arrow's read buffers, per-row float64 or int64
work (dpcopula's normal scores, chunked counting's indices) and allocator slack. Measured (the
benchmark in docs/benchmarks.md, "Input allowance"): below it for every method."""


def input_allowance_bytes(rows: int, columns: int, width: int, cache_bytes: int = 0) -> int:
    """The address space a job's input table may take beside the public estimate: rows ×
    columns × (2 × width + :data:`INPUT_BYTES_PER_CELL`), plus ``cache_bytes`` (the method's
    ``counting_cache_bytes``: per-row counting indices it keeps, which grow with the rows up to
    that cap). ``width``: the stored codes' bytes per cell (1, 2, 4 or 8). Private (the exact
    row count): the worker adds it to the limit and never shows it."""
    if rows < 0 or columns < 0 or cache_bytes < 0 or width not in (1, 2, 4, 8):
        raise ValueError("rows, columns and cache are non-negative and width is 1, 2, 4 or 8")
    return rows * columns * (2 * width + INPUT_BYTES_PER_CELL) + cache_bytes


@contextlib.contextmanager
def raised_memory_limit(extra_bytes: int) -> Iterator[None]:
    """Raise this process's address-space limit by ``extra_bytes`` while the block runs (a job's
    input allowance), then put it back. A no-op where no limit is enforced (the API process,
    tests in-process, platforms without RLIMIT_AS). The soft limit may go up to the hard one;
    lowering it back after the job is always allowed."""
    if resource is None or _enforced_memory_limit_mb is None or extra_bytes <= 0:
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        yield
        return
    raised = soft + extra_bytes if hard == resource.RLIM_INFINITY else min(soft + extra_bytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (raised, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


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
