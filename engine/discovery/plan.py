"""One upload's discovery: which columns are learned, with what budget, and the release.

An upload whose schema asks for discovery (``"bins": {"quantiles": k}`` on a numeric, date or
datetime column; ``"categories": {"discover": true, ...}`` on a categorical one) reads the file
once to count, then releases every requested part of the domain with the mechanisms of this
package, then encodes the file with the completed schema. The counts are exact and never leave
this module; only the DP releases do.

Budget (docs/discovery.md, "Budget at upload"): a request with its own ``rho`` spends that; the
requests without one share ``discovery_rho`` equally (by default :data:`DEFAULT_DISCOVERY_SHARE`
of the upload's ``budget_rho``); open-set category requests share the upload's ``budget_delta``
equally unless they give their own ``delta``. Every share is an exact Fraction, so the ledger's
entry is exactly the sum of what the mechanisms were given.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from engine.discovery.categories import (
    CANDIDATES_MECHANISM,
    OPEN_SET_MECHANISM,
    DiscoveredCategories,
    discover_from_candidates,
    discover_open_set,
)
from engine.discovery.cost import DiscoveryCost
from engine.discovery.quantiles import MECHANISM as QUANTILES_MECHANISM
from engine.discovery.quantiles import (
    QuantileBins,
    QuantileGrid,
    dp_quantile_edges_from_counts,
)
from engine.discovery.warnings import DomainWarning

DEFAULT_DISCOVERY_SHARE = Fraction(1, 10)
"""Of the upload's budget_rho, what discovery requests without their own ρ share by default."""
MAX_DISTINCT_COUNTED = 1_000_000
"""Distinct values counted over all category columns together (~110 bytes each in a Counter);
an upload with more is refused, by count. Candidate-list columns count only their candidates."""
MAX_CHARACTERS_COUNTED = 64 * 1024 * 1024
"""Characters of the distinct values counted over all category columns together."""


class DiscoveryRefused(ValueError):
    """The requested discovery cannot run; the message names columns, never values."""


@dataclass(frozen=True)
class QuantileRequest:
    """DP quantile bins for a numeric (or date, as numbers) column inside public bounds."""

    column: str
    grid: QuantileGrid
    bins: int
    rho: Fraction | None = None
    learn_range: bool = False  # the outer edges are learned too (the grid is a public window)

    def __post_init__(self) -> None:
        if isinstance(self.bins, bool) or not isinstance(self.bins, int) or self.bins < 2:
            raise ValueError(f"column {self.column!r}: quantile bins must be an integer ≥ 2")
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


Request = QuantileRequest | CategoryRequest


@dataclass(frozen=True)
class Allocation:
    request: Request
    rho: Fraction
    delta: Fraction


def allocate(
    requests: Sequence[Request],
    *,
    budget_rho: Fraction,
    budget_delta: Fraction = Fraction(0),
    discovery_rho: Fraction | None = None,
    rho_quantum: Fraction | None = None,
    delta_quantum: Fraction | None = None,
) -> tuple[Allocation, ...]:
    """Each request's (ρ, δ), from public inputs only; refuses what the budget cannot pay.

    With quanta (the ledger's exact grids: 1e-12 for ρ, 1e-18 for δ), shared amounts are rounded
    down to them, so each mechanism is given exactly what the ledger can record.
    """
    pooled = [r for r in requests if r.rho is None]
    pool = budget_rho * DEFAULT_DISCOVERY_SHARE if discovery_rho is None else discovery_rho
    if pooled and pool <= 0:
        raise DiscoveryRefused("discovery_rho must be positive when a discovery has no rho")
    share = _floor(pool / len(pooled), rho_quantum) if pooled else Fraction(0)
    if pooled and share <= 0:
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
    allocations = []
    for request in requests:
        rho = request.rho if request.rho is not None else share
        delta = Fraction(0)
        if isinstance(request, CategoryRequest) and request.open_set:
            delta = request.delta if request.delta is not None else delta_share
        allocations.append(Allocation(request, rho, delta))
    total_rho = sum((a.rho for a in allocations), Fraction(0))
    total_delta = sum((a.delta for a in allocations), Fraction(0))
    if total_rho > budget_rho or total_delta > budget_delta:
        raise DiscoveryRefused(
            "the discoveries need more than the upload's budget: raise budget_rho (or "
            "budget_delta), or lower the discoveries' rho"
        )
    return tuple(allocations)


