"""Belief propagation, marginalisation and contraction against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Domain
from engine.estimation import GraphicalModel
from engine.estimation.inference import (
    Reducer,
    UnderflowError,
    calibrate_factors,
    calibrate_log,
    canonical_potentials,
    make_plan,
    marginalise,
    multiply_and_sum,
    stable_factors,
)
from tests.engine.estimation.support import (
    CANCELLING_CHAINS,
    CHAIN_DOMAIN,
    brute_force_joint,
    marginal_of,
)

STRUCTURES = {
    "chain": [("a", "b"), ("b", "c"), ("c", "d")],
    "star": [("a", "b"), ("a", "c"), ("a", "d")],
    "four-cycle": [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")],
    "triangle": [("a", "b"), ("b", "c"), ("a", "c")],
    "triangle-and-tail": [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d")],
    "triples": [("a", "b", "c"), ("b", "c", "d"), ("d", "a")],
    "forest": [("a", "b"), ("c",), ("d",)],
}


@st.composite
def models(draw: st.DrawFn) -> tuple[Domain, dict[tuple[str, ...], np.ndarray], float]:
    structure = STRUCTURES[draw(st.sampled_from(sorted(STRUCTURES)))]
    sizes = draw(st.lists(st.integers(1, 4), min_size=5, max_size=5))
    domain = Domain(("a", "b", "c", "d", "e"), tuple(sizes))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([0.1, 1.0, 5.0]))
    rng = np.random.default_rng(seed)
    # Keys in either attribute order: the model must align axes itself.
    cliques = [tuple(reversed(c)) if rng.random() < 0.5 else c for c in structure]
    potentials = {c: rng.normal(0.0, scale, [domain.size(a) for a in c]) for c in cliques}
    total = draw(st.sampled_from([1.0, 37.5, 1e6]))
    return domain, potentials, total


@given(models())
@settings(max_examples=120, deadline=None)
def test_calibrated_marginals_equal_brute_force(
    case: tuple[Domain, dict[tuple[str, ...], np.ndarray], float],
) -> None:
    domain, potentials, total = case
    model = GraphicalModel.from_potentials(domain, potentials, total)
    joint = brute_force_joint(domain, potentials, total)
    for clique, belief in model.clique_marginals().items():
        np.testing.assert_allclose(
            belief, marginal_of(domain, joint, clique), rtol=1e-9, atol=1e-9 * total
        )
    # The log-space pass (the fallback) agrees with the probability-space pass.
    plan = make_plan(model.tree)
    theta = [model.potentials[c] for c in model.cliques]
    fast, _ = calibrate_factors(plan, stable_factors(theta), total)
    exact, _ = calibrate_log(plan, theta, total)
    for a, b in zip(fast, exact, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * total)


@given(models())
@settings(max_examples=60, deadline=None)
def test_projections_equal_brute_force(
    case: tuple[Domain, dict[tuple[str, ...], np.ndarray], float],
) -> None:
    domain, potentials, total = case
    model = GraphicalModel.from_potentials(domain, potentials, total)
    joint = brute_force_joint(domain, potentials, total)
    queries = [
        list(q)[::-1] if len(q) % 2 else list(q)
        for r in range(0, 4)
        for q in itertools.combinations(domain.attributes, r)
    ]
    batched = model.project_many(queries)
    for query, values in zip(queries, batched, strict=True):
        expected = marginal_of(domain, joint, query) if query else np.array(total)
        np.testing.assert_allclose(values, expected, rtol=1e-9, atol=1e-9 * total)
        np.testing.assert_allclose(model.project(query), values, rtol=1e-12, atol=1e-12 * total)


def test_extreme_potentials_fall_back_to_log_space() -> None:
    # Potentials of ±800 nats that cancel across cliques underflow in probability space; the
    # guard must notice and the result must still be exact.
    domain = Domain.from_mapping({"a": 3, "b": 2, "c": 2})
    potentials = {
        ("a", "c"): np.array([[0.0, 0.0], [-800.0, -800.0], [-5.0, -5.0]]),
        ("a", "b"): np.array([[0.0, 0.0], [800.0, 800.0], [0.0, 0.0]]),
    }
    model = GraphicalModel.from_potentials(domain, potentials, 10.0)
    plan = make_plan(model.tree)
    theta = [model.potentials[c] for c in model.cliques]
    with pytest.raises(UnderflowError):
        calibrate_factors(plan, stable_factors(theta), 10.0)
    # Logits of a: 0, 0 and -5 (per b, c) — computed exactly in log space.
    weights = np.array([1.0, 1.0, np.exp(-5.0)])
    np.testing.assert_allclose(model.project(["a"]), 10.0 * weights / weights.sum(), rtol=1e-12)


@pytest.mark.parametrize("raw", CANCELLING_CHAINS)
def test_cancelling_potentials_are_calibrated_exactly(raw: dict[tuple[str, ...], list]) -> None:
    potentials = {clique: np.array(values) for clique, values in raw.items()}
    model = GraphicalModel.from_potentials(CHAIN_DOMAIN, potentials, 100.0)
    joint = brute_force_joint(CHAIN_DOMAIN, potentials, 100.0)
    for clique, belief in model.clique_marginals().items():
        np.testing.assert_allclose(belief, marginal_of(CHAIN_DOMAIN, joint, clique), atol=1e-9)
    # The probability-space pass either notices or is right.
    plan = make_plan(model.tree)
    theta = [model.potentials[c] for c in model.cliques]
    try:
        fast, _ = calibrate_factors(plan, stable_factors(theta), 100.0)
    except UnderflowError:
        pass
    else:
        for clique, belief in zip(model.cliques, fast, strict=True):
            np.testing.assert_allclose(belief, marginal_of(CHAIN_DOMAIN, joint, clique), atol=1e-9)


@pytest.mark.parametrize("raw", CANCELLING_CHAINS)
def test_canonical_form_of_cancelling_potentials_is_exact_in_probability_space(
    raw: dict[tuple[str, ...], list],
) -> None:
    potentials = {clique: np.array(values) for clique, values in raw.items()}
    model = GraphicalModel.from_potentials(CHAIN_DOMAIN, potentials, 100.0)
    joint = brute_force_joint(CHAIN_DOMAIN, potentials, 100.0)
    plan = make_plan(model.tree)
    theta = [model.potentials[c] for c in model.cliques]
    canonical = canonical_potentials(plan, theta)
    fast, _ = calibrate_factors(plan, stable_factors(canonical), 100.0)
    for clique, belief in zip(model.cliques, fast, strict=True):
        np.testing.assert_allclose(belief, marginal_of(CHAIN_DOMAIN, joint, clique), atol=1e-9)


@given(models(), st.sampled_from([1.0, 100.0, 400.0]))
@settings(max_examples=80, deadline=None)
def test_canonical_potentials_keep_the_distribution(
    case: tuple[Domain, dict[tuple[str, ...], np.ndarray], float], spread: float
) -> None:
    domain, potentials, total = case
    potentials = {c: v * spread for c, v in potentials.items()}
    model = GraphicalModel.from_potentials(domain, potentials, total)
    plan = make_plan(model.tree)
    tree = model.tree
    canonical = canonical_potentials(plan, [model.potentials[c] for c in model.cliques])
    # The same distribution (up to a constant)...
    rebuilt = GraphicalModel(tree, canonical, total)
    pairs = zip(rebuilt.clique_marginals().values(), model.clique_marginals().values(), strict=True)
    for a, b in pairs:
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * total)
    # ...with each non-root potential a log conditional: ≤ 0, and exp sums to 1 over C ∖ S.
    for c, theta in enumerate(canonical):
        if tree.parent[c] == -1:
            assert theta.max() == 0.0
            continue
        assert theta.max() <= 1e-12
        np.testing.assert_allclose(marginalise(np.exp(theta), plan.up_keep[c]), 1.0, rtol=1e-12)


@st.composite
def arrays_and_flags(draw: st.DrawFn) -> tuple[np.ndarray, tuple[bool, ...]]:
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=5)))
    keep = tuple(draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape))))
    seed = draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).random(shape), keep


@given(arrays_and_flags())
@settings(max_examples=200, deadline=None)
def test_marginalise_equals_numpy_sum(case: tuple[np.ndarray, tuple[bool, ...]]) -> None:
    values, keep = case
    axes = tuple(i for i, k in enumerate(keep) if not k)
    expected = values.sum(axis=axes)
    np.testing.assert_allclose(marginalise(values, keep), expected, rtol=1e-12)
    np.testing.assert_allclose(Reducer(values.shape, keep)(values), expected, rtol=1e-12)


def test_marginalise_handles_the_strategies_for_middle_axes() -> None:
    rng = np.random.default_rng(3)
    # short block after (GEMM), short block before (batched), long both sides (slices)
    for shape in [(50, 7, 3), (4, 20, 30), (2000, 3, 50), (1200, 6, 10)]:
        values = rng.random(shape)
        np.testing.assert_allclose(
            marginalise(values, (True, False, True)), values.sum(axis=1), rtol=1e-12
        )


def test_multiply_and_sum_matches_einsum() -> None:
    rng = np.random.default_rng(4)
    sizes = {0: 2, 1: 3, 2: 4, 3: 5, 4: 2}
    letters = "abcde"
    for left_attrs, right_attrs, keep in [
        ((0, 1), (1, 2), {0, 2}),
        ((0, 1, 2), (1, 2, 3), {0, 1, 3}),
        ((0, 2), (1, 3), {0, 1, 2, 3}),
        ((0, 1, 2, 3), (1, 3, 4), {4}),
        ((1,), (1,), {1}),
        ((0, 1), (0, 1), set()),
    ]:
        left = rng.random([sizes[v] for v in left_attrs])
        right = rng.random([sizes[v] for v in right_attrs])
        attrs, values = multiply_and_sum((left_attrs, left), (right_attrs, right), keep)
        out = sorted(keep)
        spec = (
            "".join(letters[v] for v in left_attrs)
            + ","
            + "".join(letters[v] for v in right_attrs)
            + "->"
            + "".join(letters[v] for v in out)
        )
        assert list(attrs) == out
        np.testing.assert_allclose(values, np.einsum(spec, left, right), rtol=1e-12)
