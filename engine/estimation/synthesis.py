"""Vectorised row synthesis from a junction-tree model (post-processing: no privacy cost).

Attributes are drawn one at a time in reverse elimination order; each attribute ``v`` is drawn
from its conditional given its already-drawn neighbours in the triangulated graph, which is the
exact conditional of the model given everything drawn so far. Rows are grouped by those
neighbours' values with a mixed-radix key (``np.bincount`` / a stable sort), never a Python loop
over rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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


def _draw_round(
    keys: IntArray,
    parent_cells: int,
    table: FloatArray,
    rng: np.random.Generator,
    strata: IntArray | None = None,
) -> IntArray:
    n = keys.shape[0]
    sizes = np.bincount(keys, minlength=parent_cells)
    present = np.flatnonzero(sizes)
    group_sizes = sizes[present].astype(np.int64)
    probabilities = _normalised_rows(table[present])
    counts = round_counts(probabilities * group_sizes[:, None], group_sizes, rng)
    # Values for the rows of each group, groups in ascending key order.
    width = table.shape[1]
    flat_counts = counts.ravel()
    values = np.repeat(np.tile(np.arange(width, dtype=np.int64), present.size), flat_counts)
    out = np.empty(n, dtype=np.int64)
    if strata is None:
        # Rows sorted by key with a random order inside each group receive those values.
        shuffle = rng.permutation(n)
        order = shuffle[np.argsort(keys[shuffle], kind="stable")]
        out[order] = values
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
    interleaved = values[np.lexsort((position, group))]
    # np.lexsort sorts by the last key first: the group, then the strata columns, then a random
    # tie-break.
    row_keys = np.vstack(
        [rng.random(n), strata[:, ::-1].T.astype(np.float64), keys.astype(np.float64)]
    )
    order = np.lexsort(row_keys)
    out[order] = interleaved
    return out


def draw_balanced(
    probabilities: npt.ArrayLike, strata: IntArray, rng: np.random.Generator
) -> IntArray:
    """One value per row of ``strata`` from ``probabilities``: counts by controlled rounding,
    spread evenly across the rows sorted by the columns of ``strata`` (post-processing)."""
    table = np.asarray(probabilities, dtype=np.float64).reshape(1, -1)
    rows = strata.shape[0]
    if rows == 0:
        return np.empty(0, dtype=np.int64)
    keys = np.zeros(rows, dtype=np.int64)
    return _draw_round(keys, 1, table, rng, strata if strata.shape[1] else None)


def _draw_sample(
    keys: IntArray, parent_cells: int, table: FloatArray, rng: np.random.Generator
) -> IntArray:
    n = keys.shape[0]
    width = table.shape[1]
    present, inverse = np.unique(keys, return_inverse=True)
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
) -> IntArray:
    """Draw ``rows`` records attribute by attribute (column j is attribute j of ``sizes``).

    ``conditionals`` lists, in drawing order, ``(v, parents, table)``: attribute position ``v``,
    the positions of its already-drawn parents, and expected counts of shape
    ``(Π parent sizes, size of v)`` (parents in mixed radix, first parent most significant).
    """
    codes = np.zeros((rows, len(sizes)), dtype=np.int64)
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
            strata = codes[:, others] if method == "balanced" and others else None
            codes[:, v] = _draw_round(keys, parent_cells, values, rng, strata)
        drawn.append(v)
    return codes
