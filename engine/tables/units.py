"""The truncation pass over a table's batches: every row's unit and keyed hash, then the keep
mask (:func:`engine.privacy_unit.truncate`). Used by the service at upload
(app/datasets/units.py, with the upload's limits) and by ``rhosynth synthesize`` on a local file.

Each row's hash covers its unit and every other column of the file as read (text from a CSV; a
Parquet file's own types, written as Arrow spells them, binary columns as their bytes, UTF-8 or
not), under a fresh key per pass from the OS
CSPRNG (:func:`engine.privacy_unit.new_hash_key`), never stored. A unit that is null or one of the
schema's missing-value spellings is missing: its row is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.privacy_unit import PrivacyUnit, Truncation, new_hash_key, row_hashes, truncate
from engine.tables.encoding import CodesColumn, TableSchema


class UnitCollector:
    """Collects the units and row hashes of a table's batches, in file order.

    ``names``: the file's columns, in the order the batches hold them; ``max_unit_bytes``: a
    batch with a longer unit is not collected (:meth:`add` answers how many such cells it had,
    for the caller to refuse the table). Holds the units as Arrow bytes (their bytes plus 8 a
    row) and a hash a row (8 bytes). Units are compared as bytes (a Parquet BINARY id need not
    be UTF-8: it is never decoded, so no value can reach an error message)."""

    def __init__(
        self,
        unit: PrivacyUnit,
        names: Sequence[str],
        missing_values: Sequence[str],
        *,
        key: str | None = None,
        max_unit_bytes: int | None = None,
    ) -> None:
        if unit.column not in names:
            raise ValueError("the privacy unit's column is not among the file's columns")
        self.unit = unit
        self._names = list(names)
        self._key = new_hash_key() if key is None else key
        self._spellings = pa.array([s.encode() for s in missing_values], type=pa.large_binary())
        self._max_bytes = max_unit_bytes
        self._units: list[pa.Array] = []
        self._hashes: list[np.ndarray] = []
        self.rows = 0

    def add(self, batch: pa.RecordBatch) -> int:
        """Collect one batch; returns the number of its units longer than ``max_unit_bytes``
        (then nothing of it is collected)."""
        self.rows += batch.num_rows
        text = [as_cells(batch.column(name)) for name in self._names]
        values = pc.cast(text[self._names.index(self.unit.column)], pa.large_binary())
        if self._max_bytes is not None:
            over = pc.sum(pc.greater(pc.binary_length(values), self._max_bytes)).as_py()
            if over:
                return int(over)
        missing = pc.or_kleene(pc.is_null(values), pc.is_in(values, value_set=self._spellings))
        self._units.append(pc.if_else(missing, pa.scalar(None, pa.large_binary()), values))
        frame = pd.DataFrame({str(j): c.to_pandas() for j, c in enumerate(text)}, copy=False)
        self._hashes.append(row_hashes(frame, self._key))
        return 0

    def truncate(self) -> Truncation:
        """Keep at most k rows per unit (the smallest hashes); the collected data is let go."""
        combined = pa.chunked_array(self._units, type=pa.large_binary()).combine_chunks()
        self._units = []
        indices = combined.dictionary_encode().indices
        del combined
        mask = np.asarray(indices.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        codes = np.asarray(indices.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        del indices
        units = pd.Series(pd.arrays.IntegerArray(codes, mask))
        hashes = np.concatenate(self._hashes) if self._hashes else np.zeros(0, dtype=np.uint64)
        self._hashes = []
        return truncate(units, hashes, self.unit.max_rows)


def as_cells(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as large text (dictionaries decoded, numbers and dates in Arrow's spelling), or
    as large binary for a binary column: its bytes as stored, never decoded (they need not be
    UTF-8; pandas hashes bytes as it hashes the same text's UTF-8)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.DictionaryArray):
        values = values.dictionary_decode()
    if pa.types.is_large_string(values.type):
        return values
    if (
        pa.types.is_binary(values.type)
        or pa.types.is_large_binary(values.type)
        or pa.types.is_fixed_size_binary(values.type)
    ):
        return pc.cast(values, pa.large_binary())
    return pc.cast(values, pa.large_string())


def reading_schema(schema: TableSchema) -> TableSchema:
    """How the truncation pass reads a file of ``schema`` (the upload's, the unit an ignored
    column of it): every column, as text from a CSV (a Parquet file's own types)."""
    return TableSchema(
        tuple(CodesColumn(name, 1) for name in schema.file_names), (), schema.missing_values
    )


def without_unit(schema: TableSchema, unit: PrivacyUnit | None) -> TableSchema:
    """The stored schema: the upload's, without the unit's column (an ignored column of the
    file), so that no model, report or export names it."""
    if unit is None:
        return schema
    return replace(schema, ignored=tuple(n for n in schema.ignored if n != unit.column))


def kept_batches(batches: Iterable[pa.RecordBatch], keep: np.ndarray) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` (read in file order) that ``keep`` marks; ``ValueError`` if the
    batches hold another number of rows than ``keep`` (a choice made on another reading)."""
    offset = 0
    for batch in batches:
        rows = batch.num_rows
        if offset + rows > len(keep):
            raise ValueError("the batches hold more rows than the truncation read")
        mask = keep[offset : offset + rows]
        offset += rows
        if mask.all():
            yield batch
        elif mask.any():
            yield batch.filter(pa.array(mask))
    if offset != len(keep):
        raise ValueError("the batches hold fewer rows than the truncation read")


__all__ = ["UnitCollector", "as_cells", "kept_batches", "reading_schema", "without_unit"]
