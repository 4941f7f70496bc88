"""Discovery per unit of at most k rows: the open-set threshold over every split of a unit's rows,
and the per-unit statement of every clause's cost.

The threshold checks are deterministic: exact tail sums (the discrete Gaussian pmf summed
directly) over every split of at most k rows into novel values, against the bound.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd
import pytest

from engine.discovery.categories import discover_open_set
from engine.discovery.plan import allocate
from engine.discovery.schema import discover, requests_for
from engine.discovery.tails import (
    discrete_gaussian_tail_bound,
    smallest_split_threshold,
    smallest_tail_threshold,
    split_tail_bound,
)
from engine.noise import discrete_gaussian_noise, discrete_gaussian_pmf
from engine.tables.encoding import SchemaSpec


def exact_tail(sigma2: Fraction, t: int) -> float:
    """P(Z ≥ t), the pmf summed directly over a range far past the tail."""
    width = int(60 * float(sigma2) ** 0.5) + 200
    start = min(t, -width)
    z = np.arange(start, max(t, 0) + width)
    pmf = discrete_gaussian_pmf(float(sigma2), z)
    return float(pmf[z >= t].sum())


def splits(k: int) -> list[tuple[int, ...]]:
    """Every multiset of positive integers with sum at most k (the unit's rows on novel values)."""
    out: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], largest: int, left: int) -> None:
        if prefix:
            out.append(prefix)
        for c in range(min(largest, left), 0, -1):
            extend((*prefix, c), c, left - c)

    extend((), k, k)
    return out


def worst_exact(sigma2: Fraction, tau: int, k: int) -> float:
    tails = {c: exact_tail(sigma2, tau - c) for c in range(1, k + 1)}
    return max(sum(tails[c] for c in split) for split in splits(k))


def test_splits_enumerates_the_partitions() -> None:
    # Partitions of 1..4: 1 + 2 + 3 + 5.
    assert len(splits(4)) == 11
    assert (2, 1, 1) in splits(4) and (4,) in splits(4) and (3, 2) not in splits(4)


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(3), Fraction(40), Fraction(900)])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
def test_split_bound_is_the_worst_split_of_exact_tails(sigma2: Fraction, k: int) -> None:
    for delta in (Fraction(1, 20), Fraction(1, 10**6)):
        tau = smallest_split_threshold(sigma2, delta, k)
        for threshold in (tau - 1, tau, tau + 3):
            exact = worst_exact(sigma2, threshold, k)
            bound = split_tail_bound(sigma2, threshold, k)
            assert bound >= exact
            if exact > 1e-250:
                assert bound <= max(exact * (1.3 if sigma2 < 1 else 1 + 1e-6), exact + 1e-300)
        # τ is the smallest threshold whose worst split is within δ.
        assert Fraction(split_tail_bound(sigma2, tau, k)) <= delta
        assert worst_exact(sigma2, tau, k) <= float(delta)
        assert Fraction(split_tail_bound(sigma2, tau - 1, k)) > delta


@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(50), Fraction(10**6)])
@pytest.mark.parametrize("delta", [Fraction(1, 10), Fraction(1, 10**9)])
def test_at_k_1_the_threshold_is_the_row_level_one(sigma2: Fraction, delta: Fraction) -> None:
    assert smallest_split_threshold(sigma2, delta, 1) == 1 + smallest_tail_threshold(sigma2, delta)


def test_the_worst_split_is_not_always_one_value() -> None:
    """With σ large against k, k singletons beat one value with k rows (so the derivation must
    take every split, and the threshold grows by more than k − 1)."""
    sigma2, k, delta = Fraction(10**6), 10, Fraction(1, 10**9)
    tau = smallest_split_threshold(sigma2, delta, k)
    one_value = discrete_gaussian_tail_bound(sigma2, tau - k)
    singletons = k * discrete_gaussian_tail_bound(sigma2, tau - 1)
    assert singletons > one_value
    assert tau > k + smallest_tail_threshold(sigma2, delta)


