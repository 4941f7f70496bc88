"""Exact samplers: edge cases, types, determinism and the exact tie-breaking path.

Seeded ``random.Random`` sources appear here only to make tests reproducible; production code
never passes one (the default is the OS CSPRNG).
"""

from __future__ import annotations

import random
import secrets
from fractions import Fraction

import numpy as np
import pytest

from engine import noise
from engine.noise import (
    SecureRandom,
    discrete_gaussian_noise,
    discrete_gaussian_pmf,
    sample_bernoulli_exp,
    sample_discrete_gaussian,
    sample_discrete_laplace,
)


def test_bernoulli_exp_of_zero_is_always_true() -> None:
    source = random.Random(0)
    assert all(sample_bernoulli_exp(Fraction(0), source) for _ in range(2000))


def test_bernoulli_exp_of_a_huge_gamma_is_false() -> None:
    source = random.Random(0)
    # P(True) = e^-60: with this seed (and any other, realistically) never.
    assert not any(sample_bernoulli_exp(Fraction(60), source) for _ in range(500))


def test_bernoulli_exp_returns_bools_and_rejects_bad_gamma() -> None:
    assert isinstance(sample_bernoulli_exp(Fraction(1, 3), random.Random(1)), bool)
    assert isinstance(sample_bernoulli_exp(Fraction(7, 3)), bool)  # default CSPRNG source
    with pytest.raises(ValueError):
        sample_bernoulli_exp(Fraction(-1, 2))
    with pytest.raises(TypeError):
        sample_bernoulli_exp(0.5)  # type: ignore[arg-type]


def test_scalar_samplers_return_python_ints() -> None:
    source = random.Random(2)
    for sigma2 in (Fraction(1, 7), Fraction(1), Fraction(1000, 3)):
        value = sample_discrete_gaussian(sigma2, source)
        assert type(value) is int
    for t in (Fraction(1, 3), Fraction(1), Fraction(9, 2)):
        assert type(sample_discrete_laplace(t, source)) is int


