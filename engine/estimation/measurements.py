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

    Grouped (partitioned) measurements. With ``groups`` given, the measurement is not of the
    marginal's cells but of sums of disjoint groups of them: ``groups`` has the marginal's shape
    (one axis per attribute) and maps every cell to its group 0 … G−1 (every group non-empty),
    and ``values`` is 1-D with the G noisy group sums, each with independent noise of standard
    deviation ``sigma``. This is the linear measurement y = Q·μ + z of Private-PGM with Q the
    G × cells 0/1 group-indicator matrix; the estimator's loss term is ½‖(Q·μ − y)/σ‖², with
    gradient Qᵀ(Q·μ − y)/σ², computed with ``bincount`` and indexing (PPSyn's partitioned
    measurements; no uniformity assumption inside a group). The identity grouping is equivalent
    to the plain measurement.
    """

    attributes: tuple[str, ...]
    values: FloatArray
    sigma: float
    groups: npt.NDArray[np.intp] | None = None

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
        groups = self.groups
        if groups is None:
            if values.ndim != len(attributes):
                raise ValueError("values must have one axis per attribute")
        else:
            groups = np.asarray(groups)
            if not np.issubdtype(groups.dtype, np.integer):
                raise ValueError(f"groups must be integers, got {groups.dtype}")
            if groups.ndim != len(attributes):
                raise ValueError("groups must have one axis per attribute")
            if values.ndim != 1:
                raise ValueError("a grouped measurement's values must be 1-D (one per group)")
            if groups.size == 0 or groups.min() < 0 or groups.max() >= values.size:
                raise ValueError("groups must map every cell to a group 0 … len(values) − 1")
            if np.any(np.bincount(groups.ravel(), minlength=values.size) == 0):
                raise ValueError("every group must contain at least one cell")
            groups = groups.astype(np.intp, copy=True)
            groups.flags.writeable = False
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
        object.__setattr__(self, "groups", groups)

    @classmethod
    def from_measurement(cls, m: Measurement) -> NoisyMarginal:
        """The estimator's view of a released :class:`engine.marginals.Measurement`."""
        return cls(m.attributes, m.noisy_counts.astype(np.float64), math.sqrt(float(m.sigma2)))


def estimate_total(measurements: Sequence[NoisyMarginal]) -> float:
    """Precision-weighted mean of the measurements' sums, at least 1 (post-processing).

    The sum of a marginal with c cells (or c groups) has noise variance c·σ², so each sum is
    weighted by 1/(c·σ²) (the minimum-variance unbiased combination, as in Private-PGM). With no
    measurements the total is 1.
    """
    if not measurements:
        return 1.0
    weights = np.array([1.0 / (m.values.size * m.sigma**2) for m in measurements])
    sums = np.array([float(m.values.sum()) for m in measurements])
    return max(1.0, float(np.dot(weights, sums) / weights.sum()))
