"""Marginal partitions for PPSyn (Zhang, Deng, Yin, "Partition-based differentially private
synthetic data generation", Algorithms 3 and 4).

A partition of a marginal groups its cells into disjoint groups; a partitioned measurement
releases the group sums (one row is in exactly one cell, hence in exactly one group: L2
sensitivity 1). The reconstruction error of counts ``q`` under a partition is the L1 distance
between ``q`` and its uniform expansion, RE = Σ_I Σ_{i∈I} |q(I)/|I| − q(i)| (paper, Thm 3).

Everything here is a pure function of the counts it is given and of public parameters. The PPSyn
mechanism calls it with the current model's marginal (post-processing of released measurements),
never with true counts; the paper's literal use of true counts is not differentially private.

* :func:`merge_partition` is Algorithm 3 (1-D, bottom-up): sort the cells by count, then merge
  the two neighbouring intervals (in that sorted order) whose merge increases RE the least, until
  the stopping rule fires. Intervals are therefore groups of cells with similar counts.
* :func:`split_partition` is Algorithm 4 (k-D, top-down): start from one box; repeatedly split
  the box with the largest RE at the cut along dimension ``t mod k`` (the next dimension with
  width > 1 if that one has width 1) that most reduces the box's squared error (found with
  prefix sums; the paper says "maximum RE reduction" and leaves the rest open), until the
  stopping rule fires. Boxes are axis-aligned ranges in the value order given.

Two stopping rules are offered, both returning the best partition seen on the chain:

* ``PaperRule(contribution, eta)``: the paper's: the budget needed to reach expected error
  η·Contr is ρ(P) = |P|² / (π(η·Contr − RE)²) (+∞ when RE ≥ η·Contr); stop at the first increase
  of ρ (Alg. 3 line 10, Alg. 4 line 17; Alg. 4 only starts checking once ρ is finite).
* ``NoiseRule(sigma)``: its dual for a fixed (public) noise scale σ, which the DP-safe mechanism
  uses: minimise the expected error bound of Thm 3, E(P) = RE + √(2/π)·|P|·σ; stop at the first
  increase of E.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
NOISE_L1 = math.sqrt(2 / math.pi)
"""E|N(0, 1)|: the expected L1 noise per released value is √(2/π)·σ."""


@dataclass(frozen=True, eq=False)
class Partition:
    """``groups`` has the marginal's shape and maps every cell to its group 0 … ``n_groups``−1;
    ``reconstruction_error`` is RE of the counts the partition was computed from; ``cost`` is the
    stopping rule's value for it (ρ for :class:`PaperRule`, E for :class:`NoiseRule`)."""

    groups: IntArray
    n_groups: int
    reconstruction_error: float
    cost: float

    def __post_init__(self) -> None:
        groups = np.asarray(self.groups)
        if not np.issubdtype(groups.dtype, np.integer) or groups.size == 0:
            raise ValueError("groups must be a non-empty integer array")
        if isinstance(self.n_groups, bool) or not isinstance(self.n_groups, int):
            raise TypeError("n_groups must be an int")
        if self.n_groups < 1 or groups.min() != 0 or groups.max() != self.n_groups - 1:
            raise ValueError("groups must use every label 0 … n_groups − 1")
        if np.any(np.bincount(groups.ravel(), minlength=self.n_groups) == 0):
            raise ValueError("every group must contain a cell")
        if not (math.isfinite(self.reconstruction_error) and self.reconstruction_error >= 0):
            raise ValueError("reconstruction_error must be finite and non-negative")
        if math.isnan(self.cost) or self.cost < 0:
            raise ValueError("cost must be non-negative (+inf allowed)")
        groups = groups.astype(np.intp, copy=True)
        groups.flags.writeable = False
        object.__setattr__(self, "groups", groups)

    @property
    def is_identity(self) -> bool:
        """Whether every cell is a group of its own."""
        return self.n_groups == self.groups.size


@dataclass(frozen=True)
class PaperRule:
    """The paper's rule: ρ(P) = |P|²/(π(η·Contr − RE)²), +∞ when RE ≥ η·Contr."""

    contribution: float
    eta: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.contribution) and self.contribution >= 0):
            raise ValueError("contribution must be finite and non-negative")
        if not (0 < self.eta < 1):
            raise ValueError("eta must be in (0, 1)")

    def cost(self, n_groups: int, error: float) -> float:
        slack = self.eta * self.contribution - error
        if slack <= 0:
            return math.inf
        return n_groups**2 / (math.pi * slack**2)


@dataclass(frozen=True)
class NoiseRule:
    """Expected error bound at noise scale σ (Thm 3): E(P) = RE + √(2/π)·|P|·σ."""

    sigma: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError("sigma must be finite and positive")

    def cost(self, n_groups: int, error: float) -> float:
        return error + NOISE_L1 * n_groups * self.sigma


Rule = PaperRule | NoiseRule


