"""Mechanism-level DP check on a tiny domain (RELIABILITY item 10).

Neighbouring datasets D and D' = D + one row differ in one cell of the 1-way marginal. We run the
measurement many times on each and check, with a seeded noise source so the test is deterministic:

1. the empirical output distribution of every cell is the exact discrete Gaussian pmf shifted by
   the true count (chi-square, rejected at p < ALPHA = 1e-3, so a correct mechanism fails a fresh
   seed with probability 1e-3 per check);
2. an (ε, δ) audit: for every event S = {y ≤ s} or {y ≥ s} on the differing cell and every ε in a
   grid, P̂_D(S) − e^ε P̂_D'(S) (and the reverse) must not exceed the δ that ρ-zCDP guarantees at
   that ε (Canonne, Kamath, Steinke 2020, Corollary 13) by more than Z = 5 standard errors; with a
   few hundred (ε, S) pairs the chance of a false alarm for a mechanism that meets its claim is
   below 1e-4.

The same checks must catch an under-noised variant (σ² halved, i.e. really 2ρ-zCDP while claiming
ρ): that shows they have the power to see the failure they exist to prevent.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

from engine.accounting import delta_for
from engine.domain import Dataset, Domain
from engine.marginals import measure_marginal
from engine.mechanisms import get_mechanism
from engine.noise import discrete_gaussian_pmf

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
Z = 5.0
RHO = Fraction(1, 2)  # σ² = 1: outputs spread over a handful of values, so every bin is well-fed
EPSILONS = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0)
RUNS = 20_000
MECHANISM_RUNS = 6_000

DOMAIN = Domain.from_mapping({"x": 3})
COUNTS = (4, 7, 2)
CHANGED_CELL = 1

Pmf = Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]]
ChiSquare = Callable[[npt.NDArray[np.int64], Pmf, int], float]
Release = Callable[[Dataset, random.Random], npt.NDArray[np.int64]]


def dataset(counts: tuple[int, ...]) -> Dataset:
    codes = np.repeat(np.arange(len(counts)), counts).reshape(-1, 1)
    return Dataset(DOMAIN, codes.astype(np.int64))


NEIGHBOURS = (
    dataset(COUNTS),
    dataset(tuple(c + (j == CHANGED_CELL) for j, c in enumerate(COUNTS))),
)


def release_many(release: Release, data: Dataset, runs: int, seed: int) -> npt.NDArray[np.int64]:
    source = random.Random(seed)
    return np.array([release(data, source) for _ in range(runs)])


def release_on_neighbours(
    release: Release, runs: int, seeds: tuple[int, int]
) -> list[npt.NDArray[np.int64]]:
    """``runs`` outputs on D and on D', each from its own seeded source."""
    return [release_many(release, d, runs, s) for d, s in zip(NEIGHBOURS, seeds, strict=True)]


def measure(rho: Fraction) -> Release:
    def release(data: Dataset, source: random.Random) -> npt.NDArray[np.int64]:
        return measure_marginal(data, ["x"], rho, source).noisy_counts

    return release


def independent_mechanism_marginal(data: Dataset, source: random.Random) -> npt.NDArray[np.int64]:
    mechanism = get_mechanism("independent")
    result = mechanism.run(
        data,
        RHO,
        mechanism.validate_params({}),
        rng=np.random.default_rng(0),
        rows=0,
        noise_source=source,
    )
    return result.measurements[0].noisy_counts


def audit_violations(
    outputs_d: npt.NDArray[np.int64], outputs_d2: npt.NDArray[np.int64], rho: float
) -> list[tuple[float, str, int, float]]:
    """(ε, event, threshold, z-score) for every event that breaks the ρ-zCDP (ε, δ) bound."""
    violations = []
    thresholds = range(
        int(min(outputs_d.min(), outputs_d2.min())), int(max(outputs_d.max(), outputs_d2.max())) + 1
    )
    for epsilon in EPSILONS:
        bound = delta_for(rho, epsilon)
        scale = math.exp(epsilon)
        for s in thresholds:
            for kind, in_event in (("<=", np.less_equal), (">=", np.greater_equal)):
                p = float(in_event(outputs_d, s).mean())
                q = float(in_event(outputs_d2, s).mean())
                for a, b, n_a, n_b in (
                    (p, q, outputs_d.size, outputs_d2.size),
                    (q, p, outputs_d2.size, outputs_d.size),
                ):
                    gap = a - scale * b - bound
                    se = math.sqrt(a * (1 - a) / n_a + scale**2 * b * (1 - b) / n_b)
                    if gap > Z * se + 1e-12:
                        violations.append((epsilon, kind, s, gap / se if se else math.inf))
    return violations


