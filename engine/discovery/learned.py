"""A learned numeric or temporal domain: a DP range, DP bins inside it and a DP value profile.

A column declared ``{"quantiles": k, "range": true}`` gives only a PUBLIC window (the draft's
generic ±10^15 or 1900 … 2099, or a window by meaning such as [-90, 90] for a latitude); its
range, its k bins and the shape of its values inside each bin are learned here, in two stages
that each read the column once (the caller's counting passes):

1. **Coarse range** (:func:`learn_coarse_range`). The window is cut into :data:`RANGE_CELLS`
   public cells (equal in asinh(x) for wide windows, equal width otherwise), plus one cell for the
   values below the window and one for those above it. The histogram of the rows over those
   cells gets discrete Gaussian noise. The range is the hull of the *strong* cells, whose noisy
   count clears a threshold that an empty cell passes with probability at most
   :data:`STRONG_FALSE_HIT` over the whole window, extended cell by cell into neighbours whose
   noisy count clears a lower threshold (an empty neighbour passes with probability at most
   :data:`EXTEND_FALSE_HIT`): one noisy false hit away from the data can no longer stretch a range
   (the previous rule kept every cell over a 5 % family-wise threshold, and one false hit in 20
   columns put a latitude's range at 70.9). A weak isolated hit is ignored.
2. **Fine CDF** (:func:`learn_bins`). The hull is cut into at most :data:`MAX_FINE_CELLS` public
   cells laid over the hull itself (not over the window: a latitude between 44.8 and 45.1 gets
   hundreds of cells, not five), aligned on the column's step for integer, fixed-decimal and
   calendar columns (each value alone in its cell where cells are narrow). Rows outside
   the hull are clamped into its end cells. A dyadic tree of noisy counts over the cells
   (Hay et al. 2010; Qardaji et al. 2013) gives, after least-squares consistency and an isotonic
   fit, a monotone noisy CDF. From it, with no further access to the data:

   * the outer edges: the points where the estimated count below (above) reaches
     max(0.5 % of the rows, 1.5 standard deviations of the CDF's noise), a few grid cells inside
     the real 0.5 % and 99.5 % quantiles on large tables; the rows beyond are clamped into the
     end bins, as ``clip`` does (the margin makes an edge outside the real range unlikely, so the
     clamped values stay inside it);
   * the inner edges: the k-quantiles of an even mixture of the noisy CDF and the uniform
     distribution over the fine cells between the outer edges (:data:`UNIFORM_SHARE`), so each
     bin holds at most about 2/k of the rows and spans at most about 2/k of the range: a long
     tail, where a column's variance and its relations to others live, gets bins of its own
     (pure quantile bins put the top 1/k of the rows, say flight delays from 75 minutes to the
     clamped 99.5 % quantile near 236, into one bin); or one bin per value for stepped columns
     (integer, fixed-decimal, calendar) whose range holds at most :data:`UNIT_FACTOR`·k values;
   * the profile: :data:`PROFILE_POINTS` points of the clamped distribution's quantile function
     (its percentiles), from which decoding draws values inside a bin
     (engine/columns/profile.py), so one-way distributions follow the data inside coarse bins.

Privacy claim. Neighbours differ by one added or removed row. Stage 1 is a histogram over a public
partition of the real line (the window's cells and the two outside cells): L2 sensitivity 1, with
N_Z(0, 1/(2ρ₁)) noise ρ₁-zCDP (Canonne, Kamath, Steinke, NeurIPS 2020, Theorem 14); the hull, the
thresholds' tests and the warnings are post-processing. Given stage 1's output (public), stage 2's
cells partition the real line (after the public clamping) and each of the tree's L levels is a
histogram of sensitivity 1; with σ² = L/(2ρ₂) per node the tree is ρ₂-zCDP. Stage 2's partition
depends on stage 1's output only, so the column costs ρ₁ + ρ₂ = ρ by adaptive composition (Bun &
Steinke, TCC 2016, Lemma 2.3). Everything computed from the noisy counts (consistency, isotonic
fit, edges, profile, reliability flags) is post-processing. δ = 0.
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Literal

import numpy as np
import numpy.typing as npt

from engine.accounting import sigma2_for_rho
from engine.discovery.cost import DiscoveryCost, JsonScalar, exact_budget
from engine.discovery.quantiles import MAX_BINS, _consistent_leaves, _tree_levels
from engine.discovery.tails import smallest_tail_threshold
from engine.noise import discrete_gaussian_noise

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Scale = Literal["linear", "log"]

MECHANISM = "dp_learned_bins"

RANGE_CELLS = 64
"""Public cells of a window in stage 1 (for the generic ±10^15 window, each spans a factor of
about 3 in magnitude; for [-90, 90], 2.8 degrees)."""
LINEAR_WINDOW = 1e5
"""Windows at most this wide are cut into equal-width cells; wider ones on a symmetric-log scale
(equal in asinh(x)), which keeps magnitudes from 1 to 10^15 apart with 64 cells."""
STRONG_FALSE_HIT = Fraction(1, 1000)
"""An empty window cell clears the strong threshold with probability at most 0.1 % in all (a
Bonferroni split over the cells)."""
EXTEND_FALSE_HIT = Fraction(1, 40)
"""An empty neighbour of the hull (one cell, or a run of 2 or 4) joins it with probability at
most 2.5 % per step and side."""
COARSE_SHARE = Fraction(1, 4)
"""Of a learned range's ρ, what the coarse histogram of the window gets."""
ZOOM_SHARE = Fraction(1, 4)
"""... what a zoom into the coarse range's one or two cells gets, when the range is that narrow
(else it goes to the fine tree, which gets the rest in any case)."""
ZOOM = 64
"""Subcells per window cell counted in the first pass, for the zoom (a second level of 64 cells
inside the range's cells: the window resolved into 4,096 parts before the fine stage)."""
ZOOM_CELLS = 2
"""The coarse range is zoomed into when it spans at most this many window cells."""
ZOOM_KEEP = 0.9
"""A zoom's range is kept unless the noisy rows it leaves out exceed this share's complement of
the zoomed cells' noisy rows by more than :data:`ZOOM_NOISE_SDS` standard deviations of their
noise (the left-out subcells' noise alone must not drop a right zoom)."""
ZOOM_NOISE_SDS = 3.0
TAIL_SHARE = 0.005
"""The outer edges aim at the 0.5 % and 99.5 % quantiles ..."""
TAIL_MARGIN = 1.5
"""... or further in, by this many standard deviations of the noisy CDF, when that is larger."""
NOISE_PER_LEVEL = 0.33
"""Standard deviation of the consistent tree's noisy prefix counts, per level, at ρ₂ = 1: at most
0.33·L/√ρ₂ over every boundary for trees of more than :data:`EXACT_SD_CELLS` cells (measured
over 200 trees of 64 to 4096 cells: 0.33, 0.31, 0.31, 0.30 ·L; tests/engine/discovery/
test_learned.py checks it). Shallower trees get their exact deviation instead."""
MAX_FINE_CELLS = 1024
MIN_FINE_CELLS = 64
SMALLEST_FINE_CELLS = 16
"""The fewest fine cells a noisy budget brings the grid down to (:data:`CDF_NOISE_TARGET`)."""
CDF_NOISE_TARGET = 0.1
"""The fine grid is made shallower until its noisy CDF's standard deviation is at most this share
of the column's (noisy) values, or it has :data:`SMALLEST_FINE_CELLS` cells."""
UNIT_CELLS_FACTOR = 4
"""A stepped column whose coarse range holds at most this many times the fine cells' number of
values gets one fine cell per value instead (a deeper tree, but point masses stay exact)."""
ROWS_PER_FINE_CELL = 8
"""The fine grid has about one cell per this many (noisy) rows, between the two limits above: a
deeper tree on a small table only adds noise."""
UNIT_FACTOR = 2
"""Stepped columns (integer, fixed-decimal, calendar) whose learned range holds at most this many
times k values get one bin per value."""
MAX_STEPS = float(2**40)
"""A fine grid is aligned on the column's step only while its bounds, counted in steps, are well
inside double precision (about 1.1·10^12 steps: 10^10 in cents, 10^12 for integers); beyond,
its cells are not aligned (and values many rows share are smeared inside a cell)."""
PROFILE_POINTS = 101
"""Points of the released value profile: the clamped distribution's percentiles 0 … 100."""
MAX_TAIL = 0.1
"""... but never more than this share of the rows at either end."""
UNIFORM_SHARE = 0.5
"""The inner edges are the k-quantiles of a mixture with this weight on the uniform distribution
over the fine cells between the outer edges and the rest on the noisy CDF (:func:`_inner_edges`).
Measured on the raw tables at ε = 1 with `mst` (docs/benchmarks.md, "Inner edges"): against pure
quantiles (0), flights' ML R² 0.74 → 0.79 and loans' 0.88 → 0.91–0.92, for Spearman differences
up by 0.002–0.007 and diamonds' 2-way TVD on the real deciles 0.068 → 0.072."""
UNRELIABLE_NOISE = 0.2
"""When the noisy CDF's standard deviation is above this share of the estimated rows, its
quantiles are noise: the bins fall back to equal widths over the coarse range, with no profile."""
_EPS = 1e-9


