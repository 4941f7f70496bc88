"""Every mechanism gives the same release for a table's codes in its narrowest unsigned type as
for the same codes in int64 (the worker may hand over the stored width).

The domain's pair, triple and full products pass 255 and 65,535, so arithmetic done in the codes'
own type (a flat index of uint8 codes, say) would overflow and change the counts. Same data,
same seeded noise source and rng: the results must be identical, not merely close.
"""

from __future__ import annotations

import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from engine.domain import Dataset, Domain
from engine.mechanisms import MECHANISMS, get_mechanism
from tests.engine.test_public_progress import FAST

SIZES = (40, 30, 20, 7)


def _codes(n: int = 600, seed: int = 3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, SIZES[0], n)
    b = np.where(rng.random(n) < 0.8, (a * 3) % SIZES[1], rng.integers(0, SIZES[1], n))
    c = np.where(rng.random(n) < 0.7, (b + a) % SIZES[2], rng.integers(0, SIZES[2], n))
    d = rng.integers(0, SIZES[3], n)
    return np.column_stack([a, b, c, d])


def _run(method: str, codes: np.ndarray) -> object:
    domain = Domain(("a", "b", "c", "d"), SIZES)
    data = Dataset(domain, codes)
    mechanism = get_mechanism(method)
    params = mechanism.validate_params(FAST[method])
    return mechanism.run(
        data, Fraction(1, 2), params, rng=np.random.default_rng(1), noise_source=random.Random(2)
    )


@pytest.mark.parametrize("method", sorted(MECHANISMS))
def test_narrow_codes_give_the_same_release(method: str) -> None:
    wide = _codes().astype(np.int64)
    narrow = _codes().astype(np.uint8)
    assert int(np.prod(SIZES)) > np.iinfo(np.uint16).max
    expected = _run(method, wide)
    got = _run(method, narrow)
    assert np.array_equal(expected.codes, got.codes)  # type: ignore[attr-defined]
    assert len(expected.measurements) == len(got.measurements)  # type: ignore[attr-defined]
    for one, other in zip(expected.measurements, got.measurements, strict=True):  # type: ignore[attr-defined]
        assert one.attributes == other.attributes
        assert np.array_equal(one.noisy_counts, other.noisy_counts)


def test_the_cli_loads_the_same_codes_narrow(tmp_path: Path) -> None:
    """`rhosynth synthesize` loads its table as the worker does, in the narrowest type."""
    from engine.columns.categorical import CodesColumn
    from engine.tables.encoding import TableSchema
    from engine.tables.local import load_table

    sizes = (300, 30, 7)
    schema = TableSchema(tuple(CodesColumn(f"c{j}", size) for j, size in enumerate(sizes)))
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, size, 1000) for size in sizes])
    path = tmp_path / "t.csv"
    path.write_text(
        "c0,c1,c2\n" + "".join(f"{a},{b},{c}\n" for a, b, c in codes.tolist()), encoding="utf-8"
    )
    wide = load_table(path, schema)
    narrow = load_table(path, schema, narrow=True)
    assert wide.dtype == np.int64
    assert narrow.dtype == np.uint16  # the 300-value column decides the table's type
    assert narrow.flags.f_contiguous
    assert np.array_equal(wide, narrow)
    assert np.array_equal(wide, codes)
