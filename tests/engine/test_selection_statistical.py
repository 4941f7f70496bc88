"""Goodness of fit of the exponential mechanism against the exact softmax probabilities.

Every test uses a seeded ``random.Random`` (never the CSPRNG), so it is deterministic: a pass is a
pass forever. The null hypothesis (draws follow exp(ε·q_i/(2Δ)) normalised) is rejected at
p < ALPHA = 1e-3, so a correct sampler with a fresh seed fails any one test with probability 1e-3
(about 0.5% for the file's five fits). Power: the same draws are tested against the softmax at
0.5ε and 2ε and must be rejected at p < 1e-12; with 40 000 draws the chi-square noncentrality of
those alternatives is in the thousands, so a factor-2 error in the weighting is never missed.
"""

from __future__ import annotations

import math
import random

import numpy as np
import numpy.typing as npt
import pytest
from scipy import stats

from engine.selection import exponential_mechanism

pytestmark = pytest.mark.statistical

ALPHA = 1e-3
POWER_ALPHA = 1e-12
DRAWS = 40_000

FloatArray = npt.NDArray[np.float64]


def softmax(scores: list[float], epsilon: float, sensitivity: float) -> FloatArray:
    """The exact probabilities of the exponential mechanism (−inf gets probability 0)."""
    values = np.asarray(scores, dtype=np.float64)
    finite = np.isfinite(values)
    logits = np.full(values.shape, -np.inf)
    logits[finite] = epsilon * (values[finite] - values[finite].max()) / (2 * sensitivity)
    weights = np.exp(logits)
    result: FloatArray = weights / weights.sum()
    return result


def draw_counts(
    scores: list[float], epsilon: float, sensitivity: float, n: int, seed: int
) -> npt.NDArray[np.int64]:
    source = random.Random(seed)
    chosen = [exponential_mechanism(scores, epsilon, sensitivity, source=source) for _ in range(n)]
    return np.bincount(chosen, minlength=len(scores)).astype(np.int64)


def pvalue(counts: npt.NDArray[np.int64], probabilities: FloatArray) -> float:
    """Chi-square goodness of fit on the candidates of positive probability."""
    support = probabilities > 0
    assert counts[~support].sum() == 0, "a candidate of probability 0 was chosen"
    expected = probabilities[support] * counts.sum()
    assert expected.min() >= 5, "too few draws for a chi-square test"
    return float(stats.chisquare(counts[support], expected).pvalue)


@pytest.mark.parametrize(
    ("scores", "epsilon", "sensitivity", "seed"),
    [
        ([0.0, 1.0, 2.0, 3.0, 5.0], 1.0, 1.0, 101),
        ([10.0, 4.0, -math.inf, 7.0, 9.0], 2.5, 3.0, 102),
        ([-120.0, -118.5, -121.0, -119.0], 0.8, 0.5, 103),
        # Large shared offsets: only differences matter, and they must survive the subtraction.
        ([1e6 + 0.0, 1e6 + 2.0, 1e6 + 1.0, 1e6 + 4.0], 1.0, 1.0, 104),
    ],
)
def test_draws_follow_the_exact_softmax(
    scores: list[float], epsilon: float, sensitivity: float, seed: int
) -> None:
    counts = draw_counts(scores, epsilon, sensitivity, DRAWS, seed)
    assert pvalue(counts, softmax(scores, epsilon, sensitivity)) > ALPHA
    # Power: the same draws reject a mechanism with half or twice the ε.
    assert pvalue(counts, softmax(scores, 0.5 * epsilon, sensitivity)) < POWER_ALPHA
    assert pvalue(counts, softmax(scores, 2.0 * epsilon, sensitivity)) < POWER_ALPHA


def test_a_tiny_epsilon_is_uniform() -> None:
    scores = [0.0, 10.0, 20.0, 30.0, 40.0]
    counts = draw_counts(scores, 1e-9, 1.0, DRAWS, seed=105)
    assert pvalue(counts, np.full(len(scores), 1 / len(scores))) > ALPHA
    # Power: ε = 0.1 is visibly not uniform on these scores.
    assert pvalue(counts, softmax(scores, 0.1, 1.0)) < POWER_ALPHA


def test_aim_redraw_past_candidates_that_do_not_fit_is_the_mechanism_over_those_that_do() -> None:
    """AIM's later picks of a batch (AIMMechanism._draw): a drawn candidate that does not fit
    the grown tree is put aside and the draw repeated; the result must follow the exponential
    mechanism over the candidates that fit (a public set), with the same ε and Δ. Tested as
    above: rejected at p < ALPHA under the null, and the same draws against twice the ε must be
    rejected at p < POWER_ALPHA."""
    from engine.mechanisms.aim.mechanism import AIMMechanism

    scores = [0.0, 3.0, 9.0, 4.0, 12.0, 1.0]
    candidates = [(f"c{i}",) for i in range(len(scores))]
    misfits = {("c2",), ("c4",)}  # the two best: most draws hit one of them first
    epsilon, sensitivity = 0.8, 2.0
    source = random.Random(20261203)
    counts = np.zeros(len(scores))
    for _ in range(DRAWS):
        chosen = AIMMechanism._draw(
            np.asarray(scores),
            epsilon,
            sensitivity,
            candidates,
            lambda c: c not in misfits,
            source,
        )
        assert chosen is not None and chosen not in misfits
        counts[candidates.index(chosen)] += 1
    fitting = [
        s if c not in misfits else -math.inf for c, s in zip(candidates, scores, strict=True)
    ]
    expected = softmax(fitting, epsilon, sensitivity) * DRAWS
    keep = expected > 0
    assert stats.chisquare(counts[keep], expected[keep]).pvalue > ALPHA
    # Power: twice the ε is rejected.
    wrong = softmax(fitting, 2 * epsilon, sensitivity) * DRAWS
    assert stats.chisquare(counts[keep], wrong[keep]).pvalue < POWER_ALPHA
    assert (
        AIMMechanism._draw(
            np.asarray(scores), epsilon, sensitivity, candidates, lambda _c: False, source
        )
        is None
    )