def _threshold(sigma2: Fraction, probability: Fraction) -> int:
    return smallest_tail_threshold(sigma2, probability)


def _present_values(values: npt.ArrayLike) -> FloatArray:
    """``values`` as a one-dimensional float array; NaN is refused (callers drop missing
    values first), counted in the message, never shown."""
    data = np.asarray(values, dtype=np.float64)
    if data.ndim != 1:
        raise ValueError("values must be one-dimensional")
    if np.isnan(data).any():
        raise ValueError("values contain missing (NaN) rows; drop them first")
    return data


@dataclass(frozen=True)
class Window:
    """The public window a range is learned in, in the column's units (numbers; for dates and
    datetimes, periods of the column's resolution since 1970). Function of public inputs only."""

    lower: float
    upper: float
    step: float | None = None  # 1 for integers and periods, 10^-d for d decimals, None: any real
    cells: int = RANGE_CELLS
    linear: bool = False  # equal-width cells whatever the width (calendar periods)

    def __post_init__(self) -> None:
        lo, hi = float(self.lower), float(self.upper)
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
            raise ValueError("a window needs finite bounds with lower < upper")
        if not math.isfinite(hi - lo):
            raise ValueError("the window is too wide for double precision")
        if isinstance(self.cells, bool) or not isinstance(self.cells, int) or self.cells < 2:
            raise ValueError("a window needs at least two cells")
        if self.step is not None and not (math.isfinite(self.step) and self.step > 0):
            raise ValueError("a step is a positive number")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @property
    def scale(self) -> Scale:
        linear = self.linear or self.upper - self.lower <= LINEAR_WINDOW
        return "linear" if linear else "log"

    @property
    def boundaries(self) -> FloatArray:
        """The cells' boundaries (``cells + 1``, strictly increasing)."""
        return self._points(self.cells)

    @property
    def sub_boundaries(self) -> FloatArray:
        """The boundaries of the :data:`ZOOM` subcells of every cell (``cells·ZOOM + 1``; every
        ZOOM-th one is a cell boundary)."""
        return self._points(self.cells * ZOOM)

    def _points(self, parts: int) -> FloatArray:
        if self.scale == "linear":
            return np.linspace(self.lower, self.upper, parts + 1)
        points = np.sinh(np.linspace(np.arcsinh(self.lower), np.arcsinh(self.upper), parts + 1))
        points[0], points[-1] = self.lower, self.upper
        return points

    @property
    def counted(self) -> int:
        """The length of :meth:`count`'s answer."""
        return self.cells * ZOOM + 2

    def count(self, values: npt.ArrayLike) -> IntArray:
        """Rows per subcell: ``[below the window, subcell 0, …, above the window]`` for finite
        ``values`` (NaN refused: the caller drops missing values). Not released."""
        data = _present_values(values)
        bounds = self.sub_boundaries
        index = np.searchsorted(bounds, data, side="right")  # 0 below, parts+1 above
        index[data == bounds[-1]] = bounds.size - 1  # the last cell includes the upper bound
        return np.bincount(index, minlength=self.counted).astype(np.int64)

    def cell_counts(self, counts: npt.ArrayLike) -> IntArray:
        """:meth:`count`'s subcell counts summed per window cell: ``[below, cell 0, …, above]``."""
        exact = np.asarray(counts)
        if exact.shape != (self.counted,) or not np.issubdtype(exact.dtype, np.integer):
            raise ValueError(f"counts must be {self.counted} integers")
        if exact.size and int(exact.min()) < 0:
            raise ValueError("counts must be non-negative")
        inside = exact[1:-1].astype(np.int64).reshape(self.cells, ZOOM).sum(axis=1)
        out: IntArray = np.concatenate([[exact[0]], inside, [exact[-1]]]).astype(np.int64)
        return out


