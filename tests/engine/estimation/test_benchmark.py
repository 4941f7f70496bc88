"""Performance targets of the estimator on adult (48,842 rows, 14 attributes).

Marked ``benchmark`` (not part of ``make test``): reads ``../shared/data/adult`` and times
things, with thresholds about twice the figures measured on the 2-core development machine so
that a busy machine does not fail them. Run with ``pytest -m benchmark -s`` to see the timings.
Noise here is numpy Gaussian noise: these are timing fixtures, not private releases.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from engine.domain import Dataset, Domain
from engine.estimation import GraphicalModel, NoisyMarginal, estimate, model_size
from engine.marginals import count_marginal

pytestmark = pytest.mark.benchmark

ADULT = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "adult"

# A maximum spanning tree of adult's mutual information (an MST-like structure).
TREE = [
    ("age", "capital-loss"),
    ("age", "fnlwgt"),
    ("age", "hours-per-week"),
    ("age", "marital-status"),
    ("capital-gain", "income>50K"),
    ("education-num", "native-country"),
    ("education-num", "occupation"),
    ("marital-status", "relationship"),
    ("occupation", "hours-per-week"),
    ("race", "native-country"),
    ("relationship", "income>50K"),
    ("relationship", "sex"),
    ("workclass", "occupation"),
]
# 2- and 3-way cliques added one at a time under a 1M-cell cap (an AIM-like model).
AIM_LIKE = [
    ("relationship", "sex", "capital-loss"),
    ("education-num", "capital-loss", "income>50K"),
    ("marital-status", "capital-gain"),
    ("age", "fnlwgt"),
    ("occupation", "race", "income>50K"),
    ("workclass", "education-num", "capital-loss"),
    ("relationship", "capital-loss", "income>50K"),
    ("education-num", "race", "native-country"),
    ("age", "hours-per-week", "income>50K"),
    ("education-num", "race", "income>50K"),
    ("education-num", "occupation", "race"),
    ("relationship", "sex"),
    ("occupation", "income>50K"),
    ("age", "occupation", "income>50K"),
    ("relationship", "income>50K"),
    ("workclass", "education-num"),
    ("capital-gain", "income>50K"),
    ("occupation", "capital-loss"),
    ("age", "relationship", "income>50K"),
    ("fnlwgt", "income>50K"),
    ("age", "fnlwgt", "relationship"),
    ("age", "capital-loss"),
    ("age", "occupation"),
    ("age", "fnlwgt", "income>50K"),
    ("education-num", "occupation", "income>50K"),
    ("marital-status", "relationship", "income>50K"),
    ("age", "marital-status"),
    ("workclass", "education-num", "occupation"),
    ("education-num", "occupation"),
    ("education-num", "race"),
    ("native-country", "income>50K"),
    ("education-num", "income>50K"),
    ("age", "capital-loss", "income>50K"),
    ("race", "native-country"),
    ("marital-status", "income>50K"),
    ("age", "marital-status", "relationship"),
    ("education-num", "occupation", "capital-loss"),
    ("marital-status", "capital-gain", "income>50K"),
    ("age", "relationship"),
    ("race", "income>50K"),
]

T = TypeVar("T")


def timed(label: str, run: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    result = run()
    elapsed = time.perf_counter() - start
    print(f"{label}: {elapsed:.3f} s")
    return result, elapsed


@pytest.fixture(scope="module")
def adult() -> Dataset:
    if not ADULT.exists():
        pytest.skip("../shared/data/adult is not available")
    sizes = json.loads((ADULT / "adult-domain.json").read_text())
    domain = Domain.from_mapping(sizes)
    import pandas as pd

    frame = pd.read_csv(ADULT / "adult.csv")
    return Dataset(domain, frame[list(sizes)].to_numpy().astype(np.int64))


def noisy(
    data: Dataset, cliques: list[tuple[str, ...]], sigma: float, seed: int
) -> list[NoisyMarginal]:
    rng = np.random.default_rng(seed)
    return [
        NoisyMarginal(
            c, count_marginal(data, c) + rng.normal(0, sigma, count_marginal(data, c).shape), sigma
        )
        for c in cliques
    ]


@pytest.fixture(scope="module")
def tree_measurements(adult: Dataset) -> list[NoisyMarginal]:
    ones = [(a,) for a in adult.domain.attributes]
    return noisy(adult, ones, 30.0, 0) + noisy(adult, TREE, 20.0, 1)


def test_cold_fit_of_a_tree_model(adult: Dataset, tree_measurements: list[NoisyMarginal]) -> None:
    model, elapsed = timed(
        "MST-like cold fit, 1000 iterations",
        lambda: estimate(adult.domain, tree_measurements, iterations=1000, tolerance=0),
    )
    assert model.iterations == 1000
    assert elapsed < 2.0


def test_warm_refit_of_a_million_cell_model(
    adult: Dataset, tree_measurements: list[NoisyMarginal]
) -> None:
    measurements = tree_measurements + noisy(adult, AIM_LIKE, 40.0, 2)
    assert 900_000 <= model_size(adult.domain, [m.attributes for m in measurements]) <= 1_000_000
    previous = estimate(adult.domain, measurements[:-1], iterations=300)
    model, elapsed = timed(
        "AIM-like warm re-fit after one new measurement, 300 iterations",
        lambda: estimate(
            adult.domain, measurements, warm_start=previous, iterations=300, tolerance=0
        ),
    )
    print(f"  model: {model.cells} cells in {len(model.cliques)} cliques")
    assert model.iterations == 300
    assert elapsed < 3.5


def test_project_many_over_all_small_marginals(
    adult: Dataset, tree_measurements: list[NoisyMarginal]
) -> None:
    sets = [c for r in (1, 2, 3) for c in itertools.combinations(adult.domain.attributes, r)]
    assert len(sets) == 14 + 91 + 364
    tree_model = estimate(adult.domain, tree_measurements, iterations=300)
    bigger = estimate(
        adult.domain, tree_measurements + noisy(adult, AIM_LIKE[:12], 40.0, 3), iterations=100
    )
    for name, model in (("MST-like", tree_model), ("AIM-like", bigger)):
        answers, elapsed = timed(
            f"project_many, {name} ({len(model.cliques)} cliques, {model.cells} cells)",
            lambda m=model: m.project_many(sets),
        )
        assert all(a.sum() == pytest.approx(model.total) for a in answers)
        assert elapsed < 1.5


def test_synthetic_data(adult: Dataset, tree_measurements: list[NoisyMarginal]) -> None:
    model: GraphicalModel = estimate(adult.domain, tree_measurements, iterations=300)
    for method in ("round", "sample"):
        codes, elapsed = timed(
            f"synthetic_data(48842, {method!r})",
            lambda m=method: model.synthetic_data(48842, np.random.default_rng(0), m),  # type: ignore[arg-type]
        )
        assert codes.shape == (48842, 14)
        assert elapsed < 1.0
