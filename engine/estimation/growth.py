"""Grow a junction tree by one clique, locally: the model structure of AIM's rounds.

Adaptive mechanisms add one measured clique per round. Re-triangulating the whole Markov graph
for every candidate, to learn the model size it would lead to (private-pgm's
``hypothetical_model_size``, :class:`engine.estimation.ModelSizer`), costs a triangulation of all
columns per candidate and per round; on 54 columns that was 13 s of every round, and it grows
with the width. :class:`TreeGrowth` instead re-triangulates only the part of the current tree
the candidate touches:

1. the *piece*: the smallest connected set of cliques that covers the candidate's attributes
   (the cliques meeting it, the tree paths joining them, then leaves pruned whose candidate
   attributes their only neighbour in the piece also holds);
2. greedy triangulation (:func:`engine.estimation.junction_tree.triangulate`) of the graph on the
   piece's attributes with an edge inside each of its cliques and inside the candidate;
3. the grown structure is the cliques outside the piece plus the maximal cliques of step 2.

The result is chordal: the outside part meets the piece only in separators, which are complete
in both parts (a vertex of an outside clique that some piece clique also holds lies, by the
running intersection property, in the piece clique next to it), and chordal graphs glued along
complete sets stay chordal. Its maximal cliques are those listed: no clique of step 2 lies in an
outside clique (it would lie in a separator, which some step-2 clique strictly contains) and no
outside clique lies in the piece's attributes. So :func:`engine.estimation.estimate` given these
cliques (``cliques=``) builds exactly this tree: greedy elimination of a chordal graph adds no
fill. The size of the grown tree is the current size minus the piece's cells plus step 2's, a
triangulation of a few attributes whatever the width.

Public structure only: no data, no noisy values; post-processing.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

from engine.estimation.junction_tree import JunctionTree, triangulate

Ids = tuple[int, ...]


def covering_piece(
    parent: Sequence[int],
    depth: Sequence[int],
    neighbours: Sequence[Collection[int]],
    sets: Sequence[frozenset[int]],
    touching: Iterable[int],
    wanted: frozenset[int],
) -> set[int]:
    """A small connected set of a junction tree's cliques whose union holds ``wanted``: the
    cliques ``touching`` it, joined by climbing from each to their deepest common ancestor,
    then leaves pruned whose wanted attributes their only neighbour in the set also holds.
    ``parent``, ``depth`` and ``neighbours`` describe the rooted tree, ``sets`` the cliques."""
    piece = set(touching)
    frontier = set(piece)
    while len(frontier) > 1:
        deepest = max(frontier, key=lambda c: (depth[c], c))
        frontier.discard(deepest)
        up = parent[deepest]
        piece.add(up)
        frontier.add(up)
    changed = True
    while changed and len(piece) > 1:
        changed = False
        for c in sorted(piece):
            inner = [e for e in neighbours[c] if e in piece]
            if len(inner) == 1 and (wanted & sets[c]) <= sets[inner[0]]:
                piece.discard(c)
                changed = True
    return piece


class TreeGrowth:
    """Sizes and grown structures of ``tree`` plus one candidate clique (attribute ids)."""

    def __init__(self, tree: JunctionTree) -> None:
        self.tree = tree
        self.sizes = tree.sizes
        count = len(tree.cliques)
        self.neighbours: list[list[int]] = [[] for _ in range(count)]
        for c, p in enumerate(tree.parent):
            if p != -1:
                self.neighbours[c].append(p)
                self.neighbours[p].append(c)
        self.depth = [0] * count
        for c in tree.preorder[1:]:
            self.depth[c] = self.depth[tree.parent[c]] + 1
        self.sets = [frozenset(clique) for clique in tree.cliques]
        self.holders: dict[int, list[int]] = {}
        for c, clique in enumerate(tree.cliques):
            for v in clique:
                self.holders.setdefault(v, []).append(c)
        self.cells = [math.prod(shape) for shape in tree.shapes]
        self.total = sum(self.cells)
        self._local: dict[tuple[frozenset[int], Ids], tuple[int, tuple[Ids, ...]]] = {}

    def inside(self, ids: Sequence[int]) -> bool:
        """Whether some clique of the tree already holds every attribute of ``ids``."""
        wanted = frozenset(ids)
        first = self.holders.get(min(wanted, key=lambda v: len(self.holders.get(v, ()))), [])
        return any(wanted <= self.sets[c] for c in first)

    def piece(self, ids: Sequence[int]) -> frozenset[int]:
        """The smallest connected set of cliques whose union holds ``ids`` (see the module)."""
        wanted = frozenset(ids)
        touching = {c for v in wanted for c in self.holders.get(v, ())}
        parent, depth, sets = self.tree.parent, self.depth, self.sets
        return frozenset(covering_piece(parent, depth, self.neighbours, sets, touching, wanted))

    def _grown_piece(self, ids: Sequence[int]) -> tuple[frozenset[int], int, tuple[Ids, ...]]:
        """The piece, the cells of its re-triangulation with ``ids``, and the new maximal
        cliques (global ids, ascending)."""
        wanted: Ids = tuple(sorted(set(ids)))
        piece = self.piece(wanted)
        key = (piece, wanted)
        found = self._local.get(key)
        if found is None:
            members = sorted(set(wanted).union(*(self.sets[c] for c in piece)))
            local = {v: i for i, v in enumerate(members)}
            cliques = [tuple(local[v] for v in wanted)]
            cliques += [tuple(local[v] for v in self.tree.cliques[c]) for c in sorted(piece)]
            maximal = triangulate([self.sizes[v] for v in members], cliques).maximal
            grown = tuple(tuple(sorted(members[i] for i in clique)) for clique in maximal)
            found = (sum(math.prod(self.sizes[v] for v in clique) for clique in grown), grown)
            self._local[key] = found
        return piece, found[0], found[1]

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
