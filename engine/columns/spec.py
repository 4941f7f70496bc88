"""Parsing column entries of a ``{"columns": [...]}`` schema, and the limits checked first.

Besides the complete column types, two entries are *unresolved*: their bins or categories are to
be learned from the data by a DP mechanism (engine/discovery, charged to the budget) before the
table can be encoded. They parse into :class:`QuantileBins` and :class:`DiscoveredCategories`,
which can describe themselves but not encode; ``resolve`` turns them into complete columns once
the discovered edges or categories are known.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.accounting import RHO_QUANTUM as ACCOUNTING_RHO_QUANTUM
from engine.columns.arrow_text import numbers_of
from engine.columns.base import (
    SchemaError,
    check_flag,
    check_name,
    check_spellings,
    missing_mask,
    unknown_keys,
)
from engine.columns.categorical import (
    DEFAULT_FALSE_VALUES,
    DEFAULT_TRUE_VALUES,
    BooleanColumn,
    CategoricalColumn,
    CodesColumn,
    as_float,
)
from engine.columns.numeric import NumericColumn
from engine.columns.temporal import (
    DateColumn,
    DatetimeColumn,
    declared_bins,
    parse_temporal,
    period_instants,
    period_starts,
    to_periods,
)
from engine.discovery.categories import MAX_CANDIDATES, MAX_CATEGORIES
from engine.discovery.learned import LearnedBins, Window
from engine.discovery.quantiles import MAX_BINS

Column = (
    CategoricalColumn | NumericColumn | CodesColumn | BooleanColumn | DateColumn | DatetimeColumn
)
TYPES = ("categorical", "numeric", "date", "datetime", "boolean", "codes", "ignore")


@dataclass(frozen=True)
class IgnoredColumn:
    """A column of the file that is dropped while reading and never stored."""

    name: str
    type: Literal["ignore"] = field(default="ignore", init=False)

    def __post_init__(self) -> None:
        check_name(self.name)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type}


@dataclass(frozen=True)
class QuantileBins:
    """A numeric, date or datetime column whose inner bin edges are DP quantiles (unresolved).

    ``min``/``max`` and the other options are declared; only the ``quantiles - 1`` cut points
    are to be learned. :meth:`values` gives a mechanism the column's values in the units the
    cut points are given in (numbers; days or seconds since 1970-01-01 for dates/datetimes).
    """

    name: str
    kind: Literal["numeric", "date", "datetime"]
    quantiles: int
    entry: str  # the declared entry, canonical JSON
    nullable: bool = False
    rho: Fraction | None = None  # the owner's own ρ for this discovery (else a shared default)
    # {"quantiles": k, "range": true}: the outer edges are learned too; min and max are then
    # only the public window searched, and values are clamped into the learned range.
    learn_range: bool = False

    @property
    def size(self) -> int:
        """The number of codes once resolved (``quantiles`` bins, then the null code)."""
        return self.quantiles + int(self.nullable)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.entry)
        return out

    def provisional(self) -> Column:
        """The column with one bin between the declared bounds (validates the options)."""
        entry = self.to_json()
        entry["bins"] = 1
        return parse_column(entry, 0, allow_pending=False)  # type: ignore[return-value]

    def bounds(self) -> tuple[float, float]:
        column = self.provisional()
        assert isinstance(column, NumericColumn | DateColumn | DatetimeColumn)
        last = column.edges[-1] if isinstance(column, NumericColumn) else column.edges[-1] - 1
        return float(column.edges[0]), float(last)

    def values(self, values: pd.Series | pa.Array, missing: Sequence[str]) -> np.ndarray:
        """Values as floats in cut-point units (NaN: missing or unparseable; clipped if asked).
        ``values`` may be a pandas Series or, faster for numbers, an Arrow array."""
        column = self.provisional()
        if isinstance(values, pa.Array | pa.ChunkedArray):
            if isinstance(column, NumericColumn):
                numbers = numbers_of(values, missing)
                return self._clipped(column, numbers)
            values = values.to_pandas()
        if isinstance(column, NumericColumn):
            numbers = as_float(values)
        else:
            assert isinstance(column, DateColumn | DatetimeColumn)
            numbers = column.to_units(values)
        numbers[missing_mask(values, missing) | ~np.isfinite(numbers)] = np.nan
        return self._clipped(column, numbers)

    def _clipped(self, column: Column, numbers: np.ndarray) -> np.ndarray:
        if getattr(column, "clip", False):
            low, high = self.bounds()
            numbers = np.clip(numbers, low, high)
        return numbers

    @property
    def integer(self) -> bool:
        """Whether the column's values are whole units (integers, or calendar periods)."""
        return self.kind != "numeric" or bool(self.to_json().get("integer"))

    @property
    def period(self) -> str | None:
        """For dates and datetimes, the calendar period a learned range is counted in: the
        column's output resolution (from its format, else a day or a second)."""
        if self.kind == "numeric":
            return None
        column = self.provisional()
        assert isinstance(column, DateColumn | DatetimeColumn)
        return column.output_resolution

    def window(self) -> Window:
        """The public window of a learned range in learned units (numbers, or calendar periods
        since 1970), whole units widened by half a unit on each side."""
        low, high = self.bounds()
        if self.period is not None:
            ends = to_periods(np.array([low, high]), self.kind, self.period)
            return Window(float(ends[0]) - 0.5, float(ends[1]) + 0.5, step=1.0, linear=True)
        column = self.provisional()
        assert isinstance(column, NumericColumn)
        step = column.step
        if step is not None:
            return Window(low - step / 2, high + step / 2, step=step)
        return Window(low, high)

    def learned_units(self, values: pd.Series | pa.Array, missing: Sequence[str]) -> np.ndarray:
        """:meth:`values` in the units of :meth:`window` (NaN: missing or unparseable)."""
        numbers = self.values(values, missing)
        if self.period is not None:
            return to_periods(numbers, self.kind, self.period)
        return numbers

    def resolve_learned(self, learned: LearnedBins) -> Column:
        """The complete column from a learned range's release: its edges (the outer ones replace
        the window; values are clamped into them) and its value profile."""
        entry = self.to_json()
        for key in ("min", "max", "bins"):
            entry.pop(key, None)
        entry["clip"] = True
        column = self.provisional()
        edges = np.asarray(learned.edges, dtype=np.float64)
        profile = None if learned.profile is None else np.asarray(learned.profile)
        if self.period is not None:
            assert isinstance(column, DateColumn | DatetimeColumn)
            # Period p spans [p − 0.5, p + 0.5): edge p − 0.5 is the start of period p.
            starts = period_starts(np.ceil(edges), self.kind, self.period)
            entry["bins"] = [column.iso(int(p)) for p in starts[:-1]] + [
                column.iso(int(starts[-1]) - 1)
            ]
            if profile is not None:
                instants = period_instants(profile, self.kind, self.period)
                instants[0], instants[-1] = starts[0], starts[-1]
                end = int(starts[-1]) - 1
                entry["profile"] = [column.iso(min(int(p), end)) for p in instants]
        else:
            assert isinstance(column, NumericColumn)
            if column.decimals is not None:
                # Halfway between two values of the step: tidied (0.575, not 0.57499999999).
                edges = np.round(edges, column.decimals + 1) + 0.0
            entry["bins"] = [float(e) for e in edges]
            if profile is not None:
                points = np.clip(profile, edges[0], edges[-1])
                points[0], points[-1] = edges[0], edges[-1]
                entry["profile"] = [float(p) for p in points]
        result = parse_column(entry, 0, allow_pending=False)
        assert not isinstance(result, IgnoredColumn | QuantileBins | DiscoveredCategories)
        return result

    def resolve(self, cuts: Sequence[float]) -> Column:
        """The complete column with the discovered inner ``cuts`` (in :meth:`values` units).

        With ``learn_range`` the first and last of ``cuts`` are the outer edges: they replace
        the declared window, and the column clamps values into them. Discovery resolves a learned
        range with :meth:`resolve_learned` (edges and profile); this form remains for the
        provisional schema that reads a file before discovery (engine/discovery/schema.py).
        """
        low, high = self.bounds()
        entry = self.to_json()
        for key in ("min", "max", "bins"):
            entry.pop(key, None)
        column = self.provisional()
        points = np.asarray([float(c) for c in cuts], dtype=np.float64)
        if self.kind != "numeric":
            points = np.round(points)
        elif isinstance(column, NumericColumn) and column.step is not None:
            # Rounded to the step, then tidied (0.57, not 0.5700000000000001; 0, not -0).
            points = np.round(np.round(points / column.step) * column.step, 12) + 0.0
        if self.learn_range:
            if points.size < 2 or not np.all(np.isfinite(points[[0, -1]])):
                raise SchemaError(f"column {self.name!r}: a learned range needs two outer edges")
            low = max(low, float(points[0]))
            high = min(max(float(points[-1]), low), high)
            if high <= low:  # one value (after rounding): one bin of one step or one unit
                high = min(low + _unit(column), self.bounds()[1])
            points = points[1:-1]
            entry["clip"] = True
        inner = sorted({float(p) for p in points if math.isfinite(p) and low < p < high})
        if len(inner) > self.quantiles - 1:
            raise SchemaError(f"column {self.name!r}: more cut points than {self.quantiles} bins")
        if self.kind == "numeric":
            entry["bins"] = [low, *inner, high]
        else:
            assert isinstance(column, DateColumn | DatetimeColumn)
            entry["bins"] = [column.iso(int(p)) for p in (low, *inner, high)]
        result = parse_column(entry, 0, allow_pending=False)
        assert not isinstance(result, IgnoredColumn | QuantileBins | DiscoveredCategories)
        return result


