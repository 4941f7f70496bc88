"""Date and datetime columns: declared bounds (ISO 8601) cut into bins.

Values are held as integers: days since 1970-01-01 for ``date``, seconds for ``datetime``
(naive; values with a UTC offset are converted to UTC). The domain is ``[min, max]``, both
inclusive; bins come from a count (equal width), a calendar unit (bins aligned to days, ISO
weeks starting Monday, months, years or hours, cut at the bounds) or explicit edges. Everything
here is declared by the owner (public). ``clip`` clamps values outside the bounds into the end
bins (public, row by row, no budget). Decoding draws a time uniformly inside the bin with the
job's seeded ``rng`` (post-processing) and truncates it to the column's resolution (never
below the bin's start), so output has the input's resolution; a declared ``format`` is kept as
field metadata and used for CSV output. A datetime whose format writes a zone (``%z``, or a
final literal ``Z``) is output as UTC ``timestamp[s, tz=UTC]`` (engine/columns/output.py).
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.columns.arrow_temporal import parse_text, timestamp_micros
from engine.columns.arrow_text import is_arrow_text, missing_rows, strip
from engine.columns.base import (
    MISSING,
    OUTSIDE,
    BinnedCodes,
    SchemaError,
    check_codes,
    check_name,
    is_text,
    missing_mask,
    missing_problem,
    null_positions,
    rows,
    settle_missing,
    values_word,
)
from engine.columns.numeric import bin_codes
from engine.columns.output import FORMAT_KEY, is_zoned
from engine.columns.profile import bin_levels, check_profile, profile_draws

CALENDAR_UNITS = ("hour", "day", "week", "month", "year")
RESOLUTIONS = ("year", "month", "day", "hour", "minute", "second")
_NUMPY_UNIT = {"year": "Y", "month": "M", "day": "D", "hour": "h", "minute": "m", "second": "s"}
# strftime directives by the finest resolution they carry.
_DIRECTIVES = {
    "second": "STXcs",
    "minute": "MR",
    "hour": "HIkl",
    "day": "djaAeFDxuwUWV",
    "month": "mbBh",
    "year": "YyGC",
}
_MONDAY = 4  # 1970-01-05, day 4 since the epoch, was a Monday


def _finest(fmt: str) -> str | None:
    found = {fmt[i + 1] for i in range(len(fmt) - 1) if fmt[i] == "%"}
    for resolution in reversed(RESOLUTIONS):
        if found & set(_DIRECTIVES[resolution]):
            return resolution
    return None


@dataclass(frozen=True)
class _TemporalColumn(BinnedCodes):
    name: str
    edges: tuple[int, ...]  # internal units; the last edge is exclusive (max + 1 unit)
    format: str | None = None
    resolution: str | None = None  # declared; None: from the format, else the finest allowed
    nullable: bool = False
    clip: bool = False
    # Points of the values' quantile function in internal units, from edges[0] to edges[-1]
    # (decoding draws inside a bin from it); public: declared, or a learned range's DP profile.
    profile: tuple[int, ...] | None = None

    unit: ClassVar[str] = "s"
    finest: ClassVar[str] = "second"

    def __post_init__(self) -> None:
        check_name(self.name)
        if len(self.edges) < 2:
            raise SchemaError(f"column {self.name!r}: bins need at least two edges")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise SchemaError(f"column {self.name!r}: bin edges must be increasing")
        if self.format is not None:
            if not isinstance(self.format, str) or not 0 < len(self.format) <= 100:
                raise SchemaError(f"column {self.name!r}: format must be a short string")
            if _finest(self.format) is None:
                raise SchemaError(f"column {self.name!r}: format has no date directive")
        if self.resolution is not None and (
            self.resolution not in RESOLUTIONS
            or RESOLUTIONS.index(self.resolution) > RESOLUTIONS.index(self.finest)
        ):
            allowed = ", ".join(RESOLUTIONS[: RESOLUTIONS.index(self.finest) + 1])
            raise SchemaError(f"column {self.name!r}: resolution must be one of {allowed}")
        if self.profile is not None:
            profile = tuple(int(p) for p in self.profile)
            problem = check_profile(profile, self.edges[0], self.edges[-1], "the profile")
            if problem is not None:
                raise SchemaError(f"column {self.name!r}: {problem}")
            object.__setattr__(self, "profile", profile)

    @property
    def output_resolution(self) -> str:
        if self.resolution is not None:
            return self.resolution
        derived = _finest(self.format) if self.format is not None else None
        if derived is None or RESOLUTIONS.index(derived) > RESOLUTIONS.index(self.finest):
            return self.finest
        return derived

    @property
    def written_resolution(self) -> str:
        """The resolution a CSV writes: the output resolution, or the format's finest directive
        when it is coarser (a "%Y-%m-%d %H:%M" format writes minutes of values drawn to the
        second)."""
        derived = _finest(self.format) if self.format is not None else None
        if derived is not None and RESOLUTIONS.index(derived) < RESOLUTIONS.index(
            self.output_resolution
        ):
            return derived
        return self.output_resolution

    @property
    def type(self) -> str:
        raise NotImplementedError

    def iso(self, value: int) -> str:
        return str(_stamps([value], self.unit)[0])

    def to_json(self) -> dict[str, Any]:
        edges = [self.iso(e) for e in self.edges[:-1]] + [self.iso(self.edges[-1] - 1)]
        out: dict[str, Any] = {"name": self.name, "type": self.type, "bins": edges}
        if self.format is not None:
            out["format"] = self.format
        if self.resolution is not None:
            out["resolution"] = self.resolution
        if self.clip:
            out["clip"] = True
        if self.nullable:
            out["nullable"] = True
        if self.profile is not None:
            # The last point, like the last edge, is written as the last value it admits.
            end = self.edges[-1] - 1
            out["profile"] = [self.iso(min(p, end)) for p in self.profile]
        return out

    def to_units(self, values: pd.Series) -> np.ndarray:
        """Each value in internal units as a float (NaN when it is not a date of this format)."""
        return self._units(_timestamps(values, self.format))

    def _units(self, stamps: np.ndarray) -> np.ndarray:
        as_unit = stamps.astype(f"datetime64[{self.unit}]")
        out = as_unit.view(np.int64).astype(np.float64)
        out[np.isnat(as_unit)] = np.nan
        return out

    def _bin(self, stamps: np.ndarray) -> np.ndarray:
        closed = np.asarray(self.edges, dtype=np.float64)
        closed[-1] -= 1  # the last bin includes the declared maximum
        return bin_codes(self._units(stamps), closed, self.clip)

    def encode(self, values: pd.Series, missing: Sequence[str]) -> np.ndarray:
        codes = self._bin(_timestamps(values, self.format))
        return settle_missing(codes, missing_mask(values, missing), self.absent_code)

    def encode_arrow(self, values: pa.Array, missing: Sequence[str]) -> np.ndarray | None:
        """:meth:`encode` for a string, ``date32`` or timestamp array (seconds to microseconds),
        whole arrays at a time (:mod:`engine.columns.arrow_temporal`); None for other types."""
        if is_arrow_text(values.type):
            stamps = parse_text(strip(values), self.format, self._fallback)
            codes = self._bin(stamps)
            # Missing values only change refused codes: spellings are looked up in those.
            refused = np.flatnonzero(codes < 0)
            if refused.size:
                codes[refused[missing_rows(values, refused, missing)]] = self.absent_code
            return codes
        found = timestamp_micros(values)
        if found is None:
            return None
        # A typed null is missing; no spelling applies to a date.
        return settle_missing(self._bin(found), np.isnat(found), self.absent_code)

    def _fallback(self, texts: list[str]) -> np.ndarray:
        return _parse_text(pd.Series(texts, dtype=object), self.format)

    def bin_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Per bin, the time distribution's level just below its lower and upper edge
        (engine.columns.profile.bin_levels)."""
        return bin_levels(self.edges, self.profile)

    def decode(
        self, codes: np.ndarray, rng: np.random.Generator, draws: np.ndarray | None = None
    ) -> pd.Series:
        """Times drawn inside each row's bin; ``draws`` (uniforms in [0, 1), one per row, the
        position inside the bin's share of :meth:`bin_levels`) replace the rng's own."""
        col = check_codes(codes, self.size, self.name)
        nulls = null_positions(col, self.null_code)
        bins = np.where(nulls, 0, col)
        edges = np.asarray(self.edges, dtype=np.int64)
        low, width = edges[bins], np.diff(edges)[bins]
        draws = rng.random(col.size) if draws is None else draws
        if self.profile is None:
            drawn = low + np.minimum(np.floor(draws * width), width - 1).astype(np.int64)
        else:
            profiled = profile_draws(
                edges.astype(np.float64), np.asarray(self.profile, dtype=np.float64), bins, draws
            )
            drawn = np.clip(np.floor(profiled).astype(np.int64), low, low + width - 1)
        stamps = drawn.astype(f"datetime64[{self.unit}]")
        coarse = stamps.astype(f"datetime64[{_NUMPY_UNIT[self.output_resolution]}]")
        truncated = np.maximum(coarse.astype(f"datetime64[{self.unit}]"), low.astype(stamps.dtype))
        out = truncated.astype("datetime64[s]")
        out[nulls] = np.datetime64("NaT")
        return pd.Series(out)

    @property
    def zoned(self) -> bool:
        """Whether output carries a zone: a datetime whose format has ``%z`` or ends in a
        literal ``Z`` (its values are UTC instants, written so)."""
        return self.unit == "s" and is_zoned(self.format)

    def arrow_field(self) -> pa.Field:
        metadata = {FORMAT_KEY: self.format} if self.format is not None else None
        if self.unit == "D":
            kind = pa.date32()
        else:
            kind = pa.timestamp("s", tz="UTC") if self.zoned else pa.timestamp("s")
        return pa.field(self.name, kind, nullable=self.nullable, metadata=metadata)

    def problem(self, reason: int, count: int) -> str:
        if reason == MISSING:
            return missing_problem(count)
        if reason == OUTSIDE:
            low, high = self.iso(self.edges[0]), self.iso(self.edges[-1] - 1)
            return f"{values_word(count)} outside [{low}, {high}], set clip or widen the bounds"
        expected = self.format if self.format is not None else "ISO 8601"
        return f"unparseable {self.type} in {rows(count)}, expected format {expected}"


