"""Junction trees over a domain's attributes: triangulation, maximal cliques, tree structure.

This module only looks at the public domain and at *which* attribute sets are measured; it never
sees data or noisy values. It builds the junction tree that Private-PGM (McKenna, Sheldon, Miklau,
"Graphical-model based estimation and inference for differential privacy", ICML 2019) runs belief
propagation on:

1. the Markov graph: one node per attribute (unmeasured attributes too), an edge between every
   pair of attributes that appear together in some measured (or extra) clique;
2. a greedy elimination order (weighted min-fill, ties by min-weight in cells, then by
   internal id, see :class:`Labels`), which triangulates the graph; the elimination cliques
   ``K_v = {v} ∪ later neighbours of v`` that are maximal are the junction tree's cliques;
3. a maximum-weight spanning tree of the clique graph, weights = |separator| in attributes
   (Kruskal, including empty separators, so a forest is joined into one tree).

Deviation from private-pgm: mbi's greedy order minimises the new clique's cells only (min-weight);
here min-weight is only the tie-break after *weighted min-fill* (the cells added by fill edges),
which keeps simplicial attributes (e.g. the leaves of a tree-shaped model) fill-free, so a tree of
2-way cliques stays exactly that tree. :func:`model_size` uses the same code path as the model
builder, so the size it reports is the size :func:`engine.estimation.estimate` allocates.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from engine.domain import Domain


class ModelTooLarge(ValueError):
    """The junction tree for the requested cliques would exceed the cell cap.

    Raised before any potential is allocated. ``cells`` is the size the model would have had and
    ``max_cells`` the cap it exceeded.
    """

    def __init__(self, cells: int, max_cells: int) -> None:
        super().__init__(
            f"the junction tree would have {cells} cells, more than the cap of {max_cells}"
        )
        self.cells = cells
        self.max_cells = max_cells


@dataclass(frozen=True, eq=False)
class Labels:
    """Internal attribute ids: the domain's attributes numbered by ascending size.

    Every array inside the estimator has its axes in ascending id order, so the small attributes
    are the outer axes and the large ones the inner, contiguous axes. Broadcasting a marginal
    into a clique and summing a clique onto a marginal then run over long contiguous blocks,
    which is several times faster than with small attributes innermost. ``order[i]`` is the
    domain position of id ``i``; ties in size keep domain order.
    """

    domain: Domain
    order: tuple[int, ...] = field(init=False)
    sizes: tuple[int, ...] = field(init=False)
    ids: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        order = tuple(sorted(range(len(self.domain)), key=lambda j: (self.domain.sizes[j], j)))
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "sizes", tuple(self.domain.sizes[j] for j in order))
        object.__setattr__(self, "ids", {self.domain.attributes[j]: i for i, j in enumerate(order)})

    def clique(self, attributes: Iterable[str]) -> tuple[int, ...]:
        """Ids of ``attributes``, ascending; rejects repeats and unknown names."""
        if isinstance(attributes, str):
            raise TypeError("a clique must be a sequence of attribute names, not a single string")
        ids = []
        for name in attributes:
            if name not in self.ids:
                raise KeyError(name)
            ids.append(self.ids[name])
        if len(set(ids)) != len(ids):
            raise ValueError("a clique must not repeat an attribute")
        return tuple(sorted(ids))

    def names(self, ids: Iterable[int]) -> tuple[str, ...]:
        """Attribute names of ``ids``, in the order given."""
        return tuple(self.domain.attributes[self.order[i]] for i in ids)

    def axes_from(self, names: Sequence[str]) -> list[int]:
        """Transposition taking an array with axes ``names`` to ascending-id order."""
        ids = [self.ids[name] for name in names]
        return sorted(range(len(ids)), key=lambda axis: ids[axis])


@dataclass(frozen=True)
class Triangulation:
    """The result of greedy elimination on the Markov graph (attribute positions throughout).

    ``elimination_cliques[v]`` is ``K_v``, attribute ``v`` together with its neighbours that are
    eliminated after it (ascending); ``maximal`` lists the maximal ones, each once, in the order
    their attributes were eliminated.
    """

    elimination_order: tuple[int, ...]
    elimination_cliques: tuple[tuple[int, ...], ...]
    maximal: tuple[tuple[int, ...], ...]


def triangulate(sizes: Sequence[int], cliques: Iterable[Iterable[int]]) -> Triangulation:
    """Greedy weighted-min-fill elimination of the graph with an edge inside every clique.

    ``sizes[v]`` is the number of categories of attribute ``v``. The cost of eliminating ``v`` is
    (cells added by fill edges among its neighbours, cells of its elimination clique, ``v``),
    smallest first. After each elimination only the costs that can change are recomputed: those
    of the eliminated attribute's neighbours, and of the common neighbours of the ends of each
    fill edge. Simplicial attributes cost no fill, so they go first.
    """
    n = len(sizes)
    adjacency: list[set[int]] = [set() for _ in range(n)]
    for clique in cliques:
        members = set(clique)
        for v in members:
            adjacency[v] |= members
    for v in range(n):
        adjacency[v].discard(v)

    def cost(v: int) -> tuple[int, int, int]:
        neighbours = adjacency[v]
        fill = 0  # every missing pair is counted from both ends; the order is unaffected
        weight = sizes[v]
        for a in neighbours:
            weight *= sizes[a]
            missing = neighbours - adjacency[a]
            missing.discard(a)
            if missing:
                fill += sizes[a] * sum(sizes[b] for b in missing)
        return (fill, weight, v)

    costs = {v: cost(v) for v in range(n)}
    order: list[int] = []
    elimination_cliques: list[tuple[int, ...]] = [()] * n
    while costs:
        v = min(costs.values())[2]
        del costs[v]
        neighbours = adjacency[v]
        order.append(v)
        elimination_cliques[v] = tuple(sorted(neighbours | {v}))
        touched = set(neighbours)
        for a in neighbours:
            adjacency[a].discard(v)
        for a in neighbours:
            added = neighbours - adjacency[a]
            added.discard(a)
            if added:
                for b in added:
                    if a < b:
                        touched |= adjacency[a] & adjacency[b]
                adjacency[a] |= added
        adjacency[v] = set()
        for u in touched:
            if u in costs:
                costs[u] = cost(u)

    # K_v can only be contained in the elimination clique of an attribute eliminated before v.
    maximal: list[tuple[int, ...]] = []
    seen: list[frozenset[int]] = []
    for v in order:
        clique = frozenset(elimination_cliques[v])
        if not any(clique <= other for other in seen):
            maximal.append(elimination_cliques[v])
        seen.append(clique)
    return Triangulation(tuple(order), tuple(elimination_cliques), tuple(maximal))


def _clique_cells(sizes: Sequence[int], clique: Iterable[int]) -> int:
    return math.prod(sizes[v] for v in clique)


def model_size(domain: Domain, cliques: Iterable[Sequence[str]]) -> int:
    """Total cells of the junction tree :func:`engine.estimation.estimate` would build.

    The sum, over the maximal cliques after triangulating the graph of ``cliques`` (every
    attribute of ``domain`` is a node, measured or not), of each clique's number of cells. Nothing
    is allocated beyond the graph itself: this is AIM's "hypothetical model size" and is cheap
    enough to call for every candidate in every round.

    >>> domain = Domain.from_mapping({"a": 2, "b": 3, "c": 4})
    >>> model_size(domain, [("a", "b"), ("b", "c")])
    18
    >>> model_size(domain, [("a", "b"), ("b", "c"), ("a", "c")])
    24
    """
    labels = Labels(domain)
    return _triangulated_cells(labels.sizes, [labels.clique(clique) for clique in cliques])


def _triangulated_cells(sizes: Sequence[int], cliques: Sequence[tuple[int, ...]]) -> int:
    return sum(_clique_cells(sizes, clique) for clique in triangulate(sizes, cliques).maximal)


class ModelSizer:
    """:func:`model_size` of ``[*base, candidate]`` for many candidates against one fixed base.

    Exact, only faster: the size depends on the Markov graph alone (every attribute is a node and
    :func:`triangulate` reads nothing but the edges), so a candidate that adds no edge to the
    base graph has the base's size, and candidates that add the same edges share one
    triangulation (memoised on the added edges). Mechanisms that test hundreds of candidates
    per round (AIM, PPSyn, PrivMRF) spent most of their selection time re-triangulating
    identical graphs. Public structure only: it never sees data or noisy values.

    >>> domain = Domain.from_mapping({"a": 2, "b": 3, "c": 4})
    >>> sizer = ModelSizer(domain, [("a", "b"), ("b", "c")])
    >>> sizer.size_with(("a", "c")) == model_size(domain, [("a", "b"), ("b", "c"), ("a", "c")])
    True
    >>> sizer.size_with(("b",))
    18

    ``memo`` may be shared by the sizers of one domain (e.g. one per round of a mechanism): it
    is keyed by an edge set (a bit mask), so a graph some earlier base plus candidate already
    made is not triangulated again.

    Only the connected components a candidate touches are re-triangulated: greedy elimination
    treats components independently (a vertex's cost reads its own neighbourhood only, ties
    break by vertex id, and no elimination clique of one component lies inside another's), so
    the size is the base's minus the touched components' plus the triangulation of their union
    with the candidate's edges. Early in an adaptive run most components are single attributes,
    and a candidate costs a triangulation of a handful of vertices instead of all of them.
    """

    def __init__(
        self,
        domain: Domain,
        base: Iterable[Sequence[str]],
        memo: dict[int, int] | None = None,
    ) -> None:
        self._labels = Labels(domain)
        self._width = len(domain)
        self._base = [self._labels.clique(clique) for clique in base]
        self._mask = 0
        for ids in self._base:
            self._mask |= self._edge_mask(ids)
        self._memo: dict[int, int] = {} if memo is None else memo
        # Connected components of the base graph (union-find over the base cliques).
        root = list(range(self._width))

        def find(v: int) -> int:
            while root[v] != v:
                root[v] = root[root[v]]
                v = root[v]
            return v

        for ids in self._base:
            for v in ids[1:]:
                a, b = find(ids[0]), find(v)
                if a != b:
                    root[max(a, b)] = min(a, b)
        self._component = [find(v) for v in range(self._width)]
        self._members: dict[int, list[int]] = {}
        for v, c in enumerate(self._component):
            self._members.setdefault(c, []).append(v)
        self._cliques_of: dict[int, list[tuple[int, ...]]] = {c: [] for c in self._members}
        for ids in self._base:
            if ids:
                self._cliques_of[self._component[ids[0]]].append(ids)
        self._cells = {
            c: self._part_cells(self._members[c], self._cliques_of[c]) for c in self._members
        }
        self._total = sum(self._cells.values())

    def _edge_mask(self, ids: tuple[int, ...]) -> int:
        mask = 0
        for a, b in combinations(ids, 2):
            mask |= 1 << (a * self._width + b)
        return mask

    def _part_cells(self, members: Sequence[int], cliques: Sequence[tuple[int, ...]]) -> int:
        """Triangulated cells of the subgraph on ``members`` (ascending ids, so ties break as
        in the whole graph) with an edge inside every clique of ``cliques``."""
        if len(members) == 1:
            return self._labels.sizes[members[0]]
        local = {v: i for i, v in enumerate(members)}
        sizes = [self._labels.sizes[v] for v in members]
        return _triangulated_cells(sizes, [tuple(local[v] for v in ids) for ids in cliques])

    def size_with(self, candidate: Sequence[str]) -> int:
        """``model_size(domain, [*base, candidate])``."""
        ids = self._labels.clique(candidate)
        added = self._edge_mask(ids)
        if added & ~self._mask == 0:
            return self._total
        touched = sorted({self._component[v] for v in ids})
        members = sorted(v for c in touched for v in self._members[c])
        cliques = [ids, *(clique for c in touched for clique in self._cliques_of[c])]
        graph = added
        for clique in cliques:
            graph |= self._edge_mask(clique)
        merged = self._memo.get(graph)
        if merged is None:
            merged = self._part_cells(members, cliques)
            self._memo[graph] = merged
        return self._total - sum(self._cells[c] for c in touched) + merged


@dataclass(frozen=True, eq=False)
class JunctionTree:
    """A rooted junction tree over the attribute ids of ``labels`` (structure only).

    ``cliques[i]`` is sorted by id; ``parent[i]`` is the index of its parent clique
    (``-1`` for the root, which is ``preorder[0]``); ``separators[i] = cliques[i] ∩
    cliques[parent[i]]``. The triangulation's elimination order and elimination cliques are kept
    for sampling (attributes are drawn in reverse elimination order, each conditioned on its
    elimination clique).
    """

    labels: Labels
    cliques: tuple[tuple[int, ...], ...]
    parent: tuple[int, ...]
    preorder: tuple[int, ...]
    separators: tuple[tuple[int, ...], ...]
    triangulation: Triangulation
    children: tuple[tuple[int, ...], ...] = field(init=False)
    shapes: tuple[tuple[int, ...], ...] = field(init=False)
    neighbours: tuple[tuple[int, ...], ...] = field(init=False)
    depth: tuple[int, ...] = field(init=False)
    sets: tuple[frozenset[int], ...] = field(init=False)
    component: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        count = len(self.cliques)
        if not (len(self.parent) == len(self.separators) == len(self.preorder) == count):
            raise ValueError("a junction tree needs one parent and separator per clique")
        if sorted(self.preorder) != list(range(count)):
            raise ValueError("preorder must list every clique once")
        children: list[list[int]] = [[] for _ in range(count)]
        position = {c: i for i, c in enumerate(self.preorder)}
        for c, p in enumerate(self.parent):
            if p == -1:
                if c != self.preorder[0]:
                    raise ValueError("only the first clique in preorder may be the root")
                continue
            if position[p] >= position[c]:
                raise ValueError("preorder must list parents before children")
            expected = tuple(sorted(set(self.cliques[c]) & set(self.cliques[p])))
            if self.separators[c] != expected:
                raise ValueError("separators must be the intersection with the parent clique")
            children[p].append(c)
        sizes = self.labels.sizes
        object.__setattr__(self, "children", tuple(tuple(ch) for ch in children))
        object.__setattr__(
            self, "shapes", tuple(tuple(sizes[v] for v in clique) for clique in self.cliques)
        )
        neighbours = (
            tuple(ch) if p == -1 else (p, *ch) for p, ch in zip(self.parent, children, strict=True)
        )
        object.__setattr__(self, "neighbours", tuple(neighbours))
        depth = [0] * count
        for c in self.preorder[1:]:
            depth[c] = depth[self.parent[c]] + 1
        object.__setattr__(self, "depth", tuple(depth))
        object.__setattr__(self, "sets", tuple(frozenset(clique) for clique in self.cliques))
        # The tree's parts joined by non-empty separators: one per connected component of the
        # Markov graph (Kruskal joins the cliques of a component through shared attributes
        # before it spends an empty separator), labelled by the part's first clique in preorder.
        component = [0] * count
        for c in self.preorder:
            p = self.parent[c]
            component[c] = c if p == -1 or not self.separators[c] else component[p]
        object.__setattr__(self, "component", tuple(component))

    @property
    def domain(self) -> Domain:
        """The public domain the ids label."""
        return self.labels.domain

    @property
    def sizes(self) -> tuple[int, ...]:
        """Number of categories of each attribute id."""
        return self.labels.sizes

    @property
    def cells(self) -> int:
        """Total cells over the maximal cliques (the size of the potentials)."""
        return sum(math.prod(shape) for shape in self.shapes)

    def clique_names(self, index: int) -> tuple[str, ...]:
        """Attribute names of clique ``index``, in the clique's (ascending id) order."""
        return self.labels.names(self.cliques[index])

    def covering_piece(
        self,
        wanted: frozenset[int],
        touching: Iterable[int] | None = None,
        *,
        per_component: bool = False,
    ) -> set[int]:
        """A small set of cliques whose union holds ``wanted``: the cliques ``touching`` it (by
        default every clique meeting it), joined by climbing from each to their deepest common
        ancestor, then leaves pruned whose wanted attributes their only neighbour in the set
        also holds. The set is connected (what inference on the piece needs).

        With ``per_component``, the touching cliques are joined only within each part of the
        tree that non-empty separators connect (:attr:`component`, a connected component of
        the Markov graph), and the piece is the union of those parts' pieces: the path between
        two components runs through empty separators and holds nothing the pieces need to
        meet, so it is left out (what sizing a grown tree needs, see
        :mod:`engine.estimation.growth`). The result is then connected within each component
        only."""
        if touching is None:
            touching = [c for c, clique in enumerate(self.sets) if wanted & clique]
        if not per_component:
            return self._joined_piece(wanted, set(touching))
        groups: dict[int, set[int]] = {}
        for c in touching:
            groups.setdefault(self.component[c], set()).add(c)
        piece: set[int] = set()
        for group in groups.values():
            piece |= self._joined_piece(wanted, group)
        return piece

    def _joined_piece(self, wanted: frozenset[int], touching: set[int]) -> set[int]:
        """The connected piece of :meth:`covering_piece` joining the cliques ``touching``."""
        piece = set(touching)
        frontier = set(piece)
        while len(frontier) > 1:
            deepest = max(frontier, key=lambda c: (self.depth[c], c))
            frontier.discard(deepest)
            up = self.parent[deepest]
            piece.add(up)
            frontier.add(up)
        changed = True
        while changed and len(piece) > 1:
            changed = False
            for c in sorted(piece):
                inner = [e for e in self.neighbours[c] if e in piece]
                if len(inner) == 1 and (wanted & self.sets[c]) <= self.sets[inner[0]]:
                    piece.discard(c)
                    changed = True
        return piece

    def containing(self, attributes: Iterable[int]) -> int | None:
        """Index of the smallest clique containing ``attributes`` (None if none does)."""
        wanted = set(attributes)
        best: int | None = None
        best_cells = 0
        for i, clique in enumerate(self.cliques):
            if wanted <= set(clique):
                cells = math.prod(self.shapes[i])
                if best is None or cells < best_cells:
                    best, best_cells = i, cells
        return best


def _largest_branch(adjacency: list[list[int]], cells: list[int], removed: int) -> int:
    """Cells of the largest connected part of the tree left after removing ``removed``."""
    largest = 0
    for start in adjacency[removed]:
        seen = {removed, start}
        stack = [start]
        total = 0
        while stack:
            node = stack.pop()
            total += cells[node]
            for other in adjacency[node]:
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        largest = max(largest, total)
    return largest


def build_junction_tree(
    labels: Labels, cliques: Iterable[Iterable[int]], *, max_cells: int | None = None
) -> JunctionTree:
    """Triangulate, check the cap, and connect the maximal cliques into a junction tree.

    ``cliques`` are given as attribute ids of ``labels``. Raises :class:`ModelTooLarge` (before
    anything of the model's size is allocated) when the maximal cliques exceed ``max_cells``
    cells in total.
    """
    sizes = labels.sizes
    triangulation = triangulate(sizes, cliques)
    maximal = triangulation.maximal
    cells = sum(_clique_cells(sizes, clique) for clique in maximal)
    if max_cells is not None and cells > max_cells:
        raise ModelTooLarge(cells, max_cells)

    # Kruskal on the complete clique graph, heaviest separators first. Any maximum spanning tree
    # of |separator| has the running-intersection property (Jensen & Jensen 1994); empty
    # separators join the components of a forest.
    count = len(maximal)
    sets = [frozenset(clique) for clique in maximal]
    pairs = sorted(
        (-len(sets[i] & sets[j]), i, j) for i in range(count) for j in range(i + 1, count)
    )
    leader = list(range(count))

    def find(x: int) -> int:
        while leader[x] != x:
            leader[x] = leader[leader[x]]
            x = leader[x]
        return x

    adjacency: list[list[int]] = [[] for _ in range(count)]
    for _, i, j in pairs:
        ri, rj = find(i), find(j)
        if ri != rj:
            leader[ri] = rj
            adjacency[i].append(j)
            adjacency[j].append(i)

    # Root at the weighted centroid: the clique whose removal leaves the smallest largest
    # branch (in cells), which keeps the paths from the root short.
    cells_of = [_clique_cells(sizes, clique) for clique in maximal]
    root = min(range(count), key=lambda i: (_largest_branch(adjacency, cells_of, i), i))
    parent = [-1] * count
    preorder = [root]
    stack = [root]
    visited = {root}
    while stack:
        node = stack.pop()
        for other in sorted(adjacency[node], reverse=True):
            if other not in visited:
                visited.add(other)
                parent[other] = node
                preorder.append(other)
                stack.append(other)
    # A depth-first preorder would also do; any order with parents first is what BP needs.
    separators = tuple(
        () if parent[c] == -1 else tuple(sorted(sets[c] & sets[parent[c]])) for c in range(count)
    )
    return JunctionTree(
        labels=labels,
        cliques=maximal,
        parent=tuple(parent),
        preorder=tuple(preorder),
        separators=separators,
        triangulation=triangulation,
    )
