"""estimate(): zero-noise recovery, projections, warm starts, totals, callbacks, validation."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from engine.domain import Dataset, Domain
from engine.estimation import GraphicalModel, NoisyMarginal, estimate, estimate_total
from engine.estimation.junction_tree import build_junction_tree
from engine.marginals import Measurement, count_marginal
from tests.engine.estimation.support import brute_force_joint, correlated_dataset, marginal_of

DOMAIN = Domain.from_mapping({"a": 3, "b": 4, "c": 2, "d": 5, "e": 3})
TREE = [("a", "b"), ("c", "b"), ("c", "d"), ("d", "e")]
FOUR_CYCLE = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a"), ("e",)]
TRIANGLE_AND_TRIPLE = [("a", "b"), ("b", "c"), ("a", "c"), ("e", "d", "c")]


@pytest.fixture(scope="module")
def data() -> Dataset:
    return correlated_dataset(DOMAIN, 3000, seed=11)


def exact(data: Dataset, cliques: list[tuple[str, ...]]) -> list[NoisyMarginal]:
    return [NoisyMarginal(c, count_marginal(data, c).astype(float), 1.0) for c in cliques]


@pytest.fixture(scope="module")
def full_support() -> Dataset:
    return correlated_dataset(DOMAIN, 20_000, seed=3, concentration=3.0)


@pytest.mark.parametrize("cliques", [TREE, FOUR_CYCLE, TRIANGLE_AND_TRIPLE])
def test_noiseless_marginals_are_reproduced(
    full_support: Dataset, cliques: list[tuple[str, ...]]
) -> None:
    # Full support on purpose: a cell that is zero in the data is only approached as θ → −∞,
    # and mirror descent drives it down like 1/(η·t) (as in private-pgm), which would make this
    # a test of patience. test_zero_cells_decay covers that case.
    data = full_support
    measurements = exact(data, cliques)
    assert all(m.values.min() > 0 for m in measurements)
    model = estimate(DOMAIN, measurements, iterations=2000, tolerance=0)
    assert model.total == pytest.approx(data.n_rows)
    for m in measurements:
        fitted = model.project(m.attributes)
        assert fitted.shape == m.values.shape
        assert np.abs(fitted - m.values).max() <= 1e-4 * data.n_rows
    # Every 1-way marginal of a consistent table is reproduced as well.
    for attr in DOMAIN.attributes:
        np.testing.assert_allclose(
            model.project([attr]), count_marginal(data, [attr]), atol=1e-4 * data.n_rows
        )


def test_zero_cells_decay(data: Dataset) -> None:
    measurements = exact(data, TRIANGLE_AND_TRIPLE)
    zeros = [m.values == 0 for m in measurements]
    assert any(z.any() for z in zeros)
    residual = []
    for iterations in (500, 4000):
        model = estimate(DOMAIN, measurements, iterations=iterations, tolerance=0)
        residual.append(
            max(
                float(model.project(m.attributes)[z].max(initial=0.0))
                for m, z in zip(measurements, zeros, strict=True)
            )
        )
        for m, z in zip(measurements, zeros, strict=True):
            np.testing.assert_allclose(
                model.project(m.attributes)[~z], m.values[~z], rtol=0.05, atol=2.0
            )
    assert residual[1] < residual[0] / 4


@pytest.mark.parametrize("cliques", [TREE, TRIANGLE_AND_TRIPLE])
def test_projections_agree_and_match_brute_force(
    data: Dataset, cliques: list[tuple[str, ...]]
) -> None:
    model = estimate(DOMAIN, exact(data, cliques), iterations=200)
    joint = brute_force_joint(DOMAIN, dict(model.potentials), model.total)
    queries = [list(q) for r in (1, 2, 3) for q in itertools.permutations(DOMAIN.attributes, r)]
    batched = model.project_many(queries)
    for query, values in zip(queries, batched, strict=True):
        assert values.dtype == np.float64
        assert values.shape == tuple(DOMAIN.size(a) for a in query)
        assert values.sum() == pytest.approx(model.total, rel=1e-9)
        np.testing.assert_allclose(values, model.project(query), rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(
            values, marginal_of(DOMAIN, joint, query), rtol=1e-9, atol=1e-9 * model.total
        )


def test_measurement_attribute_order_is_respected(data: Dataset) -> None:
    forward = NoisyMarginal(("a", "d"), count_marginal(data, ["a", "d"]).astype(float), 1.0)
    backward = NoisyMarginal(("d", "a"), count_marginal(data, ["d", "a"]).astype(float), 1.0)
    one = estimate(DOMAIN, [forward], iterations=500, tolerance=0)
    two = estimate(DOMAIN, [backward], iterations=500, tolerance=0)
    np.testing.assert_allclose(one.project(["a", "d"]), two.project(["a", "d"]), rtol=1e-9)
    np.testing.assert_allclose(one.project(["d", "a"]), backward.values, atol=0.1)


def test_measurement_inside_a_larger_clique(data: Dataset) -> None:
    # A 1-way measurement inside an extra 3-way clique is fitted through the clique marginal.
    measurements = exact(data, [("a",), ("b", "c")])
    model = estimate(DOMAIN, measurements, cliques=[("a", "b", "c")], iterations=2000, tolerance=0)
    assert ("a", "b", "c") in {tuple(sorted(c)) for c in model.cliques}
    for m in measurements:
        np.testing.assert_allclose(model.project(m.attributes), m.values, atol=1e-4 * 3000)


def test_repeated_measurements_are_pooled_by_precision() -> None:
    domain = Domain.from_mapping({"a": 2})
    low = NoisyMarginal(("a",), np.array([10.0, 30.0]), 1.0)
    high = NoisyMarginal(("a",), np.array([30.0, 10.0]), 3.0)
    model = estimate(domain, [low, high], total=40.0, iterations=2000, tolerance=0)
    # The minimiser of ½|μ−y₁|² + ½|μ−y₂|²/9 on {μ₁ + μ₂ = 40} is the precision-weighted mean.
    expected = (9 * low.values + high.values) / 10
    np.testing.assert_allclose(model.project(["a"]), expected, atol=1e-6)
    direct = 0.5 * float(np.sum((expected - low.values) ** 2))
    direct += 0.5 * float(np.sum((expected - high.values) ** 2)) / 9
    assert model.loss == pytest.approx(direct, rel=1e-6)


def test_total_is_the_precision_weighted_mean_of_the_sums() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    m1 = NoisyMarginal(("a",), np.array([40.0, 60.0]), 2.0)  # sum 100, var 2·4
    m2 = NoisyMarginal(("a", "b"), np.full((2, 3), 20.0), 1.0)  # sum 120, var 6·1
    weights = np.array([1 / 8, 1 / 6])
    expected = float(np.dot(weights, [100.0, 120.0]) / weights.sum())
    assert estimate_total([m1, m2]) == pytest.approx(expected)
    assert estimate(domain, [m1, m2], iterations=0).total == pytest.approx(expected)
    # Clipped at 1; an explicit total wins.
    assert estimate_total([NoisyMarginal(("a",), np.array([-5.0, 1.0]), 1.0)]) == 1.0
    assert estimate(domain, [m1], total=7.0, iterations=0).total == 7.0
    assert estimate(domain, [], iterations=5).total == 1.0


def test_no_measurements_give_the_uniform_model() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 5})
    model = estimate(domain, [], total=10.0)
    np.testing.assert_allclose(model.project(["b", "a"]), np.ones((5, 2)))


def test_warm_start_converges_to_the_cold_optimum_faster(data: Dataset) -> None:
    rng = np.random.default_rng(5)
    cliques = [("a",), ("b",), ("c",), ("d",), ("e",), ("a", "b"), ("b", "c"), ("c", "d")]
    noisy = [
        NoisyMarginal(
            c, count_marginal(data, c) + rng.normal(0, 5.0, [DOMAIN.size(x) for x in c]), 5.0
        )
        for c in cliques
    ]
    added = NoisyMarginal(
        ("a", "d", "e"),
        count_marginal(data, ["a", "d", "e"]) + rng.normal(0, 5.0, (3, 5, 3)),
        5.0,
    )
    everything = [*noisy, added]
    first = estimate(DOMAIN, noisy, iterations=3000, tolerance=1e-10)
    reference = estimate(DOMAIN, everything, iterations=10000, tolerance=0)
    # Faster: at every budget the warm fit is closer to the optimum than the cold one, by far
    # at small budgets (the regime AIM runs in between rounds).
    for budget, factor in ((10, 3.0), (30, 1.5), (100, 1.2), (300, 1.1)):
        warm = estimate(DOMAIN, everything, warm_start=first, iterations=budget, tolerance=0)
        cold = estimate(DOMAIN, everything, iterations=budget, tolerance=0)
        assert warm.loss - reference.loss < (cold.loss - reference.loss) / factor
    # Same optimum: given enough iterations the warm fit reaches the reference loss.
    final = estimate(DOMAIN, everything, warm_start=first, iterations=5000, tolerance=0)
    assert final.loss == pytest.approx(reference.loss, rel=1e-3)
    assert first.step_size is not None and first.step_size > 0


def test_warm_start_onto_a_tree_that_does_not_contain_the_old_cliques(data: Dataset) -> None:
    # Old model: a 4-cycle (triangulated with one chord). New model: a different cycle, whose
    # triangulation need not contain the old cliques; the start is then the old model's
    # projection, and the fit still converges to the cold optimum.
    old_cliques = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    new_cliques = [("a", "c"), ("c", "e"), ("e", "b"), ("b", "a"), ("d",)]
    old = estimate(DOMAIN, exact(data, old_cliques), iterations=300)
    new_measurements = exact(data, new_cliques)
    labels = old.tree.labels
    new_tree = build_junction_tree(labels, [labels.clique(c) for c in new_cliques])
    assert any(new_tree.containing(c) is None for c in old.tree.cliques)
    warm = estimate(DOMAIN, new_measurements, warm_start=old, iterations=3000, tolerance=0)
    cold = estimate(DOMAIN, new_measurements, iterations=3000, tolerance=0)
    assert warm.loss == pytest.approx(cold.loss, rel=0.5, abs=1.0)
    for m in new_measurements:
        np.testing.assert_allclose(warm.project(m.attributes), m.values, atol=1e-3 * 3000)


def test_callback_is_called_and_its_exception_propagates(data: Dataset) -> None:
    calls: list[tuple[int, float]] = []
    model = estimate(
        DOMAIN,
        exact(data, TREE),
        iterations=35,
        tolerance=0,
        callback=lambda i, loss: calls.append((i, loss)),
    )
    assert [i for i, _ in calls] == [10, 20, 30, 35]
    assert calls[-1][1] == pytest.approx(model.loss)
    assert all(b[1] <= a[1] for a, b in itertools.pairwise(calls))

    class Cancelled(Exception):
        pass

    def cancel(iteration: int, loss: float) -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        estimate(DOMAIN, exact(data, TREE), iterations=100, callback=cancel)


def test_loss_decreases_and_tolerance_stops_early(data: Dataset) -> None:
    measurements = exact(data, TREE)
    short = estimate(DOMAIN, measurements, iterations=50, tolerance=0)
    longer = estimate(DOMAIN, measurements, iterations=500, tolerance=0)
    assert short.iterations == 50 and longer.iterations == 500
    assert longer.loss < short.loss
    early = estimate(DOMAIN, measurements, iterations=100_000, tolerance=1e-2)
    assert early.iterations < 100_000


def test_from_measurement() -> None:
    counts = np.array([[3, -1], [0, 7]], dtype=np.int64)
    measurement = Measurement(
        attributes=("b", "a"),
        noisy_counts=counts,
        sigma2=Fraction(9, 4),
        sensitivity=Fraction(1),
        rho=Fraction(2, 9),
    )
    noisy = NoisyMarginal.from_measurement(measurement)
    assert noisy.attributes == ("b", "a")
    assert noisy.values.dtype == np.float64
    np.testing.assert_array_equal(noisy.values, counts)
    assert noisy.sigma == 1.5
    assert not noisy.values.flags.writeable


@pytest.mark.parametrize(
    ("attributes", "values", "sigma"),
    [
        (("a", "a"), np.zeros((2, 2)), 1.0),
        (("a",), np.zeros((2, 2)), 1.0),
        (("a",), np.array([np.nan, 1.0]), 1.0),
        (("a",), np.zeros(2), 0.0),
        (("a",), np.zeros(2), math.inf),
        (("a",), np.zeros(2), -1.0),
        ("a", np.zeros(2), 1.0),
        (("a",), np.array(["x", "y"]), 1.0),
    ],
)
def test_noisy_marginal_validation(attributes: object, values: np.ndarray, sigma: float) -> None:
    with pytest.raises((TypeError, ValueError)):
        NoisyMarginal(attributes, values, sigma)  # type: ignore[arg-type]


def test_noisy_marginal_copies_writeable_input() -> None:
    values = np.ones(3)
    noisy = NoisyMarginal(("a",), values, 1.0)
    values[0] = 5.0
    assert noisy.values[0] == 1.0


def test_estimate_validation() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    good = NoisyMarginal(("a",), np.ones(2), 1.0)
    with pytest.raises(ValueError, match="shape"):
        estimate(domain, [NoisyMarginal(("a",), np.ones(3), 1.0)])
    with pytest.raises(KeyError):
        estimate(domain, [NoisyMarginal(("z",), np.ones(3), 1.0)])
    with pytest.raises(ValueError):
        estimate(domain, [good], iterations=-1)
    with pytest.raises(ValueError):
        estimate(domain, [good], total=0.0)
    with pytest.raises(TypeError):
        estimate(domain, [(("a",), np.ones(2), 1.0)])  # type: ignore[list-item]
    other = Domain.from_mapping({"a": 2, "c": 3})
    with pytest.raises(ValueError, match="domain"):
        estimate(domain, [good], warm_start=estimate(other, [good], iterations=1))


def test_model_queries_validate_attributes() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    model = estimate(domain, [NoisyMarginal(("a", "b"), np.ones((2, 3)), 1.0)], iterations=5)
    with pytest.raises(KeyError):
        model.project(["z"])
    with pytest.raises(ValueError):
        model.project(["a", "a"])
    with pytest.raises(TypeError):
        model.project("ab")
    assert model.project([]).shape == ()
    assert float(model.project([])) == pytest.approx(model.total)


def test_model_is_picklable_and_read_only() -> None:
    import pickle

    domain = Domain.from_mapping({"a": 2, "b": 3})
    model = estimate(domain, [NoisyMarginal(("a", "b"), np.arange(6.0).reshape(2, 3), 1.0)])
    clone = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(clone.project(["b"]), model.project(["b"]))
    for values in model.potentials.values():
        assert not values.flags.writeable
    with pytest.raises(TypeError):
        model.potentials[("a",)] = np.zeros(2)  # type: ignore[index]


def test_model_refuses_non_finite_beliefs() -> None:
    """A model whose beliefs are not finite is refused when it is built, instead of failing
    later in scoring, projection or sampling (issue 11: a NaN model reached AIM's selection and
    the sampler)."""
    domain = Domain.from_mapping({"a": 2, "b": 3})
    model = estimate(domain, [NoisyMarginal(("a", "b"), np.arange(6.0).reshape(2, 3), 1.0)])
    theta = [model.potentials[c] for c in model.cliques]
    beliefs = [b.copy() for b in model.clique_marginals().values()]
    GraphicalModel(model.tree, theta, model.total, beliefs=beliefs)
    for bad in (np.nan, np.inf):
        broken = [b.copy() for b in beliefs]
        broken[0][0, 0] = bad
        with pytest.raises(ValueError, match="finite"):
            GraphicalModel(model.tree, theta, model.total, beliefs=broken)
    with pytest.raises(ValueError, match="shape"):
        GraphicalModel(model.tree, theta, model.total, beliefs=[b.ravel() for b in beliefs])
