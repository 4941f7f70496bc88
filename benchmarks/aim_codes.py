"""`aim` (or another method) on a table's exported codes, with its time split and 3-way TVD.

Runs ``Mechanism.run`` of `aim` on codes written by ``benchmarks.export_codes`` (``<table>.csv``
and ``<table>-domain.json`` under ``--codes``), at ρ of (ε, δ = 1e-9), DP noise from
``random.Random(seed)`` so that settings compare on the same noise, and prints one JSON line per
run: seconds of ``Mechanism.run``, measurements, the number and seconds of the fits after the
rounds (or batches of rounds) and of the final fit, the final model's cells and iterations, and
the mean 3-way TVD (``benchmarks.aim_profile.tvd3``: at most 2,000 sampled triples).

``python -m benchmarks.aim_codes --codes /work/exp/codes --table wide200 --epsilon 1 --seeds 1 2 3
[--params '{"picks_per_fit": 1}'] [--evaluator ../shared/bench/marginal_error.py]``

``--method ppsyn`` (or any method of ``engine.mechanisms.MECHANISMS``, ``aim`` included) runs that
method the same way (same ρ, same seeded noise, same TVD), without the per-fit split, and also
gives the process CPU seconds of ``Mechanism.run`` (``time.process_time``, all threads of the
process), which another process sharing the machine inflates much less than the wall seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.aim_profile import profile, tvd3
from benchmarks.mbi_side_by_side import _load, rho_of


class _Schema:
    """What ``aim_profile.profile`` asks of a schema: its domain."""

    def __init__(self, domain: Any) -> None:
        self._domain = domain

    def domain(self) -> Any:
        return self._domain


def run_method(
    method: str,
    domain: Any,
    codes: np.ndarray,
    rho: Fraction,
    params: dict[str, Any],
    seed: int,
    evaluator: Path,
) -> dict[str, Any]:
    """One seeded run of ``method``: wall and CPU seconds of ``Mechanism.run``, measurements,
    3-way TVD (noise from ``random.Random(seed)``, benchmark noise, never the service's)."""
    from engine.domain import Dataset
    from engine.mechanisms import MECHANISMS

    mechanism = MECHANISMS[method]
    wall, cpu = time.perf_counter(), time.process_time()
    result = mechanism.run(
        Dataset(domain, codes),
        rho,
        mechanism.Params(**params),
        rng=np.random.default_rng(seed),
        rows=codes.shape[0],
        noise_source=random.Random(seed),  # noqa: S311 - benchmark noise, never the service's
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"[aim_codes] {method}: {wall:.1f} s, {cpu:.1f} CPU s", file=sys.stderr, flush=True)
    return {
        "seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "measurements": len(result.measurements),
        "tvd3": round(tvd3(evaluator, domain, np.asarray(codes), np.asarray(result.codes)), 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--codes", type=Path, required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument(
        "--method", default=None, help="run this method plainly (default: aim with its fit split)"
    )
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--params", type=json.loads, default={})
    parser.add_argument("--evaluator", type=Path, default=Path("../shared/bench/marginal_error.py"))
    args = parser.parse_args(argv)
    domain, codes, _, _ = _load(args.codes, args.table)
    rho = Fraction(rho_of(args.epsilon))
    for seed in args.seeds:
        if args.method is not None:
            head = {"method": args.method, "table": args.table, "epsilon": args.epsilon}
            found = run_method(args.method, domain, codes, rho, args.params, seed, args.evaluator)
            print(json.dumps({**head, "seed": seed, "params": args.params, **found}), flush=True)
            continue
        run = profile(_Schema(domain), codes, rho, args.params, seed, args.evaluator)
        rounds = [f for f in run.fits if f.kind == "round"]
        final = [f for f in run.fits if f.kind == "final"]
        line = {
            "table": args.table,
            "epsilon": args.epsilon,
            "seed": seed,
            "params": args.params,
            "seconds": round(run.seconds, 1),
            "measurements": run.measurements,
            "round_fits": len(rounds),
            "round_fit_seconds": round(sum(f.seconds for f in rounds), 1),
            "final_fit_seconds": round(sum(f.seconds for f in final), 1),
            "final_cells": final[-1].cells if final else None,
            "final_iterations": final[-1].iterations if final else None,
            "tvd3": round(run.tvd3, 4),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
