"""DuckDB as a :class:`~engine.counting.CountingEngine`: ``GROUP BY`` over Parquet codes.

DuckDB runs inside the process, reads the Parquet files of codes (the stored layout: one
unsigned-integer column per attribute, ``app/datasets/ingest.py`` ``encoded_arrow_schema``)
column by column and spills to disk beyond ``memory_limit``, so a table larger than memory can
be counted. Nothing is downloaded at run time (no extension is loaded: Parquet reading is
built in). Counts are exact integers; the dense table is filled from the groups
(:func:`~engine.counting.table_from_groups`), zero cells included.

Many tables asked at once are counted in one scan, ``GROUP BY GROUPING SETS`` (at most
:data:`~engine.counting.BATCH_CELLS` cells per query); :meth:`DuckDBCounts.recoded` counts over
public code maps applied in the query (a list, held in a temporary table, indexed by the
code), so a table over compressed codes never materialises the original domain's. Both give the
same exact integers.
"""

from __future__ import annotations

import itertools
import os
import weakref
from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from engine.counting import (
    CodeMaps,
    IntArray,
    check_code_maps,
    checked_codes,
    counted_in_batches,
    grouping_mask,
    table_from_groups,
)
from engine.domain import Domain

_MAP_TABLES = itertools.count()
"""Numbers the temporary tables of code maps (one connection may serve several runs)."""


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _hidden(name: str) -> bool:
    """Spark's rule for a file or directory it skips when it lists a table's files
    (``InMemoryFileIndex``): ``_…`` (unless a ``k=v`` partition), ``.…``, ``…._COPYING_``."""
    return (
        (name.startswith("_") and "=" not in name)
        or name.startswith(".")
        or (name.endswith("._COPYING_"))
    )


def parquet_files(path: str | Path) -> list[str]:
    """A file as is; a directory as every file under it that Spark reads too (none inside a
    hidden directory, none hidden itself: ``_SUCCESS``, ``.part.crc``), in path order. So
    DuckDB and Spark count the same rows and number them alike (:meth:`DuckDBCounts.codes_at`);
    DuckDB's own ``**/*.parquet`` glob also took hidden files."""
    p = Path(path)
    if not p.is_dir():
        return [str(p)]
    found = []
    for root, dirs, names in os.walk(p):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        found += [os.path.join(root, n) for n in names if not _hidden(n)]
    if not found:
        raise ValueError("the directory holds no data files")
    return sorted(found)


