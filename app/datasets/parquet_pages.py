"""What decoding a Parquet file will cost, from its page headers, before anything is decoded.

A Parquet footer's sizes are claims of whoever wrote the file. The page headers are what the
reader actually uses: it allocates each page's ``uncompressed_page_size`` and decompresses into
it. So every page header of every column chunk the reader may touch is read here (Thrift compact
protocol) and checked against the service's own accounting
before pyarrow sees the file:

* every page is at most :data:`MAX_PAGE_BYTES` compressed and uncompressed;
* a page holds no more bytes than its values could legitimately take: ``uncompressed ≤ values ×
  (max_cell_bytes + 16) + 4096`` (a cell over ``max_cell_bytes`` is refused anyway);
* the pages tile the column chunk's byte range exactly, so the reader meets no page that was not
  checked here.

From the verified headers :func:`plan_parquet_read` derives, per row group, the memory the reader
holds for pages at once and the largest batch of rows that fits the decode budget.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

# Writers default to 1 MiB pages (pyarrow, parquet-mr); anything past this is refused.
MAX_PAGE_BYTES = 64 * 1024 * 1024
# Headers carry optional min/max statistics; they are read from a window that grows to this.
MAX_HEADER_BYTES = 1024 * 1024
FIRST_HEADER_WINDOW = 16 * 1024
# A file with more pages than this is refused (each header costs a few microseconds to check).
MAX_PAGES = 2_000_000
PAGE_SLACK_BYTES = 4096
# Text columns whose dictionaries are at most this long are read as Arrow dictionaries.
MAX_DICTIONARY_READ_ENTRIES = 16_384
CELL_OVERHEAD_BYTES = 16
# Parquet's fixed-width physical types (the footer's schema, which the reader decodes by):
# each value decodes into at most this many bytes of Arrow (decimal128 from INT32 or INT64 is
# the widest; INT96 becomes an 8-byte timestamp, BOOLEAN a bit).
FIXED_WIDTH_TYPES = frozenset({"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE"})
FIXED_VALUE_BYTES = 32

_DATA_PAGE = 0
_DICTIONARY_PAGE = 2
_DATA_PAGE_V2 = 3


class ParquetRefused(Exception):
    """The file is refused before decoding. ``message`` is safe to show the uploader."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class PageHeader:
    page_type: int
    uncompressed: int
    compressed: int
    values: int


@dataclass(frozen=True)
class ChunkCost:
    """The verified page sizes of one column chunk."""

    dictionary_bytes: int
    dictionary_entries: int
    largest_page_bytes: int
    largest_compressed_bytes: int
    bytes_per_value: float


@dataclass(frozen=True)
class RowGroupPlan:
    index: int
    rows: int
    pages_bytes: int
    batch_rows: int


@dataclass(frozen=True)
class ReadPlan:
    """Per row group, what the reader holds and its batch size; which columns stay dictionaries."""

    row_groups: list[RowGroupPlan]
    dictionary_columns: frozenset[int]


def read_page_header(handle: BinaryIO, position: int, available: int) -> tuple[PageHeader, int]:
    """The page header at ``position`` and its length in bytes.

    Reads at most ``available`` bytes (the rest of the column chunk), in a window that grows
    from :data:`FIRST_HEADER_WINDOW` to :data:`MAX_HEADER_BYTES` only when a header is longer.
    """
    window = FIRST_HEADER_WINDOW
    while True:
        size = min(window, available)
        handle.seek(position)
        raw = handle.read(size)
        try:
            return _parse_page_header(raw)
        except EOFError:
            if size >= available or size >= MAX_HEADER_BYTES:
                raise ParquetRefused(
                    "the Parquet file could not be read (a page header is truncated or too long)"
                ) from None
            window *= 8


def _parse_page_header(raw: bytes) -> tuple[PageHeader, int]:
    try:
        fields, end = _read_struct(raw, 0, _PAGE_HEADER_FIELDS)
    except EOFError:  # the window ran out of bytes: the caller may widen it
        raise
    except (_Malformed, RecursionError):
        raise ParquetRefused("the Parquet file could not be read (malformed page header)") from None
    return page_header_from_fields(fields), end


