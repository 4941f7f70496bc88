"""Rules the output keeps (issue 28 §2): the share of synthetic rows that break declared rules
before and after keeping them, what keeping them costs in fidelity and time.

The table: the public raw ``loans.csv`` (../shared/data/raw, 10,000 rows), 13 of its columns,
and five rules that hold on every real row, as an owner would declare them:

* ``balance <= loan_amount``;
* ``paid_total = paid_principal + paid_interest + paid_late_fees`` (a sum column);
* ``annual_income_joint >= annual_income if application_type in ['joint']`` (a conditional rule);
* ``(grade, sub_grade)`` in the 35 combinations A1 … G5 of the lender's grading (allowed
  combinations);
* ``interest_rate >= 22.9 if grade in ['E', 'F', 'G']`` (a conditional rule with a constant).

Each (method, ε) releases the table once (in-process: ``engine.tables.local.load_table``, the
method with default parameters at ρ = ``rho_from_epsilon_delta(ε, 1e-6)``, as many rows as the real
table), then writes the same synthetic codes with the same seed three ways
(``engine.tables.synthetic_output.write_synthetic``): without the rules (the *before*), keeping
them by redraw from the fitted model then repair (the service's path), and by repair alone (what
a method without a model gets). Measured: the share of rows that break each rule and any rule;
fidelity against the real values of the columns the rules touch (Kolmogorov–Smirnov statistic of
each numeric column, TVD of the grade × sub_grade table); the time to decode and write.

    python -m benchmarks.constraints --data ../shared/data/raw --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from benchmarks.sections import git_commit, markdown_table, update_or_print
from engine.accounting import rho_from_epsilon_delta
from engine.domain import Dataset
from engine.mechanisms import get_mechanism
from engine.tables.encoding import TableSchema
from engine.tables.local import load_table
from engine.tables.synthetic_output import write_synthetic

HEADING = "## Rules the output keeps (issue 28 §2)"
DELTA = Decimal("1e-6")
GRADES = "ABCDEFG"
MONEY = {"decimals": 2, "clip": True}
COLUMNS: list[dict[str, Any]] = [
    {"name": "grade", "type": "categorical", "categories": list(GRADES)},
    {
        "name": "sub_grade",
        "type": "categorical",
        "categories": [f"{g}{i}" for g in GRADES for i in range(1, 6)],
    },
    {"name": "application_type", "type": "categorical", "categories": ["individual", "joint"]},
    {"name": "loan_amount", "type": "numeric", "min": 0, "max": 40000, "bins": 20, "integer": True},
    {"name": "balance", "type": "numeric", "min": 0, "max": 40000, "bins": 20, **MONEY},
    {"name": "paid_principal", "type": "numeric", "min": 0, "max": 40000, "bins": 20, **MONEY},
    {"name": "paid_interest", "type": "numeric", "min": 0, "max": 5000, "bins": 10, **MONEY},
    {"name": "paid_late_fees", "type": "numeric", "min": 0, "max": 60, "bins": 6, **MONEY},
    {"name": "paid_total", "type": "numeric", "min": 0, "max": 45000, "bins": 20, **MONEY},
    {"name": "annual_income", "type": "numeric", "min": 0, "max": 600000, "bins": 24, **MONEY},
    {
        "name": "annual_income_joint",
        "type": "numeric",
        "min": 0,
        "max": 600000,
        "bins": 24,
        "nullable": True,
        **MONEY,
    },
    {"name": "interest_rate", "type": "numeric", "min": 5, "max": 31, "bins": 13, "decimals": 2},
    {"name": "term", "type": "categorical", "categories": ["36", "60"]},
]
RULES: list[dict[str, Any]] = [
    {"compare": ["balance", "<=", "loan_amount"]},
    {"sum": {"column": "paid_total", "of": ["paid_principal", "paid_interest", "paid_late_fees"]}},
    {
        "compare": ["annual_income_joint", ">=", "annual_income"],
        "if": {"application_type": ["joint"]},
    },
    {
        "allowed": {
            "columns": ["grade", "sub_grade"],
            "combinations": [[g, f"{g}{i}"] for g in GRADES for i in range(1, 6)],
        }
    },
    {"compare": ["interest_rate", ">=", 22.9], "if": {"grade": ["E", "F", "G"]}},
]
NUMERIC = ["balance", "loan_amount", "paid_total", "annual_income_joint", "interest_rate"]


def schema(rules: bool) -> TableSchema:
    return TableSchema.from_json({"columns": COLUMNS, "rules": RULES if rules else []})


def violations(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per rule, the rows that break it (computed here independently of engine.constraints)."""
    joint = frame["application_type"] == "joint"
    low_grade = frame["grade"].isin(["E", "F", "G"])
    parts = frame["paid_principal"] + frame["paid_interest"] + frame["paid_late_fees"]
    sub = frame["sub_grade"].astype(str)
    known = frame["annual_income_joint"].notna()
    return {
        "balance <= loan_amount": (frame["balance"] > frame["loan_amount"]).to_numpy(),
        "paid_total = sum of paid parts": (
            (frame["paid_total"] - parts).abs() > 0.005 + 1e-9
        ).to_numpy(),
        "joint income >= income if joint": (
            joint & known & (frame["annual_income_joint"] < frame["annual_income"])
        ).to_numpy(),
        "(grade, sub_grade) allowed": (sub.str[0] != frame["grade"].astype(str)).to_numpy(),
        "interest_rate >= 22.9 if E/F/G": (low_grade & (frame["interest_rate"] < 22.9)).to_numpy(),
    }


