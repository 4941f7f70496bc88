"""Declared table schemas and the mapping between raw values and integer codes.

Everything here is public knowledge by construction: category lists, bin edges and code ranges
come from the schema the data owner declared, never from the data (privacy rule 5). Encoding a
value that is not in the declared domain is an error counted per column; it never widens the
domain. Decoding is post-processing of a synthetic table and uses an explicit ``rng`` for the
only random step (a value drawn uniformly inside its numeric bin).

Two schema forms are accepted (the same as the service):

* a domain map ``{"col": size, ...}``: every column holds integer codes ``0..size-1`` (the format
  of the ``<name>-domain.json`` files of the benchmark datasets);
* ``{"columns": [...]}`` with entries ``{"name", "type": "categorical", "categories": [...]}``,
  ``{"name", "type": "numeric", "bins": [edge, ...]}`` or ``{"name", "type": "numeric", "min",
  "max", "bins": k}`` (equal width), and ``{"name", "type": "codes", "size": k}``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from engine.domain import Domain

MAX_COLUMN_NAME_LENGTH = 200


class SchemaError(ValueError):
    """The declared schema is malformed. The message names the column, never data values."""


@dataclass(frozen=True)
class SchemaLimits:
    """Size limits checked on the raw JSON of a schema *before* anything is built from it.

    ``max_columns`` bounds the number of columns, ``max_domain_size`` the codes of one column
    (categories, bins or size) and ``max_total_domain_size`` the codes of all columns together
    (every numeric bin becomes a stored edge, so this bounds the parsed schema's memory). Each
    check compares a length or a number taken from the JSON with its limit, so a schema that
    declares ``"bins": 30000000`` is refused without allocating 30 million edges.
    """

    max_columns: int
    max_domain_size: int
    max_total_domain_size: int

    def __post_init__(self) -> None:
        if min(self.max_columns, self.max_domain_size, self.max_total_domain_size) < 1:
            raise ValueError("schema limits must be positive")


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose values are one of the declared categories (compared as text)."""

    name: str
    categories: tuple[str, ...]
    type: Literal["categorical"] = field(default="categorical", init=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if not self.categories:
            raise SchemaError(f"column {self.name!r}: categories must not be empty")
        if len(set(self.categories)) != len(self.categories):
            raise SchemaError(f"column {self.name!r}: categories must be distinct")

    @property
    def size(self) -> int:
        return len(self.categories)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "categories": list(self.categories)}


@dataclass(frozen=True)
class NumericColumn:
    """A numeric column cut into bins ``[e0, e1), [e1, e2), ..., [e_{k-1}, e_k]`` (last closed)."""

    name: str
    edges: tuple[float, ...]
    type: Literal["numeric"] = field(default="numeric", init=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if len(self.edges) < 2:
            raise SchemaError(f"column {self.name!r}: bins need at least two edges")
        if not all(math.isfinite(edge) for edge in self.edges):
            raise SchemaError(f"column {self.name!r}: bin edges must be finite numbers")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise SchemaError(f"column {self.name!r}: bin edges must be strictly increasing")

    @property
    def size(self) -> int:
        return len(self.edges) - 1

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "bins": list(self.edges)}


@dataclass(frozen=True)
class CodesColumn:
    """A column that already holds integer codes ``0..size-1``."""

    name: str
    size: int
    type: Literal["codes"] = field(default="codes", init=False)

    def __post_init__(self) -> None:
        _check_name(self.name)
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise SchemaError(f"column {self.name!r}: size must be a positive integer")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "size": self.size}


Column = CategoricalColumn | NumericColumn | CodesColumn


@dataclass(frozen=True)
class EncodedChunk:
    """Codes for a chunk of rows, and per column the number of rows outside the domain."""

    codes: np.ndarray
    invalid_rows: Mapping[str, int]