@dataclass(frozen=True)
class DateColumn(_TemporalColumn):
    """Calendar dates (day resolution at most); output as Arrow ``date32``."""

    unit: ClassVar[str] = "D"
    finest: ClassVar[str] = "day"

    @property
    def type(self) -> Literal["date"]:
        return "date"


@dataclass(frozen=True)
class DatetimeColumn(_TemporalColumn):
    """Timestamps to the second; output as Arrow ``timestamp[s]``."""

    unit: ClassVar[str] = "s"
    finest: ClassVar[str] = "second"

    @property
    def type(self) -> Literal["datetime"]:
        return "datetime"


TemporalColumn = DateColumn | DatetimeColumn
_KINDS: dict[str, type[DateColumn] | type[DatetimeColumn]] = {
    "date": DateColumn,
    "datetime": DatetimeColumn,
}


def _timestamps(values: pd.Series, fmt: str | None) -> np.ndarray:
    """``datetime64[us]`` naive UTC values (NaT where a value is not a date)."""
    if isinstance(values.dtype, pd.DatetimeTZDtype):
        values = values.dt.tz_convert("UTC").dt.tz_localize(None)
    if pd.api.types.is_datetime64_dtype(values.dtype):
        return np.asarray(values.to_numpy(dtype="datetime64[us]"))
    if is_text(values):
        return _parse_text(values, fmt)
    objects = values.astype(object)
    text = objects.map(lambda v: v if isinstance(v, str) else None)
    out = _parse_text(text, fmt)
    others = [
        i
        for i, v in enumerate(objects)
        if not isinstance(v, str) and isinstance(v, pd.Timestamp | np.datetime64 | datetime.date)
    ]
    if others:
        stamps = pd.to_datetime(objects.iloc[others], errors="coerce", utc=True)
        out[others] = stamps.dt.tz_localize(None).to_numpy(dtype="datetime64[us]")
    return out


