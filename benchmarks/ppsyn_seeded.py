"""ppsyn under two parameter sets with the same seeded DP noise (issue 15 §3: faster, no less
accurate).

For each (dataset, ε) cell and each noise seed, one fresh child process per configuration runs
``ppsyn`` with that configuration's params and the DP noise drawn from ``random.Random(seed)``
(reproducible diagnostics only; production draws from the OS CSPRNG), writes the synthetic
table and has it scored by the independent evaluator (mean TVD of every 1-, 2- and 3-way
marginal). The noise stream is the same for every configuration, but the runs diverge once a
different model makes a different selection, so a difference of one seed is noise of the run
as much as an effect of the params: compare the means over the seeds. CPU seconds are those of
``Mechanism.run`` in the child (``time.process_time``).

Run: ``python -m benchmarks.ppsyn_seeded --data ../shared/data --cells adult:1 salary:1
--seeds 1 2 3 --config 'before={"momentum": false, "round_iterations": 100, "iterations":
1000}' --config 'after={}' --json /tmp/seeded.jsonl``; ``--from-json /tmp/seeded.jsonl`` prints
the table again.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

from benchmarks.quality import (
    DELTA,
    derive_seed,
    discover_datasets,
    epsilon_label,
    evaluate,
    run_json_child,
)
from benchmarks.sections import markdown_table

REPO = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT_SECONDS = 7200


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One seeded-noise ppsyn run (in this process); writes ``out_csv``."""
    import numpy as np
    import pandas as pd

    from benchmarks._child import load_dataset
    from engine.mechanisms import get_mechanism

    schema, data = load_dataset(spec["csv"], spec["domain"])
    mechanism = get_mechanism("ppsyn")
    params = mechanism.validate_params(spec["params"])
    rho = Fraction(Decimal(spec["rho"]))
    # A seeded noise source for reproducible diagnostics only (production uses the CSPRNG).
    noise_source = random.Random(spec["noise_seed"])  # noqa: S311
    rng = np.random.default_rng(int(spec["seed"]))
    started = time.process_time()
    result = mechanism.run(data, rho, params, rng=rng, noise_source=noise_source)
    cpu_seconds = time.process_time() - started
    pd.DataFrame(np.asarray(result.codes), columns=list(schema.names)).to_csv(
        spec["out_csv"], index=False
    )
    return {"cpu_seconds": cpu_seconds, "rounds": len(result.selections)}


def run_one(
    dataset: Any, epsilon: float, seed: int, label: str, params: dict[str, Any], evaluator: Path
) -> dict[str, Any]:
    from engine.accounting import rho_from_epsilon_delta

    rho = rho_from_epsilon_delta(Decimal(repr(epsilon)), Decimal(repr(DELTA)))
    with tempfile.TemporaryDirectory() as workdir:
        synthetic = Path(workdir) / "synthetic.csv"
        spec = {
            "csv": str(dataset.csv),
            "domain": str(dataset.domain),
            "params": params,
            "rho": str(rho),
            "seed": derive_seed("synthesis", dataset.name, "ppsyn", epsilon_label(epsilon), 0),
            "noise_seed": seed,
            "out_csv": str(synthetic),
        }
        answer = run_json_child(
            ["benchmarks.ppsyn_seeded", "--child"], spec, timeout=CHILD_TIMEOUT_SECONDS, cwd=REPO
        )
        del answer["process_seconds"]  # not recorded by this script
        scores, _ = evaluate(evaluator, dataset, synthetic, Path(workdir) / "eval.json")
    return {
        "dataset": dataset.name,
        "epsilon": epsilon,
        "noise_seed": seed,
        "config": label,
        "params": params,
        **answer,
        "tvd": {k: float(v["mean_tvd"]) for k, v in scores["ways"].items()},
    }


def render(records: Sequence[dict[str, Any]]) -> str:
    """Per cell and configuration: seeds, mean 3-way TVD (per seed in parentheses), mean CPU."""
    cells: dict[tuple[str, float], dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        key = (record["dataset"], record["epsilon"])
        cells.setdefault(key, {}).setdefault(record["config"], []).append(record)
    rows = []
    for (name, epsilon), configs in cells.items():
        for label, runs in configs.items():
            runs = sorted(runs, key=lambda r: r["noise_seed"])
            tvds = [r["tvd"]["3"] for r in runs]
            rows.append(
                [
                    name,
                    f"{epsilon:g}",
                    label,
                    " ".join(str(r["noise_seed"]) for r in runs),
                    f"{statistics.fmean(tvds):.4f} ({' '.join(f'{t:.4f}' for t in tvds)})",
                    f"{statistics.fmean(r['cpu_seconds'] for r in runs):.1f}",
                    f"{statistics.fmean(r['rounds'] for r in runs):.1f}",
                ]
            )
    header = [
        "dataset",
        "ε",
        "config",
        "noise seeds",
        "3-way TVD mean (per seed)",
        "CPU s",
        "rounds",
    ]
    return "\n".join(markdown_table(header, rows, "lrllrrr")) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path)
    parser.add_argument("--cells", nargs="*", default=[], help="name:eps[,eps…]")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1])
    parser.add_argument("--config", action="append", default=[], help='label={"param": …}')
    parser.add_argument(
        "--evaluator", type=Path, default=REPO.parent / "shared" / "bench" / "marginal_error.py"
    )
    parser.add_argument("--json", type=Path, help="JSON lines, appended to")
    parser.add_argument("--from-json", type=Path, nargs="*")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if args.from_json:
        records = [json.loads(line) for p in args.from_json for line in p.read_text().splitlines()]
        print(render(records))
        return 0
    if args.data is None:
        raise SystemExit("--data is needed to measure")
    datasets = {d.name: d for d in discover_datasets(args.data)}
    configs = [
        (label, json.loads(text)) for label, _, text in (c.partition("=") for c in args.config)
    ]
    records = []
    for item in args.cells:
        name, _, epsilons = item.partition(":")
        for epsilon in (float(e) for e in epsilons.split(",")):
            for seed in args.seeds:
                for label, params in configs:
                    record = run_one(datasets[name], epsilon, seed, label, params, args.evaluator)
                    records.append(record)
                    print(json.dumps(record), flush=True)
                    if args.json:
                        with args.json.open("a") as handle:
                            handle.write(json.dumps(record) + "\n")
    print(render(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