def page_header_from_fields(fields: dict[int, Any]) -> PageHeader:
    """The :class:`PageHeader` of a page header's decoded fields (1: type, 2: uncompressed and
    3: compressed size, 5/7/8: the data or dictionary page header whose field 1 is the number
    of values), or :class:`ParquetRefused` when they do not make one."""
    page_type = fields.get(1)
    uncompressed = fields.get(2)
    compressed = fields.get(3)
    if not isinstance(page_type, int) or not isinstance(uncompressed, int):
        raise ParquetRefused("the Parquet file could not be read (malformed page header)")
    if not isinstance(compressed, int) or uncompressed < 0 or compressed < 0:
        raise ParquetRefused("the Parquet file could not be read (malformed page header)")
    values = 0
    for nested in (5, 7, 8):
        entry = fields.get(nested)
        if isinstance(entry, dict) and isinstance(entry.get(1), int):
            values = max(values, int(entry[1]))
    return PageHeader(page_type, uncompressed, compressed, values)


# Thrift's compact protocol (the encoding of Parquet's page headers), read directly from the
# bytes: the Apache Thrift library's Python reader cost ~25 µs a header (a call per byte); this
# reads the same fields and refuses the same malformed input (tests/app/test_parquet_pages.py
# compares the two on real and mutated headers).
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = range(9)
_LIST, _SET, _MAP, _STRUCT, _UUID = 9, 10, 11, 12, 13
# PageHeader: type, uncompressed and compressed sizes; the number of values of a data page,
# a dictionary page and a v2 data page (field 1 of each).
_PAGE_HEADER_FIELDS: dict[int, dict[int, None] | None] = {
    1: None,
    2: None,
    3: None,
    5: {1: None},
    7: {1: None},
    8: {1: None},
}
_MAX_VARINT_BYTES = 10


class _Malformed(Exception):
    """Bytes that are no valid compact-protocol struct."""


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    """An unsigned varint at ``at``: its value and the position after it."""
    if at < len(raw) and raw[at] < 0x80:  # one byte: most sizes and field ids
        return raw[at], at + 1
    result = shift = 0
    for position in range(at, at + _MAX_VARINT_BYTES):
        if position >= len(raw):
            raise EOFError
        byte = raw[position]
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position + 1
        shift += 7
    raise _Malformed


def _zigzag(raw: bytes, at: int) -> tuple[int, int]:
    value, at = _varint(raw, at)
    return (value >> 1) ^ -(value & 1), at


def _read_struct(
    raw: bytes, at: int, wanted: Mapping[int, Mapping[int, None] | None]
) -> tuple[dict[int, Any], int]:
    """The wanted i32 fields of the struct at ``at`` (``wanted[id]`` a dict: a nested struct
    with those fields), everything else skipped; and the position after the struct."""
    found: dict[int, Any] = {}
    field_id = 0
    end = len(raw)
    while True:
        if at >= end:
            raise EOFError
        head = raw[at]
        at += 1
        kind = head & 0x0F
        if kind == _STOP:
            return found, at
        if head >> 4:
            field_id += head >> 4
        else:
            field_id, at = _zigzag(raw, at)
        nested = wanted.get(field_id, ...)
        if kind == _I32:
            value, at = _varint(raw, at)
            if nested is None:
                found[field_id] = (value >> 1) ^ -(value & 1)
        elif kind == _STRUCT and isinstance(nested, Mapping):
            found[field_id], at = _read_struct(raw, at, nested)
        else:
            at = _skip(raw, at, kind, MAX_SKIP_DEPTH)


MAX_SKIP_DEPTH = 16


def _skip(raw: bytes, at: int, kind: int, depth: int, *, element: bool = False) -> int:
    """The position after a value of compact type ``kind`` at ``at``; ``element``: a value of
    a list, set or map, where a boolean is a byte of its own (in a struct its field header
    holds it). Binary values are skipped as bytes (Parquet statistics hold raw bytes)."""
    if depth <= 0:
        raise _Malformed  # nested too deeply
    if kind in (_TRUE, _FALSE):
        return _need(raw, at + 1) if element else at
    if kind == _BYTE:
        return _need(raw, at + 1)
    if kind in (_I16, _I32, _I64):
        return _varint(raw, at)[1]
    if kind == _DOUBLE:
        return _need(raw, at + 8)
    if kind == _UUID:
        return _need(raw, at + 16)
    if kind == _BINARY:
        size, at = _varint(raw, at)
        if size > MAX_HEADER_BYTES:
            raise _Malformed
        return _need(raw, at + size)
    if kind == _STRUCT:
        return _skip_fields(raw, at, depth)
    if kind in (_LIST, _SET):
        head = _byte(raw, at)
        at += 1
        size, inner = head >> 4, head & 0x0F
        if inner > _UUID:
            raise _Malformed
        if size == 15:
            size, at = _varint(raw, at)
        if size > MAX_HEADER_BYTES:
            raise _Malformed
        for _ in range(size):
            at = _skip(raw, at, inner, depth - 1, element=True)
        return at
    if kind == _MAP:
        size, at = _varint(raw, at)
        if size > MAX_HEADER_BYTES:
            raise _Malformed
        if not size:
            return at
        head = _byte(raw, at)
        at += 1
        if head >> 4 > _UUID or head & 0x0F > _UUID:
            raise _Malformed
        for _ in range(size):
            at = _skip(raw, at, head >> 4, depth - 1, element=True)
            at = _skip(raw, at, head & 0x0F, depth - 1, element=True)
        return at
    raise _Malformed  # a stop where a value belongs, or no such type


