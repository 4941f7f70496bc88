"""AIM across ε (issue 15 §3): mean k-way TVD of ``aim`` per dataset and ε, with a per-round log.

Each run is a fresh child process (``python -m benchmarks.aim_epsilon --child SPEC``) that loads
one dataset, runs ``aim`` once and writes the synthetic codes; the child also records, per
adaptive round, the chosen marginal, its cells, σ, ρ of the round, whether the round annealed and
the model's size (by wrapping the functions ``engine.mechanisms.aim.mechanism`` calls; the engine
is not changed). The parent scores the output with the shared evaluator (mean 1/2/3-way TVD).

``--noise-seed S`` draws the DP noise from ``random.Random(S + run index)`` (reproducible
diagnostics; the same seeds before and after a change give paired runs); without it the noise
comes from the OS CSPRNG as in production.

    python -m benchmarks.aim_epsilon --data ../shared/data --datasets temporal-match2 \
        --epsilons 1 10 --repeats 2 --log
    python -m benchmarks.aim_epsilon --data ../shared/data --out docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from benchmarks.quality import (
    DELTA,
    BenchDataset,
    derive_seed,
    discover_datasets,
    evaluate,
    run_json_child,
)
from benchmarks.sections import replace_section

HEADING = "## AIM across ε (issue 15 §3)"
EPSILONS = (0.1, 1.0, 10.0)
CHILD_TIMEOUT_SECONDS = 6 * 3600  # loaded hosts: temporal-match2 at ε = 10 passed 1 h


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One ``aim`` run with a round log (see the module docstring)."""
    import random

    import numpy as np
    import pandas as pd

    import engine.mechanisms.aim.mechanism as aim_module
    from benchmarks._child import load_dataset
    from engine.mechanisms import get_mechanism

    schema, data = load_dataset(spec["csv"], spec["domain"])
    mechanism = get_mechanism("aim")
    params = mechanism.validate_params(spec["params"])
    rho = Fraction(Decimal(spec["rho"]))
    # A seeded noise source for reproducible diagnostics only (production uses the CSPRNG).
    seeded = spec["noise_seed"]
    noise_source = None if seeded is None else random.Random(seeded)  # noqa: S311

    rounds: list[dict[str, Any]] = []
    one_way_rho = Fraction(0)
    namespace = vars(aim_module)
    measure = namespace["measure_marginal"]
    fit = namespace["estimate"]
    state = {"one_ways_done": False}

    def logged_measure(data: Any, attrs: list[str], rho: Fraction, source: Any) -> Any:
        nonlocal one_way_rho
        m = measure(data, attrs, rho, source)
        if state["one_ways_done"]:
            rounds.append(
                {
                    "marginal": list(attrs),
                    "cells": int(m.noisy_counts.size),
                    "measure_rho": float(rho),
                    "sigma": math.sqrt(1 / (2 * float(rho))),
                }
            )
        else:
            one_way_rho += rho
        return m

    def logged_estimate(*args: Any, **kwargs: Any) -> Any:
        state["one_ways_done"] = True
        model = fit(*args, **kwargs)
        if rounds and "model_cells" not in rounds[-1]:
            rounds[-1]["model_cells"] = int(model.cells)
        return model

    namespace["measure_marginal"] = logged_measure
    namespace["estimate"] = logged_estimate
    rng = np.random.default_rng(int(spec["seed"]))
    started = time.perf_counter()
    result = mechanism.run(data, rho, params, rng=rng, noise_source=noise_source)
    seconds = time.perf_counter() - started
    for entry, selection in zip(rounds, result.selections, strict=True):
        entry["select_rho"] = float(selection.rho)
        entry["round_rho_share"] = (entry["select_rho"] + entry["measure_rho"]) / float(rho)
    for previous, entry in itertools.pairwise(rounds):
        previous["annealed"] = entry["measure_rho"] > previous["measure_rho"] * 3.5 and (
            entry["select_rho"] > previous["select_rho"] * 3.5
        )
    pd.DataFrame(np.asarray(result.codes), columns=list(schema.names)).to_csv(
        spec["out_csv"], index=False
    )
    return {
        "synthesis_seconds": seconds,
        "one_way_rho_share": float(one_way_rho / rho),
        "rounds": rounds,
        "rho_exact": sum((m.rho for m in result.measurements), Fraction(0))
        + sum((s.rho for s in result.selections), Fraction(0))
        == rho,
    }


