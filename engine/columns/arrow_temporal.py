"""Parsing date and datetime text (CSV cells, Parquet strings) in Arrow and NumPy, whole arrays
at a time, with exactly the result of the pandas parser of :mod:`engine.columns.temporal`.

``pd.to_datetime`` on objects costs a Python call per cell, and Arrow's own parsers do not read
cells the way pandas does (``pyarrow.compute.strptime`` accepts ``2013-02-30`` as 2 March,
leading spaces and two-digit ``%Y``; formatting back with ``strftime`` to check costs more than
pandas). So the common cells are read here by a fixed-width template, and every other cell goes
to the very same pandas code, once per distinct text:

* a declared ``format`` made only of ``%Y`` (4 digits), ``%m``, ``%d``, ``%H``, ``%M``, ``%S``
  (2 digits), ``%b`` (an English month abbreviation, any case) and literal characters has one
  template; with no format (ISO 8601) the templates are ``YYYY-MM-DD``, ``YYYY-MM-DDThh:mm:ss``
  and ``YYYY-MM-DD hh:mm:ss``, each also with ``hh:mm`` and with a trailing ``Z`` (UTC);
* a cell is read by a template only when its bytes have the template's length, its literal
  characters are in place, its fields are digits (or a month name), and the fields make a real
  date and time (month 1–12, day within the month, hour < 24, minute and second < 60, year ≥ 1).
  Such a cell is in the canonical form of its format, which pandas reads as the same instant;
* anything else (other widths such as ``5/3/2013``, Unicode digits, leap seconds, offsets like
  ``+02:00``, fractions of seconds, invalid dates, formats with other directives such as ``%y``,
  ``%B``, ``%I %p``, ``%z``, ``%f``, ``%j``) is parsed by ``pd.to_datetime``, per distinct text.

Nothing here keeps or reports a value.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engine.tables.buffers import null_mask

_DIGITS = {"Y": 4, "m": 2, "d": 2, "H": 2, "M": 2, "S": 2}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_ISO_TEMPLATES = (
    "%Y-%m-%d",
    "%Y-%m-%dT%H:%M:%S",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%SZ",
    "%Y-%m-%d %H:%M:%SZ",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%MZ",
)
_MICROS = {"d": 86_400_000_000, "H": 3_600_000_000, "M": 60_000_000, "S": 1_000_000}


@dataclass(frozen=True)
class Template:
    """A fixed-width format: each field's directive and byte offset, and the literal bytes."""

    width: int
    fields: tuple[tuple[str, int], ...]
    literals: tuple[tuple[int, int], ...]  # (offset, byte)

    def parse(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``cells`` an (n, width) uint8 matrix: each row's instant (``datetime64[us]``) and
        whether the row is a valid cell of this template (the instant is meaningless if not)."""
        n = cells.shape[0]
        ok = np.ones(n, dtype=bool)
        for offset, byte in self.literals:
            ok &= cells[:, offset] == byte
        parts: dict[str, np.ndarray] = {}
        for directive, offset in self.fields:
            if directive == "b":
                month, found = _month_names(cells[:, offset : offset + 3])
                ok &= found
                parts["m"] = month
                continue
            value = np.zeros(n, dtype=np.int64)
            for k in range(_DIGITS[directive]):
                digit = cells[:, offset + k] - np.uint8(48)  # wraps: a non-digit is >= 10
                ok &= digit < 10
                value *= 10
                value += digit
            parts[directive] = value
        year = parts.get("Y", np.full(n, 1900, dtype=np.int64))
        month = parts.get("m", np.ones(n, dtype=np.int64))
        day = parts.get("d", np.ones(n, dtype=np.int64))
        ok &= (year >= 1) & (month >= 1) & (month <= 12) & (day >= 1)
        month = np.where(ok, month, 1)
        leap = (year % 4 == 0) & ((year % 100 != 0) | (year % 400 == 0))
        ok &= day <= _MONTH_DAYS[month - 1] + (leap & (month == 2))
        micros = _days_from_civil(year, month, day) * _MICROS["d"]
        for directive, limit in (("H", 24), ("M", 60), ("S", 60)):
            if directive in parts:
                ok &= parts[directive] < limit
                micros += parts[directive] * _MICROS[directive]
        return micros.astype("datetime64[us]"), ok


_MONTH_DAYS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)


def _days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (years >= 1; H. Hinnant's
    ``days_from_civil``, pure integer arithmetic)."""
    shifted = year - (month <= 2)
    era = shifted // 400
    year_of_era = shifted - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    days: np.ndarray = era * 146_097 + day_of_era - 719_468
    return days


def _month_names(letters: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Month numbers of three ASCII letters (any case), and which rows name a month."""
    lowered = letters | 0x20
    is_letter = ((lowered >= ord("a")) & (lowered <= ord("z"))).all(axis=1)
    keys = (lowered.astype(np.int64) * np.array([65536, 256, 1], dtype=np.int64)).sum(axis=1)
    table = np.array(
        [ord(name[0]) * 65536 + ord(name[1]) * 256 + ord(name[2]) for name in _MONTHS],
        dtype=np.int64,
    )
    order = np.argsort(table)
    where = np.minimum(np.searchsorted(table[order], keys), len(table) - 1)
    found = is_letter & (table[order][where] == keys)
    return order[where] + 1, found


@lru_cache(maxsize=64)
def template(fmt: str) -> Template | None:
    """The fixed-width template of ``fmt``, or None when it has another directive."""
    fields: list[tuple[str, int]] = []
    literals: list[tuple[int, int]] = []
    offset = 0
    i = 0
    while i < len(fmt):
        char = fmt[i]
        if char == "%":
            if i + 1 >= len(fmt):
                return None
            directive = fmt[i + 1]
            i += 2
            if directive == "%":
                literals.append((offset, ord("%")))
                offset += 1
            elif directive in _DIGITS:
                fields.append((directive, offset))
                offset += _DIGITS[directive]
            elif directive == "b" and _english_months():
                fields.append((directive, offset))
                offset += 3
            else:
                return None
            continue
        if not char.isascii() or (char.isspace() and char != " "):
            return None
        # A space matches any run of whitespace in pandas' parser: a template reads one space.
        literals.append((offset, ord(char)))
        offset += 1
        i += 1
    directives = [d for d, _ in fields]
    if len(set(directives)) != len(directives) or ("m" in directives and "b" in directives):
        return None
    return Template(offset, tuple(fields), tuple(literals))


def _english_months() -> bool:
    """Whether the locale's month abbreviations (what pandas matches ``%b`` with) are English."""
    return tuple(name.lower() for name in calendar.month_abbr[1:]) == _MONTHS


def templates_for(fmt: str | None) -> tuple[Template, ...]:
    """The templates cells of ``fmt`` (None: ISO 8601) are read with, longest first."""
    found = [template(t) for t in _ISO_TEMPLATES] if fmt is None else [template(fmt)]
    return tuple(t for t in found if t is not None)


def parse_text(
    stripped: pa.Array, fmt: str | None, fallback: Callable[[list[str]], np.ndarray]
) -> np.ndarray:
    """Each stripped cell as ``datetime64[us]`` (NaT where it is not a date of ``fmt``).

    Cells no template reads go to ``fallback``: given distinct texts it returns their instants
    (the pandas parser), so the result equals ``fallback`` applied to every cell.
    """
    n = len(stripped)
    out = np.full(n, np.datetime64("NaT"), dtype="datetime64[us]")
    todo = ~null_mask(stripped)
    chosen = templates_for(fmt)
    if chosen and todo.any():
        lengths = np.asarray(
            pc.fill_null(pc.binary_length(stripped), -1).to_numpy(zero_copy_only=False)
        )
        for each in chosen:
            rows = np.flatnonzero(todo & (lengths == each.width))
            if not rows.size:
                continue
            stamps, ok = each.parse(_fixed_width(stripped.take(pa.array(rows)), each.width))
            out[rows[ok]] = stamps[ok]
            todo[rows[ok]] = False
    rest = np.flatnonzero(todo)
    if rest.size:
        odd = stripped.take(pa.array(rest))
        distinct = pc.unique(odd)
        parsed = fallback(distinct.to_pylist())
        where = np.asarray(pc.index_in(odd, value_set=distinct).to_numpy(zero_copy_only=False))
        out[rest] = parsed[where]
    return out


def _fixed_width(cells: pa.Array, width: int) -> np.ndarray:
    """Cells that all have ``width`` bytes (no nulls) as an (n, width) uint8 matrix (a view)."""
    if isinstance(cells, pa.ChunkedArray):
        cells = cells.combine_chunks()
    _, offsets_buffer, data = cells.buffers()
    offset_type = np.int64 if pa.types.is_large_string(cells.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type, count=len(cells) + 1 + cells.offset)
    first = int(offsets[cells.offset])
    if data is None or not len(cells):
        return np.zeros((len(cells), width), dtype=np.uint8)
    raw = np.frombuffer(data, dtype=np.uint8, count=len(cells) * width, offset=first)
    return raw.reshape(len(cells), width)


def timestamp_micros(values: pa.Array) -> np.ndarray | None:
    """A ``date32`` or timestamp (seconds to microseconds) array as naive UTC ``datetime64[us]``
    (NaT for nulls), as pandas converts it; None for other types (pandas decides)."""
    kind = values.type
    if pa.types.is_date32(kind):
        storage, scale = values.cast(pa.int32()).cast(pa.int64()), _MICROS["d"]
    elif pa.types.is_timestamp(kind) and kind.unit in ("s", "ms", "us"):
        storage = values.cast(pa.int64())  # UTC instants whatever the zone
        scale = {"s": 1_000_000, "ms": 1_000, "us": 1}[kind.unit]
    else:
        return None
    nulls = null_mask(storage)
    whole = np.asarray(pc.fill_null(storage, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    out = (whole * scale).astype("datetime64[us]")
    out[nulls] = np.datetime64("NaT")
    return out
