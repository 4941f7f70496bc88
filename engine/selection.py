"""Private selection: the exponential mechanism, and its exact ρ-zCDP accounting.

Privacy claim. Let ``q(D, i)`` be a score of candidate ``i`` whose sensitivity is Δ: for every
pair of neighbouring datasets D, D' (one row added or removed) and every candidate,
``|q(D, i) − q(D', i)| ≤ Δ``. The exponential mechanism (McSherry & Talwar, "Mechanism Design via
Differential Privacy", FOCS 2007) returns ``i`` with probability ∝ exp(ε·q(D, i) / (2Δ)). It is
ε-DP and, more precisely, ε-bounded range, and an ε-bounded-range mechanism is ε²/8-zCDP (Cesar &
Rogers, "Bounding, Concentrating, and Truncating: Unifying Privacy Loss Composition for Data
Analytics", ALT 2021; the bound AIM and MST account with, McKenna et al. 2021/2022). So one draw
with parameter ε is charged ρ = ε²/8.

Per privacy unit of at most k rows (engine/privacy_unit/group.py): a score with per-row
sensitivity Δ moves by at most kΔ, so a draw weighted exp(ε·q/(2Δ)) is the exponential mechanism
with parameter kε at sensitivity kΔ, (kε)²/8-zCDP per unit; the mechanisms make the draw at the
row-level budget ρ/k² and state it so (``Mechanism.run(contribution_bound=k)``).

That bound is for the exponential mechanism only. It is NOT valid for permute-and-flip or for
report-noisy-max with exponential/Laplace noise, whose zCDP cost must be derived separately.

Budgets are exact. A mechanism is given an exact ``Fraction`` ρ for a selection, turns it into a
float ε with :func:`epsilon_for_rho` (rounded down, so ε²/8 ≤ ρ holds exactly for the float's own
value) and charges the exact ρ. The float ε is used only to weight the scores.

Sampling is the Gumbel-max trick: ``argmax_i (ε·q_i/(2Δ) + G_i)`` with independent standard Gumbel
``G_i = −log(−log U_i)`` has exactly the softmax distribution above when the U_i are exact
uniforms on (0, 1) (Gumbel 1954; see e.g. Durfee & Rogers, NeurIPS 2019, for its use in DP). Here
each U_i is an exact multiple of 2^−53 in (0, 1), built from 53 random bits of the operating
system's CSPRNG (``secrets.SystemRandom``), never from ``np.random``.

Floating-point caveat, stated honestly. This is the standard floating-point implementation, not
an exact sampler, and the zCDP proof covers the idealised mechanism it approximates:

* U_i lives on the grid {k·2^−53}, so every G_i lies in [−3.61, 36.74]. A candidate whose weight
  ε·q_i/(2Δ) is more than about 40.34 below the best one is never chosen, where the ideal
  mechanism would choose it with probability below e^−40.34 ≈ 3·10^−18. Formally that makes the
  implementation's guarantee approximate (a δ of order n·3·10^−18 for n candidates), not pure.
* ``log``, the subtraction of the top score, the products and the sums are rounded to double
  precision, so the realised probabilities differ from the ideal softmax by rounding error.
* The scores themselves must respect Δ as computed in floating point.

No attack of the Mironov (CCS 2012) kind is known against Gumbel-max selection over a finite
candidate set, but none is ruled out by proof here, unlike the exact discrete Gaussian that
engine.noise uses for measurements.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from engine.noise import SecureRandom

FloatArray = npt.NDArray[np.float64]

_UNIFORM_BITS = 53
_UNIFORM_SCALE = 2.0**-_UNIFORM_BITS
# Room below the exact √(8ρ) so that rounding in float(8ρ) and math.sqrt never lets ε exceed it;
# both roundings are below 2^-52 relative, far inside this margin.
_EPSILON_SAFETY = 1.0 - 1e-12


def _positive_finite(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be positive and finite")
    return number


def open_unit_uniforms(count: int, source: random.Random) -> FloatArray:
    """``count`` independent uniforms on the open interval (0, 1), exact multiples of 2^−53.

    All the bits are drawn at once (``source.randbytes``); each 64-bit word keeps its top 53 bits,
    which are uniform on {0, …, 2^53 − 1}, and the value 0 is redrawn, so every U is uniform on
    {k·2^−53 : 1 ≤ k < 2^53}. Every such integer converts to float64 exactly.
    """
    if count < 0:
        raise ValueError("count must be non-negative")
    words = np.frombuffer(source.randbytes(8 * count), dtype="<u8") >> np.uint64(64 - _UNIFORM_BITS)
    zero = np.flatnonzero(words == 0)
    if zero.size:
        # Probability count·2^-53: redraw only the zeros, which keeps the others untouched.
        words = words.copy()
        while zero.size:
            fresh = np.frombuffer(source.randbytes(8 * zero.size), dtype="<u8")
            words[zero] = fresh >> np.uint64(64 - _UNIFORM_BITS)
            zero = zero[words[zero] == 0]
    uniforms: FloatArray = words.astype(np.float64) * _UNIFORM_SCALE
    return uniforms


def exponential_mechanism(
    scores: npt.ArrayLike,
    epsilon: float,
    sensitivity: float,
    *,
    source: random.Random | None = None,
) -> int:
    """Index ``i`` drawn with probability ∝ exp(ε·scores[i] / (2Δ)); ε²/8-zCDP.

    Privacy claim: if every score has sensitivity at most ``sensitivity`` = Δ under
    add/remove-one-row, this is the exponential mechanism of McSherry & Talwar (2007), which is
    ε-DP and ε-bounded range, hence ε²/8-zCDP (Cesar & Rogers, ALT 2021). Charge it
    :func:`exponential_mechanism_rho` of ``epsilon`` (or the exact ρ that :func:`epsilon_for_rho`
    turned into ``epsilon``). The bound does not hold for permute-and-flip.

    Sampling: Gumbel-max, ``argmax_i(ε·(q_i − max q)/(2Δ) + G_i)`` with ``G_i = −log(−log U_i)``
    and U_i uniform on (0, 1) from 53 CSPRNG bits each (see the module docstring for the
    floating-point caveat). Subtracting the largest score does not change the distribution and
    keeps the weights finite. ``source=None`` uses the OS CSPRNG; pass a seeded ``random.Random``
    only in tests.

    Scores must be finite, except ``-inf``, which marks a candidate that is never chosen; at least
    one score must be finite. ``epsilon`` and ``sensitivity`` must be positive and finite.
    """
    eps = _positive_finite(epsilon, "epsilon")
    delta = _positive_finite(sensitivity, "sensitivity")
    values = np.asarray(scores, dtype=np.float64)
    if values.ndim != 1 or values.size == 0:
        raise ValueError("scores must be a non-empty 1-D array")
    if np.isnan(values).any() or np.isposinf(values).any():
        raise ValueError("scores must be finite (or -inf for a candidate never to choose)")
    finite = np.isfinite(values)
    if not finite.any():
        raise ValueError("at least one score must be finite")
    factor = eps / (2.0 * delta)
    if not math.isfinite(factor):
        raise ValueError("epsilon / (2·sensitivity) overflows a float")
    if source is not None and not isinstance(source, random.Random):
        raise TypeError("source must be a random.Random (or None for the OS CSPRNG)")
    rng = SecureRandom() if source is None else source

    top = float(values[finite].max())
    with np.errstate(over="ignore"):
        # -inf stays -inf; a finite gap so large that it overflows has probability 0 in floats.
        logits = (values - top) * factor
    gumbel = -np.log(-np.log(open_unit_uniforms(values.size, rng)))
    return int(np.argmax(logits + gumbel))


def exponential_mechanism_rho(epsilon: float) -> Fraction:
    """ρ = ε²/8, exactly, for the float ``epsilon`` actually used (Cesar & Rogers, ALT 2021).

    ``Fraction(epsilon)`` is the float's exact binary value, so the result is the exact zCDP cost
    of the exponential mechanism as parameterised by that float. Not valid for permute-and-flip.
    """
    eps = _positive_finite(epsilon, "epsilon")
    return Fraction(eps) ** 2 / 8


def epsilon_for_rho(rho: Fraction | int) -> float:
    """The float ε for an exponential-mechanism draw charged exactly ``rho``: √(8ρ), rounded down.

    The result satisfies ``Fraction(ε)**2 / 8 <= rho`` in exact arithmetic, so charging ``rho``
    is always an upper bound on what a draw with this float ε spends (ε²/8-zCDP, Cesar & Rogers,
    ALT 2021). It is below √(8ρ) by a relative 1e-12 or a little more: the float ε only weights the
    scores, and the ledger charges the exact ρ. Not valid for permute-and-flip.
    """
    if isinstance(rho, bool) or not isinstance(rho, Fraction | int):
        raise TypeError(f"rho must be an exact Fraction, got {type(rho).__name__}")
    exact = Fraction(rho)
    if exact <= 0:
        raise ValueError("rho must be positive")
    try:
        eps = math.sqrt(float(8 * exact)) * _EPSILON_SAFETY
    except OverflowError:
        raise ValueError("rho is too large for a float epsilon") from None
    if not math.isfinite(eps):
        raise ValueError("rho is too large for a float epsilon")
    while eps > 0 and Fraction(eps) ** 2 / 8 > exact:
        eps = math.nextafter(eps, 0.0)
    if eps <= 0:
        raise ValueError("rho is too small for a positive float epsilon")
    return eps


__all__ = [
    "epsilon_for_rho",
    "exponential_mechanism",
    "exponential_mechanism_rho",
    "open_unit_uniforms",
]
