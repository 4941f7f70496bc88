"""Columns of declared labels: categorical, boolean, and integer codes.

Every label and spelling here was declared by the data owner (public). An ``other`` bucket takes
each undeclared value (a public transformation of the row, so it costs nothing); how many values
fell there is never computed outside the private table.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.columns.base import (
    MISSING,
    OUTSIDE,
    UNDECLARED,
    UNPARSEABLE,
    SchemaError,
    check_codes,
    check_name,
    missing_mask,
    missing_problem,
    null_positions,
    rows,
    settle_missing,
    text_values,
    values_word,
)

DEFAULT_TRUE_VALUES: tuple[str, ...] = ("true", "yes", "1", "y", "t")
DEFAULT_FALSE_VALUES: tuple[str, ...] = ("false", "no", "0", "n", "f")


@dataclass(frozen=True)
class CategoricalColumn:
    """Values are one of the declared categories (compared as text, exactly).

    Codes: the categories in declared order, then the ``other`` bucket if declared, then the
    null code if nullable. ``ordered`` marks the declared order as meaningful (kept on output).
    """

    name: str
    categories: tuple[str, ...]
    nullable: bool = False
    other: str | None = None
    ordered: bool = False
    type: Literal["categorical"] = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.categories and self.other is None:
            # With an "other" bucket no category is needed (a discovery may release none).
            raise SchemaError(f"column {self.name!r}: categories must not be empty")
        if len(set(self.categories)) != len(self.categories):
            raise SchemaError(f"column {self.name!r}: categories must be distinct")
        if self.other is not None and (
            not isinstance(self.other, str) or self.other in self.categories
        ):
            raise SchemaError(
                f"column {self.name!r}: 'other' must be a label distinct from the categories"
            )

    @property
    def labels(self) -> tuple[str, ...]:
        return self.categories + ((self.other,) if self.other is not None else ())

    @property
    def size(self) -> int:
        return len(self.labels) + int(self.nullable)

    @property
    def null_code(self) -> int | None:
        return self.size - 1 if self.nullable else None

    @property
    def absent_code(self) -> int:
        return self.size - 1 if self.nullable else MISSING

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "type": self.type,
            "categories": list(self.categories),
        }
        if self.other is not None:
            out["other"] = self.other
        if self.ordered:
            out["ordered"] = True
        if self.nullable:
            out["nullable"] = True
        return out

    def encode(self, values: pd.Series, missing: Sequence[str]) -> np.ndarray:
        absent = missing_mask(values, missing)
        text = text_values(values)
        # get_indexer: -1 for anything not declared (missing values included), no warnings.
        codes = np.asarray(pd.Index(self.categories).get_indexer(pd.Index(text)), dtype=np.int64)
        # A declared category wins over a missing-value spelling; other refusals are undeclared.
        undeclared = (codes < 0) & ~absent
        codes[undeclared] = len(self.categories) if self.other is not None else UNDECLARED
        return settle_missing(codes, absent, self.absent_code)

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> pd.Categorical:
        col = check_codes(codes, self.size, self.name)
        col = np.where(null_positions(col, self.null_code), -1, col)
        return pd.Categorical.from_codes(
            col, categories=pd.Index(self.labels, dtype=object), ordered=self.ordered
        )

    def arrow_field(self) -> pa.Field:
        kind = pa.dictionary(pa.int32(), pa.string(), ordered=self.ordered)
        return pa.field(self.name, kind, nullable=self.nullable)

    def problem(self, reason: int, count: int) -> str:
        if reason == MISSING:
            return missing_problem(count)
        return (
            f'{values_word(count)} not among the declared categories, declare them or set "other"'
        )


@dataclass(frozen=True)
class BooleanColumn:
    """True or false, from the declared spellings (compared case-insensitively, stripped).

    Codes: 0 false, 1 true, 2 null (when nullable). On output, the first declared spelling of
    each value is used in CSV when spellings were declared; otherwise ``true``/``false``.
    """

    name: str
    true_values: tuple[str, ...] = DEFAULT_TRUE_VALUES
    false_values: tuple[str, ...] = DEFAULT_FALSE_VALUES
    nullable: bool = False
    type: Literal["boolean"] = field(default="boolean", init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.true_values or not self.false_values:
            raise SchemaError(
                f"column {self.name!r}: true_values and false_values must not be empty"
            )
        trues = {v.strip().lower() for v in self.true_values}
        falses = {v.strip().lower() for v in self.false_values}
        if trues & falses:
            raise SchemaError(f"column {self.name!r}: a spelling is both true and false")

    @property
    def size(self) -> int:
        return 2 + int(self.nullable)

    @property
    def null_code(self) -> int | None:
        return 2 if self.nullable else None

    @property
    def absent_code(self) -> int:
        return 2 if self.nullable else MISSING

    @property
    def declared_spellings(self) -> bool:
        return (self.true_values, self.false_values) != (DEFAULT_TRUE_VALUES, DEFAULT_FALSE_VALUES)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type}
        if self.declared_spellings:
            out["true_values"] = list(self.true_values)
            out["false_values"] = list(self.false_values)
        if self.nullable:
            out["nullable"] = True
        return out

    def encode(self, values: pd.Series, missing: Sequence[str]) -> np.ndarray:
        absent = missing_mask(values, missing)
        if pd.api.types.is_bool_dtype(values.dtype):
            flags = values.astype(object).to_numpy()
            codes = np.array([MISSING if v is None or v is pd.NA else int(v) for v in flags])
        else:
            text = text_values(values).map(lambda v: v.strip().lower() if isinstance(v, str) else v)
            trues = np.asarray(text.isin([v.strip().lower() for v in self.true_values]))
            falses = np.asarray(text.isin([v.strip().lower() for v in self.false_values]))
            codes = np.where(trues, 1, np.where(falses, 0, UNPARSEABLE)).astype(np.int64)
        return settle_missing(codes, absent, self.absent_code)

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> pd.Series:
        col = check_codes(codes, self.size, self.name)
        out = pd.Series(col == 1, dtype="boolean")
        out[null_positions(col, self.null_code)] = pd.NA
        return out

    def arrow_field(self) -> pa.Field:
        metadata = (
            {"rhosynth.true": self.true_values[0], "rhosynth.false": self.false_values[0]}
            if self.declared_spellings
            else None
        )
        return pa.field(self.name, pa.bool_(), nullable=self.nullable, metadata=metadata)

    def problem(self, reason: int, count: int) -> str:
        if reason == MISSING:
            return missing_problem(count)
        return f"unrecognised boolean in {rows(count)}, expected one of the declared spellings"


@dataclass(frozen=True)
class CodesColumn:
    """A column that already holds integer codes ``0..size-1``."""

    name: str
    size: int
    type: Literal["codes"] = field(default="codes", init=False)

    def __post_init__(self) -> None:
        check_name(self.name)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise SchemaError(f"column {self.name!r}: size must be a positive integer")

    @property
    def null_code(self) -> int | None:
        return None

    @property
    def absent_code(self) -> int:
        return MISSING

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "size": self.size}

    def encode(self, values: pd.Series, missing: Sequence[str]) -> np.ndarray:
        return settle_missing(
            self.codes_of(as_float(values)), missing_mask(values, missing), MISSING
        )

    def codes_of(self, numbers: np.ndarray) -> np.ndarray:
        """The code of each number (NaN for text that is not one); negative reasons otherwise."""
        with np.errstate(invalid="ignore"):
            whole = numbers.astype(np.int64)
            if bool(((whole == numbers) & (whole >= 0) & (whole < self.size)).all()):
                return whole  # every number is a code (the common case, one pass)
            integral = np.isfinite(numbers) & (numbers == np.floor(numbers))
            inside = integral & (numbers >= 0) & (numbers < self.size)
            codes = np.where(
                inside, np.nan_to_num(numbers, nan=-1.0), np.where(integral, OUTSIDE, UNPARSEABLE)
            ).astype(np.int64)
        return codes

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return check_codes(codes, self.size, self.name)

    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, pa.int64(), nullable=False)

    def problem(self, reason: int, count: int) -> str:
        if reason == MISSING:
            return missing_problem(count)
        if reason == OUTSIDE:
            return f"{values_word(count)} outside the codes 0..{self.size - 1}"
        return f"not an integer code in {rows(count)}"


def as_float(values: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.full(len(values), np.nan)
    if pd.api.types.is_string_dtype(values.dtype) or values.dtype == object:
        values = values.map(lambda v: v.strip() if isinstance(v, str) else v)
    numbers = pd.to_numeric(values, errors="coerce")
    return np.array(numbers, dtype=np.float64)
