"""How close a synthetic table is to the real one: total variation distance of k-way marginals.

This is the definition of the project's independent evaluator
(``../shared/bench/marginal_error.py``) in library form: for each k and each set of k columns,
both tables are reduced to their k-way histogram, each histogram is normalised to sum to 1, and
the total variation distance TVD = ½·Σ|p − q| is taken; the score for k is the mean over ALL
k-subsets of columns. The numbers agree with that script to floating-point rounding (tests check
1e-12; the arithmetic is the same, so they are usually identical).

Evaluation reads the real data and releases nothing under differential privacy: these scores are
for the data owner and for benchmarks, not for analysts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.domain import Dataset, Domain
from engine.marginals import count_marginal

DENSE_CELL_LIMIT = 4_000_000
"""Above this many cells a marginal is compared on its occupied cells only (as the evaluator)."""

IntArray = npt.NDArray[np.integer[Any]]


def _as_dataset(codes: npt.ArrayLike, domain: Domain, label: str) -> Dataset:
    """Validate a code table without copying it (a read-only view is all Dataset needs)."""
    array = np.asarray(codes)
    if array.ndim != 2:
        raise ValueError(f"the {label} table must be a 2-D array of codes")
    if array.shape[0] == 0:
        raise ValueError(f"the {label} table has no rows")
    view = array.view()
    view.flags.writeable = False
    try:
        return Dataset(domain, view)
    except ValueError as error:
        raise ValueError(f"the {label} table: {error}") from None


def _flat_cells(data: Dataset, attrs: tuple[str, ...]) -> npt.NDArray[np.int64]:
    """Each row's flat mixed-radix cell index over ``attrs`` (needs fewer than 2^63 cells)."""
    flat = np.zeros(data.n_rows, dtype=np.int64)
    for attr in attrs:
        flat *= data.domain.size(attr)
        flat += data.column(attr).astype(np.int64, copy=False)
    return flat


def _tvd(real: Dataset, synth: Dataset, attrs: tuple[str, ...]) -> float:
    cells = real.domain.cells(attrs)
    if cells <= DENSE_CELL_LIMIT:
        p = count_marginal(real, attrs).ravel() / real.n_rows
        q = count_marginal(synth, attrs).ravel() / synth.n_rows
        return 0.5 * float(np.abs(p - q).sum())
    # Only occupied cells can differ; count them on the union of the two tables' cells.
    weights = np.concatenate(
        [np.full(real.n_rows, 1.0 / real.n_rows), np.full(synth.n_rows, -1.0 / synth.n_rows)]
    )
    if cells < 2**63:
        keys = np.concatenate([_flat_cells(real, attrs), _flat_cells(synth, attrs)])
        _, inverse = np.unique(keys, return_inverse=True)
    else:
        columns = [real.domain.index(attr) for attr in attrs]
        rows = np.concatenate([real.codes[:, columns], synth.codes[:, columns]])
        _, inverse = np.unique(rows, axis=0, return_inverse=True)
    difference = np.bincount(inverse.ravel(), weights=weights)
    return 0.5 * float(np.abs(difference).sum())


def marginal_tvd(
    real: npt.ArrayLike, synth: npt.ArrayLike, domain: Domain, attributes: Sequence[str]
) -> float:
    """TVD = ½·Σ|p − q| between the normalised histograms of ``attributes`` in two code tables.

    ``real`` and ``synth`` are 2-D integer arrays, one column per attribute of ``domain`` in domain
    order, with codes in range; their row counts may differ but neither may be empty. The result
    lies in [0, 1].
    """
    attrs = domain.project(attributes).attributes
    if not attrs:
        raise ValueError("a marginal needs at least one attribute")
    return _tvd(_as_dataset(real, domain, "real"), _as_dataset(synth, domain, "synthetic"), attrs)


