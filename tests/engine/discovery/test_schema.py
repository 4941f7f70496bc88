"""A schema's discovery end to end in the engine: requests, counting, release and resolution."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import pandas as pd

from engine.discovery.plan import Counts, allocate, release
from engine.discovery.schema import count_batch, requests_for, resolve
from engine.tables.encoding import SchemaSpec


def _learn(raw: dict[str, Any], batch: dict[str, pd.Series], seed: int) -> Any:
    spec = SchemaSpec.from_json(raw)
    requests = requests_for(spec)
    allocations = allocate(requests, budget_rho=Fraction(50), budget_delta=Fraction(1, 10**6))
    counts = Counts(requests)
    count_batch(counts, spec, requests, batch)
    return resolve(spec, release(allocations, counts, source=random.Random(seed)))


def test_only_released_columns_are_marked_discovered() -> None:
    raw = {
        "columns": [
            {"name": "one", "type": "numeric", "min": 0, "max": 10, "bins": {"quantiles": 1}},
            {"name": "four", "type": "numeric", "min": 0, "max": 10, "bins": {"quantiles": 4}},
        ]
    }
    values = pd.Series([str(i % 11) for i in range(400)])
    schema = _learn(raw, {"one": values, "four": values}, seed=3)
    # "one" has a single bin between its declared bounds: nothing was learned nor charged.
    assert schema.discovered == ("four",)
    assert schema.columns[0].size == 1
    # Old callers (no learned names) still mark every pending column.
    spec = SchemaSpec.from_json(raw)
    assert spec.resolve({"one": [], "four": [5]}).discovered == ("one", "four")


def test_a_candidate_equal_to_a_missing_spelling_is_counted_and_encoded_as_itself() -> None:
    raw = {
        "columns": [
            {"name": "grade", "type": "categorical", "nullable": True,
             "categories": {"discover": True, "max": 3, "candidates": ["A", "NA"]}},
        ]
    }  # fmt: skip
    values = pd.Series(["NA"] * 300 + ["A"] * 300 + [""] * 100 + [" NA "] * 50)
    schema = _learn(raw, {"grade": values}, seed=5)
    # ρ = 5 (a tenth of 50), σ² = 0.1: 300 rows miss the threshold with probability < 1e-100.
    (column,) = schema.columns
    assert column.categories == ("A", "NA")
    codes = column.encode(values, schema.missing_values)
    null = column.size - 1
    assert (codes[:300] == 1).all() and (codes[300:600] == 0).all()
    assert (codes[600:] == null).all()  # "" and " NA " (stripped) are missing, not "NA"
