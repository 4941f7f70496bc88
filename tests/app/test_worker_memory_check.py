"""A worker that cannot give each job process the memory the API promised refuses to start
(review of issue 11: it used to lower its limit with a warning, so jobs the API accepted by their
estimates could fail after the charge)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.jobs.limits import physical_memory_mb
from tests.support.stack import REPO


def _worker(tmp_path: Path, concurrency: int, limit_mb: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHOSYNTH_")}
    env.update({"RHOSYNTH_HOME": str(tmp_path), "RHOSYNTH_JOB_MEMORY_LIMIT_MB": str(limit_mb)})
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", f"--concurrency={concurrency}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_worker_too_small_for_the_limit_refuses_to_start(tmp_path: Path) -> None:
    total = physical_memory_mb()
    assert total is not None
    # Four job processes of the whole machine's memory each cannot fit in 80 % of it.
    result = _worker(tmp_path, concurrency=4, limit_mb=total)
    assert result.returncode != 0
    assert "RHOSYNTH_JOB_MEMORY_LIMIT_MB" in result.stderr
    assert "at most" in result.stderr
