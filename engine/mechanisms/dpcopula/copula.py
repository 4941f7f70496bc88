"""Gaussian-copula building blocks for DPCopula (Li, Xiong, Jiang, EDBT 2014).

Two kinds of function live here, and the docstrings say which each one is:

* exact statistics of the data that release nothing by themselves (:func:`kendall_numerators`,
  :func:`pair_kendall_numerators`, :func:`kendall_numerators_by_sorting`,
  :func:`block_correlation_grid_sums`); the mechanism adds the noise and states the charge;
* post-processing of released values (key choice, per-partition margins, value orders, the
  correlation mapping and repair), plus the CSPRNG helpers that draw
  the mechanism's own random choices (subsamples and block assignments), which must come from
  the noise source, never from the seeded ``rng``.

Drawing records from the fitted copula is in :mod:`engine.models.copula`, below this mechanism and
the ``"copula"`` model kind that both use it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
from scipy import special

from engine.domain import Domain
from engine.estimation.simplex import project_to_simplex as _simplex

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
KeyArray = npt.NDArray[np.uint64]

EIGENVALUE_FLOOR = 1e-6
"""Eigenvalues of a noisy correlation matrix are floored here before rescaling (notes B.8.4)."""

_WORD = 1 << 32


# ---------------------------------------------------------------------------------------------
# Randomness that is part of the mechanism: drawn from the CSPRNG (noise source)
# ---------------------------------------------------------------------------------------------


def secure_uniform_integers(bound: int, count: int, source: random.Random) -> IntArray:
    """``count`` independent uniform integers in {0, …, bound − 1}, from ``source``.

    Exact: 32-bit words from ``source.randbytes`` below 2^32 − (2^32 mod bound) are kept and
    reduced mod ``bound`` (each residue then has the same number of preimages); the rest are
    redrawn. Used for DPCopula-MLE's random block assignment, which is part of the mechanism.
    """
    if isinstance(bound, bool) or not isinstance(bound, int) or not 1 <= bound <= _WORD:
        raise ValueError("bound must be an int in [1, 2^32]")
    if count < 0:
        raise ValueError("count must be non-negative")
    limit = _WORD - _WORD % bound
    out = np.empty(count, dtype=np.int64)
    todo = np.arange(count)
    while todo.size:
        words = np.frombuffer(source.randbytes(4 * todo.size), dtype="<u4").astype(np.int64)
        ok = words < limit
        out[todo[ok]] = words[ok] % bound
        todo = todo[~ok]
    return out


def secure_order_keys(count: int, source: random.Random) -> KeyArray:
    """``count`` distinct random 64-bit keys from ``source``; ranking rows by them gives a
    uniformly random order.

    The keys are i.i.d. uniform, so conditional on being pairwise distinct every order of them is
    equally likely; a draw with a repeated key (probability below count²/2^65) is discarded and
    redrawn as a whole, which keeps the order exactly uniform. The restriction of a uniform order
    to disjoint sets of rows gives independent uniform orders on each set.
    """
    if count < 0:
        raise ValueError("count must be non-negative")
    while True:
        keys = np.frombuffer(source.randbytes(8 * count), dtype="<u8").astype(np.uint64)
        if np.unique(keys).size == count:
            return keys


def subsample_rows(rows: npt.NDArray[np.intp], keys: KeyArray, size: int) -> npt.NDArray[np.intp]:
    """The ``size`` rows of ``rows`` with the smallest ``keys`` (all of them if there are no more):
    a uniformly random ``size``-subset when the keys come from :func:`secure_order_keys`."""
    if size < 0:
        raise ValueError("size must be non-negative")
    if rows.size <= size:
        return rows
    if size == 0:
        return rows[:0]
    chosen = np.argpartition(keys[rows], size - 1)[:size]
    return np.sort(rows[chosen])


# ---------------------------------------------------------------------------------------------
# Exact statistics (release nothing; the mechanism adds noise)
# ---------------------------------------------------------------------------------------------


def kendall_numerators(tables: npt.ArrayLike) -> IntArray:
    """S = n_concordant − n_discordant (Kendall's tau-a numerator) of each 2-D contingency table.

    ``tables`` has shape (..., a, b); cell (i, j) counts the rows with first value i and second
    value j. Every pair of rows is counted once, from the row with the smaller first value: with
    G(i, j) the rows strictly greater in both values and L(i, j) those strictly greater in the
    first and strictly smaller in the second, S = Σ_ij C_ij·(G(i, j) − L(i, j)). Pairs tied in
    either value count 0 (tau-a). O(a·b) per table with exclusive 2-D cumulative sums, exact in
    int64 (below 3·10⁹ rows). Returns an int64 array of shape ``tables.shape[:-2]``.
    """
    counts = np.asarray(tables)
    if counts.ndim < 2 or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError("tables must be integer arrays with at least 2 dimensions")
    counts = counts.astype(np.int64, copy=False)
    if counts.size and int(counts.min()) < 0:
        raise ValueError("counts must be non-negative")
    # rows strictly greater in the first value, per second value
    above = np.flip(np.cumsum(np.flip(counts, axis=-2), axis=-2), axis=-2) - counts
    greater = np.flip(np.cumsum(np.flip(above, axis=-1), axis=-1), axis=-1) - above
    smaller = np.cumsum(above, axis=-1) - above
    result: IntArray = np.sum(counts * (greater - smaller), axis=(-2, -1)).astype(np.int64)
    return result


MAX_TABLE_CELLS = 1 << 22
"""Above this many cells, :func:`pair_kendall_numerators` counts by sorting instead of tables."""


def kendall_numerators_by_sorting(
    partition: npt.ArrayLike, x: npt.ArrayLike, y: npt.ArrayLike, n_partitions: int
) -> IntArray:
    """The tau-a numerator S of (x, y) within each partition, in O(n log² n) without tables.

    Divide and conquer on the ranks of x: at level w every run of 2w consecutive x-ranks is cut
    into a lower and an upper half, and each row of the upper half counts the rows of the lower
    half (same partition, same run) with smaller y minus those with larger y, by binary search
    in the sorted keys (segment·B + y). Every pair with different x is counted at exactly one
    level, from its row with the larger x. Exact integers; releases nothing.
    """
    part = np.asarray(partition, dtype=np.int64)
    xs = np.asarray(x, dtype=np.int64)
    ys = np.asarray(y, dtype=np.int64)
    if not part.shape == xs.shape == ys.shape or part.ndim != 1:
        raise ValueError("partition, x and y must be 1-D arrays of the same length")
    result = np.zeros(n_partitions, dtype=np.int64)
    if part.size == 0:
        return result
    _, x_rank = np.unique(xs, return_inverse=True)
    y_values, y_rank = np.unique(ys, return_inverse=True)
    x_rank = x_rank.reshape(-1).astype(np.int64)
    y_rank = y_rank.reshape(-1).astype(np.int64)
    span = int(y_values.size)
    levels = int(x_rank.max()).bit_length()
    for level in range(levels):
        runs = (int(x_rank.max()) >> (level + 1)) + 1
        segment = part * runs + (x_rank >> (level + 1))
        upper = ((x_rank >> level) & 1).astype(np.bool_)
        lower_keys = np.sort(segment[~upper] * span + y_rank[~upper])
        base = segment[upper] * span
        at = base + y_rank[upper]
        smaller = np.searchsorted(lower_keys, at, side="left") - np.searchsorted(
            lower_keys, base, side="left"
        )
        larger = np.searchsorted(lower_keys, base + span, side="left") - np.searchsorted(
            lower_keys, at, side="right"
        )
        np.add.at(result, part[upper], smaller - larger)
    return result


def pair_kendall_numerators(
    partition: npt.ArrayLike,
    x: npt.ArrayLike,
    y: npt.ArrayLike,
    n_partitions: int,
    x_size: int,
    y_size: int,
) -> IntArray:
    """The tau-a numerator S of (x, y) within each partition (codes below the given sizes).

    From the (partition, x, y) contingency table (:func:`kendall_numerators`) while it has at
    most :data:`MAX_TABLE_CELLS` cells, else by sorting. Exact integers; releases nothing.
    """
    part = np.asarray(partition, dtype=np.int64)
    xs = np.asarray(x, dtype=np.int64)
    ys = np.asarray(y, dtype=np.int64)
    if n_partitions * x_size * y_size <= MAX_TABLE_CELLS:
        flat = (part * x_size + xs) * y_size + ys
        table = np.bincount(flat, minlength=n_partitions * x_size * y_size)
        return kendall_numerators(table.reshape(n_partitions, x_size, y_size))
    return kendall_numerators_by_sorting(part, xs, ys, n_partitions)


def block_correlation_grid_sums(
    scores: FloatArray, blocks: IntArray, n_blocks: int, pairs: Sequence[tuple[int, int]], grid: int
) -> IntArray:
    """Σ over blocks of round(grid·r_t) for each pair, r_t the Pearson correlation of the pair's
    normal scores within block t (DPCopula-MLE's per-block estimate, subsample and aggregate).

    ``scores`` is rows × attributes, ``blocks`` the block of each row. r_t is clipped to [−1, 1]
    and taken as 0 for a block with fewer than two rows or a constant column, so each block
    contributes an integer in [−grid, grid]: changing one block's rows moves each pair's sum by
    at most 2·grid. Releases nothing by itself.
    """
    if scores.ndim != 2 or blocks.shape != (scores.shape[0],):
        raise ValueError("scores must be rows × attributes and blocks one per row")
    count = np.bincount(blocks, minlength=n_blocks).astype(np.float64)
    safe = np.maximum(count, 1.0)
    centred = np.empty_like(scores)
    spread = np.empty((n_blocks, scores.shape[1]))
    for j in range(scores.shape[1]):
        mean = np.bincount(blocks, weights=scores[:, j], minlength=n_blocks) / safe
        centred[:, j] = scores[:, j] - mean[blocks]
        spread[:, j] = np.bincount(blocks, weights=centred[:, j] ** 2, minlength=n_blocks)
    usable = spread > 1e-12 * np.maximum(count, 1.0)[:, None]
    out = np.zeros(len(pairs), dtype=np.int64)
    for k, (a, b) in enumerate(pairs):
        cross = np.bincount(blocks, weights=centred[:, a] * centred[:, b], minlength=n_blocks)
        ok = usable[:, a] & usable[:, b] & (count >= 2)
        r = np.zeros(n_blocks)
        r[ok] = cross[ok] / np.sqrt(spread[ok, a] * spread[ok, b])
        out[k] = int(np.rint(grid * np.clip(r, -1.0, 1.0)).astype(np.int64).sum())
    return out


# ---------------------------------------------------------------------------------------------
# Post-processing of released values
# ---------------------------------------------------------------------------------------------


def partition_keys(domain: Domain, small_domain: int, max_partitions: int) -> tuple[str, ...]:
    """The candidate partition keys of DPCopula-hybrid, from the public domain only.

    Attributes with 2 ≤ size < ``small_domain`` are taken smallest first (ties in domain order)
    while the product of the sizes taken stays at most ``max_partitions``, and returned in that
    order (the mechanism keeps a prefix of them). Size-1 attributes are never keys (they would
    not split anything).
    """
    candidates = sorted(
        (size, index) for index, size in enumerate(domain.sizes) if 2 <= size < small_domain
    )
    chosen: list[int] = []
    product = 1
    for size, index in candidates:
        if product * size > max_partitions:
            break
        product *= size
        chosen.append(index)
    return tuple(domain.attributes[i] for i in chosen)


def partition_margins(noisy: npt.ArrayLike, sigma2: float, totals: npt.ArrayLike) -> FloatArray:
    """Per-partition margins of one attribute from its noisy (partition × value) table.

    Each partition's row is shrunk towards the independence fit E_pv = T_p·g_v (g the attribute's
    global distribution: the table's noisy column sums projected onto the simplex) by the
    empirical-Bayes weight w_p = τ_p²/(τ_p² + σ²), where
    τ_p² = max(0, mean_v((Y_pv − E_pv)²) − σ²) is the method-of-moments estimate of the
    partition's true deviation from E, then projected onto the simplex with the partition's
    total T_p (a partition of total 0 keeps its clipped noisy row).
    Post-processing of released values.
    """
    table = np.asarray(noisy, dtype=np.float64)
    sums = np.asarray(totals, dtype=np.float64)
    if table.ndim != 2 or sums.shape != (table.shape[0],):
        raise ValueError("noisy must be partitions × values with one total per partition")
    grand = float(sums.sum())
    if table.shape[0] > 1 and grand > 0:
        overall = _simplex(table.sum(axis=0), grand) / grand
        expected = np.outer(sums, overall)
        residual = table - expected
        signal = np.maximum(0.0, np.mean(residual**2, axis=1) - sigma2)
        weight = signal / (signal + sigma2)
        table = expected + weight[:, None] * residual
    return np.stack(
        [
            _simplex(row, float(total)) if total > 0 else np.maximum(row, 0.0)
            for row, total in zip(table, sums, strict=True)
        ]
    )


def tie_scales(
    margins: Sequence[Sequence[npt.ArrayLike]], pairs: Sequence[tuple[int, int]]
) -> FloatArray:
    """√((1 − Σ_v p_v²)(1 − Σ_w q_w²)) per partition and pair, p and q the normalised margins
    (``margins[j][p]``: attribute j in partition p) of the pair's attributes.

    Kendall's tau-a of a sample counts tied pairs as 0, so on tied data it is smaller than the
    tau of the underlying continuous copula; tau-b divides by these factors (in the limit of many
    rows 1 − Σp² is the share of pairs not tied in the attribute). A factor of 0 (a constant
    margin) is returned as 1 (its tau-a is 0 anyway). Post-processing of released margins.
    """
    n_partitions = len(margins[0]) if margins else 0
    untied = np.ones((len(margins), n_partitions))
    for j, per_partition in enumerate(margins):
        for p, margin in enumerate(per_partition):
            weights = np.asarray(margin, dtype=np.float64)
            total = float(weights.sum())
            if total > 0:
                untied[j, p] = 1.0 - float(np.sum((weights / total) ** 2))
    out = np.ones((n_partitions, len(pairs)))
    for k, (a, b) in enumerate(pairs):
        scale = np.sqrt(np.maximum(untied[a] * untied[b], 0.0))
        out[:, k] = np.where(scale > 0, scale, 1.0)
    return out


def association_order(table: npt.ArrayLike) -> IntArray:
    """An order of an attribute's values by their association with the partitions: the first
    correspondence-analysis axis of the (partition × value) table, i.e. values sorted by their
    coordinate on the leading right singular vector of the standardised residuals
    D_r^(−1/2)·(N/n − r·cᵀ)·D_c^(−1/2), divided by √c. Values of zero mass keep their place at the
    end in code order; a table with one partition or no association gives the identity order.
    Returns ``order`` with ``order[i]`` the original code placed at position i. Post-processing
    of a released (estimated) table.
    """
    counts = np.maximum(np.asarray(table, dtype=np.float64), 0.0)
    if counts.ndim != 2:
        raise ValueError("table must be partitions × values")
    identity = np.arange(counts.shape[1], dtype=np.int64)
    total = float(counts.sum())
    if counts.shape[0] < 2 or counts.shape[1] < 3 or total <= 0:
        return identity
    share = counts / total
    rows = share.sum(axis=1)
    cols = share.sum(axis=0)
    live_rows = rows > 0
    live = cols > 0
    if live_rows.sum() < 2 or live.sum() < 3:
        return identity
    residual = (share[live_rows][:, live] - np.outer(rows[live_rows], cols[live])) / np.sqrt(
        np.outer(rows[live_rows], cols[live])
    )
    _, singular, right = np.linalg.svd(residual, full_matrices=False)
    if singular.size == 0 or singular[0] <= 1e-12:
        return identity
    coordinate = right[0] / np.sqrt(cols[live])
    if coordinate[0] > coordinate[-1]:
        coordinate = -coordinate  # keep the original direction where it is arbitrary
    placed = identity[live][np.argsort(coordinate, kind="stable")]
    result: IntArray = np.concatenate([placed, identity[~live]]).astype(np.int64)
    return result


def kendall_to_correlation(tau: npt.ArrayLike) -> FloatArray:
    """ρ = sin(π/2·τ) elementwise, τ clipped to [−1, 1] (the paper's eq. 4; Kruskal 1958)."""
    clipped = np.clip(np.asarray(tau, dtype=np.float64), -1.0, 1.0)
    result: FloatArray = np.sin(0.5 * math.pi * clipped)
    return result


def repair_correlation(matrix: npt.ArrayLike, floor: float = EIGENVALUE_FLOOR) -> FloatArray:
    """The nearest-by-eigenvalues positive definite correlation matrix (Rousseeuw & Molenberghs
    1993, as in the paper's Section 4.1.2): symmetrise, set the diagonal to 1, decompose
    P = R·D·Rᵀ, raise every eigenvalue below ``floor`` to ``floor``, rebuild and rescale to unit
    diagonal (S^(−1/2)·P·S^(−1/2)). The result is symmetric with unit diagonal and positive
    definite (a congruence of a positive definite matrix). Post-processing.
    """
    p = np.array(matrix, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError("matrix must be square")
    if not np.all(np.isfinite(p)):
        raise ValueError("matrix must be finite")
    if floor <= 0:
        raise ValueError("floor must be positive")
    p = 0.5 * (p + p.T)
    np.fill_diagonal(p, 1.0)
    values, vectors = np.linalg.eigh(p)
    if values.min() >= floor:
        return p
    rebuilt = (vectors * np.maximum(values, floor)) @ vectors.T
    scale = np.sqrt(np.diag(rebuilt))
    out: FloatArray = rebuilt / np.outer(scale, scale)
    out = 0.5 * (out + out.T)
    np.fill_diagonal(out, 1.0)
    return out


def normal_scores(codes: npt.ArrayLike, margin: npt.ArrayLike) -> FloatArray:
    """Φ⁻¹ of the mid-CDF of each code under the (released, non-negative) ``margin``:
    u(v) = (F(v−1) + F(v))/2 with F the margin's normalised CDF, clipped to
    [1/(2(T+1)), 1 − 1/(2(T+1))] (T the margin's total, at least 1) so the scores stay finite.

    DPCopula-MLE's pseudo-observations, built from the DP margins rather than from ranks in the
    data (notes B.1.4: global ranks would let one row move every block). Post-processing.
    """
    weights = np.asarray(margin, dtype=np.float64)
    total = float(weights.sum())
    if weights.ndim != 1 or not np.all(weights >= 0):
        raise ValueError("margin must be a non-negative 1-D array")
    if total <= 0:
        weights = np.ones_like(weights)
        total = float(weights.size)
    upper = np.cumsum(weights) / total
    mid = upper - 0.5 * weights / total
    edge = 0.5 / (max(total, 1.0) + 1.0)
    scores = np.asarray(special.ndtri(np.clip(mid, edge, 1.0 - edge)), dtype=np.float64)
    result: FloatArray = scores[np.asarray(codes, dtype=np.intp)]
    return result
