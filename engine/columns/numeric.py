"""Numeric columns: declared bin edges, optional integer or fixed-decimal output, clipping.

Bins are ``[e0, e1), [e1, e2), ..., [e_{k-1}, e_k]`` (the last closed). ``clip`` clamps values
outside ``[e0, e_k]`` into the end bins: a public, row-by-row transformation (each output row
depends on its own input row only), so it costs no privacy budget. Decoding draws a value inside
the bin with the job's seeded ``rng`` (post-processing): uniformly on the real line, or uniformly
among the bin's integers (``integer``) or multiples of ``10**-decimals`` (``decimals``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.columns.base import (
    MISSING,
    OUTSIDE,
    BinnedCodes,
    SchemaError,
    check_codes,
    check_name,
    format_bound,
    missing_mask,
    missing_problem,
    null_positions,
    rows,
    settle_missing,
    values_word,
)
from engine.columns.categorical import as_float
from engine.columns.output import FORMAT_KEY, number_places
from engine.columns.profile import bin_levels, check_profile, profile_draws
from engine.domain import narrowest_unsigned

MAX_DECIMALS = 12
_GRID_SLACK = 1e-9  # relative tolerance when placing edges on the output grid


@dataclass(frozen=True)
class NumericColumn(BinnedCodes):
    """A numeric column cut into bins (codes ``0..k-1``, then the null code if nullable)."""

    name: str
    edges: tuple[float, ...]
    nullable: bool = False
    integer: bool = False
    decimals: int | None = None
    clip: bool = False
    # Points of the values' quantile function from edges[0] to edges[-1] (decoding draws inside
    # a bin from it); public: declared, or a learned range's DP percentiles.
    profile: tuple[float, ...] | None = None
    # How CSV writes the values: "%.Nf", exactly N decimal places (52000.0); None: integers
    # without a point, other numbers in their shortest form.
    format: str | None = None
    type: Literal["numeric"] = field(default="numeric", init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if len(self.edges) < 2:
            raise SchemaError(f"column {self.name!r}: bins need at least two edges")
        if not all(math.isfinite(edge) for edge in self.edges):
            raise SchemaError(f"column {self.name!r}: bin edges must be finite numbers")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise SchemaError(f"column {self.name!r}: bin edges must be strictly increasing")
        if self.decimals is not None:
            if self.integer:
                raise SchemaError(f"column {self.name!r}: declare integer or decimals, not both")
            if (
                isinstance(self.decimals, bool)
                or not isinstance(self.decimals, int)
                or not 0 <= self.decimals <= MAX_DECIMALS
            ):
                raise SchemaError(
                    f"column {self.name!r}: decimals must be an integer from 0 to {MAX_DECIMALS}"
                )
        if self.format is not None:
            places = number_places(self.format) if isinstance(self.format, str) else None
            if places is None or places > MAX_DECIMALS:
                raise SchemaError(
                    f'column {self.name!r}: a number\'s format is "%.Nf" with N from 0 to '
                    f"{MAX_DECIMALS} (the decimal places written)"
                )
            if self.decimals is not None and places < self.decimals:
                raise SchemaError(
                    f"column {self.name!r}: the format writes fewer places than the decimals"
                )
        if self.profile is not None:
            profile = tuple(float(p) for p in self.profile)
            problem = check_profile(profile, self.edges[0], self.edges[-1], "the profile")
            if problem is not None:
                raise SchemaError(f"column {self.name!r}: {problem}")
            object.__setattr__(self, "profile", profile)
        step = self.step
        if step is not None:
            _, count = _grid(np.asarray(self.edges, dtype=np.float64), step)
            empty = np.flatnonzero(count < 1)
            if empty.size:
                what = "integer" if self.integer else f"value with {self.decimals} decimals"
                raise SchemaError(
                    f"column {self.name!r}: {empty.size} bin(s) hold no {what} "
                    f"(first: bin {int(empty[0])}); use wider bins"
                )

    @property
    def step(self) -> float | None:
        """The spacing of output values (None: any real number)."""
        if self.integer:
            return 1.0
        return None if self.decimals is None else 10.0**-self.decimals

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "bins": list(self.edges)}
        if self.integer:
            out["integer"] = True
        if self.decimals is not None:
            out["decimals"] = self.decimals
        if self.format is not None:
            out["format"] = self.format
        if self.clip:
            out["clip"] = True
        if self.nullable:
            out["nullable"] = True
        if self.profile is not None:
            out["profile"] = list(self.profile)
        return out

    def encode(self, values: pd.Series, missing: Sequence[str]) -> np.ndarray:
        numbers = as_float(values)
        edges = np.asarray(self.edges, dtype=np.float64)
        return settle_missing(
            bin_codes(numbers, edges, self.clip), missing_mask(values, missing), self.absent_code
        )

    def bin_levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Per bin, the value distribution's level just below its lower and upper edge
        (engine.columns.profile.bin_levels)."""
        return bin_levels(self.edges, self.profile)

    def decode(
        self, codes: np.ndarray, rng: np.random.Generator, draws: np.ndarray | None = None
    ) -> pd.Series:
        """Values drawn inside each row's bin; ``draws`` (uniforms in [0, 1), one per row, the
        position inside the bin's share of :meth:`bin_levels`) replace the rng's own."""
        col = check_codes(codes, self.size, self.name)
        nulls = null_positions(col, self.null_code)
        bins = np.where(nulls, 0, col)
        edges = np.asarray(self.edges, dtype=np.float64)
        draws = rng.random(col.size) if draws is None else draws
        step = self.step
        profiled = None
        if self.profile is not None:
            profiled = profile_draws(edges, np.asarray(self.profile), bins, draws)
        if step is None:
            low, high = edges[bins], edges[bins + 1]
            values = np.minimum(low + (high - low) * draws, high) if profiled is None else profiled
            return pd.Series(pd.array(np.where(nulls, np.nan, values), dtype="Float64")).where(
                ~nulls, pd.NA
            )
        first, count = _grid(edges, step)
        if profiled is None:
            k = first[bins] + np.minimum(np.floor(draws * count[bins]), count[bins] - 1)
        else:
            # The nearest integer or multiple of the step, kept inside the bin.
            nearest = np.floor(profiled / step + 0.5)
            k = np.clip(nearest, first[bins], first[bins] + count[bins] - 1)
        if self.integer:
            out = pd.Series(pd.array(k.astype(np.int64), dtype="Int64"))
        else:
            out = pd.Series(pd.array(np.round(k * step, self.decimals or 0), dtype="Float64"))
        out[nulls] = pd.NA
        return out

    def arrow_field(self) -> pa.Field:
        kind = pa.int64() if self.integer else pa.float64()
        metadata = {FORMAT_KEY: self.format} if self.format is not None else None
        return pa.field(self.name, kind, nullable=self.nullable, metadata=metadata)

    def problem(self, reason: int, count: int) -> str:
        if reason == MISSING:
            return missing_problem(count)
        if reason == OUTSIDE:
            low, high = format_bound(self.edges[0]), format_bound(self.edges[-1])
            return f"{values_word(count)} outside [{low}, {high}], set clip or widen the bounds"
        return f"unparseable number in {rows(count)}"


