"""Warnings about a dataset's domain: what an owner should look at right after an upload.

A schema's bins and categories are either declared (public by the owner's choice) or learned with
a DP mechanism at upload (public once released, engine/discovery). Either way they decide what
the synthetic data can look like: values are drawn inside their bin, so a bin far wider than the
data spreads rows over its whole width, and a categorical column that came out with no category
turns every value into "other". :func:`domain_warnings` flags such domains.

Privacy claim: every rule reads public information only — the resolved schema's edges and
categories (declared, or DP outputs already charged to the ledger), which columns were
discovered, the budgets and the discovery's public parameters (its per-column ρ and the
thresholds they imply, functions of public inputs) — never the data, a row count or an exact
statistic. The warnings are post-processing of DP outputs and public inputs, so they may be shown
to analyst keys as well as owners; their messages name columns and those public numbers only.

The rules (thresholds are the module constants; docs/api.md "Domain warnings" lists them):

* ``wide_end_bin``: a numeric, date or datetime column with at least 3 bins whose first or last
  bin is wider than :data:`END_BIN_FACTOR` × the median width of its inner bins.
* ``wide_range``: a discovered numeric, date or datetime column with at least 3 bins whose outer
  span (first to last edge) is more than :data:`RANGE_FACTOR` × its inner span (second to
  second-to-last edge, the span of the DP quantiles inside).
* ``all_other``: a categorical column with no category: every value becomes its "other" bucket.
* ``one_bin``: a numeric, date or datetime column with a single bin (its values are drawn
  uniformly over it).
* ``small_budget``: the dataset's ρ at upload converts (Canonne, Kamath, Steinke 2020,
  Corollary 13, :func:`engine.accounting.epsilon_from_rho_delta`) to less than
  :data:`SMALL_EPSILON` at δ = :data:`REFERENCE_DELTA`.
* ``small_discovery_budget``: a discovered categorical column whose release threshold (the noisy
  count a category needs to be kept, a function of its ρ, δ and candidate list only) is above
  :data:`CATEGORY_THRESHOLD_ROWS` rows — 1 % of a 10,000-row table — so rarer categories
  become "other".

Thresholds were set against the shared raw tables (diamonds, loans, flights: 49 numeric
columns) binned at their exact 0.5 % / 99.5 % quantiles and 4 to 32 quantile bins, where no
column reaches them (largest natural ratios: end bin 320× the median inner bin, a payments column
at 32 bins, 208× at the draft's 16; outer span 27× the inner span at 4 bins, 14.5× at 8 or more),
while the broken learned domains of issue 23 are 300× to 10¹¹×.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from engine.accounting import epsilon_from_rho_delta, sigma2_for_rho
from engine.columns.categorical import CategoricalColumn
from engine.columns.numeric import NumericColumn
from engine.columns.temporal import DateColumn, DatetimeColumn, to_periods
from engine.discovery.notes import DomainWarning
from engine.discovery.tails import smallest_tail_threshold

if TYPE_CHECKING:
    from engine.discovery.plan import Discovered
    from engine.tables.encoding import TableSchema

END_BIN_FACTOR = 250
"""``wide_end_bin``: an end bin wider than this many median inner bins."""
RANGE_FACTOR = 50
"""``wide_range``: an outer span more than this many inner spans."""
SMALL_EPSILON = Fraction(3, 10)
"""``small_budget``: the dataset's whole budget below this ε (at :data:`REFERENCE_DELTA`)."""
REFERENCE_DELTA = Fraction(1, 10**6)
"""The δ at which budgets are stated as ε in warnings."""
CATEGORY_THRESHOLD_ROWS = 100
"""``small_discovery_budget``: a category needs a noisy count above this to be learned."""
CODES = (
    "small_budget",
    "wide_end_bin",
    "wide_range",
    "one_bin",
    "all_other",
    "small_discovery_budget",
)
"""Every code :func:`domain_warnings` produces itself (the discovery may add its own)."""

