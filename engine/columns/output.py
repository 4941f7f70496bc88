"""Text output of a typed synthetic table: declared date formats and boolean spellings.

The output Parquet keeps each column's type (``int64``, ``double``, ``date32``, ``timestamp``,
``bool``, dictionary text) and carries what CSV needs as field metadata, so every writer of CSV
(the service's download, ``rhosynth synthesize``) renders a column the same way: dates ISO 8601
or in the declared ``format``, booleans ``true``/``false`` or the first declared spellings,
integers without a decimal point, nulls as empty cells.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

FORMAT_KEY = b"rhosynth.format"
TRUE_KEY = b"rhosynth.true"
FALSE_KEY = b"rhosynth.false"


def text_column(array: pa.Array, field: pa.Field) -> pa.Array:
    """``array`` as CSV should show it (unchanged unless the field declares a rendering)."""
    metadata = field.metadata or {}
    if pa.types.is_timestamp(array.type):
        # Whole seconds: Parquet stores timestamp[s] as milliseconds, and strftime's %S would
        # then print "34.000"; without a declared format, ISO 8601 with a "T".
        fmt = metadata.get(FORMAT_KEY, b"%Y-%m-%dT%H:%M:%S").decode()
        return pc.strftime(array.cast(pa.timestamp("s"), safe=False), format=fmt)
    if FORMAT_KEY in metadata:  # a date column with a declared format
        return pc.strftime(array.cast(pa.timestamp("s")), format=metadata[FORMAT_KEY].decode())
    if TRUE_KEY in metadata and pa.types.is_boolean(array.type):
        true = pa.scalar(metadata[TRUE_KEY].decode())
        false = pa.scalar(metadata[FALSE_KEY].decode())
        return pc.if_else(array, true, false)
    return array


def text_batch(batch: pa.RecordBatch | pa.Table, schema: pa.Schema) -> list[pa.Array]:
    """Every column of ``batch`` rendered for CSV with the fields of ``schema``."""
    return [text_column(column, field) for column, field in zip(batch.columns, schema, strict=True)]
