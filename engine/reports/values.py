"""The owner tier's value metrics: real raw values against the synthetic values analysts download.

Bins cannot say how far from the real data a synthetic value lies: a synthetic latitude drawn
uniformly inside an end bin that reaches 70° lands in the same bin code as the real 45°, so a
comparison of codes scores it as perfect. Here every numeric, date and datetime column is compared
on its values (dates in days, datetimes in seconds since 1970-01-01,
:mod:`engine.tables.raw_values`):

* exactly, over **every row** of both tables, in one streamed pass each: the real minimum and
  maximum, the synthetic minimum and maximum, the share of synthetic values below the real
  minimum and above the real maximum (``outside_share`` is their sum), and each side's share of
  missing values;
* on a uniform subsample of rows of each table (at most :data:`MAX_VALUE_ROWS`, fewer when there
  are many columns: :data:`MAX_VALUE_CELLS`): the two-sample Kolmogorov–Smirnov statistic
  (``scipy.stats.ks_2samp``), mean, median, standard deviation and the quantiles of
  :data:`QUANTILES`, each as an error (synthetic − real) divided by the real standard deviation.

A column is *flagged* when more than :data:`OUTSIDE_THRESHOLD` of its synthetic values lie outside
the real range, when its KS statistic exceeds :func:`ks_threshold` (:data:`KS_THRESHOLD`, or more
for small samples, where sampling alone could reach it), or when its missing rates differ by more
than :data:`MISSING_GAP_THRESHOLD`. The verdict (:func:`verdict`) names the worst columns.

Privacy. This reads the real values: owners only, like the rest of the owner tier (privacy rule
7). ``rng`` drives only which rows are subsampled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from scipy.stats import ks_2samp

from engine.reports.common import cap_note, rounded
from engine.tables.encoding import TableSchema
from engine.tables.raw_values import ValueColumn, parse_values, unit_of, value_columns

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

QUANTILES = (1, 5, 25, 50, 75, 95, 99)
"""Percentiles compared per column (linear interpolation, ``numpy.percentile``)."""
OUTSIDE_THRESHOLD = 0.01
"""A column is flagged when more than this share of its synthetic values lies outside the real
[minimum, maximum]."""
KS_THRESHOLD = 0.1
"""A column is flagged when its Kolmogorov–Smirnov statistic exceeds this (or the sampling bound
of :func:`ks_threshold`, when larger)."""
KS_ALPHA = 0.01
"""Significance level of the sampling bound on KS: two samples of one distribution exceed it
with probability about 1 %."""
MISSING_GAP_THRESHOLD = 0.05
"""A column is flagged when its synthetic and real shares of missing values differ by more."""
MAX_VALUE_ROWS = 100_000
"""Rows of each table sampled (uniformly, without replacement) for KS, moments and quantiles."""
MAX_VALUE_CELLS = 5_000_000
"""Sampled values held per table (40 MB of float64): with many value columns, fewer rows."""
WORST_SHOWN = 5
"""The verdict names at most this many columns."""

NOT_GIVEN = (
    "The real table's raw values were not available, so numeric and date columns are compared "
    "on their bins only: bins cannot show values outside the real range or far inside a wide bin."
)


@dataclass(frozen=True)
class ValueSource:
    """The decoded values of a table's numeric, date and datetime columns, read in row batches
    that are row-aligned with its codes. ``batches()`` starts a new pass each time it is called;
    a batch may hold Arrow numbers, ``date32`` or timestamps, or float64 already in the units of
    :mod:`engine.tables.raw_values`. ``rows``: the rows the batches add up to (None: as many as the
    codes; checked while reading)."""

    batches: Callable[[], Iterable[pa.RecordBatch | pa.Table]]
    rows: int | None = None
    names: frozenset[str] | None = None  # columns present (None: read from the first batch)

    @classmethod
    def of_table(cls, table: pa.Table) -> ValueSource:
        return cls(
            lambda: table.to_batches(max_chunksize=1 << 16),
            table.num_rows,
            frozenset(table.column_names),
        )


class ValuesMismatch(ValueError):
    """The values do not line up with the codes (another row count)."""


@dataclass
class _Side:
    """One table's pass: exact summaries over every row, and the values at the wanted rows."""

    rows: int = 0
    present: dict[str, int] = field(default_factory=dict)
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)
    below: dict[str, int] = field(default_factory=dict)
    above: dict[str, int] = field(default_factory=dict)
    gathered: dict[str, FloatArray] = field(default_factory=dict)


