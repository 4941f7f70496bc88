"""Every discovery mechanism charges exactly the (ρ, δ) it was given: a property over budgets.

Hypothesis draws ρ in [1e-6, 10] and δ in [1e-12, 1/2] as Fractions with large denominators
and a small column; the result's cost must equal them exactly (Fraction equality), and its
``describe()`` must be JSON and read back to the same Fractions. Noise comes from a seeded source
only to keep the test deterministic.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.discovery import (
    DiscoveryCost,
    discover_from_candidates,
    discover_open_set,
    dp_quantile_edges,
)

RHOS = st.fractions(min_value=Fraction(1, 10**6), max_value=10, max_denominator=10**9)
DELTAS = st.fractions(
    min_value=Fraction(1, 10**12), max_value=Fraction(1, 2), max_denominator=10**12
)
COUNTS = st.dictionaries(st.text(max_size=4), st.integers(0, 50), max_size=8)


def read_back(cost: DiscoveryCost) -> tuple[Fraction, Fraction]:
    described = json.loads(json.dumps(cost.describe()))
    return Fraction(described["rho"]), Fraction(described["delta"])


@settings(max_examples=60, deadline=None)
@given(rho=RHOS, bins=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_quantile_edges_cost_is_rho(rho: Fraction, bins: int, seed: int) -> None:
    values = np.random.default_rng(seed).uniform(0, 10, 30)
    result = dp_quantile_edges(
        values, lower=0, upper=10, bins=bins, rho=rho, grid=64, source=random.Random(seed)
    )
    assert (result.cost.rho, result.cost.delta) == (rho, Fraction(0))
    assert read_back(result.cost) == (rho, Fraction(0))


@settings(max_examples=60, deadline=None)
@given(rho=RHOS, counts=COUNTS, seed=st.integers(0, 2**16))
def test_candidate_discovery_cost_is_rho(rho: Fraction, counts: dict[str, int], seed: int) -> None:
    candidates = sorted(counts) or ["only"]
    result = discover_from_candidates(
        counts, candidates=candidates, max_categories=3, rho=rho, source=random.Random(seed)
    )
    assert (result.cost.rho, result.cost.delta) == (rho, Fraction(0))
    assert read_back(result.cost) == (rho, Fraction(0))
    assert len(result.categories) <= 3
    assert list(result.categories) == [c for c in candidates if c in result.categories]


@settings(max_examples=60, deadline=None)
@given(rho=RHOS, delta=DELTAS, counts=COUNTS, seed=st.integers(0, 2**16))
def test_open_set_cost_is_rho_and_delta(
    rho: Fraction, delta: Fraction, counts: dict[str, int], seed: int
) -> None:
    result = discover_open_set(
        counts, max_categories=3, rho=rho, delta=delta, source=random.Random(seed)
    )
    assert (result.cost.rho, result.cost.delta) == (rho, delta)
    assert read_back(result.cost) == (rho, delta)
    assert len(result.categories) <= 3
    assert list(result.categories) == sorted(result.categories)
    assert set(result.categories) <= {value for value, count in counts.items() if count > 0}


def test_cost_validation() -> None:
    with pytest.raises(ValueError):
        DiscoveryCost("x", Fraction(-1))
    with pytest.raises(ValueError):
        DiscoveryCost("x", Fraction(1), Fraction(1))
    with pytest.raises(TypeError):
        DiscoveryCost("x", 0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        DiscoveryCost("x", Fraction(1), parameters={"a": [1]})  # type: ignore[dict-item]
    parameters = {"a": 1}
    cost = DiscoveryCost("x", Fraction(1), parameters=parameters)
    parameters["a"] = 2
    assert cost.parameters["a"] == 1
