"""Exact privacy arithmetic for ρ-zCDP (Bun & Steinke 2016).

Budgets that are charged are ``fractions.Fraction`` (inside the engine) or ``Decimal`` quantised to
:data:`RHO_QUANTUM` (in the ledger): sums of charges are exact, so "the sum of the measurements' ρ
equals the ρ given" is an equality, not a tolerance. Only the conversion between ρ and (ε, δ) uses
floating point, and it is rounded in the direction that keeps the stated guarantee true:
``rho_from_epsilon_delta`` rounds ρ down and ``epsilon_from_rho_delta`` rounds ε up. Their search
runs in double precision; the value they return is then verified in 80-digit decimal arithmetic
(:func:`cks_bound_holds`) and stepped by 10⁻¹² until that check passes, because at large ε the
double-precision bound can be below the true one by about 10⁻¹⁴ relative.

The conversion is Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy"
(NeurIPS 2020), Corollary 13: ρ-zCDP implies (ε, δ)-DP for

    δ = inf_{α > 1} exp((α − 1)(αρ − ε)) / (α − 1) · (1 − 1/α)^α.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from decimal import ROUND_CEILING, ROUND_FLOOR, Context, Decimal, localcontext
from fractions import Fraction

RHO_QUANTUM = Decimal("1e-12")
"""The ledger stores ρ (and ε) with 12 decimal places."""

_BISECTION_STEPS = 200
_CHECK_DIGITS = 80
"""Decimal digits of the high-precision check of the CKS bound."""
_CHECK_MARGIN = Decimal("1e-40")
"""Slack the check leaves in log δ, far above the 80-digit rounding error of its few operations."""


def exact_fraction(value: Fraction | int | Decimal, name: str) -> Fraction:
    """Convert an exact number to a Fraction; floats are refused so no rounding slips in."""
    if isinstance(value, bool) or not isinstance(value, Fraction | int | Decimal):
        raise TypeError(f"{name} must be a Fraction, int or Decimal, got {type(value).__name__}")
    if isinstance(value, Decimal) and not value.is_finite():
        raise ValueError(f"{name} must be finite")
    return Fraction(value)


def gaussian_rho(sensitivity: Fraction | int, sigma2: Fraction) -> Fraction:
    """ρ of the discrete Gaussian with variance parameter ``sigma2`` on a query of L2 sensitivity Δ.

    Privacy claim: adding discrete Gaussian noise N_Z(0, σ²) to each coordinate of an integer-valued
    query whose L2 sensitivity is Δ satisfies Δ²/(2σ²)-zCDP (Canonne, Kamath, Steinke 2020,
    Theorem 4 and its multivariate form, Theorem 14). The result is exact.
    """
    delta = exact_fraction(sensitivity, "sensitivity")
    s2 = exact_fraction(sigma2, "sigma2")
    if delta <= 0:
        raise ValueError("sensitivity must be positive")
    if s2 <= 0:
        raise ValueError("sigma2 must be positive")
    return delta * delta / (2 * s2)


def sigma2_for_rho(sensitivity: Fraction | int, rho: Fraction) -> Fraction:
    """The σ² at which the discrete Gaussian on a sensitivity-Δ query is exactly ρ-zCDP: Δ²/(2ρ)."""
    delta = exact_fraction(sensitivity, "sensitivity")
    r = exact_fraction(rho, "rho")
    if delta <= 0:
        raise ValueError("sensitivity must be positive")
    if r <= 0:
        raise ValueError("rho must be positive")
    return delta * delta / (2 * r)


def split_rho(rho: Fraction, weights: Sequence[Fraction | int]) -> tuple[Fraction, ...]:
    """Split ``rho`` into parts proportional to ``weights``; the parts sum to ``rho`` exactly.

    By sequential composition of zCDP (Bun & Steinke 2016, Lemma 2.3) measurements that are
    ρ_1, …, ρ_k-zCDP together are (ρ_1 + … + ρ_k)-zCDP, so a mechanism that spends these parts
    spends exactly ``rho``.
    """
    total = exact_fraction(rho, "rho")
    if total <= 0:
        raise ValueError("rho must be positive")
    if not weights:
        raise ValueError("split_rho needs at least one weight")
    exact_weights = [exact_fraction(w, "weight") for w in weights]
    if any(w <= 0 for w in exact_weights):
        raise ValueError("every weight must be positive")
    weight_sum = sum(exact_weights, Fraction(0))
    parts = [total * w / weight_sum for w in exact_weights]
    # Fraction arithmetic is exact, so this holds by construction; keep it checked all the same.
    if sum(parts, Fraction(0)) != total:
        raise AssertionError("split_rho lost precision")
    return tuple(parts)


def exact_share(value: float) -> Fraction:
    """A budget share given as a float (a JSON number), as the exact decimal it was written as.

    ``repr`` of a float is the shortest decimal that reads back as the same float, so 0.7 is
    7/10 and 1e-07 is 1/10⁷: a share is never rounded to 0 or 1, and sums of shares are checked
    exactly (0.7 + 0.2 + 0.1 is 1, although the float sum is 0.9999999999999999). For shares with at
    most six decimals this is the same value as ``Fraction(value).limit_denominator(10**6)``,
    which the mechanisms used before (and which turned 1e-07 into 0).
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"a share must be a number, got {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError("a share must be finite")
    return Fraction(repr(float(value)))