def _scan(
    source: ValueSource,
    columns: Sequence[ValueColumn],
    rows: int,
    wanted: IntArray,
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> _Side:
    """One pass over ``source``: per column of ``columns`` it holds, the exact summaries and the
    values at the sorted row positions ``wanted``; with ``bounds``, the values below and above
    each column's (low, high)."""
    side = _Side()
    names: list[ValueColumn] | None = None
    batches = source.batches()
    try:
        for batch in batches:
            if names is None:
                held = source.names if source.names is not None else set(batch.column_names)
                names = [c for c in columns if c.name in held and c.name in batch.column_names]
                for column in names:
                    side.present[column.name] = 0
                    side.low[column.name] = math.inf
                    side.high[column.name] = -math.inf
                    side.below[column.name] = 0
                    side.above[column.name] = 0
                    side.gathered[column.name] = np.full(wanted.size, np.nan)
            start, stop = side.rows, side.rows + batch.num_rows
            side.rows = stop
            if stop > rows:
                break
            first, last = np.searchsorted(wanted, [start, stop])
            local = wanted[first:last] - start
            for column in names:
                values = parse_values(column, batch.column(column.name))
                finite = values[~np.isnan(values)]
                name = column.name
                side.present[name] += int(finite.size)
                if finite.size:
                    side.low[name] = min(side.low[name], float(finite.min()))
                    side.high[name] = max(side.high[name], float(finite.max()))
                    if bounds is not None and name in bounds:
                        low, high = bounds[name]
                        side.below[name] += int((finite < low).sum())
                        side.above[name] += int((finite > high).sum())
                side.gathered[name][first:last] = values[local]
    finally:
        close = getattr(batches, "close", None)
        if callable(close):
            close()  # a generator holding a file open (a stored values file, a local copy)
    if side.rows != rows:
        raise ValuesMismatch(f"the values have {side.rows} rows, the codes {rows}")
    return side


def ks_threshold(real: int, synthetic: int) -> float:
    """The KS statistic above which a column is flagged: :data:`KS_THRESHOLD`, or the
    asymptotic two-sample critical value at :data:`KS_ALPHA`,
    √(−ln(α/2)/2)·√((n + m)/(n·m)), when that is larger (small tables, where two samples of
    one distribution differ by that much about 1 % of the time)."""
    if real < 1 or synthetic < 1:
        return KS_THRESHOLD
    coefficient = math.sqrt(-math.log(KS_ALPHA / 2) / 2)
    return max(KS_THRESHOLD, coefficient * math.sqrt((real + synthetic) / (real * synthetic)))


def _percent(share: float | None) -> str:
    if share is None:
        return "n/a"
    value = 100 * share
    if value == 0:
        return "0 %"
    if value >= 10:
        return f"{value:.0f} %"
    if value >= 1:
        return f"{value:.1f}".rstrip("0").rstrip(".") + " %"
    return f"{value:.2g} %"


UNIT_DIGITS = 10
"""Values in a column's own unit (ranges, means, quantiles) keep this many significant digits:
six (:data:`engine.reports.common.DIGITS`) would move a datetime by up to 17 minutes."""


def in_units(value: float | None) -> float | None:
    """``value`` (in a column's unit) to :data:`UNIT_DIGITS` significant digits; None and
    non-finite numbers become None."""
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{UNIT_DIGITS}g}")


def _summary(values: FloatArray) -> dict[str, Any]:
    return {
        "mean": float(values.mean()),
        "median": float(np.median(values)),
        "std": float(values.std()),
        "quantiles": [float(q) for q in np.percentile(values, QUANTILES)],
    }


def _side_out(
    side: _Side, name: str, summary: dict[str, Any] | None, sampled: int
) -> dict[str, Any]:
    present = side.present[name]
    out: dict[str, Any] = {
        "rows": side.rows,
        "missing_rate": rounded(1.0 - present / side.rows) if side.rows else None,
        "min": in_units(side.low[name]) if present else None,
        "max": in_units(side.high[name]) if present else None,
        "sampled": sampled,
    }
    if summary is not None:
        out["mean"] = in_units(summary["mean"])
        out["median"] = in_units(summary["median"])
        out["std"] = in_units(summary["std"])
        quantiles = zip(QUANTILES, summary["quantiles"], strict=True)
        out["quantiles"] = {str(p): in_units(q) for p, q in quantiles}
    return out


