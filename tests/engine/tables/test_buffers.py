"""engine/tables/buffers.py: copies that stay intact, buffers that do not overlap."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engine.tables.buffers import ALIGNMENT, Slabs, column_buffers, null_mask, pool_array


def test_kept_copies_are_independent_and_intact_across_slabs() -> None:
    rng = np.random.default_rng(3)
    slabs = Slabs(slab_bytes=1024)
    originals = [
        rng.integers(0, np.iinfo(kind).max, size, dtype=kind)
        for size, kind in [(100, np.uint8), (300, np.uint16), (5, np.uint32), (2000, np.uint8)]
    ]
    kept = [slabs.keep(values) for values in originals]
    copies = [values.copy() for values in originals]
    for values in originals:
        values[...] = 0  # the kept copies do not share memory with what was passed in
    for held, copy in zip(kept, copies, strict=True):
        assert held.dtype == copy.dtype
        assert held.tolist() == copy.tolist()
        assert held.ctypes.data % ALIGNMENT == 0 or held.nbytes == 0


def test_column_buffers_are_writable_and_do_not_overlap() -> None:
    kinds = [np.dtype(np.uint8), np.dtype(np.uint32), np.dtype(np.uint16)]
    buffers = column_buffers(kinds, 1001)
    for j, buffer in enumerate(buffers):
        assert buffer.dtype == kinds[j] and len(buffer) == 1001
        buffer[...] = j + 1
    assert [set(buffer.tolist()) for buffer in buffers] == [{1}, {2}, {3}]


def test_pool_array_is_writable() -> None:
    array = pool_array(10, np.dtype(np.int64))
    array[...] = np.arange(10)
    assert array.sum() == 45
    with pytest.raises(ValueError, match="alignment"):
        Slabs(slab_bytes=8)


@pytest.mark.parametrize("nulls", [0.0, 0.3, 1.0])
def test_null_mask_is_arrows_is_null_at_every_offset(nulls: float) -> None:
    rng = np.random.default_rng(5)
    mask = rng.random(203) < nulls
    array = pa.array(rng.normal(size=203), mask=mask)
    for start in range(0, 40):
        for length in (0, 1, 7, 8, 9, 100, 203 - start):
            part = array.slice(start, length)
            expected = part.is_null().to_numpy(zero_copy_only=False)
            found = null_mask(part)
            assert found.dtype == np.bool_ and found.shape == (len(part),)
            assert np.array_equal(found, expected)
    assert not null_mask(pa.array([1.0, 2.0])).any()
    assert null_mask(pa.nulls(5)).tolist() == [True] * 5  # the null type has no bitmap
