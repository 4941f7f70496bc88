"""count_marginal against independent counts; measure_marginal's accounting."""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.marginals import Measurement, count_marginal, measure_marginal


@st.composite
def datasets_and_subsets(draw: st.DrawFn) -> tuple[Dataset, tuple[str, ...]]:
    sizes = draw(st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=5))
    domain = Domain(tuple(f"c{i}" for i in range(len(sizes))), tuple(sizes))
    n_rows = draw(st.integers(min_value=0, max_value=200))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, s, n_rows) for s in sizes]).reshape(n_rows, len(sizes))
    attrs = draw(st.permutations(domain.attributes))
    k = draw(st.integers(min_value=0, max_value=len(attrs)))
    return Dataset(domain, codes), tuple(attrs[:k])


@settings(max_examples=200, deadline=None)
@given(datasets_and_subsets())
def test_count_marginal_matches_add_at(case: tuple[Dataset, tuple[str, ...]]) -> None:
    data, attrs = case
    expected = np.zeros(data.domain.project(attrs).sizes if attrs else (), dtype=np.int64)
    index = tuple(data.column(a) for a in attrs)
    np.add.at(expected, index, 1)
    if not attrs:
        expected = np.array(data.n_rows)
    actual = count_marginal(data, attrs)
    assert actual.dtype == np.int64
    assert actual.shape == expected.shape
    np.testing.assert_array_equal(actual, expected)


@settings(max_examples=50, deadline=None)
@given(datasets_and_subsets())
def test_count_marginal_matches_pandas_groupby(case: tuple[Dataset, tuple[str, ...]]) -> None:
    data, attrs = case
    if not attrs:
        return
    frame = pd.DataFrame(data.codes, columns=list(data.domain.attributes))
    grouped = frame.groupby(list(attrs)).size()
    table = count_marginal(data, attrs)
    assert int(table.sum()) == data.n_rows
    for key, count in grouped.items():
        cell = key if isinstance(key, tuple) else (key,)
        assert table[cell] == count


def test_count_marginal_order_is_the_order_asked_for(
    make_dataset: Callable[[Domain, int, int], Dataset],
) -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3, "c": 4})
    data = make_dataset(domain, 500, 1)
    ab = count_marginal(data, ["a", "b"])
    ba = count_marginal(data, ["b", "a"])
    assert ab.shape == (2, 3)
    np.testing.assert_array_equal(ab, ba.T)
    np.testing.assert_array_equal(count_marginal(data, ["a", "b", "c"]).sum(axis=2), ab)


def test_count_marginal_empty_attrs_and_empty_data() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    empty = Dataset(domain, np.empty((0, 2), dtype=np.int64))
    total = count_marginal(empty, [])
    assert total.shape == ()
    assert total == 0
    np.testing.assert_array_equal(count_marginal(empty, ["b", "a"]), np.zeros((3, 2)))
    data = Dataset(domain, np.array([[0, 1], [1, 1], [1, 2]]))
    assert count_marginal(data, []) == 3


def test_count_marginal_accepts_unsigned_codes() -> None:
    domain = Domain.from_mapping({"a": 3})
    data = Dataset(domain, np.array([[2], [2], [0]], dtype=np.uint64))
    np.testing.assert_array_equal(count_marginal(data, ["a"]), [1, 0, 2])


def test_count_marginal_rejects_bad_subsets() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    data = Dataset(domain, np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(KeyError):
        count_marginal(data, ["z"])
    with pytest.raises(ValueError):
        count_marginal(data, ["a", "a"])


def test_measure_marginal_accounting(
    make_dataset: Callable[[Domain, int, int], Dataset],
) -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    data = make_dataset(domain, 300, 2)
    rho = Fraction(1, 3)
    measurement = measure_marginal(data, ["b", "a"], rho, random.Random(5))
    assert measurement.attributes == ("b", "a")
    assert measurement.rho == rho
    assert measurement.sensitivity == 1
    assert measurement.sigma2 == Fraction(3, 2)
    assert measurement.noisy_counts.shape == (3, 2)
    assert measurement.noisy_counts.dtype == np.int64
    assert not measurement.noisy_counts.flags.writeable
    again = measure_marginal(data, ["b", "a"], rho, random.Random(5))
    np.testing.assert_array_equal(measurement.noisy_counts, again.noisy_counts)


def test_measure_marginal_is_nearly_exact_at_huge_rho(
    make_dataset: Callable[[Domain, int, int], Dataset],
) -> None:
    domain = Domain.from_mapping({"a": 4, "b": 3})
    data = make_dataset(domain, 1000, 3)
    measurement = measure_marginal(data, ["a", "b"], Fraction(10**6), random.Random(1))
    difference = measurement.noisy_counts - count_marginal(data, ["a", "b"])
    assert np.abs(difference).max() <= 1


def test_measure_marginal_of_nothing_is_a_noisy_count() -> None:
    domain = Domain.from_mapping({"a": 2})
    data = Dataset(domain, np.zeros((0, 1), dtype=np.int64))
    measurement = measure_marginal(data, [], Fraction(1), random.Random(0))
    assert measurement.noisy_counts.shape == ()


def test_measure_marginal_refuses_float_or_non_positive_rho() -> None:
    domain = Domain.from_mapping({"a": 2})
    data = Dataset(domain, np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(TypeError):
        measure_marginal(data, ["a"], 0.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        measure_marginal(data, ["a"], Fraction(0))


def test_measurement_validates_its_claim() -> None:
    counts = np.zeros(3, dtype=np.int64)
    Measurement(("a",), counts, Fraction(2), Fraction(1), Fraction(1, 4))
    with pytest.raises(ValueError):
        # ρ = Δ²/(2σ²) = 1/4 here; claiming 1/2 is refused.
        Measurement(("a",), counts, Fraction(2), Fraction(1), Fraction(1, 2))
    with pytest.raises(ValueError):
        Measurement(("a", "b"), counts, Fraction(2), Fraction(1), Fraction(1, 4))
    with pytest.raises(ValueError):
        Measurement(("a",), counts.astype(np.float64), Fraction(2), Fraction(1), Fraction(1, 4))
    with pytest.raises(TypeError):
        Measurement(("a",), counts, 2.0, Fraction(1), Fraction(1, 4))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Measurement(
            ("a", "a"), np.zeros((3, 3), dtype=np.int64), Fraction(2), Fraction(1), Fraction(1, 4)
        )
