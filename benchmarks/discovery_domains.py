"""What DP discovery learns on the raw tables: outer edges against the real quantiles, and the
values the learned domain gives back.

For each raw table (../shared/data/raw) and ε, the schema draft accepted as is, the upload's own
discovery (:func:`app.datasets.discovery.discover_and_resolve`) at the whole-release budget
(ε, δ = 1e-6: ``budget_rho`` = ρ(ε, 5e-7), ``budget_delta`` = 5e-7, discovery its default share),
then the upload's encoding. Per learned numeric or date column: the share of real rows below
the lower learned edge and above the upper one (what is clamped), the distance of each outer edge
from the real 0.5 % / 99.5 % quantile as a share of the span between them, and the
Kolmogorov–Smirnov distance between the real values and the real table's own codes decoded with
the learned bins and value profile (what a perfect model would give back: the error the domain
alone causes). Per discovered categorical column: the share of real rows whose value was not
released (they become "other"). ``--weights`` compares budget splits by kind (the same measures,
averaged over ``--repeats`` runs).

    python -m benchmarks.discovery_domains --data ../shared/data/raw --update docs/benchmarks.md

DP noise comes from the OS CSPRNG (fresh each run); the decoding rng is seeded.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import ks_2samp

import engine.discovery.plan as plan
from app.datasets.discovery import discover_and_resolve
from app.datasets.ingest import IngestLimits, ingest_table, read_encoded_table
from benchmarks.sections import git_commit, markdown_table, update_or_print
from engine.accounting import rho_from_epsilon_delta
from engine.columns.categorical import CategoricalColumn
from engine.columns.numeric import NumericColumn
from engine.columns.temporal import DateColumn, DatetimeColumn
from engine.discovery.plan import DEFAULT_DISCOVERY_SHARE
from engine.schema_draft import draft_schema
from engine.tables.encoding import SchemaSpec, TableSchema

HEADING = "## Discovery: learned domains on the raw tables"
SPLIT_HEADING = "## Discovery budget split"
LIMITS = IngestLimits(max_columns=1000, max_rows=100_000_000, max_cell_bytes=1024)
TABLES = ("diamonds", "flights", "loans")


@dataclass
class ColumnResult:
    name: str
    kind: str
    bins: int
    unit: bool
    profile: bool
    below: float
    above: float
    lower_gap: float
    upper_gap: float
    ks: float


@dataclass
class TableResult:
    table: str
    epsilon: float
    rows: int
    discovery_rho: float
    numeric: list[ColumnResult] = field(default_factory=list)
    other: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, int] = field(default_factory=dict)
    warnings: int = 0

    @property
    def mean_ks(self) -> float:
        return float(np.mean([c.ks for c in self.numeric])) if self.numeric else float("nan")

    @property
    def mean_other(self) -> float:
        return float(np.mean(list(self.other.values()))) if self.other else float("nan")


def _real_values(column: Any, raw: pd.Series) -> np.ndarray:
    if isinstance(column, NumericColumn):
        out: np.ndarray = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        return out
    text = raw.astype(str).where(raw.notna(), None)
    units: np.ndarray = column.to_units(text).astype(float)
    return units


def _decoded_values(column: Any, decoded: pd.Series) -> np.ndarray:
    if isinstance(column, NumericColumn):
        out: np.ndarray = pd.to_numeric(decoded, errors="coerce").to_numpy(dtype=float)
        return out
    stamps = pd.to_datetime(decoded).to_numpy("datetime64[s]")
    seconds = stamps.astype("int64").astype(float)
    seconds[np.isnat(stamps)] = np.nan
    return seconds / 86_400 if isinstance(column, DateColumn) else seconds


def _edges(column: Any) -> tuple[float, float]:
    if isinstance(column, NumericColumn):
        return float(column.edges[0]), float(column.edges[-1])
    return float(column.edges[0]), float(column.edges[-1] - 1)


def measure(path: Path, epsilon: float, noise: random.Random | None = None) -> TableResult:
    """What discovery learns on ``path`` at ε, with the OS CSPRNG's noise (or ``noise``'s, for
    paired comparisons: not DP, a benchmark's way to hold the noise fixed between versions)."""
    draft = draft_schema(path)
    spec = SchemaSpec.from_json(draft.to_json())
    total = rho_from_epsilon_delta(Decimal(str(epsilon)), Decimal("5e-7"))
    outcome = discover_and_resolve(
        path,
        spec,
        LIMITS,
        budget_rho=total,
        budget_delta=Decimal("5e-7"),
        discovery_rho=None,
        noise=noise,
    )
    schema: TableSchema = outcome.schema
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "table.arrow"
        rows = ingest_table(path, schema, target, LIMITS)
        codes = read_encoded_table(target, schema)
    real = pd.read_csv(path, low_memory=False, dtype=str, keep_default_na=False)
    found = outcome.discovered
    result = TableResult(path.stem, epsilon, rows, float(outcome.rho))
    result.warnings = len(found.warnings) if found is not None else 0
    learned = found.learned if found is not None else {}
    rng = np.random.default_rng(0)
    for j, column in enumerate(schema.columns):
        raw = real[column.name].where(~real[column.name].str.strip().isin(schema.missing_values))
        if column.name in learned and isinstance(
            column, NumericColumn | DateColumn | DatetimeColumn
        ):
            values = _real_values(column, raw)
            values = values[np.isfinite(values)]
            decoded = _decoded_values(column, column.decode(codes[:, j], rng))
            decoded = decoded[np.isfinite(decoded)]
            if not values.size or not decoded.size:
                continue
            low, high = _edges(column)
            q_low, q_high = np.quantile(values, [0.005, 0.995])
            # A column whose central 99 % is one value (mostly zero, say) has no span: its
            # gaps are read against the whole real range, or in units when that is one value.
            span = q_high - q_low
            if span <= 0:
                span = float(values.max() - values.min()) or 1.0
            result.numeric.append(
                ColumnResult(
                    column.name,
                    column.type,
                    column.bins,
                    learned[column.name].unit,
                    column.profile is not None,
                    float(np.mean(values < low)),
                    float(np.mean(values > high)),
                    float((low - q_low) / span),
                    float((high - q_high) / span),
                    float(ks_2samp(values, decoded).statistic),
                )
            )
        elif (
            isinstance(column, CategoricalColumn)
            and found is not None
            and column.name in found.categories
        ):
            present = raw.dropna().str.strip()
            present = present[present != ""]
            result.other[column.name] = float(1 - present.isin(set(column.categories)).mean())
            result.thresholds[column.name] = found.categories[column.name].threshold
    return result


