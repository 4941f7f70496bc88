"""Exact discrete Gaussian noise from a cryptographically secure source.

Implements Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS
2020): Algorithm 1 (Bernoulli(exp(−γ)) for rational γ), Algorithm 2 (discrete Laplace) and
Algorithm 3 (discrete Gaussian by rejection from the discrete Laplace). Every quantity is an
integer (Python or numpy) or a ``Fraction`` and every coin is an exact comparison of uniformly
random integers, so the output distribution is exactly N_Z(0, σ²); no floating point is involved,
which closes the attacks on floating-point samplers (Mironov, CCS 2012). Like any rejection
sampler, its running time depends on the values drawn; only the total time of a whole job is
observable to analysts here, not per-sample timings.

Randomness. Every sampler takes ``source: random.Random | None``. ``None`` means a fresh
:class:`SecureRandom` (``secrets.SystemRandom``: the operating system's CSPRNG via ``os.urandom``),
and that is the only choice production code makes. Tests pass a seeded ``random.Random`` solely to
make statistical tests reproducible; Mersenne Twister output is predictable and must never be used
to protect real data.

Two implementations of Algorithm 3 are provided and both are exact:

* ``sample_discrete_gaussian`` is the paper's algorithm line by line, one sample at a time;
* ``discrete_gaussian_noise`` runs many independent copies of the same algorithm in parallel on
  numpy integer arrays. Each Bernoulli(x/k) coin of Algorithm 1 is decided by comparing a uniform
  32-bit word ``w`` with ``floor(x · 2^32 / k)``: ``w`` below it means heads, above it tails, and on
  equality (probability at most 2^−32) the remaining fractional part is resolved exactly with Python
  integers. That comparison is exactly "U < x/k" for U uniform on [0, 1) whose first 32 bits are w,
  so each copy's coins have exactly the paper's probabilities, and copies use disjoint random words,
  so outputs are independent. Batches that reject are redrawn; keeping the first accepted samples
  in index order does not depend on their values, so it does not bias them.
"""

from __future__ import annotations

import math
import random
import secrets
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
WordArray = npt.NDArray[np.uint64]
BoolArray = npt.NDArray[np.bool_]

# The vectorised sampler compares 32-bit words: half the CSPRNG bytes of 64-bit ones, and ties
# (probability 2^-32 per coin) are resolved exactly anyway.
_WORD_BITS = 32
_TWO_WORD = 1 << _WORD_BITS
_INT64_MAX = int(np.iinfo(np.int64).max)
# Samples produced per round of the vectorised sampler: big enough to amortise numpy's per-call
# cost, small enough for the working arrays to stay in cache.
_CHUNK = 1 << 16
# Below this many samples the scalar sampler is faster than numpy's per-call overhead.
_SCALAR_CUTOFF = 16
# The vectorised Laplace step multiplies numbers below t in uint64 and draws uniforms below t
# from 32-bit words; keep t < 2^31.
_MAX_VECTOR_SCALE = 1 << 31
# Past this the noise itself would not fit comfortably in int64.
_MAX_SCALE = 1 << 50


class SecureRandom(secrets.SystemRandom):
    """The CSPRNG every sampler draws from by default (``os.urandom`` under the hood)."""


def _source_or_secure(source: random.Random | None) -> random.Random:
    return SecureRandom() if source is None else source


