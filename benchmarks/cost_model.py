"""Calibrate and check the cost preview (:mod:`engine.costs`) against measured runs.

``python -m benchmarks.cost_model --data ../shared/data`` runs every registered method with its
default params at ε = 1, δ = 1e-9 (ρ from ``engine.accounting.rho_from_epsilon_delta``, as
:mod:`benchmarks.quality` does) on every dataset under ``--data``, one run at a time, each in a
fresh child process (:func:`benchmarks._child.synthesize`: wall seconds of ``Mechanism.run`` and
the peak RSS of the run, VmHWM reset after loading so the loaded table counts but the CSV parsing
does not). A run that passes ``--cap`` seconds is killed and recorded as "skipped (time cap)".

Then, with the runs:

* ``--fit`` prints, per method, the least-squares fit in log space of the measured seconds and
  peak memory on the public features of :func:`engine.costs.cost_features`, and the factor it
  achieves: the table to paste into :data:`engine.costs.COST_COEFFICIENTS`;
* always: the predictions of :func:`engine.costs.predict_cost` as the code has them now against
  the measurements, written to ``--json`` (docs/cost_model.json) and as the section "Cost preview:
  predicted vs measured" of ``--out`` (docs/benchmarks.md; only that section is replaced).

``--from-json FILE`` reuses the runs saved in FILE instead of measuring again.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.quality import (
    BenchDataset,
    derive_seed,
    discover_datasets,
    refused,
    run_child,
)
from engine.accounting import rho_from_epsilon_delta
from engine.costs import COST_COEFFICIENTS, cost_features, predict_cost
from engine.domain import Domain
from engine.mechanisms import MECHANISMS

EPSILON = Decimal(1)
DELTA = Decimal("1e-9")
DEFAULT_CAP_SECONDS = 300.0
SECTION = "## Cost preview: predicted vs measured"


@dataclass
class CostRun:
    """One measured run (or why there is none)."""

    dataset: str
    method: str
    rows_in: int
    columns: int
    status: str  # "measured", "skipped (time cap)", "refused: …", "failed: …"
    seconds: float | None = None
    peak_rss_bytes: int | None = None
    rows_out: int | None = None


def _log(message: str) -> None:
    print(f"[cost] {message}", file=sys.stderr, flush=True)


def _domain(dataset: BenchDataset) -> Domain:
    raw = json.loads(dataset.domain.read_text())
    return Domain.from_mapping(raw)


def measure(
    datasets: Sequence[BenchDataset], methods: Sequence[str], rho: str, cap: float
) -> list[CostRun]:
    """One child-process run per (dataset, method), sequentially."""
    runs: list[CostRun] = []
    with tempfile.TemporaryDirectory(prefix="rhosynth-cost-") as workdir:
        for dataset in datasets:
            for method in methods:
                run = CostRun(dataset.name, method, dataset.rows, dataset.columns, "measured")
                refusal = refused(dataset, method, {})
                if refusal is not None:
                    run.status = f"refused: {refusal}"
                    runs.append(run)
                    continue
                spec = {
                    "csv": str(dataset.csv),
                    "domain": str(dataset.domain),
                    "method": method,
                    "params": {},
                    "rho": rho,
                    "seed": derive_seed("cost", dataset.name, method),
                    "out_csv": str(Path(workdir) / "synthetic.csv"),
                }
                _log(f"{dataset.name} {method}")
                try:
                    answer = run_child("synthesize", spec, timeout=cap)
                except subprocess.TimeoutExpired:
                    run.status = "skipped (time cap)"
                except Exception as error:  # recorded, the calibration goes on
                    run.status = f"failed: {str(error)[-200:]}"
                else:
                    run.seconds = float(answer["synthesis_seconds"])
                    run.peak_rss_bytes = int(answer["peak_rss_kib"]) * 1024
                    run.rows_out = int(answer["rows_out"])
                _log(f"  {run.status} {run.seconds} s {run.peak_rss_bytes} B")
                runs.append(run)
    return runs


def _features(run: CostRun, domains: dict[str, Domain]) -> tuple[float, float]:
    mechanism = MECHANISMS[run.method]
    domain = domains[run.dataset]
    params = mechanism.validate_params({})
    rows = run.rows_out if run.rows_out is not None else run.rows_in
    return cost_features(mechanism, domain, params, rows)


def fit(runs: Sequence[CostRun], domains: dict[str, Domain]) -> dict[str, dict[str, float]]:
    """Per method: log(seconds) = a + b·log(time feature), log(peak) = c + d·log(memory feature),
    least squares; with fewer than three runs the slope is fixed at 1, and a negative slope is
    replaced by a constant (the geometric mean). Factors: the largest ratio either way over the
    runs fitted."""
    fitted: dict[str, dict[str, float]] = {}
    for method in MECHANISMS:
        mine = [r for r in runs if r.method == method and r.status == "measured"]
        if not mine:
            continue
        features = np.array([_features(r, domains) for r in mine], dtype=float)
        seconds = np.array([r.seconds for r in mine], dtype=float)
        memory = np.array([r.peak_rss_bytes for r in mine], dtype=float)
        coefficients: dict[str, float] = {}
        for label, x, y in (
            ("seconds", features[:, 0], seconds),
            ("memory", features[:, 1], memory),
        ):
            lx, ly = np.log(x), np.log(y)
            if len(mine) >= 3 and np.ptp(lx) > 0:
                slope, intercept = np.polyfit(lx, ly, 1)
            else:
                slope, intercept = 1.0, float(np.mean(ly - lx))
            if slope < 0:  # more work or memory bound never predicts less: a constant instead
                slope, intercept = 0.0, float(np.mean(ly))
            intercept, slope = round(float(intercept), 4), round(float(slope), 4)
            residual = ly - (intercept + slope * lx)
            factor = math.exp(float(np.max(np.abs(residual))))
            coefficients[f"{label}_log_scale"] = intercept
            coefficients[f"{label}_exponent"] = slope
            coefficients[f"{label}_factor"] = math.ceil(factor * 100) / 100  # rounded up
        fitted[method] = coefficients
    return fitted


def compare(runs: Sequence[CostRun], domains: dict[str, Domain]) -> list[dict[str, Any]]:
    """Every run with the code's prediction beside it (the ratios are measured / predicted)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        entry: dict[str, Any] = asdict(run)
        if run.status == "measured" and run.method in COST_COEFFICIENTS:
            mechanism = MECHANISMS[run.method]
            params = mechanism.validate_params({})
            rows_used = run.rows_out if run.rows_out is not None else run.rows_in
            predicted = predict_cost(mechanism, domains[run.dataset], params, rows_used)
            if predicted is None or run.seconds is None or run.peak_rss_bytes is None:
                rows.append(entry)
                continue
            entry |= {
                "predicted_seconds": predicted.seconds,
                "predicted_peak_memory_bytes": predicted.peak_memory_bytes,
                "seconds_ratio": run.seconds / predicted.seconds,
                "memory_ratio": run.peak_rss_bytes / predicted.peak_memory_bytes,
                "seconds_factor": predicted.seconds_factor,
                "memory_factor": predicted.memory_factor,
                "seconds_within": _within(run.seconds, predicted.seconds, predicted.seconds_factor),
                "memory_within": _within(
                    run.peak_rss_bytes, predicted.peak_memory_bytes, predicted.memory_factor
                ),
            }
        rows.append(entry)
    return rows