def _skip_fields(raw: bytes, at: int, depth: int) -> int:
    """The position after the fields and stop of a struct at ``depth``: :func:`_skip` field by
    field, with the fields of page statistics (byte strings, integers, booleans) skipped here
    rather than by a call each (the page check walks every header of an upload)."""
    end = len(raw)
    while True:
        if at >= end:
            raise EOFError
        head = raw[at]
        at += 1
        kind = head & 0x0F
        if kind == _STOP:
            return at
        if not head >> 4:
            at = _varint(raw, at)[1]  # the field id, a zigzag i16
        if depth <= 1:
            raise _Malformed  # nested too deeply (what _skip at depth - 1 refuses)
        if kind == _BINARY:
            size, at = _varint(raw, at)
            if size > MAX_HEADER_BYTES:
                raise _Malformed
            at += size
            if at > end:
                raise EOFError
        elif kind in (_I16, _I32, _I64):
            at = _varint(raw, at)[1]
        elif kind not in (_TRUE, _FALSE):  # a boolean field is all in its header
            at = _skip(raw, at, kind, depth - 1)


def _byte(raw: bytes, at: int) -> int:
    if at >= len(raw):
        raise EOFError
    return raw[at]


def _need(raw: bytes, end: int) -> int:
    if end > len(raw):
        raise EOFError
    return end


def chunk_cost(
    handle: BinaryIO, start: int, length: int, *, max_cell_bytes: int, pages_seen: list[int]
) -> ChunkCost:
    """Walk every page header of a column chunk (``length`` bytes from ``start``) and check it."""
    if start < 0 or length < 0:
        raise ParquetRefused("the Parquet file could not be read (bad column chunk offsets)")
    per_value_cap = max_cell_bytes + CELL_OVERHEAD_BYTES
    dictionary = entries = largest = largest_compressed = 0
    density = 0.0
    position, end = start, start + length
    while position < end:
        pages_seen[0] += 1
        if pages_seen[0] > MAX_PAGES:
            raise ParquetRefused(f"Parquet files with more than {MAX_PAGES} pages are refused")
        header, header_length = read_page_header(handle, position, end - position)
        if max(header.uncompressed, header.compressed) > MAX_PAGE_BYTES:
            raise ParquetRefused(
                f"Parquet pages over {MAX_PAGE_BYTES // (1024 * 1024)} MiB are refused; write "
                "the file with smaller pages (e.g. pyarrow's data_page_size)"
            )
        if header.uncompressed > header.values * per_value_cap + PAGE_SLACK_BYTES:
            raise ParquetRefused(f"the Parquet file holds cells longer than {max_cell_bytes} bytes")
        if header.page_type == _DICTIONARY_PAGE:
            dictionary += header.uncompressed
            entries += header.values
        elif header.page_type in (_DATA_PAGE, _DATA_PAGE_V2):
            largest = max(largest, header.uncompressed)
            largest_compressed = max(largest_compressed, header.compressed)
            density = max(density, header.uncompressed / max(1, header.values))
        position += header_length + header.compressed
    if position != end:
        raise ParquetRefused("the Parquet file could not be read (pages overrun a column chunk)")
    return ChunkCost(dictionary, entries, largest, largest_compressed, density)


