"""PrivMRF: score sensitivities (R-score, integer selection score), the capped attribute graph,
candidates and CFS, and the mechanism's contract (exact budget, valid output, determinism of the
DP releases given the noise source, progress and cancellation)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.evaluation import marginal_tvd
from engine.mechanisms import SynthesisCancelled
from engine.mechanisms.privmrf.mechanism import (
    LOCAL_GRAPH_COLUMNS,
    PrivMRFMechanism,
    PrivMRFParams,
    graph_growth,
)
from engine.mechanisms.privmrf.parts import (
    all_pairs,
    attribute_graph,
    candidate_marginals,
    cfs_score,
    chordal_cliques,
    drop_independent,
    independence_level,
    initial_marginals,
    prune_subsumed,
    r_score,
    r_score_floor,
    selection_score,
    subsumed,
    useful_cells,
)
from tests.engine.support import correlated

FAST = {"iterations": 50, "round_iterations": 10}
MECH = PrivMRFMechanism()


def _neighbour(counts: np.ndarray, cell: int, remove: bool) -> np.ndarray:
    flat = counts.copy().ravel()
    if remove and flat[cell] > 0:
        flat[cell] -= 1
    else:
        flat[cell] += 1
    return flat.reshape(counts.shape)


# --- sensitivities ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    data=st.data(),
    grid=st.integers(1, 64),
)
def test_r_score_moves_at_most_2_and_its_floor_at_most_2g(
    rows: int, cols: int, data: st.DataObject, grid: int
) -> None:
    counts = np.array(
        data.draw(st.lists(st.integers(0, 12), min_size=rows * cols, max_size=rows * cols)),
        dtype=np.int64,
    ).reshape(rows, cols)
    other = _neighbour(counts, data.draw(st.integers(0, rows * cols - 1)), data.draw(st.booleans()))
    assert abs(r_score(counts) - r_score(other)) <= 2 + 1e-9
    assert abs(r_score_floor(counts, grid) - r_score_floor(other, grid)) <= 2 * grid
    assert r_score_floor(counts, grid) == math.floor(grid * r_score(counts) + 1e-9)


def test_r_score_brute_force_worst_case_is_below_2() -> None:
    """Every 2×2 table with at most 6 rows and every neighbour: the largest change is ≤ 2."""
    worst = 0.0
    for cells in itertools.product(range(7), repeat=4):
        counts = np.array(cells, dtype=np.int64).reshape(2, 2)
        for cell in range(4):
            for remove in (False, True):
                other = _neighbour(counts, cell, remove)
                worst = max(worst, abs(r_score(counts) - r_score(other)))
    assert 1.0 < worst <= 2.0


@settings(max_examples=200, deadline=None)
@given(size=st.integers(1, 12), data=st.data(), grid=st.integers(1, 32))
def test_selection_score_moves_at_most_g(size: int, data: st.DataObject, grid: int) -> None:
    counts = np.array(
        data.draw(st.lists(st.integers(0, 20), min_size=size, max_size=size)), dtype=np.int64
    )
    mu = np.array(
        data.draw(st.lists(st.floats(-5, 30, allow_nan=False), min_size=size, max_size=size))
    )
    other = _neighbour(counts, data.draw(st.integers(0, size - 1)), data.draw(st.booleans()))
    a = selection_score(mu, counts, grid)
    b = selection_score(mu, other, grid)
    assert abs(a - b) <= grid
    # On the grid the score is g·L1 up to the rounding of μ (≤ ½ per cell).
    assert abs(a - grid * np.abs(mu - counts).sum()) <= size / 2 + 1e-6


def test_scores_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        r_score_floor(np.ones((2, 2)), 1)  # floats
    with pytest.raises(ValueError):
        r_score_floor(np.ones((2, 2), dtype=np.int64), 0)
    with pytest.raises(ValueError):
        selection_score(np.ones(3), np.ones(2, dtype=np.int64), 1)


# --- graph, candidates, CFS --------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(2, 12), min_size=2, max_size=8),
    cap=st.integers(1, 5000),
    seed=st.integers(0, 1000),
)
def test_attribute_graph_respects_the_clique_cap(sizes: list[int], cap: int, seed: int) -> None:
    pairs = all_pairs(len(sizes))
    scores = np.random.default_rng(seed).normal(size=len(pairs)).tolist()
    total_cap = 4 * cap
    edges, cliques = attribute_graph(sizes, pairs, scores, cap, total_cap)

    def cells_of(cs: list[tuple[int, ...]]) -> list[int]:
        return [math.prod(sizes[v] for v in c) for c in cs]

    cells = cells_of(cliques)
    if edges:
        assert max(cells) <= cap and sum(cells) <= total_cap
    else:  # no single edge fits on the empty graph
        for pair in pairs:
            alone = cells_of(chordal_cliques(sizes, [pair]))
            assert max(alone) > cap or sum(alone) > total_cap
    assert cliques == chordal_cliques(sizes, edges)
    # Every attribute is covered, and every edge lies inside some maximal clique.
    assert set().union(*map(set, cliques)) == set(range(len(sizes)))
    for a, b in edges:
        assert any(a in c and b in c for c in cliques)


def test_attribute_graph_prefers_high_scores_when_the_cap_binds() -> None:
    sizes = [10, 10, 10]
    pairs = all_pairs(3)  # (0,1), (0,2), (1,2)
    edges, cliques = attribute_graph(sizes, pairs, [1.0, 5.0, 3.0], 100, 10**6)
    # Two edges make a path (cliques of 100 cells); the third would make a 1000-cell triangle.
    assert edges == [(0, 2), (1, 2)]
    assert max(math.prod(sizes[v] for v in c) for c in cliques) == 100


def test_candidates_are_useful_subsets_of_cliques() -> None:
    domain = Domain(("a", "b", "c", "d"), (4, 5, 6, 2))
    cliques = [(0, 1, 2), (2, 3)]
    found = candidate_marginals(domain, cliques, 30, 3)
    assert ("a", "b") in found and ("c", "d") in found
    assert ("a", "b", "c") not in found  # 120 cells
    assert ("b", "c") in found and ("a", "c") in found
    assert all(domain.cells(c) <= 30 and len(c) >= 2 for c in found)
    assert ("a", "d") not in found  # not inside a clique
    assert useful_cells(600.0, 6.0, 1.0) == pytest.approx(600 / (6 * math.sqrt(2 / math.pi)))


def test_cfs_and_initial_marginals() -> None:
    r = {frozenset(p): v for p, v in [(("a", "b"), 0.5), (("a", "c"), 0.1), (("b", "c"), 0.4)]}

    def dep(x: str, y: str) -> float:
        return r[frozenset((x, y))]

    assert cfs_score("a", ("a", "b"), dep) == pytest.approx(0.5 / math.sqrt(2))
    assert cfs_score("a", ("a", "b", "c"), dep) == pytest.approx(0.6 / math.sqrt(3 + 0.8))
    domain = Domain(("a", "b", "c"), (2, 2, 2))
    cands = [("a", "b"), ("a", "c"), ("b", "c")]
    chosen = initial_marginals(domain, cands, dep, lambda chosen, cand: True)
    assert chosen == [("a", "b"), ("b", "c"), ("a", "c")]
    fallback = initial_marginals(domain, [], dep, lambda chosen, cand: True)
    assert fallback == [("a",), ("b",), ("c",)]


def test_prune_subsumed_keeps_maximal_sets_in_order() -> None:
    sets = [("a", "b"), ("a",), ("b", "c", "d"), ("c", "d"), ("a", "b"), ("e",)]
    assert prune_subsumed(sets) == [("a", "b"), ("b", "c", "d"), ("e",)]
    assert subsumed(("c", "b"), [("a",), ("b", "c", "d")])
    assert not subsumed(("a", "c"), [("a", "b"), ("c", "d")])


def test_drop_independent_keeps_marginals_with_a_dependent_pair() -> None:
    domain = Domain(("a", "b", "c", "d"), (10, 10, 4, 1))
    n = 10_000.0
    assert independence_level(domain, "a", "b", n) == pytest.approx(0.1)
    r = {
        frozenset(("a", "b")): 0.09,  # below 1 × 0.1: looks independent
        frozenset(("a", "c")): 0.07,  # above 1 × √(40/10⁴) ≈ 0.063
        frozenset(("b", "c")): 0.01,
        frozenset(("c", "d")): 0.03,  # above √(4/10⁴) = 0.02
    }

    def dep(x: str, y: str) -> float:
        return r.get(frozenset((x, y)), 0.0)

    marginals = [("a", "b"), ("a", "b", "c"), ("b", "c"), ("c", "d"), ("a",)]
    assert drop_independent(domain, marginals, dep, n, 1.0) == [("a", "b", "c"), ("c", "d")]
    assert drop_independent(domain, marginals, dep, n, 0.5) == [
        ("a", "b"),
        ("a", "b", "c"),
        ("c", "d"),
    ]
    assert drop_independent(domain, marginals, dep, n, 0.0) == marginals[:4]


# --- the mechanism ---------------------------------------------------------------------------


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    num=st.integers(1, 10**6),
    den=st.integers(1, 10**4),
    r_share=st.sampled_from([0.05, 0.1, 0.3]),
    # one_way_share keeps its default 0.15; all share mixes below leave room for it
    selection_share=st.sampled_from([0.01, 0.1, 0.25]),
    total_share=st.sampled_from([0.001, 0.01, 0.1]),
    rounds=st.sampled_from([None, 0, 1, 5]),
    candidates=st.integers(1, 50),
    grid=st.sampled_from([1, 3, 8]),
    seed=st.integers(0, 100),
    compress=st.booleans(),
    noise_correction=st.booleans(),
    prune=st.booleans(),
    independence=st.sampled_from([0.0, 1.0, 50.0]),
)
def test_exact_budget_under_random_params(
    num: int,
    den: int,
    r_share: float,
    selection_share: float,
    total_share: float,
    rounds: int | None,
    candidates: int,
    grid: int,
    seed: int,
    compress: bool,
    noise_correction: bool,
    prune: bool,
    independence: float,
) -> None:
    rho = Fraction(num, den)
    params = MECH.validate_params(
        {
            **FAST,
            "r_share": r_share,
            "selection_share": selection_share,
            "total_share": total_share,
            "rounds": rounds,
            "candidates": candidates,
            "score_grid": grid,
            "compress": compress,
            "noise_correction": noise_correction,
            "prune_subsumed": prune,
            "independence_factor": independence,
        }
    )
    data = correlated(300, seed)
    result = MECH.run(data, rho, params, rng=np.random.default_rng(seed))
    assert result.rho_spent == rho and result.rho_used == rho
    assert all(isinstance(r.rho, Fraction) for r in result.releases)


def test_exact_budget_with_one_column_and_with_exhausted_candidates() -> None:
    one = Dataset(Domain(("a",), (3,)), np.array([[0], [1], [2], [1]], dtype=np.int64))
    result = MECH.run(one, Fraction(1, 3), MECH.validate_params(FAST), rng=np.random.default_rng(0))
    assert result.rho_spent == Fraction(1, 3)
    # Many rounds on 4 columns: candidates run out, the remainder re-measures the chosen sets.
    data = correlated(300, 1)
    for prune in (True, False):
        params = MECH.validate_params({**FAST, "rounds": 40, "prune_subsumed": prune})
        result = MECH.run(data, Fraction(2), params, rng=np.random.default_rng(0))
        assert result.rho_spent == Fraction(2)


def test_output_within_domain_and_sized_by_noisy_total() -> None:
    data = correlated(1000, 2)
    result = MECH.run(data, Fraction(1), MECH.validate_params(FAST), rng=np.random.default_rng(3))
    codes = result.codes
    assert codes.shape[1] == len(data.domain)
    assert codes.min() >= 0 and np.all(codes.max(axis=0) < np.asarray(data.domain.sizes))
    assert abs(codes.shape[0] - 1000) < 100
    fixed = MECH.run(
        data, Fraction(1), MECH.validate_params(FAST), rng=np.random.default_rng(3), rows=17
    )
    assert fixed.codes.shape == (17, 4)


def test_large_rho_recovers_the_pairwise_structure() -> None:
    data = correlated(3000, 4)
    params = MECH.validate_params({"iterations": 300, "round_iterations": 30})
    result = MECH.run(data, Fraction(10**4), params, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    independent = np.column_stack(
        [rng.permutation(data.codes[:, j]) for j in range(data.codes.shape[1])]
    )
    pairs = list(itertools.combinations(data.domain.attributes, 2))
    ours = np.mean([marginal_tvd(data.codes, result.codes, data.domain, p) for p in pairs])
    base = np.mean([marginal_tvd(data.codes, independent, data.domain, p) for p in pairs])
    assert ours < 0.02 and ours < base / 5


def test_releases_depend_on_the_noise_source_only() -> None:
    data = correlated(800, 5)
    params = MECH.validate_params({**FAST, "candidates": 2})
    runs = [
        MECH.run(
            data,
            Fraction(1, 2),
            params,
            rng=np.random.default_rng(seed),
            noise_source=random.Random(42),
        )
        for seed in (0, 1)
    ]
    a, b = runs
    assert [m.attributes for m in a.measurements] == [m.attributes for m in b.measurements]
    for x, y in zip(a.measurements, b.measurements, strict=True):
        assert np.array_equal(x.noisy_counts, y.noisy_counts)
    assert [r.description for r in a.releases] == [r.description for r in b.releases]


def test_progress_is_reported_and_cancellation_propagates() -> None:
    data = correlated(300, 6)
    seen: list[tuple[float, str]] = []
    MECH.run(
        data,
        Fraction(1),
        MECH.validate_params(FAST),
        rng=np.random.default_rng(0),
        progress=lambda f, s: seen.append((f, s)),
    )
    assert seen[-1][0] == 1.0
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
    assert {"select", "measure", "estimate", "sample"} <= {s for _, s in seen}

    for stop_at in ("measure", "estimate", "sample"):

        def cancel(_f: float, stage: str, stop_at: str = stop_at) -> None:
            if stage == stop_at:
                raise SynthesisCancelled

        with pytest.raises(SynthesisCancelled):
            MECH.run(
                data,
                Fraction(1),
                MECH.validate_params(FAST),
                rng=np.random.default_rng(0),
                progress=cancel,
            )


def test_params_are_strict() -> None:
    with pytest.raises(pydantic.ValidationError):
        MECH.validate_params({"bogus": 1})
    with pytest.raises(pydantic.ValidationError):
        MECH.validate_params({"r_share": 0.5, "selection_share": 0.4, "total_share": 0.2})
    assert isinstance(MECH.validate_params({}), PrivMRFParams)
    schema = MECH.params_schema()
    assert all("description" in v for v in schema["properties"].values())


def test_registered() -> None:
    from engine.mechanisms import MECHANISMS

    assert isinstance(MECHANISMS["privmrf"], PrivMRFMechanism)


# --- Alg. 1 on wide tables: the triangulated graph grown locally -----------------------------


@given(
    st.lists(st.integers(2, 6), min_size=2, max_size=9),
    st.integers(10, 400),
    st.integers(0, 10**6),
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_local_attribute_graph_is_chordal_capped_and_holds_its_edges(
    sizes: list[int], cap: int, seed: int
) -> None:
    pairs = all_pairs(len(sizes))
    scores = np.random.default_rng(seed).normal(size=len(pairs)).tolist()
    edges, cliques = attribute_graph(sizes, pairs, scores, cap, 4 * cap, growth="local")
    cells = [math.prod(sizes[v] for v in c) for c in cliques]
    if edges:
        assert max(cells) <= cap and sum(cells) <= 4 * cap
    # Chordal: the engine's triangulation of these cliques adds no fill (same maximal cliques).
    assert sorted(chordal_cliques(sizes, [c for c in cliques if len(c) > 1])) == cliques
    assert set().union(*map(set, cliques)) == set(range(len(sizes)))
    for a, b in edges:
        assert any(a in c and b in c for c in cliques)
    # The first pair in score order always fits alone when its clique is under both caps.
    first = pairs[int(np.argmax(scores))]
    if sizes[first[0]] * sizes[first[1]] <= cap and sum(sizes) + cap <= 4 * cap:
        assert first in edges


def test_local_attribute_graph_grows_inside_a_component() -> None:
    """A path 0-1-2-3 (cells 100 each, then a pair closing it into a cycle): the cycle is
    triangulated with a chord, and a pair whose clique would pass the cap is refused."""
    sizes = [10, 10, 10, 10]
    pairs = [(0, 1), (1, 2), (2, 3), (0, 3), (0, 2)]
    edges, cliques = attribute_graph(sizes, pairs, [5.0, 4.0, 3.0, 2.0, 1.0], 1000, 10**6, "local")
    # (0, 3) closes the cycle, which gets a chord (two triangles of 1,000 cells); (0, 2) is then
    # either that chord or would make a 10,000-cell clique.
    assert edges[:4] == pairs[:4]
    assert all(len(c) == 3 for c in cliques) and len(cliques) == 2
    chord = (0, 2) if any({0, 2} <= set(c) for c in cliques) else None
    assert edges == pairs if chord else edges == pairs[:4]
    edges, _ = attribute_graph(sizes, pairs, [5.0, 4.0, 3.0, 2.0, 1.0], 100, 10**6, "local")
    assert edges == [(0, 1), (1, 2), (2, 3)]


def test_graph_growth_resolves_by_the_column_count() -> None:
    def columns(width: int) -> Domain:
        return Domain(tuple(f"x{i}" for i in range(width)), (2,) * width)

    auto = PrivMRFParams()
    assert auto.graph_growth == "auto"
    assert graph_growth(columns(54), auto) == "exact"  # loans
    assert graph_growth(columns(LOCAL_GRAPH_COLUMNS), auto) == "exact"
    assert graph_growth(columns(LOCAL_GRAPH_COLUMNS + 1), auto) == "local"
    assert graph_growth(columns(LOCAL_GRAPH_COLUMNS + 1), PrivMRFParams(graph_growth="exact")) == (
        "exact"
    )
    assert graph_growth(columns(3), PrivMRFParams(graph_growth="local")) == "local"


@pytest.mark.parametrize(("width", "same_as"), [(5, "exact"), (LOCAL_GRAPH_COLUMNS + 1, "local")])
def test_auto_graph_growth_runs_as_the_mode_it_resolves_to(
    width: int, same_as: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Same seeds, same releases and rows as the mode 'auto' resolves to; and Alg. 1 is asked
    for that mode (recorded), so narrow tables run exactly as before."""
    import engine.mechanisms.privmrf.mechanism as privmrf_module

    asked: list[str] = []
    original = privmrf_module.attribute_graph

    def recording(*args: object, **kwargs: object) -> object:
        asked.append(str(kwargs.get("growth")))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(privmrf_module, "attribute_graph", recording)
    rng = np.random.default_rng(width)
    domain = Domain(tuple(f"x{i}" for i in range(width)), (2,) * width)
    data = Dataset(domain, rng.integers(0, 2, (300, width)))
    mechanism = PrivMRFMechanism()
    runs = [
        mechanism.run(
            data,
            Fraction(1),
            PrivMRFParams(
                rounds=2,
                round_iterations=5,
                iterations=10,
                max_clique_cells=8,
                max_model_cells=2000,
                max_marginal_attributes=3,
                candidates=20,
                **params,  # type: ignore[arg-type]
            ),
            rng=np.random.default_rng(1),
            noise_source=random.Random(2),
        )
        for params in ({}, {"graph_growth": same_as})
    ]
    assert asked == [same_as, same_as]
    assert np.array_equal(runs[0].codes, runs[1].codes)
    assert runs[0].releases == runs[1].releases