def test_a_unit_of_k_rows_on_one_novel_value_is_released_with_probability_at_most_delta() -> None:
    """The δ event directly: a value that only the unit holds, with all its k rows (and, the
    other worst case here, k values of one row each)."""
    rho, delta, k = Fraction(1, 2), Fraction(1, 1000), 4
    found = discover_open_set(
        {"x": 1}, max_categories=1, rho=rho, delta=delta, contribution_bound=k
    )
    sigma2 = Fraction(1) / (2 * rho)
    assert found.threshold == smallest_split_threshold(sigma2, delta, k)
    assert exact_tail(sigma2, found.threshold - k) <= float(delta)
    assert k * exact_tail(sigma2, found.threshold - 1) <= float(delta)
    assert found.cost.parameters["max_rows_per_unit"] == k
    assert found.cost.rho == rho and found.cost.delta == delta  # row level; the plan states k²ρ
    row = discover_open_set({"x": 1}, max_categories=1, rho=rho, delta=delta)
    assert "max_rows_per_unit" not in row.cost.parameters
    assert row.threshold < found.threshold


def test_open_set_at_k_1_is_todays_release() -> None:
    counts = {"a": 40, "b": 3, "c": 9}
    kwargs: dict[str, Any] = {"max_categories": 5, "rho": Fraction(1), "delta": Fraction(1, 10**6)}
    today = discover_open_set(counts, source=random.Random(2), **kwargs)
    same = discover_open_set(counts, source=random.Random(2), contribution_bound=1, **kwargs)
    assert today == same


RAW = {
    "columns": [
        {"name": "age", "type": "numeric", "min": 0, "max": 100, "bins": {"quantiles": 4}},
        {"name": "town", "type": "categorical", "categories": {"discover": True, "max": 10}},
        {
            "name": "grade",
            "type": "categorical",
            "categories": {"discover": True, "max": 3, "candidates": ["a", "b", "c"]},
        },
        {
            "name": "income",
            "type": "numeric",
            "min": -1000000,
            "max": 1000000,
            "bins": {"quantiles": 3, "range": True},
        },
    ]
}


def _batch(rows: int) -> dict[str, pd.Series]:
    rng = np.random.default_rng(5)
    return {
        "age": pd.Series(rng.integers(18, 90, rows).astype(str)),
        "town": pd.Series(rng.choice(["x", "y", "z"], rows)),
        "grade": pd.Series(rng.choice(["a", "b"], rows)),
        "income": pd.Series(rng.integers(1000, 90000, rows).astype(str)),
    }


def _discover(
    k: int | None, budget_rho: Fraction, seed: int, quantum: Fraction | None = Fraction(1, 10**12)
) -> Any:
    spec = SchemaSpec.from_json(RAW)
    budget = allocate(
        requests_for(spec),
        budget_rho=budget_rho,
        budget_delta=Fraction(1, 10**6),
        rho_quantum=quantum,
    )
    batch = _batch(3000)
    extra = {} if k is None else {"contribution_bound": k}
    found = discover(spec, budget, lambda: iter([batch]), source=random.Random(seed), **extra)
    return budget, found


def test_discovery_at_k_1_is_todays_release() -> None:
    _, today = _discover(None, Fraction(5), 8)
    _, same = _discover(1, Fraction(5), 8)
    assert today.describe() == same.describe()
    assert today.rho == same.rho == same.row_rho
    assert {c: v.categories for c, v in today.categories.items()} == {
        c: v.categories for c, v in same.categories.items()
    }
    assert {c: v.edges for c, v in today.learned.items()} == {
        c: v.edges for c, v in same.learned.items()
    }
    assert "max_rows_per_unit" not in same.describe()


def test_discovery_per_unit_is_the_row_level_discovery_at_rho_over_k_squared() -> None:
    """Same seed: the per-unit discovery at ρ draws exactly what the row-level one at ρ/k² draws
    (bit for bit, except the open-set threshold, which is derived for k), and states k²× its ρ."""
    k = 3
    budget, unit = _discover(k, Fraction(45), 8, quantum=None)
    _, row = _discover(None, Fraction(5), 8, quantum=None)
    assert unit.contribution_bound == k
    assert unit.rho == 9 * unit.row_rho == 9 * row.rho
    assert unit.rho <= budget.cap[0] and unit.delta <= budget.cap[1]
    # On the ledger's grid: every ρ stated per unit is a multiple of 1e-12.
    _, gridded = _discover(k, Fraction(45), 8)
    stated = [c.rho for c in gridded.costs().values()] + [gridded.rho]
    assert all((r * 10**12).denominator == 1 for r in stated)
    detail = unit.describe()
    assert detail["max_rows_per_unit"] == k
    assert Fraction(detail["rho"]) == unit.rho
    costs = unit.costs()
    assert (
        sum((c.rho for c in costs.values()), Fraction(0)) + Fraction(detail["rows"]["rho"])
        == unit.rho
    )
    # The noise was drawn at the row level: σ² = 1/(2ρ_row) = k²/(2ρ_unit).
    grade = costs["grade"]
    assert Fraction(grade.parameters["sigma2"]) == Fraction(k * k) / (2 * grade.rho)
    assert unit.rows is not None and row.rows is not None
    assert unit.rows.rows == row.rows.rows  # the same noisy count, drawn at the same σ²
    assert unit.edges["age"].edges == row.edges["age"].edges
    assert unit.categories["grade"].categories == row.categories["grade"].categories
    town = costs["town"]
    assert town.parameters["max_rows_per_unit"] == k
    assert town.parameters["threshold"] > row.costs()["town"].parameters["threshold"]


