"""One upload's discovery: which columns are learned, with what budget, and the release.

An upload whose schema asks for discovery (``"bins": {"quantiles": k}`` on a numeric, date or
datetime column, with ``"range": true`` when the range is learned too; ``"categories":
{"discover": true, ...}`` on a categorical one) reads the file to count, then releases every
requested part of the domain with the mechanisms of this package, then encodes the file with the
completed schema. The counts are exact and never leave this module; only the DP releases do.

Two counting passes (engine/discovery/schema.py drives them): the first counts the rows, the
coarse window cells of learned ranges, the grid cells of declared-window quantiles and the
category values; then :func:`release_first` releases a noisy row count, splits the budget by
need, and releases the coarse ranges, the declared-window edges and the categories. The second
pass counts the fine cells inside each released range, and :func:`release_second` releases the
learned bins and value profiles (engine/discovery/learned.py).

Budget (docs/discovery.md, "At upload"): a request with its own ``rho`` spends that; the others
share ``discovery_rho`` (by default :data:`DEFAULT_DISCOVERY_SHARE`, a fifth, of the upload's
``budget_rho``): :data:`COUNT_SHARE` of it buys the noisy row count, the rest is split by weight
(:data:`WEIGHTS`: an open-set category discovery clears the highest threshold) and capped by
need (what reaches a stated precision at the noisy row count: large tables spend less than the
pool). After the first release, the learned ranges' fine-stage budgets are split again by each
column's noisy count of values (:func:`resplit_fine`). Open-set category
requests share ``budget_delta`` equally unless they give their own ``delta``. Every amount is an
exact Fraction on the ledger's grid, so the ledger's entry is exactly the sum of what the
mechanisms were given.

Privacy of the split. The per-column budgets depend on the noisy row count and the fine budgets on
the first release's noisy counts, DP outputs; choosing
later mechanisms' ρ from earlier outputs, with a total that can never exceed ``discovery_rho``
(and, with the dataset's jobs, its ``budget_rho``), is fully adaptive composition with a privacy
filter, which zCDP allows (Feldman & Zrnic, "Individual Privacy Accounting via a Rényi Filter",
NeurIPS 2021, Theorem 3.1; Whitehouse, Ramdas, Rogers, Wu, "Fully-Adaptive Composition in
Differential Privacy", ICML 2023): the dataset stays ``budget_rho``-zCDP (with its δ) whatever
the split, and the ledger records the ρ actually spent. The service's jobs, whose ρ analysts choose
after seeing earlier releases, rest on the same argument.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from engine.accounting import sigma2_for_rho
from engine.discovery.categories import (
    CANDIDATES_MECHANISM,
    DEFAULT_FALSE_KEEP,
    OPEN_SET_MECHANISM,
    DiscoveredCategories,
    discover_from_candidates,
    discover_open_set,
)
from engine.discovery.cost import DiscoveryCost, JsonScalar
from engine.discovery.learned import (
    COARSE_SHARE,
    MAX_FINE_CELLS,
    MIN_FINE_CELLS,
    ROWS_PER_FINE_CELL,
    UNIT_CELLS_FACTOR,
    ZOOM_CELLS,
    ZOOM_SHARE,
    CoarseRange,
    FineGrid,
    LearnedBins,
    Window,
    learn_bins,
    learn_coarse_range,
    noisy_cdf_sd,
    remeasure_coarse_range,
    zoom_coarse_range,
    zooms,
)
from engine.discovery.notes import DomainWarning
from engine.discovery.quantiles import MECHANISM as QUANTILES_MECHANISM
from engine.discovery.quantiles import (
    QuantileBins,
    QuantileGrid,
    dp_quantile_edges_from_counts,
)
from engine.noise import discrete_gaussian_noise
from engine.privacy_unit.group import check_contribution_bound

DEFAULT_DISCOVERY_SHARE = Fraction(1, 5)
"""Of the upload's budget_rho, what discovery requests without their own ρ share by default
(at most: capped by need, a large table spends less). A fifth, not the tenth of before: on the
raw benchmark tables at ε = 1 it gave equal or better 2-way TVD and better KS and category TVD
for mst and aim (docs/benchmarks.md, "Discovery share of the budget")."""
COUNT_SHARE = Fraction(1, 40)
"""Of the shared discovery budget, what the noisy row count gets (the split depends on it)."""
WEIGHTS = {"range": 1, "quantiles": 1, "open_set": 2, "candidates": 1}
"""Relative shares of the rest, by kind. An open-set category discovery must clear a threshold of
about 5 standard deviations (from δ) for every category it keeps, a candidate list about 3; a
range's edges and bins average over many rows. Measured on the raw benchmark tables at ε = 1
(docs/benchmarks.md, "Discovery budget split"): against 3 : 2 : 1 for ranges : quantiles :
categories, this split moved loans' mean share of rows falling into "other" from 0.29 to 0.13
and flights' from 0.009 to 0.002, for a mean Kolmogorov–Smirnov distance of the numeric columns
0.069 → 0.076-0.079 (loans) and 0.0072 → 0.0074 (flights)."""
RANGE_PRECISION = 0.001
"""A learned range (or declared-window quantiles) needs no more ρ than puts the standard deviation
of its noisy CDF at 0.1 % of the rows."""
CATEGORY_PRECISION = 0.0002
"""A category discovery needs no more ρ than puts its threshold at 0.02 % of the rows."""
MAX_DISTINCT_COUNTED = 1_000_000
"""Distinct values counted over all category columns together (~110 bytes each in a Counter);
an upload with more is refused, by count. Candidate-list columns count only their candidates."""
MAX_CHARACTERS_COUNTED = 64 * 1024 * 1024
"""Characters of the distinct values counted over all category columns together."""
ROW_COUNT_MECHANISM = "dp_row_count"
RANGE_MECHANISM = "dp_learned_range"


class DiscoveryRefused(ValueError):
    """The requested discovery cannot run; the message names columns, never values."""


@dataclass(frozen=True)
class QuantileRequest:
    """DP quantile bins for a numeric (or date, as numbers) column inside declared bounds."""

    column: str
    grid: QuantileGrid
    bins: int
    rho: Fraction | None = None

    def __post_init__(self) -> None:
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 2:
            raise ValueError(f"column {self.column!r}: quantile bins must be an integer ≥ 2")
        if self.rho is not None and self.rho <= 0:
            raise ValueError(f"column {self.column!r}: a discovery's rho must be positive")


@dataclass(frozen=True)
class RangeRequest:
    """A learned range with bins and a value profile inside a public window (two stages:
    engine/discovery/learned.py), in the column's units (numbers, or calendar periods)."""

    column: str
    window: Window
    bins: int
    rho: Fraction | None = None

    def __post_init__(self) -> None:
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 1:
            raise ValueError(f"column {self.column!r}: quantile bins must be an integer ≥ 1")
        if self.rho is not None and self.rho <= 0:
            raise ValueError(f"column {self.column!r}: a discovery's rho must be positive")


