"""Values inside bins that keep the relations between columns (post-processing, no budget).

A model of bins decides, for each synthetic row, the bin of every numeric, date and datetime
column; decoding then draws a value inside each bin. Drawn independently per column, values lose
the relation between columns *inside* a pair of bins: in a wide end bin of departure delays
(76 to 228 minutes), the arrival delay of the same row lands anywhere in its own wide bin, and a
correlation of 0.92 between the two columns comes out as 0.78.

This module draws the positions inside the bins jointly, from a Gaussian copula conditioned on
the bins (the latent-variable reading of binned data: Pitt, Chan and Kohn 2006, "Efficient
Bayesian inference for Gaussian copula regression models"; Hoff 2007, "Extending the rank
likelihood for semiparametric copula estimation"):

* Each column's decoding draws from a distribution F (its profile, or uniform over its range;
  engine.columns.profile), so bin b holds the levels ``[F(lo_b), F(hi_b))`` and, in latent
  normal units, the interval ``[Φ⁻¹(F(lo_b)), Φ⁻¹(F(hi_b)))``.
* The latent correlation R is estimated from the synthetic codes themselves: the Pearson
  correlation of each row's normal score of its bin's mid-level (van der Waerden scores of the
  binned values; ties shrink it toward 0, so it errs on the side of independence). Columns that
  are not linked to any other by at least :data:`MIN_LINK` are left independent.
* Each row starts from the independent draw (uniform inside its bin's levels, as decoding does
  without coupling) and gets one sweep of the Gibbs sampler for the normal truncated to the
  row's box (Geweke 1991; Robert 1995): column by column, the latent value is redrawn from its
  conditional normal given the others, truncated to its own bin's interval. The position inside
  the bin is then ``(Φ(z) − F(lo_b)) / (F(hi_b) − F(lo_b))``, which replaces the uniform draw.

Every value stays inside the bin the model chose, so every marginal and every table of bins is
what the model gave; only the spread inside the bins follows the others. One sweep from the
independent start gives what three do on the raw benchmark tables (docs/benchmarks.md,
"Values inside bins").

Privacy: the input is the synthetic codes (a DP release) and the columns' public edges and
profiles; the random numbers come from the job's seeded generators. This is post-processing of
DP outputs (Dwork and Roth 2014, Proposition 2.1): it reads no real row and costs no budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MIN_LINK = 0.1
"""A column takes part when its latent correlation with some other column is at least this in
absolute value; below it, coupling changes nothing one could measure."""

SHRINK = 0.01
"""R is shrunk this far toward the identity so that near-duplicate columns (a month and a
timestamp of the same flights, correlated 0.99) leave it invertible."""

_EDGE = 1e-15
"""Levels are kept this far inside (0, 1) so that Φ⁻¹ stays finite."""


class LeveledColumn(Protocol):
    """A column that decodes by drawing inside bins (numeric, date, datetime)."""

    @property
    def size(self) -> int: ...

    @property
    def null_code(self) -> int | None: ...

    def bin_levels(self) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class _Bins:
    """One column's bins in latent units (one entry per code; the null code spans everything)."""

    lower: FloatArray  # F just below the bin
    upper: FloatArray  # F just below the next bin
    low_z: FloatArray  # Φ⁻¹ of lower (−inf for level 0)
    high_z: FloatArray  # Φ⁻¹ of upper (+inf for level 1)
    score: FloatArray  # Φ⁻¹ of the mid-level; 0 for the null code


