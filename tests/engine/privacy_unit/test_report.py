"""The DP count of what truncation removed: its sensitivity by brute force, its accounting."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from engine.privacy_unit import (
    NoisyTruncation,
    Truncation,
    default_cap,
    noisy_truncation,
    row_hashes,
    truncate,
)

KEY = "fedcba9876543210"


def _exact(frame: pd.DataFrame, k: int, cap: int) -> np.ndarray:
    result = truncate(frame["unit"], row_hashes(frame, KEY), k)
    assert result.excess.sum() == result.rows_removed  # no rows without a unit here
    return np.array([result.units_truncated, int(np.minimum(result.excess, cap).sum())])


@pytest.mark.parametrize("k", [1, 2, 5])
def test_removing_one_unit_moves_the_vector_by_at_most_sqrt_1_plus_cap_squared(k: int) -> None:
    rng = np.random.default_rng(k)
    cap = default_cap(k)
    bound = math.sqrt(1 + cap * cap)
    worst = 0.0
    for _ in range(30):
        rows = int(rng.integers(5, 80))
        frame = pd.DataFrame(
            {
                "unit": [f"u{i}" for i in rng.integers(0, 6, rows)],
                "x": rng.integers(0, 5, rows).astype(str),
            }
        )
        # One unit with far more rows than k + cap: its removed rows are capped.
        big = pd.DataFrame(
            {"unit": ["big"] * (k + cap + 7), "x": [str(i) for i in range(k + cap + 7)]}
        )
        frame = pd.concat([frame, big], ignore_index=True)
        whole = _exact(frame, k, cap)
        for unit in frame["unit"].unique():
            without = _exact(frame[frame["unit"] != unit].reset_index(drop=True), k, cap)
            change = float(np.sqrt(((whole - without) ** 2).sum()))
            assert change <= bound + 1e-12
            worst = max(worst, change)
    assert worst == pytest.approx(bound)  # attained by the big unit


def test_the_release_is_charged_exactly_and_validated() -> None:
    frame = pd.DataFrame({"unit": ["a"] * 30 + ["b"] * 2 + ["c"], "x": [str(i) for i in range(33)]})
    truncation = truncate(frame["unit"], row_hashes(frame, KEY), 2)
    assert sorted(truncation.excess.tolist()) == [28]
    released = noisy_truncation(truncation, Fraction(1, 100), 2, random.Random(1))
    assert released.cap == 10 and released.max_rows == 2
    assert released.sensitivity_squared == 101
    assert released.rho == Fraction(1, 100) == released.sensitivity_squared / (2 * released.sigma2)
    assert sum((part[2] for part in released.parts), Fraction(0)) == released.rho
    detail = released.describe()
    assert detail["max_rows"] == 2 and detail["cap"] == 10
    assert set(detail) >= {"noisy_units_truncated", "noisy_rows_removed_capped", "rho", "sigma2"}
    with pytest.raises(ValueError, match="rho must equal"):
        NoisyTruncation(1, 1, 2, 10, Fraction(1), Fraction(101), Fraction(1))
    with pytest.raises(ValueError, match="1 \\+ cap"):
        NoisyTruncation(1, 1, 2, 10, Fraction(1), Fraction(100), Fraction(50))
    with pytest.raises(ValueError):
        noisy_truncation(truncation, Fraction(0), 2)
    with pytest.raises(TypeError):
        noisy_truncation(truncation, 0.1, 2)  # type: ignore[arg-type]
    # The noise is there: two releases from fresh seeds differ, the exact figures stay hidden.
    again = noisy_truncation(truncation, Fraction(1, 100), 2, random.Random(2))
    assert (released.units_truncated, released.rows_removed) != (
        again.units_truncated,
        again.rows_removed,
    )


def test_cap_defaults_to_max_of_k_and_ten() -> None:
    assert default_cap(1) == 10 and default_cap(10) == 10 and default_cap(37) == 37


def test_a_truncation_whose_excess_does_not_match_its_figures_is_refused() -> None:
    """``excess`` is what the DP report releases (capped): a Truncation built without it (the
    field's default) while units lost rows would release R_C = 0 plus noise, silently, so the
    figures must agree at construction."""
    frame = pd.DataFrame({"unit": ["a"] * 30 + ["b"] * 2 + ["c"], "x": [str(i) for i in range(33)]})
    good = truncate(frame["unit"], row_hashes(frame, KEY), 2)
    figures = {
        "keep": good.keep,
        "rows_in": good.rows_in,
        "rows_kept": good.rows_kept,
        "units": good.units,
        "units_truncated": good.units_truncated,
        "rows_without_unit": good.rows_without_unit,
    }
    assert Truncation(**figures, excess=good.excess).rows_removed == 28
    with pytest.raises(ValueError, match="excess"):
        Truncation(**figures)  # no excess although one unit lost 28 rows
    with pytest.raises(ValueError, match="excess"):
        Truncation(**figures, excess=np.array([27]))  # does not add up to the rows removed
    with pytest.raises(ValueError, match="excess"):
        Truncation(**{**figures, "units_truncated": 2}, excess=np.array([28, 0]))
    with pytest.raises(ValueError, match="rows_kept"):
        Truncation(**{**figures, "rows_kept": good.rows_kept + 1}, excess=good.excess)
