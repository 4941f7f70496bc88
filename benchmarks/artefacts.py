"""What a release's artefacts cost: time and size of the record, the model, the measurements,
both report tiers and a free re-sample, per benchmark dataset (docs/benchmarks.md, "Release
artefacts").

    python -m benchmarks.artefacts --data ../shared/data [--method mst] [--epsilon 1]
        [--sample-rows 100000] [--out docs/benchmarks.md]

Runs in this process, one dataset after another: the mechanism (ε → ρ at δ = 1e-9, seed 0), then
exactly what the worker does after writing the output (app/reports/artefacts.py: the release
record, the model, the measurement tables, the release tier and its HTML, the owner tier with the
real table and its HTML), then a re-sample from the model's bytes. Timings are wall seconds of
each step on this machine; sizes are the bytes stored.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow.parquet as pq

from benchmarks._child import load_dataset
from benchmarks.quality import discover_datasets
from benchmarks.sections import replace_section
from engine.accounting import rho_from_epsilon_delta
from engine.mechanisms import get_mechanism
from engine.models.fitted import FittedModel
from engine.release.from_result import record_from_result
from engine.release.tables import measurements_arrow, measurements_json
from engine.reports import build_owner_report, build_release_report, render_html

SECTION = "## Release artefacts: time and size"
T = TypeVar("T")


def _timed(step: Callable[[], T]) -> tuple[T, float]:
    started = time.perf_counter()
    value = step()
    return value, time.perf_counter() - started


def measure(
    csv: Path, domain: Path, method: str, epsilon: float, sample_rows: int
) -> dict[str, Any]:
    """One dataset: the run, then every artefact the worker builds after it, timed and sized."""
    schema, data = load_dataset(str(csv), str(domain))
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({})
    rho = Fraction(rho_from_epsilon_delta(Decimal(str(epsilon)), Decimal("1e-9")))
    result, run_seconds = _timed(
        lambda: mechanism.run(data, rho, params, rng=np.random.default_rng(0))
    )
    synthetic = result.codes
    record = record_from_result(result, schema.domain(), method, params, rho)
    record_bytes, record_seconds = _timed(record.to_bytes)
    model = result.model
    model_bytes, model_seconds = _timed(model.to_bytes) if model is not None else (b"", 0.0)

    def tables() -> tuple[bytes, bytes]:
        buffer = io.BytesIO()
        pq.write_table(measurements_arrow(record, schema), buffer, compression="zstd")
        return buffer.getvalue(), json.dumps(measurements_json(record, schema)).encode()

    (parquet, measured_json), tables_seconds = _timed(tables)
    marginal = model.marginal if model is not None else None
    release, release_seconds = _timed(
        lambda: build_release_report(schema, record, synthetic, model_marginal=marginal)
    )
    release_html, release_html_seconds = _timed(lambda: render_html(release, title="release"))
    owner, owner_seconds = _timed(
        lambda: build_owner_report(schema, data.codes, synthetic, rng=np.random.default_rng(0))
    )
    owner_html, owner_html_seconds = _timed(lambda: render_html(owner, title="owner"))
    loaded = FittedModel.from_bytes(model_bytes) if model is not None else None
    _, sample_seconds = (
        _timed(lambda: loaded.sample(sample_rows, np.random.default_rng(1)))
        if loaded is not None
        else (None, float("nan"))
    )
    return {
        "dataset": csv.parent.name,
        "rows": int(data.n_rows),
        "columns": len(schema.names),
        "run_seconds": run_seconds,
        "record_bytes": len(record_bytes),
        "model_bytes": len(model_bytes),
        "measurements_parquet_bytes": len(parquet),
        "measurements_json_bytes": len(measured_json),
        "serialise_seconds": record_seconds + model_seconds + tables_seconds,
        "release_seconds": release_seconds,
        "release_html_seconds": release_html_seconds,
        "release_html_bytes": len(release_html.encode()),
        "owner_seconds": owner_seconds,
        "owner_html_seconds": owner_html_seconds,
        "owner_html_bytes": len(owner_html.encode()),
        "k_marginal_score": owner["marginals"]["k_marginal_score"],
        "sample_rows": sample_rows,
        "sample_seconds": sample_seconds,
    }


def _kib(value: int) -> str:
    return f"{value / 1024:,.0f}"


def render(runs: Sequence[dict[str, Any]], command: str, method: str, epsilon: float) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    lines = [
        SECTION,
        "",
        f"Measured by `{command}` on {when} (load average at the end {load}; the machine is "
        f"shared, so seconds are indicative). `{method}` with default params at ε = {epsilon:g} "
        "(δ = 1e-9), seed 0, then what the worker builds after writing a job's output "
        "(app/reports/artefacts.py): *record*, *model* and *measurements* are the stored bytes "
        "(KiB), *serialise* their encoding time; *release* and *owner* build the two report "
        "tiers (the owner tier reads the real table), *html* renders each; *sample* draws "
        "rows from the stored model's bytes (free re-sampling). Seconds are wall time of that "
        "step alone.",
        "",
        "| dataset | rows × cols | run s | record | model | meas. parquet | meas. json | "
        "serialise s | release s | release html s (KiB) | owner s | owner html s (KiB) | "
        "k-marginal | sample rows | sample s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: | ---: |",
    ]
    for r in runs:
        lines.append(
            f"| {r['dataset']} | {r['rows']:,} × {r['columns']} | {r['run_seconds']:.2f} | "
            f"{_kib(r['record_bytes'])} | {_kib(r['model_bytes'])} | "
            f"{_kib(r['measurements_parquet_bytes'])} | {_kib(r['measurements_json_bytes'])} | "
            f"{r['serialise_seconds']:.2f} | {r['release_seconds']:.2f} | "
            f"{r['release_html_seconds']:.2f} ({_kib(r['release_html_bytes'])}) | "
            f"{r['owner_seconds']:.2f} | {r['owner_html_seconds']:.2f} "
            f"({_kib(r['owner_html_bytes'])}) | {r['k_marginal_score']:.1f} | "
            f"{r['sample_rows']:,} | {r['sample_seconds']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--method", default="mst")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--sample-rows", type=int, default=100_000)
    parser.add_argument("--datasets", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=None, help="docs/benchmarks.md to update")
    args = parser.parse_args(argv)
    runs = []
    for dataset in discover_datasets(args.data):
        if args.datasets and dataset.name not in args.datasets:
            continue
        print(f"{dataset.name} …", flush=True)
        runs.append(
            measure(dataset.csv, dataset.domain, args.method, args.epsilon, args.sample_rows)
        )
    command = "python -m benchmarks.artefacts " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    section = render(runs, command, args.method, args.epsilon)
    print(section)
    if args.out is not None:
        args.out.write_text(replace_section(args.out.read_text(), SECTION, section))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
