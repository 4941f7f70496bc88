"""PPSyn-safe: the paper's partition algorithms, partitions that never see raw data, exact
budgets under any parameters, valid output, progress and cancellation."""

from __future__ import annotations

import inspect
import random
from fractions import Fraction
from typing import Any

import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.accounting import gaussian_rho
from engine.domain import Dataset, Domain
from engine.estimation import NoisyMarginal, estimate
from engine.evaluation import marginal_tvd
from engine.marginals import count_marginal, measure_marginal
from engine.mechanisms import MECHANISMS, SynthesisCancelled, get_mechanism
from engine.mechanisms.aim.mechanism import AIMMechanism, workload_closure
from engine.mechanisms.ppsyn.mechanism import (
    LOCAL_GROWTH_COLUMNS,
    PPSynParams,
    candidate_partition,
    growth_mode,
    partition_contribution,
    round_partitions,
)
from engine.mechanisms.ppsyn.partition import (
    NoiseRule,
    PaperRule,
    Partition,
    identity_partition,
    merge_partition,
    partition_counts,
    reconstruction_error,
    split_partition,
)
from tests.engine.support import correlated

FAST = {"iterations": 100, "round_iterations": 10, "rounds": 6}


# --- Algorithm 3 and 4 ---------------------------------------------------------------------


def test_algorithm_3_toy_example_oracle() -> None:
    """Notes C.2 #9: counts of 16 cells, Contr = 200, η = 0.7 → sizes {10, 3, 2, 1}."""
    counts = [0, 0, 0, 1, 1, 2, 3, 40, 42, 45, 100, 103, 300, 0, 0, 1]
    found = merge_partition(counts, PaperRule(200.0, 0.7))
    assert sorted(np.bincount(found.groups).tolist()) == [1, 2, 3, 10]
    assert found.cost == pytest.approx(3.330e-4, rel=1e-3)
    assert found.reconstruction_error == pytest.approx(16.333, abs=1e-3)
    groups = found.groups
    assert len({groups[i] for i in (7, 8, 9)}) == 1 and groups[12] not in groups[:12]


def test_algorithm_3_stops_at_once_without_contribution() -> None:
    found = merge_partition([5, 1, 3], PaperRule(0.0, 0.7))
    assert found.is_identity and found.cost == float("inf")


def test_algorithm_4_finds_constant_blocks() -> None:
    counts = np.zeros((6, 4))
    counts[:3, :2], counts[:3, 2:], counts[3:, :] = 10.0, 50.0, 200.0
    found = split_partition(counts, NoiseRule(1.0), patience=1)
    assert found.n_groups == 3 and found.reconstruction_error == 0.0
    for block in (counts == 10.0, counts == 50.0, counts == 200.0):
        assert len(set(found.groups[block].tolist())) == 1
    # The paper's rule trades RE for fewer groups when the target η·Contr leaves room.
    coarse = split_partition(counts, PaperRule(5000.0, 0.7), patience=1)
    assert coarse.n_groups == 2 and coarse.reconstruction_error == 240.0
    assert coarse.cost == pytest.approx(4 / (np.pi * (3500 - 240) ** 2))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    sigma=st.floats(0.01, 1000.0),
    seed=st.integers(0, 10_000),
)
def test_partitions_are_valid_and_their_error_is_exact(
    shape: list[int], sigma: float, seed: int
) -> None:
    counts = np.random.default_rng(seed).poisson(20.0, size=tuple(shape)).astype(float)
    rule = NoiseRule(sigma)
    for found in (
        partition_counts(counts, rule, patience=3),
        merge_partition(counts, rule),
        split_partition(counts, rule, max_groups=7),
    ):
        assert found.groups.shape == counts.shape
        assert found.reconstruction_error == pytest.approx(
            reconstruction_error(counts, found.groups), abs=1e-6
        )
        assert found.cost == pytest.approx(rule.cost(found.n_groups, found.reconstruction_error))
    # The mechanism's choice is never worse than measuring every cell.
    assert partition_counts(counts, rule).cost <= identity_partition(counts, rule).cost


def test_tiny_noise_measures_every_cell_and_huge_noise_merges() -> None:
    counts = np.arange(24, dtype=float).reshape(4, 6) ** 2
    assert partition_counts(counts, NoiseRule(1e-6)).is_identity
    assert partition_counts(counts, NoiseRule(1e6)).n_groups == 1


