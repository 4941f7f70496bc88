"""Values inside bins: coupled (engine.columns.coupling) against independent draws.

For each raw table: the draft accepted as is, discovery, one method run at ε (δ = 1e-6 as in
raw_fidelity), then the same synthetic codes decoded twice with the same seed, once with the
copula that couples the positions inside the bins and once with every column drawn on its own
(the decoding before the copula). Both are scored with raw_fidelity's metrics; the difference is
only the decoding, so one seed per table compares like with like.

    python -m benchmarks.inbin_coupling --data ../shared/data/raw --update docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchmarks import raw_fidelity as rf
from benchmarks.sections import git_commit, markdown_table, update_or_print

HEADING = "## Values inside bins (coupled draws)"


@dataclass
class Result:
    table: str
    method: str
    epsilon: float
    decoding: str
    decode_s: float
    metrics: dict[str, Any]
    pearson_diff: float
    ml_r2: float | None


@contextmanager
def _independent_draws() -> Any:
    """Decoding without the copula: every column draws inside its bins on its own."""
    from engine.tables.encoding import TableSchema

    original = TableSchema.coupling
    TableSchema.coupling = lambda self, codes: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        TableSchema.coupling = original  # type: ignore[method-assign]


def synthetic_codes(path: Path, method: str, epsilon: float, seed: int) -> tuple[Any, Any]:
    """The schema discovery learned and the method's synthetic codes, as raw_fidelity runs it."""
    from engine.domain import Dataset
    from engine.mechanisms import MECHANISMS
    from engine.schema_draft import draft_schema

    upload = rf.discovered(path, draft_schema(path), epsilon)
    upload.codes.flags.writeable = False
    mechanism = MECHANISMS[method]
    result = mechanism.run(
        Dataset(upload.schema.domain(), upload.codes),
        upload.method_rho,
        mechanism.Params(),
        rng=np.random.default_rng(seed),
        rows=upload.rows,
    )
    return upload.schema, result.codes


def pearson_diff(real: pd.DataFrame, synth: pd.DataFrame, kinds: Sequence[rf.ColumnKind]) -> float:
    """Mean |real − synthetic| Pearson correlation over pairs of numeric and date columns."""
    names = [c.name for c in kinds if c.kind != "categorical" and real[c.name].nunique() > 1]
    a, b = real[names].corr().to_numpy(), synth[names].corr().to_numpy()
    upper = np.triu_indices(len(names), 1)
    return float(np.nanmean(np.abs(a - b)[upper]))


def run_table(path: Path, method: str, epsilon: float, seed: int) -> list[Result]:
    from engine.tables.synthetic_output import write_synthetic

    table = path.stem
    schema, codes = synthetic_codes(path, method, epsilon, seed)
    kinds = rf.draft_kinds(path)
    real = rf.canonical(
        rf.read_raw(path, [c.name for c in kinds.columns], kinds.missing_values), kinds.columns
    )
    target = rf.TARGETS.get(table)
    out: list[Result] = []
    with tempfile.TemporaryDirectory() as scratch:
        for decoding in ("independent", "coupled"):
            file = Path(scratch) / f"{decoding}.parquet"
            started = time.perf_counter()
            if decoding == "independent":
                with _independent_draws():
                    write_synthetic(schema, codes, np.random.default_rng(seed), file, "parquet")
            else:
                write_synthetic(schema, codes, np.random.default_rng(seed), file, "parquet")
            elapsed = time.perf_counter() - started
            synth = rf.read_synthetic(file, kinds.columns)
            metrics = rf.fidelity(real, synth, kinds.columns).summary()
            ml = rf.ml_efficacy(real, synth, kinds.columns, target) if target else None
            out.append(
                Result(
                    table,
                    method,
                    epsilon,
                    decoding,
                    elapsed,
                    metrics,
                    pearson_diff(real, synth, kinds.columns),
                    ml,
                )
            )
            print(f"[inbin_coupling] {table} {method} {decoding}: done", file=sys.stderr)
    return out


def render(results: Sequence[Result], command: str) -> str:
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"commit `{git_commit(length=7)}`, {rf.machine()}. The same synthetic codes (one "
        "run per table and method, the draft as is, (ε, 1e-6) in all) decoded twice with the "
        "same seed: *independent*, every column drawing inside its bins on its own (the "
        "decoding before engine/columns/coupling.py), and *coupled*, positions inside the bins "
        "drawn from a Gaussian copula of the linked columns conditioned on the bins. "
        'Metrics as in "Raw-table fidelity"; *Pearson diff* is the mean absolute difference '
        "of the Pearson correlation matrices over numeric and date columns; *decode s* is "
        "decoding and writing Parquet.",
        "",
    ]
    header = ["table", "method", "ε", "decoding", "KS", "Spearman diff", "Pearson diff"]
    header += ["2-way TVD", "ML R²", "decode s"]
    rows = [
        [
            r.table,
            r.method,
            f"{r.epsilon:g}",
            r.decoding,
            f"{r.metrics['ks_mean']:.4f}",
            f"{r.metrics['correlation_diff']:.4f}",
            f"{r.pearson_diff:.4f}",
            f"{r.metrics['pair_tvd']:.4f}",
            "–" if r.ml_r2 is None else f"{r.ml_r2:.3f}",
            f"{r.decode_s:.2f}",
        ]
        for r in results
    ]
    lines += markdown_table(header, rows, "llrlrrrrrr")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the raw tables' directory")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--methods", default="mst,aim")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip", default="", help="table:method pairs to leave out")
    parser.add_argument("--update", type=Path, default=None, help="rewrite this Markdown section")
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = parser.parse_args(raw)
    skip = set(rf._csv(args.skip))
    results: list[Result] = []
    for table in rf._csv(args.tables):
        for method in rf._csv(args.methods):
            if f"{table}:{method}" in skip:
                continue
            results += run_table(args.data / f"{table}.csv", method, args.epsilon, args.seed)
    section = render(results, shlex.join(["python", "-m", "benchmarks.inbin_coupling", *raw]))
    update_or_print(args.update, HEADING, section)
    if args.json is not None:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2, default=str))


if __name__ == "__main__":
    main()