def _column(
    column: ValueColumn, real: _Side, synthetic: _Side, real_rows: IntArray, synth_rows: IntArray
) -> dict[str, Any]:
    name = column.name
    r = real.gathered[name][real_rows]
    s = synthetic.gathered[name][synth_rows]
    r = r[~np.isnan(r)]
    s = s[~np.isnan(s)]
    real_summary = _summary(r) if r.size else None
    synth_summary = _summary(s) if s.size else None
    present = synthetic.present[name]
    out: dict[str, Any] = {
        "column": name,
        "type": column.type,
        "unit": unit_of(column),
        "real": _side_out(real, name, real_summary, int(r.size)),
        "synthetic": _side_out(synthetic, name, synth_summary, int(s.size)),
    }
    real_missing = 1.0 - real.present[name] / real.rows if real.rows else 0.0
    synth_missing = 1.0 - present / synthetic.rows if synthetic.rows else 0.0
    gap = synth_missing - real_missing
    out["missing_rate_gap"] = rounded(gap)
    below = synthetic.below[name] / present if present and real.present[name] else None
    above = synthetic.above[name] / present if present and real.present[name] else None
    outside = None if below is None or above is None else below + above
    out["below_share"] = rounded(below)
    out["above_share"] = rounded(above)
    out["outside_share"] = rounded(outside)
    ks = None
    threshold = ks_threshold(int(r.size), int(s.size))
    out["ks_threshold"] = rounded(threshold)
    if real_summary is not None and synth_summary is not None:
        ks = float(ks_2samp(r, s, method="asymp").statistic)
        scale = real_summary["std"]
        out["scale"] = in_units(scale)

        def error(a: float, b: float) -> float | None:
            return rounded((b - a) / scale) if scale > 0 else None

        out["mean_error"] = error(real_summary["mean"], synth_summary["mean"])
        out["median_error"] = error(real_summary["median"], synth_summary["median"])
        out["std_error"] = error(real_summary["std"], synth_summary["std"])
        errors = [
            error(a, b)
            for a, b in zip(real_summary["quantiles"], synth_summary["quantiles"], strict=True)
        ]
        out["quantile_errors"] = {str(p): e for p, e in zip(QUANTILES, errors, strict=True)}
        known = [abs(e) for e in errors if e is not None]
        out["max_quantile_error"] = rounded(max(known)) if known else None
    else:
        out["scale"] = None
        out["mean_error"] = out["median_error"] = out["std_error"] = None
        out["quantile_errors"] = {str(p): None for p in QUANTILES}
        out["max_quantile_error"] = None
    out["ks"] = rounded(ks)
    reasons = []
    if outside is not None and outside > OUTSIDE_THRESHOLD:
        reasons.append("outside_range")
    if ks is not None and ks > threshold:
        reasons.append("ks")
    if abs(gap) > MISSING_GAP_THRESHOLD:
        reasons.append("missing_rate")
    out["flagged"] = bool(reasons)
    out["reasons"] = reasons
    out["severity"] = rounded(max(ks or 0.0, outside or 0.0, abs(gap)))
    return out


@dataclass(frozen=True)
class ValueComparison:
    """The report's ``values`` section, and the values at the correlation rows (real, synthetic)
    of each column compared, for Pearson/Spearman on values."""

    section: dict[str, Any]
    vectors: dict[str, tuple[FloatArray, FloatArray]]


def unavailable(reason: str = NOT_GIVEN) -> ValueComparison:
    return ValueComparison({"available": False, "reason": reason, "columns": []}, {})


