"""DuckDB as a :class:`~engine.counting.CountingEngine`: ``GROUP BY`` over Parquet codes.

DuckDB runs inside the process, reads the Parquet files of codes (the stored layout: one
unsigned-integer column per attribute, ``app/datasets/ingest.py`` ``encoded_arrow_schema``)
column by column and spills to disk beyond ``memory_limit``, so a table larger than memory can
be counted. Nothing is downloaded at run time (no extension is loaded: Parquet reading is
built in). Counts are exact integers; the dense table is filled from the groups
(:func:`~engine.counting.table_from_groups`), zero cells included.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import numpy as np

from engine.counting import IntArray, checked_attributes, table_from_groups
from engine.domain import Domain


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def parquet_glob(path: str | Path) -> str:
    """A Parquet file as is; a directory as every ``*.parquet`` file under it."""
    p = Path(path)
    return str(p / "**" / "*.parquet") if p.is_dir() else str(p)


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
        self._source = parquet_glob(path)
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

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n_rows(self) -> int:
        if self._n_rows is None:
            row = self._fetch("SELECT count(*) FROM read_parquet(?)", "the rows").fetchone()
            self._n_rows = int(row[0]) if row is not None else 0
        return self._n_rows

    def _fetch(self, sql: str, what: str) -> duckdb.DuckDBPyConnection:
        """``sql`` executed on the Parquet source; DuckDB's errors are replaced by their class
        name alone, since their messages may quote data (``Could not convert string '…'``)."""
        try:
            return self._connection.execute(sql, [self._source])
        except duckdb.Error as exc:
            failure = type(exc).__name__
        # Raised outside the except block, so the original message is not chained either.
        raise RuntimeError(f"DuckDB could not count {what} ({failure})")

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        return [self._table(attrs) for attrs in checked_attributes(self._domain, attribute_sets)]

    def _table(self, attrs: tuple[str, ...]) -> IntArray:
        if not attrs:
            return np.array(self.n_rows, dtype=np.int64)
        keys = ", ".join(_quoted(a) for a in attrs)
        result = self._fetch(
            f"SELECT {keys}, count(*) AS n FROM read_parquet(?) GROUP BY {keys}",  # noqa: S608
            "the table of " + ", ".join(repr(a) for a in attrs),
        ).fetchnumpy()
        columns = list(result.values())
        return table_from_groups(self._domain, attrs, columns[:-1], columns[-1])

    def close(self) -> None:
        self._connection.close()