def _log_delta_at(alpha: float, rho: float, epsilon: float) -> float:
    return (
        (alpha - 1.0) * (alpha * rho - epsilon)
        - math.log(alpha - 1.0)
        + alpha * math.log1p(-1.0 / alpha)
    )


def _optimal_alpha(rho: float, epsilon: float) -> float:
    """The α > 1 minimising the CKS bound, by bisection on its derivative.

    log δ(α) is strictly convex on (1, ∞) (second derivative 2ρ + 1/(α(α − 1)) > 0) and its
    derivative (2α − 1)ρ − ε + log(1 − 1/α) runs from −∞ at α → 1 to +∞, so the root is unique.
    Any α gives a valid bound, so an imprecise root only makes δ larger, never smaller.
    """

    def derivative(alpha: float) -> float:
        return (2.0 * alpha - 1.0) * rho - epsilon + math.log1p(-1.0 / alpha)

    low = 1.0
    high = 2.0
    while derivative(high) < 0.0:
        low = high
        high *= 2.0
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if derivative(mid) < 0.0:
            low = mid
        else:
            high = mid
    return high


def delta_for(rho: float, epsilon: float) -> float:
    """The δ at which ρ-zCDP implies (ε, δ)-DP (CKS 2020, Corollary 13), capped at 1.

    Computed in log space at the α minimising the bound; a slightly-off α errs towards a larger
    (still valid) δ.
    """
    rho = float(rho)
    epsilon = float(epsilon)
    if not (math.isfinite(rho) and math.isfinite(epsilon)):
        raise ValueError("rho and epsilon must be finite")
    if rho < 0 or epsilon < 0:
        raise ValueError("rho and epsilon must be non-negative")
    if rho == 0:
        return 0.0
    alpha = _optimal_alpha(rho, epsilon)
    log_delta = _log_delta_at(alpha, rho, epsilon)
    if log_delta >= 0.0:
        return 1.0
    return math.exp(log_delta)


def _decimal(value: Decimal | float | Fraction | int, rounding: str) -> Decimal:
    """``value`` as a Decimal of :data:`_CHECK_DIGITS` digits, rounded in the direction given
    (floats and Decimals convert exactly; only a Fraction's division rounds)."""
    if isinstance(value, Fraction):
        context = Context(prec=_CHECK_DIGITS, rounding=rounding)
        return context.divide(Decimal(value.numerator), Decimal(value.denominator))
    return Decimal(value)


def cks_bound_holds(
    rho: Decimal | float | Fraction | int,
    epsilon: Decimal | float | Fraction | int,
    delta: Decimal | float | Fraction | int,
) -> bool:
    """Whether ρ-zCDP implies (ε, δ)-DP by CKS 2020, Corollary 13, checked in 80-digit decimals.

    The bound δ(α) = exp((α − 1)(αρ − ε)) / (α − 1) · (1 − 1/α)^α holds at every α > 1, so it is
    enough to find one α at which it is at most δ. α is the double-precision optimiser's (exact
    as a Decimal); log δ(α) is then evaluated with 80 significant digits (``Decimal.ln`` is
    correctly rounded) and must be at least 10⁻⁴⁰ below log δ. A Fraction ρ is rounded up and a
    Fraction ε or δ down, so every rounding makes the check stricter. An imprecise α only makes
    the check stricter too.
    """
    r = _decimal(rho, "ROUND_CEILING")
    e = _decimal(epsilon, "ROUND_FLOOR")
    d = _decimal(delta, "ROUND_FLOOR")
    if not (r.is_finite() and e.is_finite() and d.is_finite()):
        raise ValueError("rho, epsilon and delta must be finite")
    if r < 0 or e < 0:
        raise ValueError("rho and epsilon must be non-negative")
    if d <= 0:
        return False
    if r == 0:
        return True
    alpha_float = _optimal_alpha(float(r), float(e))
    with localcontext() as ctx:
        ctx.prec = _CHECK_DIGITS
        alpha = Decimal(alpha_float)
        log_delta = (alpha - 1) * (alpha * r - e) - (alpha - 1).ln() + alpha * (1 - 1 / alpha).ln()
        return log_delta + _CHECK_MARGIN <= d.ln()


def _check_delta(delta: float) -> None:
    if not (0.0 < delta < 1.0):
        raise ValueError("delta must lie strictly between 0 and 1")


