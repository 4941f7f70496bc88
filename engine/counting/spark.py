"""Spark as a :class:`~engine.counting.CountingEngine`: ``groupBy().count()`` over Parquet codes.

For tables that live on a cluster: ``master`` is a master URL (``local[2]``, ``spark://…``,
``yarn``) or a Spark Connect address (``sc://host:port``). The Parquet files are the stored
layout of codes (one unsigned-integer column per attribute); the groups come back to the driver
(at most one row per non-empty cell) and fill the dense int64 table, zero cells included.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql.functions import col

from engine.counting import IntArray, checked_attributes, table_from_groups
from engine.domain import Domain


def spark_session(master: str = "local[2]") -> SparkSession:
    """A Spark session for counting: a master URL, or Spark Connect for ``sc://…``."""
    builder: Any = SparkSession.builder
    if master.startswith("sc://"):
        return builder.remote(master).getOrCreate()  # type: ignore[no-any-return]
    return (  # type: ignore[no-any-return]
        builder.master(master)
        .appName("rhosynth-counting")
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
    ) -> None:
        if not isinstance(domain, Domain):
            raise TypeError("domain must be a Domain")
        self._domain = domain
        self._session = session if session is not None else spark_session(master)
        self._frame = self._session.read.parquet(str(path))
        self._n_rows: int | None = None

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n_rows(self) -> int:
        if self._n_rows is None:
            self._n_rows = int(self._frame.count())
        return self._n_rows

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        return [self._table(attrs) for attrs in checked_attributes(self._domain, attribute_sets)]

    def _table(self, attrs: tuple[str, ...]) -> IntArray:
        if not attrs:
            return np.array(self.n_rows, dtype=np.int64)
        columns = [col("`" + a.replace("`", "``") + "`") for a in attrs]  # names taken as is
        groups = self._frame.groupBy(*columns).count().collect()
        # Keys as Spark gave them (no cast): table_from_groups refuses nulls and non-integers.
        keys = [np.array([row[i] for row in groups]) for i in range(len(attrs))]
        counts = np.array([row[len(attrs)] for row in groups], dtype=np.int64)
        return table_from_groups(self._domain, attrs, keys, counts)
