"""Contingency tables and their noisy measurement.

``count_marginal`` reads the data and releases nothing; ``measure_marginal`` is the only function
here that touches data and returns something releasable, and it is the function that states (and
is charged) the ρ it spends.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.accounting import gaussian_rho, sigma2_for_rho
from engine.counting import CountingEngine
from engine.domain import Dataset, narrowest_unsigned
from engine.noise import discrete_gaussian_noise

MARGINAL_SENSITIVITY = Fraction(1)
"""L2 sensitivity of any contingency table under add/remove-one-row: one row moves one cell by 1."""


FLAT_CACHE_BYTES = 512 * 1024 * 1024
"""Default memory for what :class:`MarginalCache` keeps of tables over its ``max_cells``
(their tables or flat cell indices, per cache)."""


def count_marginal(data: Dataset | CountingEngine, attrs: Sequence[str]) -> npt.NDArray[np.int64]:
    """The exact contingency table of ``attrs`` (int64, shape = the attributes' sizes, in order).

    Rows are mapped to a flat mixed-radix cell index (:func:`flat_index`) and counted with
    ``np.bincount``. An empty ``attrs`` gives a 0-d array holding the number of rows.

    Any other :class:`~engine.counting.CountingEngine` (DuckDB, Spark) is asked for the table,
    which is checked to have the same type and shape as this function's own.
    """
    sub = tuple(attrs)
    if not isinstance(data, Dataset):
        return _engine_table(data, sub)
    if not sub:
        return np.array(data.n_rows, dtype=np.int64)
    shape = data.domain.project(sub).sizes
    flat = flat_index([data.column(attr) for attr in sub], shape)
    return count_flat(flat, shape)


def count_marginals(
    data: Dataset | CountingEngine, attribute_sets: Sequence[Sequence[str]]
) -> list[npt.NDArray[np.int64]]:
    """:func:`count_marginal` of each of ``attribute_sets``: one by one on a :class:`Dataset`
    (unchanged), in one request on any other engine (DuckDB answers small tables together in one
    ``GROUPING SETS`` scan, bounded by :data:`engine.counting.BATCH_CELLS`; Spark does when its
    ``batched`` is set). The same exact tables either way."""
    sets = [tuple(attrs) for attrs in attribute_sets]
    if isinstance(data, Dataset):
        return [count_marginal(data, attrs) for attrs in sets]
    tables = data.counts(sets)
    if len(tables) != len(sets):
        raise RuntimeError("the counting engine returned the wrong number of tables")
    for attrs, table in zip(sets, tables, strict=True):
        _check_table(data, attrs, table)
    return tables


def _check_table(engine: CountingEngine, attrs: tuple[str, ...], table: object) -> None:
    shape = engine.domain.project(attrs).sizes if attrs else ()
    if not isinstance(table, np.ndarray) or table.dtype != np.int64 or table.shape != shape:
        raise RuntimeError("the counting engine returned a table of the wrong type or shape")


def _engine_table(engine: CountingEngine, attrs: tuple[str, ...]) -> npt.NDArray[np.int64]:
    (table,) = engine.counts([attrs])
    _check_table(engine, attrs, table)
    return table


def index_dtype(cells: int) -> np.dtype[np.integer[Any]]:
    """The narrowest integer type for cell indices ``0..cells-1`` that ``np.bincount`` reads
    without a checked cast (unsigned up to 32 bits, then ``intp``)."""
    if cells > np.iinfo(np.intp).max:
        raise ValueError("the marginal has more cells than an array can index")
    for kind in (np.uint8, np.uint16, np.uint32):
        if cells - 1 <= np.iinfo(kind).max:
            return np.dtype(kind)
    return np.dtype(np.intp)


def flat_index(
    columns: Sequence[npt.NDArray[np.integer[Any]]], shape: Sequence[int]
) -> npt.NDArray[np.integer[Any]]:
    """Each row's cell in the table of ``shape`` (mixed radix, the last column fastest), in
    :func:`index_dtype` of the table's cells: one new array, updated in place column by column.

    The codes must be valid (``0 <= code < size``, as :class:`~engine.domain.Dataset` checks),
    so every step fits the type and the casts are exact.
    """
    kind = index_dtype(math.prod(shape))
    flat = np.array(columns[0], dtype=kind)  # a copy: it is updated in place below
    for column, size in zip(columns[1:], shape[1:], strict=True):
        np.multiply(flat, size, out=flat, casting="unsafe")
        np.add(flat, column, out=flat, casting="unsafe")
    return flat


COUNT_CHUNK = 1 << 18
"""Rows counted by one ``np.bincount`` call when the flat indices are narrower than ``intp``."""


def count_flat(flat: npt.NDArray[np.integer[Any]], shape: Sequence[int]) -> npt.NDArray[np.int64]:
    """The table of ``shape`` counted from flat cell indices.

    ``np.bincount`` converts narrower indices to ``intp`` first; in chunks of at least
    :data:`COUNT_CHUNK` rows (and four times the cells) that copy stays small and in cache
    instead of 8 bytes per row of the table.
    """
    cells = math.prod(shape)
    step = max(COUNT_CHUNK, 4 * cells)
    if flat.dtype == np.intp or len(flat) <= step:
        counts = np.bincount(flat, minlength=cells)
    else:
        counts = np.zeros(cells, dtype=np.intp)
        for start in range(0, len(flat), step):
            counts += np.bincount(flat[start : start + step], minlength=cells)
    return counts.astype(np.int64, copy=False).reshape(tuple(shape))


def compact_column(
    column: npt.NDArray[np.integer[Any]], size: int
) -> npt.NDArray[np.unsignedinteger[Any]]:
    """A valid code column (``0..size-1``) as contiguous codes of the narrowest unsigned type."""
    return np.ascontiguousarray(column, dtype=narrowest_unsigned(size))


class MarginalCache:
    """Exact contingency tables of one dataset, counted once and kept while they are small.

    Adaptive mechanisms (AIM, PPSyn) score every candidate against its true table in every
    round; tables of at most ``max_cells`` cells are kept between rounds, larger ones are
    recounted when asked for, so memory stays bounded on wide tables with large domains. Like
    :func:`count_marginal` it releases nothing.

    Counting reads one copy of the codes made on first use of each column: contiguous, in the
    narrowest unsigned type (a byte per cell for most columns), so a query reads a few bytes
    per row and column whatever the layout and type of the dataset's array. A table too large
    to keep by ``max_cells`` that is asked for a second time keeps, while it fits
    ``kept_bytes``, the smaller of its table (8 bytes per cell: on many rows) and its flat
    cell indices (:func:`index_dtype`, mostly 4 bytes per row: on few rows), so a later ask is
    free or one ``np.bincount``.

    Over another :class:`~engine.counting.CountingEngine` (DuckDB, Spark) the engine counts:
    tables of at most ``max_cells`` cells are kept as above, a larger one asked twice is kept
    while it fits ``kept_bytes``, and :meth:`prefetch` asks for many tables in one request
    (:func:`count_marginals`). The tables are the same exact integers either way.
    """

    def __init__(
        self, data: Dataset | CountingEngine, max_cells: int, kept_bytes: int = FLAT_CACHE_BYTES
    ) -> None:
        self._data = data
        self._max_cells = max_cells
        self._budget = kept_bytes
        self._tables: dict[tuple[str, ...], npt.NDArray[np.int64]] = {}
        self._columns: dict[str, npt.NDArray[np.unsignedinteger[Any]]] = {}
        self._flats: dict[tuple[str, ...], npt.NDArray[np.integer[Any]]] = {}
        self._large: dict[tuple[str, ...], npt.NDArray[np.int64]] = {}
        self._used = 0
        self._asked: set[tuple[str, ...]] = set()

    def __call__(self, attrs: Sequence[str]) -> npt.NDArray[np.int64]:
        """``count_marginal(data, attrs)``, from the cache when it was counted before."""
        key = tuple(attrs)
        cached = self._tables.get(key)
        if cached is None:
            cached = self._large.get(key)
        if cached is not None:
            return cached
        if not key or not isinstance(self._data, Dataset):
            return self._engine_table(key, count_marginal(self._data, key))
        shape = self._data.domain.project(key).sizes
        flat = self._flats.get(key)
        if flat is None:
            flat = flat_index([self._column(attr) for attr in key], shape)
        counts = count_flat(flat, shape)
        if counts.size <= self._max_cells:
            self._tables[key] = counts
        elif key in self._asked and key not in self._flats:
            kept = min(counts.nbytes, flat.nbytes)
            if self._used + kept <= self._budget:
                if counts.nbytes <= flat.nbytes:
                    self._large[key] = counts
                else:
                    self._flats[key] = flat
                self._used += kept
        self._asked.add(key)
        return counts

    def _engine_table(
        self, key: tuple[str, ...], counts: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.int64]:
        """Keep a table an engine counted, by the same rules as the codes' path."""
        if not key:
            return counts
        if counts.size <= self._max_cells:
            self._tables[key] = counts
        elif key in self._asked and self._used + counts.nbytes <= self._budget:
            self._large[key] = counts
            self._used += counts.nbytes
        self._asked.add(key)
        return counts

    def prefetch(self, attribute_sets: Sequence[Sequence[str]]) -> None:
        """Count, in one request, the tables of ``attribute_sets`` that will be kept (at most
        ``max_cells`` cells) and are not yet: a no-op on a :class:`Dataset` (counted on first
        ask, as before), batched on another engine (:func:`count_marginals`)."""
        if isinstance(self._data, Dataset):
            return
        domain = self._data.domain
        missing = list(
            dict.fromkeys(
                key
                for key in (tuple(attrs) for attrs in attribute_sets)
                if key and key not in self._tables and domain.cells(key) <= self._max_cells
            )
        )
        if len(missing) < 2:
            return
        for key, table in zip(missing, count_marginals(self._data, missing), strict=True):
            self._tables[key] = table
            self._asked.add(key)

    @property
    def held_bytes(self) -> int:
        """Memory held: the compact columns, the kept tables and the kept flat indices."""
        return (
            sum(column.nbytes for column in self._columns.values())
            + sum(table.nbytes for table in self._tables.values())
            + self._used
        )

    def _column(self, attr: str) -> npt.NDArray[np.unsignedinteger[Any]]:
        column = self._columns.get(attr)
        if column is None:
            assert isinstance(self._data, Dataset)
            size = self._data.domain.sizes[self._data.domain.index(attr)]
            column = compact_column(self._data.column(attr), size)
            self._columns[attr] = column
        return column


@dataclass(frozen=True, eq=False)
class Measurement:
    """A noisy marginal that carries its own noise scale (as in Private-PGM).

    ``noisy_counts = count_marginal(data, attributes) + N_Z(0, sigma2)`` per cell; the measurement
    is ``rho = sensitivity² / (2·sigma2)``-zCDP, and that equality is checked here.
    """

    attributes: tuple[str, ...]
    noisy_counts: npt.NDArray[np.int64]
    sigma2: Fraction
    sensitivity: Fraction
    rho: Fraction

    def __post_init__(self) -> None:
        attributes = tuple(self.attributes)
        if len(set(attributes)) != len(attributes):
            raise ValueError("a measurement's attributes must be distinct")
        counts = np.asarray(self.noisy_counts)
        if counts.dtype != np.int64:
            raise ValueError(f"noisy_counts must be int64, got {counts.dtype}")
        if counts.ndim != len(attributes):
            raise ValueError("noisy_counts must have one axis per attribute")
        for name in ("sigma2", "sensitivity", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int):
                raise TypeError(f"{name} must be a Fraction")
            if value <= 0:
                raise ValueError(f"{name} must be positive")
            object.__setattr__(self, name, Fraction(value))
        if self.rho != gaussian_rho(self.sensitivity, self.sigma2):
            raise ValueError("rho must equal sensitivity² / (2·sigma2) exactly")
        if counts.flags.writeable:
            if counts is self.noisy_counts:
                counts = counts.copy()
            counts.flags.writeable = False
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "noisy_counts", counts)


