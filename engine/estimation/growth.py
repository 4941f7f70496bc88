"""Grow a junction tree by one clique, locally: the model structure of AIM's rounds.

Adaptive mechanisms add one measured clique per round. Re-triangulating the whole Markov graph
for every candidate, to learn the model size it would lead to (private-pgm's
``hypothetical_model_size``, :class:`engine.estimation.ModelSizer`), costs a triangulation of all
columns per candidate and per round; on 54 columns that was 13 s of every round, and it grows
with the width. :class:`TreeGrowth` instead re-triangulates only the part of the current tree
the candidate touches:

1. the *piece*: in each connected component of the Markov graph that the candidate meets, the
   smallest connected set of cliques that covers the candidate's attributes there (the cliques
   meeting them, the tree paths joining them, then leaves pruned whose candidate attributes
   their only neighbour in the piece also holds); the piece is the union over those
   components (:meth:`JunctionTree.covering_piece` with ``per_component``). The tree joins
   components through empty separators; pieces in different components share no attribute,
   so nothing needs the path between them, and a triple of three unrelated attributes touches
   three one-clique pieces, not every clique on that path (issue 25);
2. greedy triangulation (:func:`engine.estimation.junction_tree.triangulate`) of the graph on the
   piece's attributes with an edge inside each of its cliques and inside the candidate;
3. the grown structure is the cliques outside the piece plus the maximal cliques of step 2.

The result is chordal, with exactly those maximal cliques. Cut the tree at its empty separators:
one junction tree ``T_K`` per component ``K``, in which the piece's part ``P_K`` (if any) is
connected. An outside clique ``C`` of ``K`` lies in a subtree ``S`` of ``T_K`` minus ``P_K``,
which hangs from one piece clique ``N`` by one edge, separator ``σ = C_S ∩ N`` (``C_S`` the
clique of ``S`` next to ``N``). A vertex of ``C`` that some piece clique also holds is, by the
running intersection property of ``T_K`` (the path runs through ``C_S`` and ``N``), in ``σ``;
so ``C`` meets the piece's attributes only inside ``σ ⊆ N``, which step 2 keeps complete (``N``
was one of its cliques), so some clique ``M`` of step 2 holds ``σ``. Hang every such ``S`` from
its ``M``, hang the trees ``T_K`` of components the candidate does not meet anywhere (empty
separator), and join step 2's cliques by a junction tree of their own: the result is a junction
tree (a vertex outside the piece lies in one subtree ``S`` only, where its cliques are
connected; a vertex in the piece is, in every ``S`` that holds it, on the path to ``σ ⊆ M``), so
the graph is chordal. No clique of step 2 lies in an outside clique ``C`` (it would lie in
``σ ⊆ N``, and ``N`` lies in a clique of step 2, so it would be ``N``, inside ``C``: two
maximal cliques of the old tree nested) and no outside clique lies in the piece's
attributes (it would lie in ``σ ⊆ N``, nested again). So :func:`engine.estimation.estimate`
given these cliques (``cliques=``) builds exactly this tree: greedy elimination of a chordal
graph adds no fill. The size of the grown tree is the current size minus the piece's cells plus
step 2's, a triangulation of a few attributes whatever the width.

Greedy elimination is not optimal, so step 2 need not match what re-triangulating the whole
graph (:class:`engine.estimation.ModelSizer`) would give; both are valid structures. Before
issue 25 the piece of a candidate spanning components was the tree path between them, through
the empty separators: step 2 then re-triangulated every clique on that path too (5–9 % of the
CPU of aim on a 196-column table; the grown structures of the runs compared were the same,
docs/benchmarks.md "AIM on 196 columns: sizing candidates per component").

Public structure only: no data, no noisy values; post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.estimation.junction_tree import JunctionTree, triangulate

Ids = tuple[int, ...]


Memo = dict[tuple[tuple[Ids, ...], Ids], tuple[int, tuple[Ids, ...]]]
"""Re-triangulated pieces by their cliques' contents and the candidate (see :class:`TreeGrowth`)."""

MEMO_ENTRIES = 200_000
"""A shared memo is emptied when it holds more pieces than this (memory stays bounded)."""


