"""Triangulation, junction-tree structure, model_size and the size cap."""

from __future__ import annotations

import itertools
import math
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Domain
from engine.estimation import ModelSizer, ModelTooLarge, NoisyMarginal, estimate, model_size
from engine.estimation.junction_tree import Labels, build_junction_tree, triangulate


@st.composite
def domains_and_cliques(draw: st.DrawFn) -> tuple[Domain, list[tuple[str, ...]]]:
    n = draw(st.integers(1, 7))
    names = [f"x{i}" for i in range(n)]
    sizes = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    domain = Domain(tuple(names), tuple(sizes))
    cliques = draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=min(3, n), unique=True).map(
                tuple
            ),
            max_size=8,
        )
    )
    return domain, cliques


@given(domains_and_cliques())
@settings(max_examples=150, deadline=None)
def test_junction_tree_is_valid(case: tuple[Domain, list[tuple[str, ...]]]) -> None:
    domain, cliques = case
    labels = Labels(domain)
    tree = build_junction_tree(labels, [labels.clique(c) for c in cliques])
    sets = [set(c) for c in tree.cliques]
    # Every attribute is in some clique, every requested clique inside a maximal one.
    assert set().union(*sets) == set(range(len(domain)))
    for clique in cliques:
        assert tree.containing(labels.clique(clique)) is not None
    # Maximal cliques: none contains another.
    for i, j in itertools.permutations(range(len(sets)), 2):
        assert not sets[i] <= sets[j]
    # A tree: one root, parents before children.
    assert sum(p == -1 for p in tree.parent) == 1
    # Running intersection: the cliques holding any attribute form a connected subtree.
    for v in range(len(domain)):
        holding = {c for c, s in enumerate(sets) if v in s}
        tops = [c for c in holding if tree.parent[c] not in holding]
        assert len(tops) == 1
    assert tree.cells == model_size(domain, cliques)


@given(domains_and_cliques(), st.data())
@settings(max_examples=150, deadline=None)
def test_model_sizer_equals_model_size(
    case: tuple[Domain, list[tuple[str, ...]]], data: st.DataObject
) -> None:
    """The memoised sizer answers exactly what model_size answers, for candidates that add no
    edge, new edges, and the same added edges twice (memo hit) in any order."""
    domain, base = case
    names = list(domain.attributes)
    sizer = ModelSizer(domain, base)
    candidates = data.draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=min(4, len(names)), unique=True),
            min_size=1,
            max_size=12,
        )
    )
    for candidate in [*candidates, *reversed(candidates), *base]:
        assert sizer.size_with(tuple(candidate)) == model_size(domain, [*base, tuple(candidate)])


@given(domains_and_cliques(), domains_and_cliques(), st.data())
@settings(max_examples=100, deadline=None)
def test_sizers_sharing_a_memo_stay_exact(
    case: tuple[Domain, list[tuple[str, ...]]],
    other: tuple[Domain, list[tuple[str, ...]]],
    data: st.DataObject,
) -> None:
    """Sizers of growing bases (a mechanism's rounds) that share one memo answer exactly what
    model_size answers, whether a graph was met before (memo hit) or not."""
    domain, base = case
    names = list(domain.attributes)
    extra = [tuple(c for c in clique if c in names) for clique in other[1]]
    memo: dict[int, int] = {}
    candidates = data.draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=min(4, len(names)), unique=True),
            min_size=1,
            max_size=8,
        )
    )
    for stop in range(len(base) + 1):
        grown = [*base[:stop], *[c for c in extra if c]]
        sizer = ModelSizer(domain, grown, memo)
        for candidate in candidates:
            expected = model_size(domain, [*grown, tuple(candidate)])
            assert sizer.size_with(tuple(candidate)) == expected


def test_model_size_examples() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3, "c": 4, "d": 5})
    assert model_size(domain, []) == 2 + 3 + 4 + 5
    assert model_size(domain, [("a", "b"), ("b", "c"), ("c", "d")]) == 6 + 12 + 20
    # A 4-cycle needs one chord: two triangles.
    cycle = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")]
    assert model_size(domain, cycle) in (2 * 3 * 4 + 2 * 4 * 5, 2 * 3 * 5 + 3 * 4 * 5)
    assert model_size(domain, [("a", "b", "c", "d")]) == 120


def test_tree_of_pairs_keeps_its_cliques() -> None:
    # Weighted min-fill never adds a fill edge to a tree: its cliques are exactly its edges.
    sizes = {"a": 85, "b": 2, "c": 100, "d": 7, "e": 6, "f": 2}
    edges = [("a", "b"), ("b", "c"), ("b", "d"), ("d", "e"), ("e", "f")]
    domain = Domain.from_mapping(sizes)
    assert model_size(domain, edges) == sum(sizes[x] * sizes[y] for x, y in edges)


def test_model_size_equals_allocated_cells() -> None:
    domain = Domain.from_mapping({"a": 3, "b": 4, "c": 2, "d": 5, "e": 3})
    cliques = [("a", "b"), ("b", "c", "d"), ("d", "a"), ("e",)]
    rng = np.random.default_rng(0)
    measurements = [
        NoisyMarginal(c, rng.random([domain.size(a) for a in c]) * 10, 1.0) for c in cliques
    ]
    model = estimate(domain, measurements, cliques=[("c", "e")], iterations=3)
    expected = model_size(domain, [*cliques, ("c", "e")])
    assert model.cells == expected
    assert sum(v.size for v in model.potentials.values()) == expected
    assert sum(v.size for v in model.clique_marginals().values()) == expected