@dataclass(frozen=True)
class DiscoveredCategories:
    """A categorical column whose categories are learned by a DP mechanism (unresolved).

    At most ``max_categories`` are kept; with ``candidates`` declared, only those can be found.
    """

    name: str
    max_categories: int
    candidates: tuple[str, ...] | None
    entry: str
    nullable: bool = False
    other: bool = False
    rho: Fraction | None = None  # the owner's own ρ and δ (else shared defaults)
    delta: Fraction | None = None

    @property
    def size(self) -> int:
        """An upper bound on the number of codes once resolved."""
        return self.max_categories + int(self.other) + int(self.nullable)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(self.entry)
        return out

    def resolve(self, categories: Sequence[str]) -> CategoricalColumn:
        found = [str(c) for c in categories]
        if len(found) > self.max_categories:
            raise SchemaError(
                f"column {self.name!r}: more than {self.max_categories} categories discovered"
            )
        if self.candidates is not None and not set(found) <= set(self.candidates):
            raise SchemaError(f"column {self.name!r}: a discovered category is not a candidate")
        entry = self.to_json()
        entry["categories"] = found
        result = parse_column(entry, 0, allow_pending=False)
        assert isinstance(result, CategoricalColumn)
        return result


Pending = QuantileBins | DiscoveredCategories
Entry = Column | IgnoredColumn | Pending


