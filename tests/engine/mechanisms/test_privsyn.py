"""PrivSyn: InDif's sensitivity, the selection and allocation oracles of the notes (C.2),
consistency, GUM, and the mechanism's contract (exact budget, valid output, progress,
cancellation)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.evaluation import marginal_tvd
from engine.mechanisms import SynthesisCancelled, get_mechanism
from engine.mechanisms.privsyn.parts import (
    NoisyTable,
    c23_weights,
    coarse_shape,
    coarsen,
    combine_marginals,
    connect_isolated,
    frequency_groups,
    greedy_select,
    indif_floor,
    make_consistent,
    noise_error,
    refine_coarse,
)
from engine.models.gum import GUMSettings, Target, indif, run_gum, synthesize_records

FAST = {"iterations": 10, "consistency_rounds": 50}


def correlated(n: int, seed: int) -> Dataset:
    """a → b copies a (with 5% noise), c independent, d depends on c, e copies d mostly."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.95, a, rng.integers(0, 4, n))
    c = rng.integers(0, 3, n)
    d = (c + rng.integers(0, 2, n)) % 3
    e = np.where(rng.random(n) < 0.9, d % 2, rng.integers(0, 2, n))
    domain = Domain(("a", "b", "c", "d", "e"), (4, 4, 3, 3, 2))
    return Dataset(domain, np.column_stack([a, b, c, d, e]).astype(np.int64))


# ---------------------------------------------------------------------------------------------
# InDif
# ---------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    data=st.data(),
    k=st.integers(1, 64),
)
def test_indif_moves_at_most_4_when_a_row_is_added_or_removed(
    rows: int, cols: int, data: st.DataObject, k: int
) -> None:
    counts = np.array(
        data.draw(st.lists(st.integers(0, 12), min_size=rows * cols, max_size=rows * cols)),
        dtype=np.int64,
    ).reshape(rows, cols)
    cell = data.draw(st.integers(0, rows * cols - 1))
    flat = counts.copy().ravel()
    if flat[cell] > 0 and data.draw(st.booleans()):
        flat[cell] -= 1  # remove a row
    else:
        flat[cell] += 1  # add a row
    neighbour = flat.reshape(rows, cols)
    a, b = indif(counts), indif(neighbour)
    assert abs(a - b) <= 4 + 1e-9
    fa, fb = indif_floor(counts, k), indif_floor(neighbour, k)
    assert abs(fa - fb) <= 4 * k
    # The exact integer version is the floor of the float score (up to float rounding).
    assert abs(fa - k * a) <= 1 + 1e-6 * max(1.0, k * a)


def test_indif_oracles() -> None:
    product = np.outer([10.0, 30.0, 60.0], [20.0, 80.0]) / 100
    assert indif(product) == pytest.approx(0.0, abs=1e-9)
    # Two identical binary attributes, 50/50: |0.5 − 0.25|·2 + |0 − 0.25|·2 = 1, times n.
    assert indif(np.array([[50, 0], [0, 50]])) == pytest.approx(100.0)
    assert indif(np.zeros((2, 3))) == 0.0
    assert indif_floor(np.array([[50, 0], [0, 50]]), 1) == 100
    assert indif_floor(np.array([[50, 0], [0, 50]]), 64) == 6400
    assert indif_floor(np.zeros((2, 3), dtype=np.int64), 1) == 0
    # Past 2^30 rows the exact sum runs in Python integers.
    assert indif_floor(np.array([[2**30, 0], [0, 2**30]]), 3) == 3 * 2**31