def rho_from_epsilon_delta(epsilon: Decimal | float, delta: Decimal | float) -> Decimal:
    """The largest ρ (a multiple of RHO_QUANTUM) whose CKS conversion gives (ε, δ)-DP.

    Bisection on ρ (δ is increasing in ρ) in double precision, then rounded down to RHO_QUANTUM
    and moved down (:func:`_verified_step`) until :func:`cks_bound_holds` (80-digit check)
    accepts it for the exact ε and δ given, so the guarantee holds in exact arithmetic, not only
    in floats. Near δ → 1 the check uses an imprecise α and is not exactly monotone in ρ; the
    result then holds but can be slightly below the largest value that does (ε = 1,
    δ = 0.999999: 14.815464732248 against about 14.8154957 found by a finer search).
    """
    eps = float(epsilon)
    dlt = float(delta)
    if not math.isfinite(eps) or eps <= 0:
        raise ValueError("epsilon must be positive and finite")
    _check_delta(dlt)

    low = 0.0
    high = eps
    while delta_for(high, eps) <= dlt:
        low = high
        high *= 2.0
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if delta_for(mid, eps) <= dlt:
            low = mid
        else:
            high = mid

    with localcontext() as ctx:
        ctx.prec = 60
        rho = Decimal(low).quantize(RHO_QUANTUM, rounding=ROUND_FLOOR)

    def holds(candidate: Decimal) -> bool:
        return delta_for(float(candidate), eps) <= dlt and cks_bound_holds(
            candidate, epsilon, delta
        )

    rho = _verified_step(rho, holds, -1)
    if rho <= 0:
        raise ValueError("(epsilon, delta) is too small to give a positive rho at 1e-12 resolution")
    return rho


_LINEAR_STEPS = 8


def _verified_step(start: Decimal, holds: Callable[[Decimal], bool], direction: int) -> Decimal:
    """The value nearest ``start`` on the RHO_QUANTUM grid, going in ``direction`` (−1: down,
    +1: up), at which ``holds`` is true; ``holds`` is only ever trusted where it was evaluated.

    Usually the float result already holds or holds a step or two away. Near δ → 1 the float
    optimiser's α is too imprecise for the 80-digit check and the first value that holds can be
    millions of steps away (ε = 1, δ = 0.999999: about 2.5·10⁷), so after a few single steps
    this gallops (doubling the distance) to a value that holds and bisects back on the grid:
    O(log distance) checks instead of one per step. Going down stops at 0 (returned as is:
    the caller refuses it).
    """
    step = RHO_QUANTUM * direction
    value = start
    for _ in range(_LINEAR_STEPS):
        if value <= 0 or holds(value):
            return value
        value += step
    failing = value - step
    distance = 2 * RHO_QUANTUM
    while True:
        candidate = failing + distance * direction
        if candidate <= 0:
            candidate = Decimal(0)
            break
        if holds(candidate):
            break
        failing, distance = candidate, distance * 2
    if candidate == 0:
        return candidate
    # Invariant: ``holds(candidate)`` and not ``holds(failing)``; they are on the grid.
    while abs(candidate - failing) > RHO_QUANTUM:
        middle = ((candidate + failing) / 2).quantize(RHO_QUANTUM, rounding=ROUND_FLOOR)
        if middle in (candidate, failing):  # not reached: they are two or more quanta apart
            middle = failing + step
        if holds(middle):
            candidate = middle
        else:
            failing = middle
    return candidate


def epsilon_from_rho_delta(rho: Decimal | float | Fraction, delta: Decimal | float) -> Decimal:
    """The smallest ε (a multiple of 1e-12, rounded up) such that ρ-zCDP gives (ε, δ)-DP.

    Bisection in double precision, then rounded up and stepped up until :func:`cks_bound_holds`
    (80-digit check) accepts it for the exact ρ and δ given."""
    r = float(rho)
    dlt = float(delta)
    if not math.isfinite(r) or r < 0:
        raise ValueError("rho must be non-negative and finite")
    _check_delta(dlt)
    if r == 0:
        return Decimal(0)

    low = 0.0
    high = 1.0
    while delta_for(r, high) > dlt:
        low = high
        high *= 2.0
    for _ in range(_BISECTION_STEPS):
        mid = 0.5 * (low + high)
        if mid in (low, high):
            break
        if delta_for(r, mid) > dlt:
            low = mid
        else:
            high = mid

    with localcontext() as ctx:
        ctx.prec = 60
        epsilon = Decimal(high).quantize(RHO_QUANTUM, rounding=ROUND_CEILING)

    def holds(candidate: Decimal) -> bool:
        return delta_for(r, float(candidate)) <= dlt and cks_bound_holds(rho, candidate, delta)

    return _verified_step(epsilon, holds, +1)