def compare_values(
    schema: TableSchema,
    real: ValueSource,
    synthetic: ValueSource,
    *,
    real_rows: int,
    synthetic_rows: int,
    real_order: IntArray,
    synthetic_order: IntArray,
    correlation_rows: int,
    max_value_rows: int = MAX_VALUE_ROWS,
) -> ValueComparison:
    """Compare every value column both sources hold (module docstring).

    ``real_order`` / ``synthetic_order``: random orders of (a prefix of) each table's rows; the
    first ``max_value_rows`` (fewer with many columns) are the value sample, the first
    ``correlation_rows`` the correlation sample, whose values are returned sorted by row.
    Raises :class:`ValuesMismatch` when a source's rows differ from the codes'."""
    columns = value_columns(schema)
    if not columns:
        empty = {"available": True, "columns": [], "caps": _caps(0, 0, 0, max_value_rows)}
        return ValueComparison(empty, {})
    per_column = max(1, MAX_VALUE_CELLS // len(columns))
    cap = max(1, min(max_value_rows, per_column))
    # Per side: the value sample and the correlation sample (both prefixes of the same random
    # order, sorted by row), and the rows either needs, read in one pass.
    sides = []
    for order in (real_order, synthetic_order):
        sampled = np.sort(order[:cap])
        correlated = np.sort(order[:correlation_rows])
        wanted = np.union1d(sampled, correlated).astype(np.int64)
        sides.append(
            (wanted, np.searchsorted(wanted, sampled), np.searchsorted(wanted, correlated))
        )
    (real_wanted, real_sampled, real_correlated) = sides[0]
    (synth_wanted, synth_sampled, synth_correlated) = sides[1]
    real_side = _scan(real, columns, real_rows, real_wanted)
    bounds = {
        name: (real_side.low[name], real_side.high[name])
        for name, count in real_side.present.items()
        if count
    }
    synth_side = _scan(synthetic, columns, synthetic_rows, synth_wanted, bounds)
    compared = [c for c in columns if c.name in real_side.present and c.name in synth_side.present]
    out = [
        _column(column, real_side, synth_side, real_sampled, synth_sampled) for column in compared
    ]
    vectors = {
        column.name: (
            real_side.gathered[column.name][real_correlated],
            synth_side.gathered[column.name][synth_correlated],
        )
        for column in compared
    }
    section: dict[str, Any] = {
        "available": True,
        "columns": out,
        "not_compared": [c.name for c in columns if c not in compared],
        "scale": "real standard deviation",
        "quantiles": list(QUANTILES),
        "thresholds": thresholds(),
        "caps": _caps(len(columns), int(real_sampled.size), int(synth_sampled.size), cap),
    }
    return ValueComparison(section, vectors)


def thresholds() -> dict[str, float]:
    return {
        "outside_share": OUTSIDE_THRESHOLD,
        "ks": KS_THRESHOLD,
        "ks_alpha": KS_ALPHA,
        "missing_rate_gap": MISSING_GAP_THRESHOLD,
    }


def _caps(columns: int, real: int, synthetic: int, cap: int) -> dict[str, Any]:
    return {
        "value_rows": cap,
        "max_value_rows": MAX_VALUE_ROWS,
        "max_value_cells": MAX_VALUE_CELLS,
        "sampled": {"real": real, "synthetic": synthetic},
        "columns": cap_note(columns, columns, "numeric, date and datetime columns"),
        "exact": "min, max, outside shares and missing rates count every row",
    }


def _describe(column: Mapping[str, Any]) -> str:
    parts = []
    if column.get("ks") is not None:
        parts.append(f"KS {column['ks']:.3g}")
    outside = column.get("outside_share")
    if outside is not None:
        parts.append(f"{_percent(outside)} of synthetic values outside the real range")
    if "missing_rate" in column.get("reasons", []):
        parts.append(f"missing-rate gap {column['missing_rate_gap']:+.2g}")
    return f"{column['column']} ({', '.join(parts)})" if parts else str(column["column"])


def verdict(values: Mapping[str, Any], k_marginal_score: float | None) -> dict[str, Any]:
    """The report's opening verdict, from the value metrics; the k-marginal score is quoted as
    what it is (a comparison of bins), never as the verdict when values miss."""
    score = "n/a" if k_marginal_score is None else f"{k_marginal_score:.0f}/1000"
    columns = list(values.get("columns", []))
    ranked = sorted(columns, key=lambda c: -(c.get("severity") or 0.0))
    flagged = [c for c in ranked if c["flagged"]]
    worst = (flagged or ranked)[:WORST_SHOWN]
    out: dict[str, Any] = {
        "thresholds": thresholds(),
        "flagged": [c["column"] for c in flagged],
        "worst_columns": [
            {
                "column": c["column"],
                "ks": c.get("ks"),
                "outside_share": c.get("outside_share"),
                "missing_rate_gap": c.get("missing_rate_gap"),
                "reasons": list(c["reasons"]),
            }
            for c in worst
        ],
        "k_marginal_score": k_marginal_score,
    }
    if not values.get("available"):
        out["status"] = "bins_only"
        out["headline"] = (
            f"Values not compared. {values.get('reason', NOT_GIVEN)} The k-marginal score "
            f"({score}) compares bins, so it is no verdict on values."
        )
    elif not columns:
        out["status"] = "no_value_columns"
        out["headline"] = (
            "No numeric or date column to compare on values; the k-marginal score "
            f"({score}) compares the columns' categories and codes."
        )
    elif flagged:
        out["status"] = "values_off"
        named = "; ".join(_describe(c) for c in worst)
        more = len(flagged) - len(worst)
        out["headline"] = (
            f"Worst columns: {named}{f'; and {more} more' if more > 0 else ''}. "
            f"{len(flagged)} of {len(columns)} numeric and date columns miss the thresholds "
            f"(more than {_percent(OUTSIDE_THRESHOLD)} of synthetic values outside the real "
            f"range, KS above {KS_THRESHOLD:g}, or a missing-rate gap above "
            f"{MISSING_GAP_THRESHOLD:g}). The k-marginal score ({score}) compares bins and "
            "cannot see this: it is not the verdict."
        )
    else:
        out["status"] = "values_close"
        out["headline"] = (
            f"All {len(columns)} numeric and date columns are within the thresholds (worst: "
            f"{_describe(worst[0])}); k-marginal score {score}."
        )
    return out
