"""One upload's discovery plan: the budget split, streaming counts and the release's accounting."""

from __future__ import annotations

import json
import random
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from engine.discovery.plan import (
    DEFAULT_DISCOVERY_SHARE,
    DETAIL_PARAMETERS_BOUND,
    CategoryRequest,
    Counts,
    DiscoveryRefused,
    QuantileRequest,
    allocate,
    detail_bound,
    release,
)
from engine.discovery.quantiles import QuantileGrid

GRID = QuantileGrid(0.0, 100.0, 64)


def _requests() -> list[QuantileRequest | CategoryRequest]:
    return [
        QuantileRequest("age", GRID, 4),
        QuantileRequest("score", QuantileGrid(0.0, 10.0, 32, integer=True), 3, rho=Fraction(1, 5)),
        CategoryRequest("city", 10),
        CategoryRequest("tier", 3, candidates=("a", "b", "c", "d")),
    ]


def test_default_split_is_exact_and_within_budget() -> None:
    allocations = allocate(_requests(), budget_rho=Fraction(3), budget_delta=Fraction(1, 10**6))
    by_column = {a.request.column: a for a in allocations}
    pooled = Fraction(3) * DEFAULT_DISCOVERY_SHARE / 3
    assert [by_column[c].rho for c in ("age", "city", "tier")] == [pooled] * 3
    assert by_column["score"].rho == Fraction(1, 5)
    assert by_column["city"].delta == Fraction(1, 10**6)  # the only open set takes all of δ
    assert by_column["tier"].delta == by_column["age"].delta == 0


def test_open_sets_need_a_delta_and_budgets_are_enforced() -> None:
    with pytest.raises(DiscoveryRefused, match="budget_delta > 0"):
        allocate(_requests(), budget_rho=Fraction(3))
    with pytest.raises(DiscoveryRefused, match="more than the upload's budget"):
        allocate(
            [QuantileRequest("age", GRID, 4, rho=Fraction(2))],
            budget_rho=Fraction(1),
        )
    with pytest.raises(DiscoveryRefused, match="more than the upload's budget"):
        allocate(
            [CategoryRequest("city", 5, delta=Fraction(1, 2))],
            budget_rho=Fraction(1),
            budget_delta=Fraction(1, 4),
        )


def test_release_charges_exactly_the_allocations_and_counts_stream() -> None:
    requests = _requests()
    allocations = allocate(requests, budget_rho=Fraction(40), budget_delta=Fraction(1, 10**6))
    counts = Counts(requests)
    rng = np.random.default_rng(2)
    for _ in range(3):  # three batches
        counts.add_numbers("age", rng.uniform(0, 100, 500))
        counts.add_numbers("score", rng.integers(0, 11, 500).astype(float))
        counts.add_text("city", pd.Series(rng.choice(["Oslo", "Lima", "Pune"], 500)))
        counts.add_text("tier", pd.Series(rng.choice(["a", "b", "zz"], 500)))
    assert int(counts.cells["age"].sum()) == 1500
    found = release(allocations, counts, source=random.Random(4))
    assert found.rho == sum(a.rho for a in allocations)
    assert found.delta == Fraction(1, 10**6)
    assert sum(c.rho for c in found.costs().values()) == found.rho
    assert set(found.categories["city"].categories) == {"Lima", "Oslo", "Pune"}
    assert found.categories["tier"].categories == ("a", "b")  # "zz" is not a candidate
    assert found.edges["age"].edges[0] == 0.0 and found.edges["age"].edges[-1] == 100.0
    detail = found.describe()
    assert detail["rho"] == str(found.rho) and set(detail["columns"]) == {
        "age",
        "score",
        "city",
        "tier",
    }
    assert "Oslo" not in str({k: v["parameters"] for k, v in detail["columns"].items()})


