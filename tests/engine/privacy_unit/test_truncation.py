"""Truncation to k rows per unit: the bound, and the property the privacy proof rests on."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest

from engine.privacy_unit import PrivacyUnit, new_hash_key, row_hashes, truncate

KEY = "0123456789abcdef"


def _kept(frame: pd.DataFrame, k: int, key: str = KEY) -> Counter[tuple[object, ...]]:
    result = truncate(frame["unit"], row_hashes(frame, key), k)
    return Counter(map(tuple, frame[result.keep].itertuples(index=False)))


def _table(rng: np.random.Generator, rows: int, units: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "unit": [f"u{i}" for i in rng.integers(0, units, rows)],
            "x": rng.integers(0, 4, rows).astype(str),
            "y": rng.integers(0, 3, rows).astype(str),
        }
    )


def test_at_most_k_rows_of_each_unit_survive_and_small_units_survive_whole() -> None:
    frame = pd.DataFrame({"unit": ["a"] * 7 + ["b"] * 2 + ["c"], "x": [str(i) for i in range(10)]})
    result = truncate(frame["unit"], row_hashes(frame, KEY), 3)
    kept = Counter(frame["unit"][result.keep])
    assert kept == {"a": 3, "b": 2, "c": 1}
    assert (result.rows_in, result.rows_kept, result.rows_removed) == (10, 6, 4)
    assert (result.units, result.units_truncated, result.rows_without_unit) == (3, 1, 0)


def test_rows_without_a_unit_are_dropped_and_counted() -> None:
    frame = pd.DataFrame({"unit": ["a", None, "a", None], "x": ["1", "2", "3", "4"]})
    result = truncate(frame["unit"], row_hashes(frame, KEY), 5)
    assert result.keep.tolist() == [True, False, True, False]
    assert result.rows_without_unit == 2


@pytest.mark.parametrize("k", [1, 2, 5])
def test_removing_one_unit_changes_only_that_units_rows(k: int) -> None:
    """The proof's premise, brute force: for random tables and every unit u, the kept rows of
    the table without u equal the kept rows of the whole table less u's kept rows (at most k)."""
    rng = np.random.default_rng(11)
    for _ in range(40):
        frame = _table(rng, int(rng.integers(5, 60)), int(rng.integers(1, 8)))
        key = new_hash_key()
        whole = _kept(frame, k, key)
        for unit in frame["unit"].unique():
            without = _kept(frame[frame["unit"] != unit].reset_index(drop=True), k, key)
            difference = whole - without
            assert not without - whole
            assert sum(difference.values()) <= k
            assert {row[0] for row in difference} <= {unit}


def test_the_kept_rows_do_not_depend_on_the_order_of_the_file() -> None:
    rng = np.random.default_rng(5)
    frame = _table(rng, 200, 12)
    shuffled = frame.sample(frac=1.0, random_state=3).reset_index(drop=True)
    assert _kept(frame, 2) == _kept(shuffled, 2)


def test_the_key_changes_which_rows_survive() -> None:
    frame = pd.DataFrame({"unit": ["a"] * 50, "x": [str(i) for i in range(50)]})
    choices = {frozenset(_kept(frame, 1, new_hash_key())) for _ in range(20)}
    # 20 draws of one row in 50: all equal with probability 50**-19.
    assert len(choices) > 1


def test_the_bound_is_validated() -> None:
    with pytest.raises(ValueError, match="max_rows"):
        PrivacyUnit("id", 0)
    with pytest.raises(ValueError, match="max_rows"):
        PrivacyUnit("id", True)
    with pytest.raises(ValueError, match="column"):
        PrivacyUnit("", 1)
    assert PrivacyUnit("id").to_json() == {"column": "id", "max_rows": 1}