def _share(value: Fraction) -> str:
    return {Fraction(1, 5): "fifth", Fraction(1, 10): "tenth"}.get(value, f"{float(value):.0%}")


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def render(results: list[TableResult], command: str) -> str:
    commit = git_commit(Path.cwd(), length=7)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        HEADING,
        "",
        f"Measured by `{command}` on {now}, commit `{commit}`, CPython "
        f"{platform.python_version()}, 2 CPUs. The draft accepted as is; the upload's discovery "
        "at the budget of a whole (ε, δ = 1e-6) release (`budget_rho` = ρ(ε, 5e-7), "
        "`budget_delta` = 5e-7, discovery its default "
        f"{_share(DEFAULT_DISCOVERY_SHARE)} of ρ), then the upload's encoding. "
        "Per learned numeric or date column: the real rows clamped below the lower learned edge "
        "and above the upper one, each outer edge's distance from the real 0.5 % / 99.5 % "
        "quantile as a share of the span between those quantiles (negative: inside; the whole "
        "real range when the quantiles are equal, units when it is one value), and the "
        "Kolmogorov–Smirnov distance between the real values and the real table's own codes "
        "decoded with the learned bins and profile (what a perfect model would give back: the "
        "error of the domain alone). Per discovered category column: the share of real rows "
        'whose value was not released (they become "other"), and the noisy count a category '
        "needed to be released (its threshold, from its ρ, δ and candidate list). DP noise is "
        "fresh each run: one "
        "run per row.",
        "",
    ]
    summary = markdown_table(
        [
            "table",
            "ε",
            "rows",
            "discovery ρ",
            "learned columns",
            "median clamped below / above",
            "median edge gap (low / high, share of span)",
            "worst edge gap",
            "mean decode KS",
            "worst decode KS",
            'mean "other" share',
            "category thresholds (rows)",
            "warnings",
        ],
        [
            [
                r.table,
                f"{r.epsilon:g}",
                f"{r.rows:,}",
                f"{r.discovery_rho:.6f}",
                str(len(r.numeric)),
                f"{_percent(float(np.median([c.below for c in r.numeric])))} / "
                f"{_percent(float(np.median([c.above for c in r.numeric])))}",
                f"{np.median([c.lower_gap for c in r.numeric]):+.3f} / "
                f"{np.median([c.upper_gap for c in r.numeric]):+.3f}",
                f"{max(max(abs(c.lower_gap), abs(c.upper_gap)) for c in r.numeric):.3f}",
                f"{r.mean_ks:.4f}",
                f"{max(c.ks for c in r.numeric):.4f}",
                f"{r.mean_other:.4f}" if r.other else "n/a",
                f"{min(r.thresholds.values())}–{max(r.thresholds.values())}"
                if r.thresholds
                else "n/a",
                str(r.warnings),
            ]
            for r in results
            if r.numeric
        ],
        "llrrrrrrrrrrr",
    )
    lines += summary
    lines += [
        "",
        "Per column at ε = 1 (bins: `u` one bin per value, `p` a value profile; clamped: real "
        "rows below / above the learned range; gap: edge − real quantile, share of the span):",
        "",
    ]
    for r in results:
        if r.epsilon != 1.0:
            continue
        lines += [f"<details><summary>{r.table}</summary>", ""]
        lines += markdown_table(
            ["column", "type", "bins", "clamped below / above", "gap low / high", "decode KS"],
            [
                [
                    c.name,
                    c.kind,
                    f"{c.bins}{' u' if c.unit else ''}{' p' if c.profile else ''}",
                    f"{_percent(c.below)} / {_percent(c.above)}",
                    f"{c.lower_gap:+.3f} / {c.upper_gap:+.3f}",
                    f"{c.ks:.4f}",
                ]
                for c in r.numeric
            ],
            "llrrrr",
        )
        lines += ["", "</details>", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


WEIGHT_CHOICES: dict[str, dict[str, int]] = {
    "3:2:1:1 (range : quantiles : open set : candidates)": {
        "range": 3,
        "quantiles": 2,
        "open_set": 1,
        "candidates": 1,
    },
    "1:1:1:1": {"range": 1, "quantiles": 1, "open_set": 1, "candidates": 1},
    "1:1:2:1 (the default)": {"range": 1, "quantiles": 1, "open_set": 2, "candidates": 1},
    "1:1:3:1": {"range": 1, "quantiles": 1, "open_set": 3, "candidates": 1},
}


def weights(data: Path, tables: list[str], repeats: int, command: str) -> str:
    original = dict(plan.WEIGHTS)
    rows = []
    try:
        for table in tables:
            for label, choice in WEIGHT_CHOICES.items():
                plan.WEIGHTS.clear()
                plan.WEIGHTS.update(choice)
                runs = [measure(data / f"{table}.csv", 1.0) for _ in range(repeats)]
                rows.append(
                    [
                        table,
                        label,
                        f"{np.mean([r.mean_ks for r in runs]):.4f}",
                        f"{np.mean([r.mean_other for r in runs]):.4f}",
                    ]
                )
                print(rows[-1], file=sys.stderr, flush=True)
    finally:
        plan.WEIGHTS.clear()
        plan.WEIGHTS.update(original)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        SPLIT_HEADING,
        "",
        f"Measured by `{command}` on {now}, commit `{git_commit(Path.cwd(), length=7)}`: the "
        "shared discovery budget split by kind with each set of weights, at ε = 1 (as in the "
        "section above), averaged over "
        f"{repeats} runs. *Decode KS*: mean Kolmogorov–Smirnov distance of the learned numeric "
        "and date columns (the real table decoded with its learned domain); *other*: mean share "
        "of real rows of the discovered category columns whose value was not released.",
        "",
        *markdown_table(["table", "weights", "mean decode KS", 'mean "other" share'], rows, "llrr"),
    ]
    return "\n".join(lines) + "\n"


