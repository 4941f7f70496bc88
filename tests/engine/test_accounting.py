"""Exact ρ arithmetic and the CKS ρ ↔ (ε, δ) conversion."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.accounting import (
    RHO_QUANTUM,
    cks_bound_holds,
    delta_for,
    epsilon_from_rho_delta,
    gaussian_rho,
    rho_from_epsilon_delta,
    sigma2_for_rho,
    split_rho,
)

positive_fractions = st.fractions(min_value=Fraction(1, 10**9), max_value=10**6).filter(
    lambda f: f > 0
)


def brute_force_delta(rho: float, epsilon: float) -> float:
    """The CKS bound minimised over a dense grid of α (an independent check of the optimiser)."""
    alpha = 1.0 + np.logspace(-8, 6, 200_001)
    log_delta = (
        (alpha - 1) * (alpha * rho - epsilon) - np.log(alpha - 1) + alpha * np.log1p(-1 / alpha)
    )
    return float(min(1.0, math.exp(log_delta.min())))


def test_rho_test_vector() -> None:
    rho = rho_from_epsilon_delta(1, 1e-9)
    assert isinstance(rho, Decimal)
    assert abs(rho - Decimal("0.0149730577")) <= Decimal("1e-9")


def test_epsilon_test_vector() -> None:
    epsilon = epsilon_from_rho_delta(0.1, 1e-6)
    assert isinstance(epsilon, Decimal)
    assert abs(epsilon - Decimal("2.1419")) <= Decimal("1e-4")


@pytest.mark.parametrize(
    ("rho", "epsilon"), [(0.0149730577, 1.0), (0.1, 2.1419), (0.5, 1.0), (2.0, 10.0), (1e-4, 0.1)]
)
def test_delta_for_matches_brute_force_minimum(rho: float, epsilon: float) -> None:
    expected = brute_force_delta(rho, epsilon)
    actual = delta_for(rho, epsilon)
    # The bisection finds the infimum: never above the grid minimum (beyond rounding), and close.
    assert actual <= expected * (1 + 1e-9)
    assert actual >= expected * (1 - 1e-6)


def test_delta_for_edge_cases() -> None:
    assert delta_for(0.0, 1.0) == 0.0
    assert 0.99 < delta_for(10.0, 0.0) <= 1.0
    assert delta_for(1e6, 1.0) == 1.0
    with pytest.raises(ValueError):
        delta_for(-1.0, 1.0)
    with pytest.raises(ValueError):
        delta_for(1.0, -1.0)
    with pytest.raises(ValueError):
        delta_for(math.nan, 1.0)


@given(
    rho=st.floats(min_value=1e-6, max_value=10.0),
    epsilon=st.floats(min_value=0.01, max_value=20.0),
    factor=st.floats(min_value=1.01, max_value=3.0),
)
def test_delta_is_increasing_in_rho_and_decreasing_in_epsilon(
    rho: float, epsilon: float, factor: float
) -> None:
    base = delta_for(rho, epsilon)
    assert delta_for(rho * factor, epsilon) >= base
    assert delta_for(rho, epsilon * factor) <= base


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(1.0, 1e-9), (0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-5), (3.0, 1e-12)]
)
def test_rho_from_epsilon_delta_is_safe_and_tight(epsilon: float, delta: float) -> None:
    rho = rho_from_epsilon_delta(epsilon, delta)
    assert rho == rho.quantize(RHO_QUANTUM)
    assert delta_for(float(rho), epsilon) <= delta
    # Rounded down to the quantum, not further: a few quanta more already breaks the bound.
    assert delta_for(float(rho + 5 * RHO_QUANTUM), epsilon) > delta


@pytest.mark.parametrize(("rho", "delta"), [(0.1, 1e-6), (0.5, 1e-9), (1.0, 1e-5), (1e-4, 1e-8)])
def test_epsilon_from_rho_delta_is_safe_and_tight(rho: float, delta: float) -> None:
    epsilon = epsilon_from_rho_delta(rho, delta)
    assert delta_for(rho, float(epsilon)) <= delta
    assert delta_for(rho, float(epsilon - 5 * RHO_QUANTUM)) > delta


def test_epsilon_from_rho_accepts_exact_types_and_zero() -> None:
    assert epsilon_from_rho_delta(Fraction(1, 10), 1e-6) == epsilon_from_rho_delta(0.1, 1e-6)
    assert epsilon_from_rho_delta(Decimal("0.1"), Decimal("1e-6")) == epsilon_from_rho_delta(
        0.1, 1e-6
    )
    assert epsilon_from_rho_delta(0, 1e-6) == 0


@given(
    epsilon=st.floats(min_value=0.05, max_value=10.0),
    delta_exponent=st.integers(min_value=3, max_value=12),
)
def test_rho_is_monotone_and_round_trips(epsilon: float, delta_exponent: int) -> None:
    delta = 10.0**-delta_exponent
    rho = rho_from_epsilon_delta(epsilon, delta)
    assert rho_from_epsilon_delta(epsilon * 1.1, delta) >= rho
    assert rho_from_epsilon_delta(epsilon, delta * 10) >= rho
    # ε recovered from the rounded-down ρ is at most the ε asked for, and very close to it.
    recovered = epsilon_from_rho_delta(rho, delta)
    assert recovered <= Decimal(epsilon) + RHO_QUANTUM
    assert recovered >= Decimal(epsilon) * Decimal("0.9999")


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(0, 1e-9), (-1, 1e-9), (1, 0), (1, 1), (1, -0.5), (1, 2), (math.inf, 0.1)],
)
def test_rho_from_epsilon_delta_rejects_bad_input(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        rho_from_epsilon_delta(epsilon, delta)


@pytest.mark.parametrize(("rho", "delta"), [(-0.1, 1e-6), (0.1, 0), (0.1, 1), (math.inf, 1e-6)])
def test_epsilon_from_rho_delta_rejects_bad_input(rho: float, delta: float) -> None:
    with pytest.raises(ValueError):
        epsilon_from_rho_delta(rho, delta)


def test_gaussian_rho_known_values() -> None:
    assert gaussian_rho(1, Fraction(1, 2)) == 1
    assert gaussian_rho(2, Fraction(4)) == Fraction(1, 2)
    assert sigma2_for_rho(1, Fraction(1, 3)) == Fraction(3, 2)


@given(sensitivity=positive_fractions, rho=positive_fractions)
def test_sigma2_for_rho_round_trips_exactly(sensitivity: Fraction, rho: Fraction) -> None:
    sigma2 = sigma2_for_rho(sensitivity, rho)
    assert isinstance(sigma2, Fraction)
    assert gaussian_rho(sensitivity, sigma2) == rho


@pytest.mark.parametrize("bad", [0.5, True, "1"])
def test_exact_functions_refuse_inexact_types(bad: object) -> None:
    with pytest.raises(TypeError):
        gaussian_rho(1, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sigma2_for_rho(1, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        split_rho(bad, [1, 2])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 3)])
def test_exact_functions_refuse_non_positive(bad: Fraction) -> None:
    with pytest.raises(ValueError):
        gaussian_rho(1, bad)
    with pytest.raises(ValueError):
        gaussian_rho(bad, Fraction(1))
    with pytest.raises(ValueError):
        sigma2_for_rho(1, bad)
    with pytest.raises(ValueError):
        split_rho(bad, [1])


@given(
    rho=positive_fractions,
    weights=st.lists(
        st.one_of(st.integers(min_value=1, max_value=10**6), positive_fractions),
        min_size=1,
        max_size=30,
    ),
)
def test_split_rho_sums_exactly(rho: Fraction, weights: list[Fraction | int]) -> None:
    parts = split_rho(rho, weights)
    assert len(parts) == len(weights)
    assert sum(parts, Fraction(0)) == rho
    total_weight = sum(Fraction(w) for w in weights)
    for part, weight in zip(parts, weights, strict=True):
        assert part == rho * Fraction(weight) / total_weight


def test_split_rho_awkward_thirds() -> None:
    parts = split_rho(Fraction(1, 3), [1] * 7)
    assert parts == (Fraction(1, 21),) * 7
    assert sum(parts, Fraction(0)) == Fraction(1, 3)


def test_split_rho_rejects_bad_weights() -> None:
    with pytest.raises(ValueError):
        split_rho(Fraction(1), [])
    with pytest.raises(ValueError):
        split_rho(Fraction(1), [1, 0])
    with pytest.raises(ValueError):
        split_rho(Fraction(1), [1, -2])


def _mp_true_delta(rho: Decimal, epsilon: Decimal) -> mpmath.mpf:
    """inf_α of the CKS bound in 60-digit mpmath: α is the root of the derivative of log δ(α),
    (2α − 1)ρ − ε + log(1 − 1/α), found by bisection independently of engine.accounting."""
    with mpmath.workdps(60):
        r, e = mpmath.mpf(str(rho)), mpmath.mpf(str(epsilon))

        def derivative(a: mpmath.mpf) -> mpmath.mpf:
            return (2 * a - 1) * r - e + mpmath.log(1 - 1 / a)

        low, high = mpmath.mpf(1), mpmath.mpf(2)
        while derivative(high) < 0:
            low, high = high, 2 * high
        for _ in range(400):
            mid = (low + high) / 2
            if derivative(mid) < 0:
                low = mid
            else:
                high = mid
        a = high
        return mpmath.exp((a - 1) * (a * r - e)) / (a - 1) * (1 - 1 / a) ** a


_LARGE_EPSILON_DELTAS = [
    Decimal(m) * Decimal(10) ** -k for k in range(1, 40) for m in (1, 2, 5) if m * 10.0**-k < 1
]


@pytest.mark.parametrize("epsilon", [Decimal(100), Decimal(300), Decimal(1000)])
def test_conversion_meets_the_bound_in_high_precision_at_large_epsilon(epsilon: Decimal) -> None:
    """At ε ≥ 100 the double-precision bound can be ~1e-14 (relative) below the true one; the
    returned ρ must satisfy the bound in 60-digit arithmetic for every δ, and the ε returned for
    that ρ too. (Before the 80-digit check, ε = 300, δ = 2e-12 and ε = 1000, δ = 1e-13 and 1e-17
    failed here.)"""
    with mpmath.workdps(60):
        for delta in _LARGE_EPSILON_DELTAS:
            rho = rho_from_epsilon_delta(epsilon, delta)
            assert _mp_true_delta(rho, epsilon) <= mpmath.mpf(str(delta)), (epsilon, delta, rho)
            # Still tight: one quantum more breaks the bound (or is within its 1e-40 slack).
            assert not cks_bound_holds(rho + 2 * RHO_QUANTUM, epsilon, delta)
            recovered = epsilon_from_rho_delta(rho, delta)
            assert recovered <= epsilon
            assert _mp_true_delta(rho, recovered) <= mpmath.mpf(str(delta)), (rho, delta)


@given(
    epsilon=st.decimals(min_value=Decimal("0.01"), max_value=Decimal(1000), places=3),
    delta_exponent=st.integers(min_value=1, max_value=30),
    mantissa=st.integers(min_value=1, max_value=9),
)
@settings(max_examples=150, deadline=None)
def test_conversion_meets_the_bound_in_high_precision(
    epsilon: Decimal, delta_exponent: int, mantissa: int
) -> None:
    delta = Decimal(mantissa) * Decimal(10) ** -delta_exponent
    if epsilon <= 0 or delta >= 1:
        return
    try:
        rho = rho_from_epsilon_delta(epsilon, delta)
    except ValueError:
        return  # converts to ρ = 0 (refused with 422)
    assert _mp_true_delta(rho, epsilon) <= mpmath.mpf(str(delta))
    recovered = epsilon_from_rho_delta(rho, delta)
    assert _mp_true_delta(rho, recovered) <= mpmath.mpf(str(delta))


def test_cks_bound_holds_agrees_with_the_bound() -> None:
    assert cks_bound_holds(Decimal("0.024355970359"), 1, Decimal("1e-6"))
    assert not cks_bound_holds(Decimal("0.024355970459"), 1, Decimal("1e-6"))
    assert cks_bound_holds(0, 1, Decimal("1e-6"))
    assert not cks_bound_holds(Fraction(1, 10), 1, 0)
    with pytest.raises(ValueError):
        cks_bound_holds(-1, 1, Decimal("0.1"))


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [("1", "0.99999"), ("1", "0.999999"), ("0.5", "0.9999999999"), ("300", "2e-12")],
)
def test_conversion_needs_few_high_precision_checks_near_delta_one(
    epsilon: str, delta: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Near δ → 1 the float optimum is millions of 1e-12 steps above what the 80-digit check
    accepts (review of issue 11: ε = 1, δ = 0.99999 did not return within 20 s, one check per
    step, holding an API thread). The search gallops and bisects instead, and the result holds."""
    import engine.accounting as accounting

    calls = 0
    real = accounting.cks_bound_holds

    def counted(*args: object) -> bool:
        nonlocal calls
        calls += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(accounting, "cks_bound_holds", counted)
    e, d = Decimal(epsilon), Decimal(delta)
    rho = rho_from_epsilon_delta(e, d)
    assert real(rho, e, d)
    assert calls <= 200, calls
    calls = 0
    eps = epsilon_from_rho_delta(rho, d)
    assert real(rho, eps, d)
    assert calls <= 200, calls
