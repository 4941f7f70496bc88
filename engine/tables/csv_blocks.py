"""Reading a CSV file in blocks parsed on several threads, in the file's order.

pyarrow's streaming reader (``pyarrow.csv.open_csv``) parses on one thread, while its table
reader (``read_csv``) parses on all cores but holds the whole file. :class:`CsvBlocks` reads
the file itself in blocks of whole rows and hands each block to ``read_csv`` on a small pool
of threads (pyarrow releases the GIL while it parses), at most ``workers + 1`` blocks ahead of
the consumer, and yields their record batches in the file's order: memory stays bounded by a
few blocks, and the parsing uses the cores.

A block may only end where a row ends. Outside quotes a line feed always ends a row, but a
quoted cell may hold one (the readers read with ``newlines_in_values``), and a lone carriage
return ends a row too. So a block is cut after its last line feed only while no byte read so
far is a quote character or a lone carriage return; from the first block that holds one, the
rest of the file (from that block's first byte, which starts a row) goes to the streaming
reader, as the whole file did before. The same happens when the header line holds one, or
when ``block_bytes`` bytes from a row's start hold no line feed (a row longer than a block,
which the streaming reader then refuses with pyarrow's "straddling" error). Either way each
cell is parsed by the same parser with the same options, so the batches hold the same values
in the same order; only where the batches are cut differs. pyarrow drops a UTF-8 byte order
mark at the start of the bytes it is given, which the whole file's reader does only at the
file's first byte: bytes that start a row inside the file with one get an empty line first
(skipped), so the mark stays in its cell.

Two behaviours of pyarrow's own reader depend on where its blocks fall, and the hand-over
moves them: rows longer than a block are refused or read (pyarrow reads some up to twice its
block; by default the upload's cell and column limits keep a row within about 1 MiB, below
its 4 MiB), and a CRLF inside a quoted cell that straddles two of its blocks loses its line
feed (apache/arrow#51368, open).

On adult stacked 40 times (quote-free, 2 M rows) the parse takes about half the wall time of
the streaming reader, and an upload of adult ×205 holds 64 MiB in Arrow's pool instead of
203 MiB (docs/benchmarks.md, "Loading 2 M rows").

Nothing here keeps or reports a value: the errors are pyarrow's, raised to the caller.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.csv as pacsv

_QUOTE = b'"'
_CR = b"\r"
_LF = b"\n"
_BOM = b"\xef\xbb\xbf"


class BinarySource(Protocol):
    """What the reader reads from: a binary file, or a wrapper that checks the bytes."""

    def read(self, size: int = -1, /) -> bytes: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class _Stitched:
    """Bytes already read, then the rest of ``source``: what the streaming reader reads."""

    def __init__(self, pending: bytes, source: BinarySource) -> None:
        self._pending = pending
        self._source = source

    @property
    def closed(self) -> bool:
        return self._source.closed

    def read(self, size: int = -1) -> bytes:
        if not self._pending:
            return self._source.read(size)
        if size < 0:
            head, self._pending = self._pending, b""
            return head + self._source.read()
        head, self._pending = self._pending[:size], self._pending[size:]
        if len(head) < size:
            head += self._source.read(size - len(head))
        return head


def _safe(data: bytes) -> bool:
    """No quote character and no carriage return but in a CRLF (or last, where the next read
    may bring its line feed): every line feed of ``data`` ends a row."""
    if _QUOTE in data:
        return False
    if _CR not in data:  # the usual case: one fast scan, not two counts
        return True
    return data.count(_CR) - data.endswith(_CR) == data.count(b"\r\n")


def _keep_bom(data: bytes | memoryview) -> bytes | memoryview:
    """``data``, which starts a row inside the file, with an empty line first if it starts with
    the UTF-8 byte order mark: pyarrow drops a BOM at the start of the bytes it is given, which
    the whole file's reader does only at the file's first byte. An empty line is skipped."""
    if bytes(data[:3]) == _BOM:
        return b"\n" + bytes(data)
    return data


class CsvBlocks:
    """The record batches of a CSV file (header row first), read as described above.

    ``names`` are the header's field names (the caller has read and checked the header);
    ``convert_options`` apply to every block. Rows with the wrong number of fields are skipped
    and counted in :attr:`bad_rows` once the iteration ends. Iterate once; closing the
    iterator early stops the threads (the blocks already submitted finish first); the caller
    closes the source with :meth:`close`.
    """

    def __init__(
        self,
        source: BinarySource,
        names: list[str],
        *,
        convert_options: pacsv.ConvertOptions,
        block_bytes: int,
        workers: int = 2,
    ) -> None:
        if block_bytes < 1 or workers < 1:
            raise ValueError("block_bytes and workers must be positive")
        self._source = source
        self._names = names
        self._convert = convert_options
        self._block_bytes = block_bytes
        self._workers = workers
        self._bad_rows: list[int] = []  # one slot per parse, appended before it starts
        self.parallel_blocks = 0  # blocks handed to the pool (for tests and benchmarks)

    def close(self) -> None:
        self._source.close()

    @property
    def bad_rows(self) -> int:
        return sum(self._bad_rows)

    def _parse_options(self) -> pacsv.ParseOptions:
        self._bad_rows.append(0)
        slot = len(self._bad_rows) - 1

        def skip(_row: Any) -> str:
            # One parse runs on one thread: its own slot needs no lock.
            self._bad_rows[slot] += 1
            return "skip"

        return pacsv.ParseOptions(newlines_in_values=True, invalid_row_handler=skip)

    def _parse(
        self, block: bytes | memoryview, options: pacsv.ParseOptions
    ) -> list[pa.RecordBatch]:
        table = pacsv.read_csv(
            pa.py_buffer(_keep_bom(block)),
            # One block, one chunk: read_csv's own block must hold it whole.
            read_options=pacsv.ReadOptions(
                column_names=self._names, use_threads=False, block_size=len(block) + 1
            ),
            parse_options=options,
            convert_options=self._convert,
        )
        batches: list[pa.RecordBatch] = table.to_batches()
        return batches

    def _streaming(self, source: _Stitched, skip_rows: int) -> Iterator[pa.RecordBatch]:
        reader = pacsv.open_csv(
            source,
            read_options=pacsv.ReadOptions(
                column_names=self._names, skip_rows=skip_rows, block_size=self._block_bytes
            ),
            parse_options=self._parse_options(),
            convert_options=self._convert,
        )
        yield from reader

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        first = self._source.read(self._block_bytes)
        end = first.find(_LF)
        if end < 0 or not _safe(first[: end + 1]):
            yield from self._streaming(_Stitched(first, self._source), skip_rows=1)
            return
        data = first[end + 1 :]  # the bytes read and not yet parsed: they start a row
        at_end = False
        pool = ThreadPoolExecutor(self._workers, thread_name_prefix="csv-block")
        pending: deque[Future[list[pa.RecordBatch]]] = deque()
        try:
            while True:
                cut = len(data) - 1 if at_end else data.rfind(_LF)
                if cut >= 0:
                    if not _safe(data):
                        break  # a quote or a lone CR: a line feed may be inside a cell
                    # The block is a view (no copy), kept alive by the parse's buffer.
                    block = memoryview(data)[: cut + 1]
                    data = data[cut + 1 :]
                    pending.append(pool.submit(self._parse, block, self._parse_options()))
                    self.parallel_blocks += 1
                    while len(pending) > self._workers:
                        yield from pending.popleft().result()
                elif len(data) >= self._block_bytes:
                    break  # a row longer than a block
                if at_end:
                    break
                chunk = self._source.read(self._block_bytes)
                if chunk:
                    data = data + chunk if data else chunk
                else:
                    at_end = True
            while pending:
                yield from pending.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if data:
            # From a row's first byte, the rest of the file goes to the streaming reader.
            start = bytes(_keep_bom(data))  # bytes(b) is b itself: no copy
            yield from self._streaming(_Stitched(start, self._source), skip_rows=0)