@dataclass(frozen=True)
class CategoryRequest:
    """DP categories: from a public candidate list (pure ρ), or an open set ((ρ, δ))."""

    column: str
    max_categories: int
    candidates: tuple[str, ...] | None = None
    rho: Fraction | None = None
    delta: Fraction | None = None

    def __post_init__(self) -> None:
        if self.rho is not None and self.rho <= 0:
            raise ValueError(f"column {self.column!r}: a discovery's rho must be positive")
        if self.candidates is not None and self.delta is not None:
            raise ValueError(f"column {self.column!r}: a candidate list needs no delta")
        if self.delta is not None and not 0 < self.delta < 1:
            raise ValueError(f"column {self.column!r}: delta must lie in (0, 1)")

    @property
    def open_set(self) -> bool:
        return self.candidates is None


Request = QuantileRequest | RangeRequest | CategoryRequest


def _kind(request: Request) -> str:
    if isinstance(request, RangeRequest):
        return "range"
    if isinstance(request, QuantileRequest):
        return "quantiles"
    return "candidates" if request.candidates is not None else "open_set"


@dataclass(frozen=True)
class Allocation:
    request: Request
    rho: Fraction
    delta: Fraction


@dataclass(frozen=True)
class DiscoveryBudget:
    """The public part of the split, fixed before the file is read: each request's δ, the ρ of
    requests that give their own, the shared pool and the noisy row count's share of it.
    :meth:`finalize` splits the pool once the noisy row count is out."""

    requests: tuple[Request, ...]
    pool: Fraction
    count_rho: Fraction
    deltas: Mapping[str, Fraction]
    rho_quantum: Fraction | None = None

    @property
    def pooled(self) -> tuple[Request, ...]:
        return tuple(r for r in self.requests if r.rho is None)

    @property
    def cap(self) -> tuple[Fraction, Fraction]:
        """The most this discovery can spend: (ρ, δ)."""
        own = sum((r.rho for r in self.requests if r.rho is not None), Fraction(0))
        return own + (self.pool if self.pooled else Fraction(0)), sum(
            self.deltas.values(), Fraction(0)
        )

    def row_level(self, contribution_bound: int) -> DiscoveryBudget:
        """This budget (per unit of at most k = ``contribution_bound`` rows) at the row level:
        every ρ (requests' own, the pool, the row count's share, the ledger's grid) divided by
        k², δ unchanged (engine/privacy_unit/group.py). Discovery runs on it and states what it
        spent per unit (×k²), which lands on the ledger's grid again. k = 1: ``self``."""
        k = check_contribution_bound(contribution_bound)
        if k == 1:
            return self
        scale = k * k
        requests = tuple(
            r if r.rho is None else replace(r, rho=r.rho / scale) for r in self.requests
        )
        quantum = None if self.rho_quantum is None else self.rho_quantum / scale
        return DiscoveryBudget(
            requests, self.pool / scale, self.count_rho / scale, self.deltas, quantum
        )

    def finalize(self, noisy_rows: int | None) -> tuple[Allocation, ...]:
        """Each request's (ρ, δ): its own ρ, or its share of the pool after the row count, split
        by :data:`WEIGHTS` and capped by need at ``noisy_rows`` (water-filling: what a capped
        request does not need goes to the others). A function of public inputs and the noisy
        count only; every share is rounded down to the ledger's grid."""
        pooled = self.pooled
        shares = _water_fill(
            self.pool - self.count_rho,
            {r.column: Fraction(WEIGHTS[_kind(r)]) for r in pooled},
            {r.column: _need(r, noisy_rows, self.deltas.get(r.column)) for r in pooled},
        )
        out = []
        for request in self.requests:
            own = request.rho
            rho = own if own is not None else _floor(shares[request.column], self.rho_quantum)
            if rho <= 0:
                raise DiscoveryRefused(
                    "the discovery budget is too small to share between its columns"
                )
            out.append(Allocation(request, rho, self.deltas.get(request.column, Fraction(0))))
        return tuple(out)


