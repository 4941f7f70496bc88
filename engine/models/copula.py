"""Drawing records from a Gaussian copula (Li, Xiong, Jiang, EDBT 2014, Algorithm 3): rows split
over partitions, Z ~ N(0, P), U = Φ(Z), X_j = F_j⁻¹(U_j).

Post-processing only, seeded by ``rng``: the correlation matrices and margins are DPCopula's
released quantities. The ``"copula"`` model kind (:mod:`engine.models.kinds`) samples with it;
the statistics and the fitting are DPCopula's (engine/mechanisms/dpcopula/).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]


def allocate_rows(weights: npt.ArrayLike, total: int) -> IntArray:
    """Split ``total`` rows ∝ ``weights`` (non-negative) by largest remainders; all-zero weights
    split evenly. Post-processing."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be a non-empty, finite, non-negative 1-D array")
    if total < 0:
        raise ValueError("total must be non-negative")
    if not w.sum() > 0:
        w = np.ones_like(w)
    exact = w / w.sum() * total
    base = np.floor(exact).astype(np.int64)
    missing = total - int(base.sum())
    if missing > 0:
        order = np.argsort(-(exact - base), kind="stable")
        base[order[:missing]] += 1
    result: IntArray = base
    return result


def inverse_cdf(margin: npt.ArrayLike, u: npt.ArrayLike) -> IntArray:
    """X = F⁻¹(u) = min{v : F(v) > u} for u in [0, 1), F the normalised CDF of the non-negative
    ``margin`` (all-zero: uniform). Values of weight 0 are never returned; u rounding up to 1
    maps to the last value of positive weight. Post-processing (the paper's Algorithm 3, step 3).
    """
    weights = np.asarray(margin, dtype=np.float64)
    if weights.ndim != 1 or weights.size == 0 or np.any(weights < 0):
        raise ValueError("margin must be a non-empty non-negative 1-D array")
    if not weights.sum() > 0:
        weights = np.ones_like(weights)
    cdf = np.cumsum(weights) / weights.sum()
    index = np.searchsorted(cdf, np.asarray(u, dtype=np.float64), side="right")
    last = int(np.flatnonzero(weights > 0)[-1])
    return np.minimum(index, last).astype(np.int64)


def sample_copula(
    correlation: npt.ArrayLike,
    margins: Sequence[npt.ArrayLike],
    rows: int,
    rng: np.random.Generator,
) -> IntArray:
    """``rows`` records from the Gaussian copula with ``correlation`` and the given margins:
    Z ~ N(0, P), U = Φ(Z), X_j = F_j⁻¹(U_j) (the paper's Algorithm 3). Post-processing, seeded
    by ``rng``. ``correlation`` must be positive semi-definite (DPCopula repairs it:
    ``repair_correlation`` in engine/mechanisms/dpcopula/copula.py).
    """
    from scipy import special  # here, not at import: other models' sampling needs no scipy

    p = np.asarray(correlation, dtype=np.float64)
    m = len(margins)
    if p.shape != (m, m):
        raise ValueError("correlation must be m × m for m margins")
    out = np.empty((rows, m), dtype=np.int64)
    if rows == 0 or m == 0:
        return out
    values, vectors = np.linalg.eigh(0.5 * (p + p.T))
    root = vectors * np.sqrt(np.maximum(values, 0.0))
    z = rng.standard_normal((rows, m)) @ root.T
    u = np.asarray(special.ndtr(z), dtype=np.float64)
    for j, margin in enumerate(margins):
        out[:, j] = inverse_cdf(margin, u[:, j])
    return out
