"""benchmarks.quality helpers that decide what runs (no benchmark is run here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality import BenchDataset, parse_repeats_for, refused


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