def measure_marginal(
    data: Dataset | CountingEngine,
    attrs: Sequence[str],
    rho: Fraction,
    source: random.Random | None = None,
) -> Measurement:
    """Release the contingency table of ``attrs`` with exact discrete Gaussian noise; ρ-zCDP.

    Privacy claim. Neighbouring datasets differ by adding or removing one row, which changes one
    cell of the table by 1, so the table's L2 sensitivity is Δ = 1. Adding independent
    N_Z(0, σ²) noise with σ² = 1/(2ρ) to every cell is Δ²/(2σ²) = ρ-zCDP (Canonne, Kamath, Steinke,
    "The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Theorem 14). The cells measured
    are determined by the public domain only. ``source=None`` draws noise from the OS CSPRNG;
    pass a seeded source only in tests.

    Per privacy unit of at most k rows the same table moves by at most k (all k rows in one
    cell: attained), so this release is k²ρ-zCDP per unit; :meth:`Mechanism.run
    <engine.mechanisms.base.Mechanism.run>` with ``contribution_bound=k`` calls it at ρ/k² and
    states it per unit (engine/privacy_unit/group.py).
    """
    sigma2 = sigma2_for_rho(MARGINAL_SENSITIVITY, rho)
    counts = count_marginal(data, attrs)
    noisy = counts + discrete_gaussian_noise(sigma2, counts.shape, source)
    return Measurement(
        attributes=tuple(attrs),
        noisy_counts=noisy,
        sigma2=sigma2,
        sensitivity=MARGINAL_SENSITIVITY,
        rho=gaussian_rho(MARGINAL_SENSITIVITY, sigma2),
    )
