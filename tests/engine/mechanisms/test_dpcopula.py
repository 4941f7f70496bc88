"""DPCopula: Kendall's numerator and its sensitivity, the coupling behind the subsample, the
correlation repair, the copula sampler, and the mechanism's contract (exact budget, valid
output, progress, cancellation, randomness from the CSPRNG)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats

from engine.domain import Dataset, Domain
from engine.evaluation import marginal_tvd
from engine.mechanisms import MECHANISMS, SynthesisCancelled, get_mechanism
from engine.mechanisms.dpcopula.copula import (
    association_order,
    block_correlation_grid_sums,
    kendall_numerators,
    kendall_numerators_by_sorting,
    kendall_to_correlation,
    normal_scores,
    pair_kendall_numerators,
    partition_keys,
    partition_margins,
    repair_correlation,
    secure_order_keys,
    secure_uniform_integers,
    subsample_rows,
    tie_scales,
)
from engine.mechanisms.dpcopula.mechanism import (
    DPCopulaMechanism,
    DPCopulaParams,
    kendall_sample_size,
    margin_noise,
)
from engine.models.copula import allocate_rows, inverse_cdf, sample_copula

MECHANISM = get_mechanism("dpcopula")


def brute_s(x: npt.ArrayLike, y: npt.ArrayLike) -> int:
    """n_concordant − n_discordant by the definition, O(n²)."""
    xs, ys = np.asarray(x), np.asarray(y)
    return sum(
        int(np.sign(xs[i] - xs[j]) * np.sign(ys[i] - ys[j]))
        for i, j in itertools.combinations(range(xs.size), 2)
    )


def table_s(x: npt.ArrayLike, y: npt.ArrayLike, a: int, b: int) -> int:
    xs, ys = np.asarray(x, dtype=np.int64), np.asarray(y, dtype=np.int64)
    table = np.bincount(xs * b + ys, minlength=a * b).reshape(a, b)
    return int(kendall_numerators(table))


def gaussian_data(n: int, seed: int, size: int = 50) -> Dataset:
    """Three columns of ``size`` values from a discretised correlated normal."""
    rng = np.random.default_rng(seed)
    cov = np.array([[1.0, 0.7, -0.4], [0.7, 1.0, -0.2], [-0.4, -0.2, 1.0]])
    z = rng.multivariate_normal(np.zeros(3), cov, n)
    codes = np.clip(np.floor((z + 3.0) / 6.0 * size), 0, size - 1).astype(np.int64)
    return Dataset(Domain(("a", "b", "c"), (size, size, size)), codes)


def mixed_data(n: int, seed: int) -> Dataset:
    """A binary key strongly tied to a large ordinal column, a small nominal one, a constant."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 2))
    key = (z[:, 0] > 0.3).astype(np.int64)
    big = np.clip(np.floor((z[:, 0] + 3) / 6 * 30), 0, 29).astype(np.int64)
    mid = np.clip(np.floor((0.6 * z[:, 0] + 0.8 * z[:, 1] + 3) / 6 * 12), 0, 11).astype(np.int64)
    nominal = rng.integers(0, 4, n)
    const = np.zeros(n, dtype=np.int64)
    domain = Domain(("key", "big", "mid", "nominal", "const"), (2, 30, 12, 4, 1))
    return Dataset(domain, np.column_stack([key, big, mid, nominal, const]))


def run(
    data: Dataset,
    rho: Fraction,
    params: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    noise_seed: int | None = 0,
    **kwargs: Any,
) -> Any:
    return MECHANISM.run(
        data,
        rho,
        MECHANISM.validate_params(params or {}),
        rng=np.random.default_rng(seed),
        noise_source=None if noise_seed is None else random.Random(noise_seed),
        **kwargs,
    )


# ---------------------------------------------------------------------------------------------
# Kendall's numerator
# ---------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    a=st.integers(1, 5),
    b=st.integers(1, 5),
    n=st.integers(0, 25),
    seed=st.integers(0, 2**32 - 1),
)
def test_table_numerator_equals_brute_force_with_ties(a: int, b: int, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, a, n), rng.integers(0, b, n)
    expected = brute_s(x, y)
    assert table_s(x, y, a, b) == expected
    partition = np.zeros(n, dtype=np.int64)
    assert int(kendall_numerators_by_sorting(partition, x, y, 1)[0]) == expected
    if n >= 2 and len(set(x.tolist())) == n and len(set(y.tolist())) == n:
        assert expected / math.comb(n, 2) == pytest.approx(stats.kendalltau(x, y).statistic)