def _as_fraction(value: Fraction | int, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise TypeError(f"{name} must be a Fraction or int, got {type(value).__name__}")
    return Fraction(value)


# --------------------------------------------------------------------------------------------
# Scalar samplers: CKS 2020 Algorithms 1-3, literally.
# --------------------------------------------------------------------------------------------


def _uniform_below(n: int, source: random.Random) -> int:
    """Uniform integer in {0, …, n−1}, by rejection on ``n.bit_length()`` random bits."""
    bits = n.bit_length()
    value = source.getrandbits(bits)
    while value >= n:
        value = source.getrandbits(bits)
    return value


def _bernoulli_exp_unit(num: int, den: int, source: random.Random) -> bool:
    """Bernoulli(exp(−num/den)) for 0 ≤ num/den ≤ 1 (CKS Algorithm 1, first case).

    K ← 1; while Bernoulli(γ/K) is 1: K ← K + 1; return K odd.
    """
    k = 1
    while _uniform_below(den * k, source) < num:
        k += 1
    return k % 2 == 1


def _bernoulli_exp(num: int, den: int, source: random.Random) -> bool:
    """Bernoulli(exp(−num/den)) for num/den ≥ 0 (CKS Algorithm 1)."""
    if num <= den:
        return _bernoulli_exp_unit(num, den, source)
    whole, remainder = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_unit(1, 1, source):
            return False
    return _bernoulli_exp_unit(remainder, den, source)


def sample_bernoulli_exp(gamma: Fraction, source: random.Random | None = None) -> bool:
    """Exact Bernoulli(exp(−γ)) for rational γ ≥ 0 (CKS 2020, Algorithm 1)."""
    g = _as_fraction(gamma, "gamma")
    if g < 0:
        raise ValueError("gamma must be non-negative")
    return _bernoulli_exp(g.numerator, g.denominator, _source_or_secure(source))


def _discrete_laplace(scale_num: int, scale_den: int, source: random.Random) -> int:
    """CKS Algorithm 2 with t = scale_num, s = scale_den (scale t/s)."""
    while True:
        u = _uniform_below(scale_num, source)
        if not _bernoulli_exp(u, scale_num, source):
            continue
        v = 0
        while _bernoulli_exp_unit(1, 1, source):
            v += 1
        y = (u + scale_num * v) // scale_den
        negative = source.getrandbits(1) == 1
        if negative and y == 0:
            continue
        return -y if negative else y


def sample_discrete_laplace(t: Fraction, source: random.Random | None = None) -> int:
    """Exact discrete Laplace with scale t > 0: P(Y = y) ∝ exp(−|y|/t) (CKS 2020, Algorithm 2)."""
    scale = _as_fraction(t, "t")
    if scale <= 0:
        raise ValueError("the discrete Laplace scale must be positive")
    return _discrete_laplace(scale.numerator, scale.denominator, _source_or_secure(source))


def _laplace_scale(sigma2: Fraction) -> int:
    """t = ⌊σ⌋ + 1, computed exactly: ⌊√x⌋ = ⌊√⌊x⌋⌋ for x ≥ 0."""
    return math.isqrt(sigma2.numerator // sigma2.denominator) + 1


def _discrete_gaussian(sigma2: Fraction, source: random.Random) -> int:
    p, q = sigma2.numerator, sigma2.denominator
    t = _laplace_scale(sigma2)
    # Rejection weight exp(−(|Y| − σ²/t)² / (2σ²)) with σ² = p/q, in integers:
    #   (|Y| − p/(qt))² / (2p/q) = (|Y|·q·t − p)² / (2·p·q·t²).
    den = 2 * p * q * t * t
    while True:
        y = _discrete_laplace(t, 1, source)
        if _bernoulli_exp((abs(y) * q * t - p) ** 2, den, source):
            return y


def sample_discrete_gaussian(sigma2: Fraction, source: random.Random | None = None) -> int:
    """One exact sample of N_Z(0, σ²): P(Y = y) ∝ exp(−y²/(2σ²)) (CKS 2020, Algorithm 3).

    Privacy claim (as noise): added to an integer query of L2 sensitivity Δ it gives
    Δ²/(2σ²)-zCDP (CKS 2020, Theorem 4).
    """
    s2 = _as_fraction(sigma2, "sigma2")
    if s2 <= 0:
        raise ValueError("sigma2 must be positive")
    return _discrete_gaussian(s2, _source_or_secure(source))


# --------------------------------------------------------------------------------------------
# Vectorised sampler: many independent copies of Algorithm 3 on numpy integer arrays.
# --------------------------------------------------------------------------------------------


def _words(n: int, source: random.Random) -> WordArray:
    """n independent uniform 32-bit words, widened to uint64 for overflow-free arithmetic."""
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    return np.frombuffer(source.randbytes(4 * n), dtype="<u4").astype(np.uint64)


def _uniform_below_array(n_values: int, count: int, source: random.Random) -> IntArray:
    """``count`` uniform integers in {0, …, n_values − 1}, n_values ≤ 2^32.

    Exact by rejection: the 2^32 − (2^32 mod n) words at or above ``2^32 mod n`` split evenly into
    the n residues.
    """
    reject_below = np.uint64(_TWO_WORD % n_values)
    modulus = np.uint64(n_values)
    w = _words(count, source)
    ok = w >= reject_below
    if ok.all():
        return (w % modulus).astype(np.int64)
    out = np.empty(count, dtype=np.int64)
    out[ok] = (w[ok] % modulus).astype(np.int64)
    todo = np.flatnonzero(~ok)
    while todo.size:
        w = _words(todo.size, source)
        ok = w >= reject_below
        out[todo[ok]] = (w[ok] % modulus).astype(np.int64)
        todo = todo[~ok]
    return out


def _bernoulli_exp_unit_array(
    threshold_1: WordArray,
    exact_gamma: Callable[[int], tuple[int, int]],
    source: random.Random,
) -> BoolArray:
    """Bernoulli(exp(−γ_i)) for γ_i ∈ [0, 1) per element (CKS Algorithm 1, vectorised).

    ``threshold_1[i] = ⌊γ_i · 2^32⌋`` and ``exact_gamma(i) = (num, den)`` with γ_i = num/den. The
    coin Bernoulli(γ_i/k) is "U < γ_i/k" for U uniform on [0, 1); with w the first 32 bits of U,
    w < ⌊γ_i 2^32 / k⌋ decides heads, w > it tails, and equality (probability ≤ 2^−32) is
    resolved with exact integers. ⌊⌊x⌋/k⌋ = ⌊x/k⌋ gives the threshold at every k from
    ``threshold_1``.
    """
    n = threshold_1.size
    result = np.empty(n, dtype=np.bool_)
    active = np.arange(n)
    threshold = threshold_1
    k = 1
    while active.size:
        w = _words(active.size, source)
        heads = w < threshold
        for j in np.flatnonzero(w == threshold).tolist():
            num, den = exact_gamma(int(active[j]))
            # U = (w + W)/2^32 with W uniform on [0, 1): heads iff W < frac(num·2^32 / (den·k)).
            heads[j] = _uniform_below(den * k, source) < (num << _WORD_BITS) % (den * k)
        result[active[~heads]] = k % 2 == 1
        active = active[heads]
        k += 1
        threshold = threshold_1[active] // np.uint64(k)
    return result


def _bernoulli_exp_one_array(count: int, source: random.Random) -> BoolArray:
    """``count`` independent Bernoulli(exp(−1)) coins (Algorithm 1 with γ = 1)."""
    result = np.empty(count, dtype=np.bool_)
    active = np.arange(count)
    # K = 1: Bernoulli(1/1) is always 1, so every copy reaches K = 2.
    k = 2
    while active.size:
        threshold = _TWO_WORD // k
        w = _words(active.size, source)
        heads = w < np.uint64(threshold)
        for j in np.flatnonzero(w == np.uint64(threshold)).tolist():
            heads[j] = _uniform_below(k, source) < _TWO_WORD % k
        result[active[~heads]] = k % 2 == 1
        active = active[heads]
        k += 1
    return result


def _count_exp_one_successes(cap: IntArray, source: random.Random) -> IntArray:
    """Per element, run Bernoulli(exp(−1)) until the first 0 or until ``cap`` 1s; count the 1s."""
    count = np.zeros(cap.size, dtype=np.int64)
    active = np.flatnonzero(cap > 0)
    while active.size:
        heads = _bernoulli_exp_one_array(active.size, source)
        active = active[heads]
        count[active] += 1
        active = active[count[active] < cap[active]]
    return count


def _discrete_laplace_array(t: int, count: int, source: random.Random) -> IntArray:
    """Up to ``count`` independent discrete Laplace(t) samples, t an integer (Algorithm 2, s = 1).

    Copies that reject are dropped rather than retried, so fewer than ``count`` may come back.
    """
    drawn = _uniform_below_array(t, count, source)
    if t > 1:
        # γ = u/t: ⌊u·2^32/t⌋ = u·⌊2^32/t⌋ + ⌊u·(2^32 mod t)/t⌋; every product is below 2^64.
        quotient, remainder = divmod(_TWO_WORD, t)
        wide = drawn.astype(np.uint64)
        threshold = wide * np.uint64(quotient) + (wide * np.uint64(remainder)) // np.uint64(t)

        def exact_gamma(i: int) -> tuple[int, int]:
            return int(drawn[i]), t

        u = drawn[_bernoulli_exp_unit_array(threshold, exact_gamma, source)]
    else:
        # With t = 1, u is always 0 and Bernoulli(exp(0)) is always 1.
        u = drawn
    v = _count_exp_one_successes(np.full(u.size, _INT64_MAX, dtype=np.int64), source)
    magnitude = u + np.int64(t) * v
    negative = (np.frombuffer(source.randbytes(u.size), dtype=np.uint8) & 1).astype(np.bool_)
    keep = ~(negative & (magnitude == 0))
    signed: IntArray = np.where(negative, -magnitude, magnitude)[keep]
    return signed


def _distinct_magnitudes(magnitude: IntArray) -> tuple[IntArray, IntArray]:
    """(distinct values, index of each element's value): ``np.unique`` without the sort when the
    values are dense, as discrete Laplace magnitudes are."""
    if magnitude.size and int(magnitude.max()) <= 4 * magnitude.size + 65536:
        present = np.bincount(magnitude) > 0
        values = np.flatnonzero(present)
        position = np.cumsum(present) - 1
        return values.astype(np.int64), position[magnitude].astype(np.int64)
    values, inverse = np.unique(magnitude, return_inverse=True)
    return values.astype(np.int64), inverse.astype(np.int64)


def _gaussian_acceptance_array(
    y: IntArray, p: int, q: int, t: int, source: random.Random
) -> BoolArray:
    """Bernoulli(exp(−(|y|·q·t − p)² / (2·p·q·t²))) per element: Algorithm 3's rejection step."""
    magnitudes, inverse = _distinct_magnitudes(np.abs(y))
    den = 2 * p * q * t * t
    whole_parts: list[int] = []
    remainders: list[int] = []
    for a in magnitudes.tolist():
        whole, rem = divmod((a * q * t - p) ** 2, den)
        whole_parts.append(whole)
        remainders.append(rem)

    # Integer part of γ: ⌊γ⌋ Bernoulli(exp(−1)) coins must all be 1 (Algorithm 1, γ > 1).
    whole_clipped = np.array([min(w, _INT64_MAX) for w in whole_parts], dtype=np.int64)
    cap = whole_clipped[inverse]
    passed = _count_exp_one_successes(cap, source) >= cap
    for i in np.flatnonzero(passed & (cap == _INT64_MAX)).tolist():
        # Astronomically unlikely (γ ≥ 2^63), but decided exactly all the same.
        missing = whole_parts[int(inverse[i])] - _INT64_MAX
        passed[i] = all(_bernoulli_exp_unit(1, 1, source) for _ in range(missing))
    candidates = np.flatnonzero(passed)

    # Fractional part of γ: one Bernoulli(exp(−frac)) coin.
    threshold_by_magnitude = np.array(
        [(r << _WORD_BITS) // den for r in remainders], dtype=np.uint64
    )
    candidate_inverse = inverse[candidates]

    def exact_gamma(i: int) -> tuple[int, int]:
        return remainders[int(candidate_inverse[i])], den

    fraction_ok = _bernoulli_exp_unit_array(
        threshold_by_magnitude[candidate_inverse], exact_gamma, source
    )
    accept = np.zeros(y.size, dtype=np.bool_)
    accept[candidates[fraction_ok]] = True
    return accept


def _discrete_gaussian_array(sigma2: Fraction, count: int, source: random.Random) -> IntArray:
    p, q = sigma2.numerator, sigma2.denominator
    t = _laplace_scale(sigma2)
    out = np.empty(count, dtype=np.int64)
    filled = 0
    # Roughly 30-48% of discrete Laplace attempts end as a Gaussian sample (lowest for σ < 1 and
    # just above σ = 1); start with 2.4 attempts per sample, then use the observed rate. Batch
    # sizing never affects the distribution.
    attempts_per_sample = 2.4
    while filled < count:
        needed = min(count - filled, _CHUNK)
        attempts = int(needed * attempts_per_sample) + 64
        y = _discrete_laplace_array(t, attempts, source)
        accepted = y[_gaussian_acceptance_array(y, p, q, t, source)]
        take = min(accepted.size, needed)
        out[filled : filled + take] = accepted[:take]
        filled += take
        attempts_per_sample = min(8.0, max(1.2, 1.1 * attempts / max(accepted.size, 1)))
    return out


def discrete_gaussian_noise(
    sigma2: Fraction,
    size: int | tuple[int, ...],
    source: random.Random | None = None,
) -> IntArray:
    """An int64 array of independent exact N_Z(0, σ²) samples (CKS 2020, Algorithm 3).

    Privacy claim (as noise): added to an integer vector query of L2 sensitivity Δ it gives
    Δ²/(2σ²)-zCDP (CKS 2020, Theorem 14). ``source=None`` draws from the OS CSPRNG.
    """
    s2 = _as_fraction(sigma2, "sigma2")
    if s2 <= 0:
        raise ValueError("sigma2 must be positive")
    if not isinstance(size, int | tuple):
        raise ValueError("size must be a non-negative int or a tuple of them")
    shape = (size,) if isinstance(size, int) else size
    if any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape):
        raise ValueError("size must be a non-negative int or a tuple of them")
    t = _laplace_scale(s2)
    if t > _MAX_SCALE:
        raise ValueError("sigma2 is too large for int64 noise")
    count = math.prod(shape)
    rng = _source_or_secure(source)
    if count <= _SCALAR_CUTOFF or t >= _MAX_VECTOR_SCALE:
        flat = np.fromiter(
            (_discrete_gaussian(s2, rng) for _ in range(count)), dtype=np.int64, count=count
        )
    else:
        flat = _discrete_gaussian_array(s2, count, rng)
    return flat.reshape(shape)


def discrete_gaussian_pmf(sigma2: float, support: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """P(Y = y) for Y ~ N_Z(0, σ²) at each ``support`` point (floating point; for tests only).

    The normaliser Σ_z exp(−z²/(2σ²)) is summed directly for small σ² and by Poisson summation,
    √(2πσ²) · Σ_k exp(−2π²σ²k²), for larger σ² (terms beyond |k| = 3 are below 1e-300).
    """
    s2 = float(sigma2)
    if not (s2 > 0 and math.isfinite(s2)):
        raise ValueError("sigma2 must be positive and finite")
    points = np.asarray(support, dtype=np.float64)
    if s2 < 4.0:
        z = np.arange(-60, 61, dtype=np.float64)
        normaliser = float(np.exp(-(z * z) / (2.0 * s2)).sum())
    else:
        k = np.arange(-3, 4, dtype=np.float64)
        normaliser = math.sqrt(2.0 * math.pi * s2) * float(
            np.exp(-2.0 * math.pi**2 * s2 * k * k).sum()
        )
    result: npt.NDArray[np.float64] = np.exp(-(points * points) / (2.0 * s2)) / normaliser
    return result


__all__ = [
    "SecureRandom",
    "discrete_gaussian_noise",
    "discrete_gaussian_pmf",
    "sample_bernoulli_exp",
    "sample_discrete_gaussian",
    "sample_discrete_laplace",
]
