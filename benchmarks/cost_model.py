"""Calibrate and check the cost preview (:mod:`engine.costs`) against measured runs.

``python -m benchmarks.cost_model --data ../shared/data`` runs every registered method with its
default params at ε = 1 (or at each ε of ``--epsilons``), δ = 1e-9 (ρ from
``engine.accounting.rho_from_epsilon_delta``, as :mod:`benchmarks.quality` does) on every dataset
under ``--data``, one run at a time, each in a fresh child process
(:func:`benchmarks._child.synthesize`: wall seconds of ``Mechanism.run`` and the peak RSS of the
run, VmHWM reset after loading so the loaded table counts but the CSV parsing does not). A run
that passes ``--cap`` seconds is killed and recorded as "skipped (time cap)";
``--skip DATASET:METHOD:REASON`` records a pair as not run (known to pass the cap).

Then, with the runs:

* ``--fit`` prints the coefficients fitted on them (:func:`fit`: seconds by least squares in
  log space on rows, columns and ρ, memory by non-negative least squares, on the public features of
  :func:`engine.costs.cost_features`) and the factor each achieves: the table to paste into
  :data:`engine.costs.COST_COEFFICIENTS`;
* always: the predictions of :func:`engine.costs.predict_cost` as the code has them now against
  the measurements, written to ``--json`` (docs/cost_model.json) and as the section "Cost preview:
  predicted vs measured" of ``--out`` (docs/benchmarks.md; only that section is replaced).

``--from-json FILE [FILE …]`` reuses the runs saved in those files instead of measuring again
(e.g. a run measured alone with a longer ``--cap``). The section also gets a second table: the
same predictions against the runs of the "Engine quality and speed" table of ``--out`` (ε = 0.1,
1 and 10, not fitted on).
"""

from __future__ import annotations

import argparse
import functools
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
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from benchmarks import sections
from benchmarks.quality import (
    BenchDataset,
    derive_seed,
    discover_datasets,
    refused,
    run_child,
)
from engine.accounting import rho_from_epsilon_delta
from engine.costs import (
    COST_COEFFICIENTS,
    RHO_REFERENCE,
    CostFeatures,
    cost_features,
    predict_cost,
)
from engine.domain import Domain
from engine.mechanisms import MECHANISMS

DEFAULT_EPSILONS = (Decimal(1),)
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
    epsilon: float = 1.0  # δ = DELTA; runs saved before ε was recorded were all at ε = 1
    cpu_seconds: float | None = None  # CPU seconds of the run (process time; None before it was)


def timed_seconds(run: CostRun | dict[str, Any]) -> float:
    """The seconds a run is fitted and compared on: its CPU seconds where recorded (runs measured
    from 2026-12-05 on, when the shared machine's contention made wall time 2-3× CPU), else its
    wall seconds."""
    cpu = run.cpu_seconds if isinstance(run, CostRun) else run.get("cpu_seconds")
    seconds = run.seconds if isinstance(run, CostRun) else run.get("seconds")
    value = cpu if cpu is not None else seconds
    if value is None:
        raise ValueError("the run has no seconds")
    return float(value)


def _log(message: str) -> None:
    print(f"[cost] {message}", file=sys.stderr, flush=True)


def _domain(dataset: BenchDataset) -> Domain:
    raw = json.loads(dataset.domain.read_text())
    return Domain.from_mapping(raw)


def _skip_status(dataset: str, method: str, skips: Sequence[str]) -> str | None:
    for skip in skips:
        name, _, rest = skip.partition(":")
        skipped_method, _, reason = rest.partition(":")
        if (name, skipped_method) == (dataset, method):
            return f"skipped (not run: {reason or 'expected past the cap'})"
    return None


