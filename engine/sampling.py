"""Vectorised sampling from estimated distributions (post-processing: no privacy cost).

These functions only see noisy, already-released quantities, so an ordinary seeded
``np.random.Generator`` is the right randomness here: it makes synthetic output reproducible.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def sample_categorical(p: npt.ArrayLike, n: int, rng: np.random.Generator) -> npt.NDArray[np.int64]:
    """Draw ``n`` i.i.d. category indices from the (unnormalised, non-negative) weights ``p``.

    Inverse-CDF sampling: one uniform per draw and ``np.searchsorted`` on the cumulative weights;
    categories of weight 0 are never drawn.
    """
    weights = np.asarray(p, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError("p must be a non-empty 1-D array")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError("p must be finite and non-negative")
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError("n must be a non-negative int")
    cumulative = np.cumsum(weights)
    total = float(cumulative[-1])
    if not total > 0:
        raise ValueError("p must have a positive sum")
    # A uniform on [0, total): the drawn index i satisfies cumulative[i-1] <= u < cumulative[i].
    u = rng.random(int(n)) * total
    index = np.searchsorted(cumulative, u, side="right")
    # Rounding in u * total can land exactly on total; the last positive category owns that point.
    last_positive = int(np.flatnonzero(weights > 0)[-1])
    return np.minimum(index, last_positive).astype(np.int64)
