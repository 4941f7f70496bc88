"""Loading a large table: the CLI's reader and the upload's encoder against pandas and pyarrow.

adult is stacked ``--times`` times into a temporary CSV (and the same table as Parquet); each
reader runs on the same file:

* baselines: ``pd.read_csv`` and ``pyarrow.csv.read_csv`` (types inferred, nothing checked);
* ``engine.cli.load_table`` (the ``rhosynth`` CLI's path: read, validate, encode to codes);
* ``app.datasets.ingest.ingest_table`` (the service's upload path: read within the upload's
  limits, validate, encode, write the codes as Parquet).

Two schemas over the same file: ``codes`` (adult's domain map: every column integer codes) and
``typed`` (the five wide columns numeric with integer bins, the others categorical with the codes'
text as declared categories), so the numeric, codes and categorical encoders are all measured.

    python -m benchmarks.loading --data ../shared/data --times 40 --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import cProfile
import json
import platform
import pstats
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from app.datasets.ingest import IngestLimits, ingest_table
from benchmarks.sections import replace_section
from engine.cli import load_table
from engine.encoding import TableSchema

HEADING = "## Loading 2 M rows"
NUMERIC = ("age", "fnlwgt", "capital-gain", "capital-loss", "hours-per-week")
LIMITS = IngestLimits(max_columns=1000, max_rows=100_000_000, max_cell_bytes=1024)


def stacked_files(data: Path, times: int, folder: Path) -> tuple[Path, Path, dict[str, int]]:
    """adult stacked ``times`` times as CSV and as Parquet; and its domain map."""
    domain = json.loads((data / "adult" / "adult-domain.json").read_text())
    frame = pd.read_csv(data / "adult" / "adult.csv")
    stacked = pd.concat([frame] * times, ignore_index=True)
    csv_path, parquet_path = folder / "adult.csv", folder / "adult.parquet"
    stacked.to_csv(csv_path, index=False)
    pq.write_table(pa.Table.from_pandas(stacked, preserve_index=False), parquet_path)
    return csv_path, parquet_path, domain


def schemas(domain: dict[str, int]) -> dict[str, TableSchema]:
    typed: list[dict[str, Any]] = []
    for name, size in domain.items():
        if name in NUMERIC:
            typed.append(
                {"name": name, "type": "numeric", "bins": list(range(size + 1)), "integer": True}
            )
        else:
            typed.append(
                {"name": name, "type": "categorical", "categories": [str(i) for i in range(size)]}
            )
    return {
        "codes": TableSchema.from_json(domain),
        "typed": TableSchema.from_json({"columns": typed}),
    }


def timed(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def measure(
    csv_path: Path, parquet_path: Path, tables: dict[str, TableSchema], repeat: int, folder: Path
) -> dict[str, float]:
    target = folder / "codes.parquet"
    runs: dict[str, Callable[[], object]] = {
        "pd.read_csv (CSV)": lambda: pd.read_csv(csv_path),
        "pyarrow.csv.read_csv (CSV)": lambda: pacsv.read_csv(csv_path),
        "pd.read_parquet (Parquet)": lambda: pd.read_parquet(parquet_path),
    }
    for label, schema in tables.items():
        for kind, path in (("CSV", csv_path), ("Parquet", parquet_path)):
            runs[f"load_table, {label} schema ({kind})"] = lambda p=path, s=schema: load_table(p, s)
            runs[f"ingest_table, {label} schema ({kind})"] = lambda p=path, s=schema: ingest_table(
                p, s, target, LIMITS
            )
    return {name: timed(run, repeat) for name, run in runs.items()}


def profile(run: Callable[[], object], lines: int) -> str:
    profiler = cProfile.Profile()
    profiler.runcall(run)
    out = pstats.Stats(profiler).sort_stats("cumulative")
    import io

    buffer = io.StringIO()
    out.stream = buffer  # type: ignore[attr-defined]
    out.print_stats(lines)
    return buffer.getvalue()


def _baselines(results: dict[str, float]) -> tuple[float, float]:
    csv = min(results["pd.read_csv (CSV)"], results["pyarrow.csv.read_csv (CSV)"])
    return csv, results["pd.read_parquet (Parquet)"]


def _ratio(results: dict[str, float], name: str) -> str:
    csv, parquet = _baselines(results)
    return f"{results[name] / (parquet if '(Parquet)' in name else csv):.1f}×"


def section(results: dict[str, float], rows: int, times: int, before: dict[str, float]) -> str:
    command = "python -m benchmarks.loading " + shlex.join(sys.argv[1:])
    lines = [
        HEADING,
        "",
        f"adult stacked {times}× ({rows:,} rows × 14 columns), best of the repeats, on "
        f"{platform.machine()} with Python {platform.python_version()}, a 2-CPU machine shared "
        "with other jobs (its load changes the seconds between runs several fold, so compare "
        "the ratios). Ratio: the time over the faster baseline of the same run for the format "
        "(pd.read_csv or pyarrow.csv.read_csv for CSV, pd.read_parquet for Parquet), which "
        "only parse and check nothing. Before: the per-value pandas encoders (``str.strip`` "
        "and ``pd.to_numeric`` on objects); after: engine/columns/arrow_text.py.",
        "",
        f"    {command}",
        "",
        "(the before file: the same command with ``--json`` only, on the commit before the "
        "Arrow encoders, minutes earlier).",
        "",
        "| reader | before (s) | before / baseline | after (s) | after / baseline |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, seconds in results.items():
        old = f"{before[name]:.2f} | {_ratio(before, name)}" if name in before else "– | –"
        lines.append(f"| {name} | {old} | {seconds:.2f} | {_ratio(results, name)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--times", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", choices=["cli", "ingest"], help="print a cProfile of one")
    parser.add_argument("--schema", choices=["codes", "typed"], default="codes")
    parser.add_argument("--json", type=Path, help="write the timings as JSON here")
    parser.add_argument("--before", type=Path, help="timings (JSON) of an earlier run to show")
    parser.add_argument("--update", type=Path, help="replace the section in this Markdown file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        csv_path, parquet_path, domain = stacked_files(args.data, args.times, folder)
        tables = schemas(domain)
        rows = 48_842 * args.times
        if args.profile:
            schema = tables[args.schema]
            run: Callable[[], object] = (
                (lambda: load_table(csv_path, schema))
                if args.profile == "cli"
                else (lambda: ingest_table(csv_path, schema, folder / "p.parquet", LIMITS))
            )
            print(profile(run, 30))
            return
        results = measure(csv_path, parquet_path, tables, args.repeat, folder)
    for name, seconds in results.items():
        print(f"{seconds:8.2f} s  {name}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.update:
        before = json.loads(args.before.read_text()) if args.before else {}
        document = args.update.read_text()
        args.update.write_text(
            replace_section(document, HEADING, section(results, rows, args.times, before))
        )


if __name__ == "__main__":
    main()
