"""A pool process's memory limit around one job (tests/workers/test_memory_side_channel.py):
``python -m tests.workers._memory_child LIMIT_MB TABLE_ROWS OUTPUT_ROWS RAISE`` sets the
worker's address-space limit (workers/limits.py), loads a table of ``TABLE_ROWS`` one-byte codes
under the job's input allowance (or none, ``RAISE`` = 0) as app/jobs/execution.py does, runs
``independent`` for ``OUTPUT_ROWS`` rows and prints ``ok`` or ``memory``."""

from __future__ import annotations

import os
import sys

os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "system"  # as `rhosynth worker` sets it

from fractions import Fraction

import numpy as np

from app.jobs.limits import input_allowance_bytes, raised_memory_limit, record_enforced_memory_limit
from engine.domain import Dataset, Domain
from engine.mechanisms import get_mechanism
from workers.limits import apply_memory_limit

SIZES = (9, 16, 7, 5, 12, 2, 3, 10)
DOMAIN = Domain(tuple(f"c{j}" for j in range(len(SIZES))), SIZES)


def main() -> None:
    limit_mb, table_rows, output_rows = (int(a) for a in sys.argv[1:4])
    raise_it = sys.argv[4] == "1"
    if apply_memory_limit(limit_mb) is None:
        print("unlimited")
        return
    record_enforced_memory_limit(limit_mb)
    allowance = input_allowance_bytes(table_rows, len(SIZES), 1) if raise_it else 0
    try:
        with raised_memory_limit(allowance):
            codes = np.empty((table_rows, len(SIZES)), dtype=np.uint8, order="F")
            for j in range(len(SIZES)):
                codes[:, j] = j % SIZES[j]
            codes.flags.writeable = False
            mechanism = get_mechanism("independent")
            mechanism.run(
                Dataset(DOMAIN, codes),
                Fraction(1),
                mechanism.validate_params({}),
                rng=np.random.default_rng(0),
                rows=output_rows,
            )
        print("ok")
    except MemoryError:
        print("memory")


if __name__ == "__main__":
    main()
