"""CsvBlocks: the same rows as pyarrow's whole-file reader, parsed on threads where it can."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.tables.csv_blocks import CsvBlocks

NAMES = ["a", "b", "c"]
CONVERT = pacsv.ConvertOptions(column_types=dict.fromkeys(NAMES, pa.string()))


def whole(data: bytes) -> tuple[pa.Table, int]:
    """pyarrow's table reader on the whole file: the rows CsvBlocks must give, and bad rows."""
    bad = [0]

    def skip(_row: object) -> str:
        bad[0] += 1
        return "skip"

    table = pacsv.read_csv(
        io.BytesIO(data),
        read_options=pacsv.ReadOptions(column_names=NAMES, skip_rows=1),
        parse_options=pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=skip),
        convert_options=CONVERT,
    )
    return table, bad[0]


def blocks_of(data: bytes, block_bytes: int) -> tuple[pa.Table, CsvBlocks]:
    blocks = CsvBlocks(io.BytesIO(data), NAMES, convert_options=CONVERT, block_bytes=block_bytes)
    try:
        batches = list(blocks)
    finally:
        blocks.close()
    schema = pa.schema([(name, pa.string()) for name in NAMES])
    return pa.Table.from_batches(batches, schema=schema), blocks


def assert_same(data: bytes, block_bytes: int) -> CsvBlocks:
    expected, bad = whole(data)
    got, blocks = blocks_of(data, block_bytes)
    assert got.to_pylist() == expected.to_pylist()
    assert blocks.bad_rows == bad
    return blocks


def plain(rows: int, *, newline: bytes = b"\n") -> bytes:
    lines = [b"a,b,c"] + [b"%d,x%d,%d" % (i, i % 7, i * 3) for i in range(rows)]
    return newline.join(lines) + newline


def test_a_file_without_quotes_is_parsed_on_the_pool_in_order() -> None:
    data = plain(5000)
    blocks = assert_same(data, 1024)
    # Every block went to the pool, each at most one read long (the first one too).
    assert blocks.parallel_blocks >= len(data) // 1024


@pytest.mark.parametrize("block_bytes", [16, 64, 4096])
def test_a_byte_order_mark_inside_the_file_stays_in_its_cell(block_bytes: int) -> None:
    """pyarrow drops a BOM at the start of the bytes it is given; the whole file's reader only
    at the file's first byte. A block, or the streaming reader's start, that begins with one
    is a row inside the file: the mark is the cell's (and a quote after it is no quote)."""
    bom = "\ufeff".encode()
    rows = plain(200).split(b"\n")
    rows[1] = bom + b"x,y,z"  # the first data row starts the first block
    rows[60] = bom + b"1,2,3"
    rows[120] = bom + b'"a\nb",c,d'  # unquoted: the line feed ends the row, one bad row
    rows[150] = bom + b"4,5,6"  # after the handover to the streaming reader
    blocks = assert_same(b"\n".join(rows), block_bytes)
    assert blocks.bad_rows == 1  # the row cut short by that line feed


@pytest.mark.parametrize("ending", [b"", b"\n"])
def test_the_last_row_may_lack_its_line_feed(ending: bytes) -> None:
    data = plain(300).rstrip(b"\n") + ending
    assert_same(data, 256)


def test_crlf_split_between_blocks_stays_on_the_pool() -> None:
    data = plain(2000, newline=b"\r\n")
    blocks = assert_same(data, 97)  # odd size: some reads end between \r and \n
    assert blocks.parallel_blocks > 100


@pytest.mark.parametrize("block_bytes", [509, 512, 4096])
def test_a_quote_hands_the_rest_to_the_streaming_reader(block_bytes: int) -> None:
    rows = plain(400).split(b"\n")
    rows[200] = b'1,"two\nlines\r\n, a comma\rand ""quotes""",3'
    rows[300] = b'"\n",,'
    data = b"\n".join(rows)
    blocks = assert_same(data, block_bytes)
    # The blocks before the first quote went to the pool, none after it.
    assert blocks.parallel_blocks <= data.index(b'"') // block_bytes
    assert blocks.parallel_blocks > 0 or block_bytes > data.index(b'"')