def test_partition_validation() -> None:
    with pytest.raises(ValueError):
        PaperRule(1.0, 1.0)
    with pytest.raises(ValueError):
        NoiseRule(0.0)
    with pytest.raises(ValueError, match="every label"):
        Partition(np.array([0, 2]), 2, 0.0, 1.0)
    with pytest.raises(ValueError):
        split_partition(np.ones(3), NoiseRule(1.0), max_groups=0)


# --- Partitions never see raw data -----------------------------------------------------------


def test_partitions_are_a_function_of_the_model_only() -> None:
    """Same noisy measurements (hence the same model) with two different raw tables: the
    partitions agree exactly, only the (data-dependent) contributions differ."""
    for function in (round_partitions, candidate_partition):
        assert "data" not in inspect.signature(function).parameters
    first = correlated(2000, 1)
    second = correlated(2000, 99)  # another table on the same domain
    domain = first.domain
    source = random.Random(3)
    noisy = [
        NoisyMarginal.from_measurement(measure_marginal(first, attrs, Fraction(1, 10), source))
        for attrs in (["a"], ["b"], ["c"], ["d"], ["a", "c"])
    ]
    model = estimate(domain, noisy, iterations=200)
    params = PPSynParams()
    eligible = [c for c in workload_closure(domain, 3, None) if len(c) > 1]
    sigma = 3.0
    before = round_partitions(model, eligible, sigma, params)
    # "Swap the raw data": nothing the partitions depend on has changed.
    again = round_partitions(model, eligible, sigma, params)
    for clique in eligible:
        assert np.array_equal(before[clique].groups, again[clique].groups)
    estimates = model.project_many(eligible)
    contributions = [
        [
            partition_contribution(count_marginal(table, c), est, before[c].groups)
            for c, est in zip(eligible, estimates, strict=True)
        ]
        for table in (first, second)
    ]
    assert contributions[0] != contributions[1]


def test_contribution_has_sensitivity_one() -> None:
    data = correlated(300, 2)
    model_counts = np.full((4, 4), 300 / 16)
    groups = np.arange(16).reshape(4, 4) % 5
    base = partition_contribution(count_marginal(data, ["a", "b"]), model_counts, groups)
    for row in range(20):
        removed = Dataset(data.domain, np.delete(data.codes, row, axis=0))
        other = partition_contribution(count_marginal(removed, ["a", "b"]), model_counts, groups)
        assert abs(other - base) <= 1 + 1e-9


# --- The mechanism ---------------------------------------------------------------------------


def test_registered() -> None:
    assert isinstance(MECHANISMS["ppsyn"].Params(), PPSynParams)


@pytest.mark.parametrize("eta", [0.0, 1.0, -0.5, 1.5])
def test_eta_must_be_strictly_between_zero_and_one(eta: float) -> None:
    with pytest.raises(pydantic.ValidationError):
        get_mechanism("ppsyn").validate_params({"eta": eta})


def test_params_are_strict() -> None:
    mechanism = get_mechanism("ppsyn")
    with pytest.raises(pydantic.ValidationError):
        mechanism.validate_params({"unknown": 1})
    params = mechanism.validate_params({})
    with pytest.raises(pydantic.ValidationError):
        params.eta = 0.5  # type: ignore[misc]
    for name, field in PPSynParams.model_fields.items():
        assert field.description, name
    # Refused when the params are validated (at submission, 422), not after the charge.
    with pytest.raises(pydantic.ValidationError, match="below 1"):
        mechanism.validate_params({**FAST, "one_way_share": 0.5, "selection_share": 0.5})