def measure(
    datasets: Sequence[BenchDataset],
    methods: Sequence[str],
    epsilons: Sequence[Decimal],
    cap: float,
    skips: Sequence[str] = (),
) -> list[CostRun]:
    """One child-process run per (dataset, ε, method), sequentially; ``skips`` are
    ``DATASET:METHOD[:REASON]`` pairs recorded as not run (e.g. known to pass the cap)."""
    runs: list[CostRun] = []
    with tempfile.TemporaryDirectory(prefix="rhosynth-cost-") as workdir:
        for dataset in datasets:
            for epsilon in epsilons:
                rho = str(rho_from_epsilon_delta(epsilon, DELTA))
                for method in methods:
                    run = CostRun(
                        dataset.name,
                        method,
                        dataset.rows,
                        dataset.columns,
                        "measured",
                        epsilon=float(epsilon),
                    )
                    refusal = refused(dataset, method, {})
                    skip = _skip_status(dataset.name, method, skips)
                    if refusal is not None or skip is not None:
                        run.status = f"refused: {refusal}" if refusal is not None else str(skip)
                        runs.append(run)
                        continue
                    # ε = 1 keeps the seed of the runs measured before ε was a parameter.
                    seed_parts = () if epsilon == 1 else (str(epsilon),)
                    spec = {
                        "csv": str(dataset.csv),
                        "domain": str(dataset.domain),
                        "method": method,
                        "params": {},
                        "rho": rho,
                        "seed": derive_seed("cost", dataset.name, method, *seed_parts),
                        "out_csv": str(Path(workdir) / "synthetic.csv"),
                    }
                    _log(f"{dataset.name} ε={epsilon} {method}")
                    try:
                        answer = run_child("synthesize", spec, timeout=cap)
                    except subprocess.TimeoutExpired:
                        run.status = "skipped (time cap)"
                    except Exception as error:  # recorded, the calibration goes on
                        run.status = f"failed: {str(error)[-200:]}"
                    else:
                        run.seconds = float(answer["synthesis_seconds"])
                        run.cpu_seconds = float(answer["synthesis_cpu_seconds"])
                        run.peak_rss_bytes = int(answer["peak_rss_kib"]) * 1024
                        run.rows_out = int(answer["rows_out"])
                    _log(
                        f"  {run.status} {run.seconds} s (CPU {run.cpu_seconds} s) "
                        f"{run.peak_rss_bytes} B"
                    )
                    runs.append(run)
    return runs


def _features(run: CostRun, domains: dict[str, Domain]) -> CostFeatures:
    mechanism = MECHANISMS[run.method]
    rows = run.rows_out if run.rows_out is not None else run.rows_in
    return cost_features(mechanism, domains[run.dataset], mechanism.validate_params({}), rows)


@functools.cache
def rho_of(epsilon: float) -> Fraction:
    """The ρ of a run at ``epsilon`` (δ = :data:`DELTA`), as the runs were given it."""
    return Fraction(rho_from_epsilon_delta(Decimal(str(epsilon)), DELTA))


def _log_rho_terms(runs: Sequence[CostRun]) -> np.ndarray:
    """Columns log(ρ/ρ₁) below ρ₁ and above it (zero on the other side), one row per run."""
    logs = np.array([math.log(rho_of(r.epsilon) / RHO_REFERENCE) for r in runs], dtype=float)
    return np.column_stack([np.minimum(logs, 0.0), np.maximum(logs, 0.0)])


def _log_sizes(features: Sequence[CostFeatures]) -> np.ndarray:
    """Columns log(rows) and log(columns), one row per run."""
    return np.log(np.array([[max(f.rows, 1), max(f.columns, 1)] for f in features], dtype=float))


def _fit_seconds(
    runs: Sequence[CostRun],
    features: Sequence[CostFeatures],
    exponents: tuple[float, float] | None,
) -> dict[str, float]:
    """a, bn, bd, c_below, c_above by least squares of log(seconds); ``exponents`` fixes bn and
    bd. Both are kept ≥ 0 (more rows or columns never predict less time); the ρ exponent of a
    side with no run is 0; a is refitted as the mean residual after rounding the others (so
    rounding adds no bias)."""
    seconds = np.log(np.array([timed_seconds(r) for r in runs], dtype=float))
    sizes = _log_sizes(features)
    rho_terms = _log_rho_terms(runs)
    ones = np.ones_like(seconds)
    if exponents is None:
        solution = np.linalg.lstsq(np.column_stack([ones, sizes, rho_terms]), seconds, rcond=None)
        exponents = (
            max(round(float(solution[0][1]), 4), 0.0),
            max(round(float(solution[0][2]), 4), 0.0),
        )
    left = seconds - sizes @ np.array(exponents)
    solution = np.linalg.lstsq(np.column_stack([ones, rho_terms]), left, rcond=None)
    below, above = (round(float(c), 4) for c in solution[0][1:])
    return {
        "seconds_log_scale": round(float(np.mean(left - rho_terms @ np.array([below, above]))), 4),
        "seconds_rows_exponent": exponents[0],
        "seconds_columns_exponent": exponents[1],
        "seconds_rho_exponent_below": below,
        "seconds_rho_exponent_above": above,
    }


