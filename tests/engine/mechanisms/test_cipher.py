"""CIPHER: the linear system of the notes (A.1.3/A.1.4), the batched ridge solver, the
reconstruction from exact marginals, and the mechanism's contract (exact budget, valid output,
progress, cancellation, refusal of domains that are too large)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.sparse.linalg import lsqr

from engine.domain import Dataset, Domain
from engine.evaluation import marginal_tvd
from engine.marginals import count_marginal
from engine.mechanisms import MECHANISMS, DomainRefused, SynthesisCancelled, get_mechanism
from engine.mechanisms.cipher import mechanism as cipher_module
from engine.mechanisms.cipher.mechanism import (
    DEFAULT_MAX_CELLS,
    CIPHERMechanism,
    CIPHERParams,
    reconstruct,
    reconstructed_cells,
    solve_ridge_batch,
    system_matrix,
)
from tests.engine.support import correlated

FloatArray = npt.NDArray[np.float64]
MakeDataset = Callable[[Domain, int, int], Dataset]

MECHANISM = CIPHERMechanism()


def run(
    data: Dataset,
    rho: Fraction,
    params: dict[str, Any] | None = None,
    *,
    seed: int = 0,
    noise_seed: int | None = 0,
    rows: int | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> Any:
    return MECHANISM.run(
        data,
        rho,
        MECHANISM.validate_params(params or {}),
        rng=np.random.default_rng(seed),
        rows=rows,
        progress=progress,
        noise_source=None if noise_seed is None else random.Random(noise_seed),
    )


def marginal(joint: FloatArray, keep: tuple[int, ...]) -> FloatArray:
    drop = tuple(a for a in range(joint.ndim) if a not in keep)
    out: FloatArray = joint.sum(axis=drop)
    return out


def pairwise_loglinear(sizes: tuple[int, ...], scale: float, seed: int) -> FloatArray:
    """A random joint with only 2-way interactions (the notes' A.1.8 toy truth)."""
    rng = np.random.default_rng(seed)
    log_p = np.zeros(sizes)
    for a, b in itertools.combinations(range(len(sizes)), 2):
        shape = [1] * len(sizes)
        shape[a], shape[b] = sizes[a], sizes[b]
        log_p = log_p + rng.normal(0.0, scale, (sizes[a], sizes[b])).reshape(shape)
    joint = np.exp(log_p)
    out: FloatArray = joint / joint.sum()
    return out


def exact_tables(joint: FloatArray, order: int) -> dict[tuple[int, ...], FloatArray]:
    return {q: marginal(joint, q) for q in itertools.combinations(range(joint.ndim), order)}


def batch_inputs(
    full: FloatArray,
) -> tuple[FloatArray, list[FloatArray], list[FloatArray], list[FloatArray]]:
    """P(R), the P(O ∪ {t}) tables (t last) and the batched solver's inputs for one subset
    whose target is the last axis of ``full``."""
    m = full.ndim - 1
    k_t = full.shape[-1]
    p_r = full.sum(axis=-1)
    p_ot = [full.sum(axis=i) for i in range(m)]
    weights = [(p_r / p_r.sum(axis=i, keepdims=True))[None, ..., None] for i in range(m)]
    rhs = [
        np.expand_dims((t / t.sum(axis=-1, keepdims=True))[None, ..., : k_t - 1], 1 + i)
        for i, t in enumerate(p_ot)
    ]
    return p_r, p_ot, weights, rhs


# ---------------------------------------------------------------------------------------------
# The linear system and its solver
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("k1", "k2", "k3"), [(3, 4, 2), (2, 2, 3), (4, 3, 5)])
def test_three_variable_example_dimensions(k1: int, k2: int, k3: int) -> None:
    """Notes A.1.3: b is (K1+K2)(K3−1), z is K1·K2·(K3−1), and A has K3−1 identical blocks of
    (K1+K2) × (K1·K2) holding P(V2|V1), P(V1|V2) or 0."""
    full = pairwise_loglinear((k1, k2, k3), 1.0, seed=k1 * 100 + k2 * 10 + k3)
    p_r, p_ot, _, _ = batch_inputs(full)
    a, b = system_matrix(p_r, p_ot)
    assert b.shape == ((k1 + k2) * (k3 - 1),)
    assert a.shape == ((k1 + k2) * (k3 - 1), k1 * k2 * (k3 - 1))
    dense = a.toarray()
    rows, cols = k1 + k2, k1 * k2
    block = dense[:rows, :cols]
    for c in range(k3 - 1):
        np.testing.assert_array_equal(
            dense[c * rows : (c + 1) * rows, c * cols : (c + 1) * cols], block
        )
        off = dense[c * rows : (c + 1) * rows].copy()
        off[:, c * cols : (c + 1) * cols] = 0
        assert not off.any(), "A is block-diagonal over target levels"
    p12 = full.sum(axis=2)
    v2_given_v1 = p12 / p12.sum(axis=1, keepdims=True)
    v1_given_v2 = p12 / p12.sum(axis=0, keepdims=True)
    for a1, a2 in itertools.product(range(k1), range(k2)):
        column = a1 * k2 + a2
        expected = np.zeros(rows)
        expected[a1] = v2_given_v1[a1, a2]  # rows "V1 = a": coefficients P(V2 | V1 = a)
        expected[k1 + a2] = v1_given_v2[a1, a2]  # rows "V2 = b": coefficients P(V1 | V2 = b)
        np.testing.assert_allclose(block[:, column], expected)
    # b = (P(V3|V1), P(V3|V2)) without the last level, level-major.
    p13, p23 = full.sum(axis=1), full.sum(axis=0)
    v3_v1 = p13 / p13.sum(axis=1, keepdims=True)
    v3_v2 = p23 / p23.sum(axis=1, keepdims=True)
    for c in range(k3 - 1):
        np.testing.assert_allclose(
            b[c * rows : (c + 1) * rows], np.concatenate([v3_v1[:, c], v3_v2[:, c]])
        )


