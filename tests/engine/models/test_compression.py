"""MST's domain compression: a public re-coding computed from noisy one-way counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Domain
from engine.models.compression import Compression


def test_supports_and_domain() -> None:
    domain = Domain(("a", "b"), (5, 3))
    compression = Compression.from_noisy_counts(
        domain, [np.array([100, 2, 50, -4, 30]), np.array([40, 40, 40])], [5.0, 5.0]
    )
    assert compression.supports[0].tolist() == [True, False, True, False, True]
    assert compression.domain.sizes == (4, 3)  # three kept + one merged code; b untouched
    assert compression.mapping(0).tolist() == [0, 3, 1, 3, 2]
    assert compression.compress_counts(0, [100, 2, 50, -4, 30]).tolist() == [100, 50, 30, -2]
    assert compression.compress_counts(1, [40, 40, 40]).tolist() == [40, 40, 40]


def test_nothing_supported_gives_one_code() -> None:
    domain = Domain(("a",), (4,))
    compression = Compression.from_noisy_counts(domain, [np.array([1, 0, -1, 2])], [10.0])
    assert compression.domain.sizes == (1,)
    codes = compression.decompress_codes(
        np.zeros((1000, 1), dtype=np.int64), np.random.default_rng(0)
    )
    # merged values come back in proportion to their clipped noisy counts: 1, 0, 0, 2
    assert set(np.unique(codes).tolist()) == {0, 3}
    assert abs((codes == 3).mean() - 2 / 3) < 0.06


@settings(max_examples=50, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=-20, max_value=200), min_size=1, max_size=30),
    seed=st.integers(min_value=0, max_value=2**31),
)
def test_compress_then_decompress_preserves_supported_values(counts: list[int], seed: int) -> None:
    domain = Domain(("a",), (len(counts),))
    compression = Compression.from_noisy_counts(domain, [np.array(counts)], [10.0])
    rng = np.random.default_rng(seed)
    original = rng.integers(0, len(counts), size=(500, 1))
    back = compression.decompress_codes(compression.compress_codes(original), rng)
    support = compression.supports[0]
    kept = support[original[:, 0]]
    assert (back[kept, 0] == original[kept, 0]).all(), "supported values survive unchanged"
    assert (~support[back[~kept, 0]]).all(), "merged values stay among the merged ones"
    assert back.min() >= 0 and back.max() < len(counts)


def test_decompressing_in_place_equals_decompressing_into_a_new_table() -> None:
    domain = Domain(("a", "b", "c"), (6, 5, 4))
    compression = Compression.from_noisy_counts(
        domain,
        [np.array([90, 3, 80, 2, 1, 70]), np.array([50, 50, 1, 50, 2]), np.array([9, 9, 9, 9])],
        [5.0, 5.0, 5.0],
    )
    original = np.random.default_rng(4).integers(0, [6, 5, 4], size=(2000, 3))
    compressed = compression.compress_codes(original)
    fresh = compression.decompress_codes(compressed, np.random.default_rng(9))
    in_place = compressed.copy()
    same = compression.decompress_codes(in_place, np.random.default_rng(9), out=in_place)
    assert same is in_place
    assert np.array_equal(same, fresh)
    # The merged rows of "a" drew from its merged values, both of which show up.
    assert set(np.unique(fresh[compressed[:, 0] == 3, 0]).tolist()) == {1, 3, 4}