def _bins(column: LeveledColumn) -> _Bins:
    from scipy import special  # here, not at import: a table without a coupling needs no scipy

    lower, upper = column.bin_levels()
    lower = np.clip(np.asarray(lower, dtype=np.float64), 0.0, 1.0)
    upper = np.maximum(np.clip(np.asarray(upper, dtype=np.float64), 0.0, 1.0), lower)
    size = int(column.size)
    full_lower = np.zeros(size, dtype=np.float64)
    full_upper = np.ones(size, dtype=np.float64)
    full_lower[: lower.size] = lower
    full_upper[: upper.size] = upper
    # Level 0 and 1 are the open ends (−inf, +inf); a bin of zero width at either end is kept
    # finite, so a row in it cannot turn another column's conditional mean into NaN.
    with np.errstate(divide="ignore"):
        low_z = special.ndtri(full_lower)
        high_z = special.ndtri(full_upper)
    flat = full_upper - full_lower <= _EDGE
    limit = float(-special.ndtri(_EDGE))
    low_z = np.where(flat, np.clip(low_z, -limit, limit), low_z)
    high_z = np.where(flat, np.clip(high_z, -limit, limit), high_z)
    score = special.ndtri(np.clip((full_lower + full_upper) / 2.0, _EDGE, 1.0 - _EDGE))
    if column.null_code is not None:
        score[column.null_code] = 0.0
    return _Bins(full_lower, full_upper, low_z, high_z, score)


@dataclass(frozen=True)
class Coupling:
    """The latent Gaussian copula of the linked columns (schema positions ``columns``)."""

    columns: tuple[int, ...]
    precision: FloatArray
    bins: tuple[_Bins, ...]

    def __post_init__(self) -> None:
        k = len(self.columns)
        if k < 2 or len(self.bins) != k or self.precision.shape != (k, k):
            raise ValueError("a coupling links at least two columns, with one precision row each")
        if not np.all(np.isfinite(self.precision)) or np.any(np.diag(self.precision) <= 0):
            raise ValueError("the precision matrix must be finite with a positive diagonal")

    def draws(
        self, codes: npt.NDArray[np.integer], generators: Sequence[np.random.Generator]
    ) -> dict[int, FloatArray]:
        """Positions inside the bins (uniform marginally, in [0, 1)) for the linked columns of
        the rows ``codes`` (all the schema's columns), keyed by schema position.

        Each linked column's generator gives two uniforms per row, row by row, so a table decoded
        in row batches gets the same draws as in one piece.
        """
        from scipy import special

        rows = codes.shape[0]
        k = len(self.columns)
        index = [np.asarray(codes[:, j], dtype=np.int64) for j in self.columns]
        uniforms = [generators[j].random((rows, 2)) for j in self.columns]
        lower = [b.lower[c] for b, c in zip(self.bins, index, strict=True)]
        upper = [b.upper[c] for b, c in zip(self.bins, index, strict=True)]
        latent = np.empty((rows, k), dtype=np.float64)
        for i in range(k):  # the independent start: uniform inside each bin's levels
            start = lower[i] + (upper[i] - lower[i]) * uniforms[i][:, 0]
            latent[:, i] = special.ndtri(np.clip(start, _EDGE, 1.0 - _EDGE))
        for i in range(k):  # one Gibbs sweep
            p = self.precision[i]
            scale = 1.0 / np.sqrt(p[i])
            mean = -(latent @ p - p[i] * latent[:, i]) / p[i]
            b = self.bins[i]
            latent[:, i] = _truncated_normal(
                mean, scale, b.low_z[index[i]], b.high_z[index[i]], uniforms[i][:, 1]
            )
        out: dict[int, FloatArray] = {}
        for i, j in enumerate(self.columns):
            width = upper[i] - lower[i]
            level = special.ndtr(latent[:, i])
            inside = np.clip((level - lower[i]) / np.where(width > 0, width, 1.0), 0.0, 1.0)
            # A bin with no mass under F: decoding falls back to uniform there; keep the start.
            position = np.where(width > _EDGE, inside, uniforms[i][:, 0])
            out[j] = np.minimum(position, np.nextafter(1.0, 0.0))
        return out