def rho_of(epsilon: float) -> str:
    """ρ as benchmarks.quality derives it (decimal text, rounded down)."""
    from engine.accounting import rho_from_epsilon_delta

    return str(rho_from_epsilon_delta(Decimal(repr(epsilon)), Decimal(repr(DELTA))))


def run_one(
    dataset: BenchDataset,
    epsilon: float,
    repeat: int,
    params: dict[str, Any],
    noise_seed: int | None,
    evaluator: Path,
    work: Path,
) -> dict[str, Any]:
    rho = rho_of(epsilon)
    out_csv = work / f"{dataset.name}-{epsilon:g}-{repeat}.csv"
    spec = {
        "csv": str(dataset.csv),
        "domain": str(dataset.domain),
        "params": params,
        "rho": rho,
        "seed": derive_seed("aim-epsilon", dataset.name, epsilon, repeat),
        "noise_seed": None if noise_seed is None else noise_seed + repeat,
        "out_csv": str(out_csv),
    }
    answer = run_json_child(
        ["benchmarks.aim_epsilon", "--child"], spec, timeout=CHILD_TIMEOUT_SECONDS
    )
    scored, _ = evaluate(evaluator, dataset, out_csv, work / f"{out_csv.stem}.json")
    answer["tvd"] = {k: float(v["mean_tvd"]) for k, v in scored["ways"].items()}
    answer.update(
        dataset=dataset.name,
        epsilon=epsilon,
        repeat=repeat,
        params=params,
        noise_seed=spec["noise_seed"],
        load=loadavg(),
    )
    out_csv.unlink()
    return answer


def loadavg() -> str:
    try:
        return " / ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def print_rounds(run: dict[str, Any]) -> None:
    print(
        f"  one-ways: {run['one_way_rho_share']:.3f} of ρ; {len(run['rounds'])} rounds; "
        f"exact: {run['rho_exact']}",
        flush=True,
    )
    for i, r in enumerate(run["rounds"], 1):
        print(
            f"  {i:3d} {','.join(r['marginal']):<40s} cells {r['cells']:>7d} "
            f"σ {r['sigma']:9.3f} round {r['round_rho_share']:.4f} of ρ "
            f"{'ANNEAL' if r.get('annealed') else '      '} model {r.get('model_cells', 0)}",
            flush=True,
        )


