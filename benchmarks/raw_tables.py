"""The raw tables (../shared/data/raw) from draft to release: discovery cost, times, quality.

For each table: ``rhosynth schema draft``'s proposal, accepted as is; the upload's own code path
in-process (:func:`app.datasets.discovery.discover_and_resolve`, then
:func:`app.datasets.ingest.ingest_table`: DP discovery and encoding, the parts of an upload that
read the file); the method on what discovery left of the budget; then quality on the binned
columns (mean 1-, 2- and 3-way TVD of the synthetic codes against the real codes, the definition of
../shared/bench/marginal_error.py via :func:`engine.evaluation.mean_tvd`) and, per nullable column,
the absolute difference between the real and synthetic missing-value rates.

    python -m benchmarks.raw_tables --data ../shared/data/raw --update docs/benchmarks.md

The budget is (ε, δ) = (1, 1e-9) converted to ρ (``--epsilon TABLE:E`` adds runs at other ε);
open-set category discovery gets δ = 1e-9 more, so each release is (ε, 2e-9)-DP in all. DP noise
comes from the OS CSPRNG (not repeatable); ``--seed`` drives post-processing only.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from app.datasets.discovery import discover_and_resolve
from app.datasets.ingest import IngestLimits, UploadRejected, ingest_table, read_encoded_table
from benchmarks.sections import git_commit
from engine.accounting import rho_from_epsilon_delta
from engine.cli import parse_params
from engine.discovery.plan import DEFAULT_DISCOVERY_SHARE
from engine.domain import Dataset
from engine.evaluation import mean_tvd
from engine.mechanisms import MECHANISMS
from engine.schema_draft import draft_schema
from engine.tables.encoding import SchemaSpec

BEGIN = "<!-- raw:begin (benchmarks/raw_tables.py) -->"
END = "<!-- raw:end -->"
LIMITS = IngestLimits(max_columns=1000, max_rows=100_000_000, max_cell_bytes=1024)


@dataclass
class Result:
    table: str
    rows: int
    columns: int
    stored: int
    ignored: int
    discovered: int
    draft_s: float
    upload_s: float
    job_s: float
    discovery_rho: str
    discovery_delta: str
    method_rho: str
    tvd: dict[int, float]
    missing_error_mean: float | None
    missing_error_max: float | None
    nullable: int
    params: dict[str, Any]
    epsilon: float = 1.0
    refused: str | None = None


def run_table(
    path: Path,
    method: str,
    params: dict[str, Any],
    seed: int,
    max_marginals: int,
    epsilon: float,
) -> Result:
    started = time.perf_counter()
    draft = draft_schema(path)
    draft_s = time.perf_counter() - started
    spec = SchemaSpec.from_json(draft.to_json())
    total = rho_from_epsilon_delta(Decimal(str(epsilon)), Decimal("1e-9"))
    started = time.perf_counter()
    try:
        outcome = discover_and_resolve(
            path,
            spec,
            LIMITS,
            budget_rho=total,
            budget_delta=Decimal("1e-9"),
            discovery_rho=None,
        )
    except UploadRejected as rejected:  # reported as the upload would answer it
        return Result(
            table=path.stem,
            rows=0,
            columns=len(draft.columns),
            stored=0,
            ignored=0,
            discovered=0,
            draft_s=draft_s,
            upload_s=time.perf_counter() - started,
            job_s=0.0,
            discovery_rho="",
            discovery_delta="",
            method_rho="",
            tvd={},
            missing_error_mean=None,
            missing_error_max=None,
            nullable=0,
            params=params,
            epsilon=epsilon,
            refused=rejected.message,
        )
    schema = outcome.schema
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "table.arrow"
        rows = ingest_table(path, schema, target, LIMITS)
        real = read_encoded_table(target, schema)
    upload_s = time.perf_counter() - started
    mechanism = MECHANISMS[method]
    validated = mechanism.Params.model_validate(params)
    rho = Fraction(total) - Fraction(outcome.rho)
    started = time.perf_counter()
    result = mechanism.run(
        Dataset(schema.domain(), real), rho, validated, rng=np.random.default_rng(seed)
    )
    job_s = time.perf_counter() - started
    synth = result.codes
    tvd = mean_tvd(
        real,
        synth,
        schema.domain(),
        max_way=3,
        max_marginals=max_marginals,
        rng=np.random.default_rng(seed),
    )
    errors = []
    for j, column in enumerate(schema.columns):
        null = getattr(column, "null_code", None)
        if null is None:
            continue
        errors.append(abs(float(np.mean(real[:, j] == null)) - float(np.mean(synth[:, j] == null))))
    return Result(
        table=path.stem,
        rows=rows,
        columns=len(draft.columns),
        stored=len(schema.columns),
        ignored=len(schema.ignored),
        discovered=len(schema.discovered),
        draft_s=draft_s,
        upload_s=upload_s,
        job_s=job_s,
        discovery_rho=str(outcome.rho.normalize()),
        discovery_delta=f"{outcome.delta:.3g}",
        method_rho=f"{float(rho):.6f}",
        tvd=tvd,
        missing_error_mean=float(np.mean(errors)) if errors else None,
        missing_error_max=float(np.max(errors)) if errors else None,
        nullable=len(errors),
        params=params,
        epsilon=epsilon,
    )


def render(results: list[Result], command: str, method: str, max_marginals: int) -> str:
    commit = git_commit(Path.cwd(), length=7)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        "## Raw tables: draft → discovery → release (issue 12)",
        "",
        f"Measured by `{command}` on {now}, commit `{commit}`, CPython "
        f"{platform.python_version()}. Each table's draft (`rhosynth schema draft`) is accepted as "
        "is; *upload* is the upload's code path in-process (DP discovery of every range, bin edge "
        "and category the draft left to it, then encoding); the budget is (ε, δ = 1e-9) as ρ, "
        f"of which discovery takes at most {float(DEFAULT_DISCOVERY_SHARE):.0%} (capped by "
        "need), plus δ = 1e-9 for open-set categories; the method "
        f"(`{method}`) gets the rest. Quality is on the binned columns (the codes): mean k-way "
        "TVD of synthetic against real (the definition of ../shared/bench/marginal_error.py; "
        f"3-way over at most {max_marginals} sampled marginals per k where there are more), and "
        "the absolute error of each nullable column's missing-value rate. DP noise is fresh "
        "each run: one run per table.",
        "",
        "| table | rows | columns (stored / ignored / discovered) | discovery ρ, δ | method ρ "
        "| draft s | upload s | job s | 1-way TVD | 2-way | 3-way | missing-rate error mean / max "
        "(nullable columns) |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    refusals = []
    for r in results:
        if r.refused is not None:
            lines.append(
                f"| {r.table} (ε = {r.epsilon:g}) | refused at upload ({r.upload_s:.1f} s) "
                "| | | | | | | | | | |"
            )
            refusals.append(f"* {r.table} at ε = {r.epsilon:g}: `422 {r.refused}`")
            continue
        missing = (
            f"{r.missing_error_mean:.4f} / {r.missing_error_max:.4f} ({r.nullable})"
            if r.missing_error_mean is not None
            else "n/a (none)"
        )
        params = f" `{json.dumps(r.params)}`" if r.params else ""
        lines.append(
            f"| {r.table} (ε = {r.epsilon:g}){params} | {r.rows:,} | {r.columns} "
            f"({r.stored} / {r.ignored} / {r.discovered}) | {r.discovery_rho}, "
            f"{r.discovery_delta} | {r.method_rho} | "
            f"{r.draft_s:.1f} | {r.upload_s:.1f} | {r.job_s:.1f} | {r.tvd.get(1, 0):.4f} | "
            f"{r.tvd.get(2, 0):.4f} | {r.tvd.get(3, 0):.4f} | {missing} |"
        )
    if refusals:
        lines += ["", "Refused uploads (the draft accepted as is, at that budget):", "", *refusals]
    lines.append(END)
    return "\n".join(lines) + "\n"


def update(document: Path, section: str) -> None:
    text = document.read_text() if document.exists() else ""
    if BEGIN in text and END in text:
        head = text[: text.index(BEGIN)]
        tail = text[text.index(END) + len(END) :].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    document.write_text(text)


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="the raw tables' directory")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--method", default="aim")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="TABLE:KEY=VALUE",
        help="a method parameter for one table (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--epsilon",
        action="append",
        default=[],
        metavar="TABLE:EPSILON",
        help="run TABLE (also) at this ε (default: each table at ε = 1); repeatable",
    )
    parser.add_argument("--max-marginals", type=int, default=2000)
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="JSON lines of earlier results (this script's stderr) to include before new runs",
    )
    parser.add_argument("--update", type=Path, default=None, help="rewrite this Markdown section")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(raw)
    per_table: dict[str, list[str]] = {}
    for item in args.param:
        table, _, pair = item.partition(":")
        per_table.setdefault(table, []).append(pair)
    extra: dict[str, list[float]] = {}
    for item in args.epsilon:
        table, _, value = item.partition(":")
        extra.setdefault(table, []).append(float(value))
    results = []
    if args.reuse is not None:
        for line in args.reuse.read_text().splitlines():
            fields = json.loads(line)
            fields["tvd"] = {int(k): v for k, v in fields["tvd"].items()}
            results.append(Result(**fields))
    for name in filter(None, args.tables.split(",")):
        params = parse_params(per_table.get(name, []))
        for epsilon in [1.0, *extra.get(name, [])]:
            result = run_table(
                args.data / f"{name}.csv",
                args.method,
                params,
                args.seed,
                args.max_marginals,
                epsilon,
            )
            print(json.dumps(result.__dict__, default=str), file=sys.stderr, flush=True)
            results.append(result)
    command = shlex.join(["python", "-m", "benchmarks.raw_tables", *raw])
    section = render(results, command, args.method, args.max_marginals)
    print(section)
    if args.update is not None:
        update(args.update, section)
    if args.json is not None:
        args.json.write_text(json.dumps([r.__dict__ for r in results], default=str, indent=2))


if __name__ == "__main__":
    main()