def ridge_objective(a: Any, b: FloatArray, z: FloatArray, lam: float) -> float:
    return float(np.sum((a @ z - b) ** 2) + lam * np.sum(z * z))


def noisy_joint(shape: tuple[int, ...], seed: int) -> FloatArray:
    """A strongly structured joint with noise, floored away from 0 (like a clipped table)."""
    full = pairwise_loglinear(shape, 1.0, seed)
    noise = np.random.default_rng(seed + 1).normal(0, 0.2 / full.size, full.shape)
    full = np.maximum(full + noise, 1e-6 / full.size)
    out: FloatArray = full / full.sum()
    return out


@pytest.mark.parametrize(
    "shape",
    [(3, 4, 2), (2, 3, 2, 3), (4, 4, 2, 2), (2, 2, 2, 2, 2, 2, 2), (5, 7, 3)],
)
@pytest.mark.parametrize("lam", [1e-3, 0.1])
def test_batched_solver_is_the_ridge_solution(shape: tuple[int, ...], lam: float) -> None:
    """Dense (≤ 32 unknowns per level) and conjugate-gradient paths both minimise
    ‖Az − b‖² + λ‖z‖² (scipy's LSQR with damp = √λ as the reference): exactly for the dense
    path, to a relative excess of 1e-6 for the iterative one."""
    full = noisy_joint(shape, sum(shape))
    p_r, p_ot, weights, rhs = batch_inputs(full)
    a, b = system_matrix(p_r, p_ot)
    reference = lsqr(a, b, damp=math.sqrt(lam), atol=1e-15, btol=1e-15, iter_lim=100_000)[0]
    assert np.linalg.norm(a.T @ (a @ reference - b) + lam * reference) < 1e-8
    z = np.moveaxis(solve_ridge_batch(weights, rhs, lam)[0], -1, 0).ravel()
    best = ridge_objective(a, b, reference, lam)
    assert ridge_objective(a, b, z, lam) <= best * (1 + 1e-6) + 1e-14
    if math.prod(shape[:-1]) <= 32:
        np.testing.assert_allclose(z, reference, atol=1e-7)
    else:
        np.testing.assert_allclose(a @ z, a @ reference, atol=1e-3)


def test_batched_solver_solves_each_system_of_a_batch() -> None:
    shape = (2, 3, 2, 2, 2, 2)
    fulls = [noisy_joint(shape, s) for s in range(5)]
    parts = [batch_inputs(f) for f in fulls]
    weights = [np.concatenate([p[2][i] for p in parts]) for i in range(5)]
    rhs = [np.concatenate([p[3][i] for p in parts]) for i in range(5)]
    batched = solve_ridge_batch(weights, rhs, 1e-3)
    for (p_r, p_ot, _, _), together in zip(parts, batched, strict=True):
        a, b = system_matrix(p_r, p_ot)
        reference = lsqr(a, b, damp=math.sqrt(1e-3), atol=1e-15, btol=1e-15)[0]
        z = np.moveaxis(together, -1, 0).ravel()
        best = ridge_objective(a, b, reference, 1e-3)
        assert ridge_objective(a, b, z, 1e-3) <= best * (1 + 1e-6) + 1e-14