def test_numerators_per_partition_by_table_and_by_sorting() -> None:
    rng = np.random.default_rng(1)
    n, parts = 400, 5
    partition = rng.integers(0, parts, n)
    x, y = rng.integers(0, 9, n), rng.integers(0, 7, n)
    expected = [brute_s(x[partition == p], y[partition == p]) for p in range(parts)]
    by_table = pair_kendall_numerators(partition, x, y, parts, 9, 7)
    by_sorting = kendall_numerators_by_sorting(partition, x, y, parts)
    assert by_table.tolist() == expected == by_sorting.tolist()
    # Huge declared domains take the sorting path and still agree.
    wide = pair_kendall_numerators(partition, x * 1000, y * 1000, parts, 9000, 7000)
    assert wide.tolist() == expected
    assert kendall_numerators(np.zeros((3, 0, 4), dtype=np.int64)).tolist() == [0, 0, 0]


def test_perfect_orders() -> None:
    n = 30
    x = np.arange(n)
    assert table_s(x, x, n, n) == math.comb(n, 2)
    assert table_s(x, n - 1 - x, n, n) == -math.comb(n, 2)


# ---------------------------------------------------------------------------------------------
# Sensitivity of S and the subsample coupling
# ---------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 12),
    values=st.integers(1, 4),
    seed=st.integers(0, 2**32 - 1),
)
def test_adding_a_row_moves_s_by_at_most_the_rows_already_there(
    n: int, values: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, values, n + 1), rng.integers(0, values, n + 1)
    change = abs(brute_s(x, y) - brute_s(x[:n], y[:n]))
    assert change <= n
    # n < n̂ (all rows used on both sides) gives at most n̂ − 1 ≤ 2(n̂ − 1).
    n_hat = n + 1
    assert change <= 2 * (n_hat - 1)


