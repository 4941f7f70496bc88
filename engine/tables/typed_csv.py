"""Converting CSV cells in pyarrow's reader, where that gives exactly the codes of reading text.

The loaders read a CSV with every column as text and encode the text
(:mod:`engine.columns.arrow_text`, :mod:`engine.columns.arrow_temporal`). A *typed* read lets
pyarrow's parser do part of that work while it splits the cells (on the block reader's threads,
:mod:`engine.tables.csv_blocks`):

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

import io
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from engine.columns import CategoricalColumn, DateColumn, DatetimeColumn, NumericColumn
from engine.columns.arrow_text import non_numbers
from engine.tables.buffers import null_mask
from engine.tables.encoding import TableSchema

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

    def convert_options(self, names: list[str]) -> pacsv.ConvertOptions:
        """The reader's conversions of the stored columns ``names`` (the others, ignored
        columns, are never converted); an empty or quoted cell is text, never a null."""
        return pacsv.ConvertOptions(
            column_types=self.column_types,
            include_columns=names,
            null_values=self.null_values,
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        )


def csv_types(
    schema: TableSchema, *, typed: bool, repetitive: Collection[str] | None = None
) -> CsvTypes:
    """Every stored column as text, or (``typed``) the conversions described above; only the
    ``repetitive`` text columns (default: all) are read as dictionaries."""
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
        elif isinstance(column, CategoricalColumn | DateColumn | DatetimeColumn) and (
            repetitive is None or column.name in repetitive
        ):
            types[column.name] = _DICTIONARY
    # A spelling with whitespace around it never equals a stripped cell: it is no null.
    exact = [spelling for spelling in nulls if spelling == spelling.strip()]
    return CsvTypes(types, exact, tuple(numbers))


def dictionary_candidates(schema: TableSchema) -> list[str]:
    """The stored columns a typed read may read as dictionaries."""
    kinds = CategoricalColumn | DateColumn | DatetimeColumn
    return [column.name for column in schema.columns if isinstance(column, kinds)]


SAMPLE_BYTES = 64 * 1024
SAMPLE_MIN_ROWS = 64


def repetitive_columns(path: Path, header: list[str], candidates: list[str]) -> set[str]:
    """The ``candidates`` whose cells repeat in the file's first :data:`SAMPLE_BYTES` (at most
    one distinct text for every two rows), all of them when that sample cannot tell.

    A dictionary pays when texts repeat (a date, an hour, a category: each distinct text of a
    block is parsed once); for a column of distinct texts (timestamps to the second) hashing
    every cell costs more than it saves (+35 % on a table of one such column). Either read is
    exact; the sample only chooses the faster.
    """
    if not candidates:
        return set()
    with open(path, "rb") as handle:
        head = handle.read(SAMPLE_BYTES)
    end = head.rfind(b"\n")
    try:
        sample = pacsv.read_csv(
            io.BytesIO(head[: end + 1]),
            read_options=pacsv.ReadOptions(column_names=header, skip_rows=1),
            parse_options=pacsv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=lambda _row: "skip"
            ),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(candidates, _TEXT),
                include_columns=candidates,
                strings_can_be_null=False,
            ),
        )
    except (pa.ArrowException, ValueError):
        return set(candidates)
    if sample.num_rows < SAMPLE_MIN_ROWS:
        return set(candidates)
    return {
        name
        for name in candidates
        if 2 * pc.count_distinct(sample.column(name)).as_py() <= sample.num_rows
    }


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
        valid = ~null_mask(column)
        if not np.isfinite(values[valid]).all():
            raise TypedReadRefused(name)


def _float_values(column: pa.Array) -> np.ndarray:
    """The float64 slots of an array, nulls included (whatever they hold): a view."""
    data = column.buffers()[1]
    if data is None:
        return np.zeros(0)
    whole = np.frombuffer(data, dtype=np.float64, count=column.offset + len(column))
    return whole[column.offset :]