def _truncated_normal(
    mean: FloatArray, scale: float, low: FloatArray, high: FloatArray, u: FloatArray
) -> FloatArray:
    """N(mean, scale²) truncated to [low, high] by inversion, with ``u`` uniform in [0, 1).

    Where the interval lies above the mean, the upper tails are inverted instead (Φ(−x)), so a
    box far out in a tail keeps its precision instead of rounding Φ to 1."""
    from scipy import special

    a = (low - mean) / scale
    b = (high - mean) / scale
    upper_side = a > 0
    out = np.empty_like(mean)
    # Lower side: Φ(a) ≤ p ≤ Φ(b).
    lo = ~upper_side
    pa, pb = special.ndtr(a[lo]), special.ndtr(b[lo])
    p = np.clip(pa + (pb - pa) * u[lo], 1e-300, 1.0 - 1e-16)
    out[lo] = special.ndtri(p)
    # Upper side: Φ(−b) ≤ q ≤ Φ(−a), x = −Φ⁻¹(q).
    qa, qb = special.ndtr(-a[upper_side]), special.ndtr(-b[upper_side])
    q = np.clip(qb + (qa - qb) * u[upper_side], 1e-300, 1.0 - 1e-16)
    out[upper_side] = -special.ndtri(q)
    x = np.clip(out, a, b)
    return mean + scale * x


def fit_coupling(
    columns: Sequence[LeveledColumn | None],
    batches: Iterable[npt.NDArray[np.integer]],
) -> Coupling | None:
    """The copula of ``columns`` (None for a column that is not drawn inside bins) estimated
    from the synthetic code ``batches`` (row blocks of the whole table, all columns), or None
    when fewer than two columns are linked."""
    bins = {
        j: _bins(column)
        for j, column in enumerate(columns)
        if column is not None and column.size > 1
    }
    positions = list(bins)
    if len(positions) < 2:
        return None
    k = len(positions)
    total = np.zeros(k, dtype=np.float64)
    products = np.zeros((k, k), dtype=np.float64)
    rows = 0
    for block in batches:
        scores = np.empty((block.shape[0], k), dtype=np.float64)
        for i, j in enumerate(positions):
            scores[:, i] = bins[j].score[np.asarray(block[:, j], dtype=np.int64)]
        total += scores.sum(axis=0)
        products += scores.T @ scores
        rows += block.shape[0]
    if rows < 2:
        return None
    mean = total / rows
    covariance = products / rows - np.outer(mean, mean)
    spread = np.sqrt(np.clip(np.diag(covariance), 0.0, None))
    varying = spread > 1e-9
    correlation = np.zeros((k, k), dtype=np.float64)
    live = np.outer(varying, varying)
    safe = np.where(varying, spread, 1.0)
    correlation[live] = (covariance / np.outer(safe, safe))[live]
    np.fill_diagonal(correlation, 0.0)
    linked = varying & (np.abs(correlation).max(axis=1) >= MIN_LINK)
    if linked.sum() < 2:
        return None
    chosen = np.flatnonzero(linked)
    latent = np.clip(correlation[np.ix_(chosen, chosen)], -1.0, 1.0) * (1.0 - SHRINK)
    np.fill_diagonal(latent, 1.0)
    precision = np.asarray(np.linalg.inv(_nearest_correlation(latent)), dtype=np.float64)
    return Coupling(
        columns=tuple(positions[i] for i in chosen),
        precision=precision,
        bins=tuple(bins[positions[i]] for i in chosen),
    )


def _nearest_correlation(matrix: FloatArray) -> FloatArray:
    """``matrix`` with its eigenvalues raised to at least :data:`SHRINK` and its diagonal reset
    to 1 (a Pearson matrix of scores is positive semidefinite already; this guards rounding)."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    fixed = (vectors * np.maximum(values, SHRINK)) @ vectors.T
    d = np.sqrt(np.diag(fixed))
    out: FloatArray = fixed / np.outer(d, d)
    return out


__all__ = ["MIN_LINK", "SHRINK", "Coupling", "fit_coupling"]