@dataclass(frozen=True)
class CoarseRange:
    """Stage 1's release: the range ``[lower, upper]`` (boundaries of window cells), whether a
    strong cell was found, and the noisy counts of rows outside the window (DP outputs, public)."""

    lower: float
    upper: float
    reliable: bool
    noisy_below: float
    noisy_above: float
    noisy_inside: float
    cost: DiscoveryCost
    # The noisy counts of every cell (below, the window's cells, above), for a second look.
    noisy: tuple[float, ...] = ()
    # A second look measured the window's cells again (with the share a zoom would have had).
    remeasured: bool = False
    # The window cells the range spans (first, last), and whether it was zoomed into.
    cells: tuple[int, int] = (0, 0)
    zoomed: bool = False
    # The ρ behind ``noisy`` (the outside cells' noise): the first look's, or both looks'.
    look_rho: Fraction = Fraction(0)
    # Nothing stood out and the range is the whole (narrow) window, not a best guess.
    whole_window: bool = False

    @property
    def noisy_in_range(self) -> float:
        """The noisy rows of the range's window cells, and of the outside cell next to a range
        that reaches the window's end (its rows are clamped onto that end). Post-processing."""
        if not self.noisy:
            raise ValueError("this coarse range carries no per-cell counts")
        first, last = self.cells
        found = float(sum(self.noisy[first + 1 : last + 2]))  # noisy[0] is the cell below
        if first == 0:
            found += self.noisy[0]
        if last == len(self.noisy) - 3:
            found += self.noisy[-1]
        return found


SCALES = (1, 2, 4, 8, 16)
"""Widths, in window cells, of the runs of cells stage 1 tests (data spread thinly over several
cells is found as a run when no single cell of it stands out)."""


def _run_sums(values: FloatArray, width: int) -> FloatArray:
    """Sums of every run of ``width`` consecutive cells (one per starting cell that fits)."""
    total = np.concatenate([[0.0], np.cumsum(values)])
    sums: FloatArray = total[width:] - total[:-width]
    return sums


def _hull(inside: FloatArray, sigma2: Fraction, exact: bool) -> tuple[int, int, bool, int]:
    """The first and last cells of the strong runs at the finest width that has one, whether
    one was found, and the single-cell threshold (post-processing of the noisy counts).

    A run of w cells is strong when its noisy sum clears τ_w: for w = 1 the exact discrete
    Gaussian tail threshold, for w > 1 the sub-Gaussian bound σ·√(2w·ln(1/p)) (a discrete
    Gaussian N_Z(0, σ²) is σ²-sub-Gaussian: CKS 2020, Corollary 9), each at p =
    :data:`STRONG_FALSE_HIT` / (cells · len(SCALES)), so an empty window passes any test with
    probability at most :data:`STRONG_FALSE_HIT`. Without a strong run, the run with the largest
    noisy sum per standard deviation is the range, and it is marked unreliable. With ``exact``
    false (a combination of two measurements, no longer a discrete Gaussian), every width uses
    the sub-Gaussian bound."""
    cells = inside.size
    p = STRONG_FALSE_HIT / (cells * len(SCALES))
    sigma = math.sqrt(float(sigma2))
    single = _threshold(sigma2, p) if exact else _sub_gaussian(sigma, 1, float(p))
    best: tuple[float, int, int] | None = None
    for width in SCALES:
        if width > cells:
            break
        sums = _run_sums(inside, width)
        tau = single if width == 1 else _sub_gaussian(sigma, width, float(p))
        strong = np.flatnonzero(sums >= tau)
        if strong.size:
            return int(strong[0]), int(strong[-1]) + width - 1, True, single
        start = int(np.argmax(sums))  # the first of the largest
        score = float(sums[start]) / (sigma * math.sqrt(width))
        if best is None or score > best[0]:
            best = (score, start, start + width - 1)
    assert best is not None
    return best[1], best[2], False, single


EXTEND_WIDTHS = (1, 2, 4)
"""Runs of cells next to the hull an extension step tests (the data's thin tails)."""


def _sub_gaussian(sigma: float, width: int, p: float) -> int:
    """σ·√(2w·ln(1/p)), rounded up: a sum of w independent σ²-sub-Gaussian noises exceeds it
    with probability at most p."""
    return math.ceil(sigma * math.sqrt(2 * width * math.log(1 / p)))


