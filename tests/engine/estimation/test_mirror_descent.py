"""The fitter's specialised belief propagation against the exact (log-space) evaluation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.estimation import GraphicalModel, NoisyMarginal, estimate
from engine.estimation.inference import calibrate_log, make_plan
from engine.estimation.junction_tree import Labels, build_junction_tree
from engine.estimation.mirror_descent import _Engine, _in_id_order, _pool
from engine.marginals import count_marginal
from tests.engine.estimation.support import (
    CANCELLING_CHAINS,
    CHAIN_DOMAIN,
    brute_force_joint,
    correlated_dataset,
    marginal_of,
)

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


CHAIN = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e"), ("e", "f"), ("f", "g")]


@st.composite
def drifted_engines(draw: st.DrawFn) -> tuple[_Engine, np.ndarray]:
    """Engines on a chain of six cliques whose θ⁰ has drifted as after a long fit: along every
    edge of the junction tree a random function of the separator, of a few hundred nats, is
    added to the child and subtracted from the parent (the distribution is unchanged; the
    potentials cancel across up to five levels)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sizes = tuple(int(x) for x in rng.integers(2, 4, 7))
    domain = Domain(("a", "b", "c", "d", "e", "f", "g"), sizes)
    measurements = [
        NoisyMarginal(c, rng.random([domain.size(x) for x in c]) * 50, 1.0) for c in CHAIN
    ]
    labels = Labels(domain)
    placed = [_in_id_order(labels, m) for m in measurements]
    tree = build_junction_tree(labels, [p for p, _ in placed])
    engine = _Engine(tree, _pool(tree, placed, [1.0] * len(placed)), 100.0)
    plan = make_plan(tree)
    theta = [rng.normal(0, 2, shape) for shape in tree.shapes]
    scale = draw(st.sampled_from([100.0, 150.0, 200.0, 300.0]))
    for c, p in enumerate(tree.parent):
        if p == -1:
            continue
        drift = rng.normal(0, scale, [tree.sizes[v] for v in tree.separators[c]])
        theta[c] += drift.reshape(plan.in_child[c])
        theta[p] -= drift.reshape(plan.in_parent[c])
    engine.reset(theta)
    return engine, rng.normal(0, 1.0, engine.target.size)


@given(drifted_engines())
@settings(max_examples=300, deadline=None)
def test_guarded_evaluation_is_exact_for_drifted_potentials(
    case: tuple[_Engine, np.ndarray],
) -> None:
    """The fast pass either proves its precision or hands over to the exact path: for
    potentials that cancel across cliques the evaluation equals a log-space calibration.
    Before the error bound 69 of 1000 draws of this strategy were NaN or silently wrong, so
    300 examples would all miss that with probability about 0.93^300 ≈ 5e-10."""
    engine, updates = case
    evaluation = engine.evaluate(updates, 0)
    theta = engine.potentials(updates)
    exact, _ = calibrate_log(make_plan(engine.tree), theta, engine.total)
    for a, b in zip(engine.beliefs(evaluation), exact, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * engine.total)
    assert np.isfinite(evaluation.loss)


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


def _chain_engine(raw: dict[tuple[str, ...], list]) -> tuple[_Engine, list[np.ndarray]]:
    """An engine on the chain a–b–c–d–e whose θ⁰ is one of the cancelling chains."""
    potentials = {clique: np.array(values) for clique, values in raw.items()}
    model = GraphicalModel.from_potentials(CHAIN_DOMAIN, potentials, 100.0)
    rng = np.random.default_rng(0)
    measurements = [NoisyMarginal(c, rng.random((2, 2)) * 50, 1.0) for c in potentials]
    labels = Labels(CHAIN_DOMAIN)
    placed = [_in_id_order(labels, m) for m in measurements]
    tree = build_junction_tree(labels, [p for p, _ in placed])
    assert tree.cliques == model.tree.cliques
    engine = _Engine(tree, _pool(tree, placed, [1.0] * len(placed)), 100.0)
    theta = [model.potentials[c].copy() for c in model.cliques]
    engine.reset(theta)
    return engine, theta


@pytest.mark.parametrize("raw", CANCELLING_CHAINS)
def test_evaluation_of_cancelling_potentials_is_exact(raw: dict[tuple[str, ...], list]) -> None:
    """Regression: potentials cancelling by hundreds of nats across three levels of the tree
    made the fast pass return NaN, or silently the marginals of another distribution."""
    engine, _ = _chain_engine(raw)
    potentials = {clique: np.array(values) for clique, values in raw.items()}
    joint = brute_force_joint(CHAIN_DOMAIN, potentials, 100.0)
    updates = np.zeros(engine.target.size)
    evaluation = engine.evaluate(updates, 0)
    beliefs = engine.beliefs(evaluation)
    for c, belief in enumerate(beliefs):
        names = engine.tree.clique_names(c)
        np.testing.assert_allclose(belief, marginal_of(CHAIN_DOMAIN, joint, names), atol=1e-9)
    assert np.isfinite(evaluation.loss)


