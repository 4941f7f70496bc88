"""The raw values of a table's numeric, date and datetime columns, as float64, beside the codes.

The quality report's owner tier compares real values with synthetic ones (engine/reports/values.py),
which bins cannot do: a bin code does not tell where in its bin, or how far outside the real range,
a value lies. So an upload keeps, next to its codes, each such column's values as the encoder read
them (app/datasets/ingest.py): numbers as parsed, **unclamped** (a value that ``clip`` moved into an
end bin keeps its own number here); dates as days since 1970-01-01; datetimes as seconds since
1970-01-01 UTC (naive values are read as UTC, values with an offset converted to it, as the encoder
does); NaN (null in a file) for a missing cell, and for a cell with no value of the column's kind.

Privacy. These are the real table's values: whatever reads them is not DP. Only the owner tier of
the report reads them (owner keys only, privacy rule 7); no mechanism, no discovery and no analyst
route ever does (docs/privacy.md, "Raw values kept for the owner's report").

The same functions read the decoded values of a synthetic table (:func:`parse_values` on its Arrow
columns: ``int64``/``float64`` numbers, ``date32`` dates, ``timestamp[s]`` datetimes), so both
sides of a comparison are in the same units.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.columns import Column, DateColumn, DatetimeColumn, NumericColumn
from engine.columns.arrow_temporal import parse_text, timestamp_micros
from engine.columns.arrow_text import is_arrow_number, is_arrow_text, parse_numbers, strip
from engine.columns.categorical import as_float
from engine.tables.buffers import null_mask
from engine.tables.encoding import TableSchema

FloatArray = npt.NDArray[np.float64]
ValueColumn = NumericColumn | DateColumn | DatetimeColumn
VALUE_TYPES = (NumericColumn, DateColumn, DatetimeColumn)
UNIT_KEY = b"rhosynth.unit"
UNITS = {
    "numeric": "number",
    "date": "days since 1970-01-01",
    "datetime": "seconds since 1970-01-01 UTC",
}


def value_columns(schema: TableSchema) -> tuple[ValueColumn, ...]:
    """The schema's numeric, date and datetime columns, in schema order."""
    return tuple(column for column in schema.columns if isinstance(column, VALUE_TYPES))


def unit_of(column: Column) -> str:
    """The unit a column's raw values are kept in (:data:`UNITS`)."""
    return UNITS[column.type]


def values_arrow_schema(schema: TableSchema) -> pa.Schema:
    """The schema of a stored values file: one nullable float64 field per value column, each
    with its unit as field metadata."""
    return pa.schema(
        [
            pa.field(c.name, pa.float64(), nullable=True, metadata={UNIT_KEY: unit_of(c).encode()})
            for c in value_columns(schema)
        ]
    )


def parse_values(column: ValueColumn, values: pa.Array | pa.ChunkedArray) -> FloatArray:
    """Each cell's value in the column's unit (:data:`UNITS`), NaN where a cell holds none (a
    null, a missing-value spelling, text that is no number or date of the column's format).

    Read as the encoder reads it (:func:`engine.tables.encoding.encode_array`): text numbers by
    Arrow's cast and pandas for unusual cells, text dates by the same templates and pandas format,
    typed numbers, ``date32`` and timestamps as they are. A dictionary array is read once per entry.
    Numbers in a date or datetime column are taken as already in its unit (a stored values file)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.DictionaryArray):
        distinct = parse_values(column, values.dictionary)
        indices = values.indices
        positions = np.asarray(pc.fill_null(indices, 0).to_numpy(zero_copy_only=False), np.intp)
        out = distinct[positions] if distinct.size else np.full(len(values), np.nan)
        out[null_mask(indices)] = np.nan
        return out
    if isinstance(column, NumericColumn):
        return _numbers(values)
    return _instants(column, values)


def raw_values(
    column: ValueColumn, values: pa.Array | pa.ChunkedArray, codes: npt.NDArray[np.integer]
) -> FloatArray:
    """:func:`parse_values`, then NaN wherever ``codes`` (the column's codes of the same cells)
    hold the null code: a raw value is missing exactly where the stored code is (a spelling of a
    missing value that reads as a number, ``-1`` say, counts as missing only where the encoder
    made it so)."""
    out = parse_values(column, values)
    if len(out) != len(codes):
        raise ValueError(f"column {column.name!r}: {len(codes)} codes for {len(out)} values")
    if column.null_code is not None:
        out[np.asarray(codes) == column.null_code] = np.nan
    return out


def _numbers(values: pa.Array) -> FloatArray:
    if is_arrow_number(values.type) or pa.types.is_decimal(values.type):
        return _finite(np.array(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)))
    if is_arrow_text(values.type):
        try:
            return _finite(np.array(pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)))
        except pa.ArrowInvalid:
            return _finite(parse_numbers(strip(values)))
    return _finite(as_float(values.to_pandas()))


def _finite(numbers: npt.NDArray[np.floating]) -> FloatArray:
    """Non-finite numbers (``inf``, ``nan`` text) are no value: the encoder refuses them."""
    out = np.asarray(numbers, dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return out


def _instants(column: DateColumn | DatetimeColumn, values: pa.Array) -> FloatArray:
    if is_arrow_number(values.type):
        # Already in the column's unit: a stored values file. (The encoder reads no number as a
        # date, so an upload with numbers in a date column is refused and stores nothing.)
        return _numbers(values)
    if is_arrow_text(values.type):
        stamps = parse_text(strip(values), column.format, _Fallback(column))
    else:
        found = timestamp_micros(values)
        if found is None:
            return column.to_units(values.to_pandas())
        stamps = found
    return _units(stamps, column)


def _units(stamps: np.ndarray, column: DateColumn | DatetimeColumn) -> FloatArray:
    as_unit = np.asarray(stamps).astype(f"datetime64[{column.unit}]")
    out = as_unit.view(np.int64).astype(np.float64)
    out[np.isnat(as_unit)] = np.nan
    return out


class _Fallback:
    """The cells no fixed-width template reads, as the column's own pandas parser reads them
    (``to_units``), back as instants at the column's unit (all :func:`_units` keeps)."""

    def __init__(self, column: DateColumn | DatetimeColumn) -> None:
        self._column = column

    def __call__(self, texts: list[str]) -> np.ndarray:
        units = self._column.to_units(pd.Series(texts, dtype=object))
        missing = np.isnan(units)
        whole = np.where(missing, 0, units).astype(np.int64)
        stamps = whole.astype(f"datetime64[{self._column.unit}]").astype("datetime64[us]")
        stamps[missing] = np.datetime64("NaT")
        return stamps


def arrow_values(table: pa.Table | pa.RecordBatch, columns: Sequence[ValueColumn]) -> pa.Table:
    """``columns`` of a decoded table (or batch) as float64 columns in their units."""
    return pa.table(
        {
            column.name: pa.array(parse_values(column, table.column(column.name)), from_pandas=True)
            for column in columns
        }
    )
