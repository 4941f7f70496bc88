"""Infer a draft schema from a raw CSV or Parquet table, in one bounded-memory pass.

Every column is read as it would be uploaded (CSV: all text; Parquet: its own types) and
narrowed to the first kind every non-missing value fits: boolean words, numbers (integral or
not), dates or timestamps in one of :data:`DATE_FORMATS`, else text. Text becomes a categorical
column unless it looks like an identifier or free text (then ``ignore``).

What a draft accepted as is takes from the data without DP (docs/privacy.md, "What a schema
draft reads from the data"; :meth:`SchemaDraft.disclosure` names it in the draft's warning):
each column's kind, the date formats, the decimals of numbers (a rule that no single value
decides on its own: :func:`robust_decimals`), the number format of numbers all written with the
same decimal places (``52000.0``: :func:`fixed_places`, the same tolerance), the spelling of
boolean words (for each side, the most common of a fixed set of words and cases:
:func:`boolean_spellings`),
which columns are dropped as identifiers, free text or empty, and which integer columns lie in a
small public window 0 … 0, 1, 3 or 7 (:data:`SMALL_INTEGER_TOPS`: one declared bin per value,
nothing learned); nothing else. The formats and spellings are what output is written in
(engine/columns/output.py). Every column is nullable. Other bounds are public windows inside
which the range and bins are learned with DP (``{"quantiles": k, "range": true}``): a window
chosen from the column's name where the name has a meaning (engine/schema_draft/meanings.py:
latitude, year, age, hour...), else a generic one (±10^15; 1900 … 2099). Categories are
discovered with DP, from a public candidate list where the name fixes one (US states, countries,
months, weekdays), else without a list; the service charges all of it at upload. With
``show_values`` the data's
own categories and exact bounds are proposed instead, for the owner to edit, and the draft says
that they would be visible to every analyst.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Sequence
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
from engine.columns.categorical import DEFAULT_FALSE_VALUES, DEFAULT_TRUE_VALUES
from engine.schema_draft.meanings import candidates_for, names_identifier, window_for
from engine.schema_draft.units import UnitProposal, propose_unit

TRUE_WORDS = ("true", "yes", "y", "t")
FALSE_WORDS = ("false", "no", "n", "f")
# How a boolean word can be written: the case styles a draft records (engine/columns/output.py
# writes the first declared spelling). Any other mix of cases counts for no style.
CASES: tuple[Callable[[str], str], ...] = (str.lower, str.upper, str.title)
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
    "%Y-%m-%d %H:%M:%SZ",
    "%Y-%m-%dT%H:%M:%S%z",
    "%Y-%m-%d %H:%M:%S%z",
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
# Text (and identifier-named integers) with more distinct values than a fifth of its values is
# proposed as ignore: a category would average fewer than 5 rows, and DP discovery keeps none.
MIN_ROWS_PER_CATEGORY = 5
# Decimals: the fewest that all values but this share (and at least one value) need.
DECIMALS_TOLERANCE = 0.01
DISTINCT_CAP = 1_000  # distinct values tracked per column (memory bound)
MAX_CATEGORY_CHARS = 200  # text longer than this is never a category (and is not kept)
QUANTILE_BINS = 16
# Public search windows for DP ranges: a default draft declares no bound taken from the data.
NUMERIC_WINDOW = 10**15
DATE_WINDOW = ("1900-01-01", "2099-12-31")
SMALL_INTEGER_RANGE = 100  # integral columns whose rounded range is this narrow: one bin per value
# A default draft's public windows for small integers (codes, counts, flags): an integer column
# without a window by meaning whose values all lie in 0 … top gets the smallest of these windows
# and one declared bin per value (whether they fit, and which, is read from the data without DP
# and named in the draft's warning). At most 8 values: every declared value beyond the real ones
# is an empty bin to which the model's noise gives rows outside the real range (0 … 15 and 0 … 31
# gave loans' counts 0.3-2 % of such rows at eps = 1, docs/discovery.md); wider columns keep the
# learned range, which gives one bin per value when it holds at most 32 integers.
SMALL_INTEGER_TOPS = (0, 1, 3, 7)
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
    sampled: bool = False  # read only the file's first rows (draft_schema's max_sample_bytes)

    def __post_init__(self) -> None:
        if not self.columns:
            raise ValueError("a draft has at least one column")

    def to_json(self) -> dict[str, Any]:
        return {
            "columns": [column.entry for column in self.columns],
            "missing_values": list(self.missing_values),
        }

    @property
    def privacy_unit(self) -> UnitProposal | None:
        """A suggested privacy unit (a column whose name and kind look like a person's or an
        account's id), kept out of the schema: see engine/schema_draft/units.py."""
        return propose_unit([column.entry for column in self.columns])

    @property
    def discovers(self) -> bool:
        """Whether the schema asks the service to learn part of the domain with DP."""
        return any(_has_discovery(column.entry) for column in self.columns)

    def disclosure(self) -> str:
        """What the schema takes from the data without DP, by column, and that nothing else is
        (the draft's warning; docs/privacy.md, "What a schema draft reads from the data")."""

        def named(columns: list[str]) -> str:
            return ", ".join(repr(name) for name in columns)

        entries = [column.entry for column in self.columns]
        small = [e for e in entries if _small_integer_window(e)] if not self.show_values else []
        formats = [e["name"] for e in entries if "format" in e and e["type"] != "numeric"]
        decimals = [e["name"] for e in entries if "decimals" in e]
        places = [e["name"] for e in entries if "format" in e and e["type"] == "numeric"]
        spellings = [e["name"] for e in entries if "true_values" in e]
        dropped = [e["name"] for e in entries if e["type"] == "ignore"]
        read = (
            f"read from the file's first {self.rows:,} rows (the draft reads a bounded sample: a "
            "kind, format or value seen only further down is not in it)"
            if self.sampled
            else "read from all of its values"
        )
        parts = [
            "each column's kind (its type, and for numbers whether they are integers), " + read
        ]
        if small:
            windows = ", ".join(f"{e['name']!r} in 0 … {e['bins'] - 1}" for e in small)
            tops = ", ".join(f"0 … {top}" for top in SMALL_INTEGER_TOPS)
            parts.append(
                f"that every value of these integer columns lies in a small public window ("
                f"{windows}: the smallest of {tops} that holds them all, declared with one bin per "
                "value)"
            )
        if formats:
            parts.append(f"the date format of {named(formats)}")
        if decimals:
            parts.append(
                f"the decimals of {named(decimals)} (the fewest that all values need but 1 % of "
                "them, or but one: no single value decides them on its own)"
            )
        if places:
            parts.append(
                f"the number format of {named(places)} (the decimal places, trailing zeros "
                "included, that all values but 1 % or but one are written with, as in 52000.0)"
            )
        if spellings:
            parts.append(
                f"the boolean spellings of {named(spellings)} (which of the yes/no word pairs, "
                "in which case, most values are written in, as in YES/NO)"
            )
        if dropped:
            parts.append(
                f"which columns are dropped ({named(dropped)}: identifier-like, free text, empty "
                "or of an unsupported type)"
            )
        text = (
            "Read from the data without DP, not charged, and public once this schema is "
            f"uploaded: {'; '.join(parts)}."
        )
        if self.show_values:
            return text + " Besides, the categories and bounds of this draft are the data's own."
        return text + (
            " Nothing else in this schema comes from the data: every column is nullable, bounds "
            "are public windows (chosen from a column's name, or generic"
            + (", or the small-integer windows above" if small else "")
            + ") inside which the range is learned with DP at upload"
            + (" (the small integers' bins are declared, not learned)" if small else "")
            + ", and categories are learned with DP at upload (among a public list chosen from "
            "a column's name, or without one)."
        )


def _has_discovery(entry: dict[str, Any]) -> bool:
    return isinstance(entry.get("bins"), dict) or isinstance(entry.get("categories"), dict)


def _small_integer_window(entry: dict[str, Any]) -> bool:
    """Whether a default draft's entry is a small-integer window (declared unit bins)."""
    return (
        entry["type"] == "numeric"
        and entry.get("min") == -0.5
        and isinstance(entry.get("bins"), int)
        and entry.get("max") in [top + 0.5 for top in SMALL_INTEGER_TOPS]
    )


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
    # decimal_counts[d]: values written with d decimals (d ≤ MAX_DECIMALS), then those with more,
    # then those in exponent notation. Binary floats (Parquet) have no decimals to read.
    decimal_counts: list[int] = field(default_factory=lambda: [0] * (MAX_DECIMALS + 3))
    # places_counts[p]: values written with p digits after the point, trailing zeros included
    # (52000.0: 1), likewise capped; the format of a column whose values share one count.
    places_counts: list[int] = field(default_factory=lambda: [0] * (MAX_DECIMALS + 3))
    # words[(w, c)]: boolean cells that are word w of TRUE_WORDS + FALSE_WORDS in case style c
    # of CASES (c = len(CASES): none of them). Counts of a fixed vocabulary, never the cells.
    words: dict[tuple[int, int], int] = field(default_factory=dict)
    binary_floats: bool = False
    low: float = math.inf
    high: float = -math.inf
    formats: list[str] = field(default_factory=lambda: list(DATE_FORMATS))
    first: dict[str, pd.Timestamp] = field(default_factory=dict)
    last: dict[str, pd.Timestamp] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    overflow: bool = False  # more than DISTINCT_CAP distinct values, or a long cell
    long_text: bool = False  # a cell longer than MAX_CATEGORY_CHARS (free text)
    digits: bool = True  # every value so far contains a digit
    unsupported: str | None = None

    @property
    def kind(self) -> str:
        """The kind every value fits: empty, unsupported, boolean, numeric, temporal or text."""
        if self.unsupported is not None:
            return "unsupported"
        if self.values == 0:
            return "empty"
        if self.boolean:
            return "boolean"
        if self.numeric:
            return "numeric"
        return "temporal" if self.formats else "text"

    @property
    def decimals(self) -> int | None:
        """The decimals proposed for the column's numbers (:func:`robust_decimals`)."""
        return None if self.binary_floats else robust_decimals(self.decimal_counts)

    @property
    def number_format(self) -> str | None:
        """``%.Nf`` when the column's numbers are written with N ≥ 1 places (trailing zeros
        included, 52000.0) by all values but the tolerated few (:func:`robust_decimals`'
        tolerance); None otherwise (shortest form)."""
        if self.binary_floats:
            return None
        places = fixed_places(self.places_counts)
        return None if not places else f"%.{places}f"

    @property
    def spellings(self) -> tuple[str, str] | None:
        """The true and false words as the column writes them (:func:`boolean_spellings`)."""
        return boolean_spellings(self.words)

    @property
    def distinct(self) -> int | None:
        """Distinct values, when at most DISTINCT_CAP of them were seen (else None)."""
        return None if self.overflow else len(self.counts)

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
            if self.boolean:
                self._words(stripped)
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
                self.binary_floats = True  # no decimal places to read
            elif names_identifier(self.name):  # distinct values, for the identifier rule
                self._count(present.cast(pa.string()))
        elif pa.types.is_date(kind) or pa.types.is_timestamp(kind):
            self.boolean = self.numeric = False
            if pa.types.is_date(kind):
                fmt = "%Y-%m-%d"
            else:  # a timestamp with a zone is written in UTC, with a "Z"
                fmt = "%Y-%m-%dT%H:%M:%SZ" if kind.tz is not None else "%Y-%m-%dT%H:%M:%S"
            self.formats = [fmt]
            stamps = pd.Series(pd.to_datetime(present.to_pandas()))
            self._range(fmt, stamps)
        else:
            self.unsupported = str(kind)

    def _count(self, present: pa.Array) -> None:
        if self.overflow:
            return
        if int(pc.max(pc.utf8_length(present)).as_py() or 0) > MAX_CATEGORY_CHARS:
            self.overflow = self.long_text = True  # free text: never a category, so never kept
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
        # str.partition(".")[2].rstrip("0"): what follows the first point, without trailing 0s.
        after_point = pc.replace_substring_regex(stripped, pattern=r"^[^.]*\.?", replacement="")
        fraction = pc.utf8_rtrim(after_point, characters="0")
        over = MAX_DECIMALS + 1
        places = pc.min_element_wise(pc.utf8_length(fraction), pa.scalar(over, pa.int32()))
        exponent = pc.match_substring_regex(present, "[eE]")
        places = pc.if_else(exponent, pa.scalar(over + 1, pa.int32()), places)
        found = pc.value_counts(places)
        for value, count in zip(
            found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True
        ):
            self.decimal_counts[int(value)] += int(count)
        written = pc.min_element_wise(pc.utf8_length(after_point), pa.scalar(over, pa.int32()))
        written = pc.if_else(exponent, pa.scalar(over + 1, pa.int32()), written)
        found = pc.value_counts(written)
        for value, count in zip(
            found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True
        ):
            self.places_counts[int(value)] += int(count)

    def _words(self, stripped: pa.Array) -> None:
        """Count the boolean cells by word and case style (every cell is a boolean word)."""
        found = pc.value_counts(stripped)  # at most 2**5 case variants of each of 8 words
        vocabulary = TRUE_WORDS + FALSE_WORDS
        for cell, count in zip(
            found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True
        ):
            word = vocabulary.index(cell.lower())
            style = next((c for c, case in enumerate(CASES) if case(cell) == cell), len(CASES))
            key = (word, style)
            self.words[key] = self.words.get(key, 0) + int(count)

    def _dates(self, text: pd.Series) -> None:
        """``text``: the present cells, stripped."""
        for fmt in list(self.formats):
            # With %z, offsets may differ from cell to cell: instants are compared in UTC.
            parsed = pd.to_datetime(text, format=fmt, errors="coerce", utc="%z" in fmt)
            if parsed.isna().any():
                self.formats.remove(fmt)
            else:
                self._range(fmt, parsed)

    def _range(self, fmt: str, stamps: pd.Series) -> None:
        low, high = stamps.min(), stamps.max()
        self.first[fmt] = min(self.first.get(fmt, low), low)
        self.last[fmt] = max(self.last.get(fmt, high), high)


def robust_decimals(counts: Sequence[int]) -> int | None:
    """The decimals of a column of numbers, from ``counts``: values written with 0, 1, ...,
    MAX_DECIMALS decimals, then with more, then in exponent notation (``1.5e-3``).

    With n values and ``tolerated = max(1, n // 100)`` (0 when n = 1): None (full precision)
    when more than ``tolerated`` values are in exponent notation; else the smallest d ≤
    MAX_DECIMALS such that at most ``tolerated`` values need more than d decimals, and
    MAX_DECIMALS when there is none. So all values but 1 % (or but one, on fewer than 200
    values) have at most d decimals unless d is the cap, and no single value decides d on its
    own: one is always tolerated.
    """
    total = sum(counts)
    tolerated = max(1, int(total * DECIMALS_TOLERANCE)) if total > 1 else 0
    if counts[MAX_DECIMALS + 2] > tolerated:
        return None
    beyond = total
    for places in range(MAX_DECIMALS + 1):
        beyond -= counts[places]
        if beyond <= tolerated:
            return places
    return MAX_DECIMALS


def fixed_places(counts: Sequence[int]) -> int | None:
    """The places (digits after the point, trailing zeros included) that all values but the
    tolerated few of :func:`robust_decimals` are written with, from ``counts`` laid out like
    its counts; None when no count up to MAX_DECIMALS holds them."""
    total = sum(counts)
    tolerated = max(1, int(total * DECIMALS_TOLERANCE)) if total > 1 else 0
    for places in range(MAX_DECIMALS + 1):
        if total and total - counts[places] <= tolerated:
            return places
    return None


def boolean_spellings(words: dict[tuple[int, int], int]) -> tuple[str, str] | None:
    """The (true, false) words as the column writes them: for each side on its own, the most
    common of its words (a word of TRUE_WORDS, or of FALSE_WORDS: true/false, yes/no, y/n, t/f)
    in a case of CASES; a side with no such cell takes the other side's pair and case. Ties go
    to the earlier case and pair. None when no cell is in one of CASES.

    Each side is decided by its own cells only, so the choice never compares how many true and
    false cells there are (a shared style chosen by counting all cells told which side was the
    majority when the two were written differently, YES against n)."""
    pairs = len(TRUE_WORDS)
    sides: list[dict[tuple[int, int], int]] = [{}, {}]
    for (word, case), count in words.items():
        if case < len(CASES):
            side = sides[word // pairs]
            key = (word % pairs, case)
            side[key] = side.get(key, 0) + count
    styles = [
        min(side, key=lambda key: (-side[key], key[1], key[0])) if side else None for side in sides
    ]
    if styles[0] is None and styles[1] is None:
        return None
    true_style = styles[0] or styles[1]
    false_style = styles[1] or styles[0]
    assert true_style is not None and false_style is not None
    return (
        CASES[true_style[1]](TRUE_WORDS[true_style[0]]),
        CASES[false_style[1]](FALSE_WORDS[false_style[0]]),
    )


def draft_schema(
    path: Path,
    *,
    missing_values: tuple[str, ...] = DEFAULT_MISSING_VALUES,
    show_values: bool = False,
    parquet_batches: Sequence[tuple[int, int]] | None = None,
    max_sample_bytes: int | None = None,
    stop: Callable[[], bool] | None = None,
) -> SchemaDraft:
    """Read ``path`` (CSV or Parquet, decided by its content) once and propose a schema.

    ``max_sample_bytes``: stop reading after the batch that brings the decoded values read to
    this many bytes (the draft is then of the file's first rows, ``sampled``; the service bounds
    a draft's CPU work so, issue 24 §7). ``stop``: asked between batches; when it answers true
    the draft ends with :class:`DraftCancelled` (the client left).

    ``parquet_batches`` (row group, batch rows) bounds how a Parquet file is read; the service
    computes it from the file's checked page headers (app/datasets/ingest.py), the local command
    reads 65,536 rows at a time. Raises :class:`DraftError` for files that cannot be read, and
    for a CSV whose first row looks like data rather than column names
    (:func:`first_row_is_data`); its message names no value.
    """
    with open(path, "rb") as handle:
        is_parquet = handle.read(4) == b"PAR1"
    missing = frozenset(missing_values)
    budget = _Budget(max_sample_bytes, stop)
    if is_parquet:
        stats, rows = _parquet_stats(path, missing, parquet_batches, budget)
    else:
        stats, rows = _csv_stats(path, missing, budget)
        if first_row_is_data(stats, missing):
            raise DraftError(HEADER_LOOKS_LIKE_DATA)
        if len({column.name for column in stats}) != len(stats):
            raise DraftError("the CSV header names a column twice")
    names = [column.name for column in stats]
    columns = tuple(_propose(column, show_values, names) for column in stats)
    return SchemaDraft(columns, tuple(missing_values), rows, show_values, budget.sampled)


class DraftCancelled(DraftError):
    """The draft was stopped between batches (its client left)."""


@dataclass
class _Budget:
    """How much of the file a draft may read, and whether to stop (post-batch checks)."""

    max_bytes: int | None
    stop: Callable[[], bool] | None
    read: int = 0
    sampled: bool = False

    def done_after(self, batch_bytes: int) -> bool:
        """Count a batch's decoded bytes; true when the draft has read enough."""
        if self.stop is not None and self.stop():
            raise DraftCancelled("the draft was cancelled")
        self.read += batch_bytes
        if self.max_bytes is not None and self.read >= self.max_bytes:
            self.sampled = True
            return True
        return False


HEADER_LOOKS_LIKE_DATA = (
    "the first row looks like data, not column names: add a header row (or rename the columns "
    "whose names read as values of their own column)"
)
_HEADER_BOOLEAN_WORDS = frozenset({"true", "false", "yes", "no"})


def first_row_is_data(stats: Sequence[_Stats], missing: frozenset[str]) -> bool:
    """Whether a CSV's header cells read like a row of values (a file without a header row).

    Each column votes, comparing its header cell with the column's values below it: a boolean
    column whose header is a yes/no word (true, false, yes, no), a numeric column whose header is
    a number, a date column whose header parses in the column's format, a text column whose
    header is one of its values vote "data"; the same columns vote "names" otherwise (a text
    column only when its values repeat, so that the header would have been seen among them).
    Text columns with all-distinct or too many values, empty columns and header cells that are
    missing-value spellings abstain. The first row is data when the "data" votes outnumber the
    "names" votes. Reads the header and what the pass kept (kinds, formats, distinct values).
    """
    data = names = 0
    for column in stats:
        cell = column.name.strip()
        if cell in missing:
            continue
        kind = column.kind
        vote: bool | None = None
        if kind == "boolean":
            vote = cell.lower() in _HEADER_BOOLEAN_WORDS
        elif kind == "numeric":
            number = pd.to_numeric(pd.Series([cell], dtype=object), errors="coerce").iloc[0]
            vote = bool(np.isfinite(float(number)))
        elif kind == "temporal":
            parsed = pd.to_datetime(pd.Series([cell]), format=column.formats[0], errors="coerce")
            vote = not bool(parsed.isna().iloc[0])
        elif kind == "text" and not column.overflow and column.counts:
            if column.name in column.counts:
                vote = True
            elif max(column.counts.values()) > 1:
                vote = False
        if vote is True:
            data += 1
        elif vote is False:
            names += 1
    return data > names


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
    return rows[0]


def _csv_stats(
    path: Path, missing: frozenset[str], budget: _Budget | None = None
) -> tuple[list[_Stats], int]:
    names = _csv_header(path)
    stats = [_Stats(name) for name in names]
    # Read by position: a header that names a column twice (or a data row taken for a header)
    # is reported after the pass.
    positions = [f"c{i}" for i in range(len(names))]
    rows = 0
    try:
        reader = pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(
                column_names=positions, skip_rows=1, block_size=CSV_BLOCK_BYTES
            ),
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=pacsv.ConvertOptions(
                column_types={name: pa.string() for name in positions},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
        for batch in reader:
            rows += batch.num_rows
            for column, values in zip(stats, batch.columns, strict=True):
                column.add_text(values, missing)
            if budget is not None and budget.done_after(batch.nbytes):
                break
    except pa.ArrowInvalid:
        # pyarrow's messages can quote a row: never forwarded.
        raise DraftError("the CSV could not be parsed (rows of different lengths?)") from None
    return stats, rows


def _parquet_stats(
    path: Path,
    missing: frozenset[str],
    plan: Sequence[tuple[int, int]] | None,
    budget: _Budget | None = None,
) -> tuple[list[_Stats], int]:
    try:
        parquet = pq.ParquetFile(path)
        groups = plan or [(i, PARQUET_BATCH_ROWS) for i in range(parquet.num_row_groups)]
        stats = [_Stats(name) for name in parquet.schema_arrow.names]
        rows = 0
        for group, batch_rows in groups:
            for batch in parquet.iter_batches(batch_size=batch_rows, row_groups=[group]):
                rows += batch.num_rows
                decoded = _add_batch(stats, batch, missing)
                if budget is not None and budget.done_after(decoded):
                    break
            if budget is not None and budget.sampled:
                break
    except (pa.ArrowException, OSError):
        raise DraftError("the Parquet file could not be read") from None
    return stats, rows


def _add_batch(stats: list[_Stats], batch: pa.RecordBatch, missing: frozenset[str]) -> int:
    """Add a batch's values to the stats; the bytes of its decoded values."""
    decoded = 0
    for column, values in zip(stats, batch.columns, strict=True):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        decoded += values.nbytes
        if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
            column.missing += values.null_count
            column.add_text(values.drop_null(), missing)
        else:
            column.add_typed(values)
    return decoded


def _propose(stats: _Stats, show_values: bool, names: Sequence[str]) -> ColumnDraft:
    entry: dict[str, Any] = {"name": stats.name}
    kind = stats.kind
    if kind == "unsupported":
        entry["type"] = "ignore"
        return ColumnDraft(entry, f"Parquet type {stats.unsupported} is not supported")
    if kind == "empty":
        entry["type"] = "ignore"
        return ColumnDraft(entry, "no values")
    if kind == "boolean":
        entry["type"] = "boolean"
        reason = "every value is a yes/no word"
        spellings = stats.spellings
        if spellings is not None and spellings != ("true", "false"):
            true, false = spellings
            # Written first on output; every default spelling is still read.
            entry["true_values"] = [true, *(w for w in DEFAULT_TRUE_VALUES if w != true.lower())]
            entry["false_values"] = [
                false,
                *(w for w in DEFAULT_FALSE_VALUES if w != false.lower()),
            ]
            reason += f", written {true}/{false}"
    elif kind == "numeric":
        if stats.integral and names_identifier(stats.name) and _mostly_distinct(stats):
            entry["type"] = "ignore"
            return ColumnDraft(entry, f"an identifier: its name says so, and {_distinct(stats)}")
        reason = _numeric(entry, stats, show_values, names)
    elif kind == "temporal":
        reason = _temporal(entry, stats, show_values)
    elif stats.long_text:
        entry["type"] = "ignore"
        return ColumnDraft(entry, f"free text (cells longer than {MAX_CATEGORY_CHARS} characters)")
    elif not show_values and (found := candidates_for(stats.name)) is not None:
        entry["type"] = "categorical"
        entry["categories"] = {
            "discover": True,
            "max": found.entities,
            "candidates": list(found.candidates),
        }
        entry["other"] = "other"
        reason = (
            f"text named like {found.meaning}: categories found with DP among a public list of "
            f"{len(found.candidates)} {found.source}, chosen from the column's name (values "
            "outside the list become 'other'; charged at upload)"
        )
    elif stats.overflow or len(stats.counts) > MAX_CATEGORIES:
        entry["type"] = "ignore"
        reason = (
            f"text with more than {MAX_CATEGORIES} distinct values (an identifier or free text)"
        )
        return ColumnDraft(entry, reason)
    elif _mostly_distinct(stats):
        entry["type"] = "ignore"
        return ColumnDraft(entry, f"an identifier-like text column: {_distinct(stats)}")
    else:
        reason = _categorical(entry, stats, show_values)
    # Whether a value is missing is not read from the data: every column may be missing.
    entry["nullable"] = True
    return ColumnDraft(entry, reason)


def _distinct(stats: _Stats) -> str:
    if stats.distinct is None:
        return f"more than {DISTINCT_CAP} distinct values"
    if stats.distinct == stats.values:
        return "every value is distinct"
    return (
        f"more than 1 in {MIN_ROWS_PER_CATEGORY} of its values are distinct (a category would "
        f"average fewer than {MIN_ROWS_PER_CATEGORY} rows: DP discovery would keep none)"
    )


def _mostly_distinct(stats: _Stats) -> bool:
    """More distinct values than a fifth of the values (or more than DISTINCT_CAP of them)."""
    distinct = stats.distinct
    return distinct is None or distinct * MIN_ROWS_PER_CATEGORY > stats.values


def _numeric(entry: dict[str, Any], stats: _Stats, show_values: bool, names: Sequence[str]) -> str:
    entry["type"] = "numeric"
    decimals = stats.decimals
    if stats.integral:
        entry["integer"] = True
    elif decimals is not None:
        entry["decimals"] = decimals
    number_format = stats.number_format
    if number_format is not None:
        entry["format"] = number_format
    if not show_values:
        meaning = window_for(stats.name, integer=stats.integral, names=names)
        bins = f"{QUANTILE_BINS} bins at DP quantiles, the range learned with DP"
        if stats.integral:
            bins = (
                f"the range learned with DP, then one bin per value if it holds at most "
                f"{2 * QUANTILE_BINS} integers, else {QUANTILE_BINS} bins at DP quantiles"
            )
        top = None if meaning is not None else _small_integer_top(stats)
        if top is not None:
            # One declared bin [k - 0.5, k + 0.5) per integer of the window (half-integer edges:
            # with edges at integers the last, closed bin [top, top + 1] decoded top + 1 too);
            # nothing is learned. clip: a value beyond the rows the draft read is clamped.
            entry["min"], entry["max"] = -0.5, top + 0.5
            entry["bins"] = top + 1
            entry["clip"] = True
            tops = ", ".join(f"0 … {t}" for t in SMALL_INTEGER_TOPS)
            return (
                f"small integers (a code, a count or a flag): every value lies in 0 … {top}, the "
                f"smallest of the public windows {tops} that holds them (read from the data "
                "without DP: see the warning), so one bin per value is declared (nothing "
                "learned, nothing charged)"
            )
        if meaning is not None:
            if stats.integral:
                entry["min"], entry["max"] = meaning.low, meaning.high
            else:
                entry["min"], entry["max"] = float(meaning.low), float(meaning.high)
            entry["bins"] = {"quantiles": QUANTILE_BINS, "range": True}
            return (
                f"numbers: {bins} within {meaning.describe()}, the public window for "
                f"'{meaning.meaning}' chosen from the column's name (values outside it are "
                "clamped; charged at upload)"
            )
        window = NUMERIC_WINDOW if stats.integral else float(NUMERIC_WINDOW)
        entry["min"], entry["max"] = -window, window
        entry["bins"] = {"quantiles": QUANTILE_BINS, "range": True}
        return f"numbers: {bins} within ±10^15 (charged at upload)"
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


def _small_integer_top(stats: _Stats) -> int | None:
    """The smallest of :data:`SMALL_INTEGER_TOPS` whose window 0 … top holds every value of an
    integer column (None: a negative value, or one above 7)."""
    if not stats.integral or stats.low < 0:
        return None
    return next((top for top in SMALL_INTEGER_TOPS if stats.high <= top), None)


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