def _extension_thresholds(sigma2: Fraction, exact: bool = True) -> tuple[int, ...]:
    """Per width of :data:`EXTEND_WIDTHS`, the threshold an empty run clears with probability at
    most :data:`EXTEND_FALSE_HIT` / len(EXTEND_WIDTHS) (exact for one cell of one measurement,
    sub-Gaussian otherwise)."""
    p = EXTEND_FALSE_HIT / len(EXTEND_WIDTHS)
    sigma = math.sqrt(float(sigma2))
    return tuple(
        _threshold(sigma2, p) if w == 1 and exact else _sub_gaussian(sigma, w, float(p))
        for w in EXTEND_WIDTHS
    )


def _extension(beyond: FloatArray, thresholds: tuple[int, ...]) -> int:
    """How many cells of ``beyond`` (the noisy counts next to the hull, nearest first) one
    extension step adds: the narrowest run whose sum clears its threshold, else 0."""
    for width, tau in zip(EXTEND_WIDTHS, thresholds, strict=True):
        if beyond.size >= width and float(beyond[:width].sum()) >= tau:
            return width
    return 0


MASS_FALSE_HIT = 1e-3
"""The rows beyond the hull on one side, all cells together, count as real when their noisy sum
clears a sub-Gaussian threshold an empty side passes with probability at most this."""
MASS_SHARE = 0.75
"""... and the hull then grows until it holds this share of them (the rest is clamped)."""


def _mass_extension(beyond: FloatArray, sigma: float) -> int:
    """How many cells of ``beyond`` (nearest first) to add when the rows beyond the hull are
    real but spread too thinly for any cell or short run to stand out (a long tail, half of a
    column spread over forty cells): their noisy sum, of standard deviation σ·√k over k cells,
    is tested against σ·√(2k·ln(1/p)) (sub-Gaussian, p = :data:`MASS_FALSE_HIT`), and the hull
    grows to the cell where the noisy sum from the hull outward reaches :data:`MASS_SHARE` of
    it. Post-processing of the noisy counts."""
    cells = beyond.size
    if not cells:
        return 0
    total = float(beyond.sum())
    if total < sigma * math.sqrt(2 * cells * math.log(1 / MASS_FALSE_HIT)):
        return 0
    reach = int(np.searchsorted(np.maximum.accumulate(np.cumsum(beyond)), MASS_SHARE * total))
    return min(reach + 1, cells)


def learn_coarse_range(
    counts: npt.ArrayLike,
    *,
    window: Window,
    rho: Fraction | int,
    source: random.Random | None = None,
) -> CoarseRange:
    """Stage 1: the hull of the strong cells (or runs of cells), extended into corroborated
    neighbours; ρ-zCDP.

    ``counts``: :meth:`Window.count` summed over batches (``cells + 2`` non-negative integers).
    Privacy: a histogram over a public partition (L2 sensitivity 1) with N_Z(0, 1/(2ρ)) noise
    (CKS 2020, Theorem 14); the rest is post-processing (:func:`_hull`). If nothing clears the
    strong thresholds, ``reliable`` is false.
    """
    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    exact = window.cell_counts(counts)
    sigma2 = sigma2_for_rho(1, budget)
    noisy = exact + discrete_gaussian_noise(sigma2, exact.size, source)
    return _coarse(noisy.astype(np.float64), window, sigma2, budget, exact=True)


def remeasure_coarse_range(
    counts: npt.ArrayLike,
    *,
    window: Window,
    first: CoarseRange,
    rho: Fraction | int,
    source: random.Random | None = None,
) -> CoarseRange:
    """A second look when the first found nothing strong: the same histogram measured again at
    ``rho`` (the share a zoom would have had), combined
    with the first by inverse-variance weights, and the hull found again on the combination
    (sub-Gaussian thresholds: σ² = 1/(2(ρ₁ + ρ))). Privacy: a second histogram over the same public
    partition, ρ-zCDP, chosen adaptively from the first's public output (Bun & Steinke 2016,
    Lemma 2.3): ρ₁ + ρ in all; the combination and the hull are post-processing."""
    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    exact = window.cell_counts(counts)
    if len(first.noisy) != exact.size:
        raise ValueError("the first look measured other cells")
    sigma2 = sigma2_for_rho(1, budget)
    again = exact + discrete_gaussian_noise(sigma2, exact.size, source)
    before = first.cost.rho
    total = before + budget
    combined = (np.asarray(first.noisy) * float(before) + again * float(budget)) / float(total)
    found = _coarse(combined, window, sigma2_for_rho(1, total), total, exact=False)
    return replace(found, remeasured=True)


def zooms(grid: FineGrid) -> bool:
    """Whether a range of at most :data:`ZOOM_CELLS` window cells is zoomed into, given the fine
    grid it would get without a zoom (public: from the coarse release, the noisy count and the
    budget): yes when that grid has fewer than :data:`MAX_FINE_CELLS` cells (few rows, or a
    budget too noisy for a deep tree, so a window cell would be cut too coarsely: a 3-year cell
    of the date window into 18-day cells, a factor-3 cell into 3.5 % steps), unless its cells
    already hold one value each (subcells narrower than a value would only lose values). With
    all its cells, the grid resolves a factor-3 cell to 0.1 % and a linear window to 1/65,536,
    and the zoom's ρ serves the fine stage better."""
    if grid.step is not None and bool(np.all(np.diff(grid.boundaries) <= grid.step * (1 + 1e-6))):
        return False
    return grid.cells < MAX_FINE_CELLS


