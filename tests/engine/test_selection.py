"""The exponential mechanism's contract and its exact accounting (fast, deterministic).

Distributional tests live in test_selection_statistical.py.
"""

from __future__ import annotations

import math
import random
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import selection
from engine.noise import SecureRandom
from engine.selection import (
    epsilon_for_rho,
    exponential_mechanism,
    exponential_mechanism_rho,
    open_unit_uniforms,
)


def draws(scores: list[float], epsilon: float, sensitivity: float, n: int, seed: int) -> list[int]:
    source = random.Random(seed)
    return [exponential_mechanism(scores, epsilon, sensitivity, source=source) for _ in range(n)]


# --------------------------------------------------------------------------------------------
# exponential_mechanism
# --------------------------------------------------------------------------------------------


def test_a_huge_epsilon_returns_the_argmax() -> None:
    assert set(draws([1.0, 5.0, 3.0, 4.9], 1e6, 1.0, 300, seed=1)) == {1}
    assert set(draws([-3.0, -1.0, -2.0], 1e6, 0.5, 300, seed=2)) == {1}


def test_a_single_candidate_is_returned() -> None:
    assert exponential_mechanism([7.5], 1.0, 1.0, source=random.Random(0)) == 0


def test_minus_infinity_is_never_chosen() -> None:
    inf = math.inf
    assert set(draws([-inf, 0.0, -inf], 1e-9, 1.0, 300, seed=3)) == {1}
    chosen = draws([0.0, -inf, 0.0, -inf], 1e-9, 1.0, 500, seed=4)
    assert set(chosen) == {0, 2}


def test_draws_are_reproducible_with_a_seeded_source() -> None:
    scores = [0.0, 1.0, 2.0, 3.0]
    assert draws(scores, 1.0, 1.0, 200, seed=9) == draws(scores, 1.0, 1.0, 200, seed=9)
    assert draws(scores, 1.0, 1.0, 200, seed=9) != draws(scores, 1.0, 1.0, 200, seed=10)


def test_only_epsilon_over_sensitivity_and_score_differences_matter() -> None:
    scores = [0.0, 2.0, 5.0, 1.0, 3.0]
    base = draws(scores, 1.0, 1.0, 300, seed=5)
    # Doubling ε and Δ leaves ε/(2Δ) bit-identical; adding a constant leaves the differences.
    assert draws(scores, 2.0, 2.0, 300, seed=5) == base
    assert draws([s + 1000.0 for s in scores], 1.0, 1.0, 300, seed=5) == base
    assert draws(scores, 1.0, 2.0, 300, seed=5) != base


def test_scores_accept_arrays_and_lists() -> None:
    scores = np.array([0, 3, 1], dtype=np.int64)
    assert exponential_mechanism(scores, 100.0, 1.0, source=random.Random(0)) == 1
    assert exponential_mechanism((0.0, 3.0, 1.0), 100.0, 1.0, source=random.Random(0)) == 1


def test_extreme_score_gaps_do_not_overflow() -> None:
    chosen = draws([-1e308, 1e308, 0.0], 1e300, 1e-5, 50, seed=6)
    assert set(chosen) == {1}


@pytest.mark.parametrize(
    ("scores", "epsilon", "sensitivity", "error", "match"),
    [
        ([], 1.0, 1.0, ValueError, "non-empty"),
        ([[0.0, 1.0]], 1.0, 1.0, ValueError, "1-D"),
        ([0.0, math.nan], 1.0, 1.0, ValueError, "finite"),
        ([0.0, math.inf], 1.0, 1.0, ValueError, "finite"),
        ([-math.inf, -math.inf], 1.0, 1.0, ValueError, "at least one"),
        ([0.0], 0.0, 1.0, ValueError, "epsilon"),
        ([0.0], -1.0, 1.0, ValueError, "epsilon"),
        ([0.0], math.inf, 1.0, ValueError, "epsilon"),
        ([0.0], math.nan, 1.0, ValueError, "epsilon"),
        ([0.0], 1.0, 0.0, ValueError, "sensitivity"),
        ([0.0], 1.0, math.inf, ValueError, "sensitivity"),
        ([0.0], True, 1.0, TypeError, "epsilon"),
        ([0.0], "1", 1.0, TypeError, "epsilon"),
        ([0.0], 1e308, 1e-308, ValueError, "overflows"),
    ],
)
def test_inputs_are_validated(
    scores: list[float],
    epsilon: float,
    sensitivity: float,
    error: type[Exception],
    match: str,
) -> None:
    with pytest.raises(error, match=match):
        exponential_mechanism(scores, epsilon, sensitivity, source=random.Random(0))


def test_the_source_must_be_a_random_instance() -> None:
    with pytest.raises(TypeError, match=r"random\.Random"):
        exponential_mechanism([0.0, 1.0], 1.0, 1.0, source=np.random.default_rng(0))  # type: ignore[arg-type]


