"""Noise of the discovery mechanisms: the right noise passes, a 30%-wrong noise fails.

Every test uses a seeded ``random.Random`` noise source, so it is deterministic; the rates below
are for a fresh seed. Each "right noise passes" check rejects at p < ALPHA = 1e-3 (false-failure
rate 1e-3 per check); each "σ scaled by 0.7 or 1.3 fails" check must reject at p < 1e-12, which
with these sample sizes it does by a wide margin (chi-square noncentrality in the thousands;
binomial deviations of more than 10 standard errors).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

import engine.discovery.categories as categories
import engine.discovery.learned as learned
from engine.discovery import discover_from_candidates, discover_open_set
from engine.noise import discrete_gaussian_noise, discrete_gaussian_pmf

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
POWER_ALPHA = 1e-12
IntArray = npt.NDArray[np.int64]
Pmf = Callable[[IntArray], npt.NDArray[np.float64]]
ChiSquare = Callable[[IntArray, Pmf, int], float]


def scaled_noise(sigma_factor: Fraction) -> Callable[..., IntArray]:
    """A noise function that draws with σ multiplied by ``sigma_factor`` (a wrong mechanism)."""

    def noise(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
        return discrete_gaussian_noise(sigma2 * sigma_factor**2, shape, source)

    return noise


RHO = Fraction(1, 8)  # σ² = 4
CANDIDATES = [f"v{i}" for i in range(200)]
TRUE = {name: (i * 7) % 50 for i, name in enumerate(CANDIDATES)}
RUNS = 300  # 60 000 noisy counts


def candidate_residuals(seed: int) -> IntArray:
    source = random.Random(seed)
    residuals = []
    for _ in range(RUNS):
        found = discover_from_candidates(
            TRUE,
            candidates=CANDIDATES,
            max_categories=len(CANDIDATES),
            rho=RHO,
            threshold=-(10**9),  # release every candidate, so every noisy count is seen
            source=source,
        )
        assert found.categories == tuple(CANDIDATES)
        residuals.append(np.array(found.noisy_counts) - np.array([TRUE[c] for c in CANDIDATES]))
    return np.concatenate(residuals)


def claimed_pmf(z: IntArray) -> npt.NDArray[np.float64]:
    return discrete_gaussian_pmf(float(1 / (2 * RHO)), z)


def test_candidate_noise_is_the_claimed_discrete_gaussian(chi_square_pvalue: ChiSquare) -> None:
    residuals = candidate_residuals(11)
    assert chi_square_pvalue(residuals, claimed_pmf, 40) > ALPHA


@pytest.mark.parametrize("factor", [Fraction(7, 10), Fraction(13, 10)])
def test_candidate_noise_check_catches_a_wrong_sigma(
    monkeypatch: pytest.MonkeyPatch, chi_square_pvalue: ChiSquare, factor: Fraction
) -> None:
    monkeypatch.setattr(categories, "discrete_gaussian_noise", scaled_noise(factor))
    residuals = candidate_residuals(11)
    assert chi_square_pvalue(residuals, claimed_pmf, 40) < POWER_ALPHA


def singleton_releases(trials: int, rho: Fraction, delta: Fraction, seed: int) -> tuple[int, int]:
    """How often a value with count 1 is released, and the threshold τ used."""
    source = random.Random(seed)
    released = 0
    tau = 0
    for _ in range(trials):
        found = discover_open_set(
            {"solo": 1, "crowd": 1_000}, max_categories=5, rho=rho, delta=delta, source=source
        )
        released += "solo" in found.categories
        assert "crowd" in found.categories
        tau = found.threshold
    return released, tau


def test_open_set_never_releases_a_singleton_at_small_delta() -> None:
    # δ = 1e-6 bounds the release probability per trial; 1000 trials fail with probability
    # at most 1e-3 for a correct mechanism.
    released, _ = singleton_releases(1_000, Fraction(1, 2), Fraction(1, 10**6), 5)
    assert released == 0


RATE_RHO = Fraction(1, 50)  # σ² = 25: the threshold is far from the discrete grid's coarseness
RATE_DELTA = Fraction(1, 20)
RATE_TRIALS = 4_000


def singleton_tail(tau: int) -> float:
    sigma2 = float(1 / (2 * RATE_RHO))
    return float(discrete_gaussian_pmf(sigma2, np.arange(tau - 1, tau + 2000)).sum())


def test_open_set_singleton_rate_is_the_exact_tail_and_at_most_delta() -> None:
    released, tau = singleton_releases(RATE_TRIALS, RATE_RHO, RATE_DELTA, 17)
    tail = singleton_tail(tau)
    assert tail <= float(RATE_DELTA)
    assert stats.binomtest(released, RATE_TRIALS, tail).pvalue > ALPHA
    greater = stats.binomtest(released, RATE_TRIALS, float(RATE_DELTA), alternative="greater")
    assert greater.pvalue > ALPHA


@pytest.mark.parametrize("factor", [Fraction(7, 10), Fraction(13, 10)])
def test_open_set_rate_check_catches_a_wrong_sigma(
    monkeypatch: pytest.MonkeyPatch, factor: Fraction
) -> None:
    monkeypatch.setattr(categories, "discrete_gaussian_noise", scaled_noise(factor))
    released, tau = singleton_releases(RATE_TRIALS, RATE_RHO, RATE_DELTA, 17)
    assert stats.binomtest(released, RATE_TRIALS, singleton_tail(tau)).pvalue < POWER_ALPHA


# Learned ranges, stage 1: the window's histogram includes a cell for the rows below the window
# and one for those above; both are released (for the owner's warnings), so their noise can be
# checked directly against the claimed N_Z(0, 1/(2ρ₁)) with no rows outside.
RANGE_RHO = Fraction(1, 4)  # ρ₁ = ρ/4 = 1/16: σ² = 8
RANGE_RUNS = 3000


def _outside_noise(seed: int) -> IntArray:
    window = learned.Window(0.0, 64.0, cells=64)
    counts = np.zeros(64 * learned.ZOOM + 2, dtype=np.int64)
    counts[1 + 30 * learned.ZOOM] = 10_000
    source = random.Random(seed)
    draws = []
    for _ in range(RANGE_RUNS):
        found = learned.learn_coarse_range(
            counts, window=window, rho=RANGE_RHO * learned.COARSE_SHARE, source=source
        )
        draws.extend((found.noisy_below, found.noisy_above))
    return np.array(draws, dtype=np.int64)


def _range_pmf(support: IntArray) -> npt.NDArray[np.float64]:
    return discrete_gaussian_pmf(8.0, support)


def test_learned_range_stage_one_has_the_claimed_noise(chi_square_pvalue: ChiSquare) -> None:
    assert chi_square_pvalue(_outside_noise(21), _range_pmf, 30) > ALPHA


@pytest.mark.parametrize("factor", [Fraction(7, 10), Fraction(13, 10)])
def test_learned_range_check_catches_a_wrong_sigma(
    monkeypatch: pytest.MonkeyPatch, chi_square_pvalue: ChiSquare, factor: Fraction
) -> None:
    monkeypatch.setattr(learned, "discrete_gaussian_noise", scaled_noise(factor))
    assert chi_square_pvalue(_outside_noise(21), _range_pmf, 30) < POWER_ALPHA