@dataclass(frozen=True)
class TableSchema:
    """The declared schema of a table: an ordered tuple of columns with distinct names."""

    columns: tuple[Column, ...]

    def __post_init__(self) -> None:
        if not self.columns:
            raise SchemaError("the schema declares no columns")
        seen: set[str] = set()
        duplicates: set[str] = set()
        for column in self.columns:
            (duplicates if column.name in seen else seen).add(column.name)
        if duplicates:
            shown = ", ".join(map(repr, sorted(duplicates)[:20]))
            raise SchemaError(f"duplicate column names: {shown}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def domain(self) -> Domain:
        """The engine's view: column names and sizes, nothing else."""
        return Domain(self.names, tuple(column.size for column in self.columns))

    def to_json(self) -> dict[str, Any]:
        """The normalised ``{"columns": [...]}`` form (numeric bins as explicit edges)."""
        return {"columns": [column.to_json() for column in self.columns]}

    @classmethod
    def from_json(cls, raw: Any, limits: SchemaLimits | None = None) -> TableSchema:
        """Parse either schema form; raise :class:`SchemaError` with a precise message.

        With ``limits``, every size is checked against them on the raw JSON first, in one linear
        pass that allocates nothing in proportion to a declared size.
        """
        if not isinstance(raw, Mapping):
            raise SchemaError("the schema must be a JSON object")
        if limits is not None:
            check_schema_sizes(raw, limits)
        if "columns" in raw and isinstance(raw["columns"], list):
            if set(raw) != {"columns"}:
                raise SchemaError('a {"columns": [...]} schema must have no other keys')
            return cls(tuple(_parse_column(entry, i) for i, entry in enumerate(raw["columns"])))
        columns: list[Column] = []
        for name, size in raw.items():
            if isinstance(size, bool) or not isinstance(size, int):
                raise SchemaError(
                    f"column {name!r}: a domain map gives each column an integer size "
                    '(or use the {"columns": [...]} form)'
                )
            columns.append(CodesColumn(str(name), size))
        return cls(tuple(columns))

    @classmethod
    def from_domain(cls, domain: Domain) -> TableSchema:
        return cls(
            tuple(CodesColumn(a, s) for a, s in zip(domain.attributes, domain.sizes, strict=True))
        )

    def encode(self, frame: pd.DataFrame) -> EncodedChunk:
        """Encode a chunk whose columns are exactly this schema's (any order).

        Values may be text (CSV) or typed (Parquet). Rows outside the declared domain get code
        ``-1`` and are counted per column in ``invalid_rows``.
        """
        codes = np.empty((len(frame), len(self.columns)), dtype=np.int64)
        invalid: dict[str, int] = {}
        for j, column in enumerate(self.columns):
            col_codes = encode_values(column, frame[column.name])
            bad = int(np.count_nonzero(col_codes < 0))
            if bad:
                invalid[column.name] = bad
            codes[:, j] = col_codes
        return EncodedChunk(codes, invalid)

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
        """Turn a synthetic table of codes back into the original value space.

        Categories are decoded to their declared text, codes stay codes, and a numeric bin
        becomes a value drawn uniformly inside it (post-processing; ``rng`` is the job's seed).
        """
        if codes.ndim != 2 or codes.shape[1] != len(self.columns):
            raise ValueError("codes must be a 2-D array with one column per schema column")
        data: dict[str, Any] = {}
        for j, column in enumerate(self.columns):
            col = np.asarray(codes[:, j], dtype=np.int64)
            if col.size and (col.min() < 0 or col.max() >= column.size):
                raise ValueError(f"column {column.name!r}: codes outside 0..{column.size - 1}")
            if isinstance(column, CategoricalColumn):
                data[column.name] = pd.Categorical.from_codes(
                    col, categories=pd.Index(column.categories)
                )
            elif isinstance(column, NumericColumn):
                edges = np.asarray(column.edges, dtype=np.float64)
                low, high = edges[col], edges[col + 1]
                values = low + (high - low) * rng.random(col.size)
                data[column.name] = np.minimum(values, high)
            else:
                data[column.name] = col
        return pd.DataFrame(data, columns=list(self.names))


def check_schema_sizes(raw: Mapping[str, Any], limits: SchemaLimits) -> None:
    """Refuse a raw schema whose declared sizes exceed ``limits``, before it is parsed.

    Only lengths of JSON lists and integers are compared; malformed entries are left to the
    parser, which gives the precise message.
    """
    entries = raw.get("columns") if "columns" in raw else None
    if isinstance(entries, list):
        count = len(entries)
        sized = [(_entry_name(entry, i), _declared_size(entry)) for i, entry in enumerate(entries)]
    else:
        count = len(raw)
        sized = [(str(name), size) for name, size in raw.items()]
    if count > limits.max_columns:
        raise SchemaError(f"the schema declares more than {limits.max_columns} columns")
    total = 0
    for name, size in sized:
        if isinstance(size, bool) or not isinstance(size, int):
            continue  # not a size: the parser explains what is wrong with it
        if size > limits.max_domain_size:
            raise SchemaError(
                f"column {name!r} has {size} values; the limit is {limits.max_domain_size}"
            )
        total += max(size, 0)
    if total > limits.max_total_domain_size:
        raise SchemaError(
            f"the columns declare {total} values in total; the limit is "
            f"{limits.max_total_domain_size}"
        )


def _entry_name(entry: Any, position: int) -> str:
    name = entry.get("name") if isinstance(entry, Mapping) else None
    return name[:MAX_COLUMN_NAME_LENGTH] if isinstance(name, str) else f"columns[{position}]"


def _declared_size(entry: Any) -> Any:
    """The number of codes a raw column entry declares (None when it declares none)."""
    if not isinstance(entry, Mapping):
        return None
    kind = entry.get("type")
    if kind == "categorical":
        categories = entry.get("categories")
        return len(categories) if isinstance(categories, list) else None
    if kind == "numeric":
        bins = entry.get("bins")
        return len(bins) - 1 if isinstance(bins, list) else bins
    if kind == "codes":
        return entry.get("size")
    return None


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise SchemaError("every column needs a non-empty name")
    if len(name) > MAX_COLUMN_NAME_LENGTH:
        raise SchemaError(f"column names are limited to {MAX_COLUMN_NAME_LENGTH} characters")
    if "\x00" in name:
        raise SchemaError("column names must not contain NUL characters")


def _category_text(value: Any, column: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    raise SchemaError(f"column {column!r}: categories must be strings or numbers")


def _number(value: Any, what: str, column: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaError(f"column {column!r}: {what} must be a number")
    return float(value)


def _parse_column(entry: Any, position: int) -> Column:
    if not isinstance(entry, Mapping):
        raise SchemaError(f"columns[{position}] must be an object")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"columns[{position}] needs a non-empty string 'name'")
    kind = entry.get("type")
    keys = set(entry)
    if kind == "categorical":
        _require_keys(keys, {"name", "type", "categories"}, set(), name)
        categories = entry["categories"]
        if not isinstance(categories, list):
            raise SchemaError(f"column {name!r}: categories must be a list")
        return CategoricalColumn(name, tuple(_category_text(c, name) for c in categories))
    if kind == "numeric":
        bins = entry.get("bins")
        if isinstance(bins, list):
            _require_keys(keys, {"name", "type", "bins"}, set(), name)
            return NumericColumn(name, tuple(_number(edge, "bin edges", name) for edge in bins))
        _require_keys(keys, {"name", "type", "bins", "min", "max"}, set(), name)
        if isinstance(bins, bool) or not isinstance(bins, int) or bins < 1:
            raise SchemaError(f"column {name!r}: 'bins' must be a list of edges or a count ≥ 1")
        low = _number(entry["min"], "min", name)
        high = _number(entry["max"], "max", name)
        if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
            raise SchemaError(f"column {name!r}: max must be greater than min")
        edges = np.linspace(low, high, bins + 1)
        return NumericColumn(name, tuple(float(edge) for edge in edges))
    if kind == "codes":
        _require_keys(keys, {"name", "type", "size"}, set(), name)
        size = entry["size"]
        if isinstance(size, bool) or not isinstance(size, int):
            raise SchemaError(f"column {name!r}: size must be a positive integer")
        return CodesColumn(name, size)
    raise SchemaError(f"column {name!r}: type must be one of 'categorical', 'numeric', 'codes'")


def _require_keys(keys: set[str], required: set[str], optional: set[str], name: str) -> None:
    missing = sorted(required - keys)
    if missing:
        raise SchemaError(f"column {name!r}: missing {', '.join(missing)}")
    extra = sorted(keys - required - optional)
    if extra:
        raise SchemaError(f"column {name!r}: unknown keys {', '.join(extra)}")


def _as_text(values: pd.Series) -> np.ndarray:
    """Values as Python strings (missing values become None), for category matching."""
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.array(["true" if v else "false" for v in values], dtype=object)
    if pd.api.types.is_float_dtype(values.dtype):
        floats = values.to_numpy(dtype=np.float64, na_value=np.nan)
        return np.array([None if math.isnan(v) else repr(float(v)) for v in floats], dtype=object)
    if pd.api.types.is_integer_dtype(values.dtype) and not values.hasnans:
        return values.astype("int64").astype(str).to_numpy(dtype=object)
    out = values.astype(object).to_numpy()
    return np.array(
        [v if isinstance(v, str) else None if _is_missing(v) else str(v) for v in out], dtype=object
    )


def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA


def _as_float(values: pd.Series) -> np.ndarray:
    if pd.api.types.is_bool_dtype(values.dtype):
        return np.full(len(values), np.nan)
    numbers = pd.to_numeric(values, errors="coerce")
    return np.asarray(numbers, dtype=np.float64)


def encode_values(column: Column, values: pd.Series) -> np.ndarray:
    """The codes of one column's values (``-1`` for a value outside the declared domain)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        # A dictionary-encoded input (Parquet): encode each distinct value once, then gather.
        distinct = encode_values(column, pd.Series(values.cat.categories))
        positions = values.cat.codes.to_numpy(dtype=np.int64)
        gathered = distinct[np.maximum(positions, 0)] if len(distinct) else positions
        return np.where(positions >= 0, gathered, -1).astype(np.int64)
    if isinstance(column, CategoricalColumn):
        text = values if pd.api.types.is_string_dtype(values.dtype) else pd.Series(_as_text(values))
        # get_indexer: -1 for anything not declared (missing values included), no warnings.
        return np.asarray(pd.Index(column.categories).get_indexer(pd.Index(text)), dtype=np.int64)
    numbers = _as_float(values)
    with np.errstate(invalid="ignore"):
        if isinstance(column, NumericColumn):
            edges = np.asarray(column.edges, dtype=np.float64)
            inside = (numbers >= edges[0]) & (numbers <= edges[-1])
            codes = np.searchsorted(edges, numbers, side="right") - 1
            codes = np.minimum(codes, column.size - 1)
            return np.where(inside, codes, -1).astype(np.int64)
        valid = (numbers == np.floor(numbers)) & (numbers >= 0) & (numbers < column.size)
        return np.where(valid, np.nan_to_num(numbers, nan=-1.0), -1).astype(np.int64)


def schema_summary(columns: Sequence[Column]) -> list[dict[str, Any]]:
    """The public description of each column (everything in it was declared by the owner)."""
    summary: list[dict[str, Any]] = []
    for column in columns:
        entry = column.to_json()
        entry["size"] = column.size
        summary.append(entry)
    return summary