# ---------------------------------------------------------------------------------------------
# Reconstruction from exact (noise-free) marginals
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(10))
def test_exact_two_way_tables_are_reproduced_at_p3(seed: int) -> None:
    """Notes A.1.8: from exact 2-way marginals of a pairwise log-linear joint the reconstructed
    2-way tables match within 1e-2 TVD (they match exactly before the final clipping)."""
    sizes = (3, 4, 2)
    joint = pairwise_loglinear(sizes, 0.3, seed)
    tables = exact_tables(joint, 2)
    result = reconstruct(sizes, tables, rng=np.random.default_rng(seed))
    for q, table in tables.items():
        assert 0.5 * np.abs(marginal(result, q) - table).sum() < 1e-2, q
    # Without λ's shrinkage and the final correction, the solve matches the margins exactly.
    unclipped = reconstruct(
        sizes, tables, rng=np.random.default_rng(seed), clip_mid=False, lam=1e-12
    )
    if unclipped.min() > 0:
        for q, table in tables.items():
            np.testing.assert_allclose(marginal(unclipped, q), table, atol=1e-8)


@pytest.mark.parametrize("sizes", [(3, 4, 2), (2, 2, 3, 3), (3, 3, 3, 3, 2), (2,) * 8])
def test_exact_marginals_beat_independence(sizes: tuple[int, ...]) -> None:
    """On average over a few truths, the reconstruction from exact 2-way tables is closer to
    the truth than the product of the one-way marginals (notes A.1.8's table)."""
    ours, independent = [], []
    for seed in range(4):
        joint = pairwise_loglinear(sizes, 1.0, seed)
        result = reconstruct(sizes, exact_tables(joint, 2), rng=np.random.default_rng(seed))
        product = np.ones(sizes)
        for a in range(len(sizes)):
            shape = [1] * len(sizes)
            shape[a] = sizes[a]
            product = product * marginal(joint, (a,)).reshape(shape)
        ours.append(0.5 * np.abs(result - joint).sum())
        independent.append(0.5 * np.abs(product - joint).sum())
    assert np.mean(ours) < np.mean(independent)


@pytest.mark.parametrize("sizes", [(3,), (2, 5), (3, 4, 2), (2, 2, 3, 2)])
@pytest.mark.parametrize("clip_mid", [True, False])
def test_full_table_in_q_gives_the_true_joint(sizes: tuple[int, ...], clip_mid: bool) -> None:
    joint = pairwise_loglinear(sizes, 1.0, seed=len(sizes))
    result = reconstruct(sizes, {tuple(range(len(sizes))): joint}, clip_mid=clip_mid)
    np.testing.assert_allclose(result, joint, rtol=1e-6, atol=1e-12)


def test_the_mechanism_returns_the_true_joint_when_q_is_the_full_table() -> None:
    """The issue's "true joint from consistent marginals on a small domain": with Q the full
    table (order ≥ p) and negligible noise, the synthetic table is the input table."""
    domain = Domain(("a", "b", "c"), (3, 2, 4))
    rng = np.random.default_rng(5)
    codes = np.column_stack([rng.integers(0, k, 600) for k in domain.sizes])
    data = Dataset(domain, codes)
    result = run(data, Fraction(10**9), {"order": 3}, rows=600)
    synthetic = Dataset(domain, result.codes)
    np.testing.assert_array_equal(
        count_marginal(synthetic, domain.attributes), count_marginal(data, domain.attributes)
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5).map(tuple),
    order=st.integers(1, 3),
    clip_mid=st.booleans(),
    noise=st.floats(0.0, 0.5),
    seed=st.integers(0, 2**16),
)
def test_output_is_a_distribution(
    sizes: tuple[int, ...], order: int, clip_mid: bool, noise: float, seed: int
) -> None:
    """Whatever the (noisy, possibly negative) inputs: finite, non-negative, sums to 1."""
    p0 = min(order, len(sizes))
    rng = np.random.default_rng(seed)
    tables = {}
    for q in itertools.combinations(range(len(sizes)), p0):
        shape = tuple(sizes[a] for a in q)
        table = rng.dirichlet(np.ones(math.prod(shape))).reshape(shape)
        tables[q] = table + rng.normal(0, noise, shape)
    result = reconstruct(sizes, tables, clip_mid=clip_mid, rng=rng)
    assert result.shape == sizes
    assert np.all(np.isfinite(result)) and result.min() >= 0
    assert result.sum() == pytest.approx(1.0, abs=1e-9)


