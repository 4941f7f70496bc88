"""The memory limit of a Celery pool process: an address-space limit (RLIMIT_AS).

Set once per pool process (``worker_process_init``) to the process's address space at that
moment plus the job memory limit plus a fixed allowance, so that an allocation beyond it fails
with MemoryError inside the job; execute_job then ends the job ``failed`` with a fixed text and
the process stays up for the next job. The kernel counts virtual address space, not resident
memory, so the process is first made frugal and warmed up, so that its baseline already holds
what every job's process reserves anyway:

* glibc's malloc gets at most ``ARENA_MAX`` arenas (each thread's arena reserves 64 MiB of
  address space on 64-bit Linux);
* Arrow uses the system allocator (``ARROW_DEFAULT_MEMORY_POOL=system``, set by ``rhosynth
  worker`` before pyarrow is imported): its default, mimalloc, reserves 1 GiB of address space on
  first use;
* a tiny matrix product, Parquet round trip and thread start the BLAS and Arrow thread pools and
  the thread-stack cache before the baseline is read.

Measured figures and how to size the limit: docs/operations.md ("Job limits").
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
ARENA_MAX = 2
M_ARENA_MAX = -8  # glibc's mallopt parameter number
# Address space a job's process takes beyond the warmed-up baseline that is not the job's own
# data (the lease thread's stack, database connections, first-use caches). Measured: see
# docs/operations.md.
ALLOWANCE_MB = 128


def limit_malloc_arenas() -> bool:
    """Cap glibc's malloc arenas (a no-op elsewhere). True if it took effect."""
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_ARENA_MAX, ARENA_MAX))


def warm_up() -> None:
    """Start what every job starts, so that its address space is part of the baseline."""
    matrix = np.ones((64, 64))
    _ = matrix @ matrix  # BLAS thread pool
    table = pa.table({"x": np.arange(64)})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    pq.read_table(pa.BufferReader(sink.getvalue())).to_pandas()  # Arrow thread pools
    # A thread that allocates: its malloc arena and glibc's cache of thread stacks (the lease
    # thread of every job reuses both).
    thread = threading.Thread(target=lambda: [bytearray(256) for _ in range(256)])
    thread.start()
    thread.join()


def address_space_bytes() -> int | None:
    """This process's virtual address space (VmSize), on Linux."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def apply_memory_limit(limit_mb: int) -> int | None:
    """Limit this process's address space to its baseline + ``limit_mb`` + the allowance.

    Returns the limit in bytes, or None where it cannot be enforced (no /proc, no RLIMIT_AS).
    Only the soft limit is set; the hard limit stays as it was.
    """
    if pa.default_memory_pool().backend_name != "system":
        logger.warning(
            "Arrow uses its %s allocator, which reserves address space up front; start workers "
            "with `rhosynth worker` (or set ARROW_DEFAULT_MEMORY_POOL=system) so that the job "
            "memory limit counts what jobs use",
            pa.default_memory_pool().backend_name,
        )
    if not limit_malloc_arenas():
        logger.info("could not cap malloc arenas (not glibc?)")
    warm_up()
    baseline = address_space_bytes()
    if baseline is None or not hasattr(resource, "RLIMIT_AS"):
        logger.warning("this platform has no address-space limit; job memory is not limited")
        return None
    limit = baseline + (limit_mb + ALLOWANCE_MB) * MIB
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    logger.info(
        "pool process %d: address space %d MiB at start, limited to %d MiB (job memory limit "
        "%d MB)",
        os.getpid(),
        baseline // MIB,
        limit // MIB,
        limit_mb,
    )
    return limit