def _number(value: Any, what: str, column: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaError(f"column {column!r}: {what} must be a number")
    return float(value)


def _category_text(value: Any, column: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise SchemaError(f"column {column!r}: categories must be strings or numbers")


def _require_keys(keys: set[str], required: set[str], optional: set[str], name: str) -> None:
    missing = sorted(required - keys)
    if missing:
        raise SchemaError(f"column {name!r}: missing {', '.join(missing)}")
    unknown_keys(keys, sorted(required | optional), name)


def _flags(entry: Mapping[str, Any], names: Sequence[str], column: str) -> dict[str, bool]:
    out = {}
    for key in names:
        if key in entry:
            check_flag(entry[key], key, column)
            out[key] = bool(entry[key])
    return out


def parse_column(entry: Any, position: int, *, allow_pending: bool = True) -> Entry:
    """One column entry: a complete column, an ignored one, or (if allowed) an unresolved one."""
    if not isinstance(entry, Mapping):
        raise SchemaError(f"columns[{position}] must be an object")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"columns[{position}] needs a non-empty string 'name'")
    kind = entry.get("type")
    keys = set(entry)
    if kind == "categorical":
        return _categorical(entry, name, keys, allow_pending)
    if kind == "numeric":
        return _numeric(entry, name, keys, allow_pending)
    if kind in ("date", "datetime"):
        optional = {
            "bins",
            "unit",
            "min",
            "max",
            "format",
            "resolution",
            "clip",
            "nullable",
            "profile",
        }
        _require_keys(keys, {"name", "type"}, optional, name)
        _flags(entry, ("clip", "nullable"), name)
        if isinstance(entry.get("bins"), Mapping):
            return _quantile_spec(entry, name, kind, allow_pending)
        return parse_temporal(entry, kind, name)
    if kind == "boolean":
        _require_keys(keys, {"name", "type"}, {"true_values", "false_values", "nullable"}, name)
        return BooleanColumn(
            name,
            check_spellings(
                entry.get("true_values", list(DEFAULT_TRUE_VALUES)), "true_values", name
            ),
            check_spellings(
                entry.get("false_values", list(DEFAULT_FALSE_VALUES)), "false_values", name
            ),
            **_flags(entry, ("nullable",), name),
        )
    if kind == "codes":
        _require_keys(keys, {"name", "type", "size"}, set(), name)
        size = entry["size"]
        if isinstance(size, bool) or not isinstance(size, int):
            raise SchemaError(f"column {name!r}: size must be a positive integer")
        return CodesColumn(name, size)
    if kind == "ignore":
        _require_keys(keys, {"name", "type"}, set(), name)
        return IgnoredColumn(name)
    raise SchemaError(f"column {name!r}: type must be one of {', '.join(map(repr, TYPES))}")


def _categorical(entry: Mapping[str, Any], name: str, keys: set[str], allow_pending: bool) -> Entry:
    _require_keys(keys, {"name", "type", "categories"}, {"other", "ordered", "nullable"}, name)
    flags = _flags(entry, ("ordered", "nullable"), name)
    other = entry.get("other")
    if other is not None and (not isinstance(other, str) or not other):
        raise SchemaError(f"column {name!r}: 'other' must be a non-empty label")
    categories = entry["categories"]
    if isinstance(categories, Mapping):
        return _discovery_spec(entry, name, categories, allow_pending, flags, other)
    if not isinstance(categories, list):
        raise SchemaError(f"column {name!r}: categories must be a list")
    return CategoricalColumn(
        name, tuple(_category_text(c, name) for c in categories), other=other, **flags
    )


def _numeric(entry: Mapping[str, Any], name: str, keys: set[str], allow_pending: bool) -> Entry:
    options = {"integer", "decimals", "format", "clip", "nullable"}
    flags = _flags(entry, ("integer", "clip", "nullable"), name)
    decimals = entry.get("decimals")
    bins = entry.get("bins")
    if isinstance(bins, list):
        _require_keys(keys, {"name", "type", "bins"}, options | {"profile"}, name)
        edges = tuple(_number(edge, "bin edges", name) for edge in bins)
        points = entry.get("profile")
        profile = None
        if points is not None:
            if not isinstance(points, list):
                raise SchemaError(f"column {name!r}: profile must be a list of numbers")
            profile = tuple(_number(point, "profile points", name) for point in points)
        return NumericColumn(
            name,
            edges,
            decimals=decimals,
            integer=flags.get("integer", False),
            clip=flags.get("clip", False),
            nullable=flags.get("nullable", False),
            profile=profile,
            format=entry.get("format"),
        )
    _require_keys(keys, {"name", "type", "bins", "min", "max"}, options, name)
    low = _number(entry["min"], "min", name)
    high = _number(entry["max"], "max", name)
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        raise SchemaError(f"column {name!r}: max must be greater than min")
    if isinstance(bins, Mapping):
        return _quantile_spec(entry, name, "numeric", allow_pending)
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise SchemaError(
            f"column {name!r}: 'bins' must be a list of edges, a count ≥ 1 or {{\"quantiles\": k}}"
        )
    spaced = np.linspace(low, high, bins + 1)
    return NumericColumn(
        name,
        tuple(float(e) for e in spaced),
        decimals=decimals,
        integer=flags.get("integer", False),
        clip=flags.get("clip", False),
        nullable=flags.get("nullable", False),
        format=entry.get("format"),
    )


RHO_QUANTUM = Fraction(ACCOUNTING_RHO_QUANTUM)  # the ledger records ρ in these units, δ in 1e-18
DELTA_QUANTUM = Fraction(1, 10**18)


def _unit(column: Any) -> float:
    """The smallest step of a column's values: its integer/decimal step, else one day/second."""
    step = getattr(column, "step", None)
    return float(step) if step else 1.0


def _budget(clause: Mapping[str, Any], key: str, name: str, quantum: Fraction) -> Fraction | None:
    """A discovery clause's own ρ or δ: a positive decimal the ledger can record exactly."""
    if key not in clause:
        return None
    value = clause[key]
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SchemaError(f"column {name!r}: {key} must be a positive decimal number")
    try:
        number = Decimal(repr(value) if isinstance(value, float) else str(value))
    except (ArithmeticError, ValueError):
        raise SchemaError(f"column {name!r}: {key} must be a positive decimal number") from None
    places = len(str(quantum.denominator)) - 1
    # Checked on the digits before any conversion: Fraction(Decimal("1e-30000000")) alone would
    # build a 30-million-digit integer.
    exact = Fraction(number) if _plain_decimal(number, places) else Fraction(0)
    if exact <= 0 or (key == "delta" and exact >= 1) or (exact / quantum).denominator != 1:
        raise SchemaError(
            f"column {name!r}: {key} must be a positive decimal with at most {places} decimal "
            f"places" + (" and below 1" if key == "delta" else f" and below 1e{MAX_BUDGET_DIGITS}")
        )
    return exact


MAX_BUDGET_DIGITS = 15
"""A clause's ρ has at most this many digits before the decimal point (δ is below 1)."""


def _plain_decimal(number: Decimal, places: int) -> bool:
    """Finite, non-zero, at most ``places`` decimal places and below 10**MAX_BUDGET_DIGITS, read
    from the digits and the exponent only (no arithmetic on the value)."""
    if not number.is_finite():
        return False
    _, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    significant = "".join(map(str, digits)).rstrip("0")
    if not significant.lstrip("0"):
        return False
    exponent += len(digits) - len(significant)  # trailing zeros of the coefficient
    return exponent >= -places and len(significant.lstrip("0")) + exponent <= MAX_BUDGET_DIGITS


def _canonical(entry: Mapping[str, Any]) -> str:
    return json.dumps(entry, sort_keys=True, ensure_ascii=False)


def _quantile_spec(
    entry: Mapping[str, Any], name: str, kind: str, allow_pending: bool
) -> QuantileBins:
    if not allow_pending:
        raise SchemaError(f"column {name!r}: quantile bins must be resolved first")
    bins = entry["bins"]
    if not {"quantiles"} <= set(bins) <= {"quantiles", "rho", "range"}:
        raise SchemaError(
            f'column {name!r}: quantile bins are declared as {{"quantiles": k}} (optionally with '
            '"rho" and "range": true)'
        )
    learn_range = bins.get("range", False)
    if not isinstance(learn_range, bool):
        raise SchemaError(f"column {name!r}: range must be true or false")
    k = bins["quantiles"]
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_BINS:
        raise SchemaError(f"column {name!r}: quantiles must be an integer from 1 to {MAX_BINS}")
    if kind != "numeric" and "unit" in entry:
        raise SchemaError(f"column {name!r}: give either quantile bins or unit, not both")
    spec = QuantileBins(
        name,
        kind,  # type: ignore[arg-type]
        k,
        _canonical(entry),
        nullable=entry.get("nullable", False) is True,
        rho=_budget(bins, "rho", name, RHO_QUANTUM),
        learn_range=learn_range,
    )
    spec.provisional()  # every other option is validated now, not at resolution
    return spec


def _discovery_spec(
    entry: Mapping[str, Any],
    name: str,
    categories: Mapping[str, Any],
    allow_pending: bool,
    flags: Mapping[str, bool],
    other: str | None,
) -> DiscoveredCategories:
    if not allow_pending:
        raise SchemaError(f"column {name!r}: discovered categories must be resolved first")
    unknown = sorted(set(categories) - {"discover", "max", "candidates", "rho", "delta"})
    if unknown or categories.get("discover") is not True:
        raise SchemaError(
            f'column {name!r}: discovered categories are declared as {{"discover": true, '
            '"max": K, "candidates": [...], "rho": ρ, "delta": δ}} (all but max optional)'
        )
    if "candidates" in categories and "delta" in categories:
        raise SchemaError(f"column {name!r}: a candidate list needs no delta (it is pure ρ)")
    limit = categories.get("max")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CATEGORIES:
        raise SchemaError(f"column {name!r}: max must be an integer from 1 to {MAX_CATEGORIES}")
    candidates = categories.get("candidates")
    if candidates is not None:
        if not isinstance(candidates, list) or not candidates:
            raise SchemaError(f"column {name!r}: candidates must be a non-empty list")
        if len(candidates) > MAX_CANDIDATES:
            raise SchemaError(f"column {name!r}: at most {MAX_CANDIDATES} candidates")
        texts = tuple(_category_text(c, name) for c in candidates)
        if len(set(texts)) != len(texts):
            raise SchemaError(f"column {name!r}: candidates must be distinct")
        candidates = texts
    return DiscoveredCategories(
        name,
        limit,
        candidates,
        _canonical(entry),
        nullable=flags.get("nullable", False),
        other=other is not None,
        rho=_budget(categories, "rho", name, RHO_QUANTUM),
        delta=_budget(categories, "delta", name, DELTA_QUANTUM),
    )


def declared_size(entry: Any) -> Any:
    """The number of codes a raw column entry declares (None when it declares none).

    Reads lengths and integers only; nothing is allocated in proportion to a declared size.
    """
    if not isinstance(entry, Mapping):
        return None
    kind = entry.get("type")
    extra = int(entry.get("nullable") is True)
    size: Any = None
    if kind == "categorical":
        categories = entry.get("categories")
        if isinstance(categories, list):
            size = len(categories)
        elif isinstance(categories, Mapping):
            size = categories.get("max")
        extra += int(entry.get("other") is not None)
    elif kind == "numeric":
        bins = entry.get("bins")
        if isinstance(bins, list):
            size = len(bins) - 1
        elif isinstance(bins, Mapping):
            size = bins.get("quantiles")
        else:
            size = bins
    elif kind in ("date", "datetime"):
        size = declared_bins(entry, kind)
    elif kind == "boolean":
        size = 2
    elif kind == "codes":
        return entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int):
        return size
    return size + extra


def declared_lists(entry: Any) -> int:
    """The longest auxiliary list of a raw entry (discovery candidates, a value profile)."""
    if not isinstance(entry, Mapping):
        return 0
    longest = 0
    categories = entry.get("categories")
    if isinstance(categories, Mapping):
        candidates = categories.get("candidates")
        longest = len(candidates) if isinstance(candidates, list) else 0
    profile = entry.get("profile")
    if isinstance(profile, list):
        longest = max(longest, len(profile))
    return longest
