"""How much of a raw table's budget discovery should take: end-to-end fidelity at several shares.

For each raw table, method and ε, rhosynth's whole pipeline (the draft accepted as is, discovery,
the method, decoding: benchmarks/raw_fidelity.py's ``rhosynth_child``) with discovery given each
share of the dataset's ρ in turn (``discovery_rho`` = share · ρ; the method gets the rest), scored
with raw_fidelity's metrics (worst column's share of values outside the real range, mean KS, mean
category TVD, mean 2-way TVD on real deciles, Spearman difference), averaged over ``--repeats``
runs. The service's default share (engine/discovery/plan.py ``DEFAULT_DISCOVERY_SHARE``) was
chosen from this section.

    python -m benchmarks.discovery_share --data ../shared/data/raw --update docs/benchmarks.md

DP noise comes from the OS CSPRNG (fresh each run); seeds drive post-processing only.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path

import numpy as np

import engine.discovery.plan as plan
from benchmarks import raw_fidelity as rf
from benchmarks.sections import git_commit, markdown_table, update_or_print

HEADING = "## Discovery share of the budget"
RUNS = (
    ("diamonds", "mst", 1.0),
    ("diamonds", "aim", 1.0),
    ("flights", "mst", 1.0),
    ("loans", "mst", 1.0),
    ("loans", "mst", 0.3),
)


@dataclass
class Score:
    worst_outside: float
    ks: float
    category_tvd: float
    pair_tvd: float
    spearman: float


def score(table: str, method: str, epsilon: float, share: Fraction, seed: int, data: Path) -> Score:
    path = data / f"{table}.csv"
    kinds = rf.draft_kinds(path)
    names = [k.name for k in kinds.columns]
    real = rf.canonical(rf.read_raw(path, names, kinds.missing_values), kinds.columns)
    original = plan.DEFAULT_DISCOVERY_SHARE
    plan.DEFAULT_DISCOVERY_SHARE = share
    try:
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "release.parquet"
            spec = {
                "data": str(path),
                "method": method,
                "epsilon": epsilon,
                "seed": seed,
                "out": str(out),
                "meta": str(out) + ".json",
            }
            rf.rhosynth_child(spec)
            synth = rf.read_synthetic(out, kinds.columns)
    finally:
        plan.DEFAULT_DISCOVERY_SHARE = original
    found = rf.fidelity(real, synth, kinds.columns)
    categories = list(found.category_tvd.values())
    return Score(
        max(found.outside.values(), default=0.0),
        float(np.mean(list(found.ks.values()))),
        float(np.mean(categories)) if categories else float("nan"),
        float(found.pair_tvd or 0.0),
        float(found.correlation_diff or 0.0),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="../shared/data/raw")
    parser.add_argument("--shares", default="1/10,1/5,3/10")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--update", type=Path)
    args = parser.parse_args(argv)
    command = "python -m benchmarks.discovery_share " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    shares = [Fraction(s) for s in args.shares.split(",")]
    rows = []
    for table, method, epsilon in RUNS:
        for share in shares:
            scores = [
                score(table, method, epsilon, share, seed, args.data)
                for seed in range(1, args.repeats + 1)
            ]
            row = [
                table,
                method,
                f"{epsilon:g}",
                f"{float(share):.0%}",
                f"{np.mean([s.worst_outside for s in scores]):.1%} "
                f"(max {max(s.worst_outside for s in scores):.1%})",
                f"{np.mean([s.ks for s in scores]):.4f}",
                f"{np.mean([s.category_tvd for s in scores]):.4f}",
                f"{np.mean([s.pair_tvd for s in scores]):.4f}",
                f"{np.mean([s.spearman for s in scores]):.4f}",
            ]
            print(row, file=sys.stderr, flush=True)
            rows.append(row)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {now}, commit `{git_commit(Path.cwd(), length=7)}`, 2 CPUs. "
        'rhosynth\'s whole pipeline as in "Raw-table fidelity" (the draft as is, (ε, 1e-6) in '
        "all, default method parameters), with discovery given each share of ρ and the method "
        f"the rest; raw_fidelity's metrics, averaged over {args.repeats} runs (fresh DP noise "
        "each). The default share is 20 %: on every table and method measured it gave equal or "
        "better 2-way TVD and better KS and category TVD than 10 %.",
        "",
        *markdown_table(
            [
                "table",
                "method",
                "ε",
                "discovery share",
                "worst outside",
                "mean KS",
                "category TVD",
                "2-way TVD",
                "Spearman diff",
            ],
            rows,
            "lllrrrrrr",
        ),
    ]
    section = "\n".join(lines) + "\n"
    update_or_print(args.update, HEADING, section)


if __name__ == "__main__":
    main()
