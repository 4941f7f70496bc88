"""Encoding text columns (CSV cells, Parquet strings) in Arrow, whole arrays at a time.

The pandas encoders of :mod:`engine.columns` call Python per value (``str.strip``,
``pd.to_numeric`` on objects); here the common cells are handled by Arrow kernels and only the
unusual ones fall back to the very same Python code, so every cell gets exactly the code the
pandas encoders give it (same reasons, hence the same refusal messages):

* stripping trims the ASCII characters Python counts as whitespace; a cell that is not all
  ASCII is stripped by Python's ``str.strip`` (it knows the Unicode spaces);
* numbers are parsed by Arrow's cast (correctly rounded), whose finite numbers are exactly the
  plain decimal or exponent notation (``12``, ``+5``, ``-2.50``, ``1e3``, ``.5``; pinned by
  tests/engine/test_arrow_text.py) that ``pd.to_numeric`` reads the same way. When the cast
  refuses a cell, only the cells in that notation are cast and the others (missing-value
  spellings, garbage) are parsed by ``pd.to_numeric`` once per distinct text. Text that
  spells infinity or NaN may come out as either; every caller refuses a non-finite number as
  unparseable, whichever it is;
* categories are matched exactly with ``index_in``; boolean spellings are lowered in Arrow for
  ASCII cells and by ``str.lower`` otherwise.

Nothing here keeps or reports a value: callers count the negative codes per reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from engine.columns.base import UNDECLARED, UNPARSEABLE, settle_missing
from engine.columns.categorical import BooleanColumn, CategoricalColumn, CodesColumn, as_float
from engine.columns.numeric import (
    MAX_LOOKUP_SPAN,
    NumericColumn,
    bin_codes,
    bin_codes_compact,
    bins_inside,
)
from engine.domain import narrowest_signed, narrowest_unsigned
from engine.tables.buffers import null_mask

# The ASCII characters for which str.isspace() is true.
ASCII_WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"
_CANONICAL_INT = re.compile(r"(?:0|-?[1-9][0-9]*)\Z")
_PLAIN_NUMBER = r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$"

TextColumn = NumericColumn | CodesColumn | CategoricalColumn | BooleanColumn


def is_arrow_text(kind: pa.DataType) -> bool:
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind))


def encode_text(column: TextColumn, values: pa.Array, missing: Sequence[str]) -> np.ndarray:
    """The codes of a string array, exactly as ``column.encode`` gives them for its values.

    Missing values only change refused codes, so the spellings are looked up in the cells
    refused by the parse (all of them in clean data: none).
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(column, CategoricalColumn):
        found = pc.index_in(values, value_set=pa.array(column.categories, type=values.type))
        if not found.null_count:
            return np.asarray(found.to_numpy())  # every cell a declared category (int32)
        codes = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        refused = np.flatnonzero(codes < 0)
        if refused.size:
            absent = missing_rows(values, refused, missing)
            undeclared = len(column.categories) if column.other is not None else UNDECLARED
            codes[refused] = np.where(absent, column.absent_code, undeclared)
        return codes
    if isinstance(column, BooleanColumn):
        stripped = strip(values)
        lowered = lower(stripped)
        trues = _in(lowered, [v.strip().lower() for v in column.true_values])
        falses = _in(lowered, [v.strip().lower() for v in column.false_values])
        codes = np.where(trues, 1, np.where(falses, 0, UNPARSEABLE)).astype(np.int64)
        return settle_missing(codes, missing_mask(values, stripped, missing), column.absent_code)
    if isinstance(column, CodesColumn):
        plain = _plain_codes(values, column.size)
        if plain is not None:
            return plain
    try:
        # Arrow's cast refuses any whitespace, so when it reads every cell none needed stripping.
        numbers = _as_numpy(pc.cast(values, pa.float64()))
    except pa.ArrowInvalid:
        found = _cast_without_missing(values, missing)
        numbers = parse_numbers(strip(values)) if found is None else found
    if isinstance(column, NumericColumn):
        codes = bin_codes_compact(numbers, column.edges, column.clip)
    else:
        codes = column.codes_of(numbers)
    if codes.dtype.kind == "u":
        return codes  # no code refused
    refused = np.flatnonzero(codes < 0)
    if refused.size:
        absent = missing_rows(values, refused, missing)
        codes[refused[absent]] = column.absent_code
    return codes