def test_indif_noise_scale_and_charges() -> None:
    # d = 15 (m = 105), ρ_InDif = 0.001178 → σ = √(16·105/(2ρ)) ≈ 844.4 (notes C.2 #5).
    rng = np.random.default_rng(0)
    domain = Domain(tuple(f"x{i}" for i in range(15)), (2,) * 15)
    data = Dataset(domain, rng.integers(0, 2, (200, 15)))
    rho = Fraction(1178, 10**5)
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params({**FAST, "one_way_share": 0.1, "indif_share": 0.1})
    result = mechanism.run(data, rho, params, rng=rng, rows=20)
    assert len(result.releases) == 105
    indif_rho = sum((r.rho for r in result.releases), Fraction(0))
    assert indif_rho == rho / 10
    for release in result.releases:
        assert release.sensitivity == 4
        assert math.sqrt(float(release.sigma2)) == pytest.approx(844.4, abs=0.1)
        # The L2 view of the whole vector charges the same: (4·√m)²/(2σ²) = ρ_InDif.
        assert 16 * 105 / (2 * release.sigma2) == indif_rho


# ---------------------------------------------------------------------------------------------
# Allocation and selection
# ---------------------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    cells=st.lists(st.integers(1, 10_000), min_size=1, max_size=20),
    rho=st.floats(min_value=1e-4, max_value=10),
)
def test_c23_allocation_closed_form(cells: list[int], rho: float) -> None:
    shares = c23_weights(cells)
    assert shares.sum() == pytest.approx(1.0)
    direct = sum(c / math.sqrt(math.pi * rho * s) for c, s in zip(cells, shares, strict=True))
    assert noise_error(cells, rho) == pytest.approx(direct, rel=1e-9)
    # Any other split does worse (here: equal).
    equal = sum(c / math.sqrt(math.pi * rho / len(cells)) for c in cells)
    assert noise_error(cells, rho) <= equal * (1 + 1e-12)


def test_greedy_selection_oracle() -> None:
    rho = 0.01
    scale = 1 / math.sqrt(math.pi * rho)
    # Equal 4-cell pairs: cost of the first pick = 4^(2/3·3/2)·scale = 4·scale ≈ 22.6.
    scores = [0.0, 10_000.0, 10.0, 5_000.0]
    cells = [4, 4, 4, 4]
    assert greedy_select(scores, cells, rho) == [1, 3]
    # j* maximises φ_j − [(S + c_j^(2/3))^(3/2) − S^(3/2)]/√(πρ): a big table loses to a
    # slightly weaker small one.
    assert greedy_select([1000.0, 900.0], [10_000, 4], rho)[0] == 1
    # A tolerance stops earlier.
    assert greedy_select(scores, cells, rho, tolerance=6_000.0) == [1]
    # Brute force on a small instance: greedy's objective never exceeds selecting nothing and
    # every accepted step lowered it.
    rng = np.random.default_rng(3)
    phi = rng.uniform(0, 2000, 8)
    c = rng.integers(2, 200, 8)
    chosen = greedy_select(phi.tolist(), c.tolist(), rho)
    previous = float(phi.sum())
    for i in range(1, len(chosen) + 1):
        subset = chosen[:i]
        e = noise_error(c[subset].tolist(), rho) + float(np.delete(phi, subset).sum())
        assert e < previous
        previous = e
    assert scale > 0


def test_connect_isolated_and_combination() -> None:
    pairs = list(itertools.combinations(range(4), 2))
    scores = [5.0, 1.0, 0.0, 0.0, 0.0, 3.0]  # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    chosen = connect_isolated(4, pairs, scores, [0])
    # 2 joins via its best pair to a covered attribute (0); 3 then via (2, 3), not (0, 3).
    assert sorted(pairs[i] for i in chosen) == [(0, 1), (0, 2), (2, 3)]
    # A triangle of binary attributes becomes one 3-way marginal; too many cells keeps pairs.
    triangle = [(0, 1), (1, 2), (0, 2), (2, 3)]
    assert combine_marginals([2, 2, 2, 2], triangle, 5000, 4) == [(0, 1, 2), (2, 3)]
    assert combine_marginals([2, 2, 2, 2], triangle, 8, 4) == sorted(triangle)
    assert combine_marginals([2, 2, 2, 2], triangle, 5000, 2) == sorted(triangle)


# ---------------------------------------------------------------------------------------------
# Consistency and GUM
# ---------------------------------------------------------------------------------------------


