"""DP bin edges that approximate a numeric column's quantiles, from a noisy dyadic tree.

The mechanism (hierarchical histograms: Hay, Rastogi, Miklau, Suciu, "Boosting the Accuracy of
Differentially Private Histograms Through Consistency", PVLDB 2010; Qardaji, Yang, Li,
"Understanding Hierarchical Methods for Differentially Private Histograms", PVLDB 2013) with the
exact discrete Gaussian (Canonne, Kamath, Steinke, NeurIPS 2020) in place of Laplace noise:

1. A public grid cuts [lower, upper] into ``grid`` cells (integer-aligned cells for integer
   columns). Everything about the grid is a function of public inputs.
2. The tree: level 0 is the histogram of the values over the cells; level ℓ + 1 sums pairs of
   adjacent level-ℓ nodes (an odd node out has one child), up to a single root. Each level is a
   histogram of the rows over a partition of [lower, upper].
3. Every node of every level gets independent N_Z(0, σ²) noise with σ² = L/(2ρ), L levels.
4. Post-processing: the weighted least-squares (BLUE) leaf counts consistent with the whole noisy
   tree, computed exactly by the two-pass tree algorithm (Hay et al. 2010, Theorem 3, in its
   general form for unequal variances and nodes with one child). Their prefix sums estimate the
   rows below each grid boundary without bias; edge j is the first boundary where that estimate
   reaches j/bins of the estimated total. (Clamping negative leaves to 0 first would not do: the
   hundreds of empty cells in a tail each gain about 0.4 standard deviations of mass, which moves
   every quantile.) Equal edges are merged, so fewer bins than requested may come back.

Privacy claim. Neighbours differ by one added or removed row; that row lies in exactly one node
of each level, so each level's histogram has L2 sensitivity 1 and, with σ² = L/(2ρ), is
ρ/L-zCDP (CKS 2020, Theorem 14); the L levels compose to exactly ρ-zCDP (Bun & Steinke 2016,
Lemma 2.3). Steps 1 and 4 are post-processing or public. No other use is made of the data.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from engine.accounting import sigma2_for_rho
from engine.discovery.cost import DiscoveryCost, JsonScalar, exact_budget
from engine.noise import discrete_gaussian_noise

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Number = TypeVar("Number", np.int64, np.float64)

MECHANISM = "dp_quantile_edges"
DEFAULT_GRID = 1 << 10
"""Cells of the public grid by default: edges land on 1/1024ths of the public range."""
MAX_GRID = 1 << 16
MAX_BINS = 1 << 12
_MAX_EXACT_INTEGER = float(1 << 53)


@dataclass(frozen=True)
class QuantileBins:
    """Learned bin edges: ``edges[0] = lower``, ``edges[-1] = upper``, strictly increasing.

    ``requested_bins`` is what the caller asked for; ``bins`` (= len(edges) − 1) can be smaller
    when quantiles fell on the same grid boundary and were merged (``merged`` is then true). The
    edges are DP (see :func:`dp_quantile_edges`); they are public once released.
    """

    edges: tuple[float, ...]
    requested_bins: int
    cost: DiscoveryCost

    def __post_init__(self) -> None:
        edges = tuple(float(edge) for edge in self.edges)
        if len(edges) < 2:
            raise ValueError("bins need at least two edges")
        if not all(math.isfinite(edge) for edge in edges):
            raise ValueError("bin edges must be finite")
        if any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError("bin edges must be strictly increasing")
        if self.requested_bins < 1 or len(edges) - 1 > self.requested_bins:
            raise ValueError("there are more bins than were requested")
        object.__setattr__(self, "edges", edges)

    @property
    def bins(self) -> int:
        return len(self.edges) - 1

    @property
    def merged(self) -> bool:
        """Whether some requested bins were merged (the data put two quantiles in one cell)."""
        return self.bins < self.requested_bins


LOG_SCALE = 1.0
"""The symmetric-log grid's linear region: cells are equal in asinh(x / LOG_SCALE)."""