def fidelity(real: pd.DataFrame, synth: pd.DataFrame) -> dict[str, float]:
    out = {}
    for name in NUMERIC:
        a, b = real[name].dropna().to_numpy(float), synth[name].dropna().to_numpy(float)
        out[f"KS {name}"] = float(stats.ks_2samp(a, b).statistic)
    p = real.groupby(["grade", "sub_grade"], observed=True).size() / len(real)
    q = synth.groupby(["grade", "sub_grade"], observed=True).size() / len(synth)
    joined = pd.concat([p, q], axis=1).fillna(0.0)
    out["TVD grade×sub_grade"] = float(0.5 * (joined.iloc[:, 0] - joined.iloc[:, 1]).abs().sum())
    return out


def run(data: Path, method: str, epsilon: float, seed: int, work: Path) -> dict[str, Any]:
    ruled = schema(True)
    codes = load_table(data, ruled, allow_extra_columns=True, narrow=True)
    real = pd.read_csv(data, usecols=[c["name"] for c in COLUMNS])
    real["term"] = real["term"].astype(str)
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({})
    rho = Fraction(rho_from_epsilon_delta(Decimal(str(epsilon)), DELTA))
    started = time.perf_counter()
    result = mechanism.run(
        Dataset(ruled.domain(), codes), rho, params, rng=np.random.default_rng(seed), rows=len(real)
    )
    fit_seconds = time.perf_counter() - started
    model = result.model
    ways: dict[str, Any] = {}
    for i, (way, sch, sampler, rounds) in enumerate(
        (
            ("before (rules not kept)", schema(False), None, 0),
            ("in bins, model, repair", ruled, None if model is None else model.sample, 10),
            ("in bins, repair (no model)", ruled, None, 10),
            ("repair only", ruled, None, 0),
        )
    ):
        out = work / f"{method}-{epsilon}-{i}.csv"
        started = time.perf_counter()
        kept = write_synthetic(
            sch,
            result.codes,
            np.random.default_rng(seed + 1),
            out,
            "csv",
            sampler=sampler,
            rounds=rounds,
        )
        seconds = time.perf_counter() - started
        synth = pd.read_csv(out)
        broken = violations(synth)
        any_rule = np.zeros(len(synth), dtype=bool)
        for mask in broken.values():
            any_rule |= mask
        ways[way] = {
            "seconds": seconds,
            "rows": len(synth),
            "share_any": float(any_rule.mean()),
            "share": {rule: float(mask.mean()) for rule, mask in broken.items()},
            "fidelity": fidelity(real, synth),
            "report": None if kept is None else kept.report.to_json(),
        }
    return {
        "method": method,
        "epsilon": epsilon,
        "seed": seed,
        "fit_seconds": fit_seconds,
        "ways": ways,
    }