def _noisy_tables(seed: int) -> list[NoisyTable]:
    data = correlated(400, seed)
    rng = np.random.default_rng(seed)
    sets = [(0,), (1,), (2,), (3,), (0, 1), (1, 2), (0, 2, 3), (2, 3)]
    tables = []
    for attrs in sets:
        names = [data.domain.attributes[a] for a in attrs]
        flat = np.zeros(data.n_rows, dtype=np.int64)
        for name in names:
            flat = flat * data.domain.size(name) + data.column(name)
        shape = tuple(data.domain.size(n) for n in names)
        counts = np.bincount(flat, minlength=math.prod(shape)).reshape(shape).astype(float)
        variance = float(rng.uniform(1, 30))
        tables.append(NoisyTable(attrs, counts + rng.normal(0, variance**0.5, shape), variance))
    return tables


def _project(table: np.ndarray, attrs: tuple[int, ...], sub: tuple[int, ...]) -> np.ndarray:
    projected: np.ndarray = table.sum(axis=tuple(i for i, a in enumerate(attrs) if a not in sub))
    return projected


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_consistency_agrees_is_non_negative_and_shares_a_total(seed: int) -> None:
    tables = _noisy_tables(seed)
    out, total = make_consistent(tables, rounds=1000)
    assert total > 0
    for t, table in zip(tables, out, strict=True):
        assert table.shape == t.counts.shape
        assert table.min() >= 0
        assert table.sum() == pytest.approx(total, rel=1e-9)
    for (i, a), (j, b) in itertools.combinations(enumerate(tables), 2):
        shared = tuple(sorted(set(a.attributes) & set(b.attributes)))
        if shared:
            np.testing.assert_allclose(
                _project(out[i], a.attributes, shared),
                _project(out[j], b.attributes, shared),
                atol=1e-5 * total,
            )


def test_one_consistency_step_projects_exactly_onto_the_weighted_average() -> None:
    # Non-negative inputs: the first consistency step already satisfies everything.
    t1 = NoisyTable((0, 1), np.array([[10.0, 20.0], [30.0, 40.0]]), 1.0)
    t2 = NoisyTable((1,), np.array([50.0, 70.0]), 4.0)
    out, total = make_consistent([t1, t2], rounds=1)
    # Totals: weights 1/(c·σ²) = 1/4 and 1/8 → (100·2 + 120)/3.
    assert total == pytest.approx((100 * 2 + 120) / 3)
    # On {1}: g = 2 and 1, variances 2 and 4 → weights 2/3, 1/3, after the totals agree.
    np.testing.assert_allclose(out[0].sum(axis=0), out[1])


def _exact_targets(data: Dataset, sets: list[tuple[int, ...]]) -> list[Target]:
    targets = []
    for attrs in sets:
        shape = tuple(data.domain.sizes[a] for a in attrs)
        cell = np.ravel_multi_index(tuple(data.codes[:, a] for a in attrs), shape)
        counts = np.bincount(cell, minlength=math.prod(shape)).reshape(shape)
        targets.append(Target(attrs, counts.astype(np.float64)))
    return targets


def _tvd_to(records: np.ndarray, target: Target) -> float:
    shape = target.probabilities.shape
    cell = np.ravel_multi_index(tuple(records[:, a] for a in target.attributes), shape)
    p = np.bincount(cell, minlength=target.probabilities.size) / records.shape[0]
    return 0.5 * float(np.abs(p - target.probabilities.ravel()).sum())


@pytest.mark.parametrize(
    ("append", "separate", "tree"), [(True, True, True), (False, False, False)]
)
def test_gum_reproduces_exact_marginals(append: bool, separate: bool, tree: bool) -> None:
    data = correlated(3000, 5)
    sets = [(0, 1), (1, 2), (2, 3), (3, 4), (0, 3), (1, 3, 4)]
    targets = _exact_targets(data, sets)
    one_way = [
        np.bincount(data.codes[:, j], minlength=s).astype(np.float64)
        for j, s in enumerate(data.domain.sizes)
    ]
    gum = GUMSettings(iterations=60, append=append, separate=separate, tree_init=tree)
    records = synthesize_records(one_way, targets, 3000, gum, np.random.default_rng(0))
    assert records.shape == (3000, 5)
    errors = [_tvd_to(records, t) for t in targets]
    assert max(errors) < 0.02, errors


