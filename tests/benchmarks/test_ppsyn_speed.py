"""benchmarks/ppsyn_speed.py: cell parsing and the rendered section (no runs)."""

from __future__ import annotations

import pytest

from benchmarks.ppsyn_speed import HEADING, parse_cells, render


def test_cells_keep_the_order_given() -> None:
    assert parse_cells(["adult:0.1,10", "titanic:1"]) == [
        ("adult", 0.1),
        ("adult", 10.0),
        ("titanic", 1.0),
    ]
    with pytest.raises(SystemExit):
        parse_cells(["adult"])


def _run(seconds: float, cpu: float, tvd3: float) -> dict[str, object]:
    return {
        "process_seconds": seconds,
        "cpu_seconds": cpu,
        "load_before": "1.00 / 1.00 / 1.00",
        "tvd": {"3": tvd3},
    }


def test_ratio_and_verdict_per_cell() -> None:
    report = {
        "command": "python -m benchmarks.ppsyn_speed …",
        "started": "2026-11-26 16:00 UTC",
        "finished": "2026-11-26 17:00 UTC",
        "commit": "abc",
        "reference_commit": "def",
        "cells": [
            {
                "dataset": "adult",
                "epsilon": 1.0,
                "runs": {"aim": _run(10, 8, 0.08), "ppsyn": _run(25, 20, 0.078)},
            },
            {
                "dataset": "adult",
                "epsilon": 10.0,
                "runs": {"aim": _run(10, 8, 0.05), "ppsyn": _run(31, 30, 0.05)},
            },
            {
                "dataset": "titanic",
                "epsilon": 1.0,
                "runs": {"aim": {"error": "boom"}, "ppsyn": _run(2, 2, 0.2)},
            },
        ],
    }
    text = render([report], {"titanic:1": "2.6 0.2655 (1.9× aim)"})
    assert text.startswith(HEADING)
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| adult") or line.startswith("| titanic")
    ]
    assert "| 2.50 | 2.50 | yes |" in rows[0]
    assert "| 3.10 | 3.75 | **no** |" in rows[1]
    assert "| — | — | — |" in rows[2] and "2.6 0.2655 (1.9× aim)" in rows[2]
