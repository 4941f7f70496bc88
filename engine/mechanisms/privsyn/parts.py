"""The building blocks of PrivSyn (Zhang et al., USENIX Security 2021), as pure functions.

* InDif, the dependency score of a two-way table (reads data; released by the mechanism with
  noise): :func:`indif_floor`, exact in integers. (The float :func:`engine.models.gum.indif`
  scores released tables in GUM's tree start.)
* :func:`c23_weights`, :func:`greedy_select`, :func:`connect_isolated`, :func:`combine_marginals`
  — DenseMarg selection from noisy scores (post-processing).
* :func:`make_consistent` — weighted-average consistency, Norm-Sub and a common total
  (post-processing of noisy marginals).

GUM, the gradually-update method that draws the records (post-processing), is in
:mod:`engine.models.gum`, below the mechanism and the ``"gum"`` model kind that both run it.

Only InDif looks at the real data; everything else sees released quantities only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.estimation.simplex import project_to_simplex
from engine.models.gum import project_table

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Pair = tuple[int, int]
Clique = tuple[int, ...]

INDIF_SENSITIVITY = 4
"""|InDif(D) − InDif(D′)| ≤ 4 when D′ adds or removes one row (notes §0.3): the two-way table
moves by 1 in L1 and the independence table M_a M_bᵀ/n by (3n + 1)/(n + 1) < 3."""


# ------------------------------------------------------------------------------------------
# InDif and DenseMarg selection
# ------------------------------------------------------------------------------------------


_INT64_SAFE_ROWS = 1 << 30


def indif_floor(table: npt.ArrayLike, k: int) -> int:
    """⌊k·InDif⌋ of an integer count table, computed exactly in integers.

    n·InDif = Σ |n·M_ab[x, y] − M_a[x]·M_b[y]| is an integer, so ⌊k·InDif⌋ is an integer
    division; no floating-point rounding can move the released value across an integer, and
    the bound |⌊k·a⌋ − ⌊k·b⌋| ≤ 4k holds exactly."""
    counts = np.asarray(table)
    if counts.ndim != 2 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError("indif_floor needs a two-way integer table")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError("k must be a positive int")
    n = int(counts.sum())
    if n <= 0:
        return 0
    if n < _INT64_SAFE_ROWS:
        # Every |n·M_ab − M_a·M_b| ≤ n² and their sum ≤ 2n² < 2⁶³: exact in int64.
        wide = counts.astype(np.int64)
        scaled = wide * n - np.outer(wide.sum(axis=1), wide.sum(axis=0))
        total = int(np.abs(scaled).sum())
    else:
        rows = counts.sum(axis=1).astype(object)
        cols = counts.sum(axis=0).astype(object)
        big = counts.astype(object) * n - np.outer(rows, cols)
        total = sum(abs(int(v)) for v in big.ravel())
    return (k * total) // n


def c23_weights(cells: Sequence[int]) -> FloatArray:
    """The optimal budget shares for total expected L1 noise: ρ_i ∝ c_i^(2/3) (PrivSyn §5.2)."""
    weights = np.asarray(cells, dtype=np.float64) ** (2.0 / 3.0)
    if weights.size == 0 or np.any(weights <= 0):
        raise ValueError("cells must be positive")
    shares: FloatArray = weights / weights.sum()
    return shares


def noise_error(cells: Sequence[int], rho: float) -> float:
    """Expected total L1 noise Σ_i c_i·√(1/(π ρ_i)) of measuring tables of ``cells`` cells with
    ``rho`` split ∝ c^(2/3): the closed form (Σ c_i^(2/3))^(3/2) / √(π ρ)."""
    if rho <= 0:
        raise ValueError("rho must be positive")
    s = float(np.sum(np.asarray(cells, dtype=np.float64) ** (2.0 / 3.0)))
    return math.pow(s, 1.5) / math.sqrt(math.pi * rho)


def greedy_select(
    scores: npt.ArrayLike, cells: Sequence[int], rho: float, tolerance: float = 0.0
) -> list[int]:
    """DenseMarg's greedy (PrivSyn Algorithm 1): indices of the pairs to measure.

    Minimises E(X) = Ψ(X) + Σ_{i∉X} φ_i, with φ_i the noisy InDif of pair i (dependency error of
    leaving it out) and Ψ(X) = (Σ_{i∈X} c_i^(2/3))^(3/2)/√(πρ) the expected L1 noise of measuring
    X with ``rho`` split ∝ c^(2/3). Adds the pair that lowers E most while E drops by more than
    ``tolerance`` (counts); the selection order is returned."""
    phi = np.asarray(scores, dtype=np.float64)
    weight = np.asarray(cells, dtype=np.float64) ** (2.0 / 3.0)
    if phi.shape != weight.shape:
        raise ValueError("one score and one cell count per pair")
    if rho <= 0:
        raise ValueError("rho must be positive")
    scale = 1.0 / math.sqrt(math.pi * rho)
    available = np.ones(phi.size, dtype=np.bool_)
    selected: list[int] = []
    s = 0.0
    unselected = float(phi.sum())
    current = unselected
    while available.any():
        candidate = (s + weight) ** 1.5 * scale + (unselected - phi)
        candidate[~available] = np.inf
        j = int(np.argmin(candidate))
        if not candidate[j] < current - tolerance:
            break
        selected.append(j)
        available[j] = False
        s += float(weight[j])
        unselected -= float(phi[j])
        current = float(candidate[j])
    return selected


def connect_isolated(
    n_attributes: int, pairs: Sequence[Pair], scores: Sequence[float], selected: Sequence[int]
) -> list[int]:
    """Add, for every attribute no selected pair covers, its pair with the largest noisy score
    whose partner is already covered (any partner if none is); returns the new selection."""
    chosen = list(selected)
    covered = np.zeros(n_attributes, dtype=np.bool_)
    for i in chosen:
        covered[list(pairs[i])] = True
    for attr in range(n_attributes):
        if covered[attr]:
            continue
        options = [i for i, p in enumerate(pairs) if attr in p]
        if not options:
            continue
        linked = [
            i for i in options if covered[pairs[i][0] if pairs[i][1] == attr else pairs[i][1]]
        ]
        best = max(linked or options, key=lambda i: (scores[i], -i))
        chosen.append(best)
        covered[list(pairs[best])] = True
    return chosen


def combine_marginals(
    sizes: Sequence[int], pairs: Sequence[Pair], max_cells: int, max_size: int
) -> list[Clique]:
    """PrivSyn Algorithm 2: merge selected pairs into cliques of 3..``max_size`` attributes with
    fewer than ``max_cells`` cells, largest first, each overlapping the attributes already in
    combined cliques in at most 2; the pairs inside a chosen clique are dropped. Returns the
    cliques followed by the remaining pairs (all sorted tuples)."""
    edges = {tuple(sorted(p)) for p in pairs}
    neighbours: dict[int, set[int]] = {}
    for a, b in edges:
        neighbours.setdefault(a, set()).add(b)
        neighbours.setdefault(b, set()).add(a)

    def cells(clique: Clique) -> int:
        return math.prod(sizes[a] for a in clique)

    # Cliques grown from each edge by higher-numbered common neighbours; supersets of a clique
    # at or over the cell limit are over it too, so they are never grown.
    found: list[Clique] = []
    frontier: list[Clique] = [e for e in sorted(edges) if cells(e) < max_cells]
    for _ in range(3, max_size + 1):
        grown: list[Clique] = []
        for clique in frontier:
            common = set.intersection(*(neighbours[a] for a in clique))
            for c in sorted(x for x in common if x > clique[-1]):
                bigger = (*clique, c)
                if cells(bigger) < max_cells:
                    grown.append(bigger)
        found.extend(grown)
        frontier = grown
    found.sort(key=lambda c: (-len(c), c))
    covered: set[int] = set()
    out: list[Clique] = []
    remaining = set(edges)
    for clique in found:
        if len(covered & set(clique)) <= 2:
            out.append(clique)
            covered |= set(clique)
            remaining -= set(itertools.combinations(clique, 2))
    return out + sorted(remaining)


def coarse_shape(size_a: int, size_b: int, max_cells: int) -> tuple[int, int]:
    """Group counts (g_a, g_b) for a coarse version of a size_a × size_b pair with at most
    ``max_cells`` cells: the smaller attribute gets up to ⌊√max_cells⌋ groups, the larger the
    rest (each at least 1 and at most its size)."""
    if min(size_a, size_b, max_cells) < 1:
        raise ValueError("sizes and max_cells must be positive")
    root = max(1, math.isqrt(max_cells))
    if size_a <= size_b:
        g_a = min(size_a, root)
        return g_a, min(size_b, max(1, max_cells // g_a))
    g_b = min(size_b, root)
    return min(size_a, max(1, max_cells // g_b)), g_b


def frequency_groups(counts: npt.ArrayLike, groups: int) -> IntArray:
    """A public grouping of an attribute's codes into at most ``groups`` runs of consecutive
    codes with roughly equal mass under ``counts`` (a released, e.g. consistent noisy one-way
    marginal); returns each code's group (0, 1, …, non-decreasing, every group non-empty)."""
    weights = np.clip(np.asarray(counts, dtype=np.float64).ravel(), 0.0, None)
    size = weights.size
    if size == 0 or groups < 1:
        raise ValueError("need at least one code and one group")
    if groups >= size:
        return np.arange(size, dtype=np.int64)
    total = float(weights.sum())
    if total <= 0:
        weights = np.ones(size)
        total = float(size)
    # Group of a code: where the middle of its mass falls among `groups` equal shares.
    middle = (np.cumsum(weights) - 0.5 * weights) / total
    raw = np.minimum((middle * groups).astype(np.int64), groups - 1)
    # Renumber so the groups are consecutive and non-empty.
    _, labels = np.unique(raw, return_inverse=True)
    out: IntArray = labels.astype(np.int64)
    return out