@pytest.mark.parametrize("raw", CANCELLING_CHAINS)
def test_warm_start_with_cancelling_potentials_fits(raw: dict[tuple[str, ...], list]) -> None:
    """Regression: a warm start whose potentials cancel across cliques gave a NaN first
    evaluation, so no step was accepted and the fit returned a model with NaN beliefs. (From so
    degenerate a start the loss is flat to rounding, since every cell but one is below e^-500,
    and the line search may accept no step at all: only finiteness, that the loss did not grow
    and exactness are checked here.)"""
    potentials = {clique: np.array(values) for clique, values in raw.items()}
    extreme = GraphicalModel.from_potentials(CHAIN_DOMAIN, potentials, 100.0)
    rng = np.random.default_rng(1)
    measurements = [NoisyMarginal(c, rng.random((2, 2)) * 50 + 1, 1.0) for c in potentials]
    start = sum(
        0.5 * float(np.sum((extreme.project(m.attributes) - m.values) ** 2)) for m in measurements
    )
    warm = estimate(CHAIN_DOMAIN, measurements, warm_start=extreme, iterations=100, total=100.0)
    assert warm.loss <= start * (1 + 1e-12)
    theta = [warm.potentials[c] for c in warm.cliques]
    exact, _ = calibrate_log(make_plan(warm.tree), theta, 100.0)
    for a, b in zip(warm.clique_marginals().values(), exact, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


def test_long_warm_started_fits_stay_finite_and_exact() -> None:
    """Regression (issue 11): AIM-like rounds, each adding a noisy marginal and warm-starting
    3000 steps, on correlated data with noise large enough for negative targets. The potentials
    drift along the directions that do not change the distribution (+/- hundreds of nats that
    cancel across cliques); before the fix the 10th fit started from a NaN evaluation and
    returned a model with NaN beliefs (and fits before it stalled at steps of 1e-19 while the
    fast pass returned NaN). Every fit must now give finite beliefs equal to an exact log-space
    calibration of its potentials."""
    rng = np.random.default_rng(6)
    sizes = tuple(int(x) for x in rng.integers(2, 9, 6))
    domain = Domain(tuple(f"c{i}" for i in range(6)), sizes)
    data = correlated_dataset(domain, 1000, 6, concentration=0.3)
    sigma = 5.0

    def measure(attrs: tuple[str, ...]) -> NoisyMarginal:
        noise = rng.normal(0, sigma, [domain.size(a) for a in attrs])
        return NoisyMarginal(attrs, count_marginal(data, list(attrs)) + noise, sigma)

    noisy = [measure((a,)) for a in domain.attributes]
    model = estimate(domain, noisy, iterations=3000)
    triples = list(itertools.combinations(domain.attributes, 3))
    for _ in range(10):
        triple = triples[int(rng.integers(len(triples)))]
        noisy.append(measure(triple[: int(rng.integers(2, 4))]))
        model = estimate(domain, noisy, warm_start=model, iterations=3000)
        assert model.iterations > 0
        beliefs = list(model.clique_marginals().values())
        assert all(np.isfinite(b).all() for b in beliefs)
        theta = [model.potentials[c] for c in model.cliques]
        exact, _ = calibrate_log(make_plan(model.tree), theta, model.total)
        for a, b in zip(beliefs, exact, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9 * model.total)


def _noisy_cycle(seed: int) -> tuple[Domain, list[NoisyMarginal]]:
    """Noisy 2-way marginals around a 4-cycle (inconsistent, so the loss has a positive
    minimum) plus a grouped measurement of one pair."""
    domain = Domain(("a", "b", "c", "d"), (4, 5, 3, 6))
    data = correlated_dataset(domain, 3000, seed)
    rng = np.random.default_rng(seed)
    measurements = [
        NoisyMarginal(c, count_marginal(data, list(c)) + rng.normal(0, 5.0, shape), 5.0)
        for c, shape in (
            (("a", "b"), (4, 5)),
            (("b", "c"), (5, 3)),
            (("c", "d"), (3, 6)),
            (("d", "a"), (6, 4)),
        )
    ]
    groups = np.arange(5 * 6).reshape(5, 6) % 7
    sums = np.bincount(groups.ravel(), weights=count_marginal(data, ["b", "d"]).ravel())
    measurements.append(NoisyMarginal(("b", "d"), sums + rng.normal(0, 2.0, 7), 2.0, groups=groups))
    return domain, measurements


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_momentum_reaches_the_plain_fit(seed: int) -> None:
    """With momentum the loss never rises (restart on any increase), the fit ends at the same
    marginals as the plain loop run to convergence, and it needs fewer iterations to get
    below the plain loop's loss (deterministic: fixed data, no timing)."""
    domain, measurements = _noisy_cycle(seed)
    losses: list[float] = []

    def record(_iteration: int, loss: float) -> None:
        losses.append(loss)

    fast = estimate(
        domain, measurements, iterations=3000, tolerance=0, momentum=True, callback=record
    )
    assert all(b <= a for a, b in itertools.pairwise(losses))
    plain = estimate(domain, measurements, iterations=20000, tolerance=0)
    assert fast.loss <= plain.loss * (1 + 1e-4)
    for m in measurements:
        np.testing.assert_allclose(
            fast.project(m.attributes), plain.project(m.attributes), atol=0.05 * 3000 / 100
        )
    short_plain = estimate(domain, measurements, iterations=100, tolerance=0)
    short_fast = estimate(domain, measurements, iterations=100, tolerance=0, momentum=True)
    assert short_fast.loss < short_plain.loss