Binned = NumericColumn | DateColumn | DatetimeColumn


def domain_warnings(
    schema: TableSchema,
    *,
    discovered: Discovered | None = None,
    budget_rho: Fraction | None = None,
    discovery_rho: Fraction | None = None,
) -> tuple[DomainWarning, ...]:
    """Every warning about ``schema``'s domain, the dataset-wide ones first, then by column.

    ``discovered`` is the upload's discovery release (its own ``warnings`` are merged in, and
    its thresholds are read); ``budget_rho`` the dataset's ρ at upload; ``discovery_rho`` the
    ρ that discovery clauses without their own shared, used only when ``discovered`` is not given
    (each discovered categorical column is then assumed to get an equal share, open set at
    δ = :data:`REFERENCE_DELTA`). A warning the discovery gave is not repeated (same code and
    column). Reads public information only (see the module docstring).
    """
    found: list[DomainWarning] = []
    if discovered is not None:
        found.extend(discovered.warnings)
    if budget_rho is not None:
        found.extend(_budget(Fraction(budget_rho)))
    learned = set(schema.discovered)
    thresholds = _thresholds(schema, discovered, discovery_rho)
    for column in schema.columns:
        if isinstance(column, NumericColumn | DateColumn | DatetimeColumn):
            found.extend(_binned(column, column.name in learned))
        elif isinstance(column, CategoricalColumn):
            found.extend(_categorical(column, column.name in learned, thresholds.get(column.name)))
    return _ordered(found, schema.names)


def _ordered(found: Iterable[DomainWarning], names: Sequence[str]) -> tuple[DomainWarning, ...]:
    seen: set[tuple[str, str | None]] = set()
    unique = []
    for warning in found:
        key = (warning.code, warning.column)
        if key not in seen:
            seen.add(key)
            unique.append(warning)
    position = {name: i for i, name in enumerate(names)}

    def order(warning: DomainWarning) -> tuple[int, int]:
        if warning.column is None:
            return (0, 0)
        return (1, position.get(warning.column, len(position)))

    return tuple(sorted(unique, key=order))  # stable: a column's warnings keep their order


def _budget(rho: Fraction) -> list[DomainWarning]:
    if rho <= 0:
        return []
    epsilon = epsilon_from_rho_delta(rho, float(REFERENCE_DELTA))
    if epsilon >= SMALL_EPSILON:
        return []
    return [
        DomainWarning(
            "small_budget",
            None,
            f"the dataset's budget ρ = {_number(float(rho))} is only ε ≈ {float(epsilon):.2g} "
            f"at δ = 1e-6 (below ε = {float(SMALL_EPSILON):g}): every discovery and release "
            "will be very noisy; grant more ρ",
        )
    ]


def _edges(column: Binned) -> tuple[list[float], list[str]]:
    """The edges as numbers (internal units) and as public text (ISO dates for dates)."""
    numbers = [float(edge) for edge in column.edges]
    if isinstance(column, NumericColumn):
        return numbers, [_number(edge) for edge in numbers]
    shown: list[str] = column.to_json()["bins"]  # the last edge shown as the inclusive max
    return numbers, shown


def _single_value(column: Binned) -> bool:
    """Whether the column's only bin admits one value (a constant column learned as one bin per
    value: a year that is always 2013), which is no reason for a warning."""
    if isinstance(column, NumericColumn):
        step = column.step
        return step is not None and column.edges[-1] - column.edges[0] <= step
    start, end = column.edges[0], column.edges[-1] - 1
    return bool(column.iso(start) == column.iso(end)) or _same_period(column, start, end)


def _same_period(column: DateColumn | DatetimeColumn, start: int, end: int) -> bool:
    periods = to_periods(
        np.array([start, end], dtype=np.float64), column.type, column.output_resolution
    )
    return bool(periods[0] == periods[1])