def bin_codes(numbers: np.ndarray, edges: np.ndarray, clip: bool) -> np.ndarray:
    """Bin index of each number (last bin closed); OUTSIDE / UNPARSEABLE codes otherwise."""
    if numbers.size and numbers.min() >= edges[0] and numbers.max() <= edges[-1]:
        # Every number is inside the bounds (a NaN fails both comparisons): one search.
        inner = np.searchsorted(edges, numbers, side="right") - 1
        return np.minimum(inner, len(edges) - 2, out=inner).astype(np.int64, copy=False)
    return _general_bin_codes(numbers, edges, clip)


def bin_codes_compact(numbers: np.ndarray, edges: tuple[float, ...], clip: bool) -> np.ndarray:
    """:func:`bin_codes`, in the narrowest unsigned type that holds ``0..len(edges)-1`` when
    every number is inside the bounds (so no code is refused), else int64 with the reasons."""
    inside = bins_inside(numbers, edges, clip=clip)
    if inside is not None:
        return inside
    return _general_bin_codes(numbers, np.asarray(edges, dtype=np.float64), clip)


# Integer edges spanning at most this many integers are binned with a lookup table.
MAX_LOOKUP_SPAN = 1 << 16
_EXACT_INTEGERS = float(2**52)


def bins_inside(
    numbers: np.ndarray, edges: tuple[float, ...], *, clip: bool = False
) -> np.ndarray | None:
    """The bin of each number (last bin closed), in the narrowest unsigned type that holds
    ``0..len(edges)-1``, when every number is inside ``[edges[0], edges[-1]]`` (a NaN is not),
    or with ``clip`` when every number is finite (clamped into the end bins); None otherwise.

    When the edges are integers a short way apart, the bin of ``x`` is the bin of the integer
    ``floor(x)`` (no edge lies strictly between them), read from a table: three passes over
    the numbers instead of a binary search per number.
    """
    if not numbers.size:
        return None
    low, high = numbers.min(), numbers.max()  # NaN if any number is NaN: both tests fail
    clipped = False
    if not (low >= edges[0] and high <= edges[-1]):
        if not (clip and np.isfinite(low) and np.isfinite(high)):
            return None
        numbers = np.clip(numbers, edges[0], edges[-1])  # every number finite: all binned
        clipped = True
    kind = narrowest_unsigned(len(edges))
    table = _integer_table(edges)
    if table is None:
        inner = np.searchsorted(np.asarray(edges, dtype=np.float64), numbers, side="right") - 1
        return np.minimum(inner, len(edges) - 2, out=inner).astype(kind)
    if numbers.dtype.kind == "f":
        # floor is exact, and so is the difference of two integers below 2**53; a number at
        # or above a non-negative lowest edge truncates to its floor. The clipped copy and
        # the positions are this function's own: changed in place.
        if edges[0] < 0:
            whole = np.floor(numbers, out=numbers) if clipped else np.floor(numbers)
        else:
            whole = numbers
        positions: np.ndarray = whole.astype(np.intp)
        if edges[0]:
            positions -= int(edges[0])
    else:
        positions = numbers.astype(np.intp, copy=False)  # may be the caller's: not in place
        if edges[0]:
            positions = positions - int(edges[0])
    return table.take(positions)


