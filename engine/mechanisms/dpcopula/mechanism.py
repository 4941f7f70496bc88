"""DPCopula: differentially private synthetic data through a Gaussian copula (Haoran Li, Li
Xiong, Xiaoqian Jiang, "Differentially Private Synthesization of Multi-Dimensional Data using
Copula Functions", EDBT 2014), in a ρ-zCDP, add/remove-one-row variant."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from engine.accounting import split_rho
from engine.counting import CountingEngine, codes_at
from engine.domain import Dataset, Domain
from engine.estimation.simplex import project_to_simplex
from engine.marginals import Measurement, measure_marginal
from engine.mechanisms.base import (
    EngineRefused,
    GaussianCharge,
    Mechanism,
    Milestone,
    ProgressReporter,
    ResourceEstimate,
    SynthesisResult,
    largest_cells,
    resolve_rows,
    resource_estimate,
)
from engine.mechanisms.dpcopula.copula import (
    FloatArray,
    IntArray,
    association_order,
    block_correlation_grid_sums,
    kendall_to_correlation,
    normal_scores,
    pair_kendall_numerators,
    partition_keys,
    partition_margins,
    repair_correlation,
    secure_order_keys,
    secure_uniform_integers,
    subsample_rows,
    tie_scales,
)
from engine.mechanisms.preview import NoisePreview, marginal_preview, one_way_previews
from engine.mechanisms.splits import exact_weight, size_weight
from engine.models.fitted import FittedModel
from engine.models.kinds import CopulaModel
from engine.noise import SecureRandom, discrete_gaussian_noise

_SAFETY_SDS = 3
"""n̂ = ⌊ñ − 3·sd(ñ)⌋: the public Kendall sample size sits three noise standard deviations below
the noisy count, so with probability about 0.9987 the data has at least n̂ rows."""


class DPCopulaParams(BaseModel):
    """Parameters of DPCopula (see DPCopulaMechanism for the defaults and the deviations)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    correlation: Literal["kendall", "mle"] = Field(
        default="kendall",
        description="how the copula's correlation matrix is estimated: noisy pairwise Kendall "
        "tau mapped by sin(π/2·τ) ('kendall', the paper's main method) or subsample-and-"
        "aggregate block estimates of the normal-score correlation ('mle'; needs far more rows)",
    )
    margin_share: float = Field(
        default=0.9,
        ge=0.01,
        le=0.99,
        description="share of ρ (after the partition counts) for the noisy one-way margins; the "
        "rest measures the correlations",
    )
    hybrid: bool = Field(
        default=True,
        description="DPCopula-hybrid: partition the data on small-domain attributes and fit one "
        "copula per partition",
    )
    small_domain: int = Field(
        default=10,
        ge=3,
        le=1000,
        description="attributes with fewer values than this may become partition keys",
    )
    max_partitions: int = Field(
        default=64,
        ge=2,
        le=4096,
        description="keys are taken smallest first while the product of their sizes stays at "
        "most this",
    )
    partition_share: float = Field(
        default=0.1,
        ge=0.01,
        le=0.99,
        description="share of ρ for the noisy partition counts when partitioning",
    )
    kendall_max_rows: int = Field(
        default=1_000_000,
        ge=2,
        le=10**8,
        description="Kendall tau is computed on a uniformly random subsample of at most this "
        "many rows per partition (the paper's n̂)",
    )
    kendall_min_rows: int = Field(
        default=2,
        ge=2,
        le=10**8,
        description="a partition whose public Kendall sample size n̂ is below this gets "
        "independent margins (its noisy tau is still released, then ignored)",
    )
    ties: Literal["tau-b", "none"] = Field(
        default="tau-b",
        description="Kendall: divide the noisy tau-a by √((1 − Σp²)(1 − Σq²)) from the noisy "
        "margins (tau-b's tie correction) before sin(π/2·τ) ('tau-b'), or map tau-a as the "
        "paper does ('none'); ties in small or skewed attributes otherwise shrink the copula's "
        "correlations",
    )
    shrink: bool = Field(
        default=True,
        description="Kendall: shrink each noisy tau towards 0 by the factor max(0, 1 − v/τ̃²), v "
        "its known noise variance (a non-negative garrote), so pure-noise coefficients of small "
        "partitions or small datasets do not become spurious correlations",
    )
    value_order: Literal["natural", "small", "association"] = Field(
        default="small",
        description="the order of each copula attribute's values: their codes ('natural', the "
        "paper's imposed total order), or sorted by their association with the partitions in "
        "the noisy (keys, attribute) table, for attributes with fewer than small_domain values "
        "('small') or all of them ('association'); only when partitioning",
    )
    max_margin_noise: float = Field(
        default=0.15,
        ge=0,
        le=1000,
        description="keep the longest prefix of the candidate keys for which the per-partition "
        "margins' expected L1 noise, relative to the average partition size from the noisy "
        "count, stays at most this (see margin_noise); 0 keeps none, a large value all",
    )
    mle_block_rows: int = Field(
        default=200,
        ge=2,
        le=10**7,
        description="DPCopula-MLE: about this many rows per random block (l = ⌊ñ/rows⌋ blocks)",
    )
    mle_grid: int = Field(
        default=1000,
        ge=1,
        le=10**6,
        description="DPCopula-MLE: each block's correlation is released as round(grid·r)",
    )