@settings(max_examples=200, deadline=None)
@given(k=st.integers(2, 12), values=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_substituting_a_row_moves_s_by_at_most_2_k_minus_1(k: int, values: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, values, k + 1), rng.integers(0, values, k + 1)
    # T = rows 0..k-1; T' replaces row 0 by row k.
    assert abs(brute_s(x[:k], y[:k]) - brute_s(x[1:], y[1:])) <= 2 * (k - 1)


def test_substitution_bound_is_attained() -> None:
    k = 7
    x = np.arange(k + 1)
    y = np.concatenate(
        [[k + 5], np.arange(1, k + 1)]
    )  # row 0 discordant with all, row k concordant
    # Rows 0 (top y, lowest x) against the rest: all discordant; its replacement: all concordant.
    assert brute_s(x[1:], y[1:]) - brute_s(x[:k], y[:k]) == 2 * (k - 1)


@pytest.mark.parametrize(("n", "k"), [(4, 2), (5, 3), (6, 3), (6, 6)])
def test_the_coupling_of_the_proof(n: int, k: int) -> None:
    """The coupling in DPCopulaMechanism's docstring: T' uniform over k-subsets of D' = D + x;
    T = T' if x ∉ T', else T' − x + y with y uniform over D \\ T'. T must be uniform over the
    k-subsets of D, and every coupled pair must be within 2(k − 1) of each other in S."""
    rng = np.random.default_rng(n * 10 + k)
    x, y = rng.integers(0, 3, n + 1), rng.integers(0, 3, n + 1)
    added = n  # the index of x in D'
    mass: dict[tuple[int, ...], Fraction] = {}
    subsets = list(itertools.combinations(range(n + 1), k))
    for t_prime in subsets:
        weight = Fraction(1, len(subsets))
        if added not in t_prime:
            couples = [(t_prime, weight)]
        else:
            missed = [i for i in range(n) if i not in t_prime]
            couples = [
                (tuple(sorted((set(t_prime) - {added}) | {z})), weight / len(missed))
                for z in missed
            ]
        for t, w in couples:
            mass[t] = mass.get(t, Fraction(0)) + w
            idx, idx_prime = list(t), list(t_prime)
            assert abs(brute_s(x[idx], y[idx]) - brute_s(x[idx_prime], y[idx_prime])) <= 2 * (k - 1)
    assert set(mass) == set(itertools.combinations(range(n), k))
    assert set(mass.values()) == {Fraction(1, math.comb(n, k))}


def _tau_change(rows: list[tuple[int, int]], extra: tuple[int, int]) -> float:
    n = len(rows)
    xs, ys = zip(*rows, strict=True)
    before = brute_s(xs, ys) / math.comb(n, 2)
    after = brute_s((*xs, extra[0]), (*ys, extra[1])) / math.comb(n + 1, 2)
    return abs(after - before)


@pytest.mark.parametrize(("n", "bound"), [(3, 1.0), (5, 0.667)])
def test_tau_a_add_remove_bound_is_4_over_n_plus_1(n: int, bound: float) -> None:
    """The paper's Lemma 4.1 (notes B.1.3): exhaustive over tie-free data of n rows and the
    position of the added row; the largest change of tau-a is exactly 4/(n+1)."""
    worst = 0.0
    for perm in itertools.permutations(range(n)):
        rows = [(2 * i + 1, 2 * p + 1) for i, p in enumerate(perm)]
        for ex, ey in itertools.product(range(0, 2 * n + 1, 2), repeat=2):
            worst = max(worst, _tau_change(rows, (ex, ey)))
    assert worst == pytest.approx(4 / (n + 1))
    assert round(worst, 3) == bound


def test_tau_a_bound_with_ties_and_at_8_rows() -> None:
    # Ties: every dataset of 3 rows on a 4 × 4 grid, every added row (ties never beat 4/(n+1)).
    def s_of(rows: tuple[tuple[int, ...], ...]) -> int:
        return sum(
            (p[0] > q[0]) - (p[0] < q[0]) if p[1] > q[1] else (q[0] > p[0]) - (q[0] < p[0])
            for p, q in itertools.combinations(rows, 2)
            if p[1] != q[1]
        )

    grid = list(itertools.product(range(4), repeat=2))
    worst = max(
        abs(s_of((*rows, extra)) / 6 - s_of(rows) / 3)
        for rows in itertools.product(grid, repeat=3)
        for extra in grid
    )
    assert worst == pytest.approx(1.0)
    # n = 8: the concordant chain plus a row discordant with all of it hits 4/9 = 0.444.
    chain = [(i, i) for i in range(1, 9)]
    assert _tau_change(chain, (0, 9)) == pytest.approx(4 / 9)
    rng = np.random.default_rng(8)
    for _ in range(300):
        rows = [(int(a), int(b)) for a, b in rng.integers(0, 5, (8, 2))]
        extra = (int(rng.integers(0, 5)), int(rng.integers(0, 5)))
        assert _tau_change(rows, extra) <= 4 / 9 + 1e-12


def test_kendall_sample_size_sits_below_the_noisy_count() -> None:
    assert kendall_sample_size(1000.0, 100.0, 10**6) == 970
    assert kendall_sample_size(1000.0, 0.0, 500) == 500
    assert kendall_sample_size(-50.0, 4.0, 10**6) == 2
    with pytest.raises(ValueError):
        kendall_sample_size(float("nan"), 1.0, 10)


# ---------------------------------------------------------------------------------------------
# CSPRNG helpers
# ---------------------------------------------------------------------------------------------


def test_secure_helpers() -> None:
    source = random.Random(5)
    draws = secure_uniform_integers(7, 70_000, source)
    assert draws.min() == 0 and draws.max() == 6
    assert np.abs(np.bincount(draws) / 70_000 - 1 / 7).max() < 0.01
    assert secure_uniform_integers(1, 5, source).tolist() == [0] * 5
    keys = secure_order_keys(1000, source)
    assert np.unique(keys).size == 1000
    rows = np.arange(10, 60, dtype=np.intp)
    chosen = subsample_rows(rows, secure_order_keys(100, source), 20)
    assert chosen.size == 20 and set(chosen.tolist()) <= set(rows.tolist())
    assert subsample_rows(rows, keys, 100) is rows
    # Every 2-subset of 4 rows is about equally likely.
    counts: dict[tuple[int, ...], int] = {}
    small = np.arange(4, dtype=np.intp)
    for _ in range(3000):
        pick = tuple(subsample_rows(small, secure_order_keys(4, source), 2).tolist())
        counts[pick] = counts.get(pick, 0) + 1
    assert len(counts) == 6 and min(counts.values()) > 400


# ---------------------------------------------------------------------------------------------
# Post-processing
# ---------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(m=st.integers(1, 8), seed=st.integers(0, 2**32 - 1))
def test_repair_gives_a_positive_definite_correlation_matrix(m: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    raw = rng.uniform(-1, 1, (m, m))
    repaired = repair_correlation(raw)
    assert np.array_equal(repaired, repaired.T)
    assert np.all(np.diag(repaired) == 1.0)
    assert np.linalg.eigvalsh(repaired).min() > 0
    assert np.abs(repaired).max() <= 1 + 1e-12
    np.linalg.cholesky(repaired)


def test_repair_keeps_a_valid_matrix() -> None:
    valid = np.array([[1.0, 0.3], [0.3, 1.0]])
    assert np.array_equal(repair_correlation(valid), valid)
    with pytest.raises(ValueError):
        repair_correlation(np.ones((2, 3)))


def test_kendall_mapping_and_tie_scales() -> None:
    assert kendall_to_correlation([0.0, 1.0, -1.0, 2.0]).tolist() == pytest.approx(
        [0.0, 1.0, -1.0, 1.0]
    )
    # A median split of each attribute: 1 − Σp² = 1/2, so the scale is 1/2.
    margins = [[np.array([5.0, 5.0])], [np.array([1.0, 1.0])], [np.array([3.0, 0.0])]]
    scales = tie_scales(margins, [(0, 1), (0, 2)])
    assert scales[0].tolist() == pytest.approx([0.5, 1.0])  # constant margin → 1
    # For a median split of a bivariate normal, sin(π/2 · τ_a / scale) recovers r exactly:
    # τ_a = P(conc) − P(disc) = 2·(2·Φ₂(0, 0; r) − 1/2)·... = arcsin(r)/π.
    r = 0.6
    tau_a = math.asin(r) / math.pi
    assert float(kendall_to_correlation(tau_a / 0.5)) == pytest.approx(r)


def test_inverse_cdf_and_allocation() -> None:
    margin = np.array([0.0, 2.0, 0.0, 6.0, 0.0])
    u = np.linspace(0, 1, 1001)
    drawn = inverse_cdf(margin, u)
    assert set(drawn.tolist()) == {1, 3}
    assert np.mean(drawn == 1) == pytest.approx(0.25, abs=0.01)
    assert inverse_cdf(np.zeros(3), np.array([0.1, 0.9])).tolist() == [0, 2]
    assert allocate_rows([1.0, 1.0, 2.0], 7).tolist() == [2, 2, 3]
    assert allocate_rows([0.0, 0.0], 3).sum() == 3
    assert allocate_rows([0.2, 0.0], 0).tolist() == [0, 0]


def test_sample_copula_reproduces_margins_and_correlation() -> None:
    rng = np.random.default_rng(0)
    margins = [np.array([1.0, 2.0, 3.0, 4.0] * 10), np.array([5.0, 1.0, 1.0, 3.0] * 10)]
    sampled = sample_copula([[1.0, 0.8], [0.8, 1.0]], margins, 40_000, rng)
    for j, margin in enumerate(margins):
        observed = np.bincount(sampled[:, j], minlength=margin.size) / 40_000
        assert np.abs(observed - margin / margin.sum()).sum() / 2 < 0.02
    assert stats.kendalltau(sampled[:, 0], sampled[:, 1]).statistic > 0.5
    assert sample_copula(np.eye(2), margins, 0, rng).shape == (0, 2)


def test_normal_scores_and_block_sums() -> None:
    scores = normal_scores(np.array([0, 1, 2]), np.array([1.0, 2.0, 1.0]))
    assert scores[1] == pytest.approx(0.0) and scores[0] == pytest.approx(-scores[2])
    assert np.all(np.isfinite(normal_scores(np.array([0, 1]), np.array([0.0, 0.0]))))
    z = np.array([[1.0, 2.0], [2.0, 4.0], [3.0, 6.0], [1.0, 1.0], [1.0, 2.0]])
    blocks = np.array([0, 0, 0, 1, 1])
    # Block 0: r = 1 → 10; block 1: constant first column → 0; block 2: empty → 0.
    assert block_correlation_grid_sums(z, blocks, 3, [(0, 1)], 10).tolist() == [10]


def test_partition_margins_shrink_and_project() -> None:
    rng = np.random.default_rng(0)
    truth = np.outer([300.0, 100.0], rng.dirichlet(np.ones(20)))
    noisy = truth + rng.normal(0, 30, truth.shape)
    out = partition_margins(noisy, 900.0, np.array([300.0, 100.0]))
    assert out.sum(axis=1) == pytest.approx([300.0, 100.0])
    assert np.all(out >= 0)
    plain = np.stack([np.maximum(row, 0) for row in noisy])
    assert np.abs(out - truth).sum() < np.abs(plain - truth).sum()


def test_association_order_groups_values_by_partition() -> None:
    table = np.array([[50.0, 0.0, 50.0, 1.0], [0.0, 40.0, 1.0, 60.0]])
    order = association_order(table)
    assert sorted(order.tolist()) == [0, 1, 2, 3]
    # Values 0 and 2 (partition 0) end up next to each other, as do 1 and 3.
    assert {frozenset(order[:2].tolist()), frozenset(order[2:].tolist())} == {
        frozenset({0, 2}),
        frozenset({1, 3}),
    }
    assert association_order(np.ones((1, 5))).tolist() == [0, 1, 2, 3, 4]


def test_partition_keys_and_margin_noise() -> None:
    domain = Domain.from_mapping({"big": 50, "b": 2, "c": 3, "one": 1, "d": 9, "e": 12})
    assert partition_keys(domain, 10, 64) == ("b", "c", "d")
    assert partition_keys(domain, 10, 6) == ("b", "c")
    assert partition_keys(domain, 3, 64) == ("b",)
    sizes = [50, 9, 12]
    low = margin_noise(10_000.0, 1, sizes, Fraction(1, 10))
    assert margin_noise(10_000.0, 6, sizes, Fraction(1, 10)) == pytest.approx(6 * low)
    assert margin_noise(20_000.0, 1, sizes, Fraction(1, 10)) == pytest.approx(low / 2)
    assert margin_noise(1.0, 1, [], Fraction(1)) == 0.0


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rho=st.fractions(min_value=Fraction(1, 10_000), max_value=Fraction(100)),
    correlation=st.sampled_from(["kendall", "mle"]),
    hybrid=st.booleans(),
    margin_share=st.floats(0.01, 0.99),
    partition_share=st.floats(0.01, 0.99),
    max_margin_noise=st.sampled_from([0.0, 0.15, 1000.0]),
    kendall_max_rows=st.integers(2, 500),
    ties=st.sampled_from(["tau-b", "none"]),
    shrink=st.booleans(),
    value_order=st.sampled_from(["natural", "small", "association"]),
    n=st.integers(0, 300),
)
def test_spends_exactly_rho_under_any_parameters(
    rho: Fraction,
    correlation: str,
    hybrid: bool,
    margin_share: float,
    partition_share: float,
    max_margin_noise: float,
    kendall_max_rows: int,
    ties: str,
    shrink: bool,
    value_order: str,
    n: int,
) -> None:
    data = mixed_data(n, 3)
    params = {
        "correlation": correlation,
        "hybrid": hybrid,
        "margin_share": margin_share,
        "partition_share": partition_share,
        "max_margin_noise": max_margin_noise,
        "kendall_max_rows": kendall_max_rows,
        "ties": ties,
        "shrink": shrink,
        "value_order": value_order,
        "mle_block_rows": 20,
    }
    result = run(data, rho, params, rows=50)
    assert result.rho_spent == rho == result.rho_used
    assert result.codes.shape == (50, 5)
    assert result.codes.min() >= 0
    assert np.all(result.codes.max(axis=0) < np.asarray(data.domain.sizes))
    assert np.all(result.codes[:, 4] == 0)
    # One release per pair of non-constant copula attributes (2, 3 or 4 of them).
    assert len(result.releases) in (1, 3, 6)


def test_charges_state_the_kendall_sensitivity() -> None:
    data = gaussian_data(2000, 1, size=10)
    result = run(data, Fraction(10**6), {"hybrid": False})
    assert len(result.releases) == 3
    for release in result.releases:
        n_hat = release.sensitivity / 2 + 1
        assert 1990 <= n_hat <= 2000  # three noise sds below the (almost exact) noisy count
        assert release.rho == Fraction(10**6) * Fraction(1, 10) / 3  # (1 − margin_share)/pairs
        assert release.rho == release.sensitivity**2 / (2 * release.sigma2)
    capped = run(data, Fraction(1), {"hybrid": False, "kendall_max_rows": 300})
    assert {r.sensitivity for r in capped.releases} == {Fraction(2 * 299)}


def test_mle_charges() -> None:
    result = run(gaussian_data(500, 2, size=10), Fraction(1, 2), {"correlation": "mle"})
    assert len(result.releases) == 3
    assert {r.sensitivity for r in result.releases} == {Fraction(2000)}
    assert sum((r.rho for r in result.releases), Fraction(0)) == Fraction(1, 2) / 10


@pytest.mark.parametrize("correlation", ["kendall", "mle"])
def test_huge_rho_reproduces_gaussian_dependence(correlation: str) -> None:
    data = gaussian_data(20_000, 7)
    result = run(data, Fraction(10**6), {"correlation": correlation}, seed=3)
    synth = result.codes
    for i, j in itertools.combinations(range(3), 2):
        real_tau = stats.kendalltau(data.codes[:, i], data.codes[:, j]).statistic
        synth_tau = stats.kendalltau(synth[:, i], synth[:, j]).statistic
        assert abs(real_tau - synth_tau) < 0.03, (i, j, real_tau, synth_tau)
    for attr in data.domain.attributes:
        # Two samples of 20 000 rows on 50 values differ by about 0.03 TVD by chance alone.
        assert marginal_tvd(data.codes, synth, data.domain, [attr]) < 0.04
    assert abs(synth.shape[0] - 20_000) <= 2  # rows default to the noisy total


def test_huge_rho_hybrid_keeps_the_key_dependence() -> None:
    data = mixed_data(20_000, 4)
    result = run(data, Fraction(10**6), seed=1)
    attributes = [m.attributes for m in result.measurements]
    assert attributes[0] == ("key", "nominal")  # the candidate keys' histogram
    assert ("key", "nominal", "big") in attributes  # both candidates were kept as keys
    # Sampling alone gives about 0.03 (60 cells) to 0.06 (360 cells) at 20 000 rows.
    for pair in (["key", "big"], ["key", "mid"], ["big", "mid"]):
        assert marginal_tvd(data.codes, result.codes, data.domain, pair) < 0.09, pair
    independent = get_mechanism("independent")
    baseline = independent.run(
        data, Fraction(10**6), independent.validate_params({}), rng=np.random.default_rng(1)
    )
    assert marginal_tvd(data.codes, baseline.codes, data.domain, ["key", "big"]) > 0.3


def test_small_data_keeps_no_keys() -> None:
    data = mixed_data(200, 5)
    result = run(data, Fraction(1, 100))
    # The candidate histogram, then one-way tables only (no key was worth its noise).
    assert [m.attributes for m in result.measurements] == [
        ("key", "nominal"),
        ("key",),
        ("big",),
        ("mid",),
        ("nominal",),
        ("const",),
    ]
    assert result.rho_spent == Fraction(1, 100)


def test_an_all_small_domain_is_one_histogram() -> None:
    rng = np.random.default_rng(0)
    domain = Domain(("a", "b", "c"), (2, 3, 4))
    data = Dataset(domain, np.column_stack([rng.integers(0, s, 500) for s in domain.sizes]))
    result = run(data, Fraction(1))
    assert [m.attributes for m in result.measurements] == [("a", "b", "c")]
    assert result.measurements[0].rho == 1
    assert result.releases == ()
    assert marginal_tvd(data.codes, result.codes, domain, ["a", "b", "c"]) < 0.1


def test_one_column_and_empty_data() -> None:
    domain = Domain(("x",), (40,))
    data = Dataset(domain, np.random.default_rng(0).integers(0, 40, (300, 1)))
    result = run(data, Fraction(1, 3))
    assert [m.rho for m in result.measurements] == [Fraction(1, 3)]
    empty = Dataset(gaussian_data(1, 0).domain, np.empty((0, 3), dtype=np.int64))
    for correlation in ("kendall", "mle"):
        result = run(empty, Fraction(1, 2), {"correlation": correlation})
        assert result.rho_spent == Fraction(1, 2)
        assert result.codes.shape[1] == 3


def test_rows_default_to_the_noisy_total_and_respect_limits() -> None:
    data = gaussian_data(3000, 8, size=20)
    result = run(data, Fraction(1, 50))
    assert result.codes.shape[0] == max(1, round(result.estimated_total))
    assert abs(result.estimated_total - 3000) < 100
    assert run(data, Fraction(1), rows=17).codes.shape == (17, 3)
    assert run(data, Fraction(1), rows=0).codes.shape == (0, 3)
    assert run(data, Fraction(1), max_rows=10).codes.shape == (10, 3)


def test_progress_and_cancellation() -> None:
    data = mixed_data(500, 6)
    seen: list[tuple[float, str]] = []
    run(data, Fraction(1), progress=lambda f, s: seen.append((f, s)))
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert {"measure", "correlate", "sample"} <= {s for _, s in seen}

    for stage in ("measure", "correlate", "sample"):

        def cancel(fraction: float, current: str, stage: str = stage) -> None:
            if current == stage:
                raise SynthesisCancelled

        with pytest.raises(SynthesisCancelled):
            run(data, Fraction(1), progress=cancel)


def test_os_csprng_by_default() -> None:
    result = run(mixed_data(300, 7), Fraction(1), noise_seed=None)
    assert result.rho_spent == 1


def test_the_noise_source_not_rng_drives_the_private_randomness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Subsample, block assignment and noise come from the noise source: with the same source
    and different ``rng`` seeds the released values and the fitted correlations are identical."""
    captured: list[list[float]] = []
    original = sample_copula

    def spy(correlation: Any, margins: Any, rows: int, rng: np.random.Generator) -> Any:
        captured.append(np.asarray(correlation).ravel().tolist())
        return original(correlation, margins, rows, rng)

    monkeypatch.setattr("engine.models.kinds.sample_copula", spy)
    data = gaussian_data(3000, 9, size=15)
    for params in (
        {"kendall_max_rows": 200, "hybrid": False},
        {"correlation": "mle", "mle_block_rows": 50},
    ):
        fits = []
        for rng_seed in (1, 2):
            captured.clear()
            result = run(data, Fraction(1, 5), params, seed=rng_seed, noise_seed=11)
            fits.append(
                (
                    [m.noisy_counts.tolist() for m in result.measurements],
                    list(captured),
                    result.codes,
                )
            )
        assert fits[0][0] == fits[1][0]
        assert fits[0][1] == fits[1][1]
        assert not np.array_equal(fits[0][2], fits[1][2])  # rng only moves the sampling
        captured.clear()
        run(data, Fraction(1, 5), params, seed=1, noise_seed=12)
        assert captured != fits[0][1]


def test_same_seeds_reproduce() -> None:
    data = mixed_data(400, 10)
    first = run(data, Fraction(1), seed=4, noise_seed=4)
    second = run(data, Fraction(1), seed=4, noise_seed=4)
    assert np.array_equal(first.codes, second.codes)


def test_params_are_strict_and_registered() -> None:
    assert isinstance(MECHANISMS["dpcopula"], DPCopulaMechanism)
    schema = MECHANISM.params_schema()
    assert schema["additionalProperties"] is False
    for name, spec in schema["properties"].items():
        assert spec.get("description"), name
    with pytest.raises(pydantic.ValidationError):
        MECHANISM.validate_params({"nope": 1})
    with pytest.raises(pydantic.ValidationError):
        MECHANISM.validate_params({"correlation": "pearson"})
    with pytest.raises(pydantic.ValidationError):
        MECHANISM.validate_params({"margin_share": 1.0})
    params = DPCopulaParams()
    assert MECHANISM.validate_params({}) == params
    with pytest.raises(pydantic.ValidationError):
        params.hybrid = False  # type: ignore[misc]
