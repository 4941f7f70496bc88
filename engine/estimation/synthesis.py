"""Vectorised row synthesis from a junction-tree model (post-processing: no privacy cost).

Attributes are drawn one at a time in reverse elimination order; each attribute ``v`` is drawn
from its conditional given its already-drawn neighbours in the triangulated graph, which is the
exact conditional of the model given everything drawn so far. Rows are grouped by those
neighbours' values with a mixed-radix key (``np.bincount`` / a stable sort), never a Python loop
over rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from engine.domain import narrowest_unsigned

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.integer[Any]]
"""Codes in the smallest unsigned dtype that holds them (:func:`narrowest_unsigned`)."""


def _normalised_rows(table: FloatArray) -> FloatArray:
    """Rows scaled to sum to 1; an all-zero (or negative-sum) row becomes uniform."""
    table = np.maximum(table, 0.0)
    sums = table.sum(axis=1, keepdims=True)
    uniform = np.full_like(table, 1.0 / table.shape[1])
    normalised: FloatArray = np.divide(table, sums, out=uniform, where=sums > 0)
    return normalised


def round_counts(expected: FloatArray, group_sizes: IntArray, rng: np.random.Generator) -> IntArray:
    """Integer counts per (group, value) with row sums ``group_sizes`` and E[count] = expected.

    ``expected[g]`` must sum to ``group_sizes[g]``. Each cell gets ``floor(expected)``; the
    remaining ``r_g`` units of group g go to distinct values, chosen by systematic sampling with
    inclusion probability equal to each value's fractional part (one uniform offset per group,
    points at offset + 0, 1, …, r_g − 1 on the cumulative fractional parts). So every count is
    ``floor`` or ``floor + 1`` of its expectation, row sums are exact, and the rounding is
    unbiased. Deviation from private-pgm: mbi distributes the remainder by successive weighted
    draws without replacement (numpy's ``choice`` with ``replace=False, p=frac/frac.sum()``), whose
    inclusion probabilities are not the fractional parts, so its rounding is slightly biased.
    """
    floors = np.floor(expected)
    fractions = expected - floors
    counts = floors.astype(np.int64)
    remainder = group_sizes - counts.sum(axis=1)
    cumulative: FloatArray = np.cumsum(fractions, axis=1)
    last: FloatArray = cumulative[:, -1].copy()
    # Pin the last cumulative value to the integer remainder so exactly r_g points fall inside.
    scale: FloatArray = np.divide(
        remainder.astype(np.float64), last, out=np.zeros_like(last), where=last > 0
    )
    cumulative *= scale[:, None]
    cumulative[:, -1] = remainder
    offset: FloatArray = rng.random((expected.shape[0], 1))
    # Points offset + j (j = 0 .. r_g − 1) falling in [cum_{k−1}, cum_k) go to value k.
    upper = np.ceil(cumulative - offset)
    lower = np.empty_like(upper)
    lower[:, 0] = np.ceil(-offset[:, 0])
    lower[:, 1:] = upper[:, :-1]
    counts += (upper - lower).astype(np.int64)
    return counts


Strata = Sequence[tuple[CodeArray, int]]
"""Columns already drawn, most significant first, each with its number of values."""

# Mixed-radix keys stay below this bound so that ``key * size + code`` never overflows int64.
_KEY_BOUND = 2**62
# A key shifted left to make room for the tie-break stays below this (int64's largest + 1).
_SORT_BOUND = 2**63
# Below this many bits for a truncated position, ties would be common: sort the floats instead.
_MIN_FRACTION_BITS = 24


def _dense_rank(key: IntArray, bound: int, bits: int) -> tuple[IntArray, int]:
    """Order-preserving ranks ``0..m-1`` of ``key``'s distinct values (all below ``bound``), and
    ``m``. With room for the row number (``bits`` bits, the rows fit in them) under the key,
    one sort by value of ``key · 2^bits + row`` (``np.sort``); else an ``argsort``."""
    if bound << bits <= _SORT_BOUND:
        packed = key << bits
        packed |= np.arange(key.size, dtype=np.int64)
        packed.sort()
        order = packed & ((1 << bits) - 1)
        packed >>= bits
        ordered = packed
    else:
        order = np.argsort(key)
        ordered = key[order]
    ranked = np.empty(key.size, dtype=np.int64)
    ranked[0] = 0
    np.cumsum(ordered[1:] != ordered[:-1], out=ranked[1:])
    rank = np.empty_like(ranked)
    rank[order] = ranked
    return rank, int(ranked[-1]) + 1


def _order_by_group_then(position: FloatArray, group: IntArray, groups: int) -> IntArray:
    """``np.lexsort((position, group))`` for distinct ``position`` values in [0, 1].

    One int64 key per row, ``(group, ⌊position · 2^b⌋, row)`` in bit fields, sorted by value
    (``np.sort``, much faster than ``np.argsort``); its low bits are the order. Rows whose
    group and truncated position are equal (adjacent after the sort, and rare: about
    n² · 2^-43 pairs) are then re-sorted among themselves by their exact positions, so the order
    is exactly the lexicographic one. When the fields do not fit 63 bits: one argsort on the
    floats, then a stable sort on the (small-dtype, so radix-sorted) group numbers."""
    n = position.shape[0]
    row_bits = max(n - 1, 1).bit_length()
    group_bits = max(groups - 1, 1).bit_length()
    fraction_bits = min(63 - row_bits - group_bits, 52)
    if fraction_bits < _MIN_FRACTION_BITS:
        by_position = np.argsort(position)
        small = group.astype(narrowest_unsigned(groups))[by_position]
        fallback: IntArray = by_position[np.argsort(small, kind="stable")]
        return fallback
    top = (1 << fraction_bits) - 1
    scaled = np.floor(position * float(1 << fraction_bits))
    np.minimum(scaled, float(top), out=scaled)  # a position of 1.0 shares the last step
    key = group.astype(np.int64) << fraction_bits
    key |= scaled.astype(np.int64)
    key <<= row_bits
    key |= np.arange(n, dtype=np.int64)
    key.sort()
    order: IntArray = key & ((1 << row_bits) - 1)
    key >>= row_bits  # (group, truncated position)
    same = key[1:] == key[:-1]
    if same.any():
        tied = np.zeros(n, dtype=bool)
        tied[1:] = same
        tied[:-1] |= same
        slots = np.flatnonzero(tied)
        members = order[slots]
        order[slots] = members[np.lexsort((position[members], key[slots]))]
    return order


def _stratified_assign(
    keys: IntArray,
    parent_cells: int,
    strata: Strata,
    rng: np.random.Generator,
    values: CodeArray,
    out: CodeArray,
) -> None:
    """``out[order] = values``, ``order`` being the rows sorted by ``(keys, strata columns in
    order)`` with ties in uniformly random order (:func:`_stratified_ranks`), without building
    the order: ``values`` are laid out by the rows' tie-break values, then read back through
    the permutation."""
    ranks, permutation = _stratified_ranks(keys, parent_cells, strata, rng)
    by_tie_break = np.empty_like(values)
    by_tie_break[ranks] = values
    np.take(by_tie_break, permutation, out=out)


def _stratified_ranks(
    keys: IntArray, parent_cells: int, strata: Strata, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """The rows sorted by ``(keys, strata columns in order)``, ties in uniformly random order,
    as the tie-break permutation and its values in the sorted order (the k-th sorted row is the
    one whose tie-break value is ``ranks[k]``).

    One integer sort key: the columns in mixed radix, re-ranked to ``0..m-1`` whenever the next
    column would overflow int64, and, last, a random permutation of the rows as the least
    significant digit (the tie-break). Once every row has a key of its own the remaining columns
    cannot change the order and are skipped. Equal in distribution to a lexicographic sort on
    ``(keys, strata…, uniform tie-break)``; the order is exactly
    ``np.argsort(key · 2^b + permutation)``.

    The tie-break is a permutation of ``0..n-1`` in the low bits of the key, so a sorted key
    tells its own row: the keys are sorted by value (``np.sort``, about three times faster than
    ``np.argsort`` on int64 here) and only their low bits are kept.
    """
    n = keys.shape[0]
    bits = max(n - 1, 1).bit_length()  # the permutation's values fit in the low `bits` bits
    # Keys below this leave room for a row number or the tie-break in the low bits; re-ranking
    # before a key outgrows it keeps every sort a sort by value.
    room = _SORT_BOUND >> bits
    combined = keys.astype(np.int64, copy=True)
    bound = max(int(parent_cells), 1)
    for column, size in strata:
        if bound * size >= _KEY_BOUND or (bound * size > room and bound > 1):
            combined, bound = _dense_rank(combined, bound, bits)
            if bound == n:
                break  # every row has a key of its own: later columns cannot reorder them
        combined *= size
        combined += column
        bound *= size
    if bound > room:
        combined, bound = _dense_rank(combined, bound, bits)
    permutation = rng.permutation(n)
    combined <<= bits
    combined |= permutation
    combined.sort()
    combined &= (1 << bits) - 1
    return combined, permutation


def _draw_round(
    keys: IntArray,
    parent_cells: int,
    table: FloatArray,
    rng: np.random.Generator,
    strata: Strata | None = None,
) -> CodeArray:
    n = keys.shape[0]
    sizes = np.bincount(keys, minlength=parent_cells)
    present = np.flatnonzero(sizes)
    group_sizes = sizes[present].astype(np.int64)
    probabilities = _normalised_rows(table[present])
    counts = round_counts(probabilities * group_sizes[:, None], group_sizes, rng)
    # Values for the rows of each group, groups in ascending key order.
    width = table.shape[1]
    flat_counts = counts.ravel()
    dtype = narrowest_unsigned(width)
    values = np.repeat(np.tile(np.arange(width, dtype=dtype), present.size), flat_counts)
    out = np.empty(n, dtype=dtype)
    if strata is None:
        # Rows sorted by key with a random order inside each group receive those values.
        _stratified_assign(keys, parent_cells, (), rng, values, out)
        return out
    # Balanced: inside each group, spread every value's rows evenly along the group (value v
    # with c rows sits at positions (k + u_v)/c), and hand them to the group's rows sorted by
    # the attributes drawn so far, so each value is spread evenly across those attributes too.
    group = np.repeat(np.arange(present.size), counts.sum(axis=1))
    starts = np.cumsum(flat_counts) - flat_counts
    rank = np.arange(values.size) - np.repeat(starts, flat_counts)
    offsets = rng.random(flat_counts.size)
    position = (rank + np.repeat(offsets, flat_counts)) / np.repeat(
        np.maximum(flat_counts, 1), flat_counts
    )
    # Positions are distinct (ranks differ inside a value; offsets are continuous across values).
    interleaved = values[_order_by_group_then(position, group, present.size)]
    _stratified_assign(keys, parent_cells, strata, rng, interleaved, out)
    return out


def draw_balanced(
    probabilities: npt.ArrayLike, strata: IntArray, rng: np.random.Generator
) -> CodeArray:
    """One value per row of ``strata`` from ``probabilities``: counts by controlled rounding,
    spread evenly across the rows sorted by the columns of ``strata`` (post-processing)."""
    table = np.asarray(probabilities, dtype=np.float64).reshape(1, -1)
    rows = strata.shape[0]
    if rows == 0:
        return np.empty(0, dtype=narrowest_unsigned(table.shape[1]))
    keys = np.zeros(rows, dtype=np.int64)
    columns = [
        (np.asarray(strata[:, j], dtype=np.int64), int(strata[:, j].max()) + 1)
        for j in range(strata.shape[1])
    ]
    return _draw_round(keys, 1, table, rng, columns if columns else None)


def _draw_sample(
    keys: IntArray, parent_cells: int, table: FloatArray, rng: np.random.Generator
) -> IntArray:
    n = keys.shape[0]
    width = table.shape[1]
    # The groups present and each row's group, by a bincount over the parent cells (no sort).
    seen = np.bincount(keys, minlength=parent_cells) > 0
    present = np.flatnonzero(seen)
    inverse = (np.cumsum(seen) - 1)[keys]
    probabilities = _normalised_rows(table[present])
    cdf = np.cumsum(probabilities, axis=1)
    # Row g of the cdf lives in [2g, 2g + 1]: the gaps keep a uniform from ever reaching another
    # group's entries even when 2g + u rounds up.
    rows = np.arange(present.size, dtype=np.float64)[:, None]
    flat = (cdf + 2.0 * rows).ravel()
    target = 2.0 * inverse + rng.random(n)
    position = np.searchsorted(flat, target, side="right")
    value = position - inverse * width
    positive = probabilities > 0
    last_positive = width - 1 - np.argmax(positive[:, ::-1], axis=1)
    drawn: IntArray = np.minimum(value, last_positive[inverse]).astype(np.int64)
    return drawn


def sample_rows(
    sizes: Sequence[int],
    conditionals: Sequence[tuple[int, tuple[int, ...], FloatArray]],
    rows: int,
    rng: np.random.Generator,
    method: Literal["round", "balanced", "sample"],
) -> CodeArray:
    """Draw ``rows`` records attribute by attribute (column j is attribute j of ``sizes``), as
    a column-major array of the smallest unsigned dtype that holds every attribute's codes.

    ``conditionals`` lists, in drawing order, ``(v, parents, table)``: attribute position ``v``,
    the positions of its already-drawn parents, and expected counts of shape
    ``(Π parent sizes, size of v)`` (parents in mixed radix, first parent most significant).
    """
    # Column-major and small: every step reads and writes whole columns.
    dtype = narrowest_unsigned(max(sizes, default=1))
    codes = np.zeros((rows, len(sizes)), dtype=dtype, order="F")
    if rows == 0:
        return codes
    drawn: list[int] = []
    for v, parents, table in conditionals:
        keys = np.zeros(rows, dtype=np.int64)
        parent_cells = 1
        for u in parents:
            keys *= sizes[u]
            keys += codes[:, u]
            parent_cells *= sizes[u]
        values = np.asarray(table, dtype=np.float64)
        if method == "sample":
            codes[:, v] = _draw_sample(keys, parent_cells, values, rng)
        else:
            others = [u for u in drawn if u not in parents]
            others = list(rng.permutation(others)) if others else []
            strata = (
                [(codes[:, u], int(sizes[u])) for u in others]
                if method == "balanced" and others
                else None
            )
            codes[:, v] = _draw_round(keys, parent_cells, values, rng, strata)
        drawn.append(v)
    return codes