def predicted_seconds(
    coefficients: dict[str, float], features: Sequence[CostFeatures], runs: Sequence[CostRun]
) -> np.ndarray:
    """The model's seconds (default params) for ``runs`` with their ``features``."""
    sizes = np.array(
        [coefficients["seconds_rows_exponent"], coefficients["seconds_columns_exponent"]]
    )
    rho = np.array(
        [coefficients["seconds_rho_exponent_below"], coefficients["seconds_rho_exponent_above"]]
    )
    return np.asarray(
        np.exp(
            coefficients["seconds_log_scale"]
            + _log_sizes(features) @ sizes
            + _log_rho_terms(runs) @ rho
        )
    )


def _ratio_factor(predicted: np.ndarray, measured: np.ndarray) -> float:
    """The largest ratio either way, rounded up to 2 decimals (so the stated factor holds)."""
    worst = float(np.max(np.maximum(predicted / measured, measured / predicted)))
    return math.ceil(worst * 100 - 1e-9) / 100  # 1e-9: float fuzz of an exact fit


def _fit_regime(
    coefficients: dict[str, float],
    regime: str,
    runs: Sequence[CostRun],
    features: Sequence[CostFeatures],
) -> dict[str, float]:
    """``<regime>_seconds_log_offset``, ``…_rho_exponent_below`` and ``…_above``: log(seconds)
    minus the method's prediction at ρ₁ (its sizes and work ratio) = offset + c·log(ρ/ρ₁), c below
    and above ρ₁, by least squares (the method's own terms unchanged); offset refitted as the mean
    residual after rounding, as in :func:`_fit_seconds`, and ``<regime>_seconds_factor`` the
    largest ratio either way over these runs. Memory: ``<regime>_memory_bound_weight`` and
    ``…_rho`` by non-negative least squares of the relative error with the method's base and
    per-cell terms kept, and ``<regime>_memory_factor``."""
    seconds = np.log(np.array([timed_seconds(r) for r in runs], dtype=float))
    sizes = np.array(
        [coefficients["seconds_rows_exponent"], coefficients["seconds_columns_exponent"]]
    )
    ratios = np.log(np.array([f.work_ratio for f in features], dtype=float))
    left = seconds - coefficients["seconds_log_scale"] - _log_sizes(features) @ sizes - ratios
    rho_terms = _log_rho_terms(runs)
    solution = np.linalg.lstsq(np.column_stack([np.ones_like(left), rho_terms]), left, rcond=None)
    below, above = (round(float(c), 4) for c in solution[0][1:])
    offset = round(float(np.mean(left - rho_terms @ np.array([below, above]))), 4)
    predicted = np.exp(offset + rho_terms @ np.array([below, above]) + seconds - left)
    cells = np.array([max(f.cells, 1) for f in features], dtype=float)
    extra = np.array([f.bound_extra_bytes for f in features], dtype=float)
    extra_rho = extra * rho_terms[:, 1]
    memory = np.array([r.peak_rss_bytes for r in runs], dtype=float)
    fixed = coefficients["memory_base_bytes"] + coefficients["memory_bytes_per_cell"] * cells
    design = np.column_stack([extra, extra_rho])
    weights, _ = nnls(design / memory[:, None], (memory - fixed) / memory)
    weight, weight_rho = (round(float(w), 6) for w in weights)
    return {
        f"{regime}_seconds_log_offset": offset,
        f"{regime}_seconds_rho_exponent_below": below,
        f"{regime}_seconds_rho_exponent_above": above,
        f"{regime}_seconds_factor": _ratio_factor(predicted, np.exp(seconds)),
        f"{regime}_memory_bound_weight": weight,
        f"{regime}_memory_bound_weight_rho": weight_rho,
        f"{regime}_memory_factor": _ratio_factor(
            fixed + weight * extra + weight_rho * extra_rho, memory
        ),
    }


