"""Shared fixtures for the engine tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from engine.domain import Dataset, Domain

DatasetFactory = Callable[[Domain, int, int], Dataset]


def _random_dataset(domain: Domain, n_rows: int, seed: int) -> Dataset:
    """A dataset with independent skewed codes drawn from a seeded Generator."""
    rng = np.random.default_rng(seed)
    columns = []
    for size in domain.sizes:
        weights = rng.dirichlet(np.ones(size))
        columns.append(rng.choice(size, size=n_rows, p=weights))
    codes = np.column_stack(columns) if columns else np.empty((n_rows, 0))
    return Dataset(domain, codes.reshape(n_rows, len(domain)).astype(np.int64))


@pytest.fixture
def make_dataset() -> DatasetFactory:
    return _random_dataset


@pytest.fixture
def small_domain() -> Domain:
    return Domain.from_mapping({"sex": 2, "age": 5, "region": 3, "flag": 1})


Pmf = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]
ChiSquare = Callable[[npt.NDArray[np.int64], Pmf, int], float]


def _chi_square_pvalue(samples: npt.NDArray[np.int64], pmf: Pmf, width: int) -> float:
    """Chi-square test of integer samples against ``pmf`` on [-width, width], tails pooled.

    End cells with expected count below 5 are pooled into their neighbour, and the probability
    outside [-width, width] goes into the end cells.
    """
    n = samples.size
    support = np.arange(-width, width + 1)
    expected = n * pmf(support)
    if float(expected.sum()) / n < 1 - 1e-9:
        raise AssertionError("width too small for the pmf under test")
    big_enough = np.flatnonzero(expected >= 5)
    lo, hi = int(big_enough[0]), int(big_enough[-1])
    clipped = np.clip(samples, support[lo], support[hi])
    observed = np.bincount(clipped - support[lo], minlength=hi - lo + 1).astype(np.float64)
    cells = expected[lo : hi + 1].copy()
    cells[0] += expected[:lo].sum()
    cells[-1] += expected[hi + 1 :].sum()
    cells *= n / cells.sum()
    return float(stats.chisquare(observed, cells).pvalue)


@pytest.fixture
def chi_square_pvalue() -> ChiSquare:
    return _chi_square_pvalue
