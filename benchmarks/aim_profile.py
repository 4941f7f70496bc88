"""Where AIM spends its time on a raw table's discovered domain (issue 25: profile first).

For each raw table and ε: the draft accepted as is, discovery at the table's default share of
ρ (as in raw_fidelity), then `aim` with the given parameters on the discovered codes, once per
noise seed, with every model fit timed: the junction tree's cells, the mirror-descent iterations it
ran and its seconds (round fits, then the final fit). The noise comes from ``random.Random(seed)``
(reproducibility for benchmarks only; the service uses the OS CSPRNG), so two settings compared
with the same seeds start from the same noise. 3-way TVD by ../shared/bench/marginal_error.py.

    python -m benchmarks.aim_profile --data ../shared/data/raw --tables diamonds,loans \
        --epsilons 1,10 --seeds 1,2 [--params '{"max_model_size_mb": 10}'] \
        [--update docs/benchmarks.md]

The 200-column table of issue 25 is built by benchmarks.wide_table into a folder passed as
``--data``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import random
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import raw_fidelity as rf
from benchmarks.sections import git_commit, markdown_table, update_or_print

HEADING = "## AIM on raw-table domains: where the time goes (issue 25)"


@dataclass
class Fit:
    kind: str  # "round" or "final"
    cells: int
    iterations: int
    seconds: float


@dataclass
class Run:
    seed: int
    params: dict[str, Any]
    seconds: float
    measurements: int
    fits: list[Fit] = field(default_factory=list)
    tvd3: float = float("nan")
    table: str = ""
    epsilon: float = 1.0
    columns: int = 0


MAX_TRIPLES = 5000
"""Above this many 3-way marginals the TVD is the mean over a fixed random sample of them."""


def tvd3(evaluator: Path, domain: Any, real: np.ndarray, synth: np.ndarray) -> float:
    spec = importlib.util.spec_from_file_location("marginal_error", evaluator)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = list(domain.attributes)
    sizes = {a: domain.size(a) for a in names}
    r = {a: np.asarray(real[:, i], dtype=np.int64) for i, a in enumerate(names)}
    s = {a: np.asarray(synth[:, i], dtype=np.int64) for i, a in enumerate(names)}
    triples = list(itertools.combinations(names, 3))
    if len(triples) > MAX_TRIPLES:
        triples = random.Random(0).sample(triples, MAX_TRIPLES)  # noqa: S311 - which to score
    values = [module.tvd(r, s, c, sizes, real.shape[0], synth.shape[0]) for c in triples]
    return float(np.mean(values))


def profile(
    schema: Any,
    codes: np.ndarray,
    rho: Fraction,
    params: dict[str, Any],
    seed: int,
    evaluator: Path,
) -> Run:
    import engine.mechanisms.aim.mechanism as aim_module
    import engine.mechanisms.fitting as fitting
    from engine.domain import Dataset
    from engine.mechanisms import MECHANISMS

    run = Run(seed, params, 0.0, 0)
    originals = (aim_module.estimate, fitting.estimate)

    def timed(kind: str) -> Any:
        def fit(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            model = originals[0](*args, **kwargs)
            cells = sum(int(np.prod(shape)) for shape in model.tree.shapes)
            run.fits.append(Fit(kind, cells, model.iterations, time.perf_counter() - started))
            return model

        return fit

    aim_module.estimate, fitting.estimate = timed("round"), timed("final")
    try:
        mechanism = MECHANISMS["aim"]
        started = time.perf_counter()
        result = mechanism.run(
            Dataset(schema.domain(), codes),
            rho,
            mechanism.Params(**params),
            rng=np.random.default_rng(seed),
            rows=codes.shape[0],
            noise_source=random.Random(seed),  # noqa: S311 - benchmark noise, never the service's
        )
        run.seconds = time.perf_counter() - started
    finally:
        aim_module.estimate, fitting.estimate = originals
    run.measurements = len(result.measurements)
    run.tvd3 = tvd3(evaluator, schema.domain(), np.asarray(codes), np.asarray(result.codes))
    return run


def render(runs: Sequence[Run], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit `{git_commit(length=7)}`, {rf.machine()}. Each table's draft accepted as is, "
        "discovery at its default share of ρ under (ε, δ = 1e-6), then `aim` on the discovered "
        "codes with the method's ρ; noise from `random.Random(seed)` so that settings compare "
        "on the same noise. *round fits*: the warm-started fits after each measurement; "
        "*final*: the last fit before sampling. Cells: the junction tree's, summed over its "
        f"cliques. 3-way TVD: mean over all 3-way marginals, or over {MAX_TRIPLES:,} of them "
        "drawn at random (fixed seed) where there are more.",
        "",
    ]
    header = ["table", "ε", "params", "seed", "aim s", "measurements", "round fits s"]
    header += ["final fit s", "final cells", "final iterations", "3-way TVD"]
    rows = []
    for run in runs:
        rounds = [f for f in run.fits if f.kind == "round"]
        final = [f for f in run.fits if f.kind == "final"]
        last = final[-1] if final else Fit("final", 0, 0, 0.0)
        rows.append(
            [
                f"{run.table} ({run.columns} columns)",
                f"{run.epsilon:g}",
                json.dumps(run.params) if run.params else "defaults",
                str(run.seed),
                f"{run.seconds:.1f}",
                str(run.measurements),
                f"{sum(f.seconds for f in rounds):.1f}",
                f"{last.seconds:.1f}",
                f"{last.cells:,}",
                str(last.iterations),
                f"{run.tvd3:.4f}",
            ]
        )
    lines += markdown_table(header, rows, "llllrrrrrrr")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    from engine.schema_draft import draft_schema

    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of raw <table>.csv")
    parser.add_argument("--tables", default="diamonds")
    parser.add_argument("--epsilons", default="1")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--params", action="append", default=[], help="AIM params as JSON")
    parser.add_argument("--evaluator", type=Path, default=Path("../shared/bench/marginal_error.py"))
    parser.add_argument("--update", type=Path, default=None)
    args = parser.parse_args(raw)
    settings = [json.loads(p) for p in args.params] or [{}]
    runs = []
    for table in rf._csv(args.tables):
        path = args.data / f"{table}.csv"
        for epsilon in (float(e) for e in rf._csv(args.epsilons)):
            upload = rf.discovered(path, draft_schema(path), epsilon)
            schema, codes, rho = upload.schema, upload.codes, upload.method_rho
            for params in settings:
                for seed in (int(s) for s in rf._csv(args.seeds)):
                    run = profile(schema, codes, rho, params, seed, args.evaluator)
                    run.table, run.epsilon, run.columns = table, epsilon, codes.shape[1]
                    runs.append(run)
                    print(
                        f"[aim_profile] {table} ε={epsilon:g} {params or 'defaults'} seed "
                        f"{seed}: {run.seconds:.1f} s, 3-way TVD {run.tvd3:.4f}",
                        file=sys.stderr,
                        flush=True,
                    )
    command = shlex.join(["python", "-m", "benchmarks.aim_profile", *raw])
    update_or_print(args.update, HEADING, render(runs, command))


if __name__ == "__main__":
    main()