@dataclass(frozen=True)
class _Budget:
    keys: Fraction
    margins: Fraction
    correlation: Fraction

    def __post_init__(self) -> None:
        if min(self.keys, self.margins, self.correlation) < 0:
            raise ValueError("budget parts must be non-negative")


def _split_budget(
    rho: Fraction, params: DPCopulaParams, has_keys: bool, has_copula: bool, has_pairs: bool
) -> _Budget:
    """ρ → (partition counts, margins, correlations), exactly; parts that have nothing to
    measure get 0 and their share goes to the next stage."""
    if not has_copula:
        return _Budget(rho, Fraction(0), Fraction(0))
    keys = rho * exact_weight(params.partition_share) if has_keys else Fraction(0)
    rest = rho - keys
    if not has_pairs:
        return _Budget(keys, rest, Fraction(0))
    margins = rest * exact_weight(params.margin_share)
    return _Budget(keys, margins, rest - margins)


def _partition_of_rows(data: CountingEngine, keys: tuple[str, ...]) -> npt.NDArray[np.intp]:
    """The flat (mixed-radix, first key most significant) partition index of every row; on
    another counting engine from the key columns read by position (:func:`_rows`)."""
    flat = np.zeros(data.n_rows, dtype=np.intp)
    if not keys:
        return flat
    columns = _rows(data, keys, None)
    for j, attr in enumerate(keys):
        flat *= data.domain.size(attr)
        flat += columns[:, j].astype(np.intp, copy=False)
    return flat


def _rows(
    data: CountingEngine, attrs: Sequence[str], positions: npt.NDArray[np.intp] | None
) -> IntArray:
    """:func:`engine.counting.codes_at` (int64 rows × attrs); ``_synthesize_counts`` refused
    any engine without it before reading anything."""
    if isinstance(data, Dataset):
        index = [data.domain.index(a) for a in attrs]
        taken = data.codes if positions is None else data.codes[positions]
        return np.asarray(taken[:, index], dtype=np.int64).reshape(-1, len(attrs))
    codes = codes_at(data, attrs, positions)
    if codes is None:
        raise RuntimeError("the counting engine cannot read rows by position")
    return codes


def _partition_counts(
    key_counts: FloatArray | None,
    key_variance: float,
    tables: list[Measurement],
    n_partitions: int,
) -> tuple[FloatArray, FloatArray]:
    """Noisy row count per partition and its variance: the precision-weighted average of the
    partition histogram's cell (``key_counts``, each of variance ``key_variance``) and of each
    (keys…, j) table's partition row sums (a sum of c_j cells of variance σ_j² has variance
    c_j·σ_j²). Post-processing."""
    estimates: list[FloatArray] = []
    variances: list[float] = []
    if key_counts is not None:
        estimates.append(key_counts.reshape(n_partitions))
        variances.append(key_variance)
    for table in tables:
        cells = table.noisy_counts.reshape(n_partitions, -1)
        estimates.append(cells.sum(axis=1).astype(np.float64))
        variances.append(cells.shape[1] * float(table.sigma2))
    weights = np.array([1.0 / v for v in variances])
    combined = np.tensordot(weights, np.stack(estimates), axes=1) / weights.sum()
    return combined, np.full(n_partitions, 1.0 / weights.sum())


