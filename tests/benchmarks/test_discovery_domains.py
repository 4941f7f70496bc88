"""benchmarks/discovery_domains.py's paired mode: seeded discovery noise, compared per column."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import discovery_domains

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_paired_runs_draw_the_same_noise_and_compare_reports_only_changes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same seeds give the same learned domains (so two versions of discovery differ only
    where their decisions do), and the comparison names a changed column with its counts."""
    first = discovery_domains.paired(FIXTURES, ["raw-small"], 1.0, 2)
    again = discovery_domains.paired(FIXTURES, ["raw-small"], 1.0, 2)
    assert first and first == again
    assert all(len(values) == 2 for values in first.values())
    key = next(iter(first))
    changed = {**first, key: [first[key][0] + 0.1, first[key][1]]}
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(first))
    after.write_text(json.dumps(changed))
    discovery_domains.main(["--compare", str(before), str(after)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{key}: ") and "changed in 1 of 2 runs: 1 worse, 0 better" in out[0]
    assert [line for line in out if line.startswith(f"{key}:")] == [out[0]]  # nothing else
    assert out[-1].startswith("raw-small: mean decode KS ")
