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
  stopping rule fires. Boxes are axis-aligned ranges in the value order given. Its loop is
  compiled with numba (:func:`split_kernel`): PPSyn partitions every candidate in every round,
  and a few dozen numpy calls per split made this most of the mechanism's time.

Two stopping rules are offered, both returning the best partition seen on the chain:

* ``PaperRule(contribution, eta)``: the paper's: the budget needed to reach expected error
  η·Contr is ρ(P) = |P|² / (π(η·Contr − RE)²) (+∞ when RE ≥ η·Contr); stop at the first increase
  of ρ (Alg. 3 line 10, Alg. 4 line 17; Alg. 4 only starts checking once ρ is finite).
* ``NoiseRule(sigma)``: its dual for a fixed (public) noise scale σ, which the DP-safe mechanism
  uses: minimise the expected error bound of Thm 3, E(P) = RE + √(2/π)·|P|·σ; stop at the first
  increase of E.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Callable
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


SPLIT_NOISE = 0
SPLIT_PAPER = 1


def _split_kernel(
    q: FloatArray,
    shape: IntArray,
    rule_kind: int,
    rule_a: float,
    rule_b: float,
    max_groups: int,
    patience: int,
) -> tuple[IntArray, int, float]:
    """Algorithm 4 on the C-ordered flat ``q`` of ``shape``, compiled by numba (see
    :func:`split_partition`). The rule is ``rule_kind`` with its parameters: σ for
    :class:`NoiseRule`; contribution and η for :class:`PaperRule`. Returns (flat group labels,
    number of groups, cost) of the lowest-cost partition on the chain."""
    k = shape.shape[0]
    n = q.shape[0]
    strides = np.ones(k, dtype=np.int64)
    for axis in range(k - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    lo = np.zeros((max_groups, k), dtype=np.int64)
    hi = np.zeros((max_groups, k), dtype=np.int64)
    for axis in range(k):
        hi[0, axis] = shape[axis]
    errors = np.zeros(max_groups)
    splittable = np.zeros(max_groups, dtype=np.bool_)
    # The splits made, to rebuild the best partition: (slot, axis, absolute cut).
    split_slot = np.zeros(max_groups, dtype=np.int64)
    split_axis = np.zeros(max_groups, dtype=np.int64)
    split_at = np.zeros(max_groups, dtype=np.int64)
    cells = np.empty(n, dtype=np.int64)
    position = np.empty(n, dtype=np.int64)
    counter = np.zeros(k, dtype=np.int64)
    width_max = 1
    for axis in range(k):
        width_max = max(width_max, shape[axis])
    slab = np.zeros(width_max)
    slab_sq = np.zeros(width_max)

    total = 0.0
    for i in range(n):
        total += q[i]
    mean = total / n
    first = 0.0
    if n > 1:
        for i in range(n):
            first += abs(q[i] - mean)
    errors[0] = first
    splittable[0] = n > 1
    count = 1
    error = first
    # The rule's cost, as NoiseRule.cost and PaperRule.cost compute it (same operations).
    if rule_kind == SPLIT_NOISE:
        current = error + NOISE_L1 * 1 * rule_a
    else:
        slack = rule_b * rule_a - error
        current = math.inf if slack <= 0 else 1**2 / (math.pi * slack**2)
    best_cost = current
    best_count = 1
    rises = 0
    step = 0
    while count < max_groups:
        # Pop: the splittable box with the largest RE, the lowest slot on ties (the heap order
        # (−RE, slot) of the reference implementation).
        b = -1
        for slot in range(count):
            if splittable[slot] and (b < 0 or errors[slot] > errors[b]):
                b = slot
        if b < 0:
            break
        splittable[b] = False
        axis = -1
        for offset in range(k):
            candidate = (step + offset) % k
            if hi[b, candidate] - lo[b, candidate] >= 2:
                axis = candidate
                break
        if axis < 0:  # a single cell
            continue
        # The box's cells (flat index and position along the cut axis).
        size = 1
        for a in range(k):
            counter[a] = lo[b, a]
            size *= hi[b, a] - lo[b, a]
        for m in range(size):
            flat = 0
            for a in range(k):
                flat += counter[a] * strides[a]
            cells[m] = flat
            position[m] = counter[axis] - lo[b, axis]
            for a in range(k - 1, -1, -1):
                counter[a] += 1
                if counter[a] < hi[b, a]:
                    break
                counter[a] = lo[b, a]
        width = hi[b, axis] - lo[b, axis]
        per = size // width
        for j in range(width):
            slab[j] = 0.0
            slab_sq[j] = 0.0
        for m in range(size):
            value = q[cells[m]]
            slab[position[m]] += value
            slab_sq[position[m]] += value * value
        # The cut that most reduces the squared error (first minimum), from prefix sums.
        box_sum = 0.0
        box_sq = 0.0
        for j in range(width):
            box_sum += slab[j]
            box_sq += slab_sq[j]
        at = 0
        best_sse = np.inf
        left_s = 0.0
        left_q = 0.0
        for j in range(1, width):
            left_s += slab[j - 1]
            left_q += slab_sq[j - 1]
            left_n = j * per
            right_n = (width - j) * per
            right_s = box_sum - left_s
            right_q = box_sq - left_q
            sse = (left_q - left_s**2 / left_n) + (right_q - right_s**2 / right_n)
            if sse < best_sse:
                best_sse = sse
                at = j
        # RE of both halves around their means.
        left_total = 0.0
        right_total = 0.0
        for m in range(size):
            if position[m] < at:
                left_total += q[cells[m]]
            else:
                right_total += q[cells[m]]
        left_cells = at * per
        right_cells = size - left_cells
        left_mean = left_total / left_cells
        right_mean = right_total / right_cells
        left_err = 0.0
        right_err = 0.0
        for m in range(size):
            if position[m] < at:
                left_err += abs(q[cells[m]] - left_mean)
            else:
                right_err += abs(q[cells[m]] - right_mean)
        if left_cells <= 1:
            left_err = 0.0
        if right_cells <= 1:
            right_err = 0.0
        cut = lo[b, axis] + at
        split_slot[count - 1] = b
        split_axis[count - 1] = axis
        split_at[count - 1] = cut
        for a in range(k):
            lo[count, a] = lo[b, a]
            hi[count, a] = hi[b, a]
        hi[b, axis] = cut
        lo[count, axis] = cut
        error = max(0.0, error - errors[b] + left_err + right_err)
        errors[b] = left_err
        errors[count] = right_err
        splittable[b] = left_cells > 1
        splittable[count] = right_cells > 1
        count += 1
        step += 1
        if rule_kind == SPLIT_NOISE:
            trial = error + NOISE_L1 * count * rule_a
        else:
            slack = rule_b * rule_a - error
            trial = math.inf if slack <= 0 else count**2 / (math.pi * slack**2)
        if trial < best_cost:
            best_cost = trial
            best_count = count
        if math.isfinite(current) and trial > current:
            rises += 1
            if rises >= patience:
                break
        else:
            rises = 0
        current = trial
    # Replay the first best_count − 1 splits from the whole marginal, then label the cells.
    for a in range(k):
        lo[0, a] = 0
        hi[0, a] = shape[a]
    for s in range(best_count - 1):
        b = split_slot[s]
        axis = split_axis[s]
        for a in range(k):
            lo[s + 1, a] = lo[b, a]
            hi[s + 1, a] = hi[b, a]
        hi[b, axis] = split_at[s]
        lo[s + 1, axis] = split_at[s]
    groups = np.empty(n, dtype=np.int64)
    for label in range(best_count):
        size = 1
        for a in range(k):
            counter[a] = lo[label, a]
            size *= hi[label, a] - lo[label, a]
        for _ in range(size):
            flat = 0
            for a in range(k):
                flat += counter[a] * strides[a]
            groups[flat] = label
            for a in range(k - 1, -1, -1):
                counter[a] += 1
                if counter[a] < hi[label, a]:
                    break
                counter[a] = lo[label, a]
    return groups, best_count, best_cost


def split_partition(
    counts: npt.ArrayLike, rule: Rule, max_groups: int = 1024, patience: int = 1
) -> Partition:
    """Algorithm 4 (top-down splitting into axis-aligned boxes) on k-D ``counts``.

    Splits until the rule's cost has risen (after having been finite) on ``patience``
    consecutive splits (1 is the paper's break at the first increase), no box can be split or
    ``max_groups`` boxes exist; returns the lowest-cost partition seen (the notes'
    recommendation), whose cost is +∞ when the target was never reached.

    The splitting runs in :func:`_split_kernel`, compiled by numba when it is installed (a
    dependency of rhosynth; the same function runs as plain Python otherwise, about a thousand
    times slower). PPSyn partitions every candidate marginal of every round: with numpy calls per
    box, the few dozen small calls of each of the ~100 splits per marginal made this most of the
    mechanism's time (issue 15 §3).
    """
    q = _check_counts(counts)
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise ValueError("max_groups must be a positive int")
    if isinstance(patience, bool) or not isinstance(patience, int) or patience < 1:
        raise ValueError("patience must be a positive int")
    if isinstance(rule, NoiseRule):
        kind, a, b = SPLIT_NOISE, rule.sigma, 0.0
    else:
        kind, a, b = SPLIT_PAPER, rule.contribution, rule.eta
    shape = np.array(q.shape if q.ndim else (1,), dtype=np.int64)
    flat = np.ascontiguousarray(q, dtype=np.float64).ravel()
    labels, n_groups, cost = split_kernel()(flat, shape, kind, a, b, max_groups, patience)
    groups: IntArray = labels.astype(np.intp, copy=False).reshape(q.shape)
    return Partition(groups, int(n_groups), reconstruction_error(q, groups), float(cost))


@functools.cache
def split_kernel() -> Callable[
    [FloatArray, IntArray, int, float, float, int, int], tuple[IntArray, int, float]
]:
    """:func:`_split_kernel` compiled by numba (cached on disk, so a new process loads it
    instead of compiling), or the plain function when numba cannot be imported."""
    try:
        import numba
    except ImportError:  # pragma: no cover - numba is a dependency
        return _split_kernel
    try:
        jit = numba.njit(cache=True, nogil=True)
        compiled: Callable[
            [FloatArray, IntArray, int, float, float, int, int], tuple[IntArray, int, float]
        ] = jit(_split_kernel)
    except RuntimeError:  # no writable cache directory: compile in every process
        compiled = numba.njit(nogil=True)(_split_kernel)
    return compiled


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
