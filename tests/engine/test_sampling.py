"""sample_categorical: support, frequencies, validation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from engine.sampling import sample_categorical


def test_never_draws_zero_weight_categories() -> None:
    rng = np.random.default_rng(0)
    draws = sample_categorical(np.array([0.0, 2.0, 0.0, 1.0, 0.0]), 50_000, rng)
    assert draws.dtype == np.int64
    assert set(np.unique(draws).tolist()) == {1, 3}


def test_frequencies_match_the_weights() -> None:
    weights = np.array([5.0, 1.0, 3.0, 1.0])
    draws = sample_categorical(weights, 100_000, np.random.default_rng(1))
    observed = np.bincount(draws, minlength=4)
    expected = weights / weights.sum() * draws.size
    assert stats.chisquare(observed, expected).pvalue > 1e-3


def test_reproducible_and_sized() -> None:
    weights = [1.0, 2.0, 3.0]
    a = sample_categorical(weights, 100, np.random.default_rng(7))
    b = sample_categorical(weights, 100, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert sample_categorical(weights, 0, np.random.default_rng(7)).shape == (0,)
    assert sample_categorical([4.0], 3, np.random.default_rng(7)).tolist() == [0, 0, 0]


@pytest.mark.parametrize(
    ("weights", "n"),
    [([], 1), ([[1.0]], 1), ([0.0, 0.0], 1), ([1.0, -1.0], 1), ([np.nan], 1), ([1.0], -1)],
)
def test_rejects_invalid_input(weights: list[float], n: int) -> None:
    with pytest.raises(ValueError):
        sample_categorical(weights, n, np.random.default_rng(0))