class DuckDBCounts:
    """Exact contingency tables of the Parquet codes at ``path`` over ``domain``.

    ``memory_limit`` (DuckDB's ``SET memory_limit``, e.g. ``"1GB"``) and ``threads`` bound the
    connection, which is private to this object (an in-memory database). Releases nothing.
    """

    def __init__(
        self, path: str | Path, domain: Domain, *, memory_limit: str = "1GB", threads: int = 1
    ) -> None:
        if not isinstance(domain, Domain):
            raise TypeError("domain must be a Domain")
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError("threads must be a positive int")
        self._domain = domain
        self._source = parquet_files(path)
        self._connection = duckdb.connect(
            ":memory:",
            config={
                "memory_limit": memory_limit,
                "threads": threads,
                # Nothing downloaded or loaded behind our back (e.g. httpfs for an https:// path).
                "autoinstall_known_extensions": False,
                "autoload_known_extensions": False,
            },
        )
        self._n_rows: int | None = None
        self._maps: CodeMaps = (None,) * len(domain)
        self._map_tables: dict[int, str] = {}
        self._stale: list[str] = []
        """Map tables of re-coded counts no longer referenced, dropped by the next ``recoded``
        (not by the finalizer itself: it may run while a result of this connection is open)."""
        self.batched = False
        """Whether several tables asked at once are counted in one ``GROUPING SETS`` scan (the
        counts are the same either way). Off by default: DuckDB keeps one hash table per set, so
        a batch of many sets ran out of memory at 100 M rows under ``memory_limit='1GB'`` (AIM's
        first round, 270 tables), and one query per table was within about 25 % of a batch
        either way on local Parquet at 10 M rows (docs/benchmarks.md, "Past one machine")."""

    def recoded(self, domain: Domain, maps: CodeMaps) -> DuckDBCounts:
        """These counts over the codes re-coded by the public ``maps`` into ``domain``
        (:func:`engine.counting.recoded_engine`), sharing this connection. The maps are applied
        in the query; the codes were range-checked by the original one-way counts first."""
        if any(m is not None for m in self._maps):
            raise ValueError("the counts are already re-coded")
        out = object.__new__(DuckDBCounts)
        out._domain = domain
        out._source = self._source
        out._connection = self._connection
        out._n_rows = self._n_rows
        out._maps = check_code_maps(self._domain, domain, maps)
        out.batched = self.batched
        # Each map in a one-row temporary table, bound as a parameter: a query indexes it
        # (``(SELECT m FROM t)[code + 1]``) instead of parsing a literal of the map's length
        # (a 50,000-value map: 0.09 s instead of 0.95 s per query on 2 M rows).
        out._map_tables = {}
        out._stale = self._stale
        while self._stale:
            self._connection.execute(f"DROP TABLE IF EXISTS {self._stale.pop()}")
        for j, code_map in enumerate(out._maps):
            if code_map is not None:
                name = f"rhosynth_map_{next(_MAP_TABLES)}"
                self._connection.execute(
                    f"CREATE TEMP TABLE {name} AS SELECT ?::BIGINT[] AS m",
                    [[int(v) for v in code_map]],
                )
                out._map_tables[j] = name
        if out._map_tables:
            # Dropped after the re-coded counts (a run) are released, by the next ``recoded``
            # (or with the connection), not kept until the connection closes.
            weakref.finalize(out, self._stale.extend, list(out._map_tables.values()))
        return out

    def _relation(self, attrs: Sequence[str]) -> str:
        """The FROM clause: the Parquet source, with each re-coded column of ``attrs`` mapped."""
        columns = []
        for attr in dict.fromkeys(attrs):
            table = self._map_tables.get(self._domain.index(attr))
            name = _quoted(attr)
            if table is None:
                columns.append(name)
            else:
                # Our own table name (a counter): no data in the SQL text.
                columns.append(f"(SELECT m FROM {table})[CAST({name} AS BIGINT) + 1] AS {name}")  # noqa: S608
        # Quoted names and our table names only; the path is a bound parameter.
        return f"(SELECT {', '.join(columns)} FROM read_parquet(?))"  # noqa: S608

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n_rows(self) -> int:
        if self._n_rows is None:
            # fetchall, not fetchone: the result is finished, so the connection is free for
            # another statement (DuckDB refuses e.g. ``register`` while a result is open).
            rows = self._fetch("SELECT count(*) FROM read_parquet(?)", "the rows").fetchall()
            self._n_rows = int(rows[0][0]) if rows else 0
        return self._n_rows

    def codes_at(self, attrs: Sequence[str], positions: IntArray | None) -> IntArray:
        """The original codes of ``attrs`` at the row ``positions`` (in their order; ``None``:
        every row): rows numbered over the files in path order, each file's rows in order
        (``filename``, ``file_row_number``), the positions joined as a registered Arrow table.
        See :func:`engine.counting.codes_at`; the caller's analysis must cover reading them."""
        if any(m is not None for m in self._maps):
            raise ValueError("rows are read by position from the original codes only")
        attrs = list(attrs)
        for attr in attrs:
            self._domain.index(attr)
        names = ", ".join("r." + _quoted(a) for a in attrs)
        source = "read_parquet(?, filename=true, file_row_number=true)"
        if positions is None:
            result = self._fetch(
                f"SELECT {names} FROM {source} r ORDER BY r.filename, r.file_row_number",  # noqa: S608
                "the rows",
            ).fetchnumpy()
            return checked_codes(self._domain, attrs, list(result.values()))
        wanted = np.asarray(positions, dtype=np.int64)
        view = f"rhosynth_positions_{id(self)}"
        self._connection.register(
            view, pa.table({"i": np.arange(wanted.size, dtype=np.int64), "pos": wanted})
        )
        try:
            result = self._fetch(
                f"WITH files AS (SELECT filename, count(*) AS n FROM read_parquet(?, "  # noqa: S608
                "filename=true) GROUP BY filename), starts AS (SELECT filename, "
                "coalesce(sum(n) OVER (ORDER BY filename ROWS BETWEEN UNBOUNDED PRECEDING AND "
                "1 PRECEDING), 0) AS start FROM files) "
                f"SELECT p.i, {names} FROM {source} r JOIN starts s ON r.filename = s.filename "
                f"JOIN {view} p ON p.pos = s.start + r.file_row_number ORDER BY p.i",
                "the rows",
                repeat=2,
            ).fetchnumpy()
        finally:
            self._connection.unregister(view)
        columns = list(result.values())
        if len(columns[0]) != wanted.size:
            raise ValueError("a row position is outside the table")
        return checked_codes(self._domain, attrs, columns[1:])

    def _fetch(self, sql: str, what: str, *, repeat: int = 1) -> duckdb.DuckDBPyConnection:
        """``sql`` executed on the Parquet source (bound ``repeat`` times); DuckDB's errors are
        replaced by their class name alone, since their messages may quote data (``Could not
        convert string '…'``)."""
        try:
            return self._connection.execute(sql, [self._source] * repeat)
        except duckdb.Error as exc:
            failure = type(exc).__name__
        # Raised outside the except block, so the original message is not chained either.
        raise RuntimeError(f"DuckDB could not count {what} ({failure})")

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        return counted_in_batches(
            self._domain,
            attribute_sets,
            batched=self.batched,
            table=self._table,
            grouping_sets=self._grouping_sets,
        )

    def _table(self, attrs: tuple[str, ...]) -> IntArray:
        if not attrs:
            return np.array(self.n_rows, dtype=np.int64)
        keys = ", ".join(_quoted(a) for a in attrs)
        result = self._fetch(
            f"SELECT {keys}, count(*) AS n FROM {self._relation(attrs)} GROUP BY {keys}",  # noqa: S608
            "the table of " + ", ".join(repr(a) for a in attrs),
        ).fetchnumpy()
        columns = list(result.values())
        return table_from_groups(self._domain, attrs, columns[:-1], columns[-1])

    def _grouping_sets(self, batch: list[tuple[str, ...]]) -> dict[tuple[str, ...], IntArray]:
        """Every table of ``batch`` from one scan: ``GROUP BY GROUPING SETS``, each result row
        assigned to its set by ``GROUPING(...)`` (not by which keys are null)."""
        keys = list(dict.fromkeys(a for attrs in batch for a in attrs))
        quoted = ", ".join(_quoted(a) for a in keys)
        sets = ", ".join("(" + ", ".join(_quoted(a) for a in attrs) + ")" for attrs in batch)
        result = self._fetch(
            f"SELECT {quoted}, GROUPING({quoted}) AS g, count(*) AS n "  # noqa: S608
            f"FROM {self._relation(keys)} GROUP BY GROUPING SETS ({sets})",
            f"{len(batch)} tables",
        ).fetchnumpy()
        columns = list(result.values())
        groups = np.asarray(columns[-2]).astype(np.int64)
        counts = np.asarray(columns[-1])
        out = {}
        for attrs in batch:
            rows = groups == grouping_mask(keys, attrs)
            key_columns = [columns[keys.index(a)][rows] for a in attrs]
            out[attrs] = table_from_groups(self._domain, attrs, key_columns, counts[rows])
        return out

    def close(self) -> None:
        self._connection.close()