def _parse_text(text: pd.Series, fmt: str | None) -> np.ndarray:
    stripped = text.map(lambda v: v.strip() if isinstance(v, str) else None)
    with np.errstate(all="ignore"):
        parsed = pd.to_datetime(
            stripped, format=fmt if fmt is not None else "ISO8601", errors="coerce", utc=True
        )
    return np.asarray(parsed.dt.tz_localize(None).to_numpy(dtype="datetime64[us]")).copy()


# ----------------------------------------------------------------------------------------------
# Parsing the declaration
# ----------------------------------------------------------------------------------------------


def parse_bound(value: Any, kind: str, what: str, column: str) -> int:
    """An ISO 8601 bound or edge in internal units (days or seconds)."""
    if not isinstance(value, str) or len(value) > 64:
        raise SchemaError(f"column {column!r}: {what} must be an ISO 8601 date string")
    try:
        stamp = pd.Timestamp(value)
    except (ValueError, OverflowError):
        raise SchemaError(f"column {column!r}: {what} is not an ISO 8601 date") from None
    if pd.isna(stamp):
        raise SchemaError(f"column {column!r}: {what} is not an ISO 8601 date")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    as_unit = np.array([stamp.to_datetime64()]).astype(f"datetime64[{_KINDS[kind].unit}]")
    return int(as_unit.view(np.int64)[0])


