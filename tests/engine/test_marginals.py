"""count_marginal against independent counts; measure_marginal's accounting."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.marginals import (
    MarginalCache,
    Measurement,
    count_flat,
    count_marginal,
    flat_index,
    index_dtype,
    measure_marginal,
)


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


# ------------------------------------------------------------------------------------------------
# Narrow flat indices, compact columns and MarginalCache against a naive reference
# ------------------------------------------------------------------------------------------------


def _reference_counts(codes: np.ndarray, positions: list[int], shape: tuple[int, ...]) -> dict:
    """Non-zero cells of the table, by np.unique over rows of codes (no flat index)."""
    rows, counts = np.unique(codes[:, positions].astype(np.int64), axis=0, return_counts=True)
    return {tuple(int(v) for v in row): int(c) for row, c in zip(rows, counts, strict=True)}


@pytest.mark.parametrize(
    ("sizes", "dtype", "order"),
    [
        ((2, 3, 200, 7), np.uint8, "C"),
        ((300, 1000, 5), np.uint16, "F"),
        ((70_000, 3, 2), np.uint32, "C"),
        ((256, 256, 2), np.int64, "F"),
        ((1, 5, 1), np.int32, "C"),
    ],
)
def test_counts_equal_a_naive_reference_for_any_code_width_and_layout(
    sizes: tuple[int, ...], dtype: type, order: str
) -> None:
    rng = np.random.default_rng(11)
    n = 5000
    columns = [rng.integers(0, s, n) for s in sizes]
    codes = np.array(np.column_stack(columns), dtype=dtype, order=order)  # type: ignore[call-overload]
    domain = Domain(tuple(f"c{i}" for i in range(len(sizes))), sizes)
    data = Dataset(domain, codes)
    cache = MarginalCache(data, max_cells=1000, kept_bytes=10**6)
    for attrs in [("c0",), ("c2", "c0"), ("c1", "c2", "c3"), tuple(reversed(domain.attributes))]:
        attrs = tuple(a for a in attrs if a in domain.attributes)
        positions = [domain.index(a) for a in attrs]
        shape = tuple(sizes[p] for p in positions)
        reference = _reference_counts(codes, positions, shape)
        for _ in range(3):  # counted, then from the kept table or the kept flat indices
            for table in (count_marginal(data, attrs), cache(attrs)):
                assert table.shape == shape and table.dtype == np.int64
                nonzero = {
                    tuple(int(i) for i in idx): int(table[idx])
                    for idx in zip(*np.nonzero(table), strict=True)
                }
                assert nonzero == reference
                assert int(table.sum()) == n


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        ((2, 128), np.uint8),
        ((257,), np.uint16),
        ((256, 257), np.uint32),
        ((65_536, 65_536), np.uint32),  # 2**32 cells: indices up to 2**32 - 1 fit uint32
        ((65_536, 65_537), np.intp),  # past uint32
        ((50_000, 50_000, 3), np.intp),  # the product overflows int32 and uint32
        ((2**20, 2**20, 2**20), np.intp),
    ],
)
def test_flat_index_uses_the_narrowest_safe_type_and_equals_ravel_multi_index(
    shape: tuple[int, ...], kind: type
) -> None:
    rng = np.random.default_rng(5)
    columns = [rng.integers(0, s, 1000).astype(index_dtype(s)) for s in shape]
    columns[0][:2] = shape[0] - 1  # the largest index is among them
    for column, size in zip(columns[1:], shape[1:], strict=True):
        column[:2] = size - 1
    flat = flat_index(columns, shape)
    assert flat.dtype == np.dtype(kind)
    expected = np.ravel_multi_index([c.astype(np.intp) for c in columns], shape)
    assert np.array_equal(flat.astype(np.intp), expected)
    assert int(flat.max()) == math.prod(shape) - 1


def test_index_dtype_refuses_tables_an_array_cannot_index() -> None:
    with pytest.raises(ValueError, match="more cells than an array can index"):
        index_dtype(2**63 + 1)


def test_marginal_cache_keeps_flat_indices_of_large_tables_within_its_budget() -> None:
    rng = np.random.default_rng(2)
    sizes = (50, 60, 70)
    domain = Domain(("a", "b", "c"), sizes)
    data = Dataset(domain, np.column_stack([rng.integers(0, s, 4000) for s in sizes]))
    # Tables over 100 cells are not kept; room for one flat index of 4000 uint16 / uint32.
    cache = MarginalCache(data, max_cells=100, kept_bytes=4000 * 4)
    first = cache(("a", "b"))  # 3000 cells (24,000 bytes); uint16 indices (8000 bytes)
    assert cache.held_bytes == sum(c.nbytes for c in cache._columns.values())
    again = cache(("a", "b"))  # asked twice: the smaller, its flat indices, are kept
    assert np.array_equal(first, again) and first is not again
    assert cache._used == 8000 and set(cache._flats) == {("a", "b")}
    cache(("a", "b", "c"))
    cache(("a", "b", "c"))  # 210,000 cells: uint32, 16,000 bytes, over what is left
    assert set(cache._flats) == {("a", "b")} and not cache._large
    assert np.array_equal(cache(("a", "b", "c")), count_marginal(data, ("a", "b", "c")))
    small = cache(("a",))
    assert cache(("a",)) is small  # small tables are kept whole


def test_marginal_cache_keeps_a_large_table_when_it_is_smaller_than_its_flat_indices() -> None:
    rng = np.random.default_rng(4)
    sizes = (50, 60)
    domain = Domain(("a", "b"), sizes)
    data = Dataset(domain, np.column_stack([rng.integers(0, s, 20_000) for s in sizes]))
    cache = MarginalCache(data, max_cells=100, kept_bytes=30_000)
    first = cache(("a", "b"))  # 3000 cells: 24,000 bytes; flat indices: 40,000 bytes
    second = cache(("a", "b"))
    assert first is not second and cache(("a", "b")) is second
    assert cache._used == 24_000 and not cache._flats
    assert np.array_equal(second, count_marginal(data, ("a", "b")))


def test_chunked_counting_equals_one_bincount(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.marginals

    monkeypatch.setattr(engine.marginals, "COUNT_CHUNK", 64)
    rng = np.random.default_rng(9)
    for shape in [(3,), (7, 5), (40, 30)]:  # 4 × cells below and above the row count
        columns = [rng.integers(0, s, 1001).astype(np.uint8) for s in shape]
        flat = flat_index(columns, shape)
        expected = np.bincount(flat.astype(np.intp), minlength=math.prod(shape))
        assert np.array_equal(count_flat(flat, shape).ravel(), expected)
