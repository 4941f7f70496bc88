"""Drawing values inside bins from a value profile (post-processing of a public profile).

A numeric, date or datetime column may carry a ``profile``: non-decreasing points of its values'
quantile function at equally spaced levels (a learned range's DP percentiles, engine/discovery/
learned.py, or points the owner declared), from the first bin edge to the last. The profile
defines a distribution function F that is linear between consecutive points and jumps where
points repeat (a value many rows share). Decoding a row of bin b draws u uniformly between F just
below the bin's lower edge and F just below its upper edge (the last bin: up to 1) and returns
F⁻¹(u), so rows of a coarse bin follow the column's own distribution inside it instead of a
uniform one. Where the profile gives a bin no mass (the model put rows where the profile has
none), the value is uniform inside the bin. Uses the job's seeded ``rng`` only: post-processing,
no privacy cost.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

MIN_PROFILE_POINTS = 2
MAX_PROFILE_POINTS = 1001
_NO_MASS = 1e-12


def check_profile(profile: Sequence[float], first: float, last: float, what: str) -> str | None:
    """Why ``profile`` is not a valid profile for edges from ``first`` to ``last`` (None: valid)."""
    if not MIN_PROFILE_POINTS <= len(profile) <= MAX_PROFILE_POINTS:
        return f"{what} has {MIN_PROFILE_POINTS} to {MAX_PROFILE_POINTS} points"
    if not all(math.isfinite(p) for p in profile):
        return f"{what} points must be finite"
    if any(b < a for a, b in itertools.pairwise(profile)):
        return f"{what} points must be non-decreasing"
    if profile[0] != first or profile[-1] != last:
        return f"{what} runs from the first bin edge to the last"
    return None


def _below(points: FloatArray, levels: FloatArray, x: FloatArray) -> FloatArray:
    """F just below each ``x``: the profile's mass strictly below it."""
    index = np.searchsorted(points, x, side="left")  # points[index - 1] < x <= points[index]
    out = np.zeros(x.shape, dtype=np.float64)
    out[index >= points.size] = 1.0
    inner = (index > 0) & (index < points.size)
    j = index[inner]
    low, high = points[j - 1], points[j]
    out[inner] = levels[j - 1] + (x[inner] - low) / (high - low) * (levels[j] - levels[j - 1])
    return out


def bin_levels(
    edges: Sequence[float] | FloatArray, profile: Sequence[float] | FloatArray | None
) -> tuple[FloatArray, FloatArray]:
    """Per bin, the profile's distribution function just below its lower and its upper edge
    (the last bin's upper level is 1: the mass on the last edge is in it). Without a profile
    the distribution is uniform from the first edge to the last, as decoding draws then."""
    edges = np.asarray(edges, dtype=np.float64)
    if profile is None:
        points = np.array([edges[0], edges[-1]], dtype=np.float64)
    else:
        points = np.asarray(profile, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, points.size)
    lower = _below(points, levels, edges[:-1])
    upper = _below(points, levels, edges[1:])
    upper[-1] = 1.0
    return lower, upper


def profile_draws(
    edges: FloatArray, profile: FloatArray, bins: npt.NDArray[np.int64], draws: FloatArray
) -> FloatArray:
    """For each row of bin ``bins[i]``, a value inside ``[edges[b], edges[b + 1]]`` from the
    profile restricted to that bin; ``draws`` are uniforms in [0, 1) from the job's rng."""
    points = np.asarray(profile, dtype=np.float64)
    levels = np.linspace(0.0, 1.0, points.size)
    lower, upper = bin_levels(edges, points)
    low, high = lower[bins], upper[bins]
    u = low + (high - low) * draws
    values = np.interp(u, levels, points)
    left, right = edges[bins], edges[bins + 1]
    uniform = left + (right - left) * draws
    values = np.where(high - low > _NO_MASS, values, uniform)
    return np.clip(values, left, right)


__all__ = [
    "MAX_PROFILE_POINTS",
    "MIN_PROFILE_POINTS",
    "bin_levels",
    "check_profile",
    "profile_draws",
]