def to_periods(units: np.ndarray, kind: str, resolution: str) -> np.ndarray:
    """Internal units of a ``kind`` column (days or seconds since 1970-01-01, as floats; NaN for
    missing) as the index of their calendar period at ``resolution`` (years, months, days, hours,
    minutes or seconds since 1970), as floats with NaN kept."""
    values = np.asarray(units, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    finite = np.isfinite(values)
    stamps = np.floor(values[finite]).astype(np.int64).astype(f"datetime64[{_KINDS[kind].unit}]")
    periods = stamps.astype(f"datetime64[{_NUMPY_UNIT[resolution]}]")
    out[finite] = periods.view(np.int64).astype(np.float64)
    return out


def period_starts(periods: np.ndarray, kind: str, resolution: str) -> np.ndarray:
    """The first instant of each calendar period (integers from :func:`to_periods`), in the
    internal units of a ``kind`` column."""
    index = np.asarray(periods, dtype=np.int64).astype(f"datetime64[{_NUMPY_UNIT[resolution]}]")
    out: np.ndarray = index.astype(f"datetime64[{_KINDS[kind].unit}]").view(np.int64)
    return out


def period_instants(points: np.ndarray, kind: str, resolution: str) -> np.ndarray:
    """Points on the period axis (a period p spans [p − 0.5, p + 0.5)) as internal units: the
    same share of the way through the period's own instants (months and years differ in length),
    rounded down."""
    values = np.asarray(points, dtype=np.float64)
    period = np.floor(values + 0.5)
    fraction = values + 0.5 - period
    start = period_starts(period, kind, resolution)
    end = period_starts(period + 1, kind, resolution)
    out: np.ndarray = start + np.floor(fraction * (end - start)).astype(np.int64)
    return out


def _stamps(values: Sequence[int], unit: str) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).astype(f"datetime64[{unit}]")


def unit_bin_count(low: int, high: int, kind: str, unit: str) -> int:
    """How many calendar ``unit`` periods ``[low, high]`` touches; nothing is allocated."""
    start, end = _period(low, kind, unit), _period(high, kind, unit)
    step = 7 if unit == "week" else 1
    return (end - start) // step + 1


def _period(value: int, kind: str, unit: str) -> int:
    """The index of the calendar period holding ``value`` (weeks: the Monday's day number)."""
    base = _KINDS[kind].unit
    stamp = _stamps([value], base)
    if unit == "week":
        days = int(stamp.astype("datetime64[D]").view(np.int64)[0])
        return days - (days - _MONDAY) % 7
    return int(stamp.astype(f"datetime64[{_NUMPY_UNIT[unit]}]").view(np.int64)[0])


def unit_edges(low: int, high: int, kind: str, unit: str) -> tuple[int, ...]:
    """Calendar-aligned edges: ``low``, every period start inside, ``high + 1``."""
    base = _KINDS[kind].unit
    first, last = _period(low, kind, unit), _period(high, kind, unit)
    if unit == "week":
        starts = np.arange(first + 7, last + 1, 7, dtype=np.int64).astype("datetime64[D]")
    else:
        code = _NUMPY_UNIT[unit]
        starts = np.arange(first + 1, last + 1, dtype=np.int64).astype(f"datetime64[{code}]")
    inner = starts.astype(f"datetime64[{base}]").astype(np.int64)
    return (low, *(int(v) for v in inner), high + 1)


