"""AIM's anneal guard inside the mechanism (issue 15 §3): after every anneal at least
``anneal_min_rounds`` rounds run, read back from the released selection charges; the charges
still sum exactly to ρ."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest

from engine.domain import Domain
from engine.mechanisms import get_mechanism
from engine.mechanisms.aim.mechanism import AIMParams, anneal_min_rounds
from engine.mechanisms.base import SynthesisResult
from tests.engine.estimation.support import correlated_dataset

FAST = {"iterations": 50, "round_iterations": 20, "rounds": 400}


def _run(params: dict[str, object], noise_seed: int) -> SynthesisResult:
    rng = np.random.default_rng(5)
    domain = Domain(tuple(f"c{i}" for i in range(6)), tuple(int(x) for x in rng.integers(2, 6, 6)))
    data = correlated_dataset(domain, 2000, 5, concentration=0.3)
    mechanism = get_mechanism("aim")
    return mechanism.run(
        data,
        Fraction(5),
        mechanism.validate_params({**FAST, **params}),
        rng=np.random.default_rng(1),
        noise_source=random.Random(noise_seed),
    )


def _anneals(result: SynthesisResult) -> list[int]:
    """Rounds (0-based) after which the next round's selection cost 4× (an anneal); the last
    round, which takes the remainder, is not read as one."""
    costs = [s.rho for s in result.selections]
    return [i for i in range(len(costs) - 2) if costs[i + 1] == 4 * costs[i]]


def _spent(result: SynthesisResult) -> Fraction:
    return sum((m.rho for m in result.measurements), Fraction(0)) + sum(
        (s.rho for s in result.selections), Fraction(0)
    )


@pytest.mark.parametrize("noise_seed", [1, 2])
def test_every_anneal_leaves_at_least_k_rounds(noise_seed: int) -> None:
    """At ρ = 5 on six small columns the model soon fits what it measures, so annealing keeps
    firing. With the paper's rule the run anneals after most rounds and ends within a few; with
    the guard at k = 6 every anneal is followed by at least 6 rounds."""
    paper = _run({"anneal_guard": False}, noise_seed)
    assert _spent(paper) == 5
    paper_anneals = _anneals(paper)
    assert paper_anneals, "the fixture no longer anneals: the test has no teeth"
    assert any(len(paper.selections) - 1 - i < 6 for i in paper_anneals)

    guarded = _run({"anneal_min_rounds": 6}, noise_seed)
    assert _spent(guarded) == 5
    anneals = _anneals(guarded)
    assert anneals, "the guarded run did not anneal at all: the test has no teeth"
    for index in anneals:
        assert len(guarded.selections) - 1 - index >= 6, (index, len(guarded.selections))
    assert len(guarded.selections) > len(paper.selections)


@pytest.mark.parametrize(
    ("columns", "params", "k"),
    [
        (35, {}, 12),  # temporal-match2: ⌈35/3⌉
        (14, {}, 5),  # adult
        (4, {}, 2),  # never below two rounds
        (9, {"degree": 2}, 5),
        (14, {"anneal_min_rounds": 7}, 7),
        (14, {"anneal_guard": False}, None),
    ],
)
def test_default_guard_is_columns_over_degree(
    columns: int, params: dict[str, object], k: int | None
) -> None:
    domain = Domain(tuple(f"c{i}" for i in range(columns)), (2,) * columns)
    assert anneal_min_rounds(domain, AIMParams.model_validate(params)) == k