def fit(runs: Sequence[CostRun], domains: dict[str, Domain]) -> dict[str, dict[str, float]]:
    """The coefficients of :data:`engine.costs.COST_COEFFICIENTS` (see engine.costs).

    Per method measured on at least three datasets: log(seconds) = a + bn·log(n) + bd·log(d) +
    c·log(ρ/ρ₁) (c below and above ρ₁) by least squares (the calibration runs use the default
    params, where the work ratio is 1); memory = base + per_cell·C + (weight + rho_weight·
    max(log(ρ/ρ₁), 0))·E by non-negative least squares of the relative error. A method measured
    on fewer datasets gets bn = bd = 1 (its ρ exponents still from its runs), the median memory
    base and per-cell cost of the others, and the weight that meets its runs on average (no ρ
    term); its factors are then the worst of the other methods', since runs on one table cannot
    state an error over tables.

    Runs in a :meth:`Mechanism.cost_regime` (aim's batches above 64 columns) are left out of
    those fits: on at least two datasets they get the regime's own ρ terms and offset
    (:func:`_fit_regime`: ρ terms, memory bound weights and their own stated factors, at least
    the method's); the method's terms and factors stay those of its other runs."""
    fitted: dict[str, dict[str, float]] = {}
    regimes: dict[str, dict[str, list[tuple[CostRun, CostFeatures]]]] = {}
    for method in MECHANISMS:
        everything = [r for r in runs if r.method == method and r.status == "measured"]
        mine = []
        features = []
        for run in everything:
            run_features = _features(run, domains)
            if run_features.regime is None:
                mine.append(run)
                features.append(run_features)
            else:
                regimes.setdefault(method, {}).setdefault(run_features.regime, []).append(
                    (run, run_features)
                )
        if len({r.dataset for r in mine}) < 3:
            continue
        cells = np.array([max(f.cells, 1) for f in features], dtype=float)
        extra = np.array([f.bound_extra_bytes for f in features], dtype=float)
        seconds = np.array([timed_seconds(r) for r in mine], dtype=float)
        memory = np.array([r.peak_rss_bytes for r in mine], dtype=float)
        coefficients = _fit_seconds(mine, features, None)
        extra_rho = extra * _log_rho_terms(mine)[:, 1]
        design = np.column_stack([np.ones_like(cells), cells, extra, extra_rho])
        weights, _ = nnls(design / memory[:, None], np.ones_like(memory))
        base, per_cell, weight, weight_rho = (
            round(float(w), k) for w, k in zip(weights, (0, 3, 4, 4), strict=True)
        )
        fitted[method] = coefficients | {
            "seconds_factor": _ratio_factor(
                predicted_seconds(coefficients, features, mine), seconds
            ),
            "memory_base_bytes": base,
            "memory_bytes_per_cell": per_cell,
            "memory_bound_weight": weight,
            "memory_bound_weight_rho": weight_rho,
            "memory_factor": _ratio_factor(
                base + per_cell * cells + weight * extra + weight_rho * extra_rho, memory
            ),
        }
    for method, by_regime in regimes.items():
        if method not in fitted:
            continue
        for regime, pairs in by_regime.items():
            if len({run.dataset for run, _ in pairs}) < 2:
                continue
            terms = _fit_regime(
                fitted[method], regime, [p[0] for p in pairs], [p[1] for p in pairs]
            )
            # A regime's few runs (a few tables of one origin, one seed each) state no tighter
            # error than the method's own: aim's batches on 196 columns vary by 1.2x over seeds.
            for kind in ("seconds", "memory"):
                key = f"{regime}_{kind}_factor"
                terms[key] = max(terms[key], fitted[method][f"{kind}_factor"])
            fitted[method] |= terms
    if not fitted:
        return fitted
    median_base = float(np.median([c["memory_base_bytes"] for c in fitted.values()]))
    median_cell = float(np.median([c["memory_bytes_per_cell"] for c in fitted.values()]))
    worst_seconds = max(c["seconds_factor"] for c in fitted.values())
    worst_memory = max(c["memory_factor"] for c in fitted.values())
    for method in MECHANISMS:
        mine = [r for r in runs if r.method == method and r.status == "measured"]
        if not mine or method in fitted:
            continue
        features = [_features(r, domains) for r in mine]
        cells = np.array([max(f.cells, 1) for f in features], dtype=float)
        extra = np.array([max(f.bound_extra_bytes, 1) for f in features], dtype=float)
        memory = np.array([r.peak_rss_bytes for r in mine], dtype=float)
        left = np.maximum(memory - median_base - median_cell * cells, 0.0)
        fitted[method] = _fit_seconds(mine, features, (1.0, 1.0)) | {
            "seconds_factor": worst_seconds,
            "memory_base_bytes": round(median_base),
            "memory_bytes_per_cell": round(median_cell, 3),
            "memory_bound_weight": round(float(np.mean(left / extra)), 4),
            "memory_bound_weight_rho": 0.0,
            "memory_factor": worst_memory,
        }
    return fitted


