"""benchmarks/constraints.py: its own violation check agrees with the rules it declares, and
its schema accepts them (no ../shared data needed)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from benchmarks.constraints import RULES, average, schema, violations


def _frame() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "grade": ["A", "E", "B"],
            "sub_grade": ["A1", "E2", "C3"],
            "application_type": ["individual", "joint", "joint"],
            "loan_amount": [1000, 2000, 3000],
            "balance": [1500.0, 100.0, 10.0],
            "paid_principal": [1.0, 2.0, 3.0],
            "paid_interest": [1.0, 1.0, 1.0],
            "paid_late_fees": [0.0, 0.0, 0.0],
            "paid_total": [2.0, 3.0, 9.0],
            "annual_income": [10.0, 50.0, 20.0],
            "annual_income_joint": [None, 40.0, 30.0],
            "interest_rate": [6.0, 20.0, 10.0],
            "term": ["36", "60", "36"],
        }
    )


def test_each_rule_is_checked_on_the_rows_that_break_it() -> None:
    assert len(schema(True).rules) == len(RULES) == 5 and not schema(False).rules
    broken = violations(_frame())
    assert [list(mask) for mask in broken.values()] == [
        [True, False, False],  # balance above the loan
        [False, False, True],  # 9 != 3 + 1 + 0
        [False, True, False],  # joint income below the income
        [False, False, True],  # B with C3
        [False, True, False],  # E at 20 %
    ]


def test_average_takes_the_mean_of_the_runs() -> None:
    way: dict[str, Any] = {
        "seconds": 1.0,
        "share_any": 0.5,
        "share": {"r": 0.5},
        "fidelity": {"m": 0.1},
        "report": {"resampled_rows": 1, "redrawn_rows": 2, "repaired_rows": 3},
    }
    other = {**way, "share_any": 0.0, "report": {**way["report"], "redrawn_rows": 4}}
    runs = [
        {"method": "mst", "epsilon": 1.0, "fit_seconds": 1.0, "ways": {"w": way}},
        {"method": "mst", "epsilon": 1.0, "fit_seconds": 3.0, "ways": {"w": other}},
    ]
    [mean] = average(runs)
    assert mean["runs"] == 2 and mean["fit_seconds"] == 2.0
    assert mean["ways"]["w"]["share_any"] == 0.25
    assert mean["ways"]["w"]["report"]["redrawn_rows"] == 3.0