def coarsen(table: npt.ArrayLike, group_a: IntArray, group_b: IntArray) -> FloatArray:
    """Sum a two-way table over the groups of its rows and columns."""
    t = np.asarray(table, dtype=np.float64)
    out = np.zeros((int(group_a.max()) + 1, int(group_b.max()) + 1))
    np.add.at(out, (group_a[:, None], group_b[None, :]), t)
    return out


def refine_coarse(
    coarse: npt.ArrayLike,
    group_a: IntArray,
    group_b: IntArray,
    one_way_a: npt.ArrayLike,
    one_way_b: npt.ArrayLike,
    rounds: int = 50,
) -> FloatArray:
    """A fine two-way table from a noisy coarse one and the two (consistent) one-way marginals
    (post-processing): the coarse table is projected to the simplex, raked (IPF) to the one-ways'
    group totals, then spread inside each pair of groups ∝ the one-way marginals. Its margins are
    the one-way marginals (up to the raking tolerance); its total is theirs."""
    p_a = np.clip(np.asarray(one_way_a, dtype=np.float64).ravel(), 0.0, None)
    p_b = np.clip(np.asarray(one_way_b, dtype=np.float64).ravel(), 0.0, None)
    total = float(p_a.sum())
    rows = np.bincount(group_a, weights=p_a)
    cols = np.bincount(group_b, weights=p_b)
    cols = cols * (total / cols.sum()) if cols.sum() > 0 else cols
    noisy = np.asarray(coarse, dtype=np.float64)
    joint = project_to_simplex(noisy, total).reshape(noisy.shape) if total > 0 else noisy * 0
    # A small floor keeps every cell the one-ways allow reachable by the raking.
    joint = joint + 1e-6 * np.outer(rows, cols) / max(total, 1e-300)
    for _ in range(rounds):
        r = joint.sum(axis=1)
        joint *= np.divide(rows, r, out=np.zeros_like(r), where=r > 0)[:, None]
        c = joint.sum(axis=0)
        joint *= np.divide(cols, c, out=np.zeros_like(c), where=c > 0)[None, :]
    within_a = np.divide(p_a, rows[group_a], out=np.zeros_like(p_a), where=rows[group_a] > 0)
    within_b = np.divide(p_b, cols[group_b], out=np.zeros_like(p_b), where=cols[group_b] > 0)
    fine: FloatArray = joint[group_a][:, group_b] * within_a[:, None] * within_b[None, :]
    return fine