def fit_pvalues(
    outputs: npt.NDArray[np.int64],
    true_counts: npt.NDArray[np.int64],
    sigma2: float,
    chi_square_pvalue: ChiSquare,
) -> list[float]:
    """Per cell: p-value of (noisy − true) against the exact N_Z(0, σ²) pmf."""
    width = int(14 * math.sqrt(2 * sigma2)) + 8
    return [
        chi_square_pvalue(
            outputs[:, j] - true_counts[j], lambda z: discrete_gaussian_pmf(sigma2, z), width
        )
        for j in range(outputs.shape[1])
    ]


def true_counts(data: Dataset) -> npt.NDArray[np.int64]:
    return np.bincount(data.column("x"), minlength=DOMAIN.size("x")).astype(np.int64)


def test_the_claim_itself_holds_for_the_exact_distributions() -> None:
    """Rényi divergence of the exact shifted pmfs is at most αρ (CKS 2020, Theorem 4)."""
    sigma2 = float(1 / (2 * RHO))
    z = np.arange(-60, 62)
    p = discrete_gaussian_pmf(sigma2, z)
    # log p(z) − log q(z) for q the same pmf shifted by one (the normalisers cancel).
    privacy_loss = ((z - 1.0) ** 2 - z**2.0) / (2 * sigma2)
    for alpha in (1.5, 2.0, 4.0, 8.0):
        renyi = math.log(float(np.sum(p * np.exp((alpha - 1) * privacy_loss)))) / (alpha - 1)
        assert renyi <= alpha * float(RHO) + 1e-9
        # The claim is tight: the discrete Gaussian's divergence is close to αρ.
        assert renyi >= 0.95 * alpha * float(RHO)


def test_measure_marginal_matches_its_claim(chi_square_pvalue: ChiSquare) -> None:
    sigma2 = float(1 / (2 * RHO))
    outputs = release_on_neighbours(measure(RHO), RUNS, (1, 2))
    for out, data in zip(outputs, NEIGHBOURS, strict=True):
        assert min(fit_pvalues(out, true_counts(data), sigma2, chi_square_pvalue)) > ALPHA
    assert audit_violations(outputs[0][:, CHANGED_CELL], outputs[1][:, CHANGED_CELL], 0.5) == []


def test_under_noised_measurement_is_caught(chi_square_pvalue: ChiSquare) -> None:
    # Noise for 2ρ (σ² halved) while the claim is ρ.
    claimed_sigma2 = float(1 / (2 * RHO))
    under = measure(2 * RHO)
    outputs = release_on_neighbours(under, RUNS, (1, 2))
    for out, data in zip(outputs, NEIGHBOURS, strict=True):
        assert max(fit_pvalues(out, true_counts(data), claimed_sigma2, chi_square_pvalue)) < 1e-12
    violations = audit_violations(
        outputs[0][:, CHANGED_CELL], outputs[1][:, CHANGED_CELL], float(RHO)
    )
    assert violations, "the (ε, δ) audit missed a mechanism that spends twice its claimed ρ"
    assert max(score for *_, score in violations) > 8


def test_independent_mechanism_noisy_marginal_matches_its_claim(
    chi_square_pvalue: ChiSquare,
) -> None:
    sigma2 = float(1 / (2 * RHO))  # one column: the whole ρ goes to its marginal
    outputs = release_on_neighbours(independent_mechanism_marginal, MECHANISM_RUNS, (3, 4))
    for out, data in zip(outputs, NEIGHBOURS, strict=True):
        assert min(fit_pvalues(out, true_counts(data), sigma2, chi_square_pvalue)) > ALPHA
    assert audit_violations(outputs[0][:, CHANGED_CELL], outputs[1][:, CHANGED_CELL], 0.5) == []


UNIT_K = 5
UNIT_CELLS = 2_000
UNIT_RUNS = 10
UNIT_TOLERANCE = 0.05