def _water_fill(
    total: Fraction, weights: Mapping[str, Fraction], needs: Mapping[str, Fraction | None]
) -> dict[str, Fraction]:
    """``total`` split by ``weights``, each share capped at its need (None: no cap); what a
    capped share does not need goes to the others, again by weight (water-filling). The shares
    add up to ``total`` unless every one is capped."""
    shares: dict[str, Fraction] = {}
    remaining = total
    active = list(weights)
    while active:
        mass = sum((weights[c] for c in active), Fraction(0))
        fair = {c: remaining * weights[c] / mass for c in active}
        capped: dict[str, Fraction] = {}
        for column in active:
            need = needs[column]
            if need is not None and need < fair[column]:
                capped[column] = need
        if not capped:
            shares.update(fair)
            break
        for column, need in capped.items():
            shares[column] = need
            remaining -= need
        active = [c for c in active if c not in capped]
    return shares


def _cdf_need(levels: int, values: float) -> float:
    """The ρ that puts the standard deviation of a noisy CDF of ``levels`` tree levels at
    :data:`RANGE_PRECISION` of ``values``."""
    return float((noisy_cdf_sd(levels, Fraction(1)) / (RANGE_PRECISION * values)) ** 2)


def _as_need(need: float) -> Fraction | None:
    """A need as an exact amount (None, no cap, when it is not a positive number)."""
    if not math.isfinite(need) or need <= 0:
        return None
    return Fraction(need).limit_denominator(10**15)


def _fine_levels(rows: float) -> int:
    """Levels of the deepest fine tree a learned range can use at ``rows``
    (learned.FineGrid.over: one cell per value takes up to UNIT_CELLS_FACTOR times more)."""
    cells = MIN_FINE_CELLS
    while cells < MAX_FINE_CELLS and cells * 2 <= max(rows, 0.0) / ROWS_PER_FINE_CELL:
        cells *= 2
    return (UNIT_CELLS_FACTOR * cells - 1).bit_length() + 1


def _need(request: Request, rows: int | None, delta: Fraction | None) -> Fraction | None:
    """The ρ that reaches the stated precision at ``rows`` noisy rows (None: no cap)."""
    if rows is None or rows < 1:
        return None
    if isinstance(request, RangeRequest | QuantileRequest):
        if isinstance(request, RangeRequest):
            levels = _fine_levels(rows)
        else:
            levels = (request.grid.boundaries.size - 2).bit_length() + 1
        tree = _cdf_need(levels, rows)
        stages = 1 - COARSE_SHARE - ZOOM_SHARE  # the fine tree's share at the least
        need = tree / float(stages) if isinstance(request, RangeRequest) else tree
    else:
        if request.candidates is not None:
            z2 = 2 * math.log(len(request.candidates) / float(DEFAULT_FALSE_KEEP))
        else:
            z2 = 2 * math.log(1 / float(delta or Fraction(1, 10**6)))
        need = z2 / (2 * (CATEGORY_PRECISION * rows) ** 2)
    return _as_need(need)


def allocate(
    requests: Sequence[Request],
    *,
    budget_rho: Fraction,
    budget_delta: Fraction = Fraction(0),
    discovery_rho: Fraction | None = None,
    rho_quantum: Fraction | None = None,
    delta_quantum: Fraction | None = None,
) -> DiscoveryBudget:
    """The public split, from public inputs only; refuses what the budget cannot pay.

    With quanta (the ledger's exact grids: 1e-12 for ρ, 1e-18 for δ), shared amounts are rounded
    down to them, so each mechanism is given exactly what the ledger can record.
    """
    pooled = [r for r in requests if r.rho is None]
    pool = budget_rho * DEFAULT_DISCOVERY_SHARE if discovery_rho is None else discovery_rho
    if pooled and pool <= 0:
        raise DiscoveryRefused("discovery_rho must be positive when a discovery has no rho")
    count_rho = _floor(pool * COUNT_SHARE, rho_quantum) if pooled else Fraction(0)
    smallest = Fraction(1, 10**12) if rho_quantum is None else rho_quantum
    if pooled and (count_rho <= 0 or (pool - count_rho) / len(pooled) < smallest * 4):
        raise DiscoveryRefused("the discovery budget is too small to share between its columns")
    open_sets = [r for r in requests if isinstance(r, CategoryRequest) and r.open_set]
    unset_delta = [r for r in open_sets if r.delta is None]
    fixed_delta = sum((r.delta for r in open_sets if r.delta is not None), Fraction(0))
    if open_sets and budget_delta <= 0:
        names = ", ".join(repr(r.column) for r in open_sets[:20])
        raise DiscoveryRefused(
            f"discovering categories without a candidate list ({names}) is (ρ, δ)-DP: give the "
            "upload a budget_delta > 0 (locally: --discovery-delta), or list candidates, or "
            "declare the categories"
        )
    delta_share = Fraction(0)
    if unset_delta:
        delta_share = _floor((budget_delta - fixed_delta) / len(unset_delta), delta_quantum)
    if unset_delta and delta_share <= 0:
        raise DiscoveryRefused("the discoveries' own deltas use up budget_delta")
    deltas: dict[str, Fraction] = {}
    for request in open_sets:
        assert isinstance(request, CategoryRequest)
        deltas[request.column] = request.delta if request.delta is not None else delta_share
    budget = DiscoveryBudget(tuple(requests), pool, count_rho, deltas, rho_quantum)
    total_rho, total_delta = budget.cap
    if total_rho > budget_rho or total_delta > budget_delta:
        raise DiscoveryRefused(
            "the discoveries need more than the upload's budget: raise budget_rho (or "
            "budget_delta), or lower the discoveries' rho"
        )
    return budget