def parse_temporal(entry: Mapping[str, Any], kind: str, name: str) -> TemporalColumn:
    """Build a date/datetime column from a checked entry (sizes were already limited)."""
    cls = _KINDS[kind]
    bins = entry.get("bins")
    unit = entry.get("unit")
    options: dict[str, Any] = {
        "format": entry.get("format"),
        "resolution": entry.get("resolution"),
        "nullable": entry.get("nullable", False),
        "clip": entry.get("clip", False),
    }
    if isinstance(bins, list):
        if "min" in entry or "max" in entry or unit is not None:
            raise SchemaError(f"column {name!r}: explicit bin edges replace min, max and unit")
        if len(bins) < 2:
            raise SchemaError(f"column {name!r}: bins need at least two edges")
        points = [parse_bound(edge, kind, "every bin edge", name) for edge in bins]
        # The last bin is closed: its upper edge may equal its lower one (a one-day bin).
        if any(b < a for a, b in itertools.pairwise(points)) or any(
            b <= a for a, b in itertools.pairwise(points[:-1])
        ):
            raise SchemaError(f"column {name!r}: bin edges must be increasing")
        listed = (*points[:-1], points[-1] + 1)
        profile = entry.get("profile")
        if profile is not None:
            if not isinstance(profile, list) or len(profile) < 2:
                raise SchemaError(f"column {name!r}: profile must be a list of ISO 8601 dates")
            knots = [parse_bound(p, kind, "every profile point", name) for p in profile]
            # Like the bins: the last point is the last value admitted (an exclusive end + 1).
            knots[-1] += 1
            options["profile"] = tuple(min(max(k, listed[0]), listed[-1]) for k in knots)
        return cls(name, listed, **options)
    if "profile" in entry:
        raise SchemaError(f"column {name!r}: a profile needs bins given as a list of edges")
    if "min" not in entry or "max" not in entry:
        raise SchemaError(f"column {name!r}: missing min, max (or give bins as a list of edges)")
    low = parse_bound(entry["min"], kind, "min", name)
    high = parse_bound(entry["max"], kind, "max", name)
    if high < low:
        raise SchemaError(f"column {name!r}: max must not be before min")
    if unit is not None:
        if bins is not None:
            raise SchemaError(f"column {name!r}: give either bins or unit, not both")
        allowed = CALENDAR_UNITS if kind == "datetime" else CALENDAR_UNITS[1:]
        if unit not in allowed:
            raise SchemaError(f"column {name!r}: unit must be one of {', '.join(allowed)}")
        return cls(name, unit_edges(low, high, kind, unit), **options)
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
        raise SchemaError(
            f"column {name!r}: 'bins' must be a count ≥ 1, a list of edges, "
            'or {"quantiles": k}; or give a calendar unit'
        )
    if bins > high + 1 - low:
        raise SchemaError(
            f"column {name!r}: {bins} bins between min and max would be narrower than one "
            f"{'day' if kind == 'date' else 'second'}"
        )
    edges = np.floor(np.linspace(low, high + 1, bins + 1) + 0.5).astype(np.int64)
    return cls(name, tuple(int(e) for e in edges), **options)


def declared_bins(entry: Mapping[str, Any], kind: str) -> int | None:
    """The number of bins a raw date/datetime entry declares, without building anything."""
    bins = entry.get("bins")
    if isinstance(bins, list):
        return len(bins) - 1
    if isinstance(bins, Mapping):
        return _quantiles(bins)
    unit = entry.get("unit")
    if isinstance(unit, str) and unit in CALENDAR_UNITS:
        try:
            low = parse_bound(entry.get("min"), kind, "min", "")
            high = parse_bound(entry.get("max"), kind, "max", "")
            return unit_bin_count(low, high, kind, unit) if high >= low else None
        except SchemaError:
            return None
    return bins if isinstance(bins, int) and not isinstance(bins, bool) else None


def _quantiles(bins: Mapping[str, Any]) -> int | None:
    k = bins.get("quantiles")
    return k if isinstance(k, int) and not isinstance(k, bool) else None