def test_noise_per_unit_of_k_rows_is_k_times_the_row_level_noise_at_the_same_rho() -> None:
    """``independent`` on one column of 2,000 values at ρ = 1/8 (row level σ² = 4), run with
    contribution_bound 1 and 5: the empirical standard deviation of the noise (noisy minus exact
    counts, 20,000 cells each) must be 5 times larger per unit, within 5 %.

    False-failure rate: the log of a sample standard deviation over N = 20,000 draws has
    standard error ≈ 1/√(2N), so the log of the ratio has ≈ 1/√N = 0.0071, and a 5 % band
    (|log ratio − log 5| ≤ 0.049) is 6.9 standard errors: below 1e-11 for a correct mechanism.
    A mechanism scaling σ by √k or k² (ratio 2.24 or 25) is far outside it.
    """
    domain = Domain.from_mapping({"x": UNIT_CELLS})
    rng = np.random.default_rng(0)
    codes = rng.integers(0, UNIT_CELLS, 50_000).reshape(-1, 1).astype(np.int64)
    data = Dataset(domain, codes)
    exact = np.bincount(codes[:, 0], minlength=UNIT_CELLS)
    mechanism = get_mechanism("independent")
    params = mechanism.validate_params({})
    spreads = {}
    for k in (1, UNIT_K):
        source = random.Random(1000 + k)
        residuals = []
        for run in range(UNIT_RUNS):
            result = mechanism.run(
                data,
                Fraction(1, 8),
                params,
                rng=np.random.default_rng(run),
                rows=1,
                noise_source=source,
                contribution_bound=k,
            )
            (measured,) = result.measurements
            assert measured.sigma2 == Fraction(4 * k * k)
            assert measured.sensitivity == k and measured.rho == Fraction(1, 8)
            residuals.append(measured.noisy_counts - exact)
        spreads[k] = float(np.concatenate(residuals).std())
    ratio = spreads[UNIT_K] / spreads[1]
    assert abs(math.log(ratio / UNIT_K)) <= UNIT_TOLERANCE, spreads
    print(f"noise sd per row {spreads[1]:.4f}, per unit of {UNIT_K} {spreads[UNIT_K]:.4f}")


AUDIT_K = 3
UNIT_NEIGHBOURS = (
    dataset(COUNTS),
    dataset(tuple(c + AUDIT_K * (j == CHANGED_CELL) for j, c in enumerate(COUNTS))),
)


def independent_per_unit(k: int) -> Release:
    def release(data: Dataset, source: random.Random) -> npt.NDArray[np.int64]:
        mechanism = get_mechanism("independent")
        result = mechanism.run(
            data,
            RHO,
            mechanism.validate_params({}),
            rng=np.random.default_rng(0),
            rows=0,
            noise_source=source,
            contribution_bound=k,
        )
        return result.measurements[0].noisy_counts

    return release


def test_per_unit_run_meets_rho_for_a_unit_of_k_rows_in_one_cell() -> None:
    """The (ε, δ) audit above on neighbours that differ by one unit of k = 3 rows, all in one
    cell (the worst case): ``independent`` run with contribution_bound=3 at ρ = 1/2 must meet
    ρ-zCDP's (ε, δ) curve (same false-alarm rate, below 1e-4); the row-level run (noise for one
    row) on the same pair must break it, which shows the audit can see a missing factor k.

    Power: with these seeds the row-level run's worst violation is 80.6 standard errors (it is
    really 4.5-zCDP, 9ρ, on this pair); a z-score is about N(true z, 1), so falling below the
    asserted 8 on a fresh seed has probability far below 1e-100."""
    outputs = [
        release_many(independent_per_unit(AUDIT_K), data, MECHANISM_RUNS, seed)
        for data, seed in zip(UNIT_NEIGHBOURS, (5, 6), strict=True)
    ]
    assert audit_violations(outputs[0][:, CHANGED_CELL], outputs[1][:, CHANGED_CELL], 0.5) == []
    row_level = [
        release_many(independent_per_unit(1), data, MECHANISM_RUNS, seed)
        for data, seed in zip(UNIT_NEIGHBOURS, (5, 6), strict=True)
    ]
    violations = audit_violations(
        row_level[0][:, CHANGED_CELL], row_level[1][:, CHANGED_CELL], float(RHO)
    )
    assert violations and max(score for *_, score in violations) > 8