def grid_edges(
    lower: float, upper: float, cells: int, *, integer: bool = False, scale: str = "linear"
) -> FloatArray:
    """The public grid's boundaries: ``cells`` equal cells, or for ``integer`` columns cells of
    integer width ⌈(upper − lower)/cells⌉ (so possibly fewer cells), the last one ending at
    ``upper``. With ``scale="log"`` the cells are equal in asinh(x): about 0.1 % of the value
    wide far from 0 with 65,536 cells over ±1e15, nearly linear near 0 (integer columns: rounded
    to distinct integers). Function of public inputs only."""
    if scale == "log":
        points = LOG_SCALE * np.sinh(
            np.linspace(np.arcsinh(lower / LOG_SCALE), np.arcsinh(upper / LOG_SCALE), cells + 1)
        )
        points[0], points[-1] = lower, upper
        if integer:
            points = np.unique(np.round(points))
        return np.unique(points)
    if not integer:
        return np.linspace(lower, upper, cells + 1)
    span = int(upper - lower)
    width = max(1, -(-span // cells))
    inner = np.arange(int(lower), int(upper), width, dtype=np.float64)
    return np.append(inner, float(upper))


@dataclass(frozen=True)
class QuantileGrid:
    """The public grid a quantile discovery measures on: ``cells`` cells between the bounds
    (integer-width cells for ``integer`` columns, see :func:`grid_edges`). Everything here is a
    function of public inputs; :meth:`count` is the one step that reads data (not released)."""

    lower: float
    upper: float
    cells: int = DEFAULT_GRID
    integer: bool = False
    scale: str = "linear"  # or "log" (symmetric log, for ranges spanning magnitudes)

    def __post_init__(self) -> None:
        if self.scale not in ("linear", "log"):
            raise ValueError("the grid's scale is linear or log")
        lo, hi = _check_bounds(self.lower, self.upper, integer=self.integer)
        if isinstance(self.cells, bool) or not isinstance(self.cells, int):
            raise ValueError(f"grid must be an integer from 1 to {MAX_GRID}")
        if not 1 <= self.cells <= MAX_GRID:
            raise ValueError(f"grid must be an integer from 1 to {MAX_GRID}")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)
        if not np.all(np.diff(self.boundaries) > 0):
            raise ValueError("the bounds are too close together for this grid in double precision")

    @property
    def boundaries(self) -> FloatArray:
        return grid_edges(
            self.lower, self.upper, self.cells, integer=self.integer, scale=self.scale
        )

    def count(self, values: npt.ArrayLike) -> IntArray:
        """Rows per cell of ``values`` (non-missing, inside the bounds); add these up over
        batches to count a column that is read in pieces."""
        return _cell_counts(values, self.boundaries)


def dp_quantile_edges(
    values: npt.ArrayLike,
    *,
    lower: float,
    upper: float,
    bins: int,
    rho: Fraction | int | Decimal,
    grid: int = DEFAULT_GRID,
    integer: bool = False,
    source: random.Random | None = None,
) -> QuantileBins:
    """Bin edges approximating the ``bins``-quantiles of ``values``; exactly ρ-zCDP.

    ``values``: the column's non-missing values, all inside the PUBLIC bounds [lower, upper]
    (callers clip or refuse the others first; values outside, or NaN, are refused here, counted
    but never shown). Cells and bins are half-open [a, b) except the last, which includes
    ``upper``, as in ``engine.tables.encoding``. ``integer``: the bounds must be integers and every
    edge is an integer. ``source=None`` draws the noise from the OS CSPRNG.

    Privacy: see the module docstring and :func:`dp_quantile_edges_from_counts`.
    """
    cells = QuantileGrid(lower, upper, grid, integer)
    _check_quantile_budget(rho, bins)
    counts = cells.count(values) if bins > 1 else np.zeros(0, dtype=np.int64)
    return dp_quantile_edges_from_counts(counts, grid=cells, bins=bins, rho=rho, source=source)


def _check_quantile_budget(rho: Fraction | int | Decimal, bins: int) -> Fraction:
    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be an integer from 1 to {MAX_BINS}")
    return budget


def dp_quantile_edges_from_counts(
    leaf_counts: npt.ArrayLike,
    *,
    grid: QuantileGrid,
    bins: int,
    rho: Fraction | int | Decimal,
    source: random.Random | None = None,
) -> QuantileBins:
    """:func:`dp_quantile_edges` from the column's exact rows per cell of ``grid``
    (:meth:`QuantileGrid.count`, summed over batches); exactly ρ-zCDP.

    Privacy: L = ⌈log₂ cells⌉ + 1 histograms (the dyadic tree over the cells) of L2 sensitivity 1
    under add/remove-one-row (one row is in exactly one node per level), each with discrete
    Gaussian noise σ² = L/(2ρ): ρ-zCDP in total, δ = 0. ``bins = 1`` needs no data: it returns
    [lower, upper] at cost 0 without reading ``leaf_counts``.
    """
    budget = _check_quantile_budget(rho, bins)
    lo, hi = grid.lower, grid.upper
    boundaries = grid.boundaries
    cells = boundaries.size - 1
    parameters: dict[str, JsonScalar] = {
        "lower": lo,
        "upper": hi,
        "bins": bins,
        "grid": grid.cells,
        "integer": grid.integer,
    }
    if bins == 1:
        cost = DiscoveryCost(MECHANISM, Fraction(0), parameters={**parameters, "levels": 0})
        return QuantileBins((lo, hi), 1, cost)
    counts = np.asarray(leaf_counts)
    if counts.shape != (cells,) or not np.issubdtype(counts.dtype, np.integer):
        raise ValueError(f"leaf_counts must be {cells} integer counts, one per grid cell")
    if counts.size and int(counts.min()) < 0:
        raise ValueError("leaf_counts must be non-negative")
    counts = counts.astype(np.int64)
    levels = (counts.size - 1).bit_length() + 1  # ⌈log₂ cells⌉ + 1, in integers
    sigma2 = sigma2_for_rho(1, budget / levels)
    tree = _tree_levels(counts)
    if len(tree) != levels:
        raise AssertionError("the tree has an unexpected number of levels")
    noisy = [level + discrete_gaussian_noise(sigma2, level.size, source) for level in tree]
    leaves = _consistent_leaves(noisy, float(sigma2))
    edge_cells = _quantile_cells(leaves, bins)
    cost = DiscoveryCost(
        MECHANISM,
        budget,
        parameters={
            **parameters,
            "levels": levels,
            "sigma2": str(sigma2),
            "scale": grid.scale,
        },
    )
    return QuantileBins(tuple(boundaries[edge_cells].tolist()), bins, cost)


def _check_bounds(lower: float, upper: float, *, integer: bool) -> tuple[float, float]:
    lo, hi = float(lower), float(upper)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise ValueError("the bounds must be finite numbers with lower < upper")
    if not math.isfinite(hi - lo):
        raise ValueError("the bounds are too far apart for double precision")
    if integer and not (lo.is_integer() and hi.is_integer()):
        raise ValueError("integer columns need integer bounds")
    if integer and max(abs(lo), abs(hi)) > _MAX_EXACT_INTEGER:
        raise ValueError("integer bounds must lie within ±2^53 (exact in double precision)")
    return lo, hi


def _cell_counts(values: npt.ArrayLike, boundaries: FloatArray) -> IntArray:
    """Rows per grid cell (not released). Refuses NaN and values outside the bounds by count."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1:
        raise ValueError("values must be one-dimensional")
    missing = int(np.isnan(data).sum())
    if missing:
        raise ValueError(f"values contain {missing} missing (NaN) rows; drop them first")
    outside = int(((data < boundaries[0]) | (data > boundaries[-1])).sum())
    if outside:
        raise ValueError(f"{outside} rows lie outside the public bounds; clip or refuse them first")
    cells = boundaries.size - 1
    index = np.minimum(np.searchsorted(boundaries, data, side="right") - 1, cells - 1)
    return np.bincount(index, minlength=cells).astype(np.int64)


def _pair_sums(level: npt.NDArray[Number]) -> npt.NDArray[Number]:
    """Sums of adjacent pairs; an odd last element stands alone (its node has one child)."""
    if level.size % 2:
        level = np.append(level, np.zeros(1, dtype=level.dtype))
    summed: npt.NDArray[Number] = level.reshape(-1, 2).sum(axis=1)
    return summed


def _tree_levels(leaf_counts: IntArray) -> list[IntArray]:
    """[leaves, pair sums, pair sums of those, …, root]: each level partitions the rows."""
    levels = [leaf_counts]
    while levels[-1].size > 1:
        levels.append(_pair_sums(levels[-1]))
    return levels


def _consistent_leaves(noisy: list[IntArray], sigma2: float) -> FloatArray:
    """Least-squares leaf counts given every noisy node of the tree (all with variance σ²).

    Exact Gaussian tree elimination: bottom-up, each node's estimate from its subtree combines its
    own measurement with the sum of its children's estimates by inverse variance; top-down, each
    parent's final value's residual against its children's sum is shared out in proportion to
    the children's variances. Post-processing only.
    """
    estimates: list[FloatArray] = [noisy[0].astype(np.float64)]
    variances: list[FloatArray] = [np.full(noisy[0].size, sigma2)]
    for measured in noisy[1:]:
        child_sum = _pair_sums(estimates[-1])
        child_var = _pair_sums(variances[-1])
        precision = 1.0 / sigma2 + 1.0 / child_var
        estimates.append((measured / sigma2 + child_sum / child_var) / precision)
        variances.append(1.0 / precision)
    final = estimates[-1]
    for level in range(len(noisy) - 1, 0, -1):
        children, child_variance = estimates[level - 1], variances[level - 1]
        residual = final - _pair_sums(children)
        share = np.repeat(residual / _pair_sums(child_variance), 2)[: children.size]
        final = children + share * child_variance
    return final


def _quantile_cells(leaves: FloatArray, bins: int) -> IntArray:
    """Grid-boundary indices of the edges: 0, the first boundary where the estimated rows below it
    reach j/bins of the estimated total for j = 1 … bins − 1 (duplicates and the ends merged),
    and the last boundary. The prefix sums need not be monotone (the leaves are noisy); the
    first crossing is the first crossing of their running maximum.

    When the estimated total is not positive (almost no rows, or tiny ρ) the CDF is taken as
    uniform over the cells, i.e. equal-width bins: a data-independent fallback."""
    cells = leaves.size
    total = float(leaves.sum())
    if total > 0:
        cdf = np.cumsum(leaves) / total
    else:
        cdf = np.arange(1, cells + 1, dtype=np.float64) / cells
    targets = np.arange(1, bins, dtype=np.float64) / bins
    # cdf[i - 1] is the CDF at boundary i; interior boundaries are 1 … cells − 1. The noisy CDF
    # need not be monotone: its first crossing of a target is that of its running maximum.
    running = np.maximum.accumulate(cdf[: cells - 1])
    interior = np.searchsorted(running, targets, side="left") + 1
    inner = np.unique(interior[interior < cells])
    return np.concatenate([[0], inner, [cells]]).astype(np.int64)