def _cast_without_missing(values: pa.Array, missing: Sequence[str]) -> np.ndarray | None:
    """The numbers of a string array whose cells the cast refuses only because some are
    missing-value spellings (``""`` in a CSV with empty cells), else None.

    A cell written exactly as a spelling that is no finite number becomes null (NaN), which is
    what ``pd.to_numeric`` reads it as (no finite number); every other cell is cast as usual.
    """
    spellings = non_numbers(tuple(missing))
    if not spellings:
        return None
    blank = pc.is_in(values, value_set=pa.array(spellings, type=values.type))
    try:
        return _as_numpy(pc.cast(pc.if_else(blank, None, values), pa.float64()))
    except pa.ArrowInvalid:
        return None


@lru_cache(maxsize=256)
def non_numbers(spellings: tuple[str, ...]) -> list[str]:
    """The spellings ``pd.to_numeric`` reads as no finite number."""
    numbers = as_float(pd.Series(list(spellings), dtype=object))
    return [s for s, number in zip(spellings, numbers, strict=True) if not np.isfinite(number)]


def _plain_codes(values: pa.Array, size: int) -> np.ndarray | None:
    """The codes when every cell is a decimal integer in ``0..size-1`` (as the narrowest
    unsigned integers), else None. Arrow's integer cast reads the decimal integers (optional
    sign, no whitespace, no point), which ``pd.to_numeric`` reads as the same number, and
    hexadecimal ``0x10``, which pandas does not read (so text with an ``x`` is left to the
    general path); it refuses the whole array otherwise, and the general path decides each
    cell."""
    if values.null_count or _has_hex_marker(values):
        return None
    kind = narrowest_unsigned(size)
    try:
        codes = np.asarray(pc.cast(values, pa.from_numpy_dtype(kind)).to_numpy())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if codes.size and int(codes.max()) >= size:
        return None
    return codes


def _has_hex_marker(values: pa.Array) -> bool:
    """Whether any cell of a string array holds an ``x`` or ``X`` (one pass over its bytes)."""
    return bool(((text_bytes(values) | 0x20) == ord("x")).any())


def text_bytes(values: pa.Array) -> np.ndarray:
    """The UTF-8 bytes of a string array's cells, end to end (a view of its data buffer)."""
    _, offsets_buffer, data = values.buffers()
    if data is None or not len(values):
        return np.zeros(0, dtype=np.uint8)
    kind = np.int64 if pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=kind, count=len(values) + 1 + values.offset)
    start, end = int(offsets[values.offset]), int(offsets[values.offset + len(values)])
    return np.frombuffer(data, dtype=np.uint8, count=end - start, offset=start)


def missing_rows(values: pa.Array, rows: np.ndarray, missing: Sequence[str]) -> np.ndarray:
    """Which of the cells at ``rows`` are missing values."""
    subset = values.take(pa.array(rows))
    return missing_mask(subset, strip(subset), missing)


def is_arrow_number(kind: pa.DataType) -> bool:
    return bool(pa.types.is_integer(kind) or pa.types.is_floating(kind))


