"""DP discovery of a categorical column's categories, with or without a public candidate list.

Two mechanisms, both releasing noisy counts of distinct values (a histogram, L2 sensitivity 1
under add/remove-one-row neighbours) with exact discrete Gaussian noise N_Z(0, σ²), σ² = 1/(2ρ)
(Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020):

* :func:`discover_from_candidates`: the owner publishes the possible values; every candidate is
  measured, so which values are measured does not depend on the data. Pure ρ-zCDP.
* :func:`discover_open_set`: no list; only values present in the data are measured, and a value
  is released only when its noisy count clears a threshold τ chosen from (ρ, δ). This is the
  Gaussian sparse histogram mechanism (Korolova, Kenthapadi, Mishra, Ntoulas, "Releasing Search
  Queries and Clicks Privately", WWW 2009, for the thresholding idea; Wilson, Zhang, Lam,
  Desfontaines, Simmons-Marengo, Gipson, "Differentially Private SQL with Bounded User
  Contribution", PoPETs 2020, Gaussian version; Wilkins, Kifer, Zhang, Lin, "Exact Privacy
  Analysis of the Gaussian Sparse Histogram Mechanism", 2024): (ρ, δ)-approximate zCDP.

Error messages count values; they never show one (the values are the data).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from engine.accounting import sigma2_for_rho
from engine.discovery.cost import DiscoveryCost, exact_budget
from engine.discovery.tails import (
    MIN_TAIL_PROBABILITY,
    discrete_gaussian_tail_bound,
    smallest_split_threshold,
    smallest_tail_threshold,
    split_tail_bound,
)
from engine.noise import discrete_gaussian_noise
from engine.privacy_unit.group import check_contribution_bound

IntArray = npt.NDArray[np.int64]

MAX_CANDIDATES = 100_000
"""Longest candidate list measured (one noisy count per candidate)."""
MAX_CATEGORIES = 100_000
DEFAULT_FALSE_KEEP = Fraction(1, 20)
"""The default candidate threshold keeps any absent candidate with probability at most 5% in all
(a Bonferroni split over the list: each absent candidate at most 0.05/len(candidates))."""

CANDIDATES_MECHANISM = "discover_from_candidates"
OPEN_SET_MECHANISM = "discover_open_set"


@dataclass(frozen=True)
class DiscoveredCategories:
    """Released categories and their noisy counts (both DP outputs, public once released).

    ``categories`` are distinct strings in the mechanism's documented order; ``noisy_counts[i]``
    is the noisy count of ``categories[i]``. ``threshold`` is the public threshold they cleared.
    """

    categories: tuple[str, ...]
    noisy_counts: tuple[int, ...]
    threshold: int
    cost: DiscoveryCost

    def __post_init__(self) -> None:
        categories = tuple(self.categories)
        counts = tuple(int(count) for count in self.noisy_counts)
        if not all(isinstance(value, str) for value in categories):
            raise TypeError("categories must be strings")
        if len(set(categories)) != len(categories):
            raise ValueError("categories must be distinct")
        if len(counts) != len(categories):
            raise ValueError("one noisy count per category")
        if any(count < self.threshold for count in counts):
            raise ValueError("a released category's noisy count is below the threshold")
        object.__setattr__(self, "categories", categories)
        object.__setattr__(self, "noisy_counts", counts)

    @property
    def mechanism(self) -> str:
        return self.cost.mechanism


def discover_from_candidates(
    counts: Mapping[str, int],
    *,
    candidates: Sequence[str],
    max_categories: int,
    rho: Fraction | int | Decimal,
    threshold: int | None = None,
    source: random.Random | None = None,
) -> DiscoveredCategories:
    """The candidates whose noisy count clears ``threshold``; exactly ρ-zCDP.

    ``counts`` maps values to their number of (non-missing) rows; values that are not candidates
    are ignored (they will fall into "other"), candidates missing from it count 0. Every candidate
    gets N_Z(0, σ²) noise with σ² = 1/(2ρ); those with noisy count ≥ ``threshold`` are kept, at
    most ``max_categories`` of them (the largest noisy counts; ties go to the earlier candidate),
    returned in candidate-list order with their noisy counts.

    Default threshold: the smallest integer τ ≥ 1 with P(Z ≥ τ) ≤ 0.05/len(candidates) (exact
    discrete tail bound, :func:`engine.discovery.tails.smallest_tail_threshold`), so with
    probability at least 95% no candidate that is absent from the data is kept. It depends on
    public inputs only.

    Privacy claim. The candidate list is public and every candidate is measured, so the measured
    vector is a histogram over a data-independent set of cells; one added or removed row changes
    one cell by 1 (or none, if its value is not a candidate): L2 sensitivity 1, ρ-zCDP (CKS 2020,
    Theorem 14). Thresholding, the cap and the ordering are post-processing. δ = 0.
    """
    budget = _positive_rho(rho)
    names = _check_candidates(candidates)
    cap = _check_max_categories(max_categories)
    true_counts = _check_counts(counts)
    sigma2 = sigma2_for_rho(1, budget)
    if threshold is None:
        tau = smallest_tail_threshold(sigma2, DEFAULT_FALSE_KEEP / len(names))
    elif isinstance(threshold, bool) or not isinstance(threshold, int):
        raise TypeError("threshold must be an int")
    else:
        tau = threshold
    exact = np.array([true_counts.get(name, 0) for name in names], dtype=np.int64)
    noisy = exact + discrete_gaussian_noise(sigma2, exact.size, source)
    kept = _largest_clearing(noisy, tau, cap)
    cost = DiscoveryCost(
        CANDIDATES_MECHANISM,
        budget,
        parameters={
            "candidates": len(names),
            "max_categories": cap,
            "threshold": tau,
            "default_threshold": threshold is None,
            "sigma2": str(sigma2),
        },
    )
    order = np.sort(kept)
    return DiscoveredCategories(
        tuple(names[i] for i in order.tolist()), tuple(noisy[order].tolist()), tau, cost
    )


def discover_open_set(
    counts: Mapping[str, int],
    *,
    max_categories: int,
    rho: Fraction | int | Decimal,
    delta: Fraction | int | Decimal,
    source: random.Random | None = None,
    contribution_bound: int = 1,
) -> DiscoveredCategories:
    """The values present in the data whose noisy count clears τ; (ρ, δ)-approximate zCDP per
    row, and (k²ρ, δ)-approximate zCDP per unit of at most k = ``contribution_bound`` rows.

    Only values with count ≥ 1 in ``counts`` are measured: each gets N_Z(0, σ²) noise with
    σ² = 1/(2ρ). τ = 1 + t, where t is the smallest integer ≥ 1 with P(Z ≥ t) ≤ δ by the exact
    discrete Gaussian tail bound (:func:`engine.discovery.tails.discrete_gaussian_tail_bound`, a
    proven upper bound, not the continuous Φ). Values with noisy count ≥ τ are released with their
    noisy counts, at most ``max_categories`` (the largest noisy counts; ties to the smaller value
    text), returned sorted by value text (a public, data-independent order of the released set).
    ``delta`` must lie in [1e-100, 1); δ = 0 is refused: without a δ no value learned from the
    data alone can be released.

    Privacy claim (proof sketch; Bun & Steinke 2016, Definition 8.1, approximate zCDP). Let
    D' = D plus one row with value v (removal is the same pair read the other way).

    * v occurs in D: both datasets measure the same set of values and v's count differs by 1, so
      the noisy counts are a histogram of L2 sensitivity 1 on the same cells: ρ-zCDP (CKS 2020,
      Theorem 14), and thresholding, the cap and the sort are post-processing.
    * v does not occur in D: D' measures one more value, v, with count 1; all other values have
      the same counts and independent noise, so conditioned on the event E' = "v not released"
      (1 + Z < τ) the output on D' has exactly the distribution of the output on D. P(not E') =
      P(Z ≥ τ − 1) = P(Z ≥ t) ≤ δ. With E = everything on D and E' on D', the Rényi divergences
      between the conditioned outputs are 0 in both directions.

    So for every neighbouring pair there are events of probability ≥ 1 − δ under which the
    divergence is at most ρα: (ρ, δ)-approximate zCDP, the "Gaussian sparse histogram" analysis
    of Wilson et al. 2020 (the exact analysis of Wilkins et al. 2024 gives a tighter δ; this one
    is the simple upper bound). Approximate zCDP composes by adding ρ and δ.

    Per unit of at most k rows (k = ``contribution_bound`` > 1; the noise is still σ² = 1/(2ρ),
    ``rho`` being the row-level budget ρ/k² of engine.privacy_unit.row_level_rho). Let D' = D
    plus the rows of one unit: a_j ≥ 0 rows on values v_j that occur in D and c_i ≥ 1 rows on
    values w_i that do not, Σ a_j + Σ c_i ≤ k. Group privacy for (ρ, δ)-approximate zCDP would
    multiply δ by about k·e^(…); instead, directly:

    * The measured values of D' are those of D plus the w_i. Let E' = "no w_i is released"
      (c_i + Z_i < τ for all i), an event on the w_i's independent noise only. Conditioned on
      E', the output on D' is the same function (thresholding, cap, sort) of the noisy counts of
      D's values, whose exact counts differ from D's by the vector (a_j), of L2 norm
      √(Σ a_j²) ≤ Σ a_j ≤ k. So the Rényi divergence of order α between the output on D and the
      output on D' given E' is at most α·k²/(2σ²) = α·k²ρ (CKS 2020, Theorem 14, then
      post-processing), in both directions.
    * P(not E') ≤ Σ_i P(Z ≥ τ − c_i) ≤ max over splits (c_i ≥ 1, Σ c_i ≤ k) of that sum, which
      :func:`engine.discovery.tails.split_tail_bound` bounds exactly over all splits; τ is the
      smallest integer with that bound ≤ δ (:func:`~engine.discovery.tails.smallest_split_
      threshold`). The worst split is either one value with all k rows (P(Z ≥ τ − k)) or
      several smaller ones: the bound takes the maximum over all of them.

    So with E = everything on D, every unit-neighbouring pair has events of probability
    ≥ 1 − δ with divergence ≤ α·k²ρ: (k²ρ, δ)-approximate zCDP per unit (Bun & Steinke 2016,
    Definition 8.1). The cost returned states the row-level ρ (the discovery plan states it per
    unit, k²ρ) and records k as the parameter ``max_rows_per_unit``. With k = 1 the threshold
    is the row-level one, 1 + t, and nothing else changes.
    """
    k = check_contribution_bound(contribution_bound)
    budget = _positive_rho(rho)
    tail = exact_budget(delta, "delta")
    if tail <= 0:
        raise ValueError("delta must be positive: an open-set discovery cannot be pure zCDP")
    if not MIN_TAIL_PROBABILITY <= tail < 1:
        raise ValueError("delta must lie in [1e-100, 1)")
    cap = _check_max_categories(max_categories)
    true_counts = _check_counts(counts)
    sigma2 = sigma2_for_rho(1, budget)
    if k == 1:
        t = smallest_tail_threshold(sigma2, tail)
        tau = 1 + t
        release_bound = discrete_gaussian_tail_bound(sigma2, t)
    else:
        tau = smallest_split_threshold(sigma2, tail, k)
        release_bound = split_tail_bound(sigma2, tau, k)
    # Sorted so the released order (and the tie-break) is a function of the value texts only.
    present = sorted(value for value, count in true_counts.items() if count > 0)
    exact = np.array([true_counts[value] for value in present], dtype=np.int64)
    noisy = exact + discrete_gaussian_noise(sigma2, exact.size, source)
    kept = np.sort(_largest_clearing(noisy, tau, cap))
    parameters: dict[str, int | str | float] = {
        "max_categories": cap,
        "threshold": tau,
        "sigma2": str(sigma2),
        "singleton_release_bound": release_bound,
    }
    if k > 1:
        parameters["max_rows_per_unit"] = k
    cost = DiscoveryCost(OPEN_SET_MECHANISM, budget, tail, parameters=parameters)
    return DiscoveredCategories(
        tuple(present[i] for i in kept.tolist()), tuple(noisy[kept].tolist()), tau, cost
    )


def _largest_clearing(noisy: IntArray, threshold: int, cap: int) -> IntArray:
    """Positions of the noisy counts ≥ threshold, at most ``cap`` of them, largest first; ties go
    to the earlier position (a stable sort)."""
    clearing = np.flatnonzero(noisy >= threshold)
    order = np.argsort(-noisy[clearing], kind="stable")
    kept: IntArray = clearing[order[:cap]]
    return kept


def _positive_rho(rho: Fraction | int | Decimal) -> Fraction:
    budget = exact_budget(rho, "rho")
    if budget <= 0:
        raise ValueError("rho must be positive")
    return budget


def _check_candidates(candidates: Sequence[str]) -> tuple[str, ...]:
    if isinstance(candidates, str):
        raise TypeError("candidates must be a sequence of strings, not one string")
    names = tuple(candidates)
    if not names:
        raise ValueError("the candidate list is empty")
    if len(names) > MAX_CANDIDATES:
        raise ValueError(f"at most {MAX_CANDIDATES} candidates are measured, got {len(names)}")
    if not all(isinstance(name, str) for name in names):
        raise TypeError("candidates must be strings")
    duplicates = len(names) - len(set(names))
    if duplicates:
        raise ValueError(f"the candidate list repeats {duplicates} values")
    return names


def _check_max_categories(max_categories: int) -> int:
    if isinstance(max_categories, bool) or not isinstance(max_categories, int):
        raise TypeError("max_categories must be an int")
    if not 1 <= max_categories <= MAX_CATEGORIES:
        raise ValueError(f"max_categories must be from 1 to {MAX_CATEGORIES}")
    return max_categories


def _check_counts(counts: Mapping[str, int]) -> dict[str, int]:
    """The counts as a dict of str → int ≥ 0; refusals count offending entries, never show them."""
    checked: dict[str, int] = {}
    bad_keys = bad_counts = 0
    for value, count in counts.items():
        if not isinstance(value, str):
            bad_keys += 1
            continue
        if isinstance(count, bool) or not isinstance(count, int | np.integer) or count < 0:
            bad_counts += 1
            continue
        checked[value] = int(count)
    if bad_keys:
        raise TypeError(f"count keys must be strings ({bad_keys} are not)")
    if bad_counts:
        raise ValueError(f"counts must be non-negative integers ({bad_counts} are not)")
    return checked
