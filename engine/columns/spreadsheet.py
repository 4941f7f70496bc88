"""CSV text that is safe to open in a spreadsheet: one writer for the service's download
(app/jobs/export.py) and the local CLI (``rhosynth synthesize`` / ``sample``), so both give the
same bytes for the same table.

OWASP "CSV Injection": a spreadsheet runs a cell as a formula when it starts with = + - @, a
tab or a carriage return; some also after leading whitespace, and some read the fullwidth forms
(U+FF1D, U+FF0B, U+FF0D, U+FF20) as the ASCII ones. Such text cells (and column names) get a
leading apostrophe. Every text cell (a category) is written quoted with embedded quotes
doubled. Typed values are written plain, unquoted: numbers and ISO dates unescaped, and the text
a column's declared rendering gives (a date or datetime in its ``format``, a boolean's spelling,
a number with fixed places; engine/columns/output.py) escaped and quoted only when CSV needs it
(a comma, a quote or a line break in it). Pure formatting of released values (post-processing):
no privacy claim is involved.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from engine.columns.arrow_text import text_bytes
from engine.columns.output import is_text_field, text_column

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
CONTROL_TRIGGERS = ("\t", "\r")
# Whitespace that may come before a trigger: ASCII and the Unicode spaces (NBSP, ideographic).
LEADING_SPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _re2_class(chars: str) -> str:
    return "".join(f"\\x{{{ord(c):04X}}}" for c in chars)


# One rule, two engines: Python's re for single cells, RE2 (pyarrow) for columns.
_TRIGGER_RE = re.compile(
    f"^(?:[{re.escape(LEADING_SPACE)}]*[{re.escape(''.join(FORMULA_TRIGGERS))}]"
    f"|[{re.escape(''.join(CONTROL_TRIGGERS))}])"
)
_TRIGGER_BODY = (
    f"(?:[{_re2_class(LEADING_SPACE)}]*[{_re2_class(''.join(FORMULA_TRIGGERS))}]"
    f"|[{_re2_class(''.join(CONTROL_TRIGGERS))}])"
)
_TRIGGER_PATTERN = "^" + _TRIGGER_BODY
_ESCAPED_PATTERN = "^'" + _TRIGGER_BODY
# What makes CSV quote a cell (RFC 4180): a comma, a quote or a line break.
_STRUCTURAL = '[,"\\r\\n]'


def escape_cell(value: str) -> str:
    """``value`` with a leading apostrophe if a spreadsheet could read it as a formula."""
    return "'" + value if _TRIGGER_RE.match(value) else value


def escape_text(array: pa.Array) -> pa.Array:
    """Escape formula-like strings, vectorised (for a dictionary column: its few values)."""
    if pa.types.is_dictionary(array.type):
        dictionary = escape_text(array.dictionary)
        return pa.DictionaryArray.from_arrays(array.indices, dictionary).dictionary_decode()
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array
    risky = pc.fill_null(pc.match_substring_regex(array, _TRIGGER_PATTERN), False)
    escaped = pc.binary_join_element_wise(
        pa.scalar("'", array.type), array, pa.scalar("", array.type)
    )
    return pc.if_else(risky, escaped, array)


def unescape_text(array: pa.Array) -> pa.Array:
    """The inverse of :func:`escape_text` for a string column read from CSV: a cell that is an
    apostrophe followed by a formula-like text loses the apostrophe. So a table this module
    wrote (the service's download, ``rhosynth synthesize``) reads back as the values it was
    written from. A real cell that itself starts with ``'=`` (etc.) is read without its ``'``;
    for a dictionary column, its values are unescaped."""
    if isinstance(array, pa.DictionaryArray):
        original = array.dictionary
        dictionary = unescape_text(original)
        if dictionary is original:
            return array
        return pa.DictionaryArray.from_arrays(array.indices, dictionary)
    if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
        return array
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if not (text_bytes(array) == ord("'")).any():
        return array  # no apostrophe at all: nothing escaped (one pass over the bytes)
    if not pc.any(pc.starts_with(array, "'")).as_py():
        return array  # nothing escaped (the regular expression is the slow part)
    escaped = pc.fill_null(pc.match_substring_regex(array, _ESCAPED_PATTERN), False)
    return pc.if_else(escaped, pc.utf8_slice_codeunits(array, 1), array)


def unescape_cell(value: str) -> str:
    return value[1:] if value.startswith("'") and _TRIGGER_RE.match(value[1:]) else value


def csv_header(names: Sequence[str]) -> bytes:
    """The header line: every name quoted and escaped."""
    header = io.StringIO()
    csv.writer(header, lineterminator="\n", quoting=csv.QUOTE_ALL).writerow(
        [escape_cell(name) for name in names]
    )
    return header.getvalue().encode()


def csv_rows(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> bytes:
    """The rows of ``batch`` (no header), each column rendered with its field of ``schema``
    (declared formats and boolean spellings first, so their text is escaped too): text columns
    quoted, typed values plain (quoted only if their rendered text needs it), nulls empty."""
    if not batch.num_rows:
        return b""
    cells = _joined_spans(
        [_cells(column, field) for column, field in zip(batch.columns, schema, strict=True)]
    )
    # The line break joins the last cell (one column's bytes), not the whole line.
    newline = pa.scalar("\n", pa.large_string())
    cells[-1] = pc.binary_join_element_wise(cells[-1], pa.scalar("", pa.large_string()), newline)
    lines = pc.binary_join_element_wise(*cells, pa.scalar(",", pa.large_string()))
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    _, offsets, data = lines.buffers()
    ends = np.frombuffer(offsets, dtype=np.int64, count=len(lines) + 1 + lines.offset)
    start, end = int(ends[lines.offset]), int(ends[-1])
    return b"" if data is None else data.slice(start, end - start).to_pybytes()


@dataclass(frozen=True)
class _Tabled:
    """Cells as positions in a table of their texts (integers of a small span, no nulls)."""

    texts: pa.Array  # large_string, no nulls
    index: npt.NDArray[np.int64]

    def then(self, other: _Tabled) -> _Tabled:
        """The cells of two adjacent columns as one: each pair's text joined by a comma."""
        width = len(other.texts)
        first = np.repeat(np.arange(len(self.texts)), width)
        second = np.tile(np.arange(width), len(self.texts))
        texts = pc.binary_join_element_wise(
            self.texts.take(first), other.texts.take(second), pa.scalar(",", pa.large_string())
        )
        return _Tabled(texts, self.index * width + other.index)

    def cells(self) -> pa.Array:
        return self.texts.take(self.index)


_PAIR_LIMIT = 16_384
"""Adjacent tabled columns are joined while their table of texts stays this small."""


def _joined_spans(parts: list[pa.Array | _Tabled]) -> list[pa.Array]:
    """The columns' cells, adjacent tabled columns joined into one (a row joins fewer columns;
    the bytes are the same)."""
    cells: list[pa.Array] = []
    run: _Tabled | None = None
    for part in parts:
        if isinstance(part, _Tabled):
            if run is not None and len(run.texts) * len(part.texts) <= _PAIR_LIMIT:
                run = run.then(part)
                continue
            if run is not None:
                cells.append(run.cells())
            run = part
            continue
        if run is not None:
            cells.append(run.cells())
            run = None
        cells.append(part)
    if run is not None:
        cells.append(run.cells())
    return cells


def _cells(array: pa.Array, field: pa.Field) -> pa.Array | _Tabled:
    """One column's CSV cells as ``large_string`` (no nulls), or as a table of texts and
    positions in it."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if is_text_field(field):
        if pa.types.is_dictionary(array.type):  # escaped and quoted once per distinct value
            dictionary = _quoted(escape_text(array.dictionary))
            array = pa.DictionaryArray.from_arrays(array.indices, dictionary).dictionary_decode()
        else:
            array = _quoted(escape_text(array))
    else:
        rendered = text_column(array, field)
        if pa.types.is_integer(rendered.type):
            span = _span_texts(rendered)
            if span is None:
                array = rendered.cast(pa.large_string())
            else:
                # A column spanning few values (codes, ages, counts: most of a synthetic table)
                # takes each text from a table of the span's texts, faster than casting every row.
                texts, positions = span
                if not rendered.null_count:
                    index = np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)
                    return _Tabled(texts, index)
                array = texts.take(positions)
        elif not (pa.types.is_string(rendered.type) or pa.types.is_large_string(rendered.type)):
            # Numbers, booleans, ISO dates: pyarrow's text.
            array = rendered.cast(pa.large_string())
        elif pa.types.is_integer(array.type) or pa.types.is_floating(array.type):
            # A number in its declared format ("%.2f": -1.50) is a number, never a formula:
            # not escaped, and its text holds no comma, quote or line break to quote.
            array = rendered
        else:
            escaped = escape_text(rendered)
            needs = pc.fill_null(pc.match_substring_regex(escaped, _STRUCTURAL), False)
            array = pc.if_else(needs, _quoted(escaped), escaped)
    return pc.fill_null(array.cast(pa.large_string()), "")


_TEXT_TABLE_LIMIT = 4096
"""Integers spanning fewer values than this are rendered from a table of their texts."""


def _span_texts(array: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    """Integers spanning fewer than :data:`_TEXT_TABLE_LIMIT` values (and fewer than the rows)
    as a table of the span's texts (pyarrow's cast's text, ``large_string``) and each row's
    position in it (nulls stay null); None for a wider span or no values."""
    bounds = pc.min_max(array)
    low, high = bounds["min"].as_py(), bounds["max"].as_py()
    if low is None or high - low >= min(_TEXT_TABLE_LIMIT, len(array)):
        return None
    texts = pa.array([str(value) for value in range(low, high + 1)], pa.large_string())
    return texts, _positions(array, low)


def _positions(array: pa.Array, low: int) -> pa.Array:
    """``array - low`` (nulls stay null), in a type that holds it: a narrow signed type need
    not (int8 from -128 to 127 spans 255), and pyarrow's subtract wraps around silently."""
    if pa.types.is_signed_integer(array.type):
        array = array.cast(pa.int64())  # the span is small: no int64 difference overflows
    return pc.subtract(array, pa.scalar(low, array.type))


def _quoted(array: pa.Array) -> pa.Array:
    """Each text in double quotes, its own quotes doubled (nulls stay null)."""
    doubled = pc.replace_substring(array, '"', '""')
    empty = pa.scalar("", doubled.type)
    return pc.binary_join_element_wise(empty, doubled, empty, pa.scalar('"', doubled.type))
