"""Synthetic codes come out in the narrowest unsigned type of the domain (a byte per cell for
most tables: at 10 M rows × 14 columns 140 MB instead of 1.1 GB of int64), and nothing on the way
copies or wraps them.

A code past the type would wrap silently (300 as uint8 is 44), so the range is checked on what a
model drew, before the cast; a result takes its codes over read-only instead of copying them.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from engine.domain import Dataset, Domain
from engine.mechanisms import MECHANISMS, get_mechanism
from engine.mechanisms.base import GRAPHICAL_OUTPUT, SynthesisResult
from tests.engine.test_public_progress import FAST


def _data(sizes: tuple[int, ...], n: int = 500) -> Dataset:
    rng = np.random.default_rng(5)
    a = rng.integers(0, sizes[0], n)
    columns = [a] + [
        (a * (j + 2) + rng.integers(0, 3, n)) % size for j, size in enumerate(sizes[1:])
    ]
    domain = Domain(tuple(f"c{j}" for j in range(len(sizes))), sizes)
    return Dataset(domain, np.column_stack(columns))


@pytest.mark.parametrize("method", sorted(MECHANISMS))
@pytest.mark.parametrize(
    ("sizes", "dtype"),
    [((40, 30, 20, 7), np.uint8), ((256, 9, 5), np.uint8), ((300, 9, 5), np.uint16)],
)
def test_every_method_releases_the_narrowest_type(
    method: str, sizes: tuple[int, ...], dtype: type[np.unsignedinteger[Any]]
) -> None:
    data = _data(sizes)
    mechanism = get_mechanism(method)
    params = mechanism.validate_params(FAST[method])
    result = mechanism.run(
        data, Fraction(1, 2), params, rng=np.random.default_rng(1), noise_source=random.Random(2)
    )
    codes = result.codes
    assert codes.dtype == dtype
    assert not codes.flags.writeable
    assert codes.shape[1] == len(sizes)
    # Every value of the widest column is reachable: the type must hold sizes[0] - 1.
    assert int(codes.max(axis=0)[0]) < sizes[0]
    assert result.model is not None
    again = result.model.sample(2000, np.random.default_rng(3))
    assert again.dtype == dtype
    assert np.all(again.max(axis=0) < np.asarray(sizes))


def test_a_code_past_the_domain_is_refused_before_the_cast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body drawing 300 in a column of 256 values: as uint8 it would read 44, inside the
    domain; the check runs on the drawn int64 codes and refuses it."""
    data = _data((256, 9, 5))
    mechanism = get_mechanism("independent")
    result = mechanism.run(
        data, Fraction(1, 2), mechanism.validate_params({}), rng=np.random.default_rng(1)
    )
    model = result.model
    assert model is not None
    bad = np.zeros((4, 3), dtype=np.int64)
    bad[2, 0] = 300
    monkeypatch.setattr(type(model.body), "sample", lambda self, domain, rows, rng: bad)
    with pytest.raises(RuntimeError, match="outside the domain"):
        model.sample(4, np.random.default_rng(0))


def test_a_result_takes_its_codes_over_without_a_copy() -> None:
    codes = np.zeros((1000, 3), dtype=np.uint8, order="F")
    result = SynthesisResult(
        codes=codes, measurements=(), rho_used=Fraction(0), estimated_total=1000.0
    )
    assert np.shares_memory(result.codes, codes)
    assert not codes.flags.writeable  # the caller's array cannot change the release either
    with pytest.raises(ValueError, match="read-only"):
        codes[0, 0] = 1


@pytest.mark.parametrize(("largest", "width"), [(256, 1), (300, 2), (70_000, 4)])
def test_the_sampler_estimate_grows_with_the_code_width(largest: int, width: int) -> None:
    """The code type is table-wide (the largest column decides it): one column of 70,000 values
    makes every cell 4 bytes, and the estimate must follow (the output, each batch's copies)."""
    domain = Domain(("big", "a", "b"), (largest, 9, 5))
    rows = 3_000_000
    needed = GRAPHICAL_OUTPUT.bytes(domain, rows)
    codes = rows * len(domain) * width
    assert needed >= 2 * codes + 3 * GRAPHICAL_OUTPUT.batch_rows * len(domain) * width
    assert GRAPHICAL_OUTPUT.bytes(domain, 0) == 0
    mst = get_mechanism("mst")
    params = mst.validate_params({})
    assert (
        mst.estimate_resources(domain, params, rows).memory_bytes
        - mst.estimate_resources(domain, params, 0).memory_bytes
        >= codes
    )


def test_a_model_samples_many_batches_into_one_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above one batch, GraphicalModelKind.sample decompresses each batch with its own
    generator and writes it into one table: the same rows for the same seed, every row filled,
    and merged (compressed) values spread over the batches."""
    from engine.estimation import GraphicalModel

    rng = np.random.default_rng(2)
    n = 3000
    # Column 0: 200 values, most of them rare, so mst's compression merges them.
    common = rng.integers(0, 5, n)
    rare = rng.integers(5, 200, n)
    first = np.where(rng.random(n) < 0.9, common, rare)
    second = (first + rng.integers(0, 2, n)) % 7
    data = Dataset(Domain(("a", "b"), (200, 7)), np.column_stack([first, second]))
    mechanism = get_mechanism("mst")
    params = mechanism.validate_params(FAST["mst"])
    result = mechanism.run(
        data, Fraction(4), params, rng=np.random.default_rng(1), noise_source=random.Random(3)
    )
    model = result.model
    assert model is not None
    original = GraphicalModel.synthetic_batches

    def small(self, rows, generator, method="balanced", batch_rows=97):  # type: ignore[no-untyped-def]
        return original(self, rows, generator, method, batch_rows)

    monkeypatch.setattr(GraphicalModel, "synthetic_batches", small)
    codes = model.sample(2000, np.random.default_rng(5))
    again = model.sample(2000, np.random.default_rng(5))
    assert codes.dtype == np.uint8 and codes.shape == (2000, 2)
    np.testing.assert_array_equal(codes, again)
    assert np.all(codes[:, 0] < 200) and np.all(codes[:, 1] < 7)
    drawn_rare = np.flatnonzero(codes[:, 0] >= 5)
    # Merged values come back as several distinct original values, across the batches.
    assert np.unique(codes[drawn_rare, 0]).size > 5
    assert np.unique(drawn_rare // 97).size > 5