def test_model_too_large_is_raised_before_allocation() -> None:
    # The (a, b) clique would need 10⁸ cells (800 MB); the cap is checked before anything of
    # that size exists, so the peak traced allocation stays tiny.
    domain = Domain.from_mapping({"a": 10_000, "b": 10_000})
    measurements = [
        NoisyMarginal(("a",), np.ones(10_000), 1.0),
        NoisyMarginal(("b",), np.ones(10_000), 1.0),
    ]
    assert model_size(domain, [("a",), ("b",), ("a", "b")]) == 10**8
    tracemalloc.start()
    try:
        with pytest.raises(ModelTooLarge) as raised:
            estimate(domain, measurements, cliques=[("a", "b")], max_cells=10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000
    assert raised.value.cells == 10**8
    assert raised.value.max_cells == 10
    assert isinstance(raised.value, ValueError)


def test_model_within_cap_is_built() -> None:
    domain = Domain.from_mapping({"a": 3, "b": 4})
    measurements = [NoisyMarginal(("a", "b"), np.ones((3, 4)), 1.0)]
    assert estimate(domain, measurements, max_cells=12, iterations=2).cells == 12
    with pytest.raises(ModelTooLarge):
        estimate(domain, measurements, max_cells=11, iterations=2)


def test_model_size_is_fast_enough_for_aim() -> None:
    # AIM asks for the hypothetical size of every candidate in every round.
    sizes = [85, 9, 100, 16, 7, 15, 6, 5, 2, 100, 100, 99, 42, 2]
    domain = Domain(tuple(f"x{i}" for i in range(14)), tuple(sizes))
    base = [(f"x{i}",) for i in range(14)] + [(f"x{i}", f"x{i + 1}") for i in range(13)]
    candidates = list(itertools.combinations(domain.attributes, 3))
    start = time.perf_counter()
    sizes_seen = [model_size(domain, [*base, c]) for c in candidates]
    elapsed = time.perf_counter() - start
    base_size = model_size(domain, base)
    assert all(
        s >= max(base_size, math.prod(domain.size(a) for a in c))
        for s, c in zip(sizes_seen, candidates, strict=True)
    )
    assert elapsed < 2.0, f"{len(candidates)} model_size calls took {elapsed:.2f}s"


@pytest.mark.parametrize("bad", ["ab", ("a", "a"), ("zz",)])
def test_model_size_rejects_bad_cliques(bad: object) -> None:
    domain = Domain.from_mapping({"a": 2, "b": 2})
    with pytest.raises((TypeError, ValueError, KeyError)):
        model_size(domain, [bad])  # type: ignore[list-item]


def _reference_triangulation(
    sizes: list[int], cliques: list[tuple[int, ...]]
) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """Greedy weighted-min-fill elimination as its definition reads: every step recomputes
    every remaining vertex's (fill cells, clique cells, vertex) from scratch and takes the
    smallest; fill counts the cells of each missing pair among the neighbours (from both
    ends)."""
    adjacency = [set() for _ in sizes]
    for clique in cliques:
        for a, b in itertools.combinations(clique, 2):
            adjacency[a].add(b)
            adjacency[b].add(a)
    left = set(range(len(sizes)))
    order: list[int] = []
    eliminated: list[tuple[int, ...]] = [()] * len(sizes)

    def cost(v: int) -> tuple[int, int, int]:
        fill = sum(
            sizes[a] * sizes[b]
            for a in adjacency[v]
            for b in adjacency[v]
            if a != b and b not in adjacency[a]
        )
        return (fill, math.prod(sizes[u] for u in adjacency[v] | {v}), v)

    while left:
        v = min(cost(u) for u in left)[2]
        left.discard(v)
        order.append(v)
        eliminated[v] = tuple(sorted(adjacency[v] | {v}))
        for a, b in itertools.combinations(adjacency[v], 2):
            adjacency[a].add(b)
            adjacency[b].add(a)
        for a in adjacency[v]:
            adjacency[a].discard(v)
        adjacency[v] = set()
    return tuple(order), tuple(eliminated)


@given(
    st.integers(1, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(1, 5), min_size=n, max_size=n),
            st.lists(
                st.lists(st.integers(0, n - 1), min_size=1, max_size=4, unique=True).map(tuple),
                max_size=14,
            ),
        )
    )
)
@settings(max_examples=300, deadline=None)
def test_triangulation_is_the_greedy_order_of_its_definition(
    case: tuple[list[int], list[tuple[int, ...]]],
) -> None:
    # The incremental cost updates give the elimination order and cliques of recomputing every
    # cost at every step (a guard for anyone making triangulate faster).
    sizes, cliques = case
    found = triangulate(sizes, cliques)
    order, eliminated = _reference_triangulation(sizes, cliques)
    assert found.elimination_order == order
    assert found.elimination_cliques == eliminated