def test_samplers_refuse_floats_and_non_positive_scales() -> None:
    with pytest.raises(TypeError):
        sample_discrete_gaussian(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        discrete_gaussian_noise(1.0, 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        sample_discrete_laplace(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        sample_discrete_gaussian(Fraction(0))
    with pytest.raises(ValueError):
        discrete_gaussian_noise(Fraction(-1), 3)
    with pytest.raises(ValueError):
        sample_discrete_laplace(Fraction(0))


@pytest.mark.parametrize("size", [0, 1, 5, 17, 1000, (3, 4), (2, 0, 3), ()])
def test_noise_shape_and_dtype(size: int | tuple[int, ...]) -> None:
    out = discrete_gaussian_noise(Fraction(3), size, random.Random(3))
    expected_shape = (size,) if isinstance(size, int) else size
    assert out.shape == expected_shape
    assert out.dtype == np.int64


@pytest.mark.parametrize("size", [-1, (2, -1), 2.0, True])
def test_noise_rejects_bad_sizes(size: object) -> None:
    with pytest.raises(ValueError):
        discrete_gaussian_noise(Fraction(1), size)  # type: ignore[arg-type]


@pytest.mark.parametrize("count", [5, 5000])  # the scalar and the vectorised path
@pytest.mark.parametrize("sigma2", [Fraction(1, 2), Fraction(10**14, 2 * 123456789)])
def test_noise_is_deterministic_given_a_seeded_source(count: int, sigma2: Fraction) -> None:
    first = discrete_gaussian_noise(sigma2, count, random.Random(42))
    second = discrete_gaussian_noise(sigma2, count, random.Random(42))
    other = discrete_gaussian_noise(sigma2, count, random.Random(43))
    np.testing.assert_array_equal(first, second)
    assert not np.array_equal(first, other)


def test_scalar_sampler_is_deterministic_given_a_seeded_source() -> None:
    a = [sample_discrete_gaussian(Fraction(5, 2), random.Random(7)) for _ in range(3)]
    b = [sample_discrete_gaussian(Fraction(5, 2), random.Random(7)) for _ in range(3)]
    assert a == b


def test_default_source_is_the_os_csprng() -> None:
    assert isinstance(SecureRandom(), secrets.SystemRandom)
    out = discrete_gaussian_noise(Fraction(4), 100)
    assert out.dtype == np.int64
    assert out.shape == (100,)


def test_tiny_sigma_gives_almost_only_zeros() -> None:
    # σ² = 1/100: P(Y ≠ 0) ≈ 2e^-50.
    out = discrete_gaussian_noise(Fraction(1, 100), 10_000, random.Random(4))
    assert not out.any()


def test_laplace_scale_is_floor_sigma_plus_one_exactly() -> None:
    assert noise._laplace_scale(Fraction(1, 2)) == 1
    assert noise._laplace_scale(Fraction(4)) == 3
    assert noise._laplace_scale(Fraction(399999, 100000)) == 2  # σ just below 2
    assert noise._laplace_scale(Fraction(10**14, 7)) == 3779644 + 1


class ScriptedSource(random.Random):
    """Returns scripted 32-bit words and getrandbits values, to drive the exact tie path."""

    def __init__(self, words: list[int], bits: list[int]) -> None:
        super().__init__(0)
        self.words = list(words)
        self.bits = list(bits)

    def randbytes(self, n: int) -> bytes:
        count = n // 4
        chunk, self.words = self.words[:count], self.words[count:]
        return np.array(chunk, dtype="<u4").tobytes()

    def getrandbits(self, k: int) -> int:
        return self.bits.pop(0)


@pytest.mark.parametrize(
    ("uniform_draw", "expected"),
    [
        # γ = 1/3: ⌊2^32/3⌋ ties, and frac(2^32/3) = 1/3, so the coin is uniform{0,1,2} < 1.
        # Heads at K = 1 (draw 0), then a word above every threshold ends at K = 2: even → False.
        (0, False),
        # Tails at K = 1 (draw 2): K stays 1, odd → True.
        (2, True),
    ],
)
def test_vectorised_coin_resolves_ties_exactly(uniform_draw: int, expected: bool) -> None:
    threshold = np.array([(1 << 32) // 3], dtype=np.uint64)
    source = ScriptedSource(words=[(1 << 32) // 3, 0xFFFFFFFF], bits=[uniform_draw])

    def exact_gamma(i: int) -> tuple[int, int]:
        return 1, 3

    result = noise._bernoulli_exp_unit_array(threshold, exact_gamma, source)
    assert result.tolist() == [expected]


def test_vectorised_exp_minus_one_coin_resolves_ties_exactly() -> None:
    # K = 2: threshold 2^31 exactly and 2^32 mod 2 = 0, so a tie is tails: K = 2, even → False.
    source = ScriptedSource(words=[1 << 31], bits=[0])
    assert noise._bernoulli_exp_one_array(1, source).tolist() == [False]
    # K = 3: threshold ⌊2^32/3⌋, 2^32 mod 3 = 1: a tie then the uniform{0,1,2} draw 0 is heads.
    source = ScriptedSource(words=[0, (1 << 32) // 3, 0xFFFFFFFF], bits=[0])
    # K=2 heads (0 < 2^31), K=3 tie → heads, K=4 tails: K = 4, even → False.
    assert noise._bernoulli_exp_one_array(1, source).tolist() == [False]
    source = ScriptedSource(words=[0, (1 << 32) // 3], bits=[2])
    # K=2 heads, K=3 tie → tails: K = 3, odd → True.
    assert noise._bernoulli_exp_one_array(1, source).tolist() == [True]


def test_uniform_below_array_rejects_the_biased_words() -> None:
    # n = 3: 2^32 mod 3 = 1, so the word 0 is rejected and the next word (5 → 5 mod 3 = 2) used.
    source = ScriptedSource(words=[0, 5], bits=[])
    assert noise._uniform_below_array(3, 1, source).tolist() == [2]


def test_pmf_is_normalised_and_symmetric() -> None:
    for sigma2 in (0.1, 0.5, 3.9, 4.0, 25.0, 1e4):
        width = int(12 * sigma2**0.5) + 5
        support = np.arange(-width, width + 1)
        pmf = discrete_gaussian_pmf(sigma2, support)
        assert abs(pmf.sum() - 1.0) < 1e-12
        np.testing.assert_allclose(pmf, pmf[::-1], rtol=1e-12)
    with pytest.raises(ValueError):
        discrete_gaussian_pmf(0.0, [0])
