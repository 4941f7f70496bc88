"""Contingency tables and their noisy measurement.

``count_marginal`` reads the data and releases nothing; ``measure_marginal`` is the only function
here that touches data and returns something releasable, and it is the function that states (and
is charged) the ρ it spends.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from engine.accounting import gaussian_rho, sigma2_for_rho
from engine.domain import Dataset
from engine.noise import discrete_gaussian_noise

MARGINAL_SENSITIVITY = Fraction(1)
"""L2 sensitivity of any contingency table under add/remove-one-row: one row moves one cell by 1."""


def count_marginal(data: Dataset, attrs: Sequence[str]) -> npt.NDArray[np.int64]:
    """The exact contingency table of ``attrs`` (int64, shape = the attributes' sizes, in order).

    Rows are mapped to a flat mixed-radix cell index and counted with ``np.bincount``. An empty
    ``attrs`` gives a 0-d array holding the number of rows.
    """
    sub = tuple(attrs)
    if not sub:
        return np.array(data.n_rows, dtype=np.int64)
    shape = data.domain.project(sub).sizes
    cells = math.prod(shape)
    if cells > np.iinfo(np.intp).max:
        raise ValueError("the marginal has more cells than an array can index")
    flat = np.zeros(data.n_rows, dtype=np.intp)
    for attr, size in zip(sub, shape, strict=True):
        flat *= size
        flat += data.column(attr).astype(np.intp, copy=False)
    counts = np.bincount(flat, minlength=cells).astype(np.int64, copy=False)
    return counts.reshape(shape)


class MarginalCache:
    """Exact contingency tables of one dataset, counted once and kept while they are small.

    Adaptive mechanisms (AIM, PPSyn) score every candidate against its true table in every
    round; tables of at most ``max_cells`` cells are kept between rounds, larger ones are
    recounted when asked for, so memory stays bounded on wide tables with large domains. Like
    :func:`count_marginal` it releases nothing.
    """

    def __init__(self, data: Dataset, max_cells: int) -> None:
        self._data = data
        self._max_cells = max_cells
        self._tables: dict[tuple[str, ...], npt.NDArray[np.int64]] = {}

    def __call__(self, attrs: Sequence[str]) -> npt.NDArray[np.int64]:
        """``count_marginal(data, attrs)``, from the cache when it was counted before."""
        key = tuple(attrs)
        cached = self._tables.get(key)
        if cached is not None:
            return cached
        counts = count_marginal(self._data, key)
        if counts.size <= self._max_cells:
            self._tables[key] = counts
        return counts


@dataclass(frozen=True, eq=False)
class Measurement:
    """A noisy marginal that carries its own noise scale (as in Private-PGM).

    ``noisy_counts = count_marginal(data, attributes) + N_Z(0, sigma2)`` per cell; the measurement
    is ``rho = sensitivity² / (2·sigma2)``-zCDP, and that equality is checked here.
    """

    attributes: tuple[str, ...]
    noisy_counts: npt.NDArray[np.int64]
    sigma2: Fraction
    sensitivity: Fraction
    rho: Fraction

    def __post_init__(self) -> None:
        attributes = tuple(self.attributes)
        if len(set(attributes)) != len(attributes):
            raise ValueError("a measurement's attributes must be distinct")
        counts = np.asarray(self.noisy_counts)
        if counts.dtype != np.int64:
            raise ValueError(f"noisy_counts must be int64, got {counts.dtype}")
        if counts.ndim != len(attributes):
            raise ValueError("noisy_counts must have one axis per attribute")
        for name in ("sigma2", "sensitivity", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int):
                raise TypeError(f"{name} must be a Fraction")
            if value <= 0:
                raise ValueError(f"{name} must be positive")
            object.__setattr__(self, name, Fraction(value))
        if self.rho != gaussian_rho(self.sensitivity, self.sigma2):
            raise ValueError("rho must equal sensitivity² / (2·sigma2) exactly")
        if counts.flags.writeable:
            if counts is self.noisy_counts:
                counts = counts.copy()
            counts.flags.writeable = False
        object.__setattr__(self, "attributes", attributes)
        object.__setattr__(self, "noisy_counts", counts)


def measure_marginal(
    data: Dataset,
    attrs: Sequence[str],
    rho: Fraction,
    source: random.Random | None = None,
) -> Measurement:
    """Release the contingency table of ``attrs`` with exact discrete Gaussian noise; ρ-zCDP.

    Privacy claim. Neighbouring datasets differ by adding or removing one row, which changes one
    cell of the table by 1, so the table's L2 sensitivity is Δ = 1. Adding independent
    N_Z(0, σ²) noise with σ² = 1/(2ρ) to every cell is Δ²/(2σ²) = ρ-zCDP (Canonne, Kamath, Steinke,
    "The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Theorem 14). The cells measured
    are determined by the public domain only. ``source=None`` draws noise from the OS CSPRNG;
    pass a seeded source only in tests.
    """
    sigma2 = sigma2_for_rho(MARGINAL_SENSITIVITY, rho)
    counts = count_marginal(data, attrs)
    noisy = counts + discrete_gaussian_noise(sigma2, counts.shape, source)
    return Measurement(
        attributes=tuple(attrs),
        noisy_counts=noisy,
        sigma2=sigma2,
        sensitivity=MARGINAL_SENSITIVITY,
        rho=gaussian_rho(MARGINAL_SENSITIVITY, sigma2),
    )