def test_a_lone_carriage_return_ends_a_row_and_hands_over() -> None:
    data = plain(400)
    at = data.index(b"\n", len(data) // 2)
    data = data[:at] + b"\r" + data[at + 1 :]
    blocks = assert_same(data, 512)
    assert blocks.parallel_blocks > 0


def test_a_quoted_header_is_read_by_the_streaming_reader() -> None:
    data = b'"a","b","c"\n' + plain(100).split(b"\n", 1)[1]
    blocks = assert_same(data, 256)
    assert blocks.parallel_blocks == 0


def test_bad_rows_are_counted_across_blocks() -> None:
    rows = plain(3000).split(b"\n")
    for i in range(5, 3000, 97):
        rows[i] += b",extra"
    blocks = assert_same(b"\n".join(rows), 300)
    assert blocks.bad_rows == len(range(5, 3000, 97))


def test_a_row_longer_than_a_block_is_refused_as_the_streaming_reader_refuses_it() -> None:
    rows = plain(100).split(b"\n")
    rows[50] = b"1,%s,3" % (b"y" * 5000)
    data = b"\n".join(rows)
    with pytest.raises(pa.ArrowInvalid, match=r"straddling|block"):
        blocks_of(data, 1024)
    blocks = assert_same(data, 8192)  # fits a block: read like any other row
    assert blocks.parallel_blocks > 0


def test_header_only_and_empty_lines() -> None:
    got, _ = blocks_of(b"a,b,c\n", 64)
    assert got.num_rows == 0
    assert_same(b"a,b,c\n\n\n1,2,3\n\n4,5,6\n\n", 8)


def test_invalid_utf8_in_a_block_raises_pyarrows_error() -> None:
    rows = plain(500).split(b"\n")
    rows[400] = b"1,\xff\xfe,3"
    with pytest.raises(pa.ArrowInvalid, match=r"UTF8|UTF-8"):
        blocks_of(b"\n".join(rows), 256)


def test_closing_early_stops_the_pool(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(plain(20000))
    before = {t.name for t in threading.enumerate()}
    with open(path, "rb") as handle:
        blocks = CsvBlocks(handle, NAMES, convert_options=CONVERT, block_bytes=512)
        iterator = iter(blocks)
        next(iterator)
        iterator.close()  # type: ignore[attr-defined]
    left = {t.name for t in threading.enumerate()} - before
    assert not [name for name in left if name.startswith("csv-block")]


CELL = st.one_of(
    st.text(alphabet="xy 19.,\ufeff", max_size=6),
    st.text(alphabet='xy,\n"', max_size=5).map(lambda s: '"' + s.replace('"', '""') + '"'),
)
ROW = st.lists(CELL, min_size=2, max_size=4).map(lambda cells: ",".join(cells))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=st.lists(ROW, max_size=60),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    last=st.booleans(),
    block_bytes=st.integers(min_value=16, max_value=200),
)
def test_any_file_reads_as_the_whole_file_reader_reads_it(
    rows: list[str], newline: str, last: bool, block_bytes: int
) -> None:
    """Random cells (quoted ones with commas, quotes, CR and LF inside), rows with the wrong
    number of fields, three line endings and tiny blocks: the same rows and bad-row count as
    read_csv on the whole file, or, only for a row longer than a block, pyarrow's refusal."""
    text = newline.join(["a,b,c", *rows]) + (newline if last else "")
    data = text.encode()
    try:
        expected, bad = whole(data)
    except pa.ArrowInvalid:
        with pytest.raises(pa.ArrowInvalid):
            blocks_of(data, block_bytes)
        return
    try:
        got, blocks = blocks_of(data, block_bytes)
    except pa.ArrowInvalid as error:
        assert "straddling" in str(error) or "block" in str(error)
        return
    assert got.to_pylist() == expected.to_pylist()
    assert blocks.bad_rows == bad