def test_gum_error_falls_and_keeps_the_row_count() -> None:
    data = correlated(2000, 6)
    targets = _exact_targets(data, [(0, 1), (1, 2), (2, 3), (0, 2)])
    rng = np.random.default_rng(1)
    records = rng.integers(0, 2, (2000, 5))  # a poor start: half the values never appear
    history = run_gum(records, targets, GUMSettings(iterations=30), rng)
    assert records.shape == (2000, 5)
    assert history[-1] < 0.1 * history[0]
    assert history[-1] < 0.02


def test_gum_cells_order_reproduces_exact_marginals() -> None:
    data = correlated(3000, 5)
    targets = _exact_targets(data, [(0, 1), (1, 2), (2, 3), (3, 4), (0, 3), (1, 3, 4)])
    one_way = [
        np.bincount(data.codes[:, j], minlength=s).astype(np.float64)
        for j, s in enumerate(data.domain.sizes)
    ]
    gum = GUMSettings(iterations=60, order="cells")
    records = synthesize_records(one_way, targets, 3000, gum, np.random.default_rng(0))
    assert max(_tvd_to(records, t) for t in targets) < 0.02
    with pytest.raises(ValueError, match="order"):
        GUMSettings(order="random")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Coarse pair measurements
# ---------------------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.floats(min_value=-5, max_value=1000), min_size=1, max_size=60),
    groups=st.integers(1, 70),
)
def test_frequency_groups_are_consecutive_runs(counts: list[float], groups: int) -> None:
    labels = frequency_groups(np.array(counts), groups)
    assert labels.shape == (len(counts),)
    assert labels[0] == 0 and np.all(np.diff(labels) >= 0) and np.all(np.diff(labels) <= 1)
    assert int(labels.max()) + 1 <= min(groups, len(counts))


def test_frequency_groups_balance_mass() -> None:
    labels = frequency_groups(np.ones(100), 10)
    assert np.array_equal(np.bincount(labels), np.full(10, 10))
    spike = np.array([1.0] * 10 + [1000.0] + [1.0] * 10)
    assert int(frequency_groups(spike, 4).max()) + 1 <= 4


@pytest.mark.parametrize(
    ("a", "b", "cells"), [(56, 36, 100), (2, 90, 100), (90, 3, 64), (5, 5, 100), (40, 40, 10)]
)
def test_coarse_shape_fits(a: int, b: int, cells: int) -> None:
    g_a, g_b = coarse_shape(a, b, cells)
    assert 1 <= g_a <= a and 1 <= g_b <= b and g_a * g_b <= cells


def test_refine_coarse_keeps_the_one_ways_and_recovers_block_tables() -> None:
    rng = np.random.default_rng(0)
    group_a = np.repeat(np.arange(3), [4, 3, 5])
    group_b = np.repeat(np.arange(2), [6, 4])
    block = rng.random((3, 2)) * 100
    p_a, p_b = rng.random(12) + 0.1, rng.random(10) + 0.1
    # A table whose dependence lives on the groups only.
    within_a = p_a / np.bincount(group_a, weights=p_a)[group_a]
    within_b = p_b / np.bincount(group_b, weights=p_b)[group_b]
    truth = block[group_a][:, group_b] * within_a[:, None] * within_b[None, :]
    fine = refine_coarse(
        coarsen(truth, group_a, group_b), group_a, group_b, truth.sum(1), truth.sum(0)
    )
    assert np.allclose(fine, truth, rtol=1e-4, atol=1e-6)
    noisy = coarsen(truth, group_a, group_b) + rng.normal(0, 30, (3, 2))
    fine = refine_coarse(noisy, group_a, group_b, truth.sum(1), truth.sum(0))
    assert np.all(fine >= 0)
    assert np.allclose(fine.sum(1), truth.sum(1), rtol=1e-3)
    assert np.allclose(fine.sum(0), truth.sum(0), rtol=1e-3)