def _binned(column: Binned, learned: bool) -> list[DomainWarning]:
    edges, shown = _edges(column)
    name = column.name
    if len(edges) == 2 and not _single_value(column):
        return [
            DomainWarning(
                "one_bin",
                name,
                f"column {name!r} has a single bin [{shown[0]}, {shown[1]}]: synthetic values "
                "are spread uniformly over it; "
                + ("give discovery more ρ" if learned else "declare more bins"),
            )
        ]
    if len(edges) < 4:  # two bins: no inner bin to compare with
        return []
    out = []
    widths = [b - a for a, b in itertools.pairwise(edges)]
    median = statistics.median(widths[1:-1])
    for end, width, low, high, bound in (
        ("first", widths[0], shown[0], shown[1], "min"),
        ("last", widths[-1], shown[-2], shown[-1], "max"),
    ):
        if median > 0 and width > END_BIN_FACTOR * median:
            advice = (
                f"declare {bound}, or give discovery more ρ"
                if learned
                else f"declare a tighter {bound} or more bins"
            )
            out.append(
                DomainWarning(
                    "wide_end_bin",
                    name,
                    f"column {name!r}: its {end} bin [{low}, {high}] is {_ratio(width / median)}"
                    f"× wider than the median bin: {advice}",
                )
            )
    inner = edges[-2] - edges[1]
    outer = edges[-1] - edges[0]
    if learned and inner > 0 and outer > RANGE_FACTOR * inner:
        out.append(
            DomainWarning(
                "wide_range",
                name,
                f"column {name!r}: the range [{shown[0]}, {shown[-1]}] is "
                f"{_ratio(outer / inner)}× wider than its inner quantiles [{shown[1]}, "
                f"{shown[-2]}]: declare min and max, or give discovery more ρ",
            )
        )
    return out


def _categorical(
    column: CategoricalColumn, learned: bool, threshold: int | None
) -> list[DomainWarning]:
    name = column.name
    if not column.categories:
        advice = (
            "declare the categories, or give discovery more ρ"
            if learned
            else ("declare the categories")
        )
        return [
            DomainWarning(
                "all_other",
                name,
                f"column {name!r} has no category: every value becomes {column.other!r}; {advice}",
            )
        ]
    if learned and threshold is not None and threshold > CATEGORY_THRESHOLD_ROWS:
        return [
            DomainWarning(
                "small_discovery_budget",
                name,
                f"column {name!r}: a category needs a noisy count of about {threshold:,} rows "
                f"to be learned, so rarer ones become {column.other!r}; declare the categories "
                "or candidates, or give discovery more ρ",
            )
        ]
    return []


def _thresholds(
    schema: TableSchema, discovered: Discovered | None, discovery_rho: Fraction | None
) -> dict[str, int]:
    """Each discovered categorical column's release threshold (public: from ρ, δ, candidates)."""
    if discovered is not None:
        return {name: found.threshold for name, found in discovered.categories.items()}
    categorical = [
        c.name
        for c in schema.columns
        if isinstance(c, CategoricalColumn) and c.name in set(schema.discovered)
    ]
    if discovery_rho is None or discovery_rho <= 0 or not categorical:
        return {}
    share = Fraction(discovery_rho) / len(schema.discovered)
    tau = 1 + smallest_tail_threshold(sigma2_for_rho(1, share), REFERENCE_DELTA)
    return dict.fromkeys(categorical, tau)


def _number(number: float) -> str:
    """A public number, short: 40.88, 2017, 2.59e11, -7.8e11, 1.23e-5."""
    value = float(number)
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e6:
        return str(int(value))
    if 1e-3 <= abs(value) < 1e6:
        return f"{value:.6g}"
    text = f"{value:.3g}"
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def _ratio(value: float) -> str:
    """A ratio to two significant digits: 520, 4,000, 2.6e11."""
    if value >= 1e6:
        return _number(float(f"{value:.2g}"))
    return f"{float(f'{value:.2g}'):,.0f}"
