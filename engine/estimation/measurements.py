"""Noisy marginals as the estimator sees them (post-processing of released measurements)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from engine.marginals import Measurement

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class NoisyMarginal:
    """A noisy measurement of one marginal, as the estimator sees it (post-processing).

    ``values`` has one axis per attribute, in the order of ``attributes`` (float64, read-only);
    ``sigma`` is the standard deviation of the independent noise in each cell. The estimator
    weights the measurement by 1/σ² (the Gaussian log-likelihood), as Private-PGM does (McKenna,
    Sheldon, Miklau, ICML 2019).
    """

    attributes: tuple[str, ...]
    values: FloatArray
    sigma: float

    def __post_init__(self) -> None:
        if isinstance(self.attributes, str):
            raise TypeError("attributes must be a sequence of names, not a single string")
        attributes = tuple(self.attributes)
        if len(set(attributes)) != len(attributes):
            raise ValueError("a marginal's attributes must be distinct")
        if not all(isinstance(name, str) and name for name in attributes):
            raise ValueError("attribute names must be non-empty strings")
        values = np.asarray(self.values)
        if not (
            np.issubdtype(values.dtype, np.floating) or np.issubdtype(values.dtype, np.integer)
        ):
            raise ValueError(f"values must be numeric, got {values.dtype}")
        values = values.astype(np.float64, copy=values is self.values)
        if values.ndim != len(attributes):
            raise ValueError("values must have one axis per attribute")
        if not np.all(np.isfinite(values)):
            raise ValueError("values must be finite")
        sigma = self.sigma
        if isinstance(sigma, bool) or not isinstance(sigma, int | float | np.floating | np.integer):
            raise TypeError("sigma must be a real number")
        sigma = float(sigma)
        if not (math.isfinite(sigma) and sigma > 0):
            raise ValueError("sigma must be finite and positive")
        values.flags.writeable = False
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "values", values)
        object.__setattr__(self, "sigma", sigma)

    @classmethod
    def from_measurement(cls, m: Measurement) -> NoisyMarginal:
        """The estimator's view of a released :class:`engine.marginals.Measurement`."""
        return cls(m.attributes, m.noisy_counts.astype(np.float64), math.sqrt(float(m.sigma2)))


def estimate_total(measurements: Sequence[NoisyMarginal]) -> float:
    """Precision-weighted mean of the measurements' sums, at least 1 (post-processing).

    The sum of a marginal with c cells has noise variance c·σ², so each sum is weighted by
    1/(c·σ²) (the minimum-variance unbiased combination, as in Private-PGM). With no measurements
    the total is 1.
    """
    if not measurements:
        return 1.0
    weights = np.array([1.0 / (m.values.size * m.sigma**2) for m in measurements])
    sums = np.array([float(m.values.sum()) for m in measurements])
    return max(1.0, float(np.dot(weights, sums) / weights.sum()))