def average(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (method, ε): the mean over its runs (seeds) of every number."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for result in results:
        groups.setdefault((result["method"], result["epsilon"]), []).append(result)
    out = []
    for (method, epsilon), runs in groups.items():

        def mean(get: Any, runs: list[dict[str, Any]] = runs) -> float:
            return float(np.mean([get(run) for run in runs]))

        ways: dict[str, Any] = {}
        for way, first in runs[0]["ways"].items():
            ways[way] = {
                "seconds": mean(lambda r, w=way: r["ways"][w]["seconds"]),
                "share_any": mean(lambda r, w=way: r["ways"][w]["share_any"]),
                "share": {
                    k: mean(lambda r, w=way, k=k: r["ways"][w]["share"][k]) for k in first["share"]
                },
                "fidelity": {
                    k: mean(lambda r, w=way, k=k: r["ways"][w]["fidelity"][k])
                    for k in first["fidelity"]
                },
                "report": None
                if first["report"] is None
                else {
                    k: mean(lambda r, w=way, k=k: r["ways"][w]["report"][k])
                    for k in ("resampled_rows", "redrawn_rows", "repaired_rows")
                },
            }
        out.append(
            {
                "method": method,
                "epsilon": epsilon,
                "runs": len(runs),
                "fit_seconds": mean(lambda r: r["fit_seconds"]),
                "ways": ways,
            }
        )
    return out


def section(results: list[dict[str, Any]], command: str) -> str:
    runs = len(results)
    results = average(results)
    runs //= max(1, len(results))
    lines = [
        HEADING,
        "",
        'Declared rules (docs/api.md, "Rules") kept on the synthetic rows: rows that break one '
        "are drawn again inside their bins (the model's codes kept, up to 10 rounds), then "
        "redrawn from the fitted model (up to 10 rounds), then repaired to the nearest row that "
        "keeps it. The table is 10,000 rows of the public `loans.csv` with five rules that every "
        "real row keeps (benchmarks/constraints.py lists them): `balance <= loan_amount`, "
        "`paid_total = paid_principal + paid_interest + paid_late_fees`, "
        "`annual_income_joint >= annual_income if application_type = joint`, "
        "(grade, sub_grade) among A1 … G5, `interest_rate >= 22.9 if grade in E, F, G`. "
        "Each release (default parameters, (ε, 1e-6)-DP, as many rows as the real table) is "
        "written four ways from the same codes and seed: without the rules, the service's path, "
        "the path of a method without a model, and repair alone (`rounds=0`). No privacy cost: "
        "only the model's output is used.",
        "",
        f"Command: `{command}` (commit {git_commit()}, {time.strftime('%Y-%m-%d')}).",
        "",
        f"Means over {runs} releases per row (seeds 0 … {runs - 1}; each release's DP noise is "
        "fresh). Share of synthetic rows that break a rule (any rule, then per rule):",
        "",
    ]
    rules = list(next(iter(results[0]["ways"].values()))["share"])
    header = ["method", "ε", "written", "any rule", *rules, "write s"]
    rows = []
    for result in results:
        for way, values in result["ways"].items():
            rows.append(
                [
                    result["method"],
                    f"{result['epsilon']:g}",
                    way,
                    f"{values['share_any']:.1%}",
                    *(f"{values['share'][r]:.1%}" for r in rules),
                    f"{values['seconds']:.2f}",
                ]
            )
    lines += [*markdown_table(header, rows, "lll" + "r" * (len(header) - 3)), ""]
    lines += [
        "Fidelity against the real values (KS statistic per numeric column the rules touch; "
        "TVD of grade × sub_grade; lower is closer), and what keeping the rules did "
        "(rows whose values were drawn again inside their bins / rows redrawn from the model / "
        "rows repaired, of 10,000):",
        "",
    ]
    metrics = list(next(iter(results[0]["ways"].values()))["fidelity"])
    header = ["method", "ε", "written", *metrics, "in bins", "redrawn", "repaired"]
    rows = []
    for result in results:
        for way, values in result["ways"].items():
            report = values["report"]
            rows.append(
                [
                    result["method"],
                    f"{result['epsilon']:g}",
                    way,
                    *(f"{values['fidelity'][m]:.3f}" for m in metrics),
                    "–" if report is None else f"{report['resampled_rows']:.0f}",
                    "–" if report is None else f"{report['redrawn_rows']:.0f}",
                    "–" if report is None else f"{report['repaired_rows']:.0f}",
                ]
            )
    lines += [*markdown_table(header, rows, "lll" + "r" * (len(header) - 3)), ""]
    fits = ", ".join(f"{r['method']} ε={r['epsilon']:g}: {r['fit_seconds']:.1f} s" for r in results)
    lines += [
        f"Fit times (not part of the rules' cost): {fits}. The write times include decoding "
        "and the CSV; the difference between rows is what keeping the rules costs.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/raw"))
    parser.add_argument("--methods", default="mst,aim")
    parser.add_argument("--epsilons", default="1,4")
    parser.add_argument("--repeats", type=int, default=3, help="releases per (method, ε)")
    parser.add_argument("--update", type=Path, default=None, help="docs/benchmarks.md to update")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    raw_args = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "benchmarks.constraints", *raw_args])
    data = args.data / "loans.csv"
    results = []
    with tempfile.TemporaryDirectory() as work:
        for method in args.methods.split(","):
            for epsilon in (float(e) for e in args.epsilons.split(",")):
                for seed in range(args.repeats):
                    result = run(data, method, epsilon, seed, Path(work))
                    print(json.dumps(result, default=str), file=sys.stderr)
                    results.append(result)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    update_or_print(args.update, HEADING, section(results, command))


if __name__ == "__main__":
    main()