def encode_number_array(
    column: TextColumn, values: pa.Array, missing: Sequence[str]
) -> np.ndarray | None:
    """The codes of an integer or float array (Parquet) as ``column.encode`` gives them, or
    None where only the pandas encoder knows (booleans; categories from floats or nulls).

    Nulls and NaN are missing (no spelling applies to a number); categories are matched against
    the integers' decimal text, as ``str(int)`` writes it.
    """
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(column, CategoricalColumn):
        if not pa.types.is_integer(values.type) or values.null_count:
            return None
        return _integer_categories(column, values)
    if isinstance(column, BooleanColumn):
        return None
    if isinstance(column, CodesColumn) and pa.types.is_integer(values.type):
        whole = _integer_codes(values, column.size)
        if whole is not None:
            return whole
    if isinstance(column, NumericColumn):
        return numeric_codes(column, values)
    numbers = np.array(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    absent = np.isnan(numbers)  # nulls arrive as NaN
    return settle_missing(column.codes_of(numbers), absent, column.absent_code)


def numeric_codes(column: NumericColumn, values: pa.Array) -> np.ndarray:
    """The codes of an integer or float array in a numeric column: nulls and NaN are missing.

    When every present number is inside the bounds (the usual case), the codes come in the
    narrowest unsigned type that holds the column's codes, the null code included."""
    edges, clip = column.edges, column.clip
    if not values.null_count and pa.types.is_integer(values.type):
        inside = bins_inside(values.to_numpy(), edges, clip=clip)  # a view: no nulls
        if inside is not None:
            return inside
    if values.null_count and column.nullable and pa.types.is_floating(values.type):
        # Nulls filled with the lowest edge in Arrow (one pass, and the numbers a view of its
        # result), binned, then given the null code, which the type holds. A NaN fails
        # bins_inside: the path below gives it the null code too.
        inside = bins_inside(pc.fill_null(values, edges[0]).to_numpy(), edges, clip=clip)
        if inside is not None:
            inside[null_mask(values)] = column.absent_code
            return inside
    numbers = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    inside = bins_inside(numbers, edges, clip=clip)  # fails on a NaN (a null)
    if inside is not None:
        return inside
    absent = np.isnan(numbers)  # nulls arrive as NaN
    if column.nullable and absent.any():
        inside = bins_inside(np.where(absent, edges[0], numbers), edges, clip=clip)
        if inside is not None:
            inside[absent] = column.absent_code  # the null code, which the type holds
            return inside
    bounds = np.asarray(edges, dtype=np.float64)
    return settle_missing(bin_codes(numbers, bounds, clip), absent, column.absent_code)


def _integer_codes(values: pa.Array, size: int) -> np.ndarray | None:
    """Integers (no nulls) that are all codes ``0..size-1``, in the narrowest unsigned type;
    None otherwise (the general path gives each its reason)."""
    if values.null_count or not len(values):
        return None
    integers = values.to_numpy()  # no nulls: a view of the Arrow buffer
    low, high = pc.min_max(values).values()
    if low.as_py() < 0 or high.as_py() >= size:
        return None
    return np.asarray(integers).astype(narrowest_unsigned(size))


def _integer_categories(column: CategoricalColumn, values: pa.Array) -> np.ndarray:
    """Codes of integers (no nulls) matched against the categories as ``str(int)`` writes them:
    only a category in that canonical form (``"7"``, ``"-3"``; not ``"07"``) can match."""
    if pa.types.is_uint64(values.type):
        return encode_text(column, pc.cast(values, pa.string()), ())
    undeclared = len(column.categories) if column.other is not None else UNDECLARED
    table = _integer_category_table(column.categories, undeclared)
    if table is not None and len(values):
        low, codes_of = table
        integers = np.asarray(values.to_numpy())  # no nulls: a view
        if integers.min() >= low and integers.max() < low + len(codes_of):
            indices = integers.astype(np.intp, copy=False)
            return codes_of.take(indices - low if low else indices)
    positions = [i for i, c in enumerate(column.categories) if _CANONICAL_INT.match(c)]
    numbers = [int(column.categories[i]) for i in positions]
    inside = [(p, n) for p, n in zip(positions, numbers, strict=True) if -(2**63) <= n < 2**63]
    value_set = pa.array([n for _, n in inside], type=pa.int64())
    found = pc.index_in(pc.cast(values, pa.int64()), value_set=value_set)
    where = np.asarray(pc.fill_null(found, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
    lookup = np.array([p for p, _ in inside] + [-1], dtype=np.int64)
    codes = lookup[where]  # -1 (not found) picks the trailing -1
    codes[codes < 0] = undeclared  # an integer is never a missing value
    return codes


@lru_cache(maxsize=256)
def _integer_category_table(
    categories: tuple[str, ...], undeclared: int
) -> tuple[int, np.ndarray] | None:
    """For categories whose canonical integers (``str(int)``) lie at most
    :data:`~engine.columns.numeric.MAX_LOOKUP_SPAN` apart: the lowest, and the code of each
    integer from it to the highest (``undeclared`` for an integer that is no category); None
    when no category is such an integer or they lie further apart."""
    integers = [(int(c), i) for i, c in enumerate(categories) if _CANONICAL_INT.match(c)]
    if not integers:
        return None
    low = min(n for n, _ in integers)
    high = max(n for n, _ in integers)
    if high - low > MAX_LOOKUP_SPAN:
        return None
    # A refusal code is negative: the narrowest signed type then (one byte for up to 127
    # categories, not eight: a batch's codes are written, counted and compacted at that width).
    kind = (
        narrowest_signed(len(categories))
        if undeclared < 0
        else narrowest_unsigned(len(categories) + 1)
    )
    table = np.full(high - low + 1, undeclared, dtype=kind)
    for number, position in integers:
        table[number - low] = position
    table.flags.writeable = False
    return low, table


def numbers_of(values: pa.Array, missing: Sequence[str]) -> np.ndarray:
    """The numbers of a string or number array as float64, NaN where a cell is missing (a null,
    or a missing-value spelling after stripping) or no finite number: what
    ``as_float`` with the missing mask gives, in Arrow (discovery counts columns with it)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if is_arrow_number(values.type):
        return _as_numpy(pc.cast(values, pa.float64()))
    if not is_arrow_text(values.type):
        raise TypeError("numbers are read from text or number arrays")
    try:
        numbers = _as_numpy(pc.cast(values, pa.float64()))
    except pa.ArrowInvalid:
        found = _cast_without_missing(values, missing)
        numbers = parse_numbers(strip(values)) if found is None else found
    if missing:
        numbers[missing_mask(values, strip(values), missing)] = np.nan
    numbers[~np.isfinite(numbers)] = np.nan
    return numbers


def strip(values: pa.Array) -> pa.Array:
    """Each cell as Python's ``str.strip`` leaves it (nulls stay null)."""
    trimmed = pc.utf8_trim(values, characters=ASCII_WHITESPACE)
    unusual = pc.invert(pc.fill_null(pc.string_is_ascii(trimmed), True))
    if not pc.any(unusual).as_py():
        return trimmed
    rows = pc.filter(trimmed, unusual).to_pylist()
    fixed = pa.array([v.strip() for v in rows], type=values.type)
    return pc.replace_with_mask(trimmed, unusual, fixed)


def lower(values: pa.Array) -> pa.Array:
    """Each cell as Python's ``str.lower`` leaves it (Arrow for ASCII cells)."""
    other = pc.invert(pc.fill_null(pc.string_is_ascii(values), True))
    lowered = pc.ascii_lower(values)
    if not pc.any(other).as_py():
        return lowered
    rows = pc.filter(values, other).to_pylist()
    fixed = pa.array([v.lower() for v in rows], type=values.type)
    return pc.replace_with_mask(lowered, other, fixed)


def missing_mask(values: pa.Array, stripped: pa.Array, missing: Sequence[str]) -> np.ndarray:
    """Nulls, and cells equal after stripping to a missing-value spelling."""
    absent = null_mask(values)
    if missing:
        absent |= _in(stripped, list(missing))
    return absent


def parse_numbers(stripped: pa.Array) -> np.ndarray:
    """Each stripped cell as a number (NaN if it is none); finite numbers exactly as
    ``pd.to_numeric(..., errors="coerce")`` reads them."""
    try:
        return _as_numpy(pc.cast(stripped, pa.float64()))
    except pa.ArrowInvalid:
        pass
    plain = pc.fill_null(pc.match_substring_regex(stripped, _PLAIN_NUMBER), False)
    parsed = pc.cast(pc.if_else(plain, stripped, None), pa.float64())
    numbers = np.asarray(
        parsed.to_numpy(zero_copy_only=False), dtype=np.float64
    ).copy()  # nulls arrive as NaN
    rest = pc.and_(pc.invert(plain), pc.is_valid(stripped))
    if pc.any(rest).as_py():
        # Unusual text (inf, nan, spellings, garbage): pandas' own parse, once per distinct text.
        odd = pc.filter(stripped, rest)
        distinct = pc.unique(odd)
        values = as_float(pd.Series(distinct.to_pylist(), dtype=object))
        where = pc.index_in(odd, value_set=distinct).to_numpy(zero_copy_only=False)
        numbers[_numpy_bool(rest)] = values[where]
    return numbers


def _in(values: pa.Array, spellings: list[str]) -> np.ndarray:
    found = pc.is_in(values, value_set=pa.array(spellings, type=values.type))
    return _numpy_bool(pc.fill_null(found, False))


def _as_numpy(numbers: pa.Array) -> np.ndarray:
    """A float array as a writable float64 array; nulls become NaN."""
    return np.array(numbers.to_numpy(zero_copy_only=False), dtype=np.float64)


def _numpy_bool(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=bool)