class TreeGrowth:
    """Sizes and grown structures of ``tree`` plus one candidate clique (attribute ids).

    ``memo`` may be shared by the growths of successive trees of one run (the same labels): a
    piece's re-triangulation depends only on the attributes of its cliques and the candidate,
    so a piece the tree still holds unchanged after a round is not triangulated again (exact:
    the same cells and cliques)."""

    def __init__(self, tree: JunctionTree, memo: Memo | None = None) -> None:
        self.tree = tree
        self.sizes = tree.sizes
        self.sets = tree.sets
        self.holders: dict[int, list[int]] = {}
        for c, clique in enumerate(tree.cliques):
            for v in clique:
                self.holders.setdefault(v, []).append(c)
        self.cells = [math.prod(shape) for shape in tree.shapes]
        self.total = sum(self.cells)
        self._local: dict[tuple[frozenset[int], Ids], tuple[int, tuple[Ids, ...]]] = {}
        self._memo = memo
        self._pieces: dict[frozenset[int], frozenset[int]] = {}

    def inside(self, ids: Sequence[int]) -> bool:
        """Whether some clique of the tree already holds every attribute of ``ids``."""
        wanted = frozenset(ids)
        first = self.holders.get(min(wanted, key=lambda v: len(self.holders.get(v, ()))), [])
        return any(wanted <= self.sets[c] for c in first)

    def piece(self, ids: Sequence[int]) -> frozenset[int]:
        """The cliques to re-triangulate with ``ids``: per component of the Markov graph, the
        smallest connected set whose union holds ``ids`` there (see the module)."""
        wanted = frozenset(ids)
        found = self._pieces.get(wanted)
        if found is None:
            touching = {c for v in wanted for c in self.holders.get(v, ())}
            found = frozenset(self.tree.covering_piece(wanted, touching, per_component=True))
            self._pieces[wanted] = found
        return found

    def _grown_piece(self, ids: Sequence[int]) -> tuple[frozenset[int], int, tuple[Ids, ...]]:
        """The piece, the cells of its re-triangulation with ``ids``, and the new maximal
        cliques (global ids, ascending)."""
        wanted: Ids = tuple(sorted(set(ids)))
        piece = self.piece(wanted)
        key = (piece, wanted)
        found = self._local.get(key)
        if found is None and self._memo is not None:
            contents = (tuple(sorted(self.tree.cliques[c] for c in piece)), wanted)
            found = self._memo.get(contents)
            if found is None:
                found = self._triangulated(piece, wanted)
                if len(self._memo) >= MEMO_ENTRIES:
                    self._memo.clear()
                self._memo[contents] = found
            self._local[key] = found
        if found is None:
            found = self._triangulated(piece, wanted)
            self._local[key] = found
        return piece, found[0], found[1]

    def _triangulated(self, piece: frozenset[int], wanted: Ids) -> tuple[int, tuple[Ids, ...]]:
        """The cells and maximal cliques of the piece re-triangulated with ``wanted``."""
        members = sorted(set(wanted).union(*(self.sets[c] for c in piece)))
        local = {v: i for i, v in enumerate(members)}
        cliques = [tuple(local[v] for v in wanted)]
        cliques += [tuple(local[v] for v in self.tree.cliques[c]) for c in sorted(piece)]
        maximal = triangulate([self.sizes[v] for v in members], cliques).maximal
        grown = tuple(tuple(sorted(members[i] for i in clique)) for clique in maximal)
        return (sum(math.prod(self.sizes[v] for v in clique) for clique in grown), grown)

    def size_with(self, ids: Sequence[int]) -> int:
        """Cells of the tree grown by ``ids`` (the tree's own size if a clique holds them)."""
        if self.inside(ids):
            return self.total
        piece, cells, _ = self._grown_piece(ids)
        return self.total - sum(self.cells[c] for c in piece) + cells

    def cliques_with(self, ids: Sequence[int]) -> tuple[Ids, ...]:
        """The maximal cliques of the tree grown by ``ids``: pass them to ``estimate`` as
        ``cliques`` and it builds exactly that tree (see the module)."""
        if self.inside(ids):
            return self.tree.cliques
        piece, _, grown = self._grown_piece(ids)
        kept = tuple(clique for c, clique in enumerate(self.tree.cliques) if c not in piece)
        return kept + grown
