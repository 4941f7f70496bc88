"""The fitter's specialised belief propagation against the exact (log-space) evaluation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.estimation import GraphicalModel, NoisyMarginal, estimate
from engine.estimation.junction_tree import Labels, build_junction_tree
from engine.estimation.mirror_descent import _Engine, _in_id_order, _pool
from engine.marginals import count_marginal

MEASURED = [
    [("a",), ("a", "b"), ("b", "c"), ("c", "d")],
    [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("b",)],
    [("a", "b", "c"), ("b", "c"), ("c", "d", "e"), ("e",), ("a", "e")],
    [("a", "b"), ("a", "b"), ("c",), ("d", "e")],
]


@st.composite
def engines(draw: st.DrawFn) -> tuple[_Engine, list[np.ndarray], np.ndarray]:
    cliques = MEASURED[draw(st.integers(0, len(MEASURED) - 1))]
    sizes = draw(st.lists(st.integers(1, 4), min_size=5, max_size=5))
    domain = Domain(("a", "b", "c", "d", "e"), tuple(sizes))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    measurements = [
        NoisyMarginal(c, rng.random([domain.size(x) for x in c]) * 50, float(rng.uniform(0.5, 3)))
        for c in cliques
    ]
    labels = Labels(domain)
    placed = [_in_id_order(labels, m) for m in measurements]
    tree = build_junction_tree(labels, [p for p, _ in placed])
    keys = _pool(tree, placed, [1 / m.sigma**2 for m in measurements])
    engine = _Engine(tree, keys, float(rng.uniform(10, 1000)))
    theta0 = [rng.normal(0, 2, shape) for shape in tree.shapes]
    engine.reset(theta0)
    updates = rng.normal(0, 1.0, engine.target.size)
    return engine, theta0, updates


@given(engines())
@settings(max_examples=100, deadline=None)
def test_fast_evaluation_equals_exact(case: tuple[_Engine, list[np.ndarray], np.ndarray]) -> None:
    engine, _, updates = case
    views = engine.views(updates)
    fast = engine._evaluate_fast(views, 0)
    exact = engine._evaluate_exact(views, 1)
    np.testing.assert_allclose(fast.marginals, exact.marginals, rtol=1e-9, atol=1e-9 * engine.total)
    assert fast.loss == pytest.approx(exact.loss, rel=1e-9, abs=1e-9)
    for a, b in zip(engine.beliefs(fast), engine.beliefs(exact), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * engine.total)
    # The potentials the fast path implies are the ones the exact path used.
    theta = engine.potentials(updates)
    model = GraphicalModel(engine.tree, theta, engine.total)
    for a, b in zip(model.clique_marginals().values(), engine.beliefs(exact), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * engine.total)


def test_fit_survives_potentials_that_underflow() -> None:
    # A warm start whose potentials cancel at ±800 nats across cliques: the probability-space
    # pass underflows, the guard sends evaluations to the exact path, and the fit still reaches
    # the same optimum as a cold start.
    domain = Domain.from_mapping({"a": 3, "b": 2, "c": 2})
    extreme = GraphicalModel.from_potentials(
        domain,
        {
            ("a", "c"): np.array([[0.0, 0.0], [-800.0, -800.0], [-5.0, -5.0]]),
            ("a", "b"): np.array([[0.0, 0.0], [800.0, 800.0], [0.0, 0.0]]),
        },
        total=100.0,
    )
    measurements = [
        NoisyMarginal(("a", "b"), np.array([[20.0, 10.0], [15.0, 5.0], [30.0, 20.0]]), 1.0),
        NoisyMarginal(("a", "c"), np.array([[25.0, 5.0], [10.0, 10.0], [40.0, 10.0]]), 1.0),
    ]
    warm = estimate(domain, measurements, warm_start=extreme, iterations=3000, tolerance=0)
    cold = estimate(domain, measurements, iterations=3000, tolerance=0)
    for m in measurements:
        np.testing.assert_allclose(warm.project(m.attributes), m.values, atol=1e-3)
        np.testing.assert_allclose(cold.project(m.attributes), m.values, atol=1e-3)


def test_warm_start_after_a_converged_fit_still_moves() -> None:
    """Regression: a fit that converged shrinks its step (to ~1e-10 here); a warm re-fit that
    inherited it barely moved, and the convergence test then stopped it after 10 iterations."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 4, 5000)
    b = np.where(rng.random(5000) < 0.95, a, rng.integers(0, 4, 5000))
    domain = Domain(("a", "b"), (4, 4))
    data = Dataset(domain, np.column_stack([a, b]).astype(np.int64))
    # Noisy one-ways disagree on the total, so the loss has a floor the fit reaches quickly,
    # shrinking its step to ~1e-17 on the way.
    ones = [
        NoisyMarginal((x,), count_marginal(data, [x]) + rng.normal(0, 0.5, 4), 0.5)
        for x in ("a", "b")
    ]
    first = estimate(domain, ones, iterations=500)
    assert first.step_size < 1e-9
    pair = NoisyMarginal(("a", "b"), count_marginal(data, ["a", "b"]).astype(float), 0.3)
    warm = estimate(domain, [*ones, pair], warm_start=first, iterations=300)
    joint = warm.project(["a", "b"])
    assert np.trace(joint) / joint.sum() > 0.9  # the pair's strong diagonal was learnt (true: 0.96)