PAIRED_SEED = 1000
"""The first noise seed of ``--paired`` runs (seeds PAIRED_SEED … PAIRED_SEED + N − 1)."""


def paired(data: Path, tables: list[str], epsilon: float, runs: int) -> dict[str, list[float]]:
    """Each learned column's decode KS (``table:column``) over ``runs`` uploads whose discovery
    noise comes from ``random.Random(PAIRED_SEED + i)``: two versions of discovery run this way
    draw the same noise until their decisions differ, so their difference per column is the
    change's own effect, not the noise's."""
    found: dict[str, list[float]] = {}
    for table in tables:
        for run in range(runs):
            noise = random.Random(PAIRED_SEED + run)  # noqa: S311  (a benchmark's fixed noise)
            result = measure(data / f"{table}.csv", epsilon, noise)
            for column in result.numeric:
                found.setdefault(f"{table}:{column.name}", []).append(column.ks)
    return found


def compare(before: dict[str, list[float]], after: dict[str, list[float]]) -> list[str]:
    """Paired differences: the columns whose decode KS changed in some run, then each table's
    mean over its learned columns before and after."""
    lines = []
    tables: dict[str, list[tuple[float, float]]] = {}
    for key, old in before.items():
        new = after[key]
        if len(new) != len(old):
            raise ValueError(f"{key}: {len(old)} runs before, {len(new)} after")
        a, b = np.asarray(old), np.asarray(new)
        tables.setdefault(key.split(":")[0], []).append((float(a.mean()), float(b.mean())))
        changed = np.abs(b - a) > 1e-12
        if changed.any():
            lines.append(
                f"{key}: {a.mean():.4f} → {b.mean():.4f} (changed in {int(changed.sum())} of "
                f"{a.size} runs: {int((b > a + 1e-12).sum())} worse, "
                f"{int((b < a - 1e-12).sum())} better)"
            )
    for table, pairs in tables.items():
        old_mean = float(np.mean([p[0] for p in pairs]))
        new_mean = float(np.mean([p[1] for p in pairs]))
        lines.append(f"{table}: mean decode KS {old_mean:.4f} → {new_mean:.4f}")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, help="../shared/data/raw (all but --compare)")
    parser.add_argument("--tables", default=",".join(TABLES))
    parser.add_argument("--epsilons", default="0.3,1,3")
    parser.add_argument("--weights", action="store_true", help="compare budget splits by kind")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--update", type=Path, help="rewrite the section in this Markdown file")
    parser.add_argument(
        "--paired",
        type=int,
        metavar="N",
        help="N uploads per table with seeded discovery noise, each column's decode KS to --json",
    )
    parser.add_argument("--json", type=Path, help="where --paired writes")
    parser.add_argument(
        "--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"), help="two --paired files"
    )
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(p.read_text()) for p in args.compare)
        print("\n".join(compare(before, after)))
        return
    if args.data is None:
        parser.error("--data is required")
    if args.paired:
        if args.json is None:
            parser.error("--paired needs --json")
        epsilon = float(args.epsilons.split(",")[0])
        found = paired(args.data, args.tables.split(","), epsilon, args.paired)
        args.json.write_text(json.dumps(found))
        return
    command = "python -m benchmarks.discovery_domains " + shlex.join(
        argv if argv is not None else sys.argv[1:]
    )
    tables = args.tables.split(",")
    if args.weights:
        section, heading = weights(args.data, tables, args.repeats, command), SPLIT_HEADING
    else:
        results = []
        for table in tables:
            for epsilon in (float(e) for e in args.epsilons.split(",")):
                result = measure(args.data / f"{table}.csv", epsilon)
                print(
                    f"{table} ε={epsilon:g}: mean decode KS {result.mean_ks:.4f}, other "
                    f"{result.mean_other:.4f}",
                    file=sys.stderr,
                    flush=True,
                )
                results.append(result)
        section, heading = render(results, command), HEADING
    update_or_print(args.update, heading, section)


if __name__ == "__main__":
    main()
