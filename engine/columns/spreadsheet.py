"""CSV text that is safe to open in a spreadsheet: one writer for the service's download
(app/jobs/export.py) and the local CLI (``rhosynth synthesize`` / ``sample``), so both give the
same bytes for the same table.

OWASP "CSV Injection": a spreadsheet runs a cell as a formula when it starts with = + - @, a
tab or a carriage return; some also after leading whitespace, and some read the fullwidth forms
(U+FF1D, U+FF0B, U+FF0D, U+FF20) as the ASCII ones. Such text cells (and column names) get a
leading apostrophe. Every text cell is written quoted with embedded quotes doubled (pyarrow's
CSV writer does this for strings); numbers and ISO dates are typed and written plain, unescaped.
Pure formatting of released values (post-processing): no privacy claim is involved.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from engine.columns.arrow_text import text_bytes
from engine.columns.output import text_batch

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
_WRITE_OPTIONS = pacsv.WriteOptions(include_header=False, quoting_style="needed")


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
    (declared date formats and boolean spellings first, so their text is escaped too)."""
    columns = [escape_text(column) for column in text_batch(batch, schema)]
    names = [str(i) for i in range(len(columns))]
    buffer = io.BytesIO()
    pacsv.write_csv(pa.Table.from_arrays(columns, names=names), buffer, _WRITE_OPTIONS)
    return buffer.getvalue()