def compare(runs: Sequence[CostRun], domains: dict[str, Domain]) -> list[dict[str, Any]]:
    """Every run with the code's prediction beside it (the ratios are measured / predicted)."""
    rows: list[dict[str, Any]] = []
    for run in runs:
        entry: dict[str, Any] = asdict(run) | {"rho": str(rho_of(run.epsilon))}
        if run.status == "measured" and run.method in COST_COEFFICIENTS:
            mechanism = MECHANISMS[run.method]
            params = mechanism.validate_params({})
            rows_used = run.rows_out if run.rows_out is not None else run.rows_in
            predicted = predict_cost(
                mechanism, domains[run.dataset], params, rows_used, rho_of(run.epsilon)
            )
            if predicted is None or run.seconds is None or run.peak_rss_bytes is None:
                rows.append(entry)
                continue
            seconds = timed_seconds(run)
            entry |= {
                "predicted_seconds": predicted.seconds,
                "predicted_peak_memory_bytes": predicted.peak_memory_bytes,
                "seconds_ratio": seconds / predicted.seconds,
                "memory_ratio": run.peak_rss_bytes / predicted.peak_memory_bytes,
                "seconds_factor": predicted.seconds_factor,
                "memory_factor": predicted.memory_factor,
                "seconds_within": _within(seconds, predicted.seconds, predicted.seconds_factor),
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


def render(
    compared: Sequence[dict[str, Any]], command: str, date: str, load: str, rendered_by: str
) -> str:
    lines = [
        SECTION,
        "",
        f"Measured by `{command}` on {date} (load average at start {load}; the machine is "
        f"shared, so the seconds are noisy); predictions and this section by `{rendered_by}`. "
        "Each run: default params, the ε of its row at δ = 1e-9, one child process at a time; "
        "*seconds* is `Mechanism.run` alone, *peak* the resident memory of the run with the "
        "loaded table (VmHWM reset after loading). Predictions are "
        "`engine.costs.predict_cost` from the public domain, the params, the row count and the "
        "job's ρ, with the coefficients in `engine.costs.COST_COEFFICIENTS` fitted on every "
        "measured run of this table, all three ε together (`--fit`); the factor is the stated "
        "error: the prediction is within ×/÷ factor of every measurement it was fitted on. A "
        "method measured on fewer than three datasets (cipher refuses all but nltcs) cannot "
        "state an error over tables from its runs: it borrows the worst factors of the others. "
        "The model (engine/costs.py): seconds = e^a · n^bn · d^bd · (ρ/ρ₁)^c · "
        "W(params)/W(calibration params) with n rows and d columns, "
        "with c = c_below under ρ₁ and c_above from ρ₁ on (ρ₁ = 0.014973057673, the ρ of "
        "ε = 1), and memory = base + per_cell · C + (weight + rho_weight · max(log(ρ/ρ₁), 0)) · "
        "E(params), with C = rows × columns "
        "and W the method's expected work (its `estimate_resources` work bound; for aim above 64 "
        "columns, with its rounds in batches), E its memory bound above the one-way baseline; "
        "the runs use "
        "default params, so how params scale the time is the work bound's assumption, not a "
        "measurement. Runs marked *skipped* were not measured (ε = 1 ran past the 120 s cap of "
        "the ε = 0.1 and 10 runs, or a run passed it) and are not fitted on: the quality table "
        "below has their seconds at every ε. Raw figures: docs/cost_model.json.",
        "",
        "| dataset | ε | method | seconds measured | seconds predicted | ratio | factor | "
        "peak MiB measured | peak MiB predicted | ratio | factor | within |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in compared:
        if "predicted_seconds" not in row:
            status = row["status"]
            status = status if len(status) < 80 else status[:77] + "…"
            lines.append(
                f"| {row['dataset']} | {row['epsilon']:g} | {row['method']} | {status} "
                "| | | | | | | | |"
            )
            continue
        within = "yes" if row["seconds_within"] and row["memory_within"] else "**no**"
        lines.append(
            f"| {row['dataset']} | {row['epsilon']:g} | {row['method']} | {row['seconds']:.3f} | "
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
            mechanism,
            domains[run["dataset"]],
            mechanism.validate_params({}),
            run["rows_out"],
            rho_of(run["epsilon"]),
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
        "its repeats, measured by the same child process at ε = 0.1, 1 and 10, including the "
        "temporal-match2 runs past the cap): not fitted on, so this is how far the calibration "
        "carries to another day's runs. That table was measured at the commit named in its Run "
        "section: a different import footprint of the interpreter shifts every peak by the same "
        "tens of MiB, and the seconds are from another day's machine load.",
        "",
        "| method | ε | runs | within both factors | worst seconds ratio | worst memory ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for method, epsilon, count, within, seconds, memory in rows:
        lines.append(
            f"| {method} | {epsilon:g} | {count} | {within} | {seconds:.2f} | {memory:.2f} |"
        )
    return "\n".join(lines) + "\n"


def current_section(document: str) -> str:
    """The "Cost preview" section of ``document`` (to the next level-2 heading), or ""."""
    return sections.current_section(document, SECTION)


def replace_section(document: str, section: str) -> str:
    """``document`` with its "Cost preview" section replaced by ``section`` (appended if
    absent)."""
    return sections.replace_section(document, SECTION, section)


def load_runs(paths: Sequence[Path]) -> tuple[list[CostRun], str, str, str]:
    """The runs saved in ``paths`` (later files replace earlier runs of the same dataset, method
    and ε, order kept), and the commands, dates and load averages that measured them, joined."""
    fields = set(CostRun.__dataclass_fields__)
    runs: dict[tuple[str, str, float], CostRun] = {}
    commands: list[str] = []
    dates: list[str] = []
    loads: list[str] = []
    for path in paths:
        saved = json.loads(path.read_text())
        for raw in saved["runs"]:
            run = CostRun(**{k: v for k, v in raw.items() if k in fields})
            runs[(run.dataset, run.method, run.epsilon)] = run
        for key, into in (("command", commands), ("date", dates), ("loadavg", loads)):
            if saved[key] not in into:
                into.append(saved[key])
    return (
        list(runs.values()),
        "`, then `".join(commands),
        " and ".join(dates),
        " and ".join(loads),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="laid out like ../shared/data")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--json", type=Path, default=Path("docs/cost_model.json"))
    parser.add_argument("--cap", type=float, default=DEFAULT_CAP_SECONDS, help="seconds per run")
    parser.add_argument("--methods", nargs="*", default=None, help="default: every method")
    parser.add_argument("--datasets", nargs="*", default=None, help="default: every dataset")
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        help="reuse the runs saved in these files (a later file's run of the same dataset, "
        "method and ε replaces an earlier one)",
    )
    parser.add_argument(
        "--epsilons",
        type=Decimal,
        nargs="+",
        default=list(DEFAULT_EPSILONS),
        help="ε of the runs (δ = 1e-9); default 1",
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        help="DATASET:METHOD[:REASON] pairs recorded as not run (e.g. known to pass the cap)",
    )
    parser.add_argument("--fit", action="store_true", help="print fitted coefficients")
    args = parser.parse_args(argv)

    raw_args = sys.argv[1:] if argv is None else list(argv)
    datasets = discover_datasets(args.data.resolve())
    if args.datasets:
        datasets = [d for d in datasets if d.name in set(args.datasets)]
    domains = {d.name: _domain(d) for d in datasets}
    if args.from_json:
        runs, command, date, load = load_runs(args.from_json)
    else:
        methods = args.methods or list(MECHANISMS)
        load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
        date = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        command = shlex.join(["python", "-m", "benchmarks.cost_model", *raw_args])
        runs = measure(datasets, methods, args.epsilons, args.cap, args.skip)
    methods_order = list(MECHANISMS)
    runs.sort(key=lambda r: (r.dataset, r.epsilon, methods_order.index(r.method)))
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
        rendered_by = shlex.join(["python", "-m", "benchmarks.cost_model", *raw_args])
        section = render(compared, command, date, load, rendered_by)
        section += render_out_of_sample(out_of_sample(document, domains))
        args.out.write_text(replace_section(document, section))
    return 0


if __name__ == "__main__":
    sys.exit(main())