def test_the_default_source_is_the_os_csprng(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[random.Random] = []

    class RecordingSecureRandom(SecureRandom):
        def __init__(self) -> None:
            super().__init__()
            created.append(self)

    monkeypatch.setattr(selection, "SecureRandom", RecordingSecureRandom)
    assert exponential_mechanism([0.0, 1.0, 2.0], 1.0, 1.0) in {0, 1, 2}
    assert len(created) == 1
    assert isinstance(created[0], random.SystemRandom)


def test_numpy_randomness_is_never_used(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("np.random must not be used for DP selection")

    for name in ("default_rng", "random", "gumbel", "uniform", "choice", "rand"):
        monkeypatch.setattr(np.random, name, forbidden)
    state = np.random.get_state(legacy=False)
    exponential_mechanism([0.0, 1.0, 2.0], 1.0, 1.0, source=random.Random(1))
    exponential_mechanism([0.0, 1.0, 2.0], 1.0, 1.0)
    after = np.random.get_state(legacy=False)
    assert state["bit_generator"] == after["bit_generator"]
    np.testing.assert_array_equal(state["state"]["key"], after["state"]["key"])
    assert state["state"]["pos"] == after["state"]["pos"]


# --------------------------------------------------------------------------------------------
# open_unit_uniforms
# --------------------------------------------------------------------------------------------


def test_uniforms_are_open_interval_multiples_of_2_to_minus_53() -> None:
    u = open_unit_uniforms(10_000, random.Random(3))
    assert u.shape == (10_000,)
    assert (u > 0).all()
    assert (u < 1).all()
    scaled = u * 2.0**53
    np.testing.assert_array_equal(scaled, np.floor(scaled))
    assert abs(float(u.mean()) - 0.5) < 0.02
    assert open_unit_uniforms(0, random.Random(3)).shape == (0,)


def test_zero_words_are_redrawn() -> None:
    class ZerosFirst(random.Random):
        """Returns all-zero bytes on the first call, then ordinary bytes."""

        calls = 0

        def randbytes(self, n: int) -> bytes:
            self.calls += 1
            if self.calls == 1:
                return bytes(n)
            return super().randbytes(n)

    source = ZerosFirst(0)
    u = open_unit_uniforms(4, source)
    assert (u > 0).all()
    assert source.calls == 2


# --------------------------------------------------------------------------------------------
# Accounting: ρ = ε²/8
# --------------------------------------------------------------------------------------------


def test_exponential_mechanism_rho_is_exact() -> None:
    assert exponential_mechanism_rho(2.0) == Fraction(1, 2)
    assert exponential_mechanism_rho(0.1) == Fraction(0.1) ** 2 / 8
    with pytest.raises(ValueError, match="epsilon"):
        exponential_mechanism_rho(0.0)


def test_epsilon_for_rho_of_a_worked_example() -> None:
    eps = epsilon_for_rho(Fraction(1, 2))  # √(8 · ½) = 2
    assert eps < 2.0
    assert eps == pytest.approx(2.0, rel=1e-11)
    assert exponential_mechanism_rho(eps) <= Fraction(1, 2)


@settings(max_examples=500, deadline=None)
@given(
    st.fractions(
        min_value=Fraction(1, 10**30), max_value=Fraction(10**30), max_denominator=10**30
    ).filter(lambda r: r > 0)
)
def test_epsilon_for_rho_never_exceeds_the_bound(rho: Fraction) -> None:
    eps = epsilon_for_rho(rho)
    assert eps > 0
    assert Fraction(eps) ** 2 / 8 <= rho
    assert exponential_mechanism_rho(eps) <= rho
    # …and is tight: at most a relative 1e-11 below √(8ρ).
    assert eps >= math.sqrt(8 * float(rho)) * (1 - 1e-11)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 10**15), st.integers(1, 10**4))
def test_epsilon_for_rho_on_ledger_shaped_budgets(micro_rho: int, parts: int) -> None:
    # A ledger ρ (12 decimals) split into equal parts, as mechanisms split their budget.
    rho = Fraction(Decimal(micro_rho) / Decimal(10**12)) / parts
    eps = epsilon_for_rho(rho)
    assert Fraction(eps) ** 2 / 8 <= rho
    assert parts * exponential_mechanism_rho(eps) <= Fraction(Decimal(micro_rho) / 10**12)


@pytest.mark.parametrize(
    ("rho", "error"),
    [
        (0.5, TypeError),
        (True, TypeError),
        (Decimal("0.5"), TypeError),
        (Fraction(0), ValueError),
        (Fraction(-1, 2), ValueError),
        (Fraction(1, 10**700), ValueError),
        (Fraction(10**700), ValueError),
    ],
)
def test_epsilon_for_rho_rejects_bad_budgets(rho: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        epsilon_for_rho(rho)  # type: ignore[arg-type]


def test_epsilon_for_rho_accepts_ints() -> None:
    assert Fraction(epsilon_for_rho(2)) ** 2 / 8 <= 2