def test_reconstruct_validates_its_tables() -> None:
    joint = pairwise_loglinear((2, 3, 2), 1.0, 0)
    tables = exact_tables(joint, 2)
    with pytest.raises(ValueError, match="every p0-subset"):
        reconstruct((2, 3, 2), {k: v for k, v in tables.items() if k != (0, 1)})
    with pytest.raises(ValueError, match="shape"):
        reconstruct((2, 3, 2), {**tables, (0, 1): np.ones((3, 2)) / 6})
    with pytest.raises(ValueError, match="rng"):
        reconstruct((2, 3, 2), tables)
    # "largest" is deterministic and needs no rng.
    first = reconstruct((2, 3, 2), tables, target="largest")
    np.testing.assert_array_equal(first, reconstruct((2, 3, 2), tables, target="largest"))


def test_reconstructed_cells_counts_every_subset_above_the_order() -> None:
    sizes = (2, 3, 1, 4)
    for order in (1, 2, 3):
        kept = [k for k in sizes if k > 1]
        expected = sum(
            math.prod(s)
            for j in range(order + 1, len(kept) + 1)
            for s in itertools.combinations(kept, j)
        )
        assert reconstructed_cells(sizes, order) == expected
    assert reconstructed_cells((2,) * 16, 2) == 3**16 - 1 - 32 - 120 * 4
    assert reconstructed_cells((5, 5), 3) == 0


# ---------------------------------------------------------------------------------------------
# The mechanism
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    order=st.integers(1, 3),
    clip_mid=st.booleans(),
    numerator=st.integers(1, 10**6),
    denominator=st.integers(1, 10**6),
    n=st.integers(0, 60),
    seed=st.integers(0, 2**16),
)
def test_spends_exactly_rho(
    sizes: list[int],
    order: int,
    clip_mid: bool,
    numerator: int,
    denominator: int,
    n: int,
    seed: int,
) -> None:
    domain = Domain(tuple(f"c{i}" for i in range(len(sizes))), tuple(sizes))
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, k, n) for k in sizes]).reshape(n, len(sizes))
    rho = Fraction(numerator, denominator)
    result = run(
        Dataset(domain, codes), rho, {"order": order, "clip_mid": clip_mid}, seed=seed, rows=7
    )
    assert result.rho_spent == rho
    assert result.rho_used == rho
    assert sum((m.rho for m in result.measurements), Fraction(0)) == rho
    assert len({m.rho for m in result.measurements}) == 1, "ρ is split equally over Q"
    assert result.codes.shape == (7, len(sizes))


def test_measures_every_order_way_marginal_of_the_non_constant_attributes() -> None:
    domain = Domain(("a", "b", "flag", "c", "d"), (2, 3, 1, 2, 4))
    data = Dataset(domain, np.zeros((10, 5), dtype=np.int64))
    for order, expected in [
        (1, [("a",), ("b",), ("c",), ("d",)]),
        (2, list(itertools.combinations(("a", "b", "c", "d"), 2))),
        (3, list(itertools.combinations(("a", "b", "c", "d"), 3))),
    ]:
        result = run(data, Fraction(1, 2), {"order": order}, rows=3)
        assert [m.attributes for m in result.measurements] == expected
        for m in result.measurements:
            assert m.rho == Fraction(1, 2) / len(expected)
            assert m.sigma2 == Fraction(len(expected))  # |Q|/(2ρ) with ρ = 1/2
            assert m.sensitivity == 1
    small = Dataset(Domain(("a", "b"), (3, 2)), np.zeros((4, 2), dtype=np.int64))
    assert [m.attributes for m in run(small, Fraction(1), {"order": 3}).measurements] == [
        ("a", "b")
    ]


def test_output_rows_decode_to_the_domain(small_domain: Domain, make_dataset: MakeDataset) -> None:
    data = make_dataset(small_domain, 400, 1)
    for synthesis in ("round", "sample"):
        result = run(data, Fraction(1, 2), {"synthesis": synthesis}, rows=1000)
        assert result.codes.shape == (1000, len(small_domain))
        assert result.codes.min() >= 0
        assert np.all(result.codes.max(axis=0) < np.array(small_domain.sizes))
        assert not result.codes[:, small_domain.index("flag")].any()