def plan_parquet_read(
    path: Any,
    metadata: Any,
    columns: Sequence[int],
    *,
    text_columns: Collection[int],
    max_cell_bytes: int,
    stream_buffer_bytes: int,
    pages_budget: int,
    batch_budget: int,
    cell_work_bytes: int,
    max_batch_rows: int,
    max_dictionary_entries: int,
) -> ReadPlan:
    """Check every page of the given columns, choose how text is read, size each batch.

    A text column is read as an Arrow dictionary (one copy of each distinct value, however many
    rows use it) when none of its chunks' dictionaries holds more than
    :data:`MAX_DICTIONARY_READ_ENTRIES` entries; otherwise its values are decoded into plain
    strings, batch by batch (pyarrow's dictionary reader keeps a hash table of the dictionary that
    costs far more than the page itself: 294 MiB for the 27 MB dictionary of 2,500,000 values).

    ``pages_budget`` bounds what the reader holds for pages of one row group at once: per
    column its read buffer, its decoded dictionary (:func:`dictionary_cost`), and its largest page
    compressed and uncompressed. ``batch_budget`` bounds a batch: rows × Σ (the column's largest
    bytes per value once decoded + ``cell_work_bytes`` for converting and encoding the cell). A
    column's dictionaries together hold at most ``max_dictionary_entries`` entries (the caller
    encodes each entry of a dictionary it reads as such once).
    """
    pages_seen = [0]
    entries = dict.fromkeys(columns, 0)
    costs: list[list[ChunkCost]] = []
    fixed_width = [
        metadata.schema.column(position).physical_type in FIXED_WIDTH_TYPES for position in columns
    ]
    with open(path, "rb") as handle:
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            group_costs = []
            for position in columns:
                chunk = group.column(position)
                start = chunk.data_page_offset
                dictionary_offset = chunk.dictionary_page_offset
                if chunk.has_dictionary_page and dictionary_offset and dictionary_offset > 0:
                    start = min(start, dictionary_offset)
                cost = chunk_cost(
                    handle,
                    start,
                    chunk.total_compressed_size,
                    max_cell_bytes=max_cell_bytes,
                    pages_seen=pages_seen,
                )
                entries[position] += cost.dictionary_entries
                if entries[position] > max_dictionary_entries:
                    raise ParquetRefused(
                        f"column {chunk.path_in_schema!r}: its Parquet dictionaries hold more "
                        f"than {max_dictionary_entries} entries, more than the file has rows; "
                        "write the file without unused dictionary entries, or upload CSV"
                    )
                group_costs.append(cost)
            costs.append(group_costs)
    dictionary_columns = frozenset(
        position
        for j, position in enumerate(columns)
        if position in text_columns
        and all(group[j].dictionary_entries <= MAX_DICTIONARY_READ_ENTRIES for group in costs)
    )
    plans = []
    for index, group_costs in enumerate(costs):
        held = 0
        row_bytes = 0.0
        for position, cost, fixed in zip(columns, group_costs, fixed_width, strict=True):
            as_dictionary = position in dictionary_columns
            held += (
                stream_buffer_bytes
                + dictionary_cost(cost, as_dictionary=as_dictionary)
                + cost.largest_page_bytes
                + cost.largest_compressed_bytes
            )
            per_value = cost.bytes_per_value
            if cost.dictionary_entries and not as_dictionary:
                # Each row becomes a copy of its value: at most the whole dictionary page long,
                # and for a fixed-width type the width of the Arrow value it decodes into.
                longest = min(max_cell_bytes, cost.dictionary_bytes)
                if fixed:
                    longest = min(longest, FIXED_VALUE_BYTES)
                per_value = max(per_value, longest + CELL_OVERHEAD_BYTES)
            row_bytes += per_value + cell_work_bytes
        if held > pages_budget:
            raise ParquetRefused(
                f"a Parquet row group needs {held // (1024 * 1024)} MiB of pages at once; the "
                f"limit is {pages_budget // (1024 * 1024)} MiB: write the file with smaller "
                "row groups, smaller pages or fewer columns, or upload CSV"
            )
        batch_rows = int(max(1, min(max_batch_rows, batch_budget // max(1.0, row_bytes))))
        rows = metadata.row_group(index).num_rows
        plans.append(RowGroupPlan(index, rows, held, batch_rows))
    return ReadPlan(plans, dictionary_columns)


def dictionary_cost(cost: ChunkCost, *, as_dictionary: bool) -> int:
    """The bytes pyarrow holds while it decodes a chunk's dictionary (an upper bound).

    Fitted here on pyarrow 26 to dictionaries of 100,000 to 2,500,000 values of 7 to 200 bytes
    (peak of the Arrow memory pool while reading one column): read as a dictionary it held up to
    5.4 × the page's bytes + 83 bytes per entry, decoded to plain strings up to 2.8 × the bytes
    + 17 bytes per entry; the constants below round both up.
    """
    if as_dictionary:
        return 6 * cost.dictionary_bytes + 128 * cost.dictionary_entries
    return 3 * cost.dictionary_bytes + 48 * cost.dictionary_entries
