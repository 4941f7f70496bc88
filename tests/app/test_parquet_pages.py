"""The page-header reader of app/datasets/parquet_pages.py reads what the Apache Thrift
library's compact protocol reads (the reader it replaced, kept here as the reference): the same
fields and header length from real headers, and the same refusal (malformed, or truncated: the
window is widened) for mutated and random bytes."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from thrift.protocol.TCompactProtocol import TCompactProtocol
from thrift.Thrift import TType
from thrift.transport.TTransport import TFileObjectTransport

from app.datasets.parquet_pages import (
    MAX_HEADER_BYTES,
    MAX_SKIP_DEPTH,
    PageHeader,
    ParquetRefused,
    _parse_page_header,
    page_header_from_fields,
)


def thrift_parse_page_header(raw: bytes) -> tuple[PageHeader, int]:
    buffer = io.BytesIO(raw)
    protocol = TCompactProtocol(
        TFileObjectTransport(buffer),
        string_length_limit=MAX_HEADER_BYTES,
        container_length_limit=MAX_HEADER_BYTES,
    )
    try:
        fields = _thrift_read_struct(protocol, {1: None, 2: None, 3: None, 5: {1}, 7: {1}, 8: {1}})
    except EOFError:  # the transport ran out of bytes: the caller may widen the window
        raise
    except Exception:  # malformed Thrift: TProtocolException, struct.error, RecursionError, ...
        raise ParquetRefused("the Parquet file could not be read (malformed page header)") from None
    # The same checks of the decoded fields: what is compared is how they are decoded.
    return page_header_from_fields(fields), buffer.tell()


def _thrift_read_struct(
    protocol: TCompactProtocol, wanted: dict[int, set[int] | None]
) -> dict[int, Any]:
    """The wanted i32 fields of a struct (one level of nested structs); everything else skipped."""
    found: dict[int, Any] = {}
    protocol.readStructBegin()
    while True:
        _, field_type, field_id = protocol.readFieldBegin()
        if field_type == TType.STOP:
            break
        nested = wanted.get(field_id, ...)
        if field_type == TType.I32 and nested is None:
            found[field_id] = protocol.readI32()
        elif field_type == TType.STRUCT and isinstance(nested, set):
            found[field_id] = _thrift_read_struct(protocol, dict.fromkeys(nested))
        else:
            _thrift_skip(protocol, field_type, MAX_SKIP_DEPTH)
        protocol.readFieldEnd()
    protocol.readStructEnd()
    return found


def _thrift_skip(protocol: TCompactProtocol, field_type: int, depth: int) -> None:
    """Thrift's ``skip``, but binary fields are skipped as bytes (its ``skip`` decodes them as
    UTF-8, and Parquet statistics hold raw bytes)."""
    if depth <= 0:
        raise ValueError("Thrift structure nested too deeply")
    if field_type == TType.STRING:
        protocol.readBinary()
    elif field_type == TType.STRUCT:
        protocol.readStructBegin()
        while True:
            _, inner, _ = protocol.readFieldBegin()
            if inner == TType.STOP:
                break
            _thrift_skip(protocol, inner, depth - 1)
            protocol.readFieldEnd()
        protocol.readStructEnd()
    elif field_type in (TType.LIST, TType.SET):
        element, size = protocol.readListBegin()
        for _ in range(size):
            _thrift_skip(protocol, element, depth - 1)
        protocol.readListEnd()
    elif field_type == TType.MAP:
        key, value, size = protocol.readMapBegin()
        for _ in range(size):
            _thrift_skip(protocol, key, depth - 1)
            _thrift_skip(protocol, value, depth - 1)
        protocol.readMapEnd()
    else:
        protocol.skip(field_type)  # scalars


def _outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return "read", parse(raw)
    except EOFError:
        return "truncated", None
    except ParquetRefused as refused:
        return "refused", refused.message


def _headers(path: Path) -> list[bytes]:
    """The bytes from each page header of a Parquet file to the end of its column chunk."""
    metadata = pq.ParquetFile(path).metadata
    data = path.read_bytes()
    found = []
    for g in range(metadata.num_row_groups):
        for c in range(metadata.num_columns):
            chunk = metadata.row_group(g).column(c)
            start = chunk.data_page_offset
            if chunk.has_dictionary_page and chunk.dictionary_page_offset:
                start = min(start, chunk.dictionary_page_offset)
            end = start + chunk.total_compressed_size
            position = start
            while position < end:
                header, length = _parse_page_header(data[position : position + 4096])
                found.append(data[position : position + length + 64])
                position += length + header.compressed
    return found


@pytest.fixture(scope="module")
def real_headers(tmp_path_factory: pytest.TempPathFactory) -> list[bytes]:
    rng = np.random.default_rng(11)
    n = 20_000
    table = pa.table(
        {
            "i": rng.integers(0, 1000, n),
            "f": np.where(rng.random(n) < 0.1, np.nan, rng.normal(size=n)),
            "s": pa.array([f"v{k % 300}" for k in range(n)]),
            "b": rng.random(n) < 0.5,
            "t": pa.array([None if k % 7 == 0 else f"text {k}" for k in range(n)]),
        }
    )
    headers = []
    folder = tmp_path_factory.mktemp("pages")
    for k, options in enumerate(
        [
            {},
            {"data_page_version": "2.0", "compression": "zstd"},
            {"write_statistics": False, "use_dictionary": False},
            {"write_page_checksum": True, "data_page_size": 4096},
        ]
    ):
        path = folder / f"t{k}.parquet"
        pq.write_table(table, path, row_group_size=7000, **options)
        headers += _headers(path)
    return headers


def test_real_headers_are_read_alike(real_headers: list[bytes]) -> None:
    assert len(real_headers) > 50
    for raw in real_headers:
        ours = _outcome(_parse_page_header, raw)
        assert ours[0] == "read" and isinstance(ours[1][0], PageHeader)
        assert ours == _outcome(thrift_parse_page_header, raw)
        for cut in range(len(raw)):  # every truncation: the same fields, or a wider window
            assert _outcome(_parse_page_header, raw[:cut]) == _outcome(
                thrift_parse_page_header, raw[:cut]
            )


def test_mutated_and_random_headers_are_refused_alike(real_headers: list[bytes]) -> None:
    rng = random.Random(12)
    cases = []
    for raw in real_headers[:60]:
        for _ in range(60):
            mutated = bytearray(raw)
            for _ in range(rng.randint(1, 4)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            cases.append(bytes(mutated))
    cases += [bytes(rng.randrange(256) for _ in range(rng.randint(0, 80))) for _ in range(3000)]
    # Structures the library reads in its own way: stops with a delta, long field ids, lists of
    # booleans and of unknown types, maps, UUIDs, deep nesting, oversized lengths.
    cases += [
        b"\x15\x00\x15\x02\x15\x02\x10",
        b"\x15\x00\x15\x02\x15\x02\x03\x10\x00",
        b"\x15\x00\x15\x02\x15\x02\x19\x31\x01\x02\x01\x00",
        b"\x15\x00\x15\x02\x15\x02\x19\x0e\x00",
        b"\x15\x00\x15\x02\x15\x02\x19\xfe\x00",
        b"\x15\x00\x15\x02\x15\x02\x19\xf5\x03\x02\x04\x06\x00",
        b"\x15\x00\x15\x02\x15\x02\x1b\x02\x12\x01\x02\x02\x01\x00",
        b"\x15\x00\x15\x02\x15\x02\x1b\x00\x00",
        b"\x15\x00\x15\x02\x15\x02\x1b\x01\xee\x00",
        b"\x15\x00\x15\x02\x15\x02\x1d" + bytes(16) + b"\x00",
        b"\x15\x00\x15\x02\x15\x02" + b"\x1c" * MAX_SKIP_DEPTH + b"\x00" * MAX_SKIP_DEPTH,
        b"\x15\x00\x15\x02\x15\x02" + b"\x1c" * 20 + b"\x00" * 21,
        b"\x15\x00\x15\x02\x15\x02\x18\xff\xff\xff\x7f",
        b"\x15\x00\x15\x02\x15\x02\x19\xf8\xff\xff\xff\x7f",
        b"\x15\x00\x15\x02\x15\x02\x16\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
        b"\x15\x00\x15\x02\x15\x02\x1c\x15\x08\x00\x00",
        b"\x05\x08\x00\x15\x02\x15\x02\x00",
        b"\x15\x04\x15\x02\x15\x02\x2c\x15\x14\x00\x00",
        b"\x15\x04\x15\x02\x15\x02\x2c\x16\x14\x00\x00",
    ]
    for raw in cases:
        assert _outcome(_parse_page_header, raw) == _outcome(thrift_parse_page_header, raw), raw
    assert MAX_HEADER_BYTES > 0


@pytest.mark.parametrize("ignored", [None, "struct", "list", "map"])
def test_the_pages_checked_are_the_stored_columns_after_a_nested_ignored_one(
    tmp_path: Path, ignored: str | None
) -> None:
    # The page check reads a column's pages by its leaf in the footer: a nested column before
    # it has several leaves, so its Arrow field index would point at another column's pages.
    from app.datasets.ingest import IngestLimits, UploadRejected, ingest_table
    from engine.tables.encoding import TableSchema

    rows = 2000
    nested = {
        "struct": pa.array([{"a": 1, "b": "x"}] * rows),
        "list": pa.array([[1, 2]] * rows),
        "map": pa.array([[("k", 1)]] * rows, type=pa.map_(pa.string(), pa.int64())),
    }
    columns: dict[str, Any] = {} if ignored is None else {"nest": nested[ignored]}
    columns["n"] = pa.array(range(rows))
    columns["s"] = pa.array([f"{k:0300d}" for k in range(rows)])  # 300 bytes: over the limit
    path = tmp_path / "table.parquet"
    pq.write_table(pa.table(columns), path, use_dictionary=False)
    entries: list[dict[str, Any]] = [] if ignored is None else [{"name": "nest", "type": "ignore"}]
    schema = TableSchema.from_json(
        {
            "columns": [
                *entries,
                {"name": "n", "type": "numeric", "bins": [0, rows]},
                {"name": "s", "type": "categorical", "categories": ["a"]},
            ]
        }
    )
    limits = IngestLimits(max_columns=10, max_rows=10_000, max_cell_bytes=200)
    with pytest.raises(UploadRejected) as refused:
        ingest_table(path, schema, tmp_path / "codes.arrow", limits)
    assert refused.value.message == "the Parquet file holds cells longer than 200 bytes"