def test_rows_default_to_the_noisy_total(small_domain: Domain, make_dataset: MakeDataset) -> None:
    data = make_dataset(small_domain, 3000, 2)
    result = run(data, Fraction(10**4))
    assert abs(result.estimated_total - 3000) <= 30
    assert result.codes.shape[0] == max(1, round(result.estimated_total))
    sizes = {run(data, Fraction(1, 1000), noise_seed=s).codes.shape[0] for s in range(6)}
    assert len(sizes) > 1, "the row count is noisy, never the true n"


@pytest.mark.parametrize("rows", [0, 1, 37])
def test_explicit_rows(rows: int, small_domain: Domain, make_dataset: MakeDataset) -> None:
    result = run(make_dataset(small_domain, 100, 3), Fraction(1), rows=rows)
    assert result.codes.shape == (rows, len(small_domain))


def test_degenerate_domains() -> None:
    constant = Domain(("a", "b"), (1, 1))
    result = run(Dataset(constant, np.zeros((20, 2), dtype=np.int64)), Fraction(1), rows=5)
    assert result.codes.shape == (5, 2) and not result.codes.any()
    assert [m.attributes for m in result.measurements] == [("a",)]
    single = Domain(("x", "y"), (1, 5))
    codes = np.column_stack([np.zeros(50, dtype=np.int64), np.arange(50) % 5])
    result = run(Dataset(single, codes), Fraction(1))
    assert result.codes.shape[1] == 2 and not result.codes[:, 0].any()
    empty = Dataset(Domain(("a", "b", "c"), (2, 3, 2)), np.empty((0, 3), dtype=np.int64))
    for noise_seed in range(3):
        result = run(empty, Fraction(1, 10), noise_seed=noise_seed)
        assert result.rho_spent == Fraction(1, 10)


def test_captures_correlation_better_than_independent() -> None:
    data = correlated(4000, 1)
    synthetic = {}
    for name in ("cipher", "independent"):
        mechanism = get_mechanism(name)
        result = mechanism.run(
            data,
            Fraction(1),
            mechanism.validate_params({}),
            rng=np.random.default_rng(2),
            noise_source=random.Random(3),
        )
        synthetic[name] = Dataset(data.domain, result.codes)
    pairs = list(itertools.combinations(data.domain.attributes, 2))

    def mean_tvd(name: str) -> float:
        return float(
            np.mean(
                [
                    marginal_tvd(data.codes, synthetic[name].codes, data.domain, pair)
                    for pair in pairs
                ]
            )
        )

    assert mean_tvd("cipher") < 0.5 * mean_tvd("independent")


def test_paper_mode_and_deterministic_target_run(
    small_domain: Domain, make_dataset: MakeDataset
) -> None:
    data = make_dataset(small_domain, 300, 4)
    for params in ({"clip_mid": False}, {"target": "largest"}, {"order": 1}, {"lam": 1.0}):
        result = run(data, Fraction(1, 10), params, rows=50)
        assert result.codes.shape == (50, len(small_domain))


def test_progress_is_monotone_staged_and_ends_at_one(
    small_domain: Domain, make_dataset: MakeDataset
) -> None:
    events: list[tuple[float, str]] = []
    run(
        make_dataset(small_domain, 100, 4), Fraction(1), progress=lambda f, s: events.append((f, s))
    )
    fractions = [f for f, _ in events]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    stages = [s for _, s in events]
    for stage in ("measure", "reconstruct", "sample"):
        assert stages.count(stage) >= 2, f"{stage} must report its start and its end"
    assert stages.index("measure") < stages.index("reconstruct") < stages.index("sample")


@pytest.mark.parametrize("stage", ["measure", "reconstruct", "sample"])
def test_cancellation_propagates(
    stage: str, small_domain: Domain, make_dataset: MakeDataset
) -> None:
    def cancel(fraction: float, current: str) -> None:
        if current == stage and fraction > 0.1:
            raise SynthesisCancelled

    with pytest.raises(SynthesisCancelled):
        run(make_dataset(small_domain, 100, 5), Fraction(1), progress=cancel)