def test_the_detail_bound_allows_for_the_unit() -> None:
    import json

    from engine.discovery.plan import detail_bound

    budget, unit = _discover(1000, Fraction(10**6), 1)
    assert len(json.dumps(unit.describe())) <= detail_bound(budget)


def test_the_split_bound_stays_above_exact_tails_when_fewer_terms_are_summed() -> None:
    """For large k each tail sums fewer terms directly (SPLIT_DIRECT_TERMS / k, here 10,485 of
    the 12,016 a single tail gets at σ = 1000): still above the exact tails of the obvious splits,
    and close to them."""
    sigma2, k, delta = Fraction(10**6), 200, Fraction(1, 10**6)
    tau = smallest_split_threshold(sigma2, delta, k)
    bound = split_tail_bound(sigma2, tau, k)
    candidates = [
        k * exact_tail(sigma2, tau - 1),
        exact_tail(sigma2, tau - k),
        (k // 2) * exact_tail(sigma2, tau - 2),
    ]
    assert bound >= max(candidates)
    assert bound <= float(delta)
    assert k * exact_tail(sigma2, tau - 2) > float(delta) * 0.5  # τ is not far off


def test_a_discovery_with_an_invalid_contribution_bound_is_refused() -> None:
    """``Discovered.rho`` (the ledger's figure) is k² times the row-level spend: k = 0 would
    state ρ = 0 for releases that spent budget, so k is validated at construction."""
    from dataclasses import replace

    _, found = _discover(2, Fraction(20), 3)
    assert found.rho == 4 * found.row_rho > 0
    for bad in (0, -2, 1001, True, 2.0):
        with pytest.raises(ValueError, match="contribution_bound"):
            replace(found, contribution_bound=bad)


def test_open_set_at_k_1_draws_and_thresholds_as_the_row_level_clause() -> None:
    """k = 1 against the row-level clause computed here directly (not against the same function
    with the default argument): τ = 1 + t₁, the singleton bound P(Z ≥ t₁), and the noisy counts
    of the present values in sorted order, drawn from the same source."""
    counts = {"b": 3, "a": 40, "z": 0, "c": 9}
    rho, delta = Fraction(1, 3), Fraction(1, 10**6)
    found = discover_open_set(
        counts, max_categories=5, rho=rho, delta=delta, source=random.Random(2),
        contribution_bound=1,
    )  # fmt: skip
    sigma2 = Fraction(1) / (2 * rho)
    t = smallest_tail_threshold(sigma2, delta)
    assert found.threshold == 1 + t
    assert found.cost.parameters["singleton_release_bound"] == discrete_gaussian_tail_bound(
        sigma2, t
    )
    present = ["a", "b", "c"]
    noisy = np.array([40, 3, 9]) + discrete_gaussian_noise(sigma2, 3, random.Random(2))
    expected = {v: int(n) for v, n in zip(present, noisy, strict=True) if n >= 1 + t}
    assert dict(zip(found.categories, found.noisy_counts, strict=True)) == expected
    assert found.cost.rho == rho and "max_rows_per_unit" not in found.cost.parameters


def test_the_split_bound_takes_the_same_k_as_everything_else() -> None:
    """One validation of k (engine.privacy_unit.check_contribution_bound) for the tail bounds
    too: 1 to MAX_MAX_ROWS, no bools."""
    for bad in (0, -1, 1001, True):
        with pytest.raises(ValueError, match="contribution_bound"):
            split_tail_bound(Fraction(4), 10, bad)
        with pytest.raises(ValueError, match="contribution_bound"):
            smallest_split_threshold(Fraction(4), Fraction(1, 100), bad)