def _within(measured: float, predicted: float, factor: float) -> bool:
    return predicted / factor <= measured <= predicted * factor


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def render(compared: Sequence[dict[str, Any]], command: str, date: str, load: str) -> str:
    lines = [
        SECTION,
        "",
        f"Generated by `{command}` on {date} (load average at start {load}; the machine is "
        "shared, so the seconds are noisy). Each run: default params, ε = 1, δ = 1e-9, one "
        "child process at a time; *seconds* is `Mechanism.run` alone, *peak* the resident "
        "memory of the run with the loaded table (VmHWM reset after loading). Predictions are "
        "`engine.costs.predict_cost` from the public domain, the params and the row count, "
        "with the coefficients in `engine.costs.COST_COEFFICIENTS` fitted on these runs "
        "(`--fit`); the factor is the stated error: the prediction is within ×/÷ factor of "
        "every measurement it was fitted on. Raw figures: docs/cost_model.json.",
        "",
        "| dataset | method | seconds measured | seconds predicted | ratio | factor | "
        "peak MiB measured | peak MiB predicted | ratio | factor | within |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in compared:
        if "predicted_seconds" not in row:
            status = row["status"]
            status = status if len(status) < 80 else status[:77] + "…"
            lines.append(f"| {row['dataset']} | {row['method']} | {status} | | | | | | | | |")
            continue
        within = "yes" if row["seconds_within"] and row["memory_within"] else "**no**"
        lines.append(
            f"| {row['dataset']} | {row['method']} | {row['seconds']:.3f} | "
            f"{row['predicted_seconds']:.3f} | {row['seconds_ratio']:.2f} | "
            f"{row['seconds_factor']:.2f} | {_mib(row['peak_rss_bytes'])} | "
            f"{_mib(row['predicted_peak_memory_bytes'])} | {row['memory_ratio']:.2f} | "
            f"{row['memory_factor']:.2f} | {within} |"
        )
    return "\n".join(lines) + "\n"


def quality_table_runs(document: str) -> list[dict[str, Any]]:
    """The runs of the "Engine quality and speed" table of docs/benchmarks.md (medians over its
    repeats): dataset, ε, method, rows out, synthesis seconds, peak RSS bytes."""
    runs: list[dict[str, Any]] = []
    for line in document.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 10 or "×" not in cells[1]:
            continue
        try:
            runs.append(
                {
                    "dataset": cells[0],
                    "epsilon": float(cells[2]),
                    "method": cells[3],
                    "rows_out": int(cells[4].split()[0].replace(",", "")),
                    "seconds": float(cells[6].split()[0]),
                    "peak_rss_bytes": int(float(cells[9].split()[0]) * 2**20),
                }
            )
        except ValueError:
            continue
    return runs


def out_of_sample(
    document: str, domains: dict[str, Domain]
) -> list[tuple[str, float, int, int, float, float]]:
    """Per (method, ε) of the quality table: runs, runs within both factors, and the largest
    ratio either way for seconds and for memory, of the runs on datasets in ``domains``."""
    grouped: dict[tuple[str, float], list[tuple[bool, float, float]]] = {}
    for run in quality_table_runs(document):
        if run["dataset"] not in domains or run["method"] not in MECHANISMS:
            continue
        mechanism = MECHANISMS[run["method"]]
        predicted = predict_cost(
            mechanism, domains[run["dataset"]], mechanism.validate_params({}), run["rows_out"]
        )
        if predicted is None:
            continue
        within = _within(run["seconds"], predicted.seconds, predicted.seconds_factor) and _within(
            run["peak_rss_bytes"], predicted.peak_memory_bytes, predicted.memory_factor
        )
        seconds = max(run["seconds"] / predicted.seconds, predicted.seconds / run["seconds"])
        memory = run["peak_rss_bytes"] / predicted.peak_memory_bytes
        grouped.setdefault((run["method"], run["epsilon"]), []).append(
            (within, seconds, max(memory, 1 / memory))
        )
    return [
        (
            method,
            epsilon,
            len(items),
            sum(1 for i in items if i[0]),
            max(i[1] for i in items),
            max(i[2] for i in items),
        )
        for (method, epsilon), items in sorted(grouped.items())
    ]


def render_out_of_sample(rows: Sequence[tuple[str, float, int, int, float, float]]) -> str:
    lines = [
        "",
        'The same predictions against the runs of "Engine quality and speed" above (medians of '
        "its repeats, measured by the same child process at ε = 0.1, 1 and 10): not fitted on, so "
        "this is how far the ε = 1 calibration carries. ρ changes the work of the adaptive "
        "methods (aim, ppsyn and privsyn run more rounds or larger models at large ε), which the "
        "model does not see.",
        "",
        "| method | ε | runs | within both factors | worst seconds ratio | worst memory ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for method, epsilon, count, within, seconds, memory in rows:
        lines.append(
            f"| {method} | {epsilon:g} | {count} | {within} | {seconds:.2f} | {memory:.2f} |"
        )
    return "\n".join(lines) + "\n"


def replace_section(document: str, section: str) -> str:
    """``document`` with its "Cost preview" section replaced by ``section`` (appended if absent);
    the section ends at the next level-2 heading."""
    start = document.find(SECTION)
    if start < 0:
        return document.rstrip("\n") + "\n\n" + section
    end = document.find("\n## ", start + len(SECTION))
    tail = "" if end < 0 else document[end:]
    return document[:start] + section + tail


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="laid out like ../shared/data")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--json", type=Path, default=Path("docs/cost_model.json"))
    parser.add_argument("--cap", type=float, default=DEFAULT_CAP_SECONDS, help="seconds per run")
    parser.add_argument("--methods", nargs="*", default=None, help="default: every method")
    parser.add_argument("--datasets", nargs="*", default=None, help="default: every dataset")
    parser.add_argument("--from-json", type=Path, default=None, help="reuse these runs")
    parser.add_argument("--fit", action="store_true", help="print fitted coefficients")
    args = parser.parse_args(argv)

    raw_args = sys.argv[1:] if argv is None else list(argv)
    datasets = discover_datasets(args.data.resolve())
    if args.datasets:
        datasets = [d for d in datasets if d.name in set(args.datasets)]
    domains = {d.name: _domain(d) for d in datasets}
    if args.from_json is not None:
        saved = json.loads(args.from_json.read_text())
        fields = set(CostRun.__dataclass_fields__)
        runs = [CostRun(**{k: v for k, v in r.items() if k in fields}) for r in saved["runs"]]
        command, date, load = saved["command"], saved["date"], saved["loadavg"]
    else:
        rho = str(rho_from_epsilon_delta(EPSILON, DELTA))
        methods = args.methods or list(MECHANISMS)
        load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = shlex.join(["python", "-m", "benchmarks.cost_model", *raw_args])
        runs = measure(datasets, methods, rho, args.cap)
    if args.fit:
        print(json.dumps(fit(runs, domains), indent=1))
    compared = compare(runs, domains)
    args.json.write_text(
        json.dumps(
            {
                "command": command,
                "date": date,
                "loadavg": load,
                "coefficients": COST_COEFFICIENTS,
                "domains": {name: dict(domain.as_dict()) for name, domain in domains.items()},
                "runs": compared,
            },
            indent=1,
            default=str,
        )
        + "\n"
    )
    if args.out.is_file():
        document = args.out.read_text()
        section = render(compared, command, date, load)
        section += render_out_of_sample(out_of_sample(document, domains))
        args.out.write_text(replace_section(document, section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
