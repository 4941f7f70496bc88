"""Converting CSV cells in pyarrow's reader, where that gives exactly the codes of reading text.

The loaders read a CSV with every column as text and encode the text
(:mod:`engine.columns.arrow_text`, :mod:`engine.columns.arrow_temporal`). A *typed* read lets
pyarrow's block reader do part of that work while it splits the cells, on its own threads:

* numeric columns are converted to float64 by the reader: the parser of Arrow's cast, which
  the text path uses too, once, straight from the bytes (no string array, no second pass);
* categorical, date and datetime columns are read as dictionaries: each distinct text of a
  block is encoded once, and its code gathered for every row.

Reading a dictionary keeps every cell's text, so it is exact. Converting a number is exact for
the cells the reader accepts: a number in the notation the cast reads, with spaces or tabs
around it (the text path strips them too), or a missing-value spelling written exactly, which
the reader turns into a null (and the text path into a missing value). For any other cell the
caller abandons the typed read and reads the file as text, from the start
(:class:`TypedReadRefused`), so the codes and the refusal messages are those of the text path:

* a cell the reader cannot convert (other text, a spelling with whitespace around it, a quoted
  spelling, an empty quoted cell): pyarrow raises, and the read is abandoned;
* a cell the reader converts to a number that is not finite (``inf``, ``nan`` that is no
  spelling, ``1e999``): the text path refuses it as unparseable unless the stripped cell is a
  spelling, which the number no longer tells (:func:`check_typed_batch`);
* a schema with a spelling that is a finite number (``-1``): the text path reads such a cell as
  missing only when its number is refused, which needs the text, so the typed read keeps
  numeric columns as text.

Nothing here keeps or reports a value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from engine.columns import CategoricalColumn, DateColumn, DatetimeColumn, NumericColumn
from engine.columns.arrow_text import non_numbers
from engine.encoding import TableSchema

_TEXT = pa.string()
_DICTIONARY = pa.dictionary(pa.int32(), pa.string())


class TypedReadRefused(Exception):
    """The typed read met a cell it cannot stand for: read the file again as text."""


@dataclass(frozen=True)
class CsvTypes:
    """How pyarrow's CSV reader converts the stored columns of a schema."""

    column_types: dict[str, pa.DataType]
    # The spellings a number column's cell is null for (read as a missing value), exactly.
    null_values: list[str]
    # The columns read as float64: each batch is checked with check_typed_batch.
    numbers: tuple[str, ...]


def csv_types(schema: TableSchema, *, typed: bool) -> CsvTypes:
    """Every stored column as text, or (``typed``) the conversions described above."""
    types = dict.fromkeys(schema.names, _TEXT)
    if not typed:
        return CsvTypes(types, [], ())
    spellings = tuple(schema.missing_values)
    nulls = non_numbers(spellings)
    numbers_ok = len(nulls) == len(spellings)  # no spelling is a finite number
    numbers: list[str] = []
    for column in schema.columns:
        if isinstance(column, NumericColumn) and numbers_ok:
            types[column.name] = pa.float64()
            numbers.append(column.name)
        elif isinstance(column, CategoricalColumn | DateColumn | DatetimeColumn):
            types[column.name] = _DICTIONARY
    # A spelling with whitespace around it never equals a stripped cell: it is no null.
    exact = [spelling for spelling in nulls if spelling == spelling.strip()]
    return CsvTypes(types, exact, tuple(numbers))


def check_typed_batch(batch: pa.RecordBatch, numbers: tuple[str, ...]) -> None:
    """Raise :class:`TypedReadRefused` if a number column of ``batch`` holds a number that is
    not finite (nulls are missing-value spellings, and fine)."""
    for name in numbers:
        column = batch.column(name)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks()
        values = _float_values(column)
        if np.isfinite(values).all():
            continue
        valid = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        if not np.isfinite(values[valid]).all():
            raise TypedReadRefused(name)


def _float_values(column: pa.Array) -> np.ndarray:
    """The float64 slots of an array, nulls included (whatever they hold): a view."""
    data = column.buffers()[1]
    if data is None:
        return np.zeros(0)
    whole = np.frombuffer(data, dtype=np.float64, count=column.offset + len(column))
    return whole[column.offset :]