def zoom_coarse_range(
    counts: npt.ArrayLike,
    *,
    window: Window,
    coarse: CoarseRange,
    rho: Fraction | int,
    source: random.Random | None = None,
) -> CoarseRange:
    """A zoom into a narrow coarse range (at most :data:`ZOOM_CELLS` window cells): the
    histogram of the rows over those cells' :data:`ZOOM` subcells each, with N_Z(0, 1/(2ρ))
    noise, and the hull found again inside them (the same strong runs, extensions and mass as
    the first look). A week of timestamps in a 200-year window is then located to a few days
    before the fine stage, not to three years. If nothing stands out, the coarse range stays.

    Privacy: the subcells of the released cells partition part of the line (a function of the
    first look's public output); one row lies in at most one of them: L2 sensitivity 1, ρ-zCDP
    (CKS 2020, Theorem 14), adaptively composed with the first look (Bun & Steinke 2016, Lemma
    2.3). The hull is post-processing."""
    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    exact = np.asarray(counts)
    if exact.shape != (window.counted,) or not np.issubdtype(exact.dtype, np.integer):
        raise ValueError(f"counts must be {window.counted} integers")
    first, last = coarse.cells
    inside = exact[1 + first * ZOOM : 1 + (last + 1) * ZOOM].astype(np.int64)
    sigma2 = sigma2_for_rho(1, budget)
    noisy = inside + discrete_gaussian_noise(sigma2, inside.size, source)
    bounds = window.sub_boundaries[first * ZOOM : (last + 1) * ZOOM + 1]
    values = noisy.astype(np.float64)
    start, stop, reliable, _ = _cells(values, sigma2, exact=True)
    cost = DiscoveryCost(
        coarse.cost.mechanism,
        coarse.cost.rho + budget,
        parameters={**coarse.cost.parameters, "zoom": ZOOM},
    )
    # The zoomed range must hold nearly all the rows of the cells it zooms into: data spread
    # thinly over the subcells can clear a threshold in one short run only, and a range cut to
    # that run would clamp most of the column. What it leaves out is estimated twice, from
    # independent noise: the left-out subcells' sum (variance σ² per subcell) and the first
    # look's count of the zoomed cells less the kept subcells (σ₁² per cell plus σ² per kept
    # subcell); the inverse-variance mean of the two is as precise as the better one or more.
    # A narrow right zoom leaves out many empty subcells, whose noise alone (σ·√63 for one kept
    # subcell) must not drop it: the first look's estimate is the precise one there. A zoom onto
    # a short run in the middle of a column spread over the cells (3,286 values of a log wage
    # on a 24-column table at ε = 1, cut to its middle 60 %) keeps few subcells, so the first
    # look sees the rows it leaves out. Only a clear excess (beyond 3 σ of the estimate) drops it.
    kept_cells = stop + 1 - start
    kept = float(values[start : stop + 1].sum())
    direct = float(values.sum()) - kept
    direct_var = float(sigma2) * (values.size - kept_cells)
    first_look = float(np.sum(coarse.noisy[1 + first : 2 + last])) if coarse.noisy else None
    estimate, variance = direct, direct_var
    if first_look is not None and coarse.look_rho > 0:
        via_var = (
            float(sigma2_for_rho(1, coarse.look_rho)) * (last + 1 - first)
            + float(sigma2) * kept_cells
        )
        if direct_var <= 0:
            estimate, variance = direct, 0.0
        else:
            weight = via_var / (via_var + direct_var)  # the direct estimate's weight
            estimate = weight * direct + (1 - weight) * (first_look - kept)
            variance = direct_var * via_var / (direct_var + via_var)
    allowed = (1 - ZOOM_KEEP) * max(kept + estimate, 0.0) + ZOOM_NOISE_SDS * math.sqrt(variance)
    if not reliable or estimate > allowed:
        return replace(coarse, cost=cost, zoomed=True)
    low, high = float(bounds[start]), float(bounds[stop + 1])
    return replace(coarse, lower=low, upper=high, cost=cost, zoomed=True)


def _cells(
    inside: FloatArray, sigma2: Fraction, *, exact: bool
) -> tuple[int, int, bool, tuple[int, int]]:
    """The first and last cells of the hull in noisy counts (post-processing): strong runs,
    extensions into corroborated neighbours, then the mass beyond; and the thresholds used."""
    first, last, reliable, strong_tau = _hull(inside, sigma2, exact)
    extend = _extension_thresholds(sigma2, exact)
    while (width := _extension(inside[:first][::-1], extend)) > 0:
        first -= width
    while (width := _extension(inside[last + 1 :], extend)) > 0:
        last += width
    sigma = math.sqrt(float(sigma2))
    first -= _mass_extension(inside[:first][::-1], sigma)
    last += _mass_extension(inside[last + 1 :], sigma)
    return first, last, reliable, (strong_tau, extend[0])


def _coarse(
    noisy: FloatArray,
    window: Window,
    sigma2: Fraction,
    budget: Fraction,
    *,
    exact: bool,
    look_rho: Fraction | None = None,
) -> CoarseRange:
    """The hull from noisy window counts ``[below, cells…, above]`` (post-processing). The two
    outside cells take part as the window's outer neighbours: rows below (above) the window are
    clamped to its lower (upper) bound, so when they are many the range must reach that bound
    (values all outside the window land on its end, not where the noise happens to be)."""
    inside = noisy[1:-1]
    first, last, reliable, (strong_tau, extend_tau) = _cells(noisy, sigma2, exact=exact)
    first, last = min(max(first - 1, 0), window.cells - 1), min(max(last - 1, 0), window.cells - 1)
    whole_window = not reliable and window.scale == "linear" and not window.linear
    if whole_window:
        # Nothing stands out in a narrow window (one by meaning, such as ages in [0, 120], or a
        # declared one): the best guess would be noise, so the range is the whole window, where
        # every value lies. Wide and calendar windows keep the best guess (a window of 10^15 or
        # two centuries would spread the column over it); both are warned.
        first, last = 0, window.cells - 1
    bounds = window.boundaries
    parameters: dict[str, JsonScalar] = {
        "cells": window.cells,
        "scale": window.scale,
        "strong_threshold": strong_tau,
        "extend_threshold": extend_tau,
    }
    cost = DiscoveryCost("dp_coarse_range", budget, parameters=parameters)
    return CoarseRange(
        float(bounds[first]),
        float(bounds[last + 1]),
        reliable,
        float(noisy[0]),
        float(noisy[-1]),
        float(inside.sum()),
        cost,
        tuple(float(v) for v in noisy),
        cells=(first, last),
        look_rho=budget if look_rho is None else look_rho,
        whole_window=whole_window,
    )


