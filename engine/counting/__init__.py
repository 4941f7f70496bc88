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

Two additions let every graphical method run on an engine (issue 29, "every method"):

* **Re-coded counts** (:func:`recoded_engine`): after the noisy one-way marginals, MST, AIM,
  PrivMRF, PPSyn and PrivSyn merge rare values (engine.models.compression). The per-attribute
  code maps are public (functions of noisy counts only); DuckDB and Spark apply them inside the
  query (``DuckDBCounts.recoded``, ``SparkCounts.recoded``), so a table over compressed codes
  never materialises the original domain's table; any other engine gets
  :class:`RecodedCounts`, which sums its original tables. The counts are the same exact
  integers as counting the re-coded codes in memory.
* **Batched counting**: ``counts`` given many attribute sets may answer them in one scan
  (``GROUP BY GROUPING SETS``, when the engine's ``batched`` is set; off by default on both:
  Spark's ``Expand`` copies every row once per set and was measured 2–4× slower than a job per
  table on ``local[2]``, and DuckDB keeps a hash table per set, which ran out of memory on
  AIM's first round at 100 M rows under a 1 GB ``memory_limit``), at most
  :data:`BATCH_CELLS` cells of tables (and :data:`BATCH_COLUMNS` columns) per query, so what
  comes back stays bounded.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Protocol, TypeGuard

import numpy as np
import numpy.typing as npt

from engine.domain import Dataset, Domain

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


BATCH_CELLS = 1 << 16
"""The cells of the tables one batched query (``GROUPING SETS``) may answer: its result has at
most this many rows (one per non-empty cell), so its memory is bounded. Small on purpose:
DuckDB's ``GROUPING SETS`` was measured slower than one ``GROUP BY`` per table once the sets
hold many cells (60 three-way tables of 1.1 M cells at 10 M rows: 31.7 s against 8.5 s), and
no slower on small tables (91 pairs: 6.5–8.8 s against 8.5–9.6 s), so only small tables share
a scan; a larger table is counted alone."""
BATCH_COLUMNS = 62
"""The distinct attributes one batched query may group on (``GROUPING(...)`` is a 64-bit mask)."""

CodeMaps = tuple[IntArray | None, ...]
"""Per attribute of the original domain: original code → re-coded code, ``None`` for unchanged."""


def batches(domain: Domain, attrs: Sequence[tuple[str, ...]]) -> list[list[tuple[str, ...]]]:
    """``attrs`` (non-empty, distinct tuples) cut, in order, into batches of at most
    :data:`BATCH_CELLS` cells and :data:`BATCH_COLUMNS` distinct attributes; a table larger than
    :data:`BATCH_CELLS` alone is a batch of one (counted by a plain ``GROUP BY``)."""
    out: list[list[tuple[str, ...]]] = []
    current: list[tuple[str, ...]] = []
    cells = 0
    columns: set[str] = set()
    for sub in attrs:
        size = domain.cells(sub)
        if current and (cells + size > BATCH_CELLS or len(columns | set(sub)) > BATCH_COLUMNS):
            out.append(current)
            current, cells, columns = [], 0, set()
        current.append(sub)
        cells += size
        columns |= set(sub)
    if current:
        out.append(current)
    return out


def counted_in_batches(
    domain: Domain,
    attribute_sets: Sequence[Sequence[str]],
    *,
    batched: bool,
    table: Callable[[tuple[str, ...]], IntArray],
    grouping_sets: Callable[[list[tuple[str, ...]]], dict[tuple[str, ...], IntArray]],
) -> list[IntArray]:
    """``counts`` of an engine that counts one table per query (``table``) or, when ``batched``,
    several per scan (``grouping_sets``, on the :func:`batches` of the distinct non-empty
    sets); the tables in the order asked, each the same exact table either way."""
    sets = checked_attributes(domain, attribute_sets)
    wanted = list(dict.fromkeys(s for s in sets if s))
    if not batched or len(wanted) < 2:
        return [table(attrs) for attrs in sets]
    tables: dict[tuple[str, ...], IntArray] = {}
    for batch in batches(domain, wanted):
        if len(batch) == 1:
            tables[batch[0]] = table(batch[0])
        else:
            tables.update(grouping_sets(batch))
    return [tables[s] if s else table(s) for s in sets]


def grouping_mask(keys: Sequence[str], attrs: tuple[str, ...]) -> int:
    """The ``GROUPING(keys...)`` value of the grouping set ``attrs`` (DuckDB and Spark: the
    first key is the most significant bit, a bit is set when its key is not grouped)."""
    chosen = set(attrs)
    mask = 0
    for key in keys:
        mask = (mask << 1) | (0 if key in chosen else 1)
    return mask


def check_code_maps(original: Domain, recoded: Domain, maps: Sequence[IntArray | None]) -> CodeMaps:
    """``maps`` checked: one per attribute, each of the original size with values inside the
    re-coded size (``None``: the attribute keeps its codes and its size)."""
    if tuple(original.attributes) != tuple(recoded.attributes) or len(maps) != len(original):
        raise ValueError("one code map per attribute of the same domain")
    out: list[IntArray | None] = []
    for before, after, code_map in zip(original.sizes, recoded.sizes, maps, strict=True):
        if code_map is None:
            if before != after:
                raise ValueError("an attribute without a code map keeps its size")
            out.append(None)
            continue
        m = np.asarray(code_map, dtype=np.int64)
        if m.shape != (before,) or (m.size and (m.min() < 0 or m.max() >= after)):
            raise ValueError("a code map must send every original code into the new domain")
        out.append(m)
    return tuple(out)


class RecodedCounts:
    """Any :class:`CountingEngine` seen through public per-attribute code maps: each table is
    the engine's table over the original codes, summed over the codes each map merges (exact
    int64 sums, so the same integers as counting re-coded rows). It asks the engine for the
    original-domain table; DuckDB and Spark push the maps into their queries instead."""

    def __init__(self, engine: CountingEngine, domain: Domain, maps: Sequence[IntArray | None]):
        self._engine = engine
        self._domain = domain
        self._maps = check_code_maps(engine.domain, domain, maps)

    @property
    def domain(self) -> Domain:
        return self._domain

    @property
    def n_rows(self) -> int:
        return self._engine.n_rows

    def counts(self, attribute_sets: Sequence[Sequence[str]]) -> list[IntArray]:
        sets = checked_attributes(self._domain, attribute_sets)
        out = []
        for attrs, table in zip(sets, self._engine.counts(sets), strict=True):
            for axis, attr in enumerate(attrs):
                code_map = self._maps[self._domain.index(attr)]
                if code_map is None:
                    continue
                moved = np.moveaxis(table, axis, 0)
                summed = np.zeros((self._domain.size(attr), *moved.shape[1:]), dtype=np.int64)
                np.add.at(summed, code_map, moved)
                table = np.moveaxis(summed, 0, axis)
            out.append(np.array(table, dtype=np.int64, order="C"))
        return out


def checked_codes(
    domain: Domain, attrs: Sequence[str], columns: Sequence[npt.ArrayLike]
) -> IntArray:
    """Codes fetched from an engine as an int64 (rows × attributes) array, each column checked
    like :func:`table_from_groups` does (``ValueError`` naming only the attribute)."""
    out = np.empty((len(np.asarray(columns[0])) if columns else 0, len(attrs)), dtype=np.int64)
    for j, (attr, column) in enumerate(zip(attrs, columns, strict=True)):
        given = np.asanyarray(column)
        if np.ma.is_masked(given):
            raise ValueError(f"column {attr!r} has missing codes")
        raw = np.ma.getdata(given)
        if raw.size and raw.dtype.kind not in "iu":
            raise ValueError(f"column {attr!r} has no integer codes")
        values = raw.astype(np.int64)
        if values.size and (values.min() < 0 or values.max() >= domain.size(attr)):
            raise ValueError(f"column {attr!r} has codes outside 0..{domain.size(attr) - 1}")
        out[:, j] = values
    return out


def codes_at(
    data: CountingEngine, attrs: Sequence[str], positions: IntArray | None
) -> IntArray | None:
    """The codes of ``attrs`` (int64, rows × attributes) at the 0-based row ``positions`` (in
    their order; ``None``: every row), in the engine's fixed row order: a
    :class:`~engine.domain.Dataset`'s rows; for DuckDB and Spark the Parquet files in path
    order, each file's rows in order (so a file written by
    :func:`engine.counting.parquet.write_codes` has the Dataset's order). ``None`` when the
    engine cannot read rows by position (it has no ``codes_at``). Releases nothing.

    Only a mechanism whose analysis covers reading those rows may call it (DPCopula's Kendall
    subsample, chosen by CSPRNG keys of the positions: a uniformly random subset whatever the
    fixed order is)."""
    attrs = list(attrs)
    if isinstance(data, Dataset):
        index = [data.domain.index(a) for a in attrs]
        rows = data.codes if positions is None else data.codes[positions]
        return np.asarray(rows[:, index], dtype=np.int64).reshape(-1, len(attrs))
    reader = getattr(data, "codes_at", None)
    if not callable(reader):
        return None
    result: IntArray = reader(attrs, positions)
    return result


def recoded_engine(
    engine: CountingEngine, domain: Domain, maps: Sequence[IntArray | None]
) -> CountingEngine:
    """``engine``'s counts over the codes re-coded by ``maps`` (public) into ``domain``: the
    engine's own ``recoded(domain, maps)`` when it has one (the maps inside the query), else
    :class:`RecodedCounts`. Releases nothing."""
    recoded = getattr(engine, "recoded", None)
    if callable(recoded):
        result: CountingEngine = recoded(domain, check_code_maps(engine.domain, domain, maps))
        return result
    return RecodedCounts(engine, domain, maps)


__all__ = [
    "BATCH_CELLS",
    "BATCH_COLUMNS",
    "CodeMaps",
    "CountingEngine",
    "IntArray",
    "RecodedCounts",
    "batches",
    "check_code_maps",
    "checked_attributes",
    "checked_codes",
    "codes_at",
    "counted_in_batches",
    "grouping_mask",
    "is_counting_engine",
    "recoded_engine",
    "table_from_groups",
]
