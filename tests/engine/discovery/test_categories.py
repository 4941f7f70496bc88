"""Category discovery with and without a candidate list: order, caps, thresholds, refusals.

Deterministic: seeded sources or noise replaced by zeros; no false-failure rate to state.
"""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

import engine.discovery.categories as categories
from engine.discovery import (
    MAX_CANDIDATES,
    discover_from_candidates,
    discover_open_set,
    smallest_tail_threshold,
)
from engine.noise import discrete_gaussian_pmf

IntArray = npt.NDArray[np.int64]


def zero_noise(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
    return np.zeros(shape, dtype=np.int64)


COUNTS = {"red": 40, "green": 3, "blue": 25, "black": 0, "not-a-candidate": 99}
CANDIDATES = ["blue", "black", "green", "red", "white"]


def test_candidates_keep_list_order_and_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(categories, "discrete_gaussian_noise", zero_noise)
    found = discover_from_candidates(
        COUNTS, candidates=CANDIDATES, max_categories=10, rho=Fraction(1), threshold=3
    )
    assert found.categories == ("blue", "green", "red")
    assert found.noisy_counts == (25, 3, 40)
    assert found.mechanism == "discover_from_candidates" and found.threshold == 3


def test_candidates_cap_keeps_the_largest_in_list_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(categories, "discrete_gaussian_noise", zero_noise)
    found = discover_from_candidates(
        COUNTS, candidates=CANDIDATES, max_categories=2, rho=Fraction(1), threshold=1
    )
    assert found.categories == ("blue", "red")
    tied = discover_from_candidates(
        {"a": 5, "b": 5, "c": 5}, candidates=["c", "b", "a"], max_categories=2, rho=1, threshold=1
    )
    assert tied.categories == ("c", "b")  # ties go to the earlier candidate


def test_default_candidate_threshold_bounds_false_keeps() -> None:
    rho = Fraction(1, 8)
    found = discover_from_candidates(
        COUNTS, candidates=CANDIDATES, max_categories=5, rho=rho, source=random.Random(1)
    )
    sigma2 = 1 / (2 * rho)
    assert found.threshold == smallest_tail_threshold(sigma2, Fraction(1, 20) / len(CANDIDATES))
    # The exact tail at the threshold is below 5% / 5 candidates.
    tail = discrete_gaussian_pmf(float(sigma2), np.arange(found.threshold, 200)).sum()
    assert tail <= 0.01
    assert found.cost.parameters["default_threshold"] is True
    assert {"red", "blue"} <= set(found.categories) and "black" not in found.categories


def test_every_candidate_is_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []

    def spy(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
        sizes.append(shape)
        assert sigma2 == Fraction(5, 2)
        return np.zeros(shape, dtype=np.int64)

    monkeypatch.setattr(categories, "discrete_gaussian_noise", spy)
    discover_from_candidates(COUNTS, candidates=CANDIDATES, max_categories=1, rho=Fraction(1, 5))
    assert sizes == [len(CANDIDATES)]


def test_open_set_releases_only_present_values_sorted(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes: list[int] = []

    def spy(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
        sizes.append(shape)
        return np.zeros(shape, dtype=np.int64)

    monkeypatch.setattr(categories, "discrete_gaussian_noise", spy)
    found = discover_open_set(COUNTS, max_categories=10, rho=Fraction(1), delta=Fraction(1, 10**6))
    assert sizes == [4]  # "black" has count 0: not present, not measured
    assert found.threshold == 5  # σ² = 1/2: P(Z ≥ 4) ≈ 6e-8 ≤ 1e-6 < P(Z ≥ 3) ≈ 7e-5
    assert found.categories == ("blue", "not-a-candidate", "red")  # "green" (3) is below 5
    capped = discover_open_set(COUNTS, max_categories=2, rho=Fraction(1), delta=Fraction(1, 10**6))
    assert capped.categories == ("not-a-candidate", "red")


@pytest.mark.parametrize("rho", [Fraction(1, 100), Fraction(1, 2), Fraction(5)])
@pytest.mark.parametrize("delta", [Fraction(1, 10**9), Fraction(1, 1000), Fraction(1, 10)])
def test_open_set_threshold_is_the_smallest_safe_one(rho: Fraction, delta: Fraction) -> None:
    found = discover_open_set({"x": 1}, max_categories=1, rho=rho, delta=delta)
    sigma2 = float(1 / (2 * rho))
    t = found.threshold - 1  # a singleton is released iff 1 + Z ≥ τ iff Z ≥ t

    def tail(start: int) -> float:
        return float(discrete_gaussian_pmf(sigma2, np.arange(start, start + 4000)).sum())

    assert t >= 1 and tail(t) <= float(delta)
    if t > 1:
        assert tail(t - 1) > float(delta)
    assert found.cost.delta == delta and found.cost.rho == rho


def test_open_set_refuses_a_zero_delta() -> None:
    with pytest.raises(ValueError, match="delta must be positive"):
        discover_open_set({"a": 1}, max_categories=1, rho=Fraction(1), delta=Fraction(0))
    with pytest.raises(ValueError):
        discover_open_set({"a": 1}, max_categories=1, rho=Fraction(1), delta=Fraction(-1, 10))
    with pytest.raises(ValueError):
        discover_open_set({"a": 1}, max_categories=1, rho=Fraction(1), delta=Fraction(1))
    with pytest.raises(TypeError):
        discover_open_set({"a": 1}, max_categories=1, rho=Fraction(1), delta=1e-6)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"candidates": []}, ValueError, "empty"),
        ({"candidates": ["a", "b", "a"]}, ValueError, "repeats 1"),
        ({"candidates": [str(i) for i in range(MAX_CANDIDATES + 1)]}, ValueError, "at most"),
        ({"candidates": "abc"}, TypeError, "not one string"),
        ({"candidates": ["a", 3]}, TypeError, "strings"),
        ({"max_categories": 0}, ValueError, "max_categories"),
        ({"rho": Fraction(0)}, ValueError, "rho"),
        ({"rho": 0.1}, TypeError, "rho"),
        ({"threshold": 2.5}, TypeError, "threshold"),
    ],
)
def test_candidate_refusals(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    arguments: dict[str, object] = {"candidates": ["a", "b"], "max_categories": 2, "rho": 1}
    arguments.update(kwargs)
    with pytest.raises(error, match=message):
        discover_from_candidates({"a": 1}, **arguments)  # type: ignore[arg-type]


def test_bad_counts_are_counted_never_shown() -> None:
    for bad in ({"SECRET-VALUE": -1}, {"SECRET-VALUE": 1.5}, {3: 1}):
        with pytest.raises((ValueError, TypeError)) as refused:
            discover_open_set(bad, max_categories=1, rho=1, delta=Fraction(1, 10))  # type: ignore[arg-type]
        assert "SECRET" not in str(refused.value)
        assert "1 are not" in str(refused.value)
