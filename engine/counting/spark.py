"""Spark as a :class:`~engine.counting.CountingEngine`: ``groupBy().count()`` over Parquet codes.

For tables that live on a cluster: ``master`` is a master URL (``local[2]``, ``spark://…``,
``yarn``) or a Spark Connect address (``sc://host:port``). The Parquet files are the stored
layout of codes (one unsigned-integer column per attribute); the groups come back to the driver
(at most one row per non-empty cell) and fill the dense int64 table, zero cells included.

With ``batched`` set, many tables asked at once are counted in one job (``groupingSets``, at
most :data:`~engine.counting.BATCH_CELLS` cells; off by default, see ``batched``), and
:meth:`SparkCounts.recoded` applies public code maps inside the query
(``element_at(array(...), code + 1)``; a map longer than :data:`LITERAL_MAP_VALUES` by a
broadcast left join): the same exact integers. Spark's errors are replaced by their class name
(their messages may quote data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

import numpy as np
import pyarrow as pa
from py4j.protocol import Py4JError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.functions import (
    array,
    broadcast,
    col,
    count,
    create_map,
    element_at,
    grouping_id,
    lit,
)

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

_T = TypeVar("_T")


def _run(action: Callable[[], _T], what: str) -> _T:
    """``action`` (a Spark job), Spark's errors replaced by their class name alone: their
    messages may quote data (``[CAST_INVALID_INPUT] The value '…' of the type "STRING"``), and
    the JVM's text reaches Python whole. Raised outside the ``except`` block, so the original
    is not chained either (the same rule as DuckDB's ``_fetch``)."""
    try:
        return action()
    except (PySparkException, Py4JError) as exc:
        failure = type(exc).__name__
    raise RuntimeError(f"Spark could not count {what} ({failure})")


LITERAL_MAP_VALUES = 1024
"""The longest code map applied as a literal array in the query; a longer one is joined."""


def _local_path(uri: str) -> str:
    """The path of a ``_metadata.file_path`` URI, unescaped (``file:/t/a%20b`` → ``/t/a b``)."""
    return unquote(urlsplit(uri).path)


def _column(name: str) -> Column:
    return col("`" + name.replace("`", "``") + "`")  # names taken as is


def spark_session(master: str = "local[2]", driver_memory: str = "1g") -> SparkSession:
    """A Spark session for counting: a master URL, or Spark Connect for ``sc://…``.

    ``driver_memory`` is the driver JVM's heap (``spark.driver.memory``; in ``local[…]`` mode the
    executors run in it too). It takes effect only when this call starts the JVM."""
    builder: Any = SparkSession.builder
    if master.startswith("sc://"):
        return builder.remote(master).getOrCreate()  # type: ignore[no-any-return]
    return (  # type: ignore[no-any-return]
        builder.master(master)
        .appName("rhosynth-counting")
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )


class SparkCounts:
    """Exact contingency tables of the Parquet codes at ``path`` over ``domain``, on Spark.

    Pass a ``session`` to share one (tests start one per test session); otherwise one is made
    (or reused: ``getOrCreate``) for ``master``. Releases nothing.
    """

    def __init__(
        self,
        path: str | Path,
        domain: Domain,
        *,
        master: str = "local[2]",
        session: SparkSession | None = None,
        driver_memory: str = "1g",
    ) -> None:
        if not isinstance(domain, Domain):
            raise TypeError("domain must be a Domain")
        self._domain = domain
        self._session = (
            session if session is not None else spark_session(master, driver_memory=driver_memory)
        )
        self._frame: DataFrame = self._session.read.parquet(str(path))
        self._n_rows: int | None = None
        self._maps: CodeMaps = (None,) * len(domain)
        self.batched = False
        """Whether several tables asked at once are counted in one ``groupingSets`` job. Off by
        default: Spark expands every row once per grouping set, which was measured 2–4× slower
        than one ``groupBy`` job per table on ``local[2]`` (91 pairs of a 1 M-row table: 57.7 s
        against 26.4 s); worth trying where a scan costs more than a job (remote storage)."""

    def recoded(self, domain: Domain, maps: CodeMaps) -> SparkCounts:
        """These counts over the codes re-coded by the public ``maps`` into ``domain``
        (:func:`engine.counting.recoded_engine`), on the same frame; the maps are applied in the
        query. The codes were range-checked by the original one-way counts first."""
        if any(m is not None for m in self._maps):
            raise ValueError("the counts are already re-coded")
        out = object.__new__(SparkCounts)
        out._domain = domain
        out._session = self._session
        out._frame = self._frame
        out._n_rows = self._n_rows
        out._maps = check_code_maps(self._domain, domain, maps)
        out.batched = self.batched
        return out

    def codes_at(self, attrs: Sequence[str], positions: IntArray | None) -> IntArray:
        """The original codes of ``attrs`` at the row ``positions`` (in their order; ``None``:
        every row): rows numbered over the files in path order (``_metadata.file_path``), each
        file's rows in order (``_metadata.row_index``, not ``monotonically_increasing_id``,
        which depends on the partitioning). See :func:`engine.counting.codes_at`."""
        if any(m is not None for m in self._maps):
            raise ValueError("rows are read by position from the original codes only")
        attrs = list(attrs)
        for attr in attrs:
            self._domain.index(attr)
        files = _run(
            self._frame.select(col("_metadata.file_path").alias("f")).groupBy("f").count().collect,
            "the rows",
        )
        # Files in the order of their paths, as DuckDB numbers them (``filename``):
        # ``file_path`` is a URI, escaped (``a b`` is ``a%20b``), so it is decoded to sort.
        starts, start = {}, 0
        for row in sorted(files, key=lambda r: _local_path(str(r[0]))):
            starts[str(row[0])] = start
            start += int(row[1])
        located = self._frame.select(
            col("_metadata.file_path").alias("__f"),
            col("_metadata.row_index").alias("__r"),
            *[_column(a) for a in attrs],
        )
        if positions is None:
            # Every row, in order, as Arrow columns (no Python object per row).
            first = create_map(*[lit(v) for kv in starts.items() for v in kv])
            at = element_at(first, col("__f")) + col("__r")
            ordered = _run(located.orderBy(at).toArrow, "the rows")
            columns = [ordered.column(2 + j).to_numpy() for j in range(len(attrs))]
            if not attrs:
                return np.empty((ordered.num_rows, 0), dtype=np.int64)
            return checked_codes(self._domain, attrs, columns)
        else:
            wanted = np.asarray(positions, dtype=np.int64)
            if wanted.size and (wanted.min() < 0 or wanted.max() >= start):
                raise ValueError("a row position is outside the table")
            # Only the wanted rows come back: (file, row index) pairs of the positions.
            bounds = sorted(starts.items(), key=lambda kv: kv[1])
            firsts = np.array([b for _, b in bounds], dtype=np.int64)
            which = np.searchsorted(firsts, wanted, side="right") - 1
            pairs = [(bounds[w][0], int(p - firsts[w])) for w, p in zip(which, wanted, strict=True)]
            chosen = self._session.createDataFrame(pairs, "__f string, __r long")
            located = located.join(chosen, ["__f", "__r"], "inner")
        rows = _run(located.collect, "the rows")
        position = np.array([starts[str(row[0])] + int(row[1]) for row in rows], dtype=np.int64)
        order = np.argsort(position, kind="stable")
        # Rows back in the order of `wanted` (distinct positions: one row each).
        rank = np.searchsorted(position[order], wanted)
        if rank.size and (np.any(rank >= position.size) or np.any(position[order][rank] != wanted)):
            raise ValueError("a row position is outside the table")
        picked = order[rank]
        columns = [np.array([rows[i][2 + j] for i in picked]) for j in range(len(attrs))]
        if not columns or not picked.size:
            return np.empty((picked.size, len(attrs)), dtype=np.int64)
        return checked_codes(self._domain, attrs, columns)

    def _selected(self, attrs: Sequence[str]) -> DataFrame:
        """The frame's columns ``attrs``, each re-coded one mapped: a short map as a literal
        array (1-based ``element_at``), a longer one by a broadcast left join on a two-column
        frame (a 50,000-value literal array took 13.6 s per table on 100,000 rows, the join
        1.4 s). A code outside its map gives a null either way (refused as a missing code)."""
        frame = self._frame
        columns = []
        for attr in dict.fromkeys(attrs):
            j = self._domain.index(attr)
            code_map = self._maps[j]
            if code_map is None:
                columns.append(_column(attr))
            elif code_map.size <= LITERAL_MAP_VALUES:
                lookup = array(*[lit(int(v)) for v in code_map])
                index = _column(attr).cast("int") + 1
                columns.append(element_at(lookup, index).alias(attr))
            else:
                code, mapped = f"__rhosynth_code_{j}", f"__rhosynth_mapped_{j}"
                table = self._session.createDataFrame(
                    pa.table(
                        {
                            code: np.arange(code_map.size, dtype=np.int64),
                            mapped: np.asarray(code_map, dtype=np.int64),
                        }
                    )
                )
                on = _column(attr).cast("long") == table[code]
                frame = frame.join(broadcast(table), on, "left")
                columns.append(table[mapped].alias(attr))
        return frame.select(*columns)

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n_rows(self) -> int:
        if self._n_rows is None:
            self._n_rows = int(_run(self._frame.count, "the rows"))
        return self._n_rows

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        return counted_in_batches(
            self._domain,
            attribute_sets,
            batched=self.batched,
            table=self._table,
            grouping_sets=self._grouping_sets,
        )

    def _grouping_sets(self, batch: list[tuple[str, ...]]) -> dict[tuple[str, ...], IntArray]:
        """Every table of ``batch`` from one job: ``groupingSets``, each result row assigned to
        its set by ``grouping_id()`` (not by which keys are null)."""
        keys = list(dict.fromkeys(a for attrs in batch for a in attrs))
        frame = self._selected(keys)
        job = (
            frame.groupingSets(
                [[_column(a) for a in attrs] for attrs in batch], *[_column(a) for a in keys]
            )
            .agg(grouping_id().alias("__g"), count(lit(1)).alias("__n"))
            .collect
        )
        groups = _run(job, f"{len(batch)} tables")
        gid = np.array([row[len(keys)] for row in groups], dtype=np.int64)
        counts = np.array([row[len(keys) + 1] for row in groups], dtype=np.int64)
        out = {}
        for attrs in batch:
            chosen = np.flatnonzero(gid == grouping_mask(keys, attrs))
            key_columns = [np.array([groups[i][keys.index(a)] for i in chosen]) for a in attrs]
            out[attrs] = table_from_groups(self._domain, attrs, key_columns, counts[chosen])
        return out

    def _table(self, attrs: tuple[str, ...]) -> IntArray:
        if not attrs:
            return np.array(self.n_rows, dtype=np.int64)
        groups = _run(
            self._selected(attrs).groupBy(*[_column(a) for a in attrs]).count().collect,
            "the table of " + ", ".join(repr(a) for a in attrs),
        )
        # Keys as Spark gave them (no cast): table_from_groups refuses nulls and non-integers.
        keys = [np.array([row[i] for row in groups]) for i in range(len(attrs))]
        counts = np.array([row[len(attrs)] for row in groups], dtype=np.int64)
        return table_from_groups(self._domain, attrs, keys, counts)
