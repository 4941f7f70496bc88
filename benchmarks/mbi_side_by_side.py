"""rhosynth's `aim` and mbi 2.0's AIM on the same discovered codes (issue 25: side by side).

For each table and ε: the codes and domain written by benchmarks.export_codes (a raw table's
draft accepted as is, then discovery: the codes a dataset stores), then both systems at the same
ρ (ε and δ = 1e-9; each system converts them itself, to the same ρ) on the same workload: every
``degree``-way marginal with at most ``max_cells`` cells (rhosynth's ``max_workload_cells``;
mbi's ``--max-cells``), otherwise each system's defaults. rhosynth runs ``--ours`` times (fresh
DP noise each run, from the OS CSPRNG as in the service), mbi ``--theirs`` times (its runner's
numpy noise, seeds 0, 1, ...) in its own virtualenv under a time limit. Quality: mean 3-way TVD
against the codes (../shared/bench/marginal_error.py's definition, over at most 5,000 triples
as benchmarks.aim_profile does). Seconds are each run's wall time, one run at a time.

    python -m benchmarks.export_codes --data ../shared/data/raw --tables diamonds --epsilon 1 \\
        --out /tmp/codes
    python -m benchmarks.mbi_side_by_side --codes /tmp/codes --tables diamonds \\
        --epsilons 0.3,1,10 --mbi-python /work/peers/mbi/bin/python [--degree 2] \\
        [--update docs/benchmarks.md]

The ε of the export only decides the discovered domain (its bins and categories); the runs'
ρ is the ε given here, so a table exported once serves every ε.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import raw_fidelity as rf
from benchmarks.aim_profile import tvd3
from benchmarks.sections import git_commit, markdown_table, update_or_print

HEADING = "## AIM against mbi 2.0 on discovered codes (issue 25)"
REPO = Path(__file__).resolve().parent.parent
DELTA = 1e-9


def rho_of(epsilon: float) -> float:
    """ρ of (ε, δ = 1e-9) by rhosynth's conversion (engine.accounting); mbi's runner converts the
    same (ε, δ) by bisection on the same bound (CKS 2020): 0.014973 at ε = 1 in both."""
    from decimal import Decimal

    from engine.accounting import rho_from_epsilon_delta

    return float(rho_from_epsilon_delta(Decimal(str(epsilon)), Decimal(str(DELTA))))


@dataclass
class Side:
    system: str
    seconds: list[float] = field(default_factory=list)
    tvd: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def add(self, label: str, seconds: float, tvd: float) -> None:
        """One finished run, reported on stderr as it comes."""
        self.seconds.append(seconds)
        self.tvd.append(tvd)
        print(
            f"[side_by_side] {label} {self.system} {seconds:.1f} s {tvd:.4f}",
            file=sys.stderr,
            flush=True,
        )


@dataclass
class Pair:
    table: str
    epsilon: float
    rho: float
    columns: int
    ours: Side
    theirs: Side


def _load(codes_dir: Path, table: str) -> tuple[Any, np.ndarray, Path, Path]:
    from engine.domain import Domain

    data, domain_path = codes_dir / f"{table}.csv", codes_dir / f"{table}-domain.json"
    sizes: dict[str, int] = json.loads(domain_path.read_text())
    domain = Domain(tuple(sizes), tuple(sizes.values()))
    codes = np.loadtxt(data, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    return domain, codes, data, domain_path


def run_ours(
    domain: Any, codes: np.ndarray, rho: float, params: dict[str, Any], evaluator: Path
) -> tuple[float, float]:
    from engine.domain import Dataset
    from engine.mechanisms import MECHANISMS

    mechanism = MECHANISMS["aim"]
    started = time.perf_counter()
    result = mechanism.run(
        Dataset(domain, codes),
        Fraction(rho),
        mechanism.Params(**params),
        rng=np.random.default_rng(),
        rows=codes.shape[0],
    )
    seconds = time.perf_counter() - started
    return seconds, tvd3(evaluator, domain, codes, np.asarray(result.codes))


def run_theirs(
    mbi_python: Path,
    runner: Path,
    data: Path,
    domain_path: Path,
    epsilon: float,
    seed: int,
    args: argparse.Namespace,
    domain: Any,
    codes: np.ndarray,
) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "synthetic.csv"
        command = [
            str(mbi_python),
            str(runner),
            "--data",
            str(data),
            "--domain",
            str(domain_path),
            "--out",
            str(out),
            "--epsilon",
            str(epsilon),
            "--delta",
            str(DELTA),
            "--seed",
            str(seed),
            "--degree",
            str(args.degree),
            "--max-cells",
            str(args.max_cells),
        ]
        started = time.perf_counter()
        subprocess.run(  # noqa: S603 - the peer's runner, fixed arguments
            command,
            cwd=runner.parent,
            check=True,
            timeout=args.time_limit * 60,
            capture_output=True,
        )
        seconds = time.perf_counter() - started
        synthetic = np.loadtxt(out, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
        header = out.read_text().split("\n", 1)[0].split(",")
        order = [header.index(a) for a in domain.attributes]
        return seconds, tvd3(args.evaluator, domain, codes, synthetic[:, order])


def _spread(values: list[float], digits: int) -> str:
    if not values:
        return "n/a"
    mean = f"{statistics.fmean(values):.{digits}f}"
    if len(values) == 1:
        return mean
    return f"{mean} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def render(pairs: list[Pair], command: str, args: argparse.Namespace) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit `{git_commit(length=7)}`. Workload of both: every {args.degree}-way marginal "
        f"with at most {args.max_cells:,} cells. Means over the runs, range in brackets; "
        "*speed-up* is mbi's mean seconds over rhosynth's; *TVD ratio* rhosynth's mean 3-way TVD "
        "over mbi's (below 1: rhosynth more accurate).",
        "",
    ]
    header = [
        "table",
        "ε",
        "ρ",
        "rhosynth runs",
        "rhosynth s",
        "rhosynth 3-way TVD",
        "mbi runs",
        "mbi s",
        "mbi 3-way TVD",
        "speed-up",
        "TVD ratio",
    ]
    rows = []
    for p in pairs:
        ours, theirs = p.ours, p.theirs
        speed = (
            f"{statistics.fmean(theirs.seconds) / statistics.fmean(ours.seconds):.1f}×"
            if ours.seconds and theirs.seconds
            else "n/a"
        )
        ratio = (
            f"{statistics.fmean(ours.tvd) / statistics.fmean(theirs.tvd):.3f}"
            if ours.tvd and theirs.tvd
            else "n/a"
        )
        rows.append(
            [
                f"{p.table} ({p.columns} columns)",
                f"{p.epsilon:g}",
                f"{p.rho:.6g}",
                str(len(ours.tvd)),
                _spread(ours.seconds, 1),
                _spread(ours.tvd, 4),
                str(len(theirs.tvd))
                + (f" ({len(theirs.failures)} stopped)" if theirs.failures else ""),
                _spread(theirs.seconds, 1),
                _spread(theirs.tvd, 4),
                speed,
                ratio,
            ]
        )
    lines += markdown_table(header, rows, "lrrrrrrrrrr")
    stopped = [f"{p.table} ε = {p.epsilon:g}: {f}" for p in pairs for f in p.theirs.failures]
    if stopped:
        lines += ["", "mbi runs that did not finish: " + "; ".join(stopped) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codes", type=Path, required=True, help="benchmarks.export_codes' --out")
    parser.add_argument("--tables", default="diamonds")
    parser.add_argument("--epsilons", default="0.3,1,10")
    parser.add_argument("--degree", type=int, default=2)
    parser.add_argument("--max-cells", type=int, default=10_000)
    parser.add_argument("--ours", type=int, default=3, help="rhosynth runs per cell")
    parser.add_argument("--theirs", type=int, default=1, help="mbi runs per cell")
    parser.add_argument("--mbi-python", type=Path, required=True)
    parser.add_argument(
        "--runner", type=Path, default=REPO.parent / "shared/bench/peers/run_mbi2_aim.py"
    )
    parser.add_argument(
        "--evaluator", type=Path, default=REPO.parent / "shared/bench/marginal_error.py"
    )
    parser.add_argument("--time-limit", type=float, default=30.0, help="minutes per mbi run")
    parser.add_argument("--update", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(raw)
    params = {"degree": args.degree, "max_workload_cells": args.max_cells}
    pairs = []
    for table in rf._csv(args.tables):
        domain, codes, data, domain_path = _load(args.codes, table)
        for epsilon in (float(e) for e in rf._csv(args.epsilons)):
            rho = rho_of(epsilon)
            pair = Pair(table, epsilon, rho, len(domain), Side("rhosynth"), Side("mbi"))
            label = f"{table} ε={epsilon:g}"
            for _ in range(args.ours):
                pair.ours.add(label, *run_ours(domain, codes, rho, params, args.evaluator))
            for seed in range(args.theirs):
                try:
                    run = run_theirs(
                        args.mbi_python,
                        args.runner,
                        data,
                        domain_path,
                        epsilon,
                        seed,
                        args,
                        domain,
                        codes,
                    )
                except subprocess.TimeoutExpired:
                    pair.theirs.failures.append(f"stopped after {args.time_limit:g} min")
                    print(f"[side_by_side] {label} mbi stopped", file=sys.stderr)
                    continue
                pair.theirs.add(label, *run)
            pairs.append(pair)
            if args.json is not None:
                args.json.write_text(json.dumps([asdict(p) for p in pairs], indent=1))
    command = shlex.join(["python", "-m", "benchmarks.mbi_side_by_side", *raw])
    update_or_print(args.update, HEADING, render(pairs, command, args))


if __name__ == "__main__":
    main()
