"""Infer a draft schema from a raw CSV or Parquet table, in one bounded-memory pass.

Every column is read as it would be uploaded (CSV: all text; Parquet: its own types) and
narrowed to the first kind every non-missing value fits: boolean words, numbers (integral or
not), dates or timestamps in one of :data:`DATE_FORMATS`, else text. Text with few distinct
values becomes a categorical column, other text (identifiers, free text) ``ignore``.

What a draft accepted as is makes public (docs/api.md, "Schema drafts"): the column names, each
column's kind and whether missing values were seen in it, the number of decimals of numbers, the
date format; nothing else. Bounds are fixed public windows (±10^15; 1900 … 2099) inside which the
range and bins are learned with DP (``{"quantiles": k, "range": true}``), and category lists are
discovered (``{"discover": true, ...}``); the service charges both at upload. With
``show_values`` the data's own categories and exact bounds are proposed instead, for the owner to
edit, and the draft says that they would be visible to every analyst.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from engine.columns.arrow_text import lower, strip
from engine.columns.base import DEFAULT_MISSING_VALUES

TRUE_WORDS = ("true", "yes", "y", "t")
FALSE_WORDS = ("false", "no", "n", "f")
_BOOLEAN_WORDS = pa.array(TRUE_WORDS + FALSE_WORDS, type=pa.string())
# Tried in this order; the first that parses every non-missing value of a column wins.
DATE_FORMATS = (
    "%Y-%m-%d",
    "%Y/%m/%d",
    "%m/%d/%Y",
    "%d.%m.%Y",
    "%b-%Y",
    "%b %Y",
    "%B %Y",
    "%Y-%m",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
)
# Calendar units from fine to coarse; a date column gets the finest that its format resolves
# and that gives at most MAX_DATE_BINS bins between its bounds.
UNITS = ("hour", "day", "week", "month", "year")
UNIT_DAYS = {"hour": 1 / 24, "day": 1, "week": 7, "month": 31, "year": 366}
MAX_DATE_BINS = 64
MAX_CATEGORIES = 200  # text with more distinct values than this is proposed as ignore
DISTINCT_CAP = 1_000  # distinct values tracked per column (memory bound)
MAX_CATEGORY_CHARS = 200  # text longer than this is never a category (and is not kept)
QUANTILE_BINS = 16
# Public search windows for DP ranges: a default draft declares no bound taken from the data.
NUMERIC_WINDOW = 10**15
DATE_WINDOW = ("1900-01-01", "2099-12-31")
SMALL_INTEGER_RANGE = 100  # integral columns whose rounded range is this narrow: one bin per value
MAX_DECIMALS = 6
CSV_BLOCK_BYTES = 4 * 1024 * 1024
PARQUET_BATCH_ROWS = 65_536


class DraftError(ValueError):
    """The file cannot be drafted; the message never contains a value from the file."""


@dataclass(frozen=True)
class ColumnDraft:
    """One column's proposal and the reason for it (the reason names no value from the data)."""

    entry: dict[str, Any]
    reason: str


@dataclass(frozen=True)
class SchemaDraft:
    """A proposed schema in the ``{"columns": [...]}`` form, with one reason per column."""

    columns: tuple[ColumnDraft, ...]
    missing_values: tuple[str, ...]
    rows: int
    show_values: bool

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("a draft has at least one column")

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": [column.entry for column in self.columns],
            "missing_values": list(self.missing_values),
        }

    @property
    def discovers(self) -> bool:
        """Whether the schema asks the service to learn part of the domain with DP."""
        return any(_has_discovery(column.entry) for column in self.columns)


def _has_discovery(entry: dict[str, Any]) -> bool:
    return isinstance(entry.get("bins"), dict) or isinstance(entry.get("categories"), dict)


