"""``rhosynth synthesize`` honours a schema's privacy unit (issue 28 §1): at most k rows per
person are kept, the run is stated per person, and the unit's column is in no output."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
from click.testing import CliRunner

from app.cli import main
from engine.release.record import ReleaseRecord


def test_synthesize_keeps_k_rows_per_person_and_writes_no_unit(tmp_path: Path) -> None:
    rng = random.Random(2)
    rows = [
        {"person": f"~p{rng.randrange(60):03d}~", "age": rng.randint(0, 99),
         "city": rng.choice("abc")}
        for _ in range(600)
    ]  # fmt: skip
    data = tmp_path / "visits.csv"
    pd.DataFrame(rows).to_csv(data, index=False)
    schema = tmp_path / "schema.json"
    schema.write_text(
        json.dumps(
            {
                "columns": [
                    {"name": "person", "type": "categorical", "categories": ["x"]},
                    {"name": "age", "type": "numeric", "min": 0, "max": 100, "bins": 5},
                    {"name": "city", "type": "categorical", "categories": ["a", "b", "c"]},
                ],
                "privacy_unit": {"column": "person", "max_rows": 3},
            }
        )
    )
    out, model, record = tmp_path / "out.csv", tmp_path / "model.npz", tmp_path / "record.json"
    result = CliRunner().invoke(
        main,
        ["synthesize", str(data), "--schema", str(schema), "--method", "independent",
         "--rho", "1", "--seed", "1", "--out", str(out), "--save-model", str(model),
         "--save-record", str(record)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "rho=1 per person, at most 3 rows" in result.output
    assert "privacy unit: at most 3 rows per person kept" in result.output
    assert "units" in result.output and "(exact, for you only: not DP)" in result.output
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["age", "city"]
    # About 60 × 3 = 180 rows are kept (the noisy row count is what is synthesized).
    assert 100 < len(frame) < 260
    # The run itself is per person: every measurement's noise is stated at sensitivity k = 3
    # (rho = k²/(2σ²)), not just the summary line.
    released = ReleaseRecord.from_bytes(record.read_bytes())
    assert released.marginals
    for marginal in released.marginals:
        assert 2 * marginal.rho * marginal.sigma2 == 9, marginal.attributes
    for path in (out, model, record):
        assert b"person" not in path.read_bytes() and b"~p0" not in path.read_bytes()
