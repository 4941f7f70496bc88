"""Building blocks of PrivMRF (Cai, Lei, Wei, Xiao, "Data Synthesis via Differentially Private
Markov Random Fields", PVLDB 14(11), 2021): integer R-scores, the clique-capped attribute graph
(Alg. 1), θ-useful candidate marginals (Alg. 2), CFS initial marginals (Alg. 3) and the integer
selection score of Alg. 4.

Only :func:`r_score_floor` and :func:`selection_score` read data; neither releases anything
(the mechanism adds discrete Gaussian noise and charges it). Everything else here is a function
of the public domain and of released (noisy) values, i.e. post-processing.

Integerisation lemma (used for both scores). Let f be real-valued with |f(D) − f(D′)| ≤ S for
neighbours D, D′, and let g ≥ 1 be a public integer with g·S an integer. Then
|⌊g·f(D)⌋ − ⌊g·f(D′)⌋| ≤ g·S. Proof: g·f(D) ≤ g·f(D′) + g·S, so
⌊g·f(D)⌋ ≤ ⌊g·f(D′) + g·S⌋ = ⌊g·f(D′)⌋ + g·S because g·S is an integer; swap D and D′ for the
other direction. Both scores below are computed exactly in integers, so no floating-point
rounding can move a value across an integer and break the bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.domain import Domain
from engine.estimation.growth import TreeGrowth
from engine.estimation.junction_tree import Labels, build_junction_tree, triangulate

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Clique = tuple[str, ...]

R_SCORE_SENSITIVITY = 2
"""|R(D) − R(D′)| ≤ 2 under add/remove-one-row (PrivMRF Lemma 4, from PrivBayes). R is half of
PrivSyn's InDif, whose bound 4 = 1 (the joint moves by 1 in L1) + 3 (the product table
M_a·M_bᵀ/n moves by (3n + 1)/(n + 1) < 3 in L1) is proved in engine/mechanisms/privsyn/parts.py;
property-tested."""

SELECTION_SENSITIVITY = 1
"""|h(D) − h(D′)| ≤ 1 for h = ‖μ − T_{D,M}‖₁ with μ fixed (Lemma 5): one row moves one cell of
T_{D,M} by 1. With μ put on the 1/g grid first, g·h is an integer moving by at most g."""

_INT64_SAFE_ROWS = 1 << 30


def r_score(table: npt.ArrayLike) -> float:
    """PrivBayes' R-score of a two-way count table: ½·Σ|c_ab − c_a·c_b/n| (0 when n = 0).

    Equals n times the total-variation distance between the joint and the product of its
    marginals. Floating point; for reference and tests (the mechanism uses r_score_floor)."""
    counts = np.asarray(table, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError("the R-score needs a two-way table")
    n = float(counts.sum())
    if n <= 0:
        return 0.0
    independent = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / n
    return 0.5 * float(np.abs(counts - independent).sum())


def r_score_floor(table: npt.ArrayLike, grid: int) -> int:
    """⌊g·R⌋ of an integer two-way count table, exactly (g = ``grid``).

    2n·R = Σ|n·c_ab − c_a·c_b| is an integer, so ⌊g·R⌋ = (g·Σ|n·c_ab − c_a·c_b|) // (2n) is an
    integer division. By Lemma 4 and the integerisation lemma (module docstring) it changes by
    at most 2g when one row is added or removed."""
    counts = np.asarray(table)
    if counts.ndim != 2 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError("r_score_floor needs a two-way integer table")
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError("grid must be a positive int")
    n = int(counts.sum())
    if n <= 0:
        return 0
    if n < _INT64_SAFE_ROWS:
        # Every |n·c_ab − c_a·c_b| ≤ n² and their sum ≤ 2n² < 2⁶³: exact in int64.
        wide = counts.astype(np.int64)
        total = int(np.abs(wide * n - np.outer(wide.sum(axis=1), wide.sum(axis=0))).sum())
    else:
        rows = counts.sum(axis=1).astype(object)
        cols = counts.sum(axis=0).astype(object)
        big = counts.astype(object) * n - np.outer(rows, cols)
        total = sum(abs(int(v)) for v in big.ravel())
    return (grid * total) // (2 * n)


def selection_score(model_marginal: FloatArray, true_counts: IntArray, grid: int) -> int:
    """g·‖⌊g·μ⌉/g − T‖₁ = ‖⌊g·μ⌉ − g·T‖₁, exactly in integers (g = ``grid``).

    μ (the current model's marginal) is a function of earlier releases only, so it is fixed
    when this score is computed (adaptive composition). ⌊g·μ⌉ rounds it onto the public 1/g
    grid; then one added or removed row moves one cell of g·T by g, so the score moves by at
    most g (Lemma 5 on the grid, and the integerisation lemma: the score is ⌊g·h′⌋ with
    h′ = ‖⌊g·μ⌉/g − T‖₁ ∈ (1/g)ℤ). |h′ − h| ≤ cells/(2g) is the price of the grid."""
    if isinstance(grid, bool) or not isinstance(grid, int) or grid < 1:
        raise ValueError("grid must be a positive int")
    mu = np.asarray(model_marginal, dtype=np.float64)
    truth = np.asarray(true_counts)
    if mu.shape != truth.shape or not np.issubdtype(truth.dtype, np.integer):
        raise ValueError("the model marginal and the integer counts must have the same shape")
    on_grid = np.rint(mu * grid).astype(np.int64)
    return int(np.abs(on_grid - truth.astype(np.int64) * grid).sum())


# ------------------------------------------------------------------------------------------
# Algorithm 1: attribute graph under a clique-size cap (post-processing of noisy R-scores)
# ------------------------------------------------------------------------------------------


def chordal_cliques(
    sizes: Sequence[int], edges: Sequence[tuple[int, int]]
) -> list[tuple[int, ...]]:
    """Maximal cliques (attribute positions, ascending) of the engine's weighted-min-fill
    triangulation of the graph on ``len(sizes)`` nodes with ``edges``."""
    cliques: list[tuple[int, ...]] = [(v,) for v in range(len(sizes))]
    cliques.extend(edges)
    return [tuple(sorted(c)) for c in triangulate(sizes, cliques).maximal]


def attribute_graph(
    sizes: Sequence[int],
    pairs: Sequence[tuple[int, int]],
    scores: Sequence[float],
    max_clique_cells: int,
    max_total_cells: int,
    growth: Literal["exact", "local"] = "exact",
) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
    """Alg. 1: add edges in decreasing noisy score while every maximal clique of the
    triangulated graph has at most ``max_clique_cells`` cells (Eq. 7) and, a CPU-oriented
    addition, the cliques together at most ``max_total_cells`` cells.

    One pass in score order (ties by pair index): a pair that does not fit when its turn comes
    is dropped for good. The paper rescans from the top after each insertion, which can only
    retry pairs that failed earlier; adding edges almost never makes them fit again, and the
    single pass is O(d²) triangulations instead of O(d⁴). Returns (edges, maximal cliques).

    ``growth="exact"`` triangulates the whole graph for every pair tried. ``"local"`` keeps the
    triangulated (chordal) graph and grows it by each pair tried (:func:`_local_graph`): a
    different triangulation of the same edges (the paper names none), with the same two caps;
    on 196 columns the whole-graph trials (19,110 pairs) were 99 % of a run."""
    order = sorted(range(len(pairs)), key=lambda i: (-scores[i], i))
    if growth == "local":
        return _local_graph(sizes, [pairs[i] for i in order], max_clique_cells, max_total_cells)
    edges: list[tuple[int, int]] = []
    cliques = chordal_cliques(sizes, edges)
    for i in order:
        trial = chordal_cliques(sizes, [*edges, pairs[i]])
        cells = [math.prod(sizes[v] for v in c) for c in trial]
        if max(cells) <= max_clique_cells and sum(cells) <= max_total_cells:
            edges.append(pairs[i])
            cliques = trial
    return edges, cliques


def _local_graph(
    sizes: Sequence[int],
    ordered: Sequence[tuple[int, int]],
    max_clique_cells: int,
    max_total_cells: int,
) -> tuple[list[tuple[int, int]], list[tuple[int, ...]]]:
    """Alg. 1 on a chordal graph grown one pair at a time (``ordered``: the pairs in score
    order). A pair joining two connected components is a bridge: the graph stays chordal and
    gains the clique of the pair alone. A pair inside a component grows the junction tree
    locally (engine.estimation.growth: only the piece of the tree between the pair's ends is
    re-triangulated). Either way the new graph is chordal and holds every edge accepted so far,
    so its maximal cliques are a triangulation's; the pair is kept when they respect both caps.
    Public structure only."""
    domain = Domain(tuple(str(v) for v in range(len(sizes))), tuple(sizes))
    labels = Labels(domain)
    position = [int(name) for name in labels.names(range(len(sizes)))]  # id → position
    ids = {p: i for i, p in enumerate(position)}
    cliques: list[tuple[int, ...]] = [(i,) for i in range(len(sizes))]  # label ids
    component = list(range(len(sizes)))  # component root of every id

    def cells_of(clique: tuple[int, ...]) -> int:
        return math.prod(labels.sizes[v] for v in clique)

    growth: TreeGrowth | None = None
    edges: list[tuple[int, int]] = []
    total = sum(labels.sizes)
    for pair in ordered:
        a, b = sorted((ids[pair[0]], ids[pair[1]]))
        if component[a] != component[b]:
            alone = [c for c in ((a,), (b,)) if c in cliques]
            if total - sum(cells_of(c) for c in alone) + cells_of((a, b)) > max_total_cells:
                continue
            grown = [c for c in cliques if c not in alone] + [(a, b)]
        else:
            if growth is None:
                growth = TreeGrowth(build_junction_tree(labels, cliques))
            if growth.inside((a, b)):
                edges.append(pair)  # already an edge of the chordal graph: nothing changes
                continue
            if growth.size_with((a, b)) > max_total_cells:  # the cheap test first
                continue
            grown = list(growth.cliques_with((a, b)))
        cells = [cells_of(c) for c in grown]
        if max(cells) > max_clique_cells or sum(cells) > max_total_cells:
            continue
        edges.append(pair)
        cliques, growth, total = grown, None, sum(cells)
        old, new = max(component[a], component[b]), min(component[a], component[b])
        component = [new if c == old else c for c in component]
    found = [tuple(sorted(position[v] for v in clique)) for clique in cliques]
    return edges, sorted(found)


# ------------------------------------------------------------------------------------------
# Algorithm 2: θ-useful candidates; Algorithm 3: CFS initial marginals (post-processing)
# ------------------------------------------------------------------------------------------


def useful_cells(noisy_total: float, theta: float, sigma: float) -> float:
    """Largest number of cells a θ-useful marginal may have: ñ / (θ·√(2/π)·σ_m)."""
    return max(noisy_total, 0.0) / (theta * math.sqrt(2.0 / math.pi) * sigma)


def candidate_marginals(
    domain: Domain,
    cliques: Sequence[tuple[int, ...]],
    max_cells: float,
    max_attributes: int,
) -> list[Clique]:
    """Alg. 2: every subset of a maximal clique with 2 to ``max_attributes`` attributes and at
    most ``max_cells`` cells (θ-useful), in domain order, sorted and without repeats.

    One-way marginals are left to Alg. 3's fallback. Subsets are enumerated by increasing size
    and a set is only extended when it fits, since supersets only have more cells."""
    sizes = domain.sizes
    found: set[tuple[int, ...]] = set()
    for clique in cliques:
        level: set[tuple[int, ...]] = {(v,) for v in clique if sizes[v] <= max_cells}
        for _ in range(1, max_attributes):
            nxt: set[tuple[int, ...]] = set()
            for subset in level:
                cells = math.prod(sizes[v] for v in subset)
                for v in clique:
                    if v > subset[-1] and cells * sizes[v] <= max_cells:
                        nxt.add((*subset, v))
            found |= nxt
            level = nxt
            if not level:
                break
    ordered = sorted(found, key=lambda s: (len(s), s))
    return [tuple(domain.attributes[v] for v in s) for s in ordered]


def cfs_score(attr: str, marginal: Clique, dependence: Callable[[str, str], float]) -> float:
    """Eq. 8: Σ_{B∈M∖A} r(A,B) / √(|M| + Σ_{B∈M∖A} Σ_{B′∈M∖{A,B}} r(B,B′)).

    The double sum runs over ordered pairs (each unordered pair twice), as printed. ``r`` is the
    noisy R-score divided by ñ (a noisy TVD in about [0, 1], notes G4); the radicand is clamped
    at ≥ 1 because noise can make it small or negative."""
    others = [b for b in marginal if b != attr]
    numerator = sum(dependence(attr, b) for b in others)
    redundancy = sum(dependence(b, c) for b in others for c in others if b != c)
    return numerator / math.sqrt(max(1.0, len(marginal) + redundancy))


def initial_marginals(
    domain: Domain,
    candidates: Sequence[Clique],
    dependence: Callable[[str, str], float],
    fits: Callable[[Sequence[Clique], Clique], bool],
) -> list[Clique]:
    """Alg. 3: for each attribute A (domain order), the remaining candidate containing A with
    the highest CFS score (ties: fewer cells, then candidate order), removed from the pool;
    the one-way {A} when no candidate containing A is left or fits (notes G5). ``fits(chosen,
    candidate)`` is a public model-size test. Exactly one marginal per attribute."""
    pool = list(candidates)
    chosen: list[Clique] = []
    for attr in domain.attributes:
        # Best key first, and the (costly) size test only until one fits: the same choice as
        # testing every candidate.
        ranked = sorted(
            ((-cfs_score(attr, cand, dependence), domain.cells(cand), i), cand)
            for i, cand in enumerate(pool)
            if attr in cand
        )
        best = next((cand for _, cand in ranked if fits(chosen, cand)), None)
        if best is None:
            chosen.append((attr,))
        else:
            pool.remove(best)
            chosen.append(best)
    return chosen


def independence_level(domain: Domain, a: str, b: str, n: float) -> float:
    """√(|A|·|B|/n): about 2.5 times the expected R/n of two independent attributes from
    sampling alone. Heuristic, from the population version: E|c_ab − n·p_a·p_b| ≤ √(n·p_a·p_b)
    per cell and Σ_ab √(p_a·p_b) ≤ √(|A|·|B|) (Cauchy–Schwarz) give E[R/n] ≲ ½·√(2/π)·√(|A|·|B|/n)
    ≈ 0.4·√(|A|·|B|/n); R uses the empirical margins, which changes this only slightly. Public
    sizes and a noisy n: only a threshold for post-processing, no privacy claim rests on it."""
    return math.sqrt(domain.size(a) * domain.size(b) / max(n, 1.0))


def drop_independent(
    domain: Domain,
    marginals: Sequence[Clique],
    dependence: Callable[[str, str], float],
    n: float,
    factor: float,
) -> list[Clique]:
    """``marginals`` without those in which no pair (A, B) has a noisy r(A, B) of at least
    ``factor``·√(|A|·|B|/n) (:func:`independence_level`), and without one-way marginals (the
    one-way marginals are measured before, with compression). Post-processing of the noisy
    R-scores; ``factor = 0`` keeps every marginal of two or more attributes."""
    kept: list[Clique] = []
    for marginal in marginals:
        pairs = itertools.combinations(marginal, 2)
        if any(dependence(a, b) >= factor * independence_level(domain, a, b, n) for a, b in pairs):
            kept.append(marginal)
    return kept


def subsumed(marginal: Clique, others: Sequence[Clique]) -> bool:
    """Whether ``marginal`` is a subset of (or equal to) one of ``others``."""
    attrs = set(marginal)
    return any(attrs <= set(other) for other in others)


def prune_subsumed(marginals: Sequence[Clique]) -> list[Clique]:
    """``marginals`` without those contained in another one (of two equal sets the first
    stays), in their order."""
    kept: list[Clique] = []
    for i, marginal in enumerate(marginals):
        attrs = set(marginal)
        if not any(
            attrs < set(other) or (attrs == set(other) and j < i)
            for j, other in enumerate(marginals)
            if j != i
        ):
            kept.append(marginal)
    return kept


def all_pairs(d: int) -> list[tuple[int, int]]:
    """Every unordered pair of positions 0 … d−1, lexicographic."""
    return list(itertools.combinations(range(d), 2))