@dataclass
class _Stats:
    """What one pass keeps about a column: counts, which kinds still fit, ranges, distincts."""

    name: str
    arrow_type: pa.DataType | None = None
    values: int = 0
    missing: int = 0
    boolean: bool = True
    numeric: bool = True
    integral: bool = True
    decimals: int | None = 0
    low: float = math.inf
    high: float = -math.inf
    formats: list[str] = field(default_factory=lambda: list(DATE_FORMATS))
    first: dict[str, pd.Timestamp] = field(default_factory=dict)
    last: dict[str, pd.Timestamp] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    overflow: bool = False
    digits: bool = True  # every value so far contains a digit
    unsupported: str | None = None

    def add_text(self, text: pa.Array, missing_values: frozenset[str]) -> None:
        """A batch of text cells (no nulls). The string work runs in Arrow, with Python's
        ``str.strip`` and ``str.lower`` semantics (engine/columns/arrow_text.py); numbers and
        dates are still read by pandas, as the drafts before read them."""
        if pa.types.is_large_string(text.type):
            text = text.cast(pa.string())
        spellings = pa.array(sorted(missing_values), type=pa.string())
        stripped = strip(text)
        is_missing = pc.is_in(stripped, value_set=spellings)
        absent = int(pc.sum(is_missing).as_py() or 0)
        self.missing += absent
        present = text
        if absent:
            kept = pc.invert(is_missing)
            present, stripped = pc.filter(text, kept), pc.filter(stripped, kept)
        if not len(present):
            return
        self.values += len(present)
        self._count(present)
        if self.digits:
            self.digits = bool(pc.all(pc.match_substring_regex(present, "[0-9]")).as_py())
        if self.boolean:
            words = pc.is_in(lower(stripped), value_set=_BOOLEAN_WORDS)
            self.boolean = bool(pc.all(words).as_py())
        if self.numeric:
            numbers = pd.to_numeric(pd.Series(present.to_pandas(), dtype=object), errors="coerce")
            finite = np.isfinite(numbers.to_numpy(dtype=np.float64, na_value=np.nan))
            if finite.all():
                self._numbers(numbers.to_numpy(dtype=np.float64))
                self._decimals(present, stripped)
            else:
                self.numeric = False
        if not self.numeric and self.formats:
            if self.digits:
                self._dates(pd.Series(stripped.to_pandas(), dtype=object))
            else:  # every format reads a year: a cell without a digit fails them all
                self.formats = []

    def add_typed(self, array: pa.Array) -> None:
        """A Parquet column with its own type (text goes through :meth:`add_text`)."""
        self.arrow_type = array.type
        self.missing += array.null_count
        present = array.drop_null()
        if len(present) == 0:
            return
        self.values += len(present)
        kind = array.type
        if pa.types.is_boolean(kind):
            self.numeric = False
            self.formats = []
            # The words str() writes ("True"), as the text of a CSV cell would be counted.
            self._count(pa.array([str(value) for value in present.to_pylist()], pa.string()))
        elif pa.types.is_integer(kind) or pa.types.is_floating(kind):
            self.boolean = False
            self.formats = []
            numbers = present.to_numpy(zero_copy_only=False).astype(np.float64)
            numbers = numbers[~np.isnan(numbers)]
            self.missing += len(present) - len(numbers)
            self.values -= len(present) - len(numbers)
            self._numbers(numbers)
            if pa.types.is_floating(kind):
                self.decimals = None  # binary floats: no decimal places to read
        elif pa.types.is_date(kind) or pa.types.is_timestamp(kind):
            self.boolean = self.numeric = False
            fmt = "%Y-%m-%d" if pa.types.is_date(kind) else "%Y-%m-%dT%H:%M:%S"
            self.formats = [fmt]
            stamps = pd.Series(pd.to_datetime(present.to_pandas()))
            self._range(fmt, stamps)
        else:
            self.unsupported = str(kind)

    def _count(self, present: pa.Array) -> None:
        if self.overflow:
            return
        if int(pc.max(pc.utf8_length(present)).as_py() or 0) > MAX_CATEGORY_CHARS:
            self.overflow = True  # free text: never a category, so never kept
            self.counts = {}
            return
        found = pc.value_counts(present)  # in order of first appearance
        for value, count in zip(
            found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True
        ):
            self.counts[value] = self.counts.get(value, 0) + int(count)
        if len(self.counts) > DISTINCT_CAP:
            self.overflow = True
            self.counts = {}

    def _numbers(self, numbers: np.ndarray) -> None:
        if numbers.size == 0:
            return
        self.low = min(self.low, float(numbers.min()))
        self.high = max(self.high, float(numbers.max()))
        if self.integral:
            self.integral = bool(np.all(numbers == np.floor(numbers)))

    def _decimals(self, present: pa.Array, stripped: pa.Array) -> None:
        if self.decimals is None:
            return
        if pc.any(pc.match_substring_regex(present, "[eE]")).as_py():
            self.decimals = None
            return
        # str.partition(".")[2].rstrip("0"): what follows the first point, without trailing 0s.
        after_point = pc.replace_substring_regex(stripped, pattern=r"^[^.]*\.?", replacement="")
        fraction = pc.utf8_rtrim(after_point, characters="0")
        self.decimals = max(self.decimals, int(pc.max(pc.utf8_length(fraction)).as_py() or 0))

    def _dates(self, text: pd.Series) -> None:
        """``text``: the present cells, stripped."""
        for fmt in list(self.formats):
            parsed = pd.to_datetime(text, format=fmt, errors="coerce")
            if parsed.isna().any():
                self.formats.remove(fmt)
            else:
                self._range(fmt, parsed)

    def _range(self, fmt: str, stamps: pd.Series) -> None:
        low, high = stamps.min(), stamps.max()
        self.first[fmt] = min(self.first.get(fmt, low), low)
        self.last[fmt] = max(self.last.get(fmt, high), high)


