"""Goodness of fit of the exact samplers against their exact distributions (RELIABILITY item 9).

Every test here uses a seeded ``random.Random`` so it is deterministic: a pass is a pass forever.
Each null hypothesis (the sampler draws from the stated distribution) is rejected at p < ALPHA =
1e-3, so for a correct sampler a fresh seed fails any one test with probability 1e-3 (about 2% for
the whole file). Power: the same samples are tested against the pmf with 0.7σ and 1.3σ and must be
rejected at p < 1e-12; with 100 000 samples (6 000 for the scalar sampler) the chi-square
noncentrality is in the hundreds or more, so a wrong σ of that size is never missed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from engine.noise import (
    discrete_gaussian_noise,
    discrete_gaussian_pmf,
    sample_bernoulli_exp,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
POWER_ALPHA = 1e-12
N_VECTORISED = 100_000
N_SCALAR = 6_000

Pmf = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]
ChiSquare = Callable[[npt.NDArray[np.int64], Pmf, int], float]


def gaussian_pmf(sigma2: float) -> Pmf:
    return lambda z: discrete_gaussian_pmf(sigma2, z)


def width_for(sigma2: float) -> int:
    return int(14 * math.sqrt(sigma2)) + 8


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(2), Fraction(25), Fraction(400)])
def test_vectorised_sampler_fits_the_exact_pmf(
    sigma2: Fraction, chi_square_pvalue: ChiSquare
) -> None:
    samples = discrete_gaussian_noise(sigma2, N_VECTORISED, random.Random(20_201 + int(sigma2)))
    s2 = float(sigma2)
    width = width_for(s2 * 1.69)
    assert np.abs(samples).max() < width
    assert chi_square_pvalue(samples, gaussian_pmf(s2), width) > ALPHA
    # Power: 0.7σ and 1.3σ are rejected outright by the same test on the same samples.
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 0.49), width) < POWER_ALPHA
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 1.69), width) < POWER_ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(7, 3), Fraction(25)])
def test_scalar_sampler_fits_the_exact_pmf(sigma2: Fraction, chi_square_pvalue: ChiSquare) -> None:
    source = random.Random(1_000 + int(sigma2))
    samples = np.array([sample_discrete_gaussian(sigma2, source) for _ in range(N_SCALAR)])
    s2 = float(sigma2)
    width = width_for(s2 * 1.69)
    assert chi_square_pvalue(samples, gaussian_pmf(s2), width) > ALPHA
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 0.49), width) < POWER_ALPHA
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 1.69), width) < POWER_ALPHA


def test_vectorised_sampler_with_a_ledger_shaped_sigma2(chi_square_pvalue: ChiSquare) -> None:
    # ρ = 0.012345678901 split over 7 columns: σ² = 7/(2ρ) has a 12-digit denominator.
    rho = Fraction(12_345_678_901, 10**12) / 7
    sigma2 = 1 / (2 * rho)
    samples = discrete_gaussian_noise(sigma2, N_VECTORISED, random.Random(77))
    s2 = float(sigma2)
    width = width_for(s2 * 1.69)
    assert chi_square_pvalue(samples, gaussian_pmf(s2), width) > ALPHA
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 0.49), width) < POWER_ALPHA
    assert chi_square_pvalue(samples, gaussian_pmf(s2 * 1.69), width) < POWER_ALPHA


@pytest.mark.parametrize("sigma2", [Fraction(400), Fraction(10**4), Fraction(10**6)])
def test_empirical_variance_is_sigma2(sigma2: Fraction) -> None:
    # For σ ≥ 20 the discrete Gaussian's variance equals σ² to within 1e-300; the standard error
    # of the sample variance is σ²·sqrt(2/n) ≈ 0.7% at n = 40 000, so ±4% is more than 5 SE.
    samples = discrete_gaussian_noise(sigma2, 40_000, random.Random(int(sigma2) % 9973))
    assert abs(samples.var() / float(sigma2) - 1) < 0.04
    assert abs(samples.mean()) < 5 * math.sqrt(float(sigma2) / samples.size)


@pytest.mark.parametrize("t", [Fraction(1, 2), Fraction(3, 2), Fraction(5)])
def test_scalar_discrete_laplace_fits_its_pmf(t: Fraction, chi_square_pvalue: ChiSquare) -> None:
    source = random.Random(31 + t.numerator)
    samples = np.array([sample_discrete_laplace(t, source) for _ in range(N_SCALAR)])
    decay = math.exp(-1 / float(t))

    def pmf(z: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        return (1 - decay) / (1 + decay) * decay ** np.abs(z).astype(np.float64)

    width = int(40 * float(t)) + 10
    assert chi_square_pvalue(samples, pmf, width) > ALPHA


@pytest.mark.parametrize("gamma", [Fraction(1, 3), Fraction(1), Fraction(5, 2)])
def test_bernoulli_exp_frequency(gamma: Fraction) -> None:
    source = random.Random(gamma.numerator * 100 + gamma.denominator)
    n = 60_000
    heads = sum(sample_bernoulli_exp(gamma, source) for _ in range(n))
    p = math.exp(-float(gamma))
    assert stats.binomtest(heads, n, p).pvalue > ALPHA
    # Power: the probability of the neighbouring γ ± 0.1 is rejected.
    assert stats.binomtest(heads, n, math.exp(-float(gamma) - 0.1)).pvalue < 1e-6
    assert stats.binomtest(heads, n, math.exp(-float(gamma) + 0.1)).pvalue < 1e-6
