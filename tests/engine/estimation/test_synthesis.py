"""synthetic_data: shape, support, controlled rounding, and i.i.d. sampling frequencies."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from engine.domain import Dataset, Domain, narrowest_unsigned
from engine.estimation import GraphicalModel, NoisyMarginal, estimate
from engine.estimation.synthesis import round_counts
from engine.marginals import count_marginal
from tests.engine.estimation.support import correlated_dataset

DOMAIN = Domain.from_mapping({"a": 3, "b": 4, "c": 2, "d": 5, "e": 1})


def tree_model(seed: int = 0) -> GraphicalModel:
    rng = np.random.default_rng(seed)
    potentials = {
        c: rng.normal(0.0, 1.5, [DOMAIN.size(x) for x in c])
        for c in [("a", "b"), ("b", "c"), ("c", "d"), ("a", "e")]
    }
    return GraphicalModel.from_potentials(DOMAIN, potentials, total=1000.0)


def cyclic_model(seed: int = 0) -> GraphicalModel:
    rng = np.random.default_rng(seed)
    potentials = {
        c: rng.normal(0.0, 1.5, [DOMAIN.size(x) for x in c])
        for c in [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    }
    return GraphicalModel.from_potentials(DOMAIN, potentials, total=1000.0)


@pytest.mark.parametrize("method", ["round", "sample"])
@pytest.mark.parametrize("rows", [0, 1, 7, 1000, 2345])
def test_shape_dtype_and_support(method: str, rows: int) -> None:
    model = cyclic_model()
    codes = model.synthetic_data(rows, np.random.default_rng(1), method)  # type: ignore[arg-type]
    assert codes.shape == (rows, len(DOMAIN))
    assert codes.dtype == narrowest_unsigned(max(DOMAIN.sizes))  # a byte per cell here
    assert codes.flags.f_contiguous
    if rows:
        assert codes.min() >= 0
        assert np.all(codes.max(axis=0) < np.array(DOMAIN.sizes))
        Dataset(DOMAIN, codes)  # validates the codes


def test_zero_probability_values_are_never_drawn() -> None:
    # b = 3 is impossible, and so is (a = 0, c = 1).
    potentials = {
        ("b",): np.array([0.0, 0.0, 0.0, -np.inf]),
        ("a", "c"): np.array([[0.0, -np.inf], [0.0, 0.0], [0.0, 0.0]]),
    }
    finite = {k: np.where(np.isfinite(v), v, -1e4) for k, v in potentials.items()}
    model = GraphicalModel.from_potentials(DOMAIN, finite, total=500.0)
    for method in ("round", "sample"):
        codes = model.synthetic_data(5000, np.random.default_rng(2), method)  # type: ignore[arg-type]
        assert not np.any(codes[:, 1] == 3)
        assert not np.any((codes[:, 0] == 0) & (codes[:, 2] == 1))


def test_round_reproduces_one_way_marginals_of_a_product_model() -> None:
    # A product of 1-way factors with rows = total: each attribute is drawn unconditionally, so
    # controlled rounding gives every value floor(expected) or floor(expected) + 1 rows.
    rng = np.random.default_rng(3)
    potentials = {(a,): rng.normal(0.0, 1.0, DOMAIN.size(a)) for a in DOMAIN.attributes}
    model = GraphicalModel.from_potentials(DOMAIN, potentials, total=997.0)
    for seed in range(5):
        codes = model.synthetic_data(997, np.random.default_rng(seed))
        for j, attr in enumerate(DOMAIN.attributes):
            counts = np.bincount(codes[:, j], minlength=DOMAIN.size(attr))
            expected = model.project([attr])
            assert np.all(np.abs(counts - expected) < 1.0)


def test_round_keeps_two_way_marginals_close_on_a_tree() -> None:
    # Along the elimination order each attribute is rounded within groups of its conditioning
    # values, so a 2-way marginal of the tree is off by less than one row per group.
    model = tree_model()
    codes = model.synthetic_data(1000, np.random.default_rng(4))
    data = Dataset(DOMAIN, codes)
    for clique in model.cliques:
        if len(clique) == 2:
            counts = count_marginal(data, clique)
            parent_groups = max(DOMAIN.size(a) for a in clique)
            assert np.abs(counts - model.project(clique)).max() < parent_groups + 1


def test_round_has_much_less_noise_than_sampling() -> None:
    model = tree_model(5)
    expected = model.project(["a"])
    errors = {"round": [], "sample": []}
    for seed in range(20):
        for method in ("round", "sample"):
            codes = model.synthetic_data(1000, np.random.default_rng(seed), method)  # type: ignore[arg-type]
            counts = np.bincount(codes[:, 0], minlength=3)
            errors[method].append(float(np.abs(counts - expected).sum()))
    assert np.mean(errors["round"]) < np.mean(errors["sample"]) / 4


def test_sampling_is_reproducible_with_the_same_seed() -> None:
    model = cyclic_model()
    for method in ("round", "sample"):
        first = model.synthetic_data(300, np.random.default_rng(9), method)  # type: ignore[arg-type]
        again = model.synthetic_data(300, np.random.default_rng(9), method)  # type: ignore[arg-type]
        np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("model_factory", [tree_model, cyclic_model])
def test_sample_matches_the_models_two_way_marginals(model_factory: object) -> None:
    """Seeded chi-square goodness of fit of i.i.d. rows against every 2-way model marginal.

    There are 10 pairs per model; each test is at level 1e-4, so under a correct sampler the
    chance that some pair fails is at most 10 × 1e-4 = 1e-3 per model and seed (Bonferroni).
    The seed is fixed, so the outcome is deterministic; the bound says how unlucky a seed
    would have to be. A sampler that ignored the conditioning (e.g. drew columns
    independently) fails by hundreds of standard deviations at this sample size.
    """
    model = model_factory()  # type: ignore[operator]
    rows = 60_000
    codes = model.synthetic_data(rows, np.random.default_rng(2024), "sample")
    data = Dataset(DOMAIN, codes)
    for pair in itertools.combinations(DOMAIN.attributes, 2):
        observed = count_marginal(data, pair).ravel().astype(float)
        expected = model.project(pair).ravel() * rows / model.total
        keep = expected > 5
        observed_kept = observed[keep]
        expected_kept = expected[keep] * observed_kept.sum() / expected[keep].sum()
        assert stats.chisquare(observed_kept, expected_kept).pvalue > 1e-4, pair


def test_sample_detects_a_wrong_sampler() -> None:
    # The check above can fail: columns shuffled independently break the 2-way marginals.
    model = tree_model()
    rows = 60_000
    codes = model.synthetic_data(rows, np.random.default_rng(2024), "sample")
    rng = np.random.default_rng(0)
    for j in range(codes.shape[1]):
        codes[:, j] = rng.permutation(codes[:, j])
    observed = count_marginal(Dataset(DOMAIN, codes), ("a", "b")).ravel().astype(float)
    expected = model.project(("a", "b")).ravel() * rows / model.total
    assert stats.chisquare(observed, expected).pvalue < 1e-10


@st.composite
def rounding_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    groups = draw(st.integers(1, 6))
    width = draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 50, groups)
    weights = rng.dirichlet(np.ones(width), size=groups)
    weights[rng.random((groups, width)) < 0.2] = 0.0
    weights[weights.sum(axis=1) == 0, 0] = 1.0
    weights /= weights.sum(axis=1, keepdims=True)
    return weights * sizes[:, None], sizes.astype(np.int64)


@given(rounding_cases(), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_round_counts_is_a_controlled_rounding(
    case: tuple[np.ndarray, np.ndarray], seed: int
) -> None:
    expected, sizes = case
    counts = round_counts(expected, sizes, np.random.default_rng(seed))
    np.testing.assert_array_equal(counts.sum(axis=1), sizes)
    assert np.all(counts >= np.floor(expected + 1e-9) - 1e-9)
    assert np.all(counts <= np.ceil(expected - 1e-9) + 1e-9)
    assert np.all(counts[expected == 0] == 0)


def test_round_counts_is_unbiased() -> None:
    # E[count] = expected: the mean over 20 000 draws is within 5 standard errors
    # (σ ≤ 0.5 per cell, so 5·0.5/√20000 ≈ 0.018), false failure rate below 1e-5 per cell.
    expected = np.array([[0.3, 1.45, 2.25], [0.5, 0.5, 0.0], [0.9, 0.05, 0.05]])
    sizes = np.array([4, 1, 1])
    rng = np.random.default_rng(77)
    total = np.zeros_like(expected)
    for _ in range(20_000):
        total += round_counts(expected, sizes, rng)
    np.testing.assert_allclose(total / 20_000, expected, atol=0.018)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_synthetic_data_validates_rows(bad: object) -> None:
    with pytest.raises(ValueError):
        tree_model().synthetic_data(bad, np.random.default_rng(0))  # type: ignore[arg-type]


def test_synthetic_data_validates_method_and_rng() -> None:
    model = tree_model()
    with pytest.raises(ValueError):
        model.synthetic_data(3, np.random.default_rng(0), "shuffle")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        model.synthetic_data(3, 0)  # type: ignore[arg-type]


def test_fitted_model_synthesises_data_close_to_the_measurements() -> None:
    domain = Domain.from_mapping({"a": 3, "b": 4, "c": 2})
    data = correlated_dataset(domain, 5000, seed=1)
    measurements = [
        NoisyMarginal(c, count_marginal(data, c).astype(float), 1.0)
        for c in [("a", "b"), ("b", "c")]
    ]
    model = estimate(domain, measurements, iterations=1000)
    codes = model.synthetic_data(5000, np.random.default_rng(0))
    synthetic = Dataset(domain, codes)
    for m in measurements:
        tvd = 0.5 * np.abs(count_marginal(synthetic, m.attributes) - m.values).sum() / 5000
        assert tvd < 0.01


def _stratified_order(
    keys: np.ndarray, parent_cells: int, strata: Any, rng: np.random.Generator
) -> np.ndarray:
    """The rows in the order :func:`_stratified_ranks` gives (the row of each sorted slot)."""
    from engine.estimation.synthesis import _stratified_ranks

    ranks, permutation = _stratified_ranks(keys, parent_cells, strata, rng)
    rows = np.empty(ranks.shape[0], dtype=np.int64)
    rows[permutation] = np.arange(ranks.shape[0], dtype=np.int64)
    return rows[ranks]


@pytest.mark.parametrize("sizes", [(3, 2, 4), (2**40, 2**30, 7), (50, 60, 70, 80, 90)])
def test_stratified_order_sorts_by_keys_then_strata(sizes: tuple[int, ...]) -> None:
    # One sort key in mixed radix (re-ranked before it would overflow int64) must order the
    # rows exactly as a lexicographic sort on (keys, strata…) does; only ties may differ.

    rng = np.random.default_rng(len(sizes))
    n = 5000
    keys = rng.integers(0, 6, n)
    columns = [(rng.integers(0, min(size, 9), n), size) for size in sizes]
    order = _stratified_order(keys, 6, columns, rng)
    assert np.array_equal(np.sort(order), np.arange(n))
    expected = np.lexsort([c for c, _ in reversed(columns)] + [keys])
    rows = np.column_stack([keys] + [c for c, _ in columns])
    assert np.array_equal(rows[order], rows[expected])


def test_stratified_order_breaks_ties_at_random() -> None:
    # Two tied rows come first equally often: 2000 trials, 5-sigma bounds (false failure < 1e-6).

    rng = np.random.default_rng(0)
    keys = np.zeros(2, dtype=np.int64)
    strata = [(np.zeros(2, dtype=np.int64), 3)]
    firsts = sum(int(_stratified_order(keys, 1, strata, rng)[0]) for _ in range(2000))
    assert abs(firsts - 1000) < 5 * np.sqrt(2000 * 0.25)


def _argsort_stratified_order(
    keys: np.ndarray,
    parent_cells: int,
    strata: list[tuple[np.ndarray, int]],
    rng: np.random.Generator,
) -> np.ndarray:
    """The order as main computed it before issue 25: ``np.argsort(key · n + permutation)``."""
    n = keys.shape[0]
    combined = keys.astype(np.int64, copy=True)
    bound = max(parent_cells, 1)
    for column, size in strata:
        if bound * size >= 2**62:
            _, combined = np.unique(combined, return_inverse=True)
            combined = combined.astype(np.int64)
            bound = int(combined.max()) + 1
        combined = combined * size + column
        bound *= size
    if bound * n >= 2**62:
        _, combined = np.unique(combined, return_inverse=True)
        combined = combined.astype(np.int64)
    return np.argsort(combined * n + rng.permutation(n))


@pytest.mark.parametrize(
    ("n", "sizes"),
    [
        (1, (3,)),
        (2, ()),
        (5000, (3, 2, 4)),
        (4097, (2**40, 2**30, 7)),
        (3000, (2**20,) * 3),
        (2000, (2**55, 5)),  # a key past the room for the row number: re-ranked by argsort
        (2000, (9,) * 30),  # re-ranked by value, often
    ],
)
def test_stratified_order_is_the_argsort_of_key_and_permutation(
    n: int, sizes: tuple[int, ...]
) -> None:
    # The sort by value with the permutation in the low bits (issue 25) gives, for the same
    # generator state, exactly the order of an argsort of key · n + permutation: the same rows.

    data = np.random.default_rng(n)
    keys = data.integers(0, 6, n)
    columns = [(data.integers(0, min(size, 9), n), size) for size in sizes]
    order = _stratified_order(keys, 6, columns, np.random.default_rng(7))
    expected = _argsort_stratified_order(keys, 6, columns, np.random.default_rng(7))
    assert np.array_equal(order, expected)


def test_stratified_assign_places_values_as_the_order_does() -> None:
    from engine.estimation.synthesis import _stratified_assign

    data = np.random.default_rng(3)
    n = 4000
    keys = data.integers(0, 5, n)
    strata = [(data.integers(0, 4, n), 4), (data.integers(0, 3, n), 3)]
    values = data.integers(0, 200, n).astype(np.uint8)
    expected = np.empty(n, dtype=np.uint8)
    expected[_stratified_order(keys, 5, strata, np.random.default_rng(11))] = values
    out = np.empty(n, dtype=np.uint8)
    _stratified_assign(keys, 5, strata, np.random.default_rng(11), values, out)
    assert np.array_equal(out, expected)


@pytest.mark.parametrize(
    ("n", "groups"), [(1, 1), (7, 3), (20_000, 1), (20_000, 300), (500, 2**40)]
)
def test_order_by_group_then_is_the_lexsort(n: int, groups: int) -> None:
    from engine.estimation.synthesis import _order_by_group_then

    rng = np.random.default_rng(n + groups)
    group = np.sort(rng.integers(0, min(groups, 50), n)).astype(np.int64)
    position = rng.random(n)
    if n > 10:
        # Near ties that a truncated position cannot tell apart (the later row first), and the
        # end point 1.0.
        position[1::10] = position[0:-1:10] * (1 - 2**-50)
        group[1::10] = group[0:-1:10]
        position[-1] = 1.0
    order = _order_by_group_then(position, group, groups)
    assert np.array_equal(order, np.lexsort((position, group)))


def test_batches_split_the_rows_evenly_and_in_order() -> None:
    model = tree_model()
    batches = list(model.synthetic_batches(10, np.random.default_rng(0), batch_rows=3))
    assert [(start, codes.shape[0]) for start, codes, _ in batches] == [
        (0, 3),
        (3, 3),
        (6, 2),
        (8, 2),
    ]
    assert len({id(generator) for _, _, generator in batches}) == 4
    # One batch draws with the caller's generator itself: the rows of an unbatched draw.
    rng = np.random.default_rng(1)
    (only,) = list(model.synthetic_batches(10, rng, batch_rows=10))
    assert only[2] is rng
    assert list(model.synthetic_batches(0, np.random.default_rng(0))) != []
    with pytest.raises(ValueError, match="batch_rows"):
        list(model.synthetic_batches(10, np.random.default_rng(0), batch_rows=0))


def test_batched_rows_keep_controlled_rounding_per_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A product model with rows in 7 batches: every value's count is within 7 of its expected
    count (each batch rounds within one), where i.i.d. draws of 9,970 rows would be off by
    about √(n·p·(1−p)) ≈ 20–50 rows. The same generator state gives the same rows."""
    rng = np.random.default_rng(3)
    potentials = {(a,): rng.normal(0.0, 1.0, DOMAIN.size(a)) for a in DOMAIN.attributes}
    model = GraphicalModel.from_potentials(DOMAIN, potentials, total=9970.0)
    original = GraphicalModel.synthetic_batches

    def small_batches(self, rows, generator, method="balanced", batch_rows=1425):  # type: ignore[no-untyped-def]
        return original(self, rows, generator, method, batch_rows)

    monkeypatch.setattr(GraphicalModel, "synthetic_batches", small_batches)
    for method in ("round", "balanced"):
        codes = model.synthetic_data(9970, np.random.default_rng(8), method)  # type: ignore[arg-type]
        again = model.synthetic_data(9970, np.random.default_rng(8), method)  # type: ignore[arg-type]
        np.testing.assert_array_equal(codes, again)
        for j, attr in enumerate(DOMAIN.attributes):
            counts = np.bincount(codes[:, j], minlength=DOMAIN.size(attr))
            assert np.all(np.abs(counts - model.project([attr])) < 7.0), (method, attr)