def draft_schema(
    path: Path,
    *,
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES,
    show_values: bool = False,
    parquet_batches: Sequence[tuple[int, int]] | None = None,
) -> SchemaDraft:
    """Read ``path`` (CSV or Parquet, decided by its content) once and propose a schema.

    ``parquet_batches`` (row group, batch rows) bounds how a Parquet file is read; the service
    computes it from the file's checked page headers (app/datasets/ingest.py), the local command
    reads 65,536 rows at a time. Raises :class:`DraftError` for files that cannot be read; its
    message names no value.
    """
    with open(path, "rb") as handle:
        is_parquet = handle.read(4) == b"PAR1"
    missing = frozenset(missing_values)
    if is_parquet:
        stats, rows = _parquet_stats(path, missing, parquet_batches)
    else:
        stats, rows = _csv_stats(path, missing)
    columns = tuple(_propose(column, rows, show_values) for column in stats)
    return SchemaDraft(columns, tuple(missing_values), rows, show_values)


def _csv_header(path: Path) -> list[str]:
    with open(path, "rb") as handle:
        line = handle.readline(1024 * 1024 + 1)
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DraftError("the file is neither Parquet nor UTF-8 CSV text") from None
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or not rows[0] or rows[0] == [""]:
        raise DraftError("the CSV header row is empty")
    if len(set(rows[0])) != len(rows[0]):
        raise DraftError("the CSV header names a column twice")
    return rows[0]


def _csv_stats(path: Path, missing: frozenset[str]) -> tuple[list[_Stats], int]:
    names = _csv_header(path)
    stats = [_Stats(name) for name in names]
    rows = 0
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(
                column_names=names, skip_rows=1, block_size=CSV_BLOCK_BYTES
            ),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in names},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in reader:
            rows += batch.num_rows
            for column, values in zip(stats, batch.columns, strict=True):
                column.add_text(values, missing)
    except pa.ArrowInvalid:
        # pyarrow's messages can quote a row: never forwarded.
        raise DraftError("the CSV could not be parsed (rows of different lengths?)") from None
    return stats, rows


def _parquet_stats(
    path: Path, missing: frozenset[str], plan: Sequence[tuple[int, int]] | None
) -> tuple[list[_Stats], int]:
    try:
        parquet = pq.ParquetFile(path)
        groups = plan or [(i, PARQUET_BATCH_ROWS) for i in range(parquet.num_row_groups)]
        stats = [_Stats(name) for name in parquet.schema_arrow.names]
        rows = 0
        for group, batch_rows in groups:
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group]):
                rows += batch.num_rows
                _add_batch(stats, batch, missing)
    except (pa.ArrowException, OSError):
        raise DraftError("the Parquet file could not be read") from None
    return stats, rows


def _add_batch(stats: list[_Stats], batch: pa.RecordBatch, missing: frozenset[str]) -> None:
    for column, values in zip(stats, batch.columns, strict=True):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            column.missing += values.null_count
            column.add_text(values.drop_null(), missing)
        else:
            column.add_typed(values)