@pytest.mark.parametrize("rho", [Fraction(1, 3), Fraction(14973057673, 10**12), Fraction(5)])
def test_spends_exactly_rho(rho: Fraction) -> None:
    mechanism = get_mechanism("ppsyn")
    result = mechanism.run(
        correlated(500, 1),
        rho,
        mechanism.validate_params(FAST),
        rng=np.random.default_rng(0),
        rows=100,
    )
    assert result.rho_spent == rho == result.rho_used
    assert result.codes.shape == (100, 4)
    assert 1 <= len(result.selections) <= FAST["rounds"]
    for selection in result.selections:
        assert Fraction(selection.epsilon) ** 2 / 8 <= selection.rho
    for release in result.releases:
        assert release.sensitivity == 1
        assert release.rho == gaussian_rho(1, release.sigma2)
    selected = sum((s.rho for s in result.selections), Fraction(0))
    assert selected <= rho * Fraction(PPSynParams().selection_share).limit_denominator(10**6)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rho=st.fractions(min_value=Fraction(1, 10000), max_value=Fraction(50)),
    degree=st.integers(1, 3),
    rounds=st.integers(1, 30),
    eta=st.floats(0.05, 0.95),
    one_way=st.floats(0.01, 0.6),
    selection=st.floats(0.01, 0.3),
    size=st.floats(min_value=0.0005, max_value=10),
    anneal=st.booleans(),
    growth=st.sampled_from(["local", "retriangulate"]),
    most=st.none() | st.integers(1, 20),
)
def test_never_overspends_under_any_parameters(
    rho: Fraction,
    degree: int,
    rounds: int,
    eta: float,
    one_way: float,
    selection: float,
    size: float,
    anneal: bool,
    growth: str,
    most: int | None,
) -> None:
    mechanism = get_mechanism("ppsyn")
    params = mechanism.validate_params(
        {
            "degree": degree,
            "rounds": rounds,
            "eta": eta,
            "one_way_share": one_way,
            "selection_share": selection,
            "max_model_size_mb": size,
            "anneal": anneal,
            "round_iterations": 5,
            "iterations": 20,
            "model_growth": growth,
            "max_candidates": most,
        }
    )
    result = mechanism.run(correlated(200, 3), rho, params, rng=np.random.default_rng(1), rows=30)
    assert result.rho_spent == rho == result.rho_used
    assert len(result.selections) <= rounds
    assert result.codes.shape == (30, 4)
    assert (result.codes >= 0).all() and (result.codes < np.array([4, 4, 3, 3])).all()


def test_one_column_table() -> None:
    domain = Domain(("a",), (6,))
    data = Dataset(domain, np.random.default_rng(0).integers(0, 6, (300, 1)))
    mechanism = get_mechanism("ppsyn")
    result = mechanism.run(
        data, Fraction(1, 2), mechanism.validate_params(FAST), rng=np.random.default_rng(0)
    )
    assert result.rho_spent == Fraction(1, 2)


def test_keeps_the_strong_pair() -> None:
    data = correlated(5000, 4)
    mechanism = get_mechanism("ppsyn")
    result = mechanism.run(
        data, Fraction(10), mechanism.validate_params(FAST), rng=np.random.default_rng(5)
    )
    assert marginal_tvd(data.codes, result.codes, data.domain, ["a", "b"]) < 0.05
    assert abs(result.codes.shape[0] - 5000) < 50


def test_measures_partitions_at_low_budget() -> None:
    """At a small ρ the noise is large and coarse partitions win: group sums get released."""
    data = correlated(3000, 5)
    mechanism = get_mechanism("ppsyn")
    result = mechanism.run(
        data, Fraction(1, 200), mechanism.validate_params(FAST), rng=np.random.default_rng(0)
    )
    assert result.releases
    assert result.rho_spent == Fraction(1, 200)


def test_progress_and_cancellation() -> None:
    mechanism = get_mechanism("ppsyn")
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

    def cancel(fraction: float, stage: str) -> None:
        if stage == "select":
            raise SynthesisCancelled

    with pytest.raises(SynthesisCancelled):
        mechanism.run(
            correlated(300, 6), Fraction(1), params, rng=np.random.default_rng(0), progress=cancel
        )


def test_noise_source_makes_runs_reproducible() -> None:
    mechanism = get_mechanism("ppsyn")
    params = mechanism.validate_params(FAST)
    runs = [
        mechanism.run(
            correlated(300, 8),
            Fraction(1, 20),
            params,
            rng=np.random.default_rng(3),
            noise_source=random.Random(9),
        )
        for _ in range(2)
    ]
    assert np.array_equal(runs[0].codes, runs[1].codes)


