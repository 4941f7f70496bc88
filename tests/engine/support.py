"""Small synthetic datasets shared by the mechanism tests."""

from __future__ import annotations

import numpy as np

from engine.domain import Dataset, Domain


def correlated(n: int, seed: int) -> Dataset:
    """a → b copies a (with 5% noise), c independent, d depends on c."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 4, n)
    b = np.where(rng.random(n) < 0.95, a, rng.integers(0, 4, n))
    c = rng.integers(0, 3, n)
    d = (c + rng.integers(0, 2, n)) % 3
    domain = Domain(("a", "b", "c", "d"), (4, 4, 3, 3))
    return Dataset(domain, np.column_stack([a, b, c, d]).astype(np.int64))