def reconstruction_error(counts: npt.ArrayLike, groups: npt.ArrayLike) -> float:
    """RE = Σ_I Σ_{i∈I} |q(I)/|I| − q(i)|: the L1 error of the uniform expansion of the group
    sums of ``counts`` (both arrays of the same shape)."""
    q = np.asarray(counts, dtype=np.float64).ravel()
    g = np.asarray(groups).ravel()
    if q.shape != g.shape:
        raise ValueError("counts and groups must have the same shape")
    sums = np.bincount(g, weights=q)
    sizes = np.bincount(g)
    means = np.divide(sums, sizes, out=np.zeros_like(sums), where=sizes > 0)
    return float(np.abs(q - means[g]).sum())


def _check_counts(counts: npt.ArrayLike) -> FloatArray:
    q = np.asarray(counts, dtype=np.float64)
    if q.size == 0 or not np.all(np.isfinite(q)):
        raise ValueError("counts must be a non-empty finite array")
    return q


def merge_partition(counts: npt.ArrayLike, rule: Rule) -> Partition:
    """Algorithm 3 (bottom-up merging of count-sorted cells) on flattened ``counts``.

    MergeError(I_u, I_{u+1}) = RE(I_u ∪ I_{u+1}) − RE(I_u) − RE(I_{u+1}) (the paper leaves it
    undefined); ties go to the leftmost pair. Stops at the first increase of the rule's cost, or
    at one group. In sorted order every interval is a contiguous range, so its RE is computed from
    prefix sums in O(log n) and the greedy merging runs on a heap in O(n log n).
    """
    q = _check_counts(counts)
    flat = q.ravel()
    n = flat.size
    order = np.argsort(flat, kind="stable")
    values = flat[order]
    prefix = np.concatenate([[0.0], np.cumsum(values)])

    def range_error(start: int, end: int) -> float:
        size = end - start
        if size <= 1:
            return 0.0
        mean = (prefix[end] - prefix[start]) / size
        k = int(np.searchsorted(values[start:end], mean, side="left")) + start
        below = mean * (k - start) - (prefix[k] - prefix[start])
        above = (prefix[end] - prefix[k]) - mean * (end - k)
        return max(0.0, float(below + above))

    # Intervals as a doubly linked list over their start positions.
    end_of = list(range(1, n + 1))
    prev_of = list(range(-1, n - 1))
    error_of = [0.0] * n
    alive = [True] * n
    version = [0] * n
    heap: list[tuple[float, int, int, int]] = []

    def push(left: int) -> None:
        right = end_of[left]
        if right >= n:
            return
        merged = range_error(left, end_of[right])
        cost = merged - error_of[left] - error_of[right]
        heapq.heappush(heap, (cost, left, version[left], version[right]))

    for start in range(n - 1):
        push(start)
    groups_count = n
    error = 0.0
    current = rule.cost(groups_count, error)
    merges: list[tuple[int, int]] = []  # (left, right) starts, in order
    best_cost, best_merges = current, 0
    while groups_count > 1 and heap and math.isfinite(current):
        _, left, v_left, v_right = heapq.heappop(heap)
        if not alive[left] or version[left] != v_left or end_of[left] >= n:
            continue
        right = end_of[left]
        if version[right] != v_right:
            continue
        new_error = range_error(left, end_of[right])
        trial_error = error - error_of[left] - error_of[right] + new_error
        trial = rule.cost(groups_count - 1, trial_error)
        if trial > current:
            break
        # Merge right into left.
        error = trial_error
        error_of[left] = new_error
        alive[right] = False
        end_of[left] = end_of[right]
        if end_of[left] < n:
            prev_of[end_of[left]] = left
        version[left] += 1
        groups_count -= 1
        merges.append((left, right))
        current = trial
        if current < best_cost:
            best_cost, best_merges = current, len(merges)
        push(left)
        if prev_of[left] >= 0:
            push(prev_of[left])
    # Replay the first best_merges merges to label the cells.
    final_end = list(range(1, n + 1))
    for left, right in merges[:best_merges]:
        final_end[left] = final_end[right]
        final_end[right] = -1
    labels_sorted = np.empty(n, dtype=np.intp)
    label = 0
    position = 0
    while position < n:
        stop = final_end[position]
        labels_sorted[position:stop] = label
        label += 1
        position = stop
    flat_groups = np.empty(n, dtype=np.intp)
    flat_groups[order] = labels_sorted
    groups: IntArray = flat_groups.reshape(q.shape)
    return Partition(groups, label, reconstruction_error(q, groups), best_cost)


def _box_error(values: FloatArray) -> float:
    return float(np.abs(values - values.mean()).sum()) if values.size > 1 else 0.0


