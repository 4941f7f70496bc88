"""Sampling from a fitted model, stage by stage (issue 15 §2; not part of ``make bench``).

Fits ``mst`` on adult at ε = 1 (δ = 1e-9), then draws ``--rows`` rows from the fitted model and
times each stage of what a job does with them: the model's ``synthetic_data`` (codes on the
compressed domain), ``Compression.decompress_codes``, ``TableSchema.decode`` and the Parquet write
(``TableSchema.to_arrow`` + ``pq.write_table``, or the batched ``write_synthetic`` when it
exists).
adult's columns are coded integers; the schema used for decoding re-declares them with the
column kinds a real upload has (integer and real-valued bins, labelled categories, a boolean), so
decode does the work it does in the service:

    .venv/bin/python -m benchmarks.sampling --data ../shared/data/adult --rows 2000000
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import platform
import resource
import tempfile
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from engine.accounting import rho_from_epsilon_delta
from engine.columns import BooleanColumn, CategoricalColumn, Column, NumericColumn
from engine.domain import Dataset, Domain
from engine.mechanisms.mst.mechanism import MSTMechanism, MSTParams
from engine.models.kinds import GraphicalModelKind
from engine.tables.encoding import TableSchema

T = TypeVar("T")


def adult_schema(domain: Domain) -> TableSchema:
    """A schema over adult's coded columns with realistic column kinds (public: from sizes)."""
    columns: list[Column] = []
    for name, size in zip(domain.attributes, domain.sizes, strict=True):
        if name == "age":
            edges = tuple(float(17 + i) for i in range(size + 1))
            columns.append(NumericColumn(name, edges, integer=True))
        elif name in ("fnlwgt", "capital-gain", "capital-loss"):
            edges = tuple(float(1000 * i) for i in range(size + 1))
            columns.append(NumericColumn(name, edges, decimals=2 if name == "fnlwgt" else None))
        elif name == "hours-per-week":
            edges = tuple(float(i) for i in range(size + 1))
            columns.append(NumericColumn(name, edges, integer=True))
        elif size == 2:
            columns.append(BooleanColumn(name))
        else:
            columns.append(CategoricalColumn(name, tuple(f"{name}-{i}" for i in range(size))))
    return TableSchema(tuple(columns))


def timed(label: str, times: dict[str, float], call: Callable[[], T]) -> T:
    started = time.perf_counter()
    out = call()
    times[label] = time.perf_counter() - started
    return out


def fit(data_dir: Path, seed: int) -> tuple[GraphicalModelKind, Domain]:
    sizes = json.loads((data_dir / "adult-domain.json").read_text())
    domain = Domain(tuple(sizes), tuple(int(s) for s in sizes.values()))
    frame = pd.read_csv(data_dir / "adult.csv")
    data = Dataset(domain, frame[list(domain.attributes)].to_numpy(dtype=np.int64))
    rho = Fraction(str(rho_from_epsilon_delta(1.0, 1e-9)))
    result = MSTMechanism().run(data, rho, MSTParams(), rng=np.random.default_rng(seed), rows=1)
    body = result.model.body if result.model is not None else None
    if not isinstance(body, GraphicalModelKind):
        raise SystemExit("mst did not return a graphical model")
    return body, domain


def run_stages(
    model: GraphicalModelKind, schema: TableSchema, rows: int, seed: int, out: Path
) -> dict[str, float]:
    times: dict[str, float] = {}
    rng = np.random.default_rng(seed)
    if hasattr(model.model, "synthetic_batches"):
        # Since the batched sampler: drawn and decompressed per batch of 2^20 rows, as the
        # service's GraphicalModelKind.sample does (one stage).
        codes = timed(
            "sample (draw + decompress)",
            times,
            lambda: model.sample(model.compression.original, rows, rng),
        )
    else:
        codes = _draw_then_decompress(model, rows, rng, times)
    return _decode_and_write(codes, schema, rng, out, times)


def _draw_then_decompress(
    model: GraphicalModelKind, rows: int, rng: np.random.Generator, times: dict[str, float]
) -> Any:
    """Before the batched sampler: the whole table drawn, then decompressed."""
    small = timed(
        "synthetic_data", times, lambda: model.model.synthetic_data(rows, rng, model.synthesis)
    )
    if "out" in inspect.signature(model.compression.decompress_codes).parameters:
        # As GraphicalModelKind.sample does since issue 15: in place, no second table.
        codes = timed(
            "decompress_codes",
            times,
            lambda: model.compression.decompress_codes(small, rng, out=small),
        )
    else:
        codes = timed(
            "decompress_codes", times, lambda: model.compression.decompress_codes(small, rng)
        )
    return codes


def _decode_and_write(
    codes: Any, schema: TableSchema, rng: np.random.Generator, out: Path, times: dict[str, float]
) -> dict[str, float]:
    if hasattr(schema, "decode_batches"):
        from engine.tables.synthetic_output import write_synthetic

        timed(
            "decode + write (batched)",
            times,
            lambda: write_synthetic(schema, codes, rng, out, "parquet"),
        )
    else:  # before the batched writer (issue 15): decode, convert and write at once
        import pyarrow.parquet as pq

        frame = timed("decode", times, lambda: schema.decode(codes, rng))
        table = timed("to_arrow", times, lambda: schema.to_arrow(frame))
        timed("write_table", times, lambda: pq.write_table(table, out, compression="zstd"))
    times["total"] = sum(times.values())
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, default=Path("../shared/data/adult"))
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="cProfile the sampling stages")
    parser.add_argument(
        "--synthesis",
        choices=("balanced", "round", "sample"),
        default=None,
        help="synthesis method (default: mst's, balanced)",
    )
    args = parser.parse_args()
    model, domain = fit(args.data, args.seed)
    if args.synthesis is not None:
        model = dataclasses.replace(model, synthesis=args.synthesis)
    schema = adult_schema(domain)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out.parquet"
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
            times = run_stages(model, schema, args.rows, args.seed, out)
            profiler.disable()
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        else:
            times = run_stages(model, schema, args.rows, args.seed, out)
    print(
        f"rows={args.rows} synthesis={model.synthesis} python={platform.python_version()} "
        f"numpy={np.__version__}"
    )
    for label, seconds in times.items():
        print(f"  {label:<26} {seconds:7.2f} s")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  peak RSS (fit + sampling)  {peak:7.0f} MiB")


if __name__ == "__main__":
    main()