def wide(n: int, seed: int) -> Dataset:
    """x and y (30 values each) move together; z (3 values) is independent."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 30, n)
    y = np.clip(x + rng.integers(-2, 3, n), 0, 29)
    z = rng.integers(0, 3, n)
    return Dataset(Domain(("x", "y", "z"), (30, 30, 3)), np.column_stack([x, y, z]))


def test_coarse_pairs_spend_exactly_rho_and_keep_a_large_dependence() -> None:
    data = wide(4000, 0)
    mechanism = get_mechanism("privsyn")
    tvds = {}
    for coarse in (0, 6):
        params = mechanism.validate_params(
            {
                **FAST,
                "coarse_pairs": coarse,
                "coarse_selected_above": 0,
                "greedy_tolerance": 1e12,  # the greedy keeps no pair: only coarse ones remain
            }
        )
        result = mechanism.run(data, Fraction(1, 20), params, rng=np.random.default_rng(0))
        assert result.rho_spent == Fraction(1, 20) == result.rho_used
        coarse_charges = [r for r in result.releases if "coarse" in r.description]
        assert len(coarse_charges) == (1 if coarse else 0)
        tvds[coarse] = marginal_tvd(data.codes, result.codes, data.domain, ["x", "y"])
    assert tvds[6] < 0.5 * tvds[0]


def test_large_selected_pairs_are_measured_coarse() -> None:
    data = wide(4000, 1)
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params({**FAST, "coarse_selected_above": 200})
    result = mechanism.run(data, Fraction(1), params, rng=np.random.default_rng(0))
    assert result.rho_spent == Fraction(1)
    assert all(len(m.attributes) < 2 or "z" in m.attributes for m in result.measurements)
    assert any("coarse marginal of (x, y)" in r.description for r in result.releases)
    # Ten groups of three values cannot hold a ±2 band exactly (about 0.3 here), but independent
    # columns would be near 0.8.
    assert marginal_tvd(data.codes, result.codes, data.domain, ["x", "y"]) < 0.45


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho", [Fraction(1, 3), Fraction(14973057673, 10**12), Fraction(5)])
def test_spends_exactly_rho(rho: Fraction) -> None:
    mechanism = get_mechanism("privsyn")
    result = mechanism.run(
        correlated(500, 1),
        rho,
        mechanism.validate_params(FAST),
        rng=np.random.default_rng(0),
        rows=100,
    )
    assert result.rho_spent == rho == result.rho_used
    assert result.codes.shape == (100, 5)
    assert len(result.releases) == 10  # one InDif score per pair
    assert result.selections == ()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rho=st.fractions(min_value=Fraction(1, 10_000), max_value=Fraction(50)),
    one_way=st.floats(min_value=0.01, max_value=0.6),
    indif_share=st.floats(min_value=0.01, max_value=0.39),
    grid=st.integers(1, 64),
    isolated=st.sampled_from(["connect", "independent"]),
    compress=st.booleans(),
    clique=st.integers(2, 5),
    coarse=st.integers(0, 3),
    coarse_cells=st.integers(4, 20),
    gain=st.floats(min_value=0, max_value=1),
    above=st.integers(0, 12),
)
def test_never_overspends_under_any_parameters(
    rho: Fraction,
    one_way: float,
    indif_share: float,
    grid: int,
    isolated: str,
    compress: bool,
    clique: int,
    coarse: int,
    coarse_cells: int,
    gain: float,
    above: int,
) -> None:
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params(
        {
            **FAST,
            "coarse_pairs": coarse,
            "coarse_cells": coarse_cells,
            "coarse_gain": gain,
            "coarse_selected_above": above,
            "one_way_share": one_way,
            "indif_share": indif_share,
            "indif_grid": grid,
            "isolated": isolated,
            "compress": compress,
            "max_clique_size": clique,
        }
    )
    data = correlated(300, 2)
    result = mechanism.run(data, rho, params, rng=np.random.default_rng(1))
    assert result.rho_spent == rho
    assert result.codes.shape[1] == 5
    assert result.codes.min() >= 0
    assert np.all(result.codes.max(axis=0) < np.asarray(data.domain.sizes))
    assert len(result.measurements) >= 5 + 1


def test_shares_must_leave_room_for_the_marginals() -> None:
    with pytest.raises(ValueError, match="below 1"):
        get_mechanism("privsyn").validate_params({"one_way_share": 0.6, "indif_share": 0.4})


def test_one_column_spends_everything_on_it() -> None:
    domain = Domain(("a",), (5,))
    data = Dataset(domain, np.random.default_rng(0).integers(0, 5, (200, 1)))
    mechanism = get_mechanism("privsyn")
    result = mechanism.run(
        data, Fraction(1, 2), mechanism.validate_params(FAST), rng=np.random.default_rng(0)
    )
    assert [m.rho for m in result.measurements] == [Fraction(1, 2)]
    assert result.releases == ()


def test_nothing_selected_spends_the_rest_on_one_way_marginals() -> None:
    rng = np.random.default_rng(0)
    domain = Domain(("a", "b", "c"), (3, 3, 3))
    data = Dataset(domain, rng.integers(0, 3, (300, 3)))  # independent columns
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params(
        {**FAST, "isolated": "independent", "greedy_tolerance": 1e12}
    )
    result = mechanism.run(data, Fraction(1, 100), params, rng=rng)
    assert result.rho_spent == Fraction(1, 100)
    assert all(len(m.attributes) == 1 for m in result.measurements)
    assert len(result.measurements) == 6


def test_keeps_the_strong_pair_that_independent_loses() -> None:
    data = correlated(5000, 4)
    mechanism = get_mechanism("privsyn")
    result = mechanism.run(
        data, Fraction(10), mechanism.validate_params(FAST), rng=np.random.default_rng(5)
    )
    baseline = get_mechanism("independent").run(
        data,
        Fraction(10),
        get_mechanism("independent").validate_params({}),
        rng=np.random.default_rng(5),
    )
    ours = marginal_tvd(data.codes, result.codes, data.domain, ["a", "b"])
    theirs = marginal_tvd(data.codes, baseline.codes, data.domain, ["a", "b"])
    assert ours < 0.05 < 0.5 < theirs
    assert abs(result.codes.shape[0] - 5000) < 50  # rows default to the noisy total


def test_progress_and_cancellation() -> None:
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params(FAST)
    seen: list[tuple[float, str]] = []
    mechanism.run(
        correlated(300, 6),
        Fraction(1),
        params,
        rng=np.random.default_rng(0),
        progress=lambda f, s: seen.append((f, s)),
    )
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert {"measure", "select", "estimate", "sample"} <= {s for _, s in seen}
    assert sum(1 for _, s in seen if s == "sample") >= FAST["iterations"]

    def cancel(fraction: float, stage: str) -> None:
        if stage == "sample" and fraction > 0.5:
            raise SynthesisCancelled

    with pytest.raises(SynthesisCancelled):
        mechanism.run(
            correlated(300, 6), Fraction(1), params, rng=np.random.default_rng(0), progress=cancel
        )


def test_noise_source_and_rng_make_runs_reproducible() -> None:
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params(FAST)
    runs = [
        mechanism.run(
            correlated(300, 8),
            Fraction(1),
            params,
            rng=np.random.default_rng(3),
            noise_source=random.Random(9),
        )
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].codes, runs[1].codes)


def test_empty_output_and_tiny_budgets() -> None:
    mechanism = get_mechanism("privsyn")
    params = mechanism.validate_params(FAST)
    result = mechanism.run(
        correlated(50, 9), Fraction(1, 10**6), params, rng=np.random.default_rng(0), rows=0
    )
    assert result.codes.shape == (0, 5)
    result = mechanism.run(
        correlated(50, 9), Fraction(1, 10**6), params, rng=np.random.default_rng(0)
    )
    assert result.rho_spent == Fraction(1, 10**6)
