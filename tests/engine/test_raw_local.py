"""Issue 12 locally: `rhosynth schema draft` then `rhosynth synthesize` on the raw fixture, the
draft accepted as is; discovery comes out of the same budget and the release keeps the types."""

from __future__ import annotations

import csv
import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from app.cli import main

RAW = Path(__file__).resolve().parents[1] / "fixtures" / "raw-small.csv"


def test_draft_then_synthesize_without_edits(tmp_path: Path) -> None:
    runner = CliRunner()
    drafted = runner.invoke(main, ["schema", "draft", str(RAW)])
    assert drafted.exit_code == 0, drafted.output
    schema_path = tmp_path / "schema.json"
    schema_path.write_text(drafted.stdout)
    schema = json.loads(drafted.stdout)
    out = tmp_path / "release.parquet"
    args = ["synthesize", str(RAW), "--schema", str(schema_path), "--method", "aim"]
    args += ["--rho", "100", "--discovery-delta", "0.000001", "--rows", "2000", "--seed", "4"]
    args += ["--param", "rounds=11", "--param", "round_iterations=30", "--param", "iterations=100"]
    result = runner.invoke(main, [*args, "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    # A fifth of ρ: the noisy row count, then 9 clauses by weight (each rounded down to 1e-12;
    # at 200 rows none is capped by need); all of the δ to the open sets. The method gets the rest.
    found = re.search(r"discovery: rho=([0-9.]+), delta=1e-06", result.stderr)
    assert found is not None, result.stderr
    discovery = Decimal(found.group(1))
    assert Decimal("19.99999999999") <= discovery <= Decimal(20)
    assert f"aim: rho={Decimal(100) - discovery}," in result.stderr
    table = pq.read_table(out)
    kinds = {c["name"]: c["type"] for c in schema["columns"]}
    assert table.schema.names == [n for n, k in kinds.items() if k != "ignore"]
    assert table.num_rows == 2000
    for field in table.schema:
        if kinds[field.name] == "date":
            assert field.type == pa.date32()
        elif kinds[field.name] == "boolean":
            assert field.type == pa.bool_()
    with open(RAW, newline="") as handle:
        identifiers = {row["id"] for row in csv.DictReader(handle)}
    flat = json.dumps(table.to_pydict(), default=str)
    assert not any(identifier in flat for identifier in identifiers)


def test_open_sets_need_a_discovery_delta(tmp_path: Path) -> None:
    runner = CliRunner()
    schema_path = tmp_path / "schema.json"
    schema_path.write_text(runner.invoke(main, ["schema", "draft", str(RAW)]).stdout)
    args = ["synthesize", str(RAW), "--schema", str(schema_path), "--method", "independent"]
    result = runner.invoke(main, [*args, "--rho", "1", "--out", str(tmp_path / "o.csv")])
    assert result.exit_code != 0
    assert "--discovery-delta" in result.output
