"""Keep at most k rows per privacy unit, chosen by a keyed hash of each row's content.

Privacy claim. Let T keep, for every unit u, the k rows of u whose keyed hash of (u, the row's
values) is smallest (ties, which only identical rows of one unit or a 64-bit collision can make,
broken by the rows' order among u's own rows); rows with a missing unit are dropped. Which rows
of u are kept is a function of u's rows alone, so for tables D and D' that differ by all the rows
of one unit, T(D) and T(D') differ by at most k rows, all of that unit. A mechanism that is
ρ-zCDP for every pair of tables differing by at most k rows (the group of one unit) is therefore
ρ-zCDP for D, D' differing by one unit: "per person, at most k rows". The hash key is a fresh
secret per upload, so which rows survive cannot be steered by ordering the file (the point of
not keeping "the first k"); the key is not needed for privacy and is not stored.

The method is the contribution bounding of Wilson, Zhang, Lam, Desfontaines, Simmons-Marengo,
Gipson, "Differentially Private SQL with Bounded User Contribution" (PoPETs 2020), §3, with a
keyed hash in place of reservoir sampling so that the choice is reproducible within an upload.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pandas as pd

DEFAULT_MAX_ROWS = 1
"""k when the schema names a unit without a bound: one row per unit keeps the row-level noise
scale; the truncation report says how many rows this removed, so an owner can raise it."""

MAX_MAX_ROWS = 1000
"""The largest k a schema may declare: noise grows linearly with k (σ ∝ k at a fixed ρ)."""

BoolArray = npt.NDArray[np.bool_]
HashArray = npt.NDArray[np.uint64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PrivacyUnit:
    """The column that identifies a unit (a person, an account) and the bound k on its rows."""

    column: str
    max_rows: int = DEFAULT_MAX_ROWS

    def __post_init__(self) -> None:
        if not isinstance(self.column, str) or not self.column:
            raise ValueError("the privacy unit's column must be a non-empty column name")
        k = self.max_rows
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_MAX_ROWS:
            raise ValueError(f"max_rows must be an integer from 1 to {MAX_MAX_ROWS}")

    def to_json(self) -> dict[str, object]:
        return {"column": self.column, "max_rows": self.max_rows}


@dataclass(frozen=True, eq=False)
class Truncation:
    """Which rows survive (``keep``), and the exact figures of what was removed (owner-only:
    they are not DP; the release publishes only their noisy versions)."""

    keep: BoolArray
    rows_in: int
    rows_kept: int
    units: int
    units_truncated: int
    rows_without_unit: int
    excess: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Rows removed from each truncated unit (one entry per unit that lost rows, each ≥ 1, in
    no meaningful order): what :func:`engine.privacy_unit.noisy_truncation` releases capped."""

    def __post_init__(self) -> None:
        """The figures must describe one truncation: ``keep`` has ``rows_in`` entries of which
        ``rows_kept`` are set, and ``excess`` has one entry ≥ 1 per truncated unit adding up to
        the rows removed from units (``rows_in − rows_kept − rows_without_unit``). Otherwise the
        DP report would release a wrong statistic (e.g. R_C = 0 from the default ``excess``)."""
        keep = np.asarray(self.keep)
        for name in ("rows_in", "rows_kept", "units", "units_truncated", "rows_without_unit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise ValueError(f"{name} must be a non-negative int")
        if keep.dtype != np.bool_ or keep.shape != (self.rows_in,):
            raise ValueError("keep must be one bool per row in")
        if int(np.count_nonzero(keep)) != self.rows_kept:
            raise ValueError("rows_kept must be the number of rows keep retains")
        excess = np.asarray(self.excess)
        if not np.issubdtype(excess.dtype, np.integer) or excess.ndim != 1:
            raise ValueError("excess must be a 1-d integer array")
        if excess.size != self.units_truncated or (excess.size and int(excess.min()) < 1):
            raise ValueError("excess must hold one count ≥ 1 per truncated unit")
        if int(excess.sum()) != self.rows_in - self.rows_kept - self.rows_without_unit:
            raise ValueError("excess must add up to the rows removed from units")
        if self.units_truncated > self.units:
            raise ValueError("units_truncated cannot exceed units")
        object.__setattr__(self, "excess", excess.astype(np.int64))

    @property
    def rows_removed(self) -> int:
        return self.rows_in - self.rows_kept


def new_hash_key() -> str:
    """A fresh 16-character key for :func:`row_hashes` (pandas' SipHash key), from the OS CSPRNG."""
    return secrets.token_hex(8)


def row_hashes(frame: pd.DataFrame, key: str) -> HashArray:
    """A keyed 64-bit hash (SipHash-2-4 through pandas) of every row's values, columns in order.

    ``key`` must be 16 characters (:func:`new_hash_key`). Two rows with the same values in the
    same columns hash alike wherever they sit in the table.
    """
    if len(key.encode()) != 16:
        raise ValueError("the hash key must be 16 bytes")
    hashed = pd.util.hash_pandas_object(frame, index=False, hash_key=key, categorize=True)
    return np.asarray(hashed, dtype=np.uint64)


def truncate(units: pd.Series, hashes: HashArray, max_rows: int) -> Truncation:
    """Keep at most ``max_rows`` rows of each unit: those with the smallest ``hashes``.

    ``units`` holds each row's unit (missing: the row is dropped); ``hashes`` each row's keyed
    hash (:func:`row_hashes`, which should cover the unit column too).
    """
    PrivacyUnit("unit", max_rows)  # validates the bound
    rows = len(units)
    if hashes.shape != (rows,):
        raise ValueError("one hash per row is needed")
    codes, uniques = pd.factorize(units, use_na_sentinel=True)
    codes = np.asarray(codes, dtype=np.int64)
    present = codes >= 0
    keep = np.zeros(rows, dtype=bool)
    if rows and present.any():
        positions = np.flatnonzero(present)
        # Stable: equal (unit, hash) pairs keep their order among that unit's own rows.
        order = positions[np.lexsort((hashes[positions], codes[positions]))]
        grouped = codes[order]
        starts = np.r_[0, np.flatnonzero(np.diff(grouped)) + 1]
        sizes = np.diff(np.r_[starts, len(order)])
        rank = np.arange(len(order)) - np.repeat(starts, sizes)
        keep[order[rank < max_rows]] = True
        units_truncated = int(np.count_nonzero(sizes > max_rows))
        excess = (sizes[sizes > max_rows] - max_rows).astype(np.int64)
    else:
        units_truncated = 0
        excess = np.zeros(0, dtype=np.int64)
    return Truncation(
        keep=keep,
        rows_in=rows,
        rows_kept=int(np.count_nonzero(keep)),
        units=len(uniques),
        units_truncated=units_truncated,
        rows_without_unit=int(np.count_nonzero(~present)),
        excess=excess,
    )