def test_too_many_distinct_values_are_refused_by_count(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.discovery.plan as plan

    monkeypatch.setattr(plan, "MAX_DISTINCT_COUNTED", 10)
    counts = Counts([CategoryRequest("id", 5)])
    with pytest.raises(DiscoveryRefused) as refused:
        counts.add_text("id", pd.Series([f"secret-{i}" for i in range(11)]))
    assert "more than 10 distinct values" in str(refused.value)
    assert "secret" not in str(refused.value)


def test_the_distinct_value_limit_is_over_all_category_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engine.discovery.plan as plan

    monkeypatch.setattr(plan, "MAX_DISTINCT_COUNTED", 10)
    requests = [
        CategoryRequest("a", 5),
        CategoryRequest("b", 5),
        CategoryRequest("t", 2, candidates=("x", "y")),
    ]
    counts = Counts(requests)
    counts.add_text("a", pd.Series([f"secret-{i}" for i in range(6)]))
    counts.add_text("a", pd.Series([f"secret-{i}" for i in range(6)]))  # nothing new
    # A candidate list counts only its candidates: 1000 other values take no memory.
    counts.add_text("t", pd.Series(["x", "y", *(f"secret-{i}" for i in range(1000))]))
    assert counts.values["t"] == {"x": 1, "y": 1} and counts.distinct == 8
    with pytest.raises(DiscoveryRefused) as refused:
        counts.add_text("b", pd.Series([f"other-{i}" for i in range(3)]))  # 11 in all
    message = str(refused.value)
    assert "more than 10 distinct values" in message and "'a', 'b'" in message
    assert "secret" not in message and "other-" not in message


def test_the_character_limit_is_over_all_category_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engine.discovery.plan as plan

    monkeypatch.setattr(plan, "MAX_CHARACTERS_COUNTED", 100)
    counts = Counts([CategoryRequest("a", 5), CategoryRequest("b", 5)])
    counts.add_text("a", pd.Series(["s" * 60]))
    with pytest.raises(DiscoveryRefused, match="100 characters"):
        counts.add_text("b", pd.Series(["t" * 41]))


def test_quantile_requests_need_two_bins() -> None:
    with pytest.raises(ValueError, match="≥ 2"):
        QuantileRequest("age", GRID, 1)


def test_shares_are_rounded_down_to_the_ledger_grids() -> None:
    allocations = allocate(
        [QuantileRequest(c, GRID, 4) for c in "abc"] + [CategoryRequest(c, 5) for c in "de"],
        budget_rho=Fraction(1),
        budget_delta=Fraction(1, 10**6),
        rho_quantum=Fraction(1, 10**12),
        delta_quantum=Fraction(1, 10**18),
    )
    for allocation in allocations:
        assert (allocation.rho * 10**12).denominator == 1  # 1/50 exactly, on the grid
        assert (allocation.delta * 10**18).denominator == 1
    assert allocations[0].rho == Fraction(1, 50)
    assert allocations[3].delta == Fraction(5 * 10**11, 10**18)
    assert sum(a.rho for a in allocations) <= Fraction(1, 10)


def test_detail_bound_covers_the_compact_detail_at_extreme_parameters() -> None:
    huge = QuantileGrid(-4.4942328371557893e307, 4.4942328371557893e307, 1024)
    requests: list[QuantileRequest | CategoryRequest] = [
        QuantileRequest("é" * 200, huge, 4096, rho=Fraction(1, 10**12)),
        QuantileRequest("q", QuantileGrid(-2.2250738585072014e-308, 1.0, 65536), 3),
        CategoryRequest(
            "open", 100_000, rho=Fraction(123456789012345678901, 10**12), delta=Fraction(1, 3)
        ),
        CategoryRequest("c", 100_000, candidates=tuple(map(str, range(100_000)))),
    ]
    allocations = allocate(
        requests,
        budget_rho=Fraction(10**9),
        budget_delta=Fraction(1, 2),
        rho_quantum=Fraction(1, 10**12),
        delta_quantum=Fraction(1, 10**18),
    )
    counts = Counts(requests)
    counts.add_text("open", pd.Series(["x"] * 5))
    found = release(allocations, counts, source=random.Random(9))
    detail = found.describe()
    size = len(json.dumps(detail))
    assert size <= detail_bound(allocations) <= size + 4 * DETAIL_PARAMETERS_BOUND
    for entry in detail["columns"].values():
        assert set(entry) == {"mechanism", "rho", "delta", "parameters"}
        assert "sigma2" not in entry["parameters"]
    assert sum(Fraction(e["rho"]) for e in detail["columns"].values()) == found.rho
