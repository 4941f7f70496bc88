"""AIM's anneal guard inside the mechanism (issue 15 §3): after every anneal at least
``anneal_min_rounds`` rounds run, read back from the released selection charges; the charges
still sum exactly to ρ."""

from __future__ import annotations

import itertools
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


def test_a_batch_measures_marginals_that_share_no_column_and_spends_rho_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``picks_per_fit`` 3: the marginals measured between two fits (read off the fits' own
    measurement lists) number at most 3, share no column, and some batch has more than one;
    every round is charged and measured, so the charges still sum to ρ exactly."""
    import engine.mechanisms.aim.mechanism as aim_module

    rng = np.random.default_rng(7)
    domain = Domain(
        tuple(f"c{i}" for i in range(12)), tuple(int(x) for x in rng.integers(2, 5, 12))
    )
    data = correlated_dataset(domain, 3000, 7, concentration=0.3)
    seen: list[int] = []
    fit = aim_module.estimate

    def counting(*args: object, **kwargs: object) -> object:
        seen.append(len(args[1]))  # type: ignore[arg-type]
        return fit(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(aim_module, "estimate", counting)
    mechanism = get_mechanism("aim")
    result = mechanism.run(
        data,
        Fraction(1),
        mechanism.validate_params({**FAST, "rounds": 120, "picks_per_fit": 3}),
        rng=np.random.default_rng(1),
        noise_source=random.Random(3),
    )
    assert _spent(result) == 1
    attributes = [m.attributes for m in result.measurements]
    batches = [attributes[a:b] for a, b in itertools.pairwise(seen)]
    batches.append(attributes[seen[-1] :])
    batches = [b for b in batches if b]
    assert len(seen) >= 2 and seen[0] == len(domain)  # the first fit: the one-ways
    assert sum(len(b) for b in batches) == len(result.selections)
    assert all(len(b) <= 3 for b in batches)
    assert any(len(b) > 1 for b in batches), "no batch had two picks: the test has no teeth"
    for batch in batches:
        columns = [c for marginal in batch for c in marginal]
        assert len(columns) == len(set(columns)), batch


def test_picks_per_fit_defaults_by_width_and_needs_local_growth() -> None:
    from pydantic import ValidationError

    from engine.mechanisms.aim.mechanism import picks_per_fit

    def wide(columns: int) -> Domain:
        return Domain(tuple(f"c{i}" for i in range(columns)), (2,) * columns)

    defaults = AIMParams()
    assert [picks_per_fit(wide(d), defaults) for d in (6, 54, 64, 65, 96, 196)] == [
        1,
        1,
        1,
        5,
        6,
        13,
    ]
    from engine.mechanisms.aim.mechanism import scored_candidates

    assert scored_candidates(wide(64), defaults) == 1000
    assert scored_candidates(wide(65), defaults) == 500
    assert scored_candidates(wide(196), AIMParams(max_candidates=None)) is None
    assert scored_candidates(wide(196), AIMParams(max_candidates=77)) == 77
    assert picks_per_fit(wide(6), AIMParams(picks_per_fit=4)) == 4
    assert picks_per_fit(wide(196), AIMParams(model_growth="retriangulate")) == 1
    with pytest.raises(ValidationError, match="needs model_growth 'local'"):
        AIMParams(picks_per_fit=2, model_growth="retriangulate")


def test_fit_settings_by_width_unless_given() -> None:
    from engine.mechanisms.aim.mechanism import FitSettings, fit_settings

    def wide(columns: int) -> Domain:
        return Domain(tuple(f"c{i}" for i in range(columns)), (2,) * columns)

    assert fit_settings(wide(64), AIMParams()) == FitSettings(False, 100, 1000)
    assert fit_settings(wide(65), AIMParams()) == FitSettings(True, 50, 200)
    assert fit_settings(wide(65), AIMParams(momentum=False)) == FitSettings(False, 100, 1000)
    assert fit_settings(wide(6), AIMParams(momentum=True, iterations=7)) == FitSettings(True, 50, 7)
    assert fit_settings(wide(196), AIMParams(round_iterations=3)) == FitSettings(True, 3, 200)
