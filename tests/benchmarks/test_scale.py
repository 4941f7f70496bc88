"""The pure parts of benchmarks/scale.py: tiling a CSV, phase selection, the ratio table."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from benchmarks.scale import (
    HEADING,
    parse_only,
    phase_key,
    ratio,
    ratio_rows,
    render,
    selected,
    tile_csv,
)
from benchmarks.sections import current_section, replace_section

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_tiling_repeats_the_rows_under_one_header_and_keeps_the_values(tmp_path: Path) -> None:
    source = FIXTURES / "adult-sample.csv"
    original = pd.read_csv(source)
    target = tmp_path / "x3.csv"
    assert tile_csv(source, 3, target) == 3 * len(original)
    tiled = pd.read_csv(target)
    assert list(tiled.columns) == list(original.columns)
    pd.testing.assert_frame_equal(tiled, pd.concat([original] * 3, ignore_index=True))
    assert not target.with_name("x3.csv.part").exists()


def test_tiling_a_file_without_a_final_newline_does_not_join_rows(tmp_path: Path) -> None:
    source = tmp_path / "t.csv"
    source.write_bytes(b"a,b\n1,2\n3,4")
    target = tmp_path / "t2.csv"
    assert tile_csv(source, 2, target) == 4
    assert target.read_bytes() == b"a,b\n1,2\n3,4\n1,2\n3,4\n"
    with pytest.raises(ValueError):
        tile_csv(source, 0, target)


def test_phase_keys_and_only_selection() -> None:
    assert phase_key(205, "aim", "service") == "k=205/method=aim/phase=service/rows=default"
    assert phase_key(205, "mst", "cli", 48842) == "k=205/method=mst/phase=cli/rows=48842"
    assert phase_key(10, None, "upload") == "k=10/phase=upload"
    assert phase_key(10, "mst", "mbi") == "k=10/method=mst/phase=mbi"
    only = parse_only(["k=205", "method=aim", "phase=service,upload"])
    assert only == {"k": {"205"}, "method": {"aim"}, "phase": {"service", "upload"}}
    assert selected(phase_key(205, "aim", "service"), only)
    assert selected(phase_key(205, None, "upload"), only)  # an upload has no method
    assert not selected(phase_key(205, "mst", "service"), only)
    assert not selected(phase_key(40, "aim", "service"), only)
    assert not selected(phase_key(205, "aim", "mbi"), only)
    assert selected(phase_key(1, "mst", "cli"), {})
    with pytest.raises(ValueError):
        parse_only(["size=3"])


def test_ratio_text() -> None:
    assert ratio(30.0, 60.0) == "0.50×"
    assert ratio(90.0, 60.0) == "1.50×"
    assert ratio(None, 60.0) == "–"
    assert ratio(1.0, None) == "–"
    assert ratio(1.0, 0.0) == "–"


RESULTS = {
    phase_key(205, "mst", "cli"): {"wall_seconds": 40.0, "cpu_seconds": 20.0, "peak_mb": 1000.0,
                                   "finished": True,
                                   "rows_out": 10_000_000, "tvd3": 0.05},
    phase_key(205, "mst", "service"): {"job_seconds": 50.0, "worker_peak_mb": 2000.0,
                                       "status": "succeeded", "rows_out": 10_000_000},
    phase_key(205, "mst", "mbi"): {"wall_seconds": 80.0, "cpu_seconds": 80.0, "peak_mb": 4000.0,
                                   "finished": True,
                                   "tvd3": 0.04},
    phase_key(205, "aim", "mbi"): {"wall_seconds": 1800.0, "finished": False,
                                   "cap_seconds": 1800.0},
    phase_key(205, None, "upload"): {"upload_seconds": 70.0, "api_peak_mb": 500.0,
                                     "bytes": 310_204_100, "status": 201},
}  # fmt: skip


def test_ratio_rows_are_ours_over_mbi_and_a_capped_run_has_no_ratio() -> None:
    rows = ratio_rows(RESULTS, [205], ["mst", "aim"])
    mst, aim = rows
    assert mst[:2] == ["×205", "mst"]
    assert mst[2] == "40.0 s (20.0 s CPU), 1,000 MB"
    assert mst[5] == "0.50× / 0.25× / 0.25×"  # CLI / mbi: 40/80 s, 20/80 s CPU, 1000/4000 MB
    assert mst[6] == "0.62× / – / 0.50×"  # service job / mbi: 50/80 s, no CPU, 2000/4000 MB
    assert mst[7] == "0.050 / – / 0.040"
    assert aim[4] == "did not finish in 30.0 min"
    assert aim[5] == "– / – / –"
    assert ratio_rows(RESULTS, [1], ["mst"]) == []


def test_the_section_states_targets_and_replaces_only_itself() -> None:
    document = {"machine": {"cpu": "Test CPU", "cores": 2, "ram_mb": 2048.0}, "results": RESULTS}
    section = render(document)
    assert section.startswith(HEADING + "\n")
    assert "Test CPU, 2 cores, 2.0 GiB RAM" in section
    assert "| upload ≤ 60 s | 70.0 s | **not met** | CPU – |" in section
    assert "| API peak ≤ 600 MB (upload) | 500 MB | met |  |" in section
    assert "| mst, rows = default: job ≤ 60.0 s | 50.0 s | met | CPU – |" in section
    doc = "# Benchmarks\n\n## Other\n\nkept\n"
    written = replace_section(doc, HEADING, section)
    assert current_section(written, "## Other") == "## Other\n\nkept\n\n"
    assert current_section(written, HEADING).startswith(HEADING)


def test_a_child_s_peak_is_its_own_not_the_driver_s(tmp_path: Path) -> None:
    """Linux carries maxrss across exec: a small child of a large driver reported the driver's
    RSS as its ru_maxrss. The peak is read from the child's own VmHWM instead."""
    import sys

    import numpy as np

    from benchmarks.scale import run_child

    held = np.ones(300 * 2**20 // 8)  # the driver holds 300 MiB while the child runs
    result = run_child(
        [sys.executable, "-c", "import time; time.sleep(0.3)"], log=tmp_path / "child.log"
    )
    assert result["finished"]
    assert result["ru_maxrss_mb"] > 300  # what wait4 says
    assert result["peak_mb"] < 100  # a bare interpreter
    del held
