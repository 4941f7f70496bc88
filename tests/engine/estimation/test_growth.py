"""TreeGrowth: growing a junction tree by one clique locally gives a valid chordal structure that
``estimate`` rebuilds exactly, and its size is what ``size_with`` says."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Domain
from engine.estimation import NoisyMarginal, estimate
from engine.estimation.growth import Memo, TreeGrowth
from engine.estimation.junction_tree import JunctionTree, Labels, build_junction_tree, model_size


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


def _grown(
    case: tuple[Domain, list[tuple[str, ...]], list[str]],
) -> tuple[Labels, JunctionTree, TreeGrowth, tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """A drawn case's labels, tree, its growth, the candidate's ids and the grown cliques."""
    domain, cliques, candidate = case
    labels = Labels(domain)
    tree = build_junction_tree(labels, [labels.clique(c) for c in cliques])
    growth = TreeGrowth(tree)
    ids = labels.clique(candidate)
    return labels, tree, growth, ids, growth.cliques_with(ids)


@given(trees_and_candidates())
@settings(max_examples=300, deadline=None)
def test_grown_structure_is_what_the_tree_builder_makes_of_it(
    case: tuple[Domain, list[tuple[str, ...]], list[str]],
) -> None:
    domain, cliques, _ = case
    labels, tree, growth, ids, grown = _grown(case)
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


def _chordal_cover(domain: Domain, grown: tuple[tuple[int, ...], ...]) -> None:
    """The graph with an edge inside every grown clique is chordal and has exactly those
    maximal cliques (checked by networkx, independently of the engine's triangulation)."""
    import networkx as nx

    graph = nx.Graph()
    graph.add_nodes_from(range(len(domain)))
    for clique in grown:
        graph.add_edges_from((a, b) for i, a in enumerate(clique) for b in clique[i + 1 :])
    assert nx.is_chordal(graph)
    assert {frozenset(c) for c in nx.find_cliques(graph)} == {frozenset(c) for c in grown}


@st.composite
def components_and_candidates(
    draw: st.DrawFn,
) -> tuple[Domain, list[tuple[str, ...]], list[str]]:
    # Several disjoint groups of columns, each measured only inside itself (so the Markov
    # graph has at least that many components), and a candidate drawn across groups.
    groups = draw(st.integers(2, 4))
    names: list[str] = []
    cliques: list[tuple[str, ...]] = []
    for g in range(groups):
        width = draw(st.integers(1, 4))
        members = [f"g{g}x{i}" for i in range(width)]
        names += members
        cliques += draw(
            st.lists(
                st.lists(st.sampled_from(members), min_size=1, max_size=3, unique=True).map(tuple),
                max_size=4,
            )
        )
    sizes = draw(st.lists(st.integers(1, 4), min_size=len(names), max_size=len(names)))
    candidate = draw(st.lists(st.sampled_from(names), min_size=2, max_size=4, unique=True))
    return Domain(tuple(names), tuple(sizes)), cliques, candidate


@given(components_and_candidates())
@settings(max_examples=300, deadline=None)
def test_growth_across_components_is_a_chordal_cover_sized_within_the_touched_components(
    case: tuple[Domain, list[tuple[str, ...]], list[str]],
) -> None:
    domain, cliques, _ = case
    labels, tree, growth, ids, grown = _grown(case)
    _chordal_cover(domain, grown)
    assert any(frozenset(ids) <= frozenset(c) for c in grown)
    assert all(any(old <= frozenset(c) for c in grown) for old in tree.sets)
    # The piece stays inside the components the candidate meets: the cliques on the empty
    # separators' path between them are never re-triangulated.
    touched = {tree.component[c] for v in ids for c in growth.holders[v]}
    assert {tree.component[c] for c in growth.piece(ids)} <= touched
    rebuilt = build_junction_tree(labels, [*(labels.clique(c) for c in cliques), ids, *grown])
    assert rebuilt.cells == growth.size_with(ids)


def test_piece_across_components_leaves_out_the_empty_separator_path() -> None:
    # Eight unrelated pairs: eight components, which the tree joins through empty separators.
    # A triple of one column from each of three pairs needs only the three pairs' cliques.
    names = [f"c{i}" for i in range(16)]
    domain = Domain(tuple(names), tuple(2 + i % 3 for i in range(16)))
    labels = Labels(domain)
    pairs = [(names[2 * i], names[2 * i + 1]) for i in range(8)]
    tree = build_junction_tree(labels, [labels.clique(p) for p in pairs])
    assert len(set(tree.component)) == 8
    growth = TreeGrowth(tree)
    # One column from each of three pairs whose cliques are not the root: the tree path
    # between them runs through the root (or more), which the triple does not touch.
    chosen = [c for c in tree.preorder if c != tree.preorder[0]][-3:]
    triple = tuple(sorted(tree.cliques[c][0] for c in chosen))
    wanted = frozenset(triple)
    holders = {c for c in range(8) if wanted & tree.sets[c]}
    # Joined through the tree, the piece holds cliques the triple does not touch ...
    assert tree.covering_piece(wanted) > holders
    # ... per component it holds exactly the three pairs.
    assert tree.covering_piece(wanted, per_component=True) == holders
    assert growth.piece(triple) == holders
    # The grown structure: the untouched pairs, the three pairs and the triple, which is what
    # re-triangulating the whole graph gives too (it is chordal already).
    grown = growth.cliques_with(triple)
    _chordal_cover(domain, grown)
    assert {frozenset(c) for c in grown} == {*tree.sets, wanted}
    measured = [*pairs, labels.names(triple)]
    assert growth.size_with(triple) == model_size(domain, measured)


def test_joined_piece_stays_connected_for_inference() -> None:
    # Without per_component (what marginal inference on the piece needs), the piece of a set
    # across components is still one connected subtree.
    names = [f"c{i}" for i in range(8)]
    domain = Domain(tuple(names), (2,) * 8)
    labels = Labels(domain)
    tree = build_junction_tree(
        labels, [labels.clique((names[2 * i], names[2 * i + 1])) for i in range(4)]
    )
    wanted = frozenset(tree.cliques[0][:1] + tree.cliques[3][:1])
    piece = tree.covering_piece(wanted)
    reached = {min(piece)}
    stack = [min(piece)]
    while stack:
        c = stack.pop()
        for e in tree.neighbours[c]:
            if e in piece and e not in reached:
                reached.add(e)
                stack.append(e)
    assert reached == piece


@given(trees_and_candidates(), trees_and_candidates())
@settings(max_examples=200, deadline=None)
def test_a_shared_memo_changes_no_size_or_structure(
    first: tuple[Domain, list[tuple[str, ...]], list[str]],
    second: tuple[Domain, list[tuple[str, ...]], list[str]],
) -> None:
    """Pieces memoised by their cliques' contents across two trees of one domain (the second
    tree grown from the first's sets, as across rounds): the same answers as without a memo."""
    domain, cliques, candidate = first
    labels = Labels(domain)
    memo: Memo = {}
    later = [c for c in second[1] if set(c) <= set(domain.attributes)]
    for sets in (cliques, cliques + later):
        tree = build_junction_tree(labels, [labels.clique(c) for c in sets])
        for wanted in (candidate, *sets):
            ids = labels.clique(wanted)
            plain, shared = TreeGrowth(tree), TreeGrowth(tree, memo)
            assert shared.size_with(ids) == plain.size_with(ids)
            assert shared.cliques_with(ids) == plain.cliques_with(ids)
    assert memo or all(
        TreeGrowth(build_junction_tree(labels, [labels.clique(c) for c in cliques])).inside(
            labels.clique(c)
        )
        for c in (candidate, *cliques)
    )