@lru_cache(maxsize=512)
def _integer_table(edges: tuple[float, ...]) -> np.ndarray | None:
    """The bin of each integer from ``edges[0]`` to ``edges[-1]``, when every edge is an
    integer (below 2**52 in magnitude) and they span at most :data:`MAX_LOOKUP_SPAN`
    integers; None otherwise."""
    if not all(float(edge).is_integer() and abs(edge) <= _EXACT_INTEGERS for edge in edges):
        return None
    if edges[-1] - edges[0] > MAX_LOOKUP_SPAN:
        return None
    integers = np.arange(int(edges[0]), int(edges[-1]) + 1, dtype=np.float64)
    codes = np.searchsorted(np.asarray(edges, dtype=np.float64), integers, side="right") - 1
    table = np.minimum(codes, len(edges) - 2).astype(narrowest_unsigned(len(edges)))
    table.flags.writeable = False
    return table


def _general_bin_codes(numbers: np.ndarray, edges: np.ndarray, clip: bool) -> np.ndarray:
    from engine.columns.base import UNPARSEABLE

    finite = np.isfinite(numbers)
    if clip:
        numbers = np.clip(numbers, edges[0], edges[-1])
    with np.errstate(invalid="ignore"):
        inside = finite & (numbers >= edges[0]) & (numbers <= edges[-1])
    codes = np.searchsorted(edges, numbers, side="right") - 1
    codes = np.minimum(codes, len(edges) - 2)
    return np.where(inside, codes, np.where(finite, OUTSIDE, UNPARSEABLE)).astype(np.int64)


def _grid(edges: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Per bin: the first multiple of ``step`` inside it (as a multiple) and how many there are.

    Bins are half-open except the last, which includes its upper edge.
    """
    scaled = edges / step
    slack = _GRID_SLACK * np.maximum(1.0, np.abs(scaled))
    first = np.ceil(scaled[:-1] - slack[:-1])
    past = np.ceil(scaled[1:] - slack[1:])  # first multiple at or above the upper edge
    last = past - 1
    last[-1] = np.floor(scaled[-1] + slack[-1])
    return first, last - first + 1