def _best_cut(values: FloatArray, axis: int) -> tuple[int, float] | None:
    """The cut position along ``axis`` that most reduces the squared error of ``values``
    (None when the width along ``axis`` is 1)."""
    width = values.shape[axis]
    if width < 2:
        return None
    rows = np.moveaxis(values, axis, 0).reshape(width, -1)
    per = rows.shape[1]
    sums = np.cumsum(rows.sum(axis=1))
    squares = np.cumsum((rows * rows).sum(axis=1))
    total, total_sq = sums[-1], squares[-1]
    left_n = np.arange(1, width) * per
    right_n = (width - np.arange(1, width)) * per
    left_s, left_q = sums[:-1], squares[:-1]
    right_s, right_q = total - left_s, total_sq - left_q
    sse = (left_q - left_s**2 / left_n) + (right_q - right_s**2 / right_n)
    cut = int(np.argmin(sse))
    return cut + 1, float(sse[cut])


Box = tuple[tuple[int, int], ...]


def split_partition(
    counts: npt.ArrayLike, rule: Rule, max_groups: int = 1024, patience: int = 1
) -> Partition:
    """Algorithm 4 (top-down splitting into axis-aligned boxes) on k-D ``counts``.

    Splits until the rule's cost has risen (after having been finite) on ``patience``
    consecutive splits (1 is the paper's break at the first increase), no box can be split or
    ``max_groups`` boxes exist; returns the lowest-cost partition seen (the notes'
    recommendation), whose cost is +∞ when the target was never reached.
    """
    q = _check_counts(counts)
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise ValueError("max_groups must be a positive int")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise ValueError("patience must be a positive int")
    rises = 0
    shape = q.shape
    k = q.ndim
    boxes: list[Box] = [tuple((0, s) for s in shape)]
    errors = [_box_error(q)]
    # Max-heap of splittable boxes by RE (ties: the older box first).
    heap: list[tuple[float, int]] = [(-errors[0], 0)] if q.size > 1 else []
    error = errors[0]
    current = rule.cost(1, error)
    best_cost, best_count = current, 1
    # Box b's ranges after split s are recorded so that the best partition can be rebuilt.
    history: list[tuple[int, Box, Box]] = []
    step = 0
    while len(boxes) < max_groups and heap:
        _, b = heapq.heappop(heap)
        box = boxes[b]
        values = q[tuple(slice(lo, hi) for lo, hi in box)]
        found = None
        for offset in range(k):
            axis = (step + offset) % k
            cut = _best_cut(values, axis)
            if cut is not None:
                found = (axis, cut[0])
                break
        if found is None:  # a single cell
            continue
        axis, at = found
        lo, hi = box[axis]
        left = tuple((lo, lo + at) if a == axis else r for a, r in enumerate(box))
        right = tuple((lo + at, hi) if a == axis else r for a, r in enumerate(box))
        index = [slice(None)] * k
        index[axis] = slice(0, at)
        left_err = _box_error(values[tuple(index)])
        index[axis] = slice(at, hi - lo)
        right_err = _box_error(values[tuple(index)])
        history.append((b, box, left))
        boxes[b] = left
        boxes.append(right)
        error = max(0.0, error - errors[b] + left_err + right_err)
        errors[b] = left_err
        errors.append(right_err)
        if math.prod(h - l2 for l2, h in left) > 1:
            heapq.heappush(heap, (-left_err, b))
        if math.prod(h - l2 for l2, h in right) > 1:
            heapq.heappush(heap, (-right_err, len(boxes) - 1))
        step += 1
        trial = rule.cost(len(boxes), error)
        if trial < best_cost:
            best_cost, best_count = trial, len(boxes)
        if math.isfinite(current) and trial > current:
            rises += 1
            if rises >= patience:
                break
        else:
            rises = 0
        current = trial
    # Undo the splits after the best partition (newest first).
    for b, box, _ in reversed(history[best_count - 1 :]):
        boxes[b] = box
    best_boxes = boxes[:best_count]
    groups = np.empty(shape, dtype=np.intp)
    for label, box in enumerate(best_boxes):
        groups[tuple(slice(lo, hi) for lo, hi in box)] = label
    return Partition(groups, len(best_boxes), reconstruction_error(q, groups), best_cost)


def identity_partition(counts: npt.ArrayLike, rule: Rule) -> Partition:
    """Every cell its own group (RE = 0)."""
    q = _check_counts(counts)
    groups = np.arange(q.size, dtype=np.intp).reshape(q.shape)
    return Partition(groups, q.size, 0.0, rule.cost(q.size, 0.0))


def partition_counts(
    counts: npt.ArrayLike, rule: Rule, max_groups: int = 1024, patience: int = 1
) -> Partition:
    """The paper's choice, Algorithm 3 for a one-way marginal and Algorithm 4 otherwise, or
    the identity partition when its cost is lower (ties go to the identity)."""
    q = _check_counts(counts)
    if q.ndim <= 1:
        found = merge_partition(q, rule)
    else:
        found = split_partition(q, rule, max_groups, patience)
    identity = identity_partition(q, rule)
    return identity if identity.cost <= found.cost else found


__all__ = [
    "NOISE_L1",
    "NoiseRule",
    "PaperRule",
    "Partition",
    "identity_partition",
    "merge_partition",
    "partition_counts",
    "reconstruction_error",
    "split_partition",
]
