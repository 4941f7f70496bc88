"""What every column type shares: names, missing values, reasons a value is refused.

A column's codes are ``0..size-1``. A nullable column's last code is its null code: missing
values are one more value of the domain, modelled like any other by the mechanisms and decoded
back to a missing cell. Encoding never widens a domain: a value the schema does not admit gets a
*negative* code naming the reason (:data:`MISSING`, :data:`OUTSIDE`, :data:`UNPARSEABLE`,
:data:`UNDECLARED`), so callers can count refusals per reason without ever keeping the value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

MAX_COLUMN_NAME_LENGTH = 200
# Spellings lists (missing values, boolean spellings) are short by nature; longer ones are
# refused on the raw JSON before anything is built from them.
MAX_SPELLINGS = 100
MAX_SPELLING_LENGTH = 100

# Reasons a value is refused, as negative codes (every valid code is >= 0).
MISSING = -1  # a missing value in a column that is not nullable
OUTSIDE = -2  # a number or date outside the declared bounds (and clip is off)
UNPARSEABLE = -3  # not a number / date / boolean / integer code
UNDECLARED = -4  # a category that was not declared (and there is no "other" bucket)
REASONS = (MISSING, OUTSIDE, UNPARSEABLE, UNDECLARED)

# Cells read as missing when the schema does not say otherwise (compared after stripping
# surrounding whitespace, case-sensitively). Parquet nulls and NaN floats are always missing.
DEFAULT_MISSING_VALUES: tuple[str, ...] = (
    "",
    "NA",
    "N/A",
    "n/a",
    "NaN",
    "nan",
    "null",
    "NULL",
    "None",
    "-",
)


class SchemaError(ValueError):
    """The declared schema is malformed. The message names the column, never data values."""


def check_name(name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise SchemaError("every column needs a non-empty name")
    if len(name) > MAX_COLUMN_NAME_LENGTH:
        raise SchemaError(f"column names are limited to {MAX_COLUMN_NAME_LENGTH} characters")
    if "\x00" in name:
        raise SchemaError("column names must not contain NUL characters")


def check_flag(value: Any, what: str, column: str) -> None:
    if not isinstance(value, bool):
        raise SchemaError(f"column {column!r}: {what} must be true or false")


def check_spellings(values: Any, what: str, column: str | None) -> tuple[str, ...]:
    """A declared list of spellings (missing values, boolean words) as a tuple of strings."""
    where = f"column {column!r}: " if column is not None else ""
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise SchemaError(f"{where}{what} must be a list of strings")
    if len(values) > MAX_SPELLINGS:
        raise SchemaError(f"{where}{what} are limited to {MAX_SPELLINGS} entries")
    if any(len(v) > MAX_SPELLING_LENGTH or "\x00" in v for v in values):
        raise SchemaError(f"{where}{what}: each is limited to {MAX_SPELLING_LENGTH} characters")
    return tuple(values)


class BinnedCodes:
    """Codes of a binned column: one per bin of ``edges``, then the null code if nullable."""

    edges: tuple[Any, ...]
    nullable: bool

    @property
    def bins(self) -> int:
        return len(self.edges) - 1

    @property
    def size(self) -> int:
        return self.bins + int(self.nullable)

    @property
    def null_code(self) -> int | None:
        return self.bins if self.nullable else None

    @property
    def absent_code(self) -> int:
        return self.bins if self.nullable else MISSING


def rows(count: int) -> str:
    return f"{count} row{'s' if count != 1 else ''}"


def values_word(count: int) -> str:
    return f"{count} value{'s' if count != 1 else ''}"


def missing_problem(count: int) -> str:
    return f"{count} missing value{'s' if count != 1 else ''} but the column is not nullable"


def is_missing(value: Any) -> bool:
    return (
        value is None
        or value is pd.NA
        or value is pd.NaT
        or (isinstance(value, float) and math.isnan(value))
    )


def missing_mask(values: pd.Series, missing: Iterable[str]) -> np.ndarray:
    """Which values are missing: nulls, NaN, or text equal (after stripping) to a spelling."""
    absent = np.array(values.isna(), dtype=bool)
    if is_text(values) or values.dtype == object:
        spellings = list(missing)
        if spellings:
            text = values.map(lambda v: v.strip() if isinstance(v, str) else v)
            absent |= np.asarray(text.isin(spellings), dtype=bool)
    return absent


def is_text(values: pd.Series) -> bool:
    """Whether every present value is a string (a string dtype, or objects that are all str)."""
    if isinstance(values.dtype, pd.StringDtype):
        return True
    return values.dtype == object and pd.api.types.infer_dtype(values, skipna=True) in (
        "string",
        "empty",
    )


def text_values(values: pd.Series) -> pd.Series:
    """Values as Python strings (missing values become None), for matching declared text."""
    if is_text(values):
        return values
    if pd.api.types.is_bool_dtype(values.dtype):
        out = [None if is_missing(v) else ("true" if v else "false") for v in values]
        return pd.Series(np.array(out, dtype=object), index=values.index)
    if pd.api.types.is_float_dtype(values.dtype):
        floats = values.to_numpy(dtype=np.float64, na_value=np.nan)
        text = [None if math.isnan(v) else repr(float(v)) for v in floats]
        return pd.Series(np.array(text, dtype=object), index=values.index)
    if pd.api.types.is_integer_dtype(values.dtype) and not values.hasnans:
        return values.astype("int64").astype(str)
    objects = values.astype(object).to_numpy()
    return pd.Series(
        np.array(
            [v if isinstance(v, str) else None if is_missing(v) else str(v) for v in objects],
            dtype=object,
        ),
        index=values.index,
    )


def settle_missing(codes: np.ndarray, absent: np.ndarray, absent_code: int) -> np.ndarray:
    """Give refused missing values the column's code for a missing value (null or MISSING)."""
    codes[absent & (codes < 0)] = absent_code
    return codes


def null_positions(codes: np.ndarray, null_code: int | None) -> np.ndarray:
    if null_code is None:
        return np.zeros(codes.shape, dtype=bool)
    return np.asarray(codes == null_code, dtype=bool)


def check_codes(codes: np.ndarray, size: int, name: str) -> np.ndarray:
    col = np.asarray(codes, dtype=np.int64)
    if col.size and (col.min() < 0 or col.max() >= size):
        raise ValueError(f"column {name!r}: codes outside 0..{size - 1}")
    return col


def format_bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def unknown_keys(keys: Iterable[str], allowed: Sequence[str], name: str) -> None:
    extra = sorted(set(keys) - set(allowed))
    if extra:
        raise SchemaError(f"column {name!r}: unknown keys {', '.join(extra)}")
