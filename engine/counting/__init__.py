"""Counting engines: the only step of a release that reads the data, behind one small interface.

A :class:`CountingEngine` answers exact contingency tables (int64, in the domain's shape, zero
cells included) and the row count; nothing it returns is released. The mechanisms that need
nothing else (:attr:`Mechanism.runs_on_counts <engine.mechanisms.base.Mechanism.runs_on_counts>`)
measure through it, so the same seeded noise gives the same release whichever engine counted.

Three implementations:

* :class:`~engine.domain.Dataset`: the codes in memory, counted with ``np.bincount``
  (:func:`engine.marginals.count_marginal`); today's path and the default.
* :class:`~engine.counting.duckdb.DuckDBCounts`: DuckDB embedded in the process, ``GROUP BY`` over
  a Parquet file or directory of codes (out of core, bounded by ``memory_limit``).
* :class:`~engine.counting.spark.SparkCounts`: the same ``GROUP BY`` on Spark (a master URL or
  Spark Connect).

Issue 29 §2 (first piece). The privacy claim is unchanged: an engine computes the same exact
table as ``count_marginal``, so every measurement's sensitivity and cost stay as stated.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol, TypeGuard

import numpy as np
import numpy.typing as npt

from engine.domain import Domain

IntArray = npt.NDArray[np.int64]


class CountingEngine(Protocol):
    """Exact counts of one encoded table over a public domain.

    ``counts([attrs, ...])`` returns, per attribute tuple, the int64 contingency table of shape
    ``domain.project(attrs).sizes`` (a 0-d array holding the row count for ``()``); it releases
    nothing. ``n_rows`` is the exact row count (private, like every count).
    """

    @property
    def domain(self) -> Domain: ...

    @property
    def n_rows(self) -> int: ...

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]: ...


def is_counting_engine(value: object) -> TypeGuard[CountingEngine]:
    """Whether ``value`` has the interface's members, looked up without evaluating them.

    Not ``isinstance`` on a runtime-checkable protocol: on Python 3.11 that evaluates
    properties, so checking an engine would count its rows (read the data) before a method
    could refuse it.
    """
    sentinel = object()
    return all(
        inspect.getattr_static(value, member, sentinel) is not sentinel
        for member in ("domain", "n_rows", "counts")
    )


def table_from_groups(
    domain: Domain,
    attrs: tuple[str, ...],
    keys: Sequence[npt.ArrayLike],
    counts: npt.ArrayLike,
) -> IntArray:
    """The dense int64 table of ``attrs`` from a ``GROUP BY``'s key columns and counts.

    Raises ``ValueError`` naming only the attribute (codes may encode private values) when a key
    is missing (null), is not an integer (a string or float column: never converted, so neither
    truncated nor quoted in an error) or lies outside ``0..size-1``.
    """
    if not attrs:
        return np.array(int(np.asarray(counts, dtype=np.int64).sum()), dtype=np.int64)
    shape = domain.project(attrs).sizes
    table = np.zeros(shape, dtype=np.int64)
    index = []
    for attr, key, size in zip(attrs, keys, shape, strict=True):
        given = np.asanyarray(key)
        if np.ma.is_masked(given):  # DuckDB's nulls come back masked
            raise ValueError(f"column {attr!r} has missing codes")
        raw = np.ma.getdata(given)
        if raw.size and raw.dtype.kind not in "iu":  # Spark's nulls come back as objects
            if raw.dtype.kind == "O" and any(v is None for v in raw.ravel()):
                raise ValueError(f"column {attr!r} has missing codes")
            raise ValueError(f"column {attr!r} has no integer codes")
        column = raw.astype(np.int64)  # uint64 beyond int64 wraps negative: refused below
        if column.size and (column.min() < 0 or column.max() >= size):
            raise ValueError(f"column {attr!r} has codes outside 0..{size - 1}")
        index.append(column)
    # Each group appears once, so plain assignment (not accumulation) is exact.
    table[tuple(index)] = np.asarray(counts, dtype=np.int64)
    return table


def checked_attributes(
    domain: Domain, attribute_sets: Sequence[Sequence[str]]
) -> list[tuple[str, ...]]:
    """The attribute tuples, each checked against ``domain`` (``KeyError`` / ``ValueError``)."""
    out = []
    for attrs in attribute_sets:
        sub = tuple(attrs)
        if sub:
            domain.project(sub)
        out.append(sub)
    return out


__all__ = [
    "CountingEngine",
    "IntArray",
    "checked_attributes",
    "is_counting_engine",
    "table_from_groups",
]