@pytest.mark.parametrize("growth", ["local", "retriangulate"])
def test_a_round_scores_at_most_max_candidates_drawn_without_the_data(
    growth: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25: like AIM, a round scores at most ``max_candidates`` eligible candidates, a
    subset drawn by the run's noise source (not the data); on 9 columns there are 120
    candidates of 2 and 3 columns, so a bound of 7 is a real subset."""
    scored: list[list[tuple[str, ...]]] = []
    original = AIMMechanism._eligible

    def recording(*args: Any, **kwargs: Any) -> list[tuple[str, ...]]:
        chosen = original(*args, **kwargs)
        scored.append(chosen)
        return chosen

    monkeypatch.setattr(AIMMechanism, "_eligible", staticmethod(recording))
    domain = Domain(tuple(f"x{i}" for i in range(9)), (3,) * 9)
    data = Dataset(domain, np.random.default_rng(5).integers(0, 3, (400, 9)))
    mechanism = get_mechanism("ppsyn")
    params = mechanism.validate_params({**FAST, "max_candidates": 7, "model_growth": growth})
    result = mechanism.run(
        data, Fraction(1), params, rng=np.random.default_rng(0), noise_source=random.Random(3)
    )
    assert result.rho_spent == Fraction(1)
    assert scored and all(1 <= len(round_) <= 7 for round_ in scored)
    assert len({tuple(round_) for round_ in scored}) > 1  # a fresh draw each round


# --- model_growth "auto": re-triangulation on narrow tables, local growth on wide ones -----------


def _columns(width: int) -> Domain:
    return Domain(tuple(f"x{i}" for i in range(width)), (3,) * width)


def test_auto_growth_resolves_by_the_column_count() -> None:
    auto = PPSynParams()
    assert auto.model_growth == "auto"
    assert growth_mode(_columns(14), auto) == "retriangulate"  # adult's width
    assert growth_mode(_columns(LOCAL_GROWTH_COLUMNS), auto) == "retriangulate"
    assert growth_mode(_columns(LOCAL_GROWTH_COLUMNS + 1), auto) == "local"
    assert growth_mode(_columns(196), auto) == "local"
    for growth in ("local", "retriangulate"):
        explicit = PPSynParams(model_growth=growth)
        assert growth_mode(_columns(4), explicit) == growth
        assert growth_mode(_columns(196), explicit) == growth


def _linked(width: int, rows: int, seed: int) -> Dataset:
    """``width`` ternary columns, each a noisy copy of the one before (many strong pairs)."""
    rng = np.random.default_rng(seed)
    columns = [rng.integers(0, 3, rows)]
    for _ in range(width - 1):
        columns.append(np.where(rng.random(rows) < 0.8, columns[-1], rng.integers(0, 3, rows)))
    return Dataset(_columns(width), np.column_stack(columns).astype(np.int64))


def _seeded_run(data: Dataset, params: dict[str, Any]) -> Any:
    mechanism = get_mechanism("ppsyn")
    return mechanism.run(
        data,
        Fraction(1, 2),
        mechanism.validate_params({**FAST, **params}),
        rng=np.random.default_rng(4),
        noise_source=random.Random(11),
    )


@pytest.mark.parametrize(
    ("width", "same_as"), [(6, "retriangulate"), (LOCAL_GROWTH_COLUMNS + 2, "local")]
)
def test_auto_growth_runs_exactly_as_the_mode_it_resolves_to(
    width: int, same_as: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the same seeds, the default ('auto') gives the same rows, selections and releases as
    re-triangulation on a narrow table (so tables up to the threshold, adult's 14 columns among
    them, run as before) and as local growth on a wide one, and it grows the tree that way:
    local growth builds a ``TreeGrowth`` every round, re-triangulation never does."""
    import engine.mechanisms.ppsyn.mechanism as ppsyn_module

    grown: list[str] = []
    original = ppsyn_module.TreeGrowth

    def recording(*args: Any, **kwargs: Any) -> Any:
        grown.append("local")
        return original(*args, **kwargs)

    monkeypatch.setattr(ppsyn_module, "TreeGrowth", recording)
    data = _linked(width, 400, width)
    auto = _seeded_run(data, {})
    auto_grew = len(grown)
    same = _seeded_run(data, {"model_growth": same_as})
    assert np.array_equal(auto.codes, same.codes)
    assert auto.selections == same.selections and auto.releases == same.releases
    assert [m.attributes for m in auto.measurements] == [m.attributes for m in same.measurements]
    assert auto_grew == (len(auto.selections) if same_as == "local" else 0)