@dataclass(frozen=True)
class FineGrid:
    """Stage 2's public cells over a coarse range: equal-width, or equal in asinh(x / s) with
    s = max(|lower|, |upper|)/1000 when the window was wide. With a ``step`` (integers, d
    decimals, calendar periods) the boundaries lie halfway between consecutive values, so each
    cell holds whole values, one each where the range is narrow. Function of public inputs only
    (the window and stage 1's release)."""

    lower: float
    upper: float
    cells: int
    step: float | None = None
    scale: Scale = "linear"

    def __post_init__(self) -> None:
        lo, hi = float(self.lower), float(self.upper)
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
            raise ValueError("a fine grid needs finite bounds with lower < upper")
        if isinstance(self.cells, bool) or not isinstance(self.cells, int) or self.cells < 1:
            raise ValueError("a fine grid needs at least one cell")
        if self.step is not None:
            if not (math.isfinite(self.step) and self.step > 0):
                raise ValueError("a step is a positive number")
            units = (lo / self.step, hi / self.step)
            if max(map(abs, units)) > MAX_STEPS or not all(
                abs(u - 0.5 - round(u - 0.5)) <= 1e-6 * max(1.0, abs(u)) for u in units
            ):
                raise ValueError("a stepped fine grid has bounds halfway between two values")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @classmethod
    def over(
        cls, coarse: CoarseRange, window: Window, rows: float, rho: Fraction | None = None
    ) -> FineGrid:
        """The grid over stage 1's range. ``rows`` (a noisy count of the column's values) and
        ``rho`` (the fine stage's budget), both public, set the number of cells: about one per
        :data:`ROWS_PER_FINE_CELL` rows, and no more than keeps the noisy CDF's standard
        deviation (:func:`noisy_cdf_sd`, which grows with the tree's depth) under
        :data:`CDF_NOISE_TARGET` of the rows: a sparse column on a small budget gets a shallow
        tree whose quantiles still mean something, instead of a deep one that is all noise."""
        wanted = max(rows, 0.0) / ROWS_PER_FINE_CELL
        cells = MIN_FINE_CELLS
        while cells < MAX_FINE_CELLS and cells * 2 <= wanted:
            cells *= 2
        if rho is not None:
            limit = CDF_NOISE_TARGET * max(rows, 0.0)
            while cells > SMALLEST_FINE_CELLS and noisy_cdf_sd(_levels(cells), rho, cells) > limit:
                cells //= 2
        lo, hi, step = coarse.lower, coarse.upper, window.step
        if step is not None and max(abs(lo), abs(hi)) / step > MAX_STEPS / 2:
            step = None  # beyond exact steps: an unaligned grid
        if step is not None:
            # The values inside the hull (its last cell includes the window's upper bound).
            first = math.ceil(lo / step - 1e-9)
            last = max(math.floor(hi / step + 1e-9), first)
            lo, hi = (first - 0.5) * step, (last + 0.5) * step
            values = last - first + 1
            if values <= UNIT_CELLS_FACTOR * cells:
                # One cell per value: point masses (a cap at 100, a floor at 0) stay exact.
                return cls(lo, hi, values, step, "linear")
        return cls(lo, hi, cells, step, window.scale)

    @property
    def levels(self) -> int:
        """Levels of the dyadic tree over the grid's cells (what :func:`learn_bins` measures)."""
        return _levels(self.cells)

    @property
    def boundaries(self) -> FloatArray:
        lo, hi = self.lower, self.upper
        if self.scale == "log":
            # Cells of one value near 0 for stepped columns (a value many rows share, such as a
            # zero amount, keeps a cell of its own), about 0.1 % of the largest magnitude else.
            s = self.step if self.step is not None else max(abs(lo), abs(hi)) / 1000.0
            points = s * np.sinh(
                np.linspace(np.arcsinh(lo / s), np.arcsinh(hi / s), self.cells + 1)
            )
        else:
            points = np.linspace(lo, hi, self.cells + 1)
        points[0], points[-1] = lo, hi
        if self.step is not None:
            # Halfway between consecutive values, at least one value per cell.
            points = (np.floor(points / self.step - 0.5 + 1e-9) + 0.5) * self.step
            points[0], points[-1] = lo, hi
        return np.unique(points)

    def count(self, values: npt.ArrayLike) -> IntArray:
        """Rows per cell of finite ``values``, clamped into the grid's range (as the upload
        clamps them into the learned range). Not released."""
        data = _present_values(values)
        bounds = self.boundaries
        cells = bounds.size - 1
        index = np.searchsorted(bounds, np.clip(data, bounds[0], bounds[-1]), side="right") - 1
        return np.bincount(np.minimum(index, cells - 1), minlength=cells).astype(np.int64)


@dataclass(frozen=True)
class LearnedBins:
    """Stage 2's release, in the column's units: ``edges`` (strictly increasing; halfway between
    two values for stepped grids), the value ``profile`` (:data:`PROFILE_POINTS` non-decreasing
    points from ``edges[0]`` to ``edges[-1]``, or None), whether the bins are one per value
    (``unit``) and whether the noisy CDF was precise enough to place them (``reliable``). DP
    outputs."""

    edges: tuple[float, ...]
    profile: tuple[float, ...] | None
    unit: bool
    reliable: bool
    requested_bins: int
    cost: DiscoveryCost

    def __post_init__(self) -> None:
        edges = tuple(float(e) for e in self.edges)
        if len(edges) < 2 or any(b <= a for a, b in itertools.pairwise(edges)):
            raise ValueError("learned edges must be strictly increasing")
        if self.profile is not None:
            profile = tuple(float(p) for p in self.profile)
            if len(profile) != PROFILE_POINTS or profile[0] != edges[0]:
                raise ValueError("a profile runs from the first edge to the last")
            if profile[-1] != edges[-1] or any(b < a for a, b in itertools.pairwise(profile)):
                raise ValueError("a profile is non-decreasing and ends at the last edge")
            object.__setattr__(self, "profile", profile)
        object.__setattr__(self, "edges", edges)

    @property
    def bins(self) -> int:
        return len(self.edges) - 1


