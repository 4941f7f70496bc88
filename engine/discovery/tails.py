"""Upper bounds on the upper tail of the discrete Gaussian, and thresholds chosen from them.

Thresholds that decide whether a noisy count is released must come with a probability that is
guaranteed, not approximated: the δ of the open-set category discovery is exactly such a tail.
:func:`discrete_gaussian_tail_bound` returns a number that is provably at least
P(Z ≥ t) for Z ~ N_Z(0, σ²) (Canonne, Kamath, Steinke 2020, Definition 1: P(Z = z) ∝
exp(−z²/(2σ²)) on the integers).

The bound. With f(z) = exp(−z²/(2σ²)) and t ≥ 1,

    P(Z ≥ t) = Σ_{z ≥ t} f(z) / Σ_{z ∈ ℤ} f(z).

* Numerator: the first J terms f(t), …, f(t + J − 1) are summed directly; the rest is at most
  f(u) + ∫_u^∞ f(x) dx = f(u) + σ√(2π)·Q(u/σ) with u = t + J, because f decreases on [u, ∞)
  (Q is the standard normal upper tail).
* Denominator: by Poisson summation Σ_z f(z) = σ√(2π)·Σ_k exp(−2π²σ²k²) ≥ σ√(2π), and the z = 0
  term alone gives Σ_z f(z) ≥ 1, so the denominator is at least max(1, σ√(2π)).

Both bounds are evaluated in double precision; every rounding error there (exp, the float value
of σ², ``scipy.special.ndtr``, the compensated sum) is below 1e−12 relative for the arguments
that matter (tails ≥ :data:`MIN_TAIL_PROBABILITY`), and the result is multiplied by 1 + 1e−9, so
the returned value is an upper bound on the exact tail.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from engine.privacy_unit.group import check_contribution_bound

_DIRECT_TERMS_CAP = 1 << 16
_ROUNDING_MARGIN = 1.0 + 1e-9
_SQRT_TWO_PI = math.sqrt(2.0 * math.pi)

SPLIT_DIRECT_TERMS = 1 << 21
"""Terms summed directly over the k tails of one :func:`split_tail_bound` (k = 1000 at σ = 10⁶
took a minute with 65,536 each; the integral remainder makes fewer terms cost under 1e−5 relative
looseness there, a threshold higher by at most a unit or so)."""

MIN_TAIL_PROBABILITY = Fraction(1, 10**100)
"""Smallest tail probability a threshold is chosen for: far above double precision's underflow
(1e−308), so the float bound is never rounded to zero where it is compared."""


def discrete_gaussian_tail_bound(sigma2: Fraction, t: int) -> float:
    """An upper bound on P(Z ≥ t) for Z ~ N_Z(0, σ²) (see the module docstring); 1 for t ≤ 0.

    Tight: for σ ≥ 1 it exceeds the exact tail by less than 1e−8 relative (the direct sum covers
    12σ + 16 terms, after which the remainder is negligible, and σ√(2π) is the normaliser to
    within 2·exp(−2π²σ²)).
    """
    s2 = _positive_fraction(sigma2, "sigma2")
    if isinstance(t, bool) or not isinstance(t, int):
        raise TypeError("t must be an int")
    if t <= 0:
        return 1.0
    return _tail_bound(s2, t, _DIRECT_TERMS_CAP)


def _tail_bound(s2: Fraction, t: int, cap: int) -> float:
    """The bound of :func:`discrete_gaussian_tail_bound` with at most ``cap`` ≥ 0 terms summed
    directly (fewer terms only move more of the tail into the remainder's integral bound, which
    holds from any u ≥ t: still an upper bound, looser by about f(u)/(σ√(2π)))."""
    from scipy import special  # here, not at import: `rhosynth sample` needs no scipy

    if t <= 0:
        return 1.0
    variance = float(s2)
    sigma = math.sqrt(variance)
    terms = min(math.ceil(12.0 * sigma) + 16, cap)
    z = np.arange(t, t + terms, dtype=np.float64)
    direct = math.fsum(np.exp(-(z * z) / (2.0 * variance)).tolist())
    u = float(t + terms)
    remainder = math.exp(-(u * u) / (2.0 * variance)) + sigma * _SQRT_TWO_PI * float(
        special.ndtr(-u / sigma)
    )
    normaliser = max(1.0, sigma * _SQRT_TWO_PI)
    return min(1.0, (direct + remainder) / normaliser * _ROUNDING_MARGIN)


def smallest_tail_threshold(sigma2: Fraction, probability: Fraction) -> int:
    """The smallest integer t ≥ 1 with ``discrete_gaussian_tail_bound(σ², t) ≤ probability``.

    So P(Z ≥ t) ≤ probability holds for the t returned (the comparison is exact: the float bound
    is converted to a Fraction). ``probability`` must lie in [MIN_TAIL_PROBABILITY, 1).
    """
    from scipy import stats  # here, not at import: `rhosynth sample` needs no scipy

    s2 = _positive_fraction(sigma2, "sigma2")
    p = Fraction(probability)
    if not MIN_TAIL_PROBABILITY <= p < 1:
        raise ValueError("the tail probability must lie in [1e-100, 1)")

    def clears(t: int) -> bool:
        return Fraction(discrete_gaussian_tail_bound(s2, t)) <= p

    # The continuous quantile is within a few units of the answer; search from just below it.
    guess = math.floor(math.sqrt(float(s2)) * float(stats.norm.isf(float(p)))) - 2
    return _first_true(clears, max(1, guess))


def _first_true(predicate: Callable[[int], bool], start: int) -> int:
    """The smallest n ≥ 1 with ``predicate(n)``, for a predicate monotone in n (false, then
    true), by galloping from ``start`` and bisecting; ``predicate`` is never called below 1."""
    if predicate(start):
        false_at, true_at, step = start, start, 1
        while true_at > 1:
            false_at = max(0, true_at - step)
            if false_at == 0 or not predicate(false_at):
                break
            true_at, step = false_at, step * 2
        else:
            return 1
    else:
        false_at, step = start, 1
        true_at = start + step
        while not predicate(true_at):
            false_at, step = true_at, step * 2
            true_at = false_at + step
    # Invariant: predicate(true_at); false_at == 0 or not predicate(false_at).
    while true_at - false_at > 1:
        middle = (true_at + false_at) // 2
        if predicate(middle):
            true_at = middle
        else:
            false_at = middle
    return true_at


def _positive_fraction(value: Fraction | int, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise TypeError(f"{name} must be a Fraction or int")
    if value <= 0:
        raise ValueError(f"{name} must be positive")
    return Fraction(value)


def split_tail_bound(
    sigma2: Fraction,
    threshold: int,
    contribution_bound: int,
    _tails: dict[int, float] | None = None,
) -> float:
    """An upper bound on max Σ_i P(c_i + Z ≥ τ) over every split of at most k rows into novel
    values (integers c_i ≥ 1 with Σ c_i ≤ k), Z ~ N_Z(0, σ²), τ = ``threshold``.

    This is the probability that one unit of at most k rows makes the open-set category
    discovery release a value that only it holds (engine/discovery/categories.py). Exact over
    the splits: with f(c) = :func:`discrete_gaussian_tail_bound`(σ², τ − c) (each an upper
    bound on P(Z ≥ τ − c)), best(0) = 0 and best(s) = max_{1 ≤ c ≤ s} f(c) + best(s − c) is the
    largest Σ f(c_i) over the splits of exactly s rows; best is non-decreasing (best(s + 1) ≥
    best(s) + f(1)), so best(k) covers Σ c_i ≤ k. The sums are rounded in double precision (at
    most k terms, relative error below k·2⁻⁵³ ≤ 1.2e−13 for k ≤ 1000), and the result is
    multiplied by 1 + 1e−9. With k = 1 it is f(1)·(1 + 1e−9) ≥ P(Z ≥ τ − 1). For k > 1 each f(c)
    sums at most :data:`SPLIT_DIRECT_TERMS`/k terms directly (the rest by the integral bound).
    """
    s2 = _positive_fraction(sigma2, "sigma2")
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise TypeError("threshold must be an int")
    k = check_contribution_bound(contribution_bound)
    tails = {} if _tails is None else _tails  # t → tail bound at this σ², reused by searches
    # At most SPLIT_DIRECT_TERMS terms summed directly over the k tails (the rest is bounded by
    # the integral: a valid, slightly looser bound; with k = 1 the same as the row level's).
    cap = min(_DIRECT_TERMS_CAP, max(16, SPLIT_DIRECT_TERMS // k))
    f = np.zeros(k + 1)
    for c in range(1, k + 1):
        t = threshold - c
        if t not in tails:
            tails[t] = _tail_bound(s2, t, cap)
        f[c] = tails[t]
    best = np.zeros(k + 1)
    for s in range(1, k + 1):
        # f[1..s] + best[s-1..0]
        best[s] = float(np.max(f[1 : s + 1] + best[s - 1 :: -1][:s]))
    return min(1.0, float(best[k]) * _ROUNDING_MARGIN)


def smallest_split_threshold(
    sigma2: Fraction, probability: Fraction, contribution_bound: int
) -> int:
    """The smallest integer τ ≥ 1 with ``split_tail_bound(σ², τ, k) ≤ probability`` (exact
    comparison of the float bound as a Fraction). With k = 1 this is 1 + :func:`smallest_tail_
    threshold`(σ², probability), the row-level open-set threshold."""
    s2 = _positive_fraction(sigma2, "sigma2")
    p = Fraction(probability)
    if not MIN_TAIL_PROBABILITY <= p < 1:
        raise ValueError("the tail probability must lie in [1e-100, 1)")
    k = check_contribution_bound(contribution_bound)

    tails: dict[int, float] = {}

    def clears(tau: int) -> bool:
        return Fraction(split_tail_bound(s2, tau, k, tails)) <= p

    # All k rows on one value needs P(Z ≥ τ − k) ≤ p already: τ ≥ k + t₁. Search from there.
    return _first_true(clears, k + smallest_tail_threshold(s2, p))