def test_cancellation_propagates_from_inside_the_reconstruction() -> None:
    """Progress is reported per solved batch, so a cancel lands between levels of the climb."""
    domain = Domain(tuple(f"v{i}" for i in range(8)), (2,) * 8)
    data = Dataset(domain, np.zeros((50, 8), dtype=np.int64))
    seen: list[float] = []

    def cancel(fraction: float, stage: str) -> None:
        if stage == "reconstruct" and 0.1 < fraction < 0.9:
            seen.append(fraction)
            raise SynthesisCancelled

    with pytest.raises(SynthesisCancelled):
        run(data, Fraction(1), progress=cancel)
    assert seen


def test_reproducible_with_the_same_seeds(small_domain: Domain, make_dataset: MakeDataset) -> None:
    data = make_dataset(small_domain, 300, 6)
    first = run(data, Fraction(1, 3), seed=11, noise_seed=12)
    second = run(data, Fraction(1, 3), seed=11, noise_seed=12)
    np.testing.assert_array_equal(first.codes, second.codes)
    other = run(data, Fraction(1, 3), seed=12, noise_seed=12, rows=300)
    same = run(data, Fraction(1, 3), seed=11, noise_seed=12, rows=300)
    assert not np.array_equal(other.codes, same.codes)


def test_noise_is_drawn_from_the_csprng_by_default(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((50, len(small_domain)), dtype=np.int64))
    assert run(data, Fraction(1, 10), noise_seed=None, rows=3).codes.shape == (3, 4)


# ---------------------------------------------------------------------------------------------
# Params, registry, refusal
# ---------------------------------------------------------------------------------------------


def test_params_are_strict_documented_and_registered() -> None:
    assert isinstance(MECHANISMS["cipher"], CIPHERMechanism)
    params = MECHANISM.validate_params({})
    assert isinstance(params, CIPHERParams)
    assert (params.order, params.lam, params.clip_mid, params.target) == (2, 1e-3, True, "random")
    assert params.max_cells == DEFAULT_MAX_CELLS
    for bad in ({"order": 0}, {"order": 4}, {"lam": 0}, {"target": "x"}, {"epochs": 1}):
        with pytest.raises(pydantic.ValidationError):
            MECHANISM.validate_params(bad)
    schema = MECHANISM.params_schema()
    assert schema["additionalProperties"] is False
    for name, prop in schema["properties"].items():
        assert prop.get("description"), name
    with pytest.raises(pydantic.ValidationError):
        params.order = 3  # type: ignore[misc]


def test_check_domain_refuses_above_max_cells() -> None:
    params = MECHANISM.validate_params({"max_cells": 1000})
    with pytest.raises(DomainRefused) as refused:
        MECHANISM.check_domain(Domain(("a", "b", "c"), (10, 10, 11)), params)
    message = str(refused.value)
    assert "full joint" in message and "1100 cells" in message and "max_cells = 1000" in message
    MECHANISM.check_domain(Domain(("a", "b", "c"), (10, 10, 10)), params)  # exactly at the cap
    adult_like = Domain(tuple(f"c{i}" for i in range(14)), (100,) * 14)
    with pytest.raises(DomainRefused, match=f"max_cells = {DEFAULT_MAX_CELLS}"):
        MECHANISM.check_domain(adult_like, MECHANISM.validate_params({}))
    assert issubclass(DomainRefused, ValueError)


def test_check_domain_refuses_too_much_reconstruction() -> None:
    binary = Domain(tuple(f"c{i}" for i in range(20)), (2,) * 20)  # 2^20 cells fit max_cells
    with pytest.raises(DomainRefused, match="max_reconstructed_cells"):
        MECHANISM.check_domain(binary, MECHANISM.validate_params({}))
    nltcs_like = Domain(tuple(f"c{i}" for i in range(16)), (2,) * 16)
    MECHANISM.check_domain(nltcs_like, MECHANISM.validate_params({}))
    with pytest.raises(DomainRefused, match="max_reconstructed_cells = 1000"):
        MECHANISM.check_domain(
            nltcs_like, MECHANISM.validate_params({"max_reconstructed_cells": 1000})
        )


def test_run_refuses_before_touching_the_data(
    small_domain: Domain, make_dataset: MakeDataset, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_measure(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was read")

    monkeypatch.setattr(cipher_module, "measure_marginal", must_not_measure)
    events: list[tuple[float, str]] = []
    with pytest.raises(DomainRefused, match="max_cells = 10"):
        run(
            make_dataset(small_domain, 50, 1),
            Fraction(1),
            {"max_cells": 10},
            progress=lambda f, s: events.append((f, s)),
        )
    assert events == []
