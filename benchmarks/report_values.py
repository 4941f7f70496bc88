"""What keeping raw values and comparing them costs (issue 23 §4): upload time and size, owner tier.

For each raw table: ``rhosynth schema draft``'s proposal accepted as is, DP discovery at
(ε, δ) = (1, 1e-9) as the upload runs it, then ``ingest_table`` timed without and with the raw
values file (interleaved, ``--repeats`` times each; medians), and their sizes. Then an
``independent`` release of the same size is decoded to Parquet as the worker publishes it, and the
owner tier is built from the codes only (as before) and with the value comparison (the stored
values file and the Parquet output read as the worker reads them), timed the same way.

    python -m benchmarks.report_values --data ../shared/data/raw --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.datasets.discovery import discover_and_resolve
from app.datasets.ingest import IngestLimits, ingest_table, read_encoded_table
from benchmarks.sections import git_commit, markdown_table, replace_section
from engine.accounting import rho_from_epsilon_delta
from engine.domain import Dataset
from engine.mechanisms import MECHANISMS
from engine.reports.owner import build_owner_report
from engine.reports.values import ValueSource
from engine.schema_draft import draft_schema
from engine.tables.encoding import SchemaSpec
from engine.tables.raw_values import value_columns
from engine.tables.synthetic_output import write_synthetic

HEADING = "## Raw values and the owner tier on values (issue 23 §4)"
LIMITS = IngestLimits(max_columns=1_000, max_rows=100_000_000, max_cell_bytes=65_536)


@dataclass(frozen=True)
class Result:
    table: str
    rows: int
    columns: int
    value_columns: int
    ingest_codes_s: float
    ingest_values_s: float
    table_bytes: int
    values_bytes: int
    owner_codes_s: float
    owner_values_s: float
    status: str


def _median(
    run: Callable[[], object], other: Callable[[], object], repeats: int
) -> tuple[float, float]:
    """Median seconds of ``run`` and ``other``, called alternately ``repeats`` times each."""
    first: list[float] = []
    second: list[float] = []
    for _ in range(repeats):
        for call, times in ((run, first), (other, second)):
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
    return statistics.median(first), statistics.median(second)


def _ipc_batches(path: Path) -> Callable[[], Iterator[pa.RecordBatch]]:
    def batches() -> Iterator[pa.RecordBatch]:
        with pa.OSFile(str(path)) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)

    return batches


def _parquet_batches(path: Path, names: list[str]) -> Callable[[], Iterator[pa.RecordBatch]]:
    def batches() -> Iterator[pa.RecordBatch]:
        yield from pq.ParquetFile(path).iter_batches(batch_size=65_536, columns=names)

    return batches


def run_table(path: Path, repeats: int, seed: int) -> Result:
    spec = SchemaSpec.from_json(draft_schema(path).to_json())
    total = rho_from_epsilon_delta(Decimal(1), Decimal("1e-9"))
    outcome = discover_and_resolve(
        path, spec, LIMITS, budget_rho=total, budget_delta=Decimal("1e-9"), discovery_rho=None
    )
    schema = outcome.schema
    names = [c.name for c in value_columns(schema)]
    with tempfile.TemporaryDirectory() as scratch:
        table, values = Path(scratch) / "table.arrow", Path(scratch) / "values.arrow"
        codes_s, values_s = _median(
            lambda: ingest_table(path, schema, table, LIMITS),
            lambda: ingest_table(path, schema, table, LIMITS, values_target=values),
            repeats,
        )
        real = read_encoded_table(table, schema)
        mechanism = MECHANISMS["independent"]
        result = mechanism.run(
            Dataset(schema.domain(), real),
            Fraction(total) - Fraction(outcome.rho),
            mechanism.Params.model_validate({}),
            rng=np.random.default_rng(seed),
            rows=real.shape[0],
        )
        output = Path(scratch) / "output.parquet"
        write_synthetic(schema, result.codes, np.random.default_rng(seed), output, "parquet")

        def owner(with_values: bool) -> dict[str, object]:
            return build_owner_report(
                schema,
                real,
                result.codes,
                real_values=ValueSource(_ipc_batches(values)) if with_values else None,
                synthetic_values=(
                    ValueSource(_parquet_batches(output, names), names=frozenset(names))
                    if with_values
                    else None
                ),
                rng=np.random.default_rng(seed),
            )

        owner_codes_s, owner_values_s = _median(
            lambda: owner(False), lambda: owner(True), max(1, repeats // 2)
        )
        verdict = owner(True)["verdict"]
        return Result(
            table=path.stem,
            rows=int(real.shape[0]),
            columns=len(schema.columns),
            value_columns=len(names),
            ingest_codes_s=codes_s,
            ingest_values_s=values_s,
            table_bytes=table.stat().st_size,
            values_bytes=values.stat().st_size,
            owner_codes_s=owner_codes_s,
            owner_values_s=owner_values_s,
            status=str(verdict["status"]),  # type: ignore[index]
        )


def render(results: list[Result], command: str, repeats: int) -> str:
    rows = [
        [
            r.table,
            f"{r.rows:,} × {r.columns}",
            str(r.value_columns),
            f"{r.ingest_codes_s:.2f}",
            f"{r.ingest_values_s:.2f}",
            f"{r.table_bytes / 1e6:.1f}",
            f"{r.values_bytes / 1e6:.1f}",
            f"{r.owner_codes_s:.2f}",
            f"{r.owner_values_s:.2f}",
            r.status,
        ]
        for r in results
    ]
    lines = [
        HEADING,
        "",
        f"`{command}` (commit {git_commit()}, Python {platform.python_version()}, 2 shared CPUs; "
        f"medians of {repeats} interleaved runs for the upload, {max(1, repeats // 2)} for the "
        "owner tier). The draft is accepted as is and discovery runs at (ε, δ) = (1, 1e-9); the "
        "release is `independent` (its quality is not the point here: the verdict's status is "
        "shown only to say the comparison ran). *Upload*: `ingest_table` with the codes only and "
        "with the raw values file as well. *Owner tier*: `build_owner_report` on codes only (as "
        "for a dataset stored without values) and with the value comparison, both tables' values "
        "streamed from their files as the worker reads them.",
        "",
        *markdown_table(
            [
                "table",
                "rows × stored columns",
                "value columns",
                "upload s (codes)",
                "upload s (+ values)",
                "table MB",
                "values MB",
                "owner s (bins)",
                "owner s (+ values)",
                "verdict",
            ],
            rows,
            "llrrrrrrrl",
        ),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the raw tables' directory")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--update", type=Path, default=None, help="rewrite this Markdown section")
    args = parser.parse_args(raw)
    results = []
    for name in filter(None, args.tables.split(",")):
        result = run_table(args.data / f"{name}.csv", args.repeats, args.seed)
        print(result, file=sys.stderr)
        results.append(result)
    command = "python -m benchmarks.report_values " + shlex.join(raw)
    section = render(results, command, args.repeats)
    if args.update is None:
        print(section)
        return
    document = args.update.read_text()
    args.update.write_text(replace_section(document, HEADING, section))


if __name__ == "__main__":
    main()
