"""Inner edges of a learned range: pure DP quantiles against the even quantile–uniform mixture.

For each raw table and method: the draft accepted as is, discovery under (ε, δ = 1e-6) as
raw_fidelity runs it, the method, decoding, then raw_fidelity's metrics, once per uniform share
of engine.discovery.learned (``UNIFORM_SHARE``: 0 is pure quantiles, the edges before issue 23's
tail fix; 0.5 is the default). Discovery and the method draw fresh DP noise in each run, so each
(table, method, share) is run ``--repeats`` times and every run is listed.

    python -m benchmarks.inner_edges --data ../shared/data/raw --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import raw_fidelity as rf
from benchmarks.inbin_coupling import pearson_diff, synthetic_codes
from benchmarks.sections import git_commit, markdown_table, update_or_print

HEADING = "## Inner edges: quantiles against the quantile–uniform mixture"


@dataclass
class Result:
    table: str
    method: str
    epsilon: float
    share: float
    repeat: int
    seconds: float
    metrics: dict[str, Any]
    pearson_diff: float
    ml_r2: float | None


def run_once(
    path: Path, method: str, epsilon: float, share: float, seed: int, repeat: int
) -> Result:
    """One draft → discovery → method → decode with ``UNIFORM_SHARE = share``, scored."""
    import engine.discovery.learned as learned
    from engine.tables.synthetic_output import write_synthetic

    kept = learned.UNIFORM_SHARE
    learned.UNIFORM_SHARE = share
    try:
        started = time.perf_counter()
        schema, codes = synthetic_codes(path, method, epsilon, seed)
        with tempfile.TemporaryDirectory() as scratch:
            file = Path(scratch) / "synthetic.parquet"
            write_synthetic(schema, codes, np.random.default_rng(seed), file, "parquet")
            seconds = time.perf_counter() - started
            kinds = rf.draft_kinds(path)
            synth = rf.read_synthetic(file, kinds.columns)
    finally:
        learned.UNIFORM_SHARE = kept
    real = rf.canonical(
        rf.read_raw(path, [c.name for c in kinds.columns], kinds.missing_values), kinds.columns
    )
    target = rf.TARGETS.get(path.stem)
    metrics = rf.fidelity(real, synth, kinds.columns).summary()
    ml = rf.ml_efficacy(real, synth, kinds.columns, target) if target else None
    print(f"[inner_edges] {path.stem} {method} share={share:g} #{repeat}: done", file=sys.stderr)
    return Result(
        path.stem,
        method,
        epsilon,
        share,
        repeat,
        seconds,
        metrics,
        pearson_diff(real, synth, kinds.columns),
        ml,
    )


def render(results: Sequence[Result], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit `{git_commit(length=7)}`, {rf.machine()}. The draft accepted as is, "
        'discovery and the method under (ε, 1e-6) as in "Raw-table fidelity", then decoding; '
        "*share* is the weight of the uniform distribution over the range's fine cells in the "
        "mixture whose k-quantiles are a learned range's inner edges "
        "(engine/discovery/learned.py, `UNIFORM_SHARE`): 0 = the CDF's quantiles (before), "
        "0.5 = the default. Each run draws fresh DP noise; every run is listed. Metrics as in "
        '"Raw-table fidelity"; *Pearson diff* as in "Values inside bins"; *s*: discovery, '
        "method and decoding.",
        "",
    ]
    header = ["table", "method", "ε", "share", "run", "KS", "Spearman diff", "Pearson diff"]
    header += ["2-way TVD", "worst outside", "ML R²", "s"]
    rows = [
        [
            r.table,
            r.method,
            f"{r.epsilon:g}",
            f"{r.share:g}",
            str(r.repeat),
            f"{r.metrics['ks_mean']:.4f}",
            f"{r.metrics['correlation_diff']:.4f}",
            f"{r.pearson_diff:.4f}",
            f"{r.metrics['pair_tvd']:.4f}",
            f"{100 * (r.metrics['outside_worst'] or 0.0):.1f} %",
            "–" if r.ml_r2 is None else f"{r.ml_r2:.3f}",
            f"{r.seconds:.1f}",
        ]
        for r in results
    ]
    lines += markdown_table(header, rows, "llrrrrrrrrrr")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the raw tables' directory")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--methods", default="mst")
    parser.add_argument("--shares", default="0,0.5")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--update", type=Path, default=None, help="rewrite this Markdown section")
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = parser.parse_args(raw)
    results = [
        run_once(args.data / f"{table}.csv", method, args.epsilon, share, args.seed + r, r + 1)
        for table in rf._csv(args.tables)
        for method in rf._csv(args.methods)
        for share in (float(s) for s in rf._csv(args.shares))
        for r in range(args.repeats)
    ]
    section = render(results, shlex.join(["python", "-m", "benchmarks.inner_edges", *raw]))
    update_or_print(args.update, HEADING, section)
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str))


if __name__ == "__main__":
    main()