def _levels(cells: int) -> int:
    return (cells - 1).bit_length() + 1


EXACT_SD_CELLS = 256
"""Trees of at most this many cells get the exact standard deviation of their prefix counts
(:func:`_exact_prefix_sd`) instead of the per-level bound, which does not hold for shallow
trees: at ρ = 1 the largest prefix sd is 0.816 for 2 cells against a bound of 0.66 (1.24×),
1.165 for 4 (1.18×), 1.421 for 8 (1.08×), 1.004× the bound for 15 and 1.015× for 16; from 17
cells on at most 0.972× (0.895× for 256). An underestimate lowers the outer edges' margin:
loans' one-value column (a grid of 2 cells) kept an empty second value in 6 of 60 and 8 of 30
uploads at ε = 1 before; 4 of 60 after, within the noise of so few uploads."""


def noisy_cdf_sd(levels: int, rho: Fraction, cells: int | None = None) -> float:
    """The standard deviation of the consistent tree's prefix counts (public): exact for trees
    of ``cells`` ≤ :data:`EXACT_SD_CELLS` cells, else a bound from the ``levels``."""
    if cells is not None and 1 <= cells <= EXACT_SD_CELLS:
        return _exact_prefix_sd(cells) / math.sqrt(float(rho))
    return NOISE_PER_LEVEL * levels / math.sqrt(float(rho))


@functools.lru_cache(maxsize=EXACT_SD_CELLS)
def _exact_prefix_sd(cells: int) -> float:
    """The largest standard deviation over the boundaries of the prefix counts of the
    consistent tree over ``cells`` cells at ρ = 1 (σ² = L/2 per node). The consistent leaves
    are linear in the nodes' noise, so each prefix's variance is σ² times the sum of its squared
    coefficients, found by passing each node's unit noise through the estimator. A function of
    the number of cells only."""
    levels = _levels(cells)
    sigma2 = levels / 2.0
    shapes = [level.size for level in _tree_levels(np.zeros(cells, dtype=np.int64))]
    variance = np.zeros(cells, dtype=np.float64)
    for index, size in enumerate(shapes):
        for position in range(size):
            unit = [np.zeros(n, dtype=np.float64) for n in shapes]
            unit[index][position] = 1.0
            variance += np.cumsum(_consistent_leaves(unit, sigma2)) ** 2  # type: ignore[arg-type]
    return float(np.sqrt(sigma2 * variance.max()))


def learn_bins(
    counts: npt.ArrayLike,
    *,
    grid: FineGrid,
    bins: int,
    rho: Fraction | int,
    source: random.Random | None = None,
) -> LearnedBins:
    """Stage 2: outer edges, inner edges and the value profile from a noisy tree; ρ-zCDP.

    ``counts``: :meth:`FineGrid.count` summed over batches. Privacy: L = ⌈log₂ cells⌉ + 1
    histograms (the dyadic tree) of L2 sensitivity 1, each node with N_Z(0, L/(2ρ)) noise: ρ-zCDP
    (CKS 2020, Theorem 14; Bun & Steinke 2016, Lemma 2.3); the rest is post-processing.
    """
    # Here, not at import: engine.columns imports this module, and `rhosynth sample` needs no
    # scipy.
    from scipy.optimize import isotonic_regression

    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    if isinstance(bins, bool) or not isinstance(bins, int) or not 1 <= bins <= MAX_BINS:
        raise ValueError(f"bins must be an integer from 1 to {MAX_BINS}")
    bounds = grid.boundaries
    cells = bounds.size - 1
    exact = np.asarray(counts)
    if exact.shape != (cells,) or not np.issubdtype(exact.dtype, np.integer):
        raise ValueError(f"counts must be {cells} integers, one per fine cell")
    if cells and int(exact.min()) < 0:
        raise ValueError("counts must be non-negative")
    levels = (cells - 1).bit_length() + 1
    sigma2 = sigma2_for_rho(1, budget / levels)
    tree = _tree_levels(exact.astype(np.int64))
    noisy = [level + discrete_gaussian_noise(sigma2, level.size, source) for level in tree]
    leaves = _consistent_leaves(noisy, float(sigma2))
    # The monotone CDF closest (least squares) to the noisy one, between 0 and the noisy total.
    raw_cdf = np.concatenate([[0.0], np.cumsum(leaves)])
    total = max(float(raw_cdf[-1]), 0.0)
    cdf = np.clip(isotonic_regression(raw_cdf).x, 0.0, total)
    cdf[0], cdf[-1] = 0.0, total
    sd = noisy_cdf_sd(levels, budget, cells)
    parameters: dict[str, JsonScalar] = {
        "fine_cells": cells,
        "levels": levels,
        "bins": bins,
        "step": grid.step,
        "scale": grid.scale,
    }
    cost = DiscoveryCost(MECHANISM, budget, parameters=parameters)
    step = grid.step
    widths = np.diff(bounds)
    unit = widths <= step * (1 + 1e-6) if step is not None else np.zeros(cells, dtype=bool)
    if total <= 0 or sd > UNRELIABLE_NOISE * total:
        return _fallback(grid, bounds, bins, cost)
    tail = min(max(TAIL_SHARE * total, TAIL_MARGIN * sd), MAX_TAIL * total)
    lo, hi = _outer(cdf, tail, total, unit)
    if step is not None and bounds[hi] - bounds[lo] <= step * (UNIT_FACTOR * bins + _EPS):
        edges = _unit_edges(float(bounds[lo]), float(bounds[hi]), step)
        return LearnedBins(edges, None, True, True, bins, cost)
    inner = _inner_edges(cdf, total, lo, hi, bins, UNIFORM_SHARE)
    inner = np.unique(inner[(inner > lo) & (inner < hi)])
    edge_index = np.concatenate([[lo], inner, [hi]]).astype(np.int64)
    profile = _profile(bounds[lo : hi + 1], cdf[lo : hi + 1], total)
    return LearnedBins(tuple(bounds[edge_index].tolist()), profile, False, True, bins, cost)