def _floor(amount: Fraction, quantum: Fraction | None) -> Fraction:
    if quantum is None:
        return amount
    return (amount // quantum) * quantum


@dataclass
class Counts:
    """Exact statistics of the requested columns, accumulated batch by batch (never released)."""

    requests: Sequence[Request]
    cells: dict[str, npt.NDArray[np.int64]] = field(default_factory=dict)
    values: dict[str, Counter[str]] = field(default_factory=dict)
    grids: dict[str, QuantileGrid] = field(default_factory=dict)
    candidates: dict[str, frozenset[str]] = field(default_factory=dict)
    distinct: int = 0
    characters: int = 0

    def __post_init__(self) -> None:
        for request in self.requests:
            if isinstance(request, QuantileRequest):
                self.grids[request.column] = request.grid
                cells = request.grid.boundaries.size - 1  # integer grids can have fewer
                self.cells[request.column] = np.zeros(cells, dtype=np.int64)
            else:
                self.values[request.column] = Counter()
                if request.candidates is not None:
                    self.candidates[request.column] = frozenset(request.candidates)

    def add_numbers(self, column: str, numbers: npt.ArrayLike) -> None:
        """Non-missing values of a quantile column, inside its bounds (clipped by the caller)."""
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


@dataclass(frozen=True)
class Discovered:
    """The release: per column, DP bin edges or DP categories, and what they cost in all."""

    edges: Mapping[str, QuantileBins]
    categories: Mapping[str, DiscoveredCategories]
    allocations: tuple[Allocation, ...]
    # What the mechanisms noticed about their own releases (public: computed from DP outputs and
    # public parameters only); merged into the dataset's warnings by
    # engine.discovery.warnings.domain_warnings.
    warnings: tuple[DomainWarning, ...] = ()

    @property
    def rho(self) -> Fraction:
        return sum((a.rho for a in self.allocations), Fraction(0))

    @property
    def delta(self) -> Fraction:
        return sum((a.delta for a in self.allocations), Fraction(0))

    def costs(self) -> dict[str, DiscoveryCost]:
        out = {name: result.cost for name, result in self.edges.items()}
        out.update({name: result.cost for name, result in self.categories.items()})
        return out

    def describe(self) -> dict[str, Any]:
        """The ledger entry's detail: every column's mechanism and cost (public parameters).

        Compact, so that many columns fit the ledger's detail cap (:func:`detail_bound`): ρ and δ
        as exact fraction strings only, and no ``sigma2``, which they determine (σ² = 1/(2ρ),
        ``levels``/(2ρ) for quantiles).
        """
        return {
            "rho": str(self.rho),
            "delta": str(self.delta),
            "columns": {name: _entry(cost) for name, cost in self.costs().items()},
        }


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
longest, a quantile column's with two 24-character floats, take about 130)."""


def detail_bound(allocations: Sequence[Allocation]) -> int:
    """An upper bound on ``len(json.dumps(release(allocations, ...).describe()))``, computed from
    public inputs only, before anything is counted (so an oversized ledger entry is refused
    before the file is read)."""
    rho = sum((a.rho for a in allocations), Fraction(0))
    delta = sum((a.delta for a in allocations), Fraction(0))
    total = len(json.dumps({"rho": str(rho), "delta": str(delta), "columns": {}}))
    for allocation in allocations:
        request = allocation.request
        if isinstance(request, QuantileRequest):
            mechanism = QUANTILES_MECHANISM
        else:
            mechanism = CANDIDATES_MECHANISM if request.candidates else OPEN_SET_MECHANISM
        cost = DiscoveryCost(mechanism, allocation.rho, allocation.delta)
        # '"name": {...}, ' around the entry, whose parameters are bounded separately.
        total += len(json.dumps(request.column)) + 4 + len(json.dumps(_entry(cost)))
        total += DETAIL_PARAMETERS_BOUND
    return total


def release(
    allocations: Sequence[Allocation], counts: Counts, source: random.Random | None = None
) -> Discovered:
    """Run every allocated mechanism on the exact counts; the only step that releases anything.

    Each mechanism is charged exactly its allocation, so the sum of the costs equals the sum of
    the allocations (checked): what the ledger records is what was measured.
    """
    edges: dict[str, QuantileBins] = {}
    categories: dict[str, DiscoveredCategories] = {}
    charged = []
    for allocation in allocations:
        request = allocation.request
        if isinstance(request, QuantileRequest):
            bins = dp_quantile_edges_from_counts(
                counts.cells[request.column],
                grid=request.grid,
                bins=request.bins,
                rho=allocation.rho,
                source=source,
                learn_range=request.learn_range,
            )
            edges[request.column] = bins
            charged.append((bins.cost.rho, Fraction(0)))
        else:
            if request.candidates is not None:
                found = discover_from_candidates(
                    counts.values[request.column],
                    candidates=request.candidates,
                    max_categories=request.max_categories,
                    rho=allocation.rho,
                    source=source,
                )
            else:
                found = discover_open_set(
                    counts.values[request.column],
                    max_categories=request.max_categories,
                    rho=allocation.rho,
                    delta=allocation.delta,
                    source=source,
                )
            categories[request.column] = found
            charged.append((found.cost.rho, found.cost.delta))
    result = Discovered(edges, categories, tuple(allocations))
    if (sum(c[0] for c in charged), sum(c[1] for c in charged)) != (result.rho, result.delta):
        raise AssertionError("the mechanisms' costs differ from the allocations")
    return result
