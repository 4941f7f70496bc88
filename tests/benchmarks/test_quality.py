"""benchmarks.quality helpers that decide what runs (no benchmark is run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality import (
    BenchDataset,
    QualityReport,
    SynthesisRun,
    _render_targets,
    parse_repeats_for,
    refused,
)


def _dataset(tmp_path: Path, sizes: dict[str, int]) -> BenchDataset:
    domain = tmp_path / "t-domain.json"
    domain.write_text(json.dumps(sizes))
    return BenchDataset("t", tmp_path / "t.csv", domain, 10, len(sizes), max(sizes.values()))


def test_refused_gives_the_methods_own_reason(tmp_path: Path) -> None:
    big = _dataset(tmp_path, {f"c{i}": 100 for i in range(5)})
    reason = refused(big, "cipher", {})
    assert reason is not None and "max_cells = 4194304" in reason
    assert refused(big, "independent", {}) is None
    small = _dataset(tmp_path, {"a": 2, "b": 3})
    assert refused(small, "cipher", {}) is None
    assert refused(small, "cipher", {"max_cells": 5}) is not None


def test_parse_repeats_for() -> None:
    assert parse_repeats_for(["nltcs=1", "adult=3"]) == {"nltcs": 1, "adult": 3}
    assert parse_repeats_for(None) == {}
    for bad in (["nltcs"], ["=1"], ["nltcs=x"]):
        with pytest.raises(SystemExit):
            parse_repeats_for(bad)


def _run(dataset: str, method: str, epsilon: float, tvd: dict[str, float]) -> SynthesisRun:
    return SynthesisRun(
        dataset=dataset,
        method=method,
        epsilon=epsilon,
        rho="1",
        repeat=0,
        seed=0,
        load_seconds=0.1,
        synthesis_seconds=1.0,
        write_seconds=0.1,
        process_seconds=2.0,
        rows_out=10,
        rss_before_run_mib=100.0,
        peak_rss_mib=120.0,
        peak_is_run_only=True,
        tvd=tvd,
        evaluator_seconds=0.1,
    )


def test_targets_table_gives_verdicts_for_absolute_and_relative_targets() -> None:
    report = QualityReport(
        data_dir="d",
        evaluator="e",
        evaluator_sha256="0",
        datasets=[],
        methods=["privmrf", "dpcopula", "independent", "cipher"],
        method_params={},
        epsilons=[1.0],
        delta=1e-9,
        rhos={},
        repeats=1,
        runs=[
            _run("adult", "privmrf", 1.0, {"3": 0.085, "2": 0.04}),
            _run("adult", "dpcopula", 1.0, {"3": 0.11, "2": 0.05}),
            _run("adult", "independent", 1.0, {"3": 0.17, "2": 0.08}),
            _run("nltcs", "cipher", 1.0, {"3": 0.30, "2": 0.04}),
            _run("nltcs", "independent", 1.0, {"3": 0.25, "2": 0.16}),
        ],
    )
    rows = {line.split(" | ")[0].lstrip("| "): line for line in _render_targets(report)}
    assert "missed by 0.005" in rows["privmrf on adult: 3-way TVD"]
    assert "met" in rows["dpcopula on adult, ε = 1: 2-way TVD below independent's"]
    assert "met" in rows["cipher on nltcs, ε = 1: 2-way TVD below independent's"]
    assert "missed by 0.05" in rows["cipher on nltcs, ε = 1: 3-way TVD below independent's"]
    assert "not run" in rows["ppsyn on adult, ε = 0.1: 3-way TVD below mst's"]
