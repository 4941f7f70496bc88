"""What privacy per unit costs (issue 28 §1): one table released row-level and per unit of k rows.

A panel table holds several rows per unit (countymurders: one row per county and year, about 12
per county). Each release takes the draft accepted as is, with the unit's column declared as the
privacy unit (``{"privacy_unit": {"column": ..., "max_rows": k}}``) for each k, or ignored for the
row-level release, so that every release keeps the same columns. It runs ``rhosynth synthesize``
(the same discovery, truncation and method as an upload) at one (ε, δ), and scores the synthetic
values against the whole real table with benchmarks/raw_fidelity.py's metric function: what a
user sees, truncation's bias and the k-times larger noise together.

    python -m benchmarks.unseen_tables --out /work/exp/unseen
    python -m benchmarks.privacy_unit --data /work/exp/unseen --table countymurders \
        --unit countyid --ks 1,4,17 --methods mst,aim --seeds 1,2

Prints a Markdown table (docs/benchmarks.md, "Privacy per person").
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.raw_fidelity import (
    canonical,
    draft_kinds,
    fidelity,
    read_raw,
    read_synthetic,
)

RHOSYNTH = Path(sys.executable).with_name("rhosynth")


def schema_for(path: Path, unit: str, k: int | None) -> dict[str, object]:
    """The draft of ``path`` accepted as is, with ``unit`` as the privacy unit of at most ``k``
    rows (``None``: row-level, the unit's column ignored)."""
    from engine.schema_draft import draft_schema

    schema: dict[str, object] = draft_schema(path).to_json()
    columns = [dict(entry) for entry in schema["columns"]]  # type: ignore[attr-defined]
    for entry in columns:
        if entry["name"] == unit:
            entry.clear()
            entry.update({"name": unit, "type": "ignore"})
    schema["columns"] = columns
    if k is not None:
        schema["privacy_unit"] = {"column": unit, "max_rows": k}
    return schema


def kept_rows(path: Path, unit: str, k: int) -> int:
    """Rows a truncation to k per unit keeps (exact; each unit keeps min(its rows, k))."""
    counts = pd.read_csv(path, usecols=[unit], dtype=str)[unit].dropna().value_counts()
    return int(counts.clip(upper=k).sum())


def release(
    path: Path, schema: dict[str, object], method: str, epsilon: float, delta: float, seed: int
) -> tuple[Path, float, str]:
    work = Path(tempfile.mkdtemp(prefix="privacy-unit-"))
    schema_file = work / "schema.json"
    schema_file.write_text(json.dumps(schema))
    out = work / "synthetic.csv"
    command = [
        str(RHOSYNTH),
        "synthesize",
        str(path),
        "--schema",
        str(schema_file),
        "--method",
        method,
        "--epsilon",
        str(epsilon),
        "--delta",
        str(delta / 2),
        "--discovery-delta",
        str(delta / 2),
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--no-progress",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr}")
    said = [line for line in done.stderr.splitlines() if "privacy unit" in line]
    return out, seconds, said[0] if said else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--table", default="countymurders")
    parser.add_argument("--unit", default="countyid")
    parser.add_argument("--ks", default="1,4,17")
    parser.add_argument("--methods", default="mst,aim")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--seeds", default="1")
    args = parser.parse_args(argv)

    path = args.data / f"{args.table}.csv"
    kinds_all = draft_kinds(path)
    kinds = replace(
        kinds_all, columns=tuple(c for c in kinds_all.columns if c.name != args.unit)
    ).columns
    real = canonical(read_raw(path, [c.name for c in kinds], kinds_all.missing_values), kinds)
    levels: list[int | None] = [None, *(int(k) for k in args.ks.split(","))]
    print(
        "| method | privacy | rows kept | worst column outside | mean KS | 2-way TVD "
        "| Spearman diff | s |"
    )
    print("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for method in args.methods.split(","):
        for k in levels:
            scores = []
            for seed in (int(s) for s in args.seeds.split(",")):
                out, seconds, _ = release(
                    path, schema_for(path, args.unit, k), method, args.epsilon, args.delta, seed
                )
                synth = read_synthetic(out, kinds)
                scores.append((fidelity(real, synth, kinds), seconds))
            worst = max(scores, key=lambda s: max(s[0].outside.values()))[0]
            column = max(worst.outside, key=lambda name: worst.outside[name])
            mean = lambda values: sum(values) / len(values)  # noqa: E731
            ks = mean([mean(list(f.ks.values())) for f, _ in scores])
            pair = mean([f.pair_tvd for f, _ in scores])
            spearman = mean([f.correlation_diff for f, _ in scores])
            seconds = mean([s for _, s in scores])
            rows_word = "row" if k == 1 else "rows"
            label = "per row" if k is None else f"per {args.unit}, at most {k} {rows_word}"
            rows = len(real) if k is None else kept_rows(path, args.unit, k)
            print(
                f"| {method} | {label} | {rows:,} | {100 * worst.outside[column]:.1f} % "
                f"(`{column}`) | {ks:.3f} | {pair:.3f} | {spearman:.3f} | {seconds:.1f} |"
            )


if __name__ == "__main__":
    main()
