"""Text output of a typed synthetic table: declared formats and boolean spellings.

The output Parquet keeps each column's type (``int64``, ``double``, ``date32``, ``timestamp``,
``bool``, dictionary text) and carries what CSV needs as field metadata, so every writer of CSV
(the service's download, ``rhosynth synthesize``) renders a column the same way:

* dates ISO 8601 or in the declared ``format``; datetimes likewise. A zoned datetime (its format
  has ``%z`` or ends in a literal ``Z``) is a UTC ``timestamp[s, tz=UTC]``, written in UTC: the
  literal ``Z`` as is, ``%z`` as ``+00:00``;
* booleans ``true``/``false``, or the first declared spellings;
* integers without a decimal point; a number with a declared ``format`` (``%.Nf``) with exactly
  N decimal places (``52000.0``), other numbers in their shortest form;
* nulls as empty cells.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

FORMAT_KEY = b"rhosynth.format"
TRUE_KEY = b"rhosynth.true"
FALSE_KEY = b"rhosynth.false"

UTC_OFFSET = "+00:00"
"""How ``%z`` is written: every output instant is in UTC (input offsets are converted)."""

_NUMBER_FORMAT = re.compile(r"%\.([0-9]{1,2})f\Z")
# Decimal places above which a formatted number is written by the plain cast (decimal128 holds
# 38 digits: such a number has no room left for its places).
_DECIMAL_DIGITS = 38
# ``%z`` not preceded by an escaping ``%`` (``%%z`` is a literal "%z").
_ZONE_DIRECTIVE = re.compile(r"(?<!%)((?:%%)*)%z")


def number_places(fmt: str) -> int | None:
    """The decimal places of a numeric ``format`` (``%.2f`` → 2), None if it is not one."""
    found = _NUMBER_FORMAT.match(fmt)
    return int(found.group(1)) if found else None


def is_zoned(fmt: str | None) -> bool:
    """Whether a datetime ``format`` writes a zone: a ``%z`` directive or a final literal ``Z``."""
    if fmt is None:
        return False
    return bool(_ZONE_DIRECTIVE.search(fmt)) or (fmt.endswith("Z") and not fmt.endswith("%Z"))


def utc_format(fmt: str) -> str:
    """``fmt`` with each ``%z`` written as the UTC offset ``+00:00`` (a literal)."""
    return _ZONE_DIRECTIVE.sub(lambda m: m.group(1) + UTC_OFFSET, fmt)


def text_column(array: pa.Array, field: pa.Field) -> pa.Array:
    """``array`` as CSV should show it (unchanged unless the field declares a rendering)."""
    metadata = field.metadata or {}
    if pa.types.is_timestamp(array.type):
        # Whole seconds: Parquet stores timestamp[s] as milliseconds, and strftime's %S would
        # then print "34.000"; without a declared format, ISO 8601 with a "T".
        fmt = metadata.get(FORMAT_KEY, b"%Y-%m-%dT%H:%M:%S").decode()
        seconds = pa.timestamp("s", tz=array.type.tz)
        return pc.strftime(array.cast(seconds, safe=False), format=utc_format(fmt))
    if FORMAT_KEY in metadata and pa.types.is_date(array.type):  # a declared date format
        return pc.strftime(array.cast(pa.timestamp("s")), format=metadata[FORMAT_KEY].decode())
    if FORMAT_KEY in metadata and (
        pa.types.is_integer(array.type) or pa.types.is_floating(array.type)
    ):
        places = number_places(metadata[FORMAT_KEY].decode())
        if places is not None:
            return fixed_places(array, places)
    if TRUE_KEY in metadata and pa.types.is_boolean(array.type):
        true = pa.scalar(metadata[TRUE_KEY].decode())
        false = pa.scalar(metadata[FALSE_KEY].decode())
        return pc.if_else(array, true, false)
    return array


def fixed_places(array: pa.Array, places: int) -> pa.Array:
    """Numbers as text with exactly ``places`` decimal places (``52000.0``), rounded half to
    even; a number too large for that (38 digits in all) in its shortest form."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    plain = array.cast(pa.string())
    if not places and pa.types.is_integer(array.type):
        return plain
    numbers = array.cast(pa.float64())
    limit = 10.0 ** (_DECIMAL_DIGITS - places - 1)
    finite = pc.and_(pc.is_finite(numbers), pc.less(pc.abs(numbers), limit))
    inside = pc.if_else(finite, numbers, 0.0)
    # Rounded first, so the cast to a decimal only drops binary noise (and -0.0 reads 0).
    rounded = pc.round(inside, ndigits=places)
    fixed = rounded.cast(pa.decimal128(_DECIMAL_DIGITS, places), safe=False).cast(pa.string())
    return pc.if_else(finite, fixed, plain)


def is_text_field(field: pa.Field) -> bool:
    """Whether the column holds text of the data (categories), as opposed to typed values."""
    kind = field.type
    return bool(
        pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_dictionary(kind)
    )


def text_batch(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> list[pa.Array]:
    """Every column of ``batch`` rendered for CSV with the fields of ``schema``."""
    return [text_column(column, field) for column, field in zip(batch.columns, schema, strict=True)]