def _margin_table(
    table: Measurement, histogram: Measurement | None, n_keys: int, n_partitions: int
) -> tuple[FloatArray, float]:
    """The noisy (partition × value) table of one copula attribute and its per-cell variance.

    When the attribute is also a candidate key that was not kept, the candidate histogram summed
    down to (keys…, attribute) is a second noisy copy of the same table (each cell a sum of
    cells of variance σ_K²); the two are averaged by precision. Post-processing.
    """
    noisy = table.noisy_counts.reshape(n_partitions, -1).astype(np.float64)
    variance = float(table.sigma2)
    attr = table.attributes[-1]
    if histogram is None or attr not in histogram.attributes:
        return noisy, variance
    axis = histogram.attributes.index(attr)
    others = tuple(i for i in range(n_keys, len(histogram.attributes)) if i != axis)
    copy = histogram.noisy_counts.sum(axis=others).reshape(n_partitions, -1).astype(np.float64)
    copy_variance = float(histogram.sigma2) * (histogram.noisy_counts.size // noisy.size)
    weight = copy_variance / (variance + copy_variance)
    combined = weight * noisy + (1 - weight) * copy
    return combined, variance * copy_variance / (variance + copy_variance)


def _has_pairs(sizes: list[int]) -> bool:
    return sum(1 for size in sizes if size >= 2) >= 2


def margin_noise(total: float, n_partitions: int, sizes: list[int], rho_margins: Fraction) -> float:
    """The expected L1 noise of a partition's margin relative to the average partition size,
    averaged over the copula attributes: mean_j √(2/π)·c_j·σ_j·P/ñ, with σ_j² = 1/(2ρ_j) and ρ_j
    the margins' budget split ∝ c_j^(2/3). Uses public sizes, budgets and the noisy total ñ
    only (post-processing); the hybrid keeps the most keys for which this stays small."""
    if not sizes:
        return 0.0
    weights = [size ** (2 / 3) for size in sizes]
    noise = [
        math.sqrt(2 / math.pi) * size * math.sqrt(sum(weights) / (2 * float(rho_margins) * w))
        for size, w in zip(sizes, weights, strict=True)
    ]
    return float(np.mean(noise)) * n_partitions / max(total, 1.0)


@dataclass(frozen=True, eq=False)
class _Columns:
    """Each row's partition, and the copula attributes' codes (in copula order, values
    re-ordered) of the rows at given positions (``fetch(None)``: every row), read only when
    the correlation step needs them: on another counting engine, Kendall reads just its
    subsample (:func:`engine.counting.codes_at`)."""

    fetch: Callable[[npt.NDArray[np.intp] | None], IntArray]
    partition: npt.NDArray[np.intp]
    n_partitions: int

    def rows_by_partition(self) -> list[npt.NDArray[np.intp]]:
        """The row indices of each partition, in row order."""
        order = np.argsort(self.partition, kind="stable")
        bounds = np.searchsorted(self.partition[order], np.arange(self.n_partitions + 1))
        return [order[bounds[p] : bounds[p + 1]] for p in range(self.n_partitions)]


def kendall_sample_size(count: float, variance: float, cap: int) -> int:
    """The public Kendall sample size n̂ = clip(⌊ñ − 3·sd(ñ)⌋, 2, cap) of a partition, from its
    noisy count ñ and that count's noise variance (post-processing of released values)."""
    if not (math.isfinite(count) and math.isfinite(variance) and variance >= 0):
        raise ValueError("count and variance must be finite, variance non-negative")
    low = count - _SAFETY_SDS * math.sqrt(variance)
    return int(min(cap, max(2, math.floor(low))))


def _kendall_correlations(
    columns: _Columns,
    sizes: list[int],
    pairs: list[tuple[int, int]],
    names: list[tuple[str, str]],
    counts: FloatArray,
    variances: FloatArray,
    tie_scale: FloatArray,
    params: DPCopulaParams,
    pair_rho: Fraction,
    source: random.Random,
    progress: ProgressReporter,
) -> tuple[FloatArray, list[GaussianCharge]]:
    """DPCopula-Kendall: noisy tau-a numerators per pair and partition, mapped to correlations.

    Releases S_p + N_Z(0, (2(n̂_p − 1))²·s²) per pair and partition, s² = 1/(2·``pair_rho``);
    see :class:`DPCopulaMechanism` for the sensitivity argument. Returns the correlation
    estimates (partitions × pairs) and one charge per pair.
    """
    n_partitions = columns.n_partitions
    sample_sizes = [
        kendall_sample_size(float(c), float(v), params.kendall_max_rows)
        for c, v in zip(counts, variances, strict=True)
    ]
    # The subsample is part of the mechanism: its randomness comes from the CSPRNG.
    order_keys = secure_order_keys(columns.partition.size, source)
    used = np.concatenate(
        [np.empty(0, dtype=np.intp)]
        + [
            subsample_rows(rows, order_keys, size)
            for rows, size in zip(columns.rows_by_partition(), sample_sizes, strict=True)
        ]
    )
    partition = columns.partition[used]
    codes = columns.fetch(used)  # the subsample's rows only
    exact = np.zeros((n_partitions, len(pairs)), dtype=np.int64)
    for k, (a, b) in enumerate(pairs):
        exact[:, k] = pair_kendall_numerators(
            partition, codes[:, a], codes[:, b], n_partitions, sizes[a], sizes[b]
        )
        progress(0.3 + 0.35 * (k + 1) / len(pairs), "correlate")

    unit_sigma2 = 1 / (2 * pair_rho)
    estimates = np.zeros((n_partitions, len(pairs)))
    for p, size in enumerate(sample_sizes):
        scale = 2 * (size - 1)
        noisy = exact[p] + discrete_gaussian_noise(scale * scale * unit_sigma2, len(pairs), source)
        if size < params.kendall_min_rows:
            continue  # released (the charge covers it) but too noisy to use
        used_rows = max(2, min(size, math.floor(float(counts[p]))))
        pairs_used = math.comb(used_rows, 2)
        tau = noisy / pairs_used
        if params.shrink:
            # Non-negative garrote with the known noise variance of τ̃ (post-processing).
            variance = float(scale * scale * unit_sigma2) / pairs_used**2
            tau = tau * np.maximum(0.0, 1.0 - variance / np.maximum(tau * tau, 1e-300))
        tau = np.clip(tau, -1.0, 1.0)
        if params.ties == "tau-b":
            tau = np.clip(tau / tie_scale[p], -1.0, 1.0)
        estimates[p] = kendall_to_correlation(tau)

    sensitivity, sigma2 = Fraction(1), unit_sigma2
    if n_partitions == 1:
        sensitivity = Fraction(2 * (sample_sizes[0] - 1))
        sigma2 = sensitivity * sensitivity * unit_sigma2
        unit = f"on a public sample of {sample_sizes[0]} rows"
    else:
        unit = "per partition, in units of each partition's sensitivity 2(n̂_p − 1)"
    charges = [
        GaussianCharge(
            description=f"DPCopula Kendall tau-a numerator of ({a}, {b}) {unit}",
            sensitivity=sensitivity,
            sigma2=sigma2,
            rho=pair_rho,
        )
        for a, b in names
    ]
    return estimates, charges


def _mle_correlations(
    columns: _Columns,
    margins: list[list[FloatArray]],
    pairs: list[tuple[int, int]],
    names: list[tuple[str, str]],
    counts: FloatArray,
    params: DPCopulaParams,
    pair_rho: Fraction,
    source: random.Random,
    progress: ProgressReporter,
) -> tuple[FloatArray, list[GaussianCharge]]:
    """DPCopula-MLE: subsample-and-aggregate block correlations per pair and partition.

    Releases Σ_blocks round(g·r_t) + N_Z(0, (2g)²·s²) per pair and partition, s² =
    1/(2·``pair_rho``); see :class:`DPCopulaMechanism`. Returns the correlation estimates
    (partitions × pairs, the released sums over g·l_p) and one charge per pair.
    """
    grid = params.mle_grid
    sensitivity = Fraction(2 * grid)
    sigma2 = sensitivity * sensitivity / (2 * pair_rho)
    estimates = np.zeros((columns.n_partitions, len(pairs)))
    codes = columns.fetch(None)  # every row (on a Dataset only: refused on other engines)
    for p, rows in enumerate(columns.rows_by_partition()):
        n_blocks = int(min(1 << 32, max(1, math.floor(float(counts[p]) / params.mle_block_rows))))
        # The block assignment is part of the mechanism: its randomness comes from the CSPRNG.
        blocks = secure_uniform_integers(n_blocks, rows.size, source)
        scores = np.column_stack(
            [normal_scores(codes[rows, j], margins[p][j]) for j in range(codes.shape[1])]
        ).reshape(rows.size, codes.shape[1])
        sums = block_correlation_grid_sums(scores, blocks, n_blocks, pairs, grid)
        noisy = sums + discrete_gaussian_noise(sigma2, len(pairs), source)
        estimates[p] = np.clip(noisy / (grid * n_blocks), -1.0, 1.0)
        progress(0.3 + 0.35 * (p + 1) / columns.n_partitions, "correlate")
    charges = [
        GaussianCharge(
            description=f"DPCopula-MLE block correlation sum of ({a}, {b}) on grid {grid}",
            sensitivity=sensitivity,
            sigma2=sigma2,
            rho=pair_rho,
        )
        for a, b in names
    ]
    return estimates, charges


def _reordered(params: DPCopulaParams, size: int) -> bool:
    """Whether an attribute's values are re-ordered by their association with the partitions."""
    if params.value_order == "natural" or not params.hybrid:
        return False
    return params.value_order == "association" or size < params.small_domain


class DPCopulaMechanism(Mechanism):
    """DPCopula: noisy one-way margins plus a noisy Gaussian-copula correlation matrix, sampled
    through the copula (Li, Xiong, Jiang, EDBT 2014), optionally per partition of small-domain
    attributes (the paper's DPCopula-hybrid, Algorithm 6).

    Per privacy unit (at most k rows after truncation; ``run(..., contribution_bound=k)``): the
    run below is made at the row-level budget ρ/k² and each release is stated with sensitivity
    k·Δ and ρ k²·ρ_i, σ² unchanged, so the charges add up to ρ per unit (engine/privacy_unit/
    group.py: k rows move a statistic of per-row sensitivity Δ by at most kΔ; for a count k is
    attained, all of a unit's rows in one cell, so no tighter bound holds). Kendall:
    the size n̂_p of the subsample is fixed by released counts, and composing the one-row
    couplings below along the k steps couples the subsamples of D and D′ with at most k
    substituted rows, so S_p moves by at most k·Δ_p (or use the group privacy of zCDP, Bun &
    Steinke 2016, Proposition 27); MLE: k rows land in at most k blocks, 2g·k.

    Privacy (ρ-zCDP; neighbours add or remove one row). ρ is split exactly into ρ_K (candidate
    partition keys, ``partition_share``·ρ when there are candidates), ρ_M (margins,
    ``margin_share`` of the rest) and ρ_C (correlations, the remainder); a stage with nothing to
    measure passes its share on, so the charges always add up to ρ.

    * Candidate keys: the attributes with 2 ≤ size < ``small_domain``, smallest first while the
      product of sizes stays ≤ ``max_partitions`` (public sizes only). Their joint histogram
      (L2 sensitivity 1) gets discrete Gaussian noise σ_K² = 1/(2ρ_K) (``measure_marginal``;
      Canonne, Kamath, Steinke 2020). The keys kept are the longest prefix of the candidates
      whose per-partition margins would have expected relative L1 noise ≤ ``max_margin_noise``
      (:func:`margin_noise`): a function of public sizes, budgets and the noisy total of this
      histogram, so the choice is adaptive composition, not a use of the private n. If the
      candidates are the whole domain, their histogram gets all of ρ and is sampled directly.
    * Margins: for each copula attribute j (every attribute not kept as a key), the contingency
      table of (keys…, j) (just j without keys): sensitivity 1, σ_j² = 1/(2ρ_j), ρ_M split
      ∝ size_j^(2/3). These tables are the global and every partition's margins at once (one row
      moves one cell of each table by 1: parallel composition inside each table).
    * Kendall (default). For each pair (a, b) of copula attributes with at least two values and
      each partition p, the released integer is S_p = n_concordant − n_discordant (tau-a's
      numerator) on the rows used: all of the partition's rows if it has at most n̂_p, else a
      uniformly random subset of exactly n̂_p of them drawn from the CSPRNG.
      n̂_p = clip(⌊ñ_p − 3·sd(ñ_p)⌋, 2, ``kendall_max_rows``), ñ_p being the precision-weighted
      noisy count of the partition from the released tables: a function of released values
      only, never the private count. Sensitivity Δ_p = 2(n̂_p − 1):
        - the data has n_p < n̂_p rows (all rows used on both sides): the added row forms one
          pair with each of the n_p ≤ n̂_p − 1 others, each moving S by at most 1;
        - n_p ≥ n̂_p: couple the two subsamples. Draw T′ uniform among the n̂_p-subsets of the
          larger dataset; if it misses the added row x, T = T′, else T = T′ − x + y with y
          uniform among the rows T′ missed. T is then uniform among the n̂_p-subsets of the
          smaller dataset (for n_p = n̂_p, T is all of it), and T, T′ differ by at most one
          substituted row, which changes the sign products of its n̂_p − 1 pairs by ≤ 2 each.
      Both outputs are mixtures, over the coupling, of discrete Gaussians whose centres differ by
      at most Δ_p; Rényi divergence is jointly quasi-convex (van Erven & Harremoës 2014,
      Theorem 13), so the divergence of the mixtures is at most the worst component's,
      α·Δ_p²/(2σ_p²). Every pair uses the same subsample, so the argument holds for the whole
      vector of pairs at once. Noise: σ_p² = Δ_p²·s² with s² = P/(2ρ_C) for P pairs. Measured in
      units of Δ_p each partition's release has sensitivity 1 and noise s², and a row touches
      only its own partition (the subsamples of the others keep their distribution), so the
      vector over partitions has normalised L2 sensitivity 1: ρ_C/P per pair, recorded as one
      ``GaussianCharge`` per pair (sensitivity 1, σ² = s²; with one partition literally
      sensitivity Δ, σ² = Δ²s²). The P charges add up to ρ_C, the ρ of the whole vector.
      The subsample is part of the mechanism, so it is drawn from the noise source (distinct
      random 64-bit keys, :func:`secure_order_keys`), never from ``rng``. On a counting
      engine (DuckDB, Spark) the keys are drawn the same way for the engine's row positions
      (its fixed order: files by path, rows in file order), and only the chosen rows' codes
      (plus each row's partition keys) are read (:func:`engine.counting.codes_at`): the same
      subsample, so the analysis is unchanged (a uniform subset whatever the fixed order).
    * MLE. Rows are assigned i.i.d. uniformly (CSPRNG) to l_p = max(1, ⌊ñ_p/``mle_block_rows``⌋)
      blocks within their partition, so an added or removed row lands in one block. Each block's
      Pearson correlation r of the normal scores Φ⁻¹(mid-CDF) under the released margins
      (post-processing of released values: the other rows' scores do not depend on the added
      row; notes B.1.4) is clipped to [−1, 1] and the per-pair release is Σ_blocks round(g·r),
      g = ``mle_grid``: sensitivity 2g per pair and partition, and only one partition moves.
      Noise σ² = (2g)²·s²; one ``GaussianCharge`` per pair (sensitivity 2g, ρ_C/P).
    Everything after is post-processing of released values: partition totals and margins
    (precision-weighted, shrunk, projected), value orders, tau → correlation, the
    positive-definite repair, and copula sampling with the seeded ``rng``.

    Deviations from the paper (notes-cipher_dpcopula.md Part B, "the notes"), and why:
    * ρ-zCDP with discrete Gaussian noise on integer statistics instead of ε-DP Laplace, and
      add/remove neighbours throughout (the service's model);
    * margins are plain noisy histograms, not EFPA (the paper allows any 1-D method), split
      ∝ size^(2/3) (minimises the expected total L1 noise), not equally, and projected onto the
      simplex with the noisy total (as ``independent``) instead of clipped;
    * the budget is split by ``margin_share`` (default 0.9 ≈ k/(k+1) at the paper's k = 8);
    * Kendall: S is released on a public sample size n̂ derived from noisy counts, so its
      sensitivity 2(n̂ − 1) (tau's 4/(n+1) in Lemma 4.1) involves no private n; S is computed in
      O(a·b) from the pair's contingency table rather than O(n log n) on rows;
    * Kendall post-processing (both switchable): each noisy τ̃ is shrunk by max(0, 1 − v/τ̃²)
      with v its known noise variance (``shrink``: pure-noise coefficients on small data
      otherwise become spurious correlations; titanic at ε = 1: 2-way TVD 0.198 → 0.187), and
      divided by √((1 − Σp²)(1 − Σq²)) from the noisy margins (``ties="tau-b"``; tau-a counts
      tied pairs as 0, which shrinks the latent correlation of binary or skewed attributes;
      exact for median splits of a bivariate normal) before sin(π/2·τ);
    * MLE: the per-block estimate is the Pearson correlation of normal scores from the DP
      margins (the notes' approximation of the copula MLE, no Newton refinement), released on an
      integer grid; the paper's guidance l > C(m,2)/(0.025·ε₂) blocks is not enforced (adult
      gives about 240 blocks, far fewer, so its noise is large: use ``kendall``);
    * hybrid: the paper partitions on every attribute with fewer than 10 values; here only a
      prefix of the smallest ones is kept, chosen from the noisy count so that the
      per-partition margins stay accurate (adult at ε = 1, means of 3 runs, 2-/3-way TVD: all
      20 candidate partitions 0.056/0.119, the 4 kept by default 0.051/0.114, none
      0.068/0.152; on titanic, 1304 rows, any partitioning was worse than ``independent``).
      Other small attributes stay in the copula. Partition sizes, per-partition margins and
      n̂_p come from the noisy tables; a partition with n̂_p below ``kendall_min_rows`` keeps
      independent margins. A copula attribute that is also an unkept candidate gets its table
      averaged with the candidate histogram's (precision-weighted);
    * per-partition margins are shrunk towards T_p × the global margin by an empirical-Bayes
      weight before projection (:func:`partition_margins`; adult: 1-way 0.018 → 0.013 with 20
      partitions);
    * value order (``value_order="small"``): the paper imposes an arbitrary total order on
      nominal values. With partitions, the values of copula attributes with fewer than
      ``small_domain`` values are re-ordered by their first correspondence-analysis coordinate
      in the noisy (keys…, j) table (released before the correlations, so the re-coding is
      public), which makes nominal associations more monotone for the copula (adult:
      0.053/0.119 → 0.051/0.114);
    * sampling: rows are split over partitions ∝ their noisy counts (largest remainders); each
      attribute is drawn as min{v : F̃(v) > u}, F̃ the normalised CDF of its margin (the paper's
      1/(ñ+1) only matters where Φ⁻¹(F̃) is evaluated: the MLE scores use mid-CDFs clipped
      away from 0 and 1). The number of rows N is not the paper's n (private) but ``rows`` or
      the noisy total.
    """

    name = "dpcopula"
    description = (
        "DPCopula (Li, Xiong, Jiang 2014): noisy one-way margins and a noisy Gaussian-copula "
        "correlation matrix (from Kendall's tau), optionally one copula per partition of the "
        "small-domain attributes. Fast; keeps monotone pairwise dependence, not interactions."
    )
    Params = DPCopulaParams
    resamplable = True
    milestones = (
        Milestone("measure_margins", 0.0),
        Milestone("correlate", 0.3),
        Milestone("sample", 0.7),
    )

    def smallest_release_rho(self, domain: Domain, params: BaseModel, rho: Fraction) -> Fraction:
        """Per release, ρ/Δ²: the partition histogram, the smallest margin part and a pair's
        correlation release ρ_C/P with Δ = 2(kendall_max_rows − 1) (Kendall) or 2·mle_grid."""
        if not isinstance(params, DPCopulaParams):
            raise TypeError("params must be DPCopulaParams")
        d = len(domain)
        keys = exact_weight(params.partition_share)
        margins = exact_weight(params.margin_share)
        rest = rho * (1 - keys)
        weights = [size_weight(size) for size in domain.sizes]
        parts = [rho * keys, rest * margins * min(weights) / sum(weights)]
        pairs = d * (d - 1) // 2
        if pairs:
            if params.correlation == "kendall":
                sensitivity = 2 * (params.kendall_max_rows - 1)
            else:
                sensitivity = 2 * params.mle_grid
            parts.append(rest * (1 - margins) / (pairs * sensitivity**2))
        return min(parts)

    def estimate_resources(self, domain: Domain, params: BaseModel, rows: int) -> ResourceEstimate:
        """Per partition (at most ``max_partitions``): every margin, a correlation matrix and
        one pair's contingency table; the copula's normal samples as output."""
        if not isinstance(params, DPCopulaParams):
            raise TypeError("params must be DPCopulaParams")
        d = len(domain)
        partitions = params.max_partitions if params.hybrid else 1
        tables = partitions * (sum(domain.sizes) + d * d + largest_cells(domain, 2))
        pairs = d * (d - 1) // 2
        return resource_estimate(
            domain,
            2 * rows,
            table_cells=tables,
            extra_work=partitions * pairs * largest_cells(domain, 2),
        )

    def first_noise(
        self, domain: Domain, params: BaseModel, rho: Fraction
    ) -> tuple[NoisePreview, ...]:
        """The first measurement: the whole table when every column is a partition key; else
        the histogram of the candidate keys (``partition_share``·ρ); else, with no candidate,
        the one-way margin of every column (the margins' share ∝ size^(2/3)). Which keys are
        kept after the first one depends on its noisy total, so nothing later is previewed."""
        if not isinstance(params, DPCopulaParams):
            raise TypeError("params must be DPCopulaParams")
        candidates = (
            partition_keys(domain, params.small_domain, params.max_partitions)
            if params.hybrid
            else ()
        )
        if len(candidates) == len(domain):
            return (marginal_preview(candidates, rho),)
        if candidates:
            return (marginal_preview(candidates, rho * exact_weight(params.partition_share)),)
        budget = _split_budget(rho, params, False, True, _has_pairs(list(domain.sizes)))
        parts = split_rho(budget.margins, [size_weight(size) for size in domain.sizes])
        return one_way_previews(domain.attributes, parts)

    def engine_refusal(self, params: BaseModel) -> str | None:
        """DPCopula-MLE reads every row (its block estimates), so it runs only on codes in
        memory; DPCopula-Kendall reads counts and its subsample of rows by position."""
        if isinstance(params, DPCopulaParams) and params.correlation == "mle":
            return (
                f"method {self.name!r} with correlation 'mle' reads every row; it runs only "
                "on codes in memory, not on another counting engine (use 'kendall')"
            )
        return super().engine_refusal(params)

    def _synthesize_counts(
        self,
        data: CountingEngine,
        rho: Fraction,
        params: BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        assert isinstance(params, DPCopulaParams)
        # Decided from the engine alone, before anything is read (the params' refusal,
        # engine_refusal, was made by run).
        if not isinstance(data, Dataset) and not callable(getattr(data, "codes_at", None)):
            raise EngineRefused(
                f"method {self.name!r} reads a subsample of rows by position; this counting "
                "engine cannot, so it runs only on codes in memory, DuckDB or Spark"
            )
        source = noise_source if noise_source is not None else SecureRandom()
        domain = data.domain
        candidates = (
            partition_keys(domain, params.small_domain, params.max_partitions)
            if params.hybrid
            else ()
        )

        # 1. Partition counts, the keys kept, and margins (one (keys…, j) table per attribute).
        progress.milestone("measure_margins")
        progress(0.0, "measure")
        measurements: list[Measurement] = []
        keys: tuple[str, ...] = ()
        key_counts: FloatArray | None = None
        key_variance = 0.0
        candidate_histogram: Measurement | None = None
        budget = _split_budget(rho, params, False, True, _has_pairs(list(domain.sizes)))
        if len(candidates) == len(domain):
            # The whole domain is one small table: measure it with everything, sample from it.
            keys = candidates
            budget = _Budget(rho, Fraction(0), Fraction(0))
        elif candidates:
            rho_keys = rho * exact_weight(params.partition_share)
            histogram = measure_marginal(data, candidates, rho_keys, noise_source)
            measurements.append(histogram)
            candidate_histogram = histogram
            noisy_total = float(histogram.noisy_counts.sum())
            for k in range(len(candidates), -1, -1):
                rest = [size for a, size in domain.as_dict().items() if a not in candidates[:k]]
                budget = _split_budget(rho, params, True, True, _has_pairs(rest))
                cells = domain.cells(candidates[:k]) if k else 1
                if k == 0 or (
                    margin_noise(noisy_total, cells, rest, budget.margins)
                    <= params.max_margin_noise
                ):
                    keys = candidates[:k]
                    break
            dropped = tuple(range(len(keys), len(candidates)))
            key_counts = histogram.noisy_counts.sum(axis=dropped).astype(np.float64).reshape(-1)
            key_variance = float(histogram.sigma2) * (
                histogram.noisy_counts.size // max(key_counts.size, 1)
            )
        copula = [a for a in domain.attributes if a not in keys]
        n_partitions = domain.cells(keys) if keys else 1
        pairs = [
            (i, j)
            for i, j in itertools.combinations(range(len(copula)), 2)
            if domain.size(copula[i]) >= 2 and domain.size(copula[j]) >= 2
        ]
        if not copula:
            histogram = measure_marginal(data, keys, budget.keys, noise_source)
            measurements.append(histogram)
            key_counts = histogram.noisy_counts.astype(np.float64).reshape(-1)
            key_variance = float(histogram.sigma2)
        tables: list[Measurement] = []
        if copula:
            parts = split_rho(budget.margins, [size_weight(domain.size(a)) for a in copula])
            for j, (attr, part) in enumerate(zip(copula, parts, strict=True)):
                tables.append(measure_marginal(data, (*keys, attr), part, noise_source))
                progress(0.3 * (j + 1) / len(copula), "measure")
        measurements.extend(tables)

        counts, variances = _partition_counts(key_counts, key_variance, tables, n_partitions)
        total = max(0.0, float(counts.sum()))
        partition_totals = (
            project_to_simplex(counts, total) if total > 0 else np.zeros(n_partitions)
        )
        margins = [
            list(
                partition_margins(
                    *_margin_table(table, candidate_histogram, len(keys), n_partitions),
                    partition_totals,
                )
            )
            for table in tables
        ]

        # 2. Correlations per partition.
        progress.milestone("correlate")
        progress(0.3, "correlate")
        correlations = [np.eye(len(copula)) for _ in range(n_partitions)]
        releases: list[GaussianCharge] = []
        orders: dict[int, IntArray] = {}
        if pairs:
            rows_partition = _partition_of_rows(data, keys)
            ranks: dict[int, IntArray] = {}
            for j, attr in enumerate(copula):
                if _reordered(params, domain.size(attr)):
                    order = association_order(np.stack(margins[j]))
                    orders[j] = order
                    ranks[j] = np.argsort(order)
                    margins[j] = [margin[order] for margin in margins[j]]

            def fetch(positions: npt.NDArray[np.intp] | None) -> IntArray:
                codes = _rows(data, copula, positions)
                for j, rank in ranks.items():
                    codes[:, j] = rank[codes[:, j]]
                return codes

            pair_rho = budget.correlation / len(pairs)
            names = [(copula[a], copula[b]) for a, b in pairs]
            if params.correlation == "kendall":
                estimates, releases = _kendall_correlations(
                    _Columns(fetch, rows_partition, n_partitions),
                    [domain.size(a) for a in copula],
                    pairs,
                    names,
                    counts,
                    variances,
                    tie_scales(margins, pairs),
                    params,
                    pair_rho,
                    source,
                    progress,
                )
            else:
                scores_margins = [[margin[p] for margin in margins] for p in range(n_partitions)]
                estimates, releases = _mle_correlations(
                    _Columns(fetch, rows_partition, n_partitions),
                    scores_margins,
                    pairs,
                    names,
                    counts,
                    params,
                    pair_rho,
                    source,
                    progress,
                )
            for p in range(n_partitions):
                matrix = np.eye(len(copula))
                for k, (a, b) in enumerate(pairs):
                    matrix[a, b] = matrix[b, a] = estimates[p, k]
                correlations[p] = repair_correlation(matrix)

        # 3. Sampling (post-processing).
        progress.milestone("sample")
        progress(0.7, "sample")
        n_out = resolve_rows(rows, total, max_rows)
        model = FittedModel(
            method=self.name,
            domain=domain,
            estimated_total=total,
            body=CopulaModel(
                keys=tuple(keys),
                copula=tuple(copula),
                partition_totals=partition_totals,
                margins=tuple(
                    np.stack(margin).reshape(n_partitions, domain.size(a))
                    for margin, a in zip(margins, copula, strict=True)
                ),
                correlations=np.stack(correlations).reshape(n_partitions, len(copula), len(copula)),
                orders=tuple(orders.get(j) for j in range(len(copula))),
            ),
        )
        out = model.sample(n_out, rng)
        progress(1.0, "sample")

        return SynthesisResult(
            codes=out,
            measurements=tuple(measurements),
            rho_used=sum((m.rho for m in measurements), Fraction(0))
            + sum((r.rho for r in releases), Fraction(0)),
            estimated_total=total,
            releases=tuple(releases),
            model=model,
        )
