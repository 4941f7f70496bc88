"""The Euclidean projection of noisy counts onto the simplex: the clean-up several mechanisms
apply to a noisy one-way or joint table before they use it (post-processing)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


def project_to_simplex(values: npt.ArrayLike, total: float) -> FloatArray:
    """Euclidean projection of ``values`` onto {x ≥ 0, Σx = total} (post-processing).

    Sort-based algorithm (Held, Wolfe, Crowder 1974; Duchi et al., ICML 2008): x = max(v − θ, 0)
    with θ chosen so the result sums to ``total``. ``total = 0`` gives all zeros.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        raise ValueError("cannot project an empty vector")
    if not np.all(np.isfinite(v)):
        raise ValueError("values must be finite")
    if not (np.isfinite(total) and total >= 0):
        raise ValueError("total must be finite and non-negative")
    if total == 0:
        return np.zeros_like(v)
    descending = np.sort(v)[::-1]
    cumulative = np.cumsum(descending) - total
    index = np.arange(1, v.size + 1)
    # The largest k with descending[k-1] > (cumulative[k-1]) / k; k = 1 always qualifies.
    support = np.flatnonzero(descending - cumulative / index > 0)
    k = int(support[-1]) + 1 if support.size else 1
    theta = cumulative[k - 1] / k
    projected: FloatArray = np.maximum(v - theta, 0.0)
    return projected