def unrank_combination(rank: int, n: int, k: int) -> tuple[int, ...]:
    """The ``rank``-th k-subset of {0, …, n−1} in lexicographic order.

    The order is that of ``itertools.combinations(range(n), k)``. Combinatorial number system:
    position i skips, for each candidate element x, the comb(n − x − 1, k − i − 1) subsets whose
    i-th element is x.
    """
    if not 0 <= k <= n:
        raise ValueError("need 0 <= k <= n")
    if not 0 <= rank < math.comb(n, k):
        raise ValueError("rank out of range")
    chosen: list[int] = []
    x = 0
    for i in range(k):
        while True:
            block = math.comb(n - x - 1, k - i - 1)
            if rank < block:
                break
            rank -= block
            x += 1
        chosen.append(x)
        x += 1
    return tuple(chosen)


def _subsets(
    n: int, k: int, max_marginals: int | None, rng: np.random.Generator
) -> Iterator[tuple[int, ...]]:
    total = math.comb(n, k)
    if max_marginals is None or total <= max_marginals:
        yield from itertools.combinations(range(n), k)
        return
    # A uniformly random set of max_marginals distinct ranks, visited in lexicographic order.
    ranks = np.sort(rng.choice(total, size=max_marginals, replace=False))
    for rank in ranks.tolist():
        yield unrank_combination(int(rank), n, k)


def mean_tvd(
    real: npt.ArrayLike,
    synth: npt.ArrayLike,
    domain: Domain,
    *,
    max_way: int = 3,
    max_marginals: int | None = None,
    rng: np.random.Generator | None = None,
) -> dict[int, float]:
    """``{k: mean TVD over the k-way marginals}`` for k = 1..min(max_way, number of columns).

    The definition of ``../shared/bench/marginal_error.py``: every k-subset of columns (in domain
    order), TVD = ½·Σ|p − q| between the two tables' normalised histograms, averaged with equal
    weight. Counting is a flat mixed-radix index and ``np.bincount``
    (:func:`engine.marginals.count_marginal`); marginals above :data:`DENSE_CELL_LIMIT` cells are
    compared on their occupied cells only, as the evaluator does.

    Sampling. With ``max_marginals`` set, a k that has more subsets than that is averaged over
    ``max_marginals`` distinct subsets drawn uniformly without replacement, so its score is an
    unbiased estimate of the full mean rather than the mean itself. ``rng`` drives that draw
    (``None`` means ``np.random.default_rng(0)``, so repeated evaluations compare the same
    marginals); it is used for nothing else.
    """
    if isinstance(max_way, bool) or not isinstance(max_way, int) or max_way < 1:
        raise ValueError("max_way must be a positive int")
    if max_marginals is not None and (
        isinstance(max_marginals, bool) or not isinstance(max_marginals, int) or max_marginals < 1
    ):
        raise ValueError("max_marginals must be None or a positive int")
    real_data = _as_dataset(real, domain, "real")
    synth_data = _as_dataset(synth, domain, "synthetic")
    generator = np.random.default_rng(0) if rng is None else rng
    attributes = domain.attributes
    result: dict[int, float] = {}
    for k in range(1, min(max_way, len(attributes)) + 1):
        values = [
            _tvd(real_data, synth_data, tuple(attributes[i] for i in subset))
            for subset in _subsets(len(attributes), k, max_marginals, generator)
        ]
        result[k] = float(np.array(values).mean())
    return result


def bootstrap_floor(
    real: npt.ArrayLike,
    domain: Domain,
    rng: np.random.Generator,
    *,
    max_way: int = 3,
    max_marginals: int | None = None,
) -> dict[int, float]:
    """The :func:`mean_tvd` of a same-size resample of ``real`` with replacement, against ``real``.

    What a perfect generator that samples n rows from the real distribution would still score:
    the sampling-error floor under which no synthesizer's TVD can be expected to go. ``rng``
    draws the resample (``rng.integers(0, n, size=n)``, as the benchmarks do) and then any
    sampled subsets of marginals.
    """
    data = _as_dataset(real, domain, "real")
    resample = data.codes[rng.integers(0, data.n_rows, size=data.n_rows)]
    return mean_tvd(
        data.codes, resample, domain, max_way=max_way, max_marginals=max_marginals, rng=rng
    )


__all__ = [
    "DENSE_CELL_LIMIT",
    "bootstrap_floor",
    "marginal_tvd",
    "mean_tvd",
    "unrank_combination",
]