def _propose(stats: _Stats, rows: int, show_values: bool) -> ColumnDraft:
    entry: dict[str, Any] = {"name": stats.name}
    if stats.unsupported is not None:
        entry["type"] = "ignore"
        return ColumnDraft(entry, f"Parquet type {stats.unsupported} is not supported")
    if stats.values == 0:
        entry["type"] = "ignore"
        return ColumnDraft(entry, "no values")
    nullable = stats.missing > 0
    if stats.boolean:
        entry["type"] = "boolean"
        reason = "every value is a yes/no word"
    elif stats.numeric:
        reason = _numeric(entry, stats, show_values)
    elif stats.formats:
        reason = _temporal(entry, stats, show_values)
    elif stats.digits and _all_distinct(stats):
        entry["type"] = "ignore"
        return ColumnDraft(entry, "every value distinct and with digits (an identifier)")
    elif not stats.overflow and len(stats.counts) <= MAX_CATEGORIES:
        reason = _categorical(entry, stats, show_values)
    else:
        entry["type"] = "ignore"
        reason = (
            f"text with more than {MAX_CATEGORIES} distinct values (an identifier or free text)"
        )
        return ColumnDraft(entry, reason)
    if nullable:
        entry["nullable"] = True
        reason += "; has missing values"
    return ColumnDraft(entry, reason)


def _all_distinct(stats: _Stats) -> bool:
    return not stats.overflow and stats.values > 1 and max(stats.counts.values()) == 1


def _numeric(entry: dict[str, Any], stats: _Stats, show_values: bool) -> str:
    entry["type"] = "numeric"
    if stats.integral:
        entry["integer"] = True
    elif stats.decimals is not None:
        entry["decimals"] = min(stats.decimals, MAX_DECIMALS)
    if not show_values:
        window = NUMERIC_WINDOW if stats.integral else float(NUMERIC_WINDOW)
        entry["min"], entry["max"] = -window, window
        entry["bins"] = {"quantiles": QUANTILE_BINS, "range": True}
        return (
            f"numbers: {QUANTILE_BINS} bins at DP quantiles, the range learned with DP within "
            "±10^15 (charged at upload)"
        )
    low, high = stats.low, stats.high
    if stats.integral:
        low, high = math.floor(low), math.ceil(high)
    entry["min"], entry["max"] = _plain(low), _plain(high)
    entry["clip"] = True
    if stats.integral and 0 < high - low < SMALL_INTEGER_RANGE:
        entry["max"] = _plain(high + 1)  # one bin [k, k + 1) per integer, the last closed
        entry["bins"] = int(high - low + 1)
        return "integers in a narrow range: one bin per value (visible to every analyst)"
    if high <= low:
        entry["max"] = _plain(low + 1)
        entry["bins"] = 1
        return "a single value (visible to every analyst)"
    entry["bins"] = {"quantiles": QUANTILE_BINS}
    return f"numbers in their exact range (visible to every analyst), {QUANTILE_BINS} DP bins"


def _temporal(entry: dict[str, Any], stats: _Stats, show_values: bool) -> str:
    fmt = stats.formats[0]
    timed = "%H" in fmt
    entry["type"] = "datetime" if timed else "date"
    entry["format"] = fmt
    if not show_values:
        start, end = DATE_WINDOW
        entry["min"] = f"{start}T00:00:00" if timed else start
        entry["max"] = f"{end}T23:59:59" if timed else end
        entry["bins"] = {"quantiles": QUANTILE_BINS, "range": True}
        return (
            f"{entry['type']}s in format {fmt}: {QUANTILE_BINS} bins at DP quantiles, the range "
            f"learned with DP within {start} … {end} (charged at upload)"
        )
    first, last = stats.first[fmt], stats.last[fmt]
    if timed:
        entry["min"] = first.strftime("%Y-%m-%dT%H:%M:%S")
        entry["max"] = last.strftime("%Y-%m-%dT%H:%M:%S")
    else:
        entry["min"] = first.date().isoformat()
        entry["max"] = last.date().isoformat()
    days = max((last - first).total_seconds() / 86400, 1.0)
    finest = 0 if timed else (1 if "%d" in fmt else 3)
    unit = next((u for u in UNITS[finest:] if days / UNIT_DAYS[u] <= MAX_DATE_BINS), UNITS[-1])
    entry["unit"] = unit
    return f"{entry['type']}s in their exact range (visible to every analyst), one bin per {unit}"


def _categorical(entry: dict[str, Any], stats: _Stats, show_values: bool) -> str:
    entry["type"] = "categorical"
    if show_values:
        ordered = sorted(stats.counts, key=lambda value: (-stats.counts[value], value))
        entry["categories"] = ordered
        return "text with few distinct values, listed (visible to every analyst)"
    entry["categories"] = {"discover": True, "max": MAX_CATEGORIES}
    entry["other"] = "other"
    return "text with few distinct values: categories learned with DP at upload"


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


__all__ = [
    "DEFAULT_MISSING_VALUES",
    "ColumnDraft",
    "DraftError",
    "SchemaDraft",
    "draft_schema",
]