def _floor(amount: Fraction, quantum: Fraction | None) -> Fraction:
    if quantum is None:
        return amount
    return (amount // quantum) * quantum


@dataclass
class Counts:
    """Exact statistics of the first pass, accumulated batch by batch (never released): the rows,
    each learned range's window cells, each declared-window quantile grid's cells, and each
    category column's values."""

    requests: Sequence[Request]
    rows: int = 0
    cells: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    values: dict[str, Counter[str]] = field(default_factory=dict)
    grids: dict[str, QuantileGrid] = field(default_factory=dict)
    windows: dict[str, Window] = field(default_factory=dict)
    candidates: dict[str, frozenset[str]] = field(default_factory=dict)
    distinct: int = 0
    characters: int = 0

    def __post_init__(self) -> None:
        for request in self.requests:
            if isinstance(request, QuantileRequest):
                self.grids[request.column] = request.grid
                cells = request.grid.boundaries.size - 1  # integer grids can have fewer
                self.cells[request.column] = np.zeros(cells, dtype=np.int64)
            elif isinstance(request, RangeRequest):
                self.windows[request.column] = request.window
                self.cells[request.column] = np.zeros(request.window.counted, dtype=np.int64)
            else:
                self.values[request.column] = Counter()
                if request.candidates is not None:
                    self.candidates[request.column] = frozenset(request.candidates)

    def add_rows(self, rows: int) -> None:
        """Every row of a batch, missing values included (the noisy row count's statistic)."""
        self.rows += int(rows)

    def add_numbers(self, column: str, numbers: npt.ArrayLike) -> None:
        """Finite values of a quantile column: for a learned range all of them (values outside
        its window have their own cells), for a declared window those inside it."""
        if column in self.windows:
            self.cells[column] += self.windows[column].count(numbers)
        else:
            self.cells[column] += self.grids[column].count(numbers)

    def add_text(self, column: str, text: pd.Series) -> None:
        """Non-missing values of a category column, as text (only the candidates, if listed).

        Memory is bounded over all category columns together: more than
        :data:`MAX_DISTINCT_COUNTED` distinct values or :data:`MAX_CHARACTERS_COUNTED` characters
        in all is refused, naming the columns, never a value.
        """
        counter = self.values[column]
        batch = {str(k): int(v) for k, v in text.value_counts(sort=False).items()}
        if column in self.candidates:
            batch = {k: v for k, v in batch.items() if k in self.candidates[column]}
        new = [k for k in batch if k not in counter]
        self.distinct += len(new)
        self.characters += sum(map(len, new))
        counter.update(batch)
        if self.distinct > MAX_DISTINCT_COUNTED or self.characters > MAX_CHARACTERS_COUNTED:
            # Open sets fill the counters; candidate lists only if there are no open sets.
            named = [c for c in self.values if c not in self.candidates] or list(self.values)
            names = ", ".join(repr(c) for c in named[:20]) + (" …" * (len(named) > 20))
            raise DiscoveryRefused(
                f"the discovered category columns ({names}) have more than "
                f"{MAX_DISTINCT_COUNTED} distinct values or {MAX_CHARACTERS_COUNTED} characters "
                "of distinct values in all: declare some ignore, or give candidate lists"
            )


@dataclass
class FineCounts:
    """Exact statistics of the second pass: each learned range's fine cells (never released)."""

    grids: Mapping[str, FineGrid]
    cells: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for column, grid in self.grids.items():
            self.cells[column] = np.zeros(grid.boundaries.size - 1, dtype=np.int64)

    def add_numbers(self, column: str, numbers: npt.ArrayLike) -> None:
        """Finite values of a learned range's column, clamped into its released range."""
        self.cells[column] += self.grids[column].count(numbers)


@dataclass(frozen=True)
class NoisyRows:
    """The noisy row count (a DP output, public) and what it cost."""

    rows: int
    cost: DiscoveryCost


@dataclass(frozen=True)
class FirstRelease:
    """What the first pass released: the row count, the final split, the coarse ranges, the
    declared-window edges and the categories; ``fine_grids`` are the second pass's cells."""

    budget: DiscoveryBudget
    rows: NoisyRows | None
    allocations: tuple[Allocation, ...]
    ranges: Mapping[str, CoarseRange]
    edges: Mapping[str, QuantileBins]
    categories: Mapping[str, DiscoveredCategories]
    fine_grids: Mapping[str, FineGrid]
    # Each learned range's fine-stage ρ (:func:`resplit_fine`; the allocations include it).
    fine_rho: Mapping[str, Fraction]
    # k: ``budget`` and every ρ above are row-level (ρ/k² of what the unit-level budget gave).
    contribution_bound: int = 1

    def __post_init__(self) -> None:
        check_contribution_bound(self.contribution_bound)


@dataclass(frozen=True)
class Discovered:
    """The release: per column, DP bin edges (declared windows), learned bins with their profile
    (learned ranges) or DP categories; the noisy row count; what it all cost; and warnings
    computed from these DP outputs."""

    edges: Mapping[str, QuantileBins]
    categories: Mapping[str, DiscoveredCategories]
    allocations: tuple[Allocation, ...]
    learned: Mapping[str, LearnedBins] = field(default_factory=dict)
    ranges: Mapping[str, CoarseRange] = field(default_factory=dict)
    rows: NoisyRows | None = None
    # What the mechanisms noticed about their own releases (public: computed from DP outputs and
    # public parameters only); merged into the dataset's warnings by
    # engine.discovery.warnings.domain_warnings.
    warnings: tuple[DomainWarning, ...] = ()
    contribution_bound: int = 1
    """k, the privacy unit's bound on its rows. The per-column results above (``edges``,
    ``categories``, ``ranges``, ``learned``, ``rows``) and ``allocations`` carry the row-level ρ
    their noise was drawn at (σ² = Δ²/(2ρ_row)); :attr:`rho`, :meth:`costs` and
    :meth:`describe` state the cost per unit of at most k rows, k²·ρ_row
    (engine/privacy_unit/group.py; the open-set clause's δ is derived per unit in
    engine/discovery/categories.py). k = 1: row level, as before."""

    def __post_init__(self) -> None:
        # rho, costs() and describe() multiply by k²: a k outside 1..MAX_MAX_ROWS would state
        # a wrong ledger figure (k = 0: ρ = 0 for releases that spent budget).
        check_contribution_bound(self.contribution_bound)

    @property
    def row_rho(self) -> Fraction:
        """What the mechanisms were given at the row level (ρ/k² of :attr:`rho`)."""
        counted = self.rows.cost.rho if self.rows is not None else Fraction(0)
        return counted + sum((a.rho for a in self.allocations), Fraction(0))

    @property
    def rho(self) -> Fraction:
        """The discovery's cost per unit of at most k rows: k² times :attr:`row_rho`."""
        k = self.contribution_bound
        return self.row_rho * k * k

    def _per_unit(self, cost: DiscoveryCost) -> DiscoveryCost:
        k = self.contribution_bound
        return cost if k == 1 else replace(cost, rho=cost.rho * k * k)

    @property
    def delta(self) -> Fraction:
        return sum((a.delta for a in self.allocations), Fraction(0))

    def costs(self) -> dict[str, DiscoveryCost]:
        """Each column's cost per unit (a learned range's two stages as one entry)."""
        return {name: self._per_unit(cost) for name, cost in self._row_costs().items()}

    def _row_costs(self) -> dict[str, DiscoveryCost]:
        out = {name: result.cost for name, result in self.edges.items()}
        out.update({name: result.cost for name, result in self.categories.items()})
        for name, learned in self.learned.items():
            coarse = self.ranges[name]
            window = next(
                a.request.window
                for a in self.allocations
                if a.request.column == name and isinstance(a.request, RangeRequest)
            )
            # The coarse stage's ρ is the column's ρ times COARSE_SHARE, plus ZOOM_SHARE when it
            # zoomed or took a second look (not repeated); the fine tree has the rest.
            parameters: dict[str, JsonScalar] = {
                "lower": window.lower,
                "upper": window.upper,
                "bins": learned.requested_bins,
                "scale": window.scale,
                "fine_cells": learned.cost.parameters["fine_cells"],
            }
            if coarse.remeasured:
                parameters["second_look"] = True
            if coarse.zoomed:
                parameters["zoom"] = True
            out[name] = DiscoveryCost(
                RANGE_MECHANISM, coarse.cost.rho + learned.cost.rho, parameters=parameters
            )
        return out

    def describe(self) -> dict[str, Any]:
        """The ledger entry's detail: the noisy row count and every column's mechanism and cost
        (public parameters).

        Compact, so that many columns fit the ledger's detail cap (:func:`detail_bound`): ρ and δ
        as exact fraction strings only, and no ``sigma2``, which they determine with k (σ² =
        k²/(2ρ), k²·``levels``/(2ρ) for quantiles, ρ being the per-unit figure stated here and k
        ``max_rows_per_unit``, 1 when absent).
        """
        out: dict[str, Any] = {
            "rho": str(self.rho),
            "delta": str(self.delta),
            "columns": {name: _entry(cost) for name, cost in self.costs().items()},
        }
        if self.rows is not None:
            out["rows"] = {
                "mechanism": ROW_COUNT_MECHANISM,
                "rho": str(self._per_unit(self.rows.cost).rho),
                "noisy_count": self.rows.rows,
            }
        if self.contribution_bound > 1:
            # "per person, at most k rows": every ρ above is per unit.
            out["max_rows_per_unit"] = self.contribution_bound
        return out


def _entry(cost: DiscoveryCost) -> dict[str, Any]:
    parameters = {k: v for k, v in cost.parameters.items() if k not in DERIVED_PARAMETERS}
    return {
        "mechanism": cost.mechanism,
        "rho": str(cost.rho),
        "delta": str(cost.delta),
        "parameters": parameters,
    }


DERIVED_PARAMETERS = frozenset({"sigma2"})
DETAIL_PARAMETERS_BOUND = 160
"""JSON bytes of one column's public parameters in :meth:`Discovered.describe`, at most (the
longest, a quantile column's or a learned range's with two 24-character floats, take about
130)."""
ROWS_DETAIL_BOUND = 100
"""JSON bytes of the noisy row count's entry in the detail, beyond its ρ string, at most."""
UNIT_DETAIL_BOUND = 32
"""JSON bytes of ``"max_rows_per_unit": k`` in the detail, at most (k ≤ 1000)."""


def _rho_text_bound(cap: Fraction, quantum: Fraction | None) -> int:
    """The longest exact fraction string of a ρ between 0 and ``cap`` on the ledger's grid
    (``quantum``), or of any ρ's own string when there is no grid."""
    if quantum is None:
        return len(str(cap)) + 48
    steps = math.ceil(cap / quantum)
    return len(str(steps * quantum.numerator)) + 1 + len(str(quantum.denominator))


def detail_bound(budget: DiscoveryBudget) -> int:
    """An upper bound on ``len(json.dumps(<the release>.describe()))``, computed from public
    inputs only, before anything is counted (so an oversized ledger entry is refused before the
    file is read)."""
    cap_rho, cap_delta = budget.cap
    shared = "9" * _rho_text_bound(budget.pool, budget.rho_quantum)
    total = len(
        json.dumps({"rho": "9" * _rho_text_bound(cap_rho, budget.rho_quantum),
                    "delta": str(cap_delta), "columns": {}})
    )  # fmt: skip
    total += ROWS_DETAIL_BOUND + UNIT_DETAIL_BOUND + len(shared)
    for request in budget.requests:
        if isinstance(request, QuantileRequest):
            mechanism = QUANTILES_MECHANISM
        elif isinstance(request, RangeRequest):
            mechanism = RANGE_MECHANISM
        else:
            mechanism = CANDIDATES_MECHANISM if request.candidates else OPEN_SET_MECHANISM
        rho = str(request.rho) if request.rho is not None else shared
        delta = str(budget.deltas.get(request.column, Fraction(0)))
        entry = {"mechanism": mechanism, "rho": rho, "delta": delta, "parameters": {}}
        # '"name": {...}, ' around the entry, whose parameters are bounded separately.
        total += len(json.dumps(request.column)) + 4 + len(json.dumps(entry))
        total += DETAIL_PARAMETERS_BOUND
    return total


def noisy_row_count(rows: int, rho: Fraction, source: random.Random | None) -> NoisyRows:
    """The number of rows plus N_Z(0, 1/(2ρ)): one added or removed row changes it by 1 (L2
    sensitivity 1), so ρ-zCDP (CKS 2020, Theorem 14)."""
    sigma2 = sigma2_for_rho(1, rho)
    noisy = int(rows) + int(discrete_gaussian_noise(sigma2, 1, source)[0])
    return NoisyRows(noisy, DiscoveryCost(ROW_COUNT_MECHANISM, rho))


def release_first(
    budget: DiscoveryBudget,
    counts: Counts,
    source: random.Random | None = None,
    *,
    contribution_bound: int = 1,
) -> FirstRelease:
    """Release the first pass: the noisy row count (when a request shares the pool), then, with
    the split it decides, every coarse range, declared-window edge set and category list.

    ``budget`` is per unit of at most k = ``contribution_bound`` rows; the releases run on
    :meth:`DiscoveryBudget.row_level` (ρ/k² each), so each is k²·ρ_row-zCDP per unit
    (engine/privacy_unit/group.py), and the open-set clauses take their threshold for k
    (engine/discovery/categories.py). k = 1 is the row-level release, bit for bit."""
    k = check_contribution_bound(contribution_bound)
    budget = budget.row_level(k)
    rows = None
    if budget.pooled:
        rows = noisy_row_count(counts.rows, budget.count_rho, source)
    allocations = budget.finalize(rows.rows if rows is not None else None)
    ranges: dict[str, CoarseRange] = {}
    edges: dict[str, QuantileBins] = {}
    categories: dict[str, DiscoveredCategories] = {}
    grids: dict[str, FineGrid] = {}
    estimates: dict[str, float] = {}
    for allocation in allocations:
        request = allocation.request
        if isinstance(request, RangeRequest):
            coarse = learn_coarse_range(
                counts.cells[request.column],
                window=request.window,
                rho=allocation.rho * COARSE_SHARE,
                source=source,
            )
            first_look = coarse
            first_cell, last_cell = coarse.cells
            estimate = _present(coarse, rows)
            # The fine grid the first look's range gets (the column's ρ after the coarse stage);
            # it decides the zoom, and stays the grid when nothing else is measured.
            grid = FineGrid.over(
                coarse, request.window, float(estimate), allocation.rho - coarse.cost.rho
            )
            if coarse.reliable and last_cell - first_cell < ZOOM_CELLS and zooms(grid):
                # A narrow range whose fine grid would be too coarse for it (few rows, or a
                # noisy budget, and not one cell per value): a zoom into its cells' subcells.
                coarse = zoom_coarse_range(
                    counts.cells[request.column],
                    window=request.window,
                    coarse=coarse,
                    rho=allocation.rho * ZOOM_SHARE,
                    source=source,
                )
            if not coarse.reliable:
                # Nothing stood out: the zoom's ρ buys a second look at the same cells instead
                # (a range of the right magnitude before the fine stage's bins inside it).
                coarse = remeasure_coarse_range(
                    counts.cells[request.column],
                    window=request.window,
                    first=coarse,
                    rho=allocation.rho * ZOOM_SHARE,
                    source=source,
                )
                estimate = _present(coarse, rows)
            ranges[request.column] = coarse
            estimates[request.column] = float(estimate)
            if coarse is not first_look:  # zoomed or looked at again: the rest of the ρ
                grid = FineGrid.over(
                    coarse, request.window, float(estimate), allocation.rho - coarse.cost.rho
                )
            grids[request.column] = grid
        elif isinstance(request, QuantileRequest):
            edges[request.column] = dp_quantile_edges_from_counts(
                counts.cells[request.column],
                grid=request.grid,
                bins=request.bins,
                rho=allocation.rho,
                source=source,
            )
        elif request.candidates is not None:
            categories[request.column] = discover_from_candidates(
                counts.values[request.column],
                candidates=request.candidates,
                max_categories=request.max_categories,
                rho=allocation.rho,
                source=source,
            )
        else:
            categories[request.column] = discover_open_set(
                counts.values[request.column],
                max_categories=request.max_categories,
                rho=allocation.rho,
                delta=allocation.delta,
                source=source,
                contribution_bound=k,
            )
    fine_rho = {
        a.request.column: a.rho - ranges[a.request.column].cost.rho
        for a in allocations
        if isinstance(a.request, RangeRequest)
    }
    pooled = [
        a.request.column
        for a in allocations
        if isinstance(a.request, RangeRequest) and a.request.rho is None
    ]
    if len(pooled) > 1:
        fine_rho.update(
            resplit_fine(
                {c: fine_rho[c] for c in pooled},
                {c: estimates[c] for c in pooled},
                {c: grids[c] for c in pooled},
                rows.rows if rows is not None else None,
                budget.rho_quantum,
            )
        )
        updated = []
        for allocation in allocations:
            request = allocation.request
            if isinstance(request, RangeRequest) and request.rho is None:
                column = request.column
                grids[column] = FineGrid.over(
                    ranges[column], request.window, estimates[column], fine_rho[column]
                )
                allocation = replace(allocation, rho=ranges[column].cost.rho + fine_rho[column])
            updated.append(allocation)
        allocations = tuple(updated)
    return FirstRelease(
        budget, rows, allocations, ranges, edges, categories, grids, fine_rho, contribution_bound=k
    )


RESPLIT_FLOOR = Fraction(1, 20)
"""In :func:`resplit_fine`, a column's values count as at least this share of the noisy rows (a
column of a few values must not take every other column's budget)."""


def resplit_fine(
    fine: Mapping[str, Fraction],
    present: Mapping[str, float],
    grids: Mapping[str, FineGrid],
    rows: int | None,
    quantum: Fraction | None,
) -> dict[str, Fraction]:
    """The learned ranges' fine-stage budgets, pooled and split again by the columns' noisy counts
    of values (stage 1's DP outputs): ρ_j ∝ L_j / n_j, L_j the depth of the tree the column's
    grid gets at the equal split and n_j its noisy count of values (at least
    :data:`RESPLIT_FLOOR` of the noisy rows), capped by need (:data:`RANGE_PRECISION` of n_j,
    water-filling as :meth:`DiscoveryBudget.finalize` does). This minimises the sum over columns
    of the noisy CDF's variance relative to the column's values (Lagrange: ρ_j ∝ σ_j/n_j at ρ
    = 1), so a sparse column (1,495 values in 10,000 rows) is no longer measured so coarsely that
    its bins fall back to equal widths over its window cells (values past the real maximum),
    while a dense one gives up a small share. Each share is rounded down to the ledger's grid;
    the sum is at most what the columns were given (less when every column is capped by need,
    as on large tables: the rest stays unspent, as with :meth:`DiscoveryBudget.finalize`).

    Privacy: the split is a function of public inputs and earlier DP outputs only, and the total
    never exceeds what the columns were allocated, so the discovery stays within its budget by
    fully adaptive composition with a filter (module docstring)."""
    floor = float(RESPLIT_FLOOR) * max(float(rows or 0), 1.0)
    weights: dict[str, Fraction] = {}
    needs: dict[str, Fraction | None] = {}
    for column in fine:
        levels = grids[column].levels
        values = max(present[column], floor, 1.0)
        weights[column] = Fraction(levels / values)
        needs[column] = _as_need(_cdf_need(levels, values))
    shares = _water_fill(sum(fine.values(), Fraction(0)), weights, needs)
    out = {c: _floor(shares[c], quantum) for c in fine}
    if any(v <= 0 for v in out.values()):
        return dict(fine)  # a share rounded to nothing: keep the equal split
    return out


def _present(coarse: CoarseRange, rows: NoisyRows | None) -> float:
    """How many values a learned column holds, from DP outputs only: the noisy sum of its window
    histogram over the range's cells (and the outside cell next to a range that reaches the
    window's end), at most the noisy row count. Summing over the range only, not all 66 cells,
    keeps the noise of the cells where the column has no values out of the estimate (66 cells
    of noise σ add up to 8σ: on loans at ε = 1, about 1,600 against a sparse column's 1,495
    values); the rows beyond the range, clamped into its end cells, are left out."""
    found = max(coarse.noisy_in_range, 0.0)
    return min(found, float(rows.rows)) if rows is not None else found


def release_second(
    first: FirstRelease, fine: FineCounts, source: random.Random | None = None
) -> Discovered:
    """Release the learned bins and profiles from the second pass, and assemble the release.

    Each mechanism is charged exactly its allocation, so the sum of the costs (and the row
    count's) equals the sum of the allocations (checked): what the ledger records is what was
    measured.
    """
    learned: dict[str, LearnedBins] = {}
    for allocation in first.allocations:
        request = allocation.request
        if not isinstance(request, RangeRequest):
            continue
        learned[request.column] = learn_bins(
            fine.cells[request.column],
            grid=first.fine_grids[request.column],
            bins=request.bins,
            rho=first.fine_rho[request.column],
            source=source,
        )
    warnings = _warnings(first, learned)
    result = Discovered(
        first.edges,
        first.categories,
        first.allocations,
        learned,
        first.ranges,
        first.rows,
        warnings,
        contribution_bound=first.contribution_bound,
    )
    charged = [(c.rho, c.delta) for c in result._row_costs().values()]
    if first.rows is not None:
        charged.append((first.rows.cost.rho, first.rows.cost.delta))
    if (sum(c[0] for c in charged), sum(c[1] for c in charged)) != (result.row_rho, result.delta):
        raise AssertionError("the mechanisms' costs differ from the allocations")
    cap_rho, cap_delta = first.budget.cap  # row level, as the allocations
    if result.row_rho > cap_rho or result.delta > cap_delta:
        raise AssertionError("the discovery spent more than its budget")
    return result


def release(
    budget: DiscoveryBudget,
    counts: Counts,
    source: random.Random | None = None,
    fine: FineCounts | None = None,
    *,
    contribution_bound: int = 1,
) -> Discovered:
    """Both releases when there is no learned range (one pass), for callers and tests that count
    once; with learned ranges use :func:`release_first`, a second pass, then
    :func:`release_second` (engine/discovery/schema.py does)."""
    first = release_first(budget, counts, source, contribution_bound=contribution_bound)
    if first.fine_grids and fine is None:
        raise ValueError("learned ranges need a second counting pass (release_second)")
    return release_second(first, fine if fine is not None else FineCounts({}), source)


WINDOW_SHARE = 0.01
"""A learned range warns when more than this share of the rows (by a noisy count) lie outside
its public window (they are clamped into the range)."""


def _warnings(first: FirstRelease, learned: Mapping[str, LearnedBins]) -> tuple[DomainWarning, ...]:
    """Warnings from the DP outputs only (noisy counts, learned bins): post-processing."""
    out = []
    for name, coarse in first.ranges.items():
        rows = max(first.rows.rows if first.rows is not None else coarse.noisy_inside, 1)
        # The outside cells' noise: the look they come from (a zoom adds no outside cells).
        sigma = math.sqrt(float(sigma2_for_rho(1, coarse.look_rho)))
        outside = coarse.noisy_below + coarse.noisy_above
        if outside > max(WINDOW_SHARE * rows, 3 * sigma * math.sqrt(2)):
            share = min(outside / rows, 1.0)
            out.append(
                DomainWarning(
                    "outside_window",
                    name,
                    f"column {name!r}: about {share:.0%} of its values (a noisy count) lie "
                    "outside its public window and were clamped into the learned range; "
                    "declare a wider min and max",
                )
            )
        if not coarse.reliable:
            taken = "its whole public window" if coarse.whole_window else "a best guess"
            out.append(
                DomainWarning(
                    "unreliable_range",
                    name,
                    f"column {name!r}: no part of its window held enough rows to locate the "
                    f"range at this budget, even on a second look (its range is {taken}); "
                    "declare min and max, or give discovery more ρ",
                )
            )
        found = learned.get(name)
        if found is not None and coarse.reliable and not found.reliable:
            out.append(
                DomainWarning(
                    "coarse_bins",
                    name,
                    f"column {name!r}: too few rows for this budget to place its bins at "
                    "quantiles; they are equal-width over the learned range and values are "
                    "uniform inside them: declare its bins, or give discovery more ρ",
                )
            )
    return tuple(out)


__all__ = [
    "COUNT_SHARE",
    "DEFAULT_DISCOVERY_SHARE",
    "DETAIL_PARAMETERS_BOUND",
    "WEIGHTS",
    "Allocation",
    "CategoryRequest",
    "Counts",
    "Discovered",
    "DiscoveryBudget",
    "DiscoveryRefused",
    "FineCounts",
    "FirstRelease",
    "NoisyRows",
    "QuantileRequest",
    "RangeRequest",
    "Request",
    "allocate",
    "detail_bound",
    "noisy_row_count",
    "release",
    "release_first",
    "release_second",
]
