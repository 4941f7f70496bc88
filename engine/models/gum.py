"""GUM, the gradually-update method of PrivSyn (Zhang et al., USENIX Security 2021, §5), with
attribute appending and separate-and-join: records drawn to match consistent noisy marginals.

Post-processing only: GUM sees released quantities (the consistent noisy one-way and target
marginals) and draws its randomness from a seeded ``np.random.Generator``. The PrivSyn mechanism
(engine/mechanisms/privsyn/) runs it once for the job's rows, and the ``"gum"`` model kind
(:mod:`engine.models.kinds`) re-runs it to re-sample; it lives here, below both.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.estimation.synthesis import round_counts

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Pair = tuple[int, int]
Clique = tuple[int, ...]


def indif(table: npt.ArrayLike) -> float:
    """InDif of a two-way count table: Σ_{x,y} |M_ab[x, y] − M_a[x]·M_b[y]/n| (0 when n = 0).

    In count units, so it is comparable with the expected L1 noise of a measured marginal. GUM's
    tree start scores released tables with it (post-processing); PrivSyn's selection releases
    the exact integer ``indif_floor`` of the data instead (engine/mechanisms/privsyn/parts.py)."""
    counts = np.asarray(table, dtype=np.float64)
    if counts.ndim != 2:
        raise ValueError("InDif needs a two-way table")
    n = float(counts.sum())
    if n <= 0:
        return 0.0
    independent = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / n
    return float(np.abs(counts - independent).sum())


def project_table(table: FloatArray, attrs: Clique, subset: Clique) -> FloatArray:
    """``table`` over ``attrs`` summed down to the attributes of ``subset`` (kept in ``attrs``'
    order)."""
    axes = tuple(i for i, a in enumerate(attrs) if a not in subset)
    projected: FloatArray = table.sum(axis=axes) if axes else table
    return projected


@dataclass(frozen=True)
class GUMSettings:
    """GUM's knobs (PrivSyn §7): T iterations, α step decay α₀·decay^⌊t/step⌋, duplication share
    of the under-represented cells' new records on even/odd iterations, and the convergence
    aids (attribute appending, separate-and-join)."""

    iterations: int = 50
    alpha0: float = 1.0
    alpha_decay: float = 0.84
    alpha_step: int = 20
    duplication_even: float = 0.5
    duplication_odd: float = 1.0
    append: bool = True
    separate: bool = True
    tree_init: bool = True
    order: Literal["error", "cells"] = "error"

    def __post_init__(self) -> None:
        if self.iterations < 0 or self.alpha_step < 1:
            raise ValueError("iterations must be ≥ 0 and alpha_step ≥ 1")
        if not (0 < self.alpha0 <= 1 and 0 < self.alpha_decay <= 1):
            raise ValueError("alpha0 and alpha_decay must lie in (0, 1]")
        if not (0 <= self.duplication_even <= 1 and 0 <= self.duplication_odd <= 1):
            raise ValueError("duplication shares must lie in [0, 1]")
        if self.order not in ("error", "cells"):
            raise ValueError("order must be 'error' or 'cells'")

    def alpha(self, t: int) -> float:
        return self.alpha0 * self.alpha_decay ** (t // self.alpha_step)


@dataclass(frozen=True, eq=False)
class Target:
    """A target marginal for GUM: attribute (column) indices and a table of probabilities."""

    attributes: Clique
    probabilities: FloatArray

    def __post_init__(self) -> None:
        p = np.clip(np.asarray(self.probabilities, dtype=np.float64), 0.0, None)
        if p.ndim != len(self.attributes) or len(self.attributes) == 0:
            raise ValueError("one axis per attribute")
        total = float(p.sum())
        p = p / total if total > 0 else np.full(p.shape, 1.0 / p.size)
        object.__setattr__(self, "probabilities", p)


_RADIX_CELLS = 1 << 16


def _stochastic_round(values: FloatArray, rng: np.random.Generator) -> IntArray:
    floors = np.floor(values)
    rounded: IntArray = (floors + (rng.random(values.shape) < values - floors)).astype(np.int64)
    return rounded


def _rem_for_total(s: FloatArray, t: FloatArray, total: int) -> FloatArray:
    """rem_v = min(s_v − t_v, β·s_v) over the over-represented cells, β so that Σ rem = total."""
    excess = np.maximum(s - t, 0.0)
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        if np.minimum(excess, mid * s).sum() < total:
            lo = mid
        else:
            hi = mid
    rem: FloatArray = np.minimum(excess, hi * s)
    return rem


def _integer_parts(values: FloatArray, total: int, cap: IntArray) -> IntArray:
    """Integers ≤ ``cap`` near ``values`` summing to ``total`` (largest remainders)."""
    parts = np.minimum(np.floor(values).astype(np.int64), cap)
    short = total - int(parts.sum())
    if short > 0:
        room = cap - parts
        order = np.argsort(-(values - np.floor(values)) - (room > 0) * 2.0, kind="stable")
        order = order[room[order] > 0][:short]
        parts[order] += 1
    return parts


def gum_update(
    records: IntArray,
    target: Target,
    alpha: float,
    duplication: float,
    rng: np.random.Generator,
) -> float:
    """One GUM step on one marginal, in place; returns the L1 error (in frequencies) before it.

    Under-represented cells (0 < s < t) gain min(t − s, α·s) records, empty ones α·t; the
    over-represented cells give up min(s − t, β·s) with β set so the counts balance. A record
    freed from an over-represented cell either takes the new cell's values on the marginal's
    attributes (replacement) or becomes a copy of a random record already in that cell
    (duplication, a ``duplication`` share of the under-represented cells' additions)."""
    n = int(records.shape[0])
    if n == 0:
        return 0.0
    cols = list(target.attributes)
    shape = target.probabilities.shape
    n_cells = target.probabilities.size
    cell = records[:, cols[0]].astype(np.int64)
    for c, size in zip(cols[1:], shape[1:], strict=True):
        cell *= size
        cell += records[:, c]
    s_int = np.bincount(cell, minlength=n_cells)
    s = s_int.astype(np.float64)
    t = target.probabilities.ravel() * n
    error = float(np.abs(s - t).sum()) / n
    under = (s > 0) & (s < t)
    zero = (s == 0) & (t > 0)
    add = np.zeros(n_cells)
    add[under] = np.minimum(t - s, alpha * s)[under]
    add[zero] = alpha * t[zero]
    add_int = _stochastic_round(add, rng)
    excess_total = int(np.floor(np.maximum(s - t, 0.0).sum()))
    total = min(int(add_int.sum()), excess_total)
    if total <= 0:
        return error
    rem = _integer_parts(_rem_for_total(s, t, total), total, s_int)
    total = int(rem.sum())

    # Rows grouped by cell (a stable radix sort on 16-bit keys when they fit). Each
    # over-represented cell frees a cyclic run of rem rows starting at a random position of its
    # group; run_gum shuffles the rows every iteration, so the run is a random subset.
    keys = cell.astype(np.uint16) if n_cells <= _RADIX_CELLS else cell
    order = np.argsort(keys, kind="stable")
    starts = np.cumsum(s_int) - s_int
    sorted_cells = cell[order]
    position = np.arange(n) - starts[sorted_cells]
    group = np.maximum(s_int, 1)
    offset = np.floor(rng.random(n_cells) * group).astype(np.int64)
    shifted = (position - offset[sorted_cells]) % group[sorted_cells]
    freed = order[shifted < rem[sorted_cells]]
    freed = freed[rng.permutation(freed.size)]

    destination = np.repeat(np.arange(n_cells), add_int)
    dest_starts = np.cumsum(add_int) - add_int
    rank = np.arange(destination.size) - dest_starts[destination]
    dup_quota = np.where(under, np.round(duplication * add_int), 0).astype(np.int64)
    is_dup = rank < dup_quota[destination]
    if destination.size > freed.size:
        keep = np.sort(rng.choice(destination.size, size=freed.size, replace=False))
        destination, is_dup = destination[keep], is_dup[keep]
    freed = freed[: destination.size]

    dup_rows = freed[is_dup]
    if dup_rows.size:
        dup_cells = destination[is_dup]
        source = order[
            starts[dup_cells]
            + np.floor(rng.random(dup_cells.size) * s_int[dup_cells]).astype(np.int64)
        ]
        records[dup_rows] = records[source]
    rep_rows = freed[~is_dup]
    if rep_rows.size:
        values = np.unravel_index(destination[~is_dup], shape)
        for c, v in zip(cols, values, strict=True):
            records[rep_rows, c] = v
    return error


def initial_records(one_way: Sequence[npt.ArrayLike], n: int, rng: np.random.Generator) -> IntArray:
    """Independent columns with each attribute's counts fixed by controlled rounding of its
    (consistent) one-way distribution, rows shuffled per column ("singleton" initialisation)."""
    records = np.empty((n, len(one_way)), dtype=np.int64)
    for j, p in enumerate(one_way):
        prob = np.clip(np.asarray(p, dtype=np.float64).ravel(), 0.0, None)
        prob = prob / prob.sum() if prob.sum() > 0 else np.full(prob.size, 1.0 / prob.size)
        counts = round_counts((prob * n)[None, :], np.array([n], dtype=np.int64), rng)[0]
        records[:, j] = rng.permutation(np.repeat(np.arange(prob.size), counts))
    return records


def _peel(
    n_attributes: int, targets: list[Target]
) -> tuple[list[Target], list[tuple[int, int, FloatArray]]]:
    """Attribute appending: repeatedly remove attributes that appear in exactly one target, a
    pair. Returns the remaining targets and, in peeling order, (attribute, anchor, table with
    the anchor on axis 0)."""
    remaining = list(targets)
    peeled: list[tuple[int, int, FloatArray]] = []
    while True:
        degree = np.zeros(n_attributes, dtype=np.int64)
        for target in remaining:
            degree[list(target.attributes)] += 1
        removed: set[int] = set()
        layer: list[int] = []
        for k, target in enumerate(remaining):
            if len(target.attributes) != 2:
                continue
            a, b = target.attributes
            if degree[a] == 1 and b not in removed:
                leaf, anchor, table = a, b, target.probabilities.T
            elif degree[b] == 1 and a not in removed:
                leaf, anchor, table = b, a, target.probabilities
            else:
                continue
            peeled.append((leaf, anchor, table))
            removed.add(leaf)
            layer.append(k)
        if not layer:
            return remaining, peeled
        remaining = [t for k, t in enumerate(remaining) if k not in set(layer)]


def _append(
    records: IntArray, leaf: int, anchor: int, table: FloatArray, rng: np.random.Generator
) -> None:
    """Fill column ``leaf`` from P(leaf | anchor) with controlled rounding inside each anchor
    value, assigned to that value's rows in random order."""
    keys = records[:, anchor]
    sizes = np.bincount(keys, minlength=table.shape[0])
    present = np.flatnonzero(sizes)
    rows = table[present]
    sums = rows.sum(axis=1, keepdims=True)
    uniform = np.full_like(rows, 1.0 / rows.shape[1])
    conditional = np.divide(rows, sums, out=uniform, where=sums > 0)
    group = sizes[present].astype(np.int64)
    counts = round_counts(conditional * group[:, None], group, rng)
    values = np.repeat(np.tile(np.arange(table.shape[1]), present.size), counts.ravel())
    shuffle = rng.permutation(records.shape[0])
    order = shuffle[np.argsort(keys[shuffle], kind="stable")]
    records[order, leaf] = values


def _tree_init(records: IntArray, targets: Sequence[Target], rng: np.random.Generator) -> None:
    """Re-draw the columns along a maximum spanning forest of the pairs the targets cover
    (weights: each pair's InDif in the consistent target), root columns kept, every other
    column drawn from its conditional on its parent (a tree-model start for GUM)."""
    tables: dict[Pair, FloatArray] = {}
    for target in targets:
        for i, j in itertools.combinations(range(len(target.attributes)), 2):
            key = (target.attributes[i], target.attributes[j])
            if key not in tables:
                tables[key] = project_table(target.probabilities, target.attributes, key)
    edges = sorted(tables, key=lambda e: -indif(tables[e]))
    d = records.shape[1]
    parent = list(range(d))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    adjacency: dict[int, list[int]] = {}
    for a, b in edges:
        if find(a) != find(b):
            parent[find(a)] = find(b)
            adjacency.setdefault(a, []).append(b)
            adjacency.setdefault(b, []).append(a)
    seen: set[int] = set()
    for root in sorted(adjacency):
        if root in seen:
            continue
        seen.add(root)
        queue = [root]
        while queue:
            node = queue.pop(0)
            for child in adjacency[node]:
                if child in seen:
                    continue
                seen.add(child)
                key = (node, child) if node < child else (child, node)
                table = tables[key] if node < child else tables[key].T
                _append(records, child, node, table, rng)
                queue.append(child)


def _components(n_attributes: int, targets: Sequence[Target]) -> list[list[int]]:
    parent = list(range(n_attributes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for target in targets:
        first = target.attributes[0]
        for other in target.attributes[1:]:
            parent[find(other)] = find(first)
    groups: dict[int, list[int]] = {}
    for target in targets:
        groups.setdefault(find(target.attributes[0]), [])
    for attr in range(n_attributes):
        if find(attr) in groups:
            groups[find(attr)].append(attr)
    return list(groups.values())


def run_gum(
    records: IntArray,
    targets: Sequence[Target],
    settings: GUMSettings,
    rng: np.random.Generator,
    callback: Callable[[int], None] | None = None,
) -> list[float]:
    """GUM iterations on ``records`` in place; returns the mean L1 error (frequencies) per
    iteration, measured before each marginal's update. Marginals are visited in descending
    order of their error at their previous update (``order="error"``) or in descending order of
    their number of cells (``order="cells"``: the noisiest, largest tables first, so the small,
    precise ones have the last word in every iteration)."""
    errors = np.full(len(targets), np.inf)
    by_cells = np.argsort([-t.probabilities.size for t in targets], kind="stable").tolist()
    history: list[float] = []
    for t in range(settings.iterations):
        records[:] = records[rng.permutation(records.shape[0])]
        alpha = settings.alpha(t)
        duplication = settings.duplication_even if t % 2 == 0 else settings.duplication_odd
        if settings.order == "cells":
            order = by_cells
        else:
            order = np.argsort(-errors, kind="stable").tolist()
        for k in order:
            errors[k] = gum_update(records, targets[k], alpha, duplication, rng)
        history.append(float(errors.mean()) if len(targets) else 0.0)
        if callback is not None:
            callback(t)
    return history


def synthesize_records(
    one_way: Sequence[npt.ArrayLike],
    targets: Sequence[Target],
    n: int,
    settings: GUMSettings,
    rng: np.random.Generator,
    callback: Callable[[float], None] | None = None,
) -> IntArray:
    """``n`` records (codes, one column per one-way table) matching ``targets``: singleton
    initialisation, attribute appending (optional), GUM per connected component of the targets
    (separate-and-join, optional) or on all columns at once, then the appended attributes."""
    d = len(one_way)
    records = initial_records(one_way, n, rng)
    remaining = list(targets)
    peeled: list[tuple[int, int, FloatArray]] = []
    if settings.append:
        remaining, peeled = _peel(d, remaining)
    if settings.tree_init and n:
        _tree_init(records, remaining, rng)
    groups = _components(d, remaining) if settings.separate else [list(range(d))]
    groups = [g for g in groups if any(set(t.attributes) <= set(g) for t in remaining)]
    total_steps = max(1, settings.iterations * len(groups))
    done = 0
    for group in groups:
        local = {a: i for i, a in enumerate(group)}
        own = [
            Target(tuple(local[a] for a in t.attributes), t.probabilities)
            for t in remaining
            if set(t.attributes) <= set(group)
        ]
        sub = np.asfortranarray(records[:, group])

        def step(_t: int, offset: int = done) -> None:
            if callback is not None:
                callback((offset + _t + 1) / total_steps)

        run_gum(sub, own, settings, rng, step)
        records[:, group] = sub
        done += settings.iterations
    for leaf, anchor, table in reversed(peeled):
        _append(records, leaf, anchor, table, rng)
    if callback is not None:
        callback(1.0)
    return records
