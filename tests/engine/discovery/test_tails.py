"""The discrete Gaussian tail bound is an upper bound, and tight; thresholds are the smallest.

Deterministic (no sampling): compared with the pmf summed directly in floating point.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from engine.discovery import discrete_gaussian_tail_bound, smallest_tail_threshold
from engine.noise import discrete_gaussian_pmf


def direct_tail(sigma2: Fraction, t: int) -> float:
    width = int(60 * float(sigma2) ** 0.5) + 200
    return float(discrete_gaussian_pmf(float(sigma2), np.arange(t, t + width)).sum())


@pytest.mark.parametrize(
    "sigma2", [Fraction(1, 8), Fraction(1, 2), Fraction(2), Fraction(50), Fraction(5000)]
)
@pytest.mark.parametrize("t", [1, 2, 3, 7, 20, 60, 200])
def test_bound_is_above_the_tail_and_close_to_it(sigma2: Fraction, t: int) -> None:
    exact = direct_tail(sigma2, t)
    bound = discrete_gaussian_tail_bound(sigma2, t)
    assert bound >= exact
    if exact > 1e-290:
        # Loose only where σ√(2π) < 1 underestimates the normaliser (σ² < 1/(2π)).
        assert bound <= exact * (1.3 if sigma2 < 1 else 1 + 1e-6)


def test_bound_is_one_below_one() -> None:
    assert discrete_gaussian_tail_bound(Fraction(3), 0) == 1.0
    assert discrete_gaussian_tail_bound(Fraction(3), -5) == 1.0


@pytest.mark.parametrize(
    "sigma2", [Fraction(1, 2), Fraction(25), Fraction(10**6), Fraction(10**12)]
)
@pytest.mark.parametrize(
    "p", [Fraction(1, 2), Fraction(1, 20), Fraction(1, 10**9), Fraction(1, 10**100)]
)
def test_threshold_is_the_smallest_that_clears(sigma2: Fraction, p: Fraction) -> None:
    t = smallest_tail_threshold(sigma2, p)
    assert t >= 1
    assert Fraction(discrete_gaussian_tail_bound(sigma2, t)) <= p
    if t > 1:
        assert Fraction(discrete_gaussian_tail_bound(sigma2, t - 1)) > p


@pytest.mark.parametrize("p", [Fraction(0), Fraction(1), Fraction(1, 10**101)])
def test_threshold_refuses_probabilities_out_of_range(p: Fraction) -> None:
    with pytest.raises(ValueError):
        smallest_tail_threshold(Fraction(1), p)
