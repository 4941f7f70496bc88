"""TreeGrowth: growing a junction tree by one clique locally gives a valid chordal structure that
``estimate`` rebuilds exactly, and its size is what ``size_with`` says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Domain
from engine.estimation import NoisyMarginal, estimate
from engine.estimation.growth import TreeGrowth
from engine.estimation.junction_tree import Labels, build_junction_tree, model_size


@st.composite
def trees_and_candidates(draw: st.DrawFn) -> tuple[Domain, list[tuple[str, ...]], list[str]]:
    n = draw(st.integers(2, 9))
    names = [f"x{i}" for i in range(n)]
    sizes = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    cliques = draw(
        st.lists(
            st.lists(st.sampled_from(names), min_size=1, max_size=min(3, n), unique=True).map(
                tuple
            ),
            max_size=10,
        )
    )
    candidate = draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(4, n), unique=True))
    return Domain(tuple(names), tuple(sizes)), cliques, candidate


@given(trees_and_candidates())
@settings(max_examples=300, deadline=None)
def test_grown_structure_is_what_the_tree_builder_makes_of_it(
    case: tuple[Domain, list[tuple[str, ...]], list[str]],
) -> None:
    domain, cliques, candidate = case
    labels = Labels(domain)
    tree = build_junction_tree(labels, [labels.clique(c) for c in cliques])
    growth = TreeGrowth(tree)
    ids = labels.clique(candidate)
    grown = growth.cliques_with(ids)
    sets = [frozenset(c) for c in grown]
    # The candidate is inside one clique, every old clique inside a new one, none repeated or
    # inside another (maximal), and every attribute still covered.
    assert any(frozenset(ids) <= s for s in sets)
    assert all(any(frozenset(old) <= s for s in sets) for old in tree.cliques)
    assert all(not (a < b) for a in sets for b in sets)
    assert len(set(sets)) == len(sets)
    assert set().union(*sets) == set(range(len(domain)))
    # The tree builder, given the measured sets, the candidate and the grown cliques (what AIM
    # passes to estimate), adds no fill: it builds exactly the grown structure, of that size.
    rebuilt = build_junction_tree(labels, [*(labels.clique(c) for c in cliques), ids, *grown])
    assert {frozenset(c) for c in rebuilt.cliques} == set(sets)
    assert rebuilt.cells == growth.size_with(ids)
    # A candidate already inside a clique changes nothing.
    if growth.inside(ids):
        assert growth.size_with(ids) == tree.cells and grown == tree.cliques


def test_growth_is_local_and_matches_a_fit_with_those_cliques() -> None:
    # A chain a-b-c-d-e: adding (a, b) touches only the clique holding both; adding (a, e)
    # re-triangulates the path between them.
    domain = Domain(tuple("abcde"), (2, 3, 4, 5, 6))
    labels = Labels(domain)
    chain = [("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")]
    tree = build_junction_tree(labels, [labels.clique(c) for c in chain])
    growth = TreeGrowth(tree)
    assert growth.size_with(labels.clique(("a", "b"))) == tree.cells
    ends = labels.clique(("a", "e"))
    grown = growth.cliques_with(ends)
    assert growth.size_with(ends) == model_size(domain, [labels.names(c) for c in grown])
    measurements = [NoisyMarginal(c, _ones(domain, c), sigma=1.0) for c in [*chain, ("a", "e")]]
    model = estimate(domain, measurements, cliques=[labels.names(c) for c in grown], iterations=5)
    assert {frozenset(c) for c in model.cliques} == {frozenset(labels.names(c)) for c in grown}


def _ones(domain: Domain, attributes: tuple[str, ...]):  # type: ignore[no-untyped-def]
    import numpy as np

    return np.ones(tuple(domain.size(a) for a in attributes))