def _inner_edges(
    cdf: FloatArray, total: float, lo: int, hi: int, bins: int, uniform: float
) -> IntArray:
    """Boundary indices where G first reaches each j / ``bins`` (post-processing), G being
    (1 − ``uniform``) × the noisy CDF plus ``uniform`` × the uniform CDF over the fine cells
    between the outer edges. With ``uniform`` = 0 they are the CDF's quantiles; with a share
    above 0 no bin spans more than 1 / (``uniform`` · bins) of those cells, so a long tail,
    where a column's variance lives, gets bins of its own."""
    index = np.arange(cdf.size, dtype=np.float64)
    position = np.clip((index - lo) / max(hi - lo, 1), 0.0, 1.0)
    mixed = (1.0 - uniform) * cdf / total + uniform * position
    targets = np.arange(1, bins, dtype=np.float64) / bins
    return np.searchsorted(mixed, targets, side="left").astype(np.int64)


def _outer(
    cdf: FloatArray, tail: float, total: float, unit: npt.NDArray[np.bool_]
) -> tuple[int, int]:
    """Boundary indices of the outer edges (post-processing of the noisy CDF).

    From the left, the cell where the estimated count first reaches ``tail``: if it holds one
    value (``unit``) its lower boundary, so that value is kept; otherwise its upper boundary,
    so the clamped rows sit on a point where, with high probability, real rows lie below. The
    same from the right."""
    cells = cdf.size - 1
    crossing = int(np.searchsorted(cdf, tail, side="left"))  # first boundary with cdf ≥ tail
    crossing = min(max(crossing, 1), cells)  # cell crossing − 1 holds the tail-th row
    lo = crossing - 1 if unit[crossing - 1] else crossing
    above = total - cdf  # estimated rows at or above each boundary (non-increasing)
    # The last boundary with at least ``tail`` rows at or above it.
    reach = int(np.searchsorted(-above, -tail, side="right")) - 1
    reach = min(max(reach, 0), cells - 1)  # cell ``reach`` holds the tail-th row from the top
    hi = reach + 1 if unit[reach] else reach
    if hi <= lo:  # both in one cell (or crossing): take the cells whole
        lo, hi = min(crossing - 1, reach), max(crossing, reach + 1)
    return max(lo, 0), min(max(hi, lo + 1), cells)


def _unit_edges(lower: float, upper: float, step: float) -> tuple[float, ...]:
    """One bin per value: every point halfway between consecutive values from ``lower`` to
    ``upper`` (both halfway points themselves)."""
    count = max(round((upper - lower) / step), 1)
    edges = lower + step * np.arange(count + 1)
    edges[-1] = upper
    return tuple(float(e) for e in edges)


def _profile(points: FloatArray, cdf: FloatArray, total: float) -> tuple[float, ...]:
    """The clamped distribution's percentiles: rows below ``points[0]`` sit on it and rows above
    ``points[-1]`` on that; in between, the CDF is linear inside each cell."""
    levels = np.linspace(0.0, 1.0, PROFILE_POINTS) * total
    index = np.searchsorted(cdf, levels, side="left")  # cdf[index - 1] < level <= cdf[index]
    knots = np.empty(levels.size, dtype=np.float64)
    knots[index <= 0] = points[0]  # the clamped mass below sits on the lower edge
    knots[index >= cdf.size] = points[-1]  # and the mass above on the upper one
    inner = (index > 0) & (index < cdf.size)
    j = index[inner]
    below, above = cdf[j - 1], cdf[j]
    fraction = (levels[inner] - below) / (above - below)
    knots[inner] = points[j - 1] + fraction * (points[j] - points[j - 1])
    knots = np.maximum.accumulate(np.clip(knots, points[0], points[-1]))
    knots[0], knots[-1] = points[0], points[-1]
    return tuple(float(k) for k in knots)


def _fallback(grid: FineGrid, bounds: FloatArray, bins: int, cost: DiscoveryCost) -> LearnedBins:
    """Too little precision for quantiles: ``bins`` cells of the fine grid's own scale over the
    whole coarse range (a function of stage 1's public release only), no profile."""
    cells = bounds.size - 1
    index = np.unique(np.round(np.linspace(0, cells, bins + 1)).astype(np.int64))
    step = grid.step
    if step is not None and bounds[-1] - bounds[0] <= step * (UNIT_FACTOR * bins + _EPS):
        edges = _unit_edges(float(bounds[0]), float(bounds[-1]), step)
        return LearnedBins(edges, None, True, False, bins, cost)
    return LearnedBins(tuple(bounds[index].tolist()), None, False, False, bins, cost)


__all__ = [
    "MECHANISM",
    "PROFILE_POINTS",
    "RANGE_CELLS",
    "CoarseRange",
    "FineGrid",
    "LearnedBins",
    "Window",
    "learn_bins",
    "learn_coarse_range",
    "noisy_cdf_sd",
    "remeasure_coarse_range",
    "zoom_coarse_range",
    "zooms",
]
