"""Issue 24 §1: whether a job fits the memory limit must not tell an analyst the row count.

A worker's pool process with its real address-space limit (workers/limits.py) runs the same
``independent`` job on two tables of one schema, 1,000 rows and 80 M rows (640 MB of codes, more
than the 400 MB limit), at every output size the submission's check accepts up to its cap. With
the job's input allowance (app/jobs/limits.py, added by app/jobs/execution.py around the run)
both end the same way at every size; without it, the large table ran out of memory at every size
while the small one succeeded (measured before the fix; the last test keeps that contrast).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.config import Settings
from app.jobs.limits import input_allowance_bytes
from app.jobs.resources import output_rows_limit
from engine.mechanisms import get_mechanism
from tests.workers._memory_child import DOMAIN

LIMIT_MB = 400
SMALL, LARGE = 1_000, 80_000_000
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/statm").exists(), reason="needs Linux's address-space limit"
)


def _outcome(table_rows: int, output_rows: int, *, allowance: bool) -> str:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.workers._memory_child",
            str(LIMIT_MB),
            str(table_rows),
            str(output_rows),
            "1" if allowance else "0",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=240,
        check=True,
    )
    return done.stdout.strip()


def _accepted_rows() -> list[int]:
    mechanism = get_mechanism("independent")
    settings = Settings().model_copy(update={"job_memory_limit_mb": LIMIT_MB})
    cap = output_rows_limit(settings, mechanism, DOMAIN, mechanism.validate_params({}))
    assert cap > 1000
    return [1000, cap // 2, cap]


def test_the_outcome_does_not_depend_on_the_table() -> None:
    for rows in _accepted_rows():
        small = _outcome(SMALL, rows, allowance=True)
        large = _outcome(LARGE, rows, allowance=True)
        assert small == large == "ok", (rows, small, large)


def test_without_the_allowance_the_large_table_tells() -> None:
    # The contrast the allowance closes: the table alone passes the plain limit.
    assert input_allowance_bytes(LARGE, len(DOMAIN), 1) > LARGE * len(DOMAIN)
    rows = _accepted_rows()[-1]
    assert _outcome(SMALL, rows, allowance=False) == "ok"
    assert _outcome(LARGE, rows, allowance=False) == "memory"