def render(
    runs: list[dict[str, Any]],
    command: str,
    started: str,
    loads: tuple[str, str],
    notes: Sequence[str] = (),
) -> str:
    lines = [
        HEADING,
        "",
        f"- Date: {started} UTC. Command (from the repository root): `{command}`.",
        *(f"- {note}" for note in notes),
        f"- Load average (1 / 5 / 15 min) at start: {loads[0]}; at end: {loads[1]} (other "
        "sessions shared the 2 cores: seconds are noisy, compare within this table only).",
        "- `aim` with its default params; mean TVD over all k-way marginals from "
        "`/work/shared/bench/marginal_error.py` (`--max-way 3`); δ = 1e-9. Figures are the median "
        "over the runs, range in parentheses; rounds = adaptive rounds after the one-ways "
        "(anneals in parentheses).",
        "",
        "| dataset | ε | runs | 1-way | 2-way | 3-way | rounds (anneals) | synth s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    keys = sorted({(r["dataset"], r["epsilon"]) for r in runs})
    for name, epsilon in keys:
        cell = [r for r in runs if r["dataset"] == name and r["epsilon"] == epsilon]

        def fmt(values: list[float], digits: int = 4) -> str:
            median = statistics.median(values)
            if len(values) == 1:
                return f"{median:.{digits}f}"
            return f"{median:.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"

        ways = [fmt([r["tvd"][k] for r in cell]) for k in ("1", "2", "3")]
        n_rounds = statistics.median(len(r["rounds"]) for r in cell)
        anneals = statistics.median(sum(bool(x.get("annealed")) for x in r["rounds"]) for r in cell)
        seconds = fmt([r["synthesis_seconds"] for r in cell], 1)
        lines.append(
            f"| {name} | {epsilon:g} | {len(cell)} | {' | '.join(ways)} | "
            f"{n_rounds:g} ({anneals:g}) | {seconds} |"
        )
    lines.append("")
    lines.append("3-way TVD by ε (median), and whether it falls as ε grows:")
    lines.append("")
    for name in sorted({r["dataset"] for r in runs}):
        medians: list[tuple[float, float]] = []
        for epsilon in EPSILONS:
            values = [
                float(r["tvd"]["3"])
                for r in runs
                if r["dataset"] == name and r["epsilon"] == epsilon
            ]
            if values:
                medians.append((epsilon, statistics.median(values)))
        monotone = all(a[1] >= b[1] for a, b in itertools.pairwise(medians))
        text = " ≥ ".join(f"{v:.4f} (ε={e:g})" for e, v in medians)
        lines.append(f"- {name}: {text}: {'falls' if monotone else 'RISES'}")
    lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--evaluator", type=Path, help="default: DATA/../bench/marginal_error.py")
    parser.add_argument("--datasets", nargs="*")
    parser.add_argument("--epsilons", nargs="*", type=float, default=list(EPSILONS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--repeats-for", nargs="*", default=[], help="DATASET:EPSILON=N")
    parser.add_argument("--params", default="{}", help="aim params as JSON")
    parser.add_argument("--noise-seed", type=int)
    parser.add_argument("--log", action="store_true", help="print every round")
    parser.add_argument("--json", type=Path, help="append the raw runs here (JSON lines)")
    parser.add_argument("--out", type=Path, help="write the section into this markdown file")
    parser.add_argument(
        "--from-json",
        nargs="*",
        type=Path,
        default=[],
        help="render --out from these runs (JSON lines of --json) instead of running",
    )
    parser.add_argument(
        "--note", action="append", default=[], help="a line to add to the section's header"
    )
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child)), default=str))
        return 0
    if args.from_json:
        if args.out is None:
            parser.error("--from-json needs --out")
        runs: list[dict[str, Any]] = [
            json.loads(line)
            for path in args.from_json
            for line in path.read_text().splitlines()
            if line.strip()
        ]
        loads = (runs[0]["load"], runs[-1]["load"]) if runs else ("n/a", "n/a")
        write_section(args, runs, datetime.now(UTC).strftime("%Y-%m-%d %H:%M"), loads)
        return 0
    if args.data is None:
        parser.error("--data is required")
    evaluator = args.evaluator or args.data.resolve().parent / "bench" / "marginal_error.py"
    datasets = [
        d for d in discover_datasets(args.data) if not args.datasets or d.name in args.datasets
    ]
    extra = {}
    for item in args.repeats_for:
        key, _, count = item.partition("=")
        extra[key] = int(count)
    params = json.loads(args.params)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    load_start = loadavg()
    runs = []
    with tempfile.TemporaryDirectory(prefix="aim-epsilon-") as tmp:
        for dataset in datasets:
            for epsilon in args.epsilons:
                count = extra.get(f"{dataset.name}:{epsilon:g}", args.repeats)
                for repeat in range(count):
                    run = run_one(
                        dataset, epsilon, repeat, params, args.noise_seed, evaluator, Path(tmp)
                    )
                    runs.append(run)
                    tvd = run["tvd"]
                    print(
                        f"{dataset.name} ε={epsilon:g} #{repeat}: TVD {tvd['1']:.4f} "
                        f"{tvd['2']:.4f} {tvd['3']:.4f}; {len(run['rounds'])} rounds; "
                        f"synth {run['synthesis_seconds']:.1f} s; load {run['load']}",
                        flush=True,
                    )
                    if args.log:
                        print_rounds(run)
                    if args.json:
                        with args.json.open("a") as handle:
                            handle.write(json.dumps(run, default=str) + "\n")
    if args.out:
        write_section(args, runs, started, (load_start, loadavg()))
    return 0


def write_section(
    args: argparse.Namespace, runs: list[dict[str, Any]], started: str, loads: tuple[str, str]
) -> None:
    argv: list[str] = []
    skip = False
    for arg in sys.argv[1:]:
        if not skip and arg != "--note":
            argv.append(arg)
        skip = arg == "--note"
    command = "python -m benchmarks.aim_epsilon " + " ".join(argv)  # notes are listed below it
    section = render(runs, command, started, loads, args.note)
    document = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(replace_section(document, HEADING, section))


if __name__ == "__main__":
    raise SystemExit(main())