# ------------------------------------------------------------------------------------------
# Consistency
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NoisyTable:
    """A noisy marginal over ``attributes`` (ascending attribute indices) with per-cell noise
    variance ``variance``; ``counts`` has one axis per attribute."""

    attributes: Clique
    counts: FloatArray
    variance: float

    def __post_init__(self) -> None:
        if tuple(sorted(set(self.attributes))) != tuple(self.attributes):
            raise ValueError("attributes must be distinct and ascending")
        counts = np.asarray(self.counts, dtype=np.float64)
        if counts.ndim != len(self.attributes) or not np.all(np.isfinite(counts)):
            raise ValueError("counts need one axis per attribute and finite values")
        if not (self.variance > 0 and math.isfinite(self.variance)):
            raise ValueError("variance must be positive")
        object.__setattr__(self, "counts", counts)


def _closure(sets: Sequence[frozenset[int]]) -> list[frozenset[int]]:
    closed: set[frozenset[int]] = set(sets) | {frozenset()}
    frontier = set(closed)
    while frontier:
        new = {a & b for a in frontier for b in closed} - closed
        closed |= new
        frontier = new
    return sorted(closed, key=lambda s: (len(s), sorted(s)))


def _consistency_step(
    tables: list[FloatArray],
    attrs: Sequence[Clique],
    variances: Sequence[float],
    plan: Sequence[tuple[Clique, list[int]]],
) -> None:
    for sub, members in plan:
        projections = [project_table(tables[i], attrs[i], sub) for i in members]
        groups = [tables[i].size // max(1, projections[k].size) for k, i in enumerate(members)]
        precision = np.array(
            [1.0 / (g * variances[i]) for g, i in zip(groups, members, strict=True)]
        )
        weights = precision / precision.sum()
        target = sum((w * p for w, p in zip(weights, projections, strict=True)), np.zeros(()))
        for k, i in enumerate(members):
            correction = (target - projections[k]) / groups[k]
            shape = [tables[i].shape[j] if a in sub else 1 for j, a in enumerate(attrs[i])]
            tables[i] = tables[i] + np.reshape(correction, shape)


def make_consistent(
    tables: Sequence[NoisyTable],
    rounds: int,
    tolerance: float = 1e-7,
    callback: Callable[[int], None] | None = None,
) -> tuple[list[FloatArray], float]:
    """Consistent, non-negative marginals with a common total, and that total (PrivSyn §6).

    Alternates (a) consistency: for every intersection A of the marginals' attribute sets (the
    empty set first, then by size), the marginals containing A are moved to the inverse-variance
    weighted average of their projections onto A, each cell by (T_A − T_i(A))/g_i with g_i cells
    per projected cell; and (b) Norm-Sub: each marginal is projected (L2) onto {x ≥ 0, Σx = N}
    with N the common total. Stops after the first consistency step that leaves no cell below
    −``tolerance``·N (then everything holds, within that tolerance), or after ``rounds``
    rounds; the result is always non-negative, with the common total."""
    if not tables:
        return [], 0.0
    attrs = [t.attributes for t in tables]
    variances = [t.variance for t in tables]
    current = [t.counts.copy() for t in tables]
    sets = [frozenset(a) for a in attrs]
    plan = []
    for subset in _closure(sets):
        members = [i for i, a in enumerate(sets) if subset <= a]
        if len(members) >= 2:
            plan.append((tuple(sorted(subset)), members))
    total = 0.0
    for round_ in range(max(1, rounds)):
        _consistency_step(current, attrs, variances, plan)
        total = max(0.0, float(current[0].sum()))
        lowest = min(float(t.min()) for t in current)
        done = lowest >= -tolerance * max(total, 1.0)
        # Norm-Sub; after a step with only negligible negatives it just removes them.
        current = [
            project_to_simplex(t, total).reshape(t.shape) if total > 0 else np.zeros_like(t)
            for t in current
        ]
        if done:
            break
        if callback is not None:
            callback(round_)
    return current, total
