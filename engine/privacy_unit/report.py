"""A DP release of what truncation to k rows per unit removed, for the analyst tier.

The exact figures (:class:`~engine.privacy_unit.Truncation`) are owner-only. Analysts get
:func:`noisy_truncation`: one discrete-Gaussian release of the vector

    (U, R_C) = (units that lost rows,  Σ over those units of min(rows removed, C)),

with C a public cap (:func:`default_cap`: max(k, 10)).

Privacy claim (ρ-zCDP per unit). Truncation keeps each unit's rows as a function of that unit's
rows alone (engine/privacy_unit/truncation.py), so adding or removing one unit u (any number m of
rows before truncation) changes only u's own term: U by 1 if m > k (else 0) and R_C by
min(m − k, C) ≤ C. Rows removed per unit are unbounded (m − k), which is why R_C is capped: the
vector's L2 sensitivity is √(1 + C²). Adding independent N_Z(0, σ²) to both coordinates with
σ² = (1 + C²)/(2ρ) is (1 + C²)/(2σ²) = ρ-zCDP (Canonne, Kamath, Steinke 2020, Theorem 14).
Recorded as two parts with one σ²: U (sensitivity 1, ρ_U = 1/(2σ²)) and R_C (sensitivity C,
ρ_R = C²/(2σ²)), ρ_U + ρ_R = ρ exactly, which is the L2 statement above split by coordinate.
Rows without a unit are dropped before anything is measured and are not part of this release
(their number stays owner-only). The release depends on nothing else in the table.

R_C under-counts the rows removed when some unit lost more than C; the report says "at least".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from engine.accounting import gaussian_rho
from engine.noise import discrete_gaussian_noise
from engine.privacy_unit.group import check_contribution_bound
from engine.privacy_unit.truncation import Truncation

MIN_CAP = 10
"""C is at least this: a unit with a few rows over k is counted whole."""

TRUNCATION_MECHANISM = "dp_truncation_count"


def default_cap(max_rows: int) -> int:
    """C = max(k, :data:`MIN_CAP`): the rows removed per unit counted at most this many times."""
    return max(check_contribution_bound(max_rows), MIN_CAP)


@dataclass(frozen=True)
class NoisyTruncation:
    """What truncation removed, released with ρ-zCDP per unit (module docstring).

    ``units_truncated`` is U + noise and ``rows_removed`` is R_C + noise (both DP, may be
    negative: clamp for display); ``cap`` is C, ``max_rows`` k; ``sigma2`` the noise variance of
    each; ``sensitivity_squared`` = 1 + C² (L2 sensitivity squared, exact); ``rho`` =
    (1 + C²)/(2σ²), checked exactly.
    """

    units_truncated: int
    rows_removed: int
    max_rows: int
    cap: int
    sigma2: Fraction
    sensitivity_squared: Fraction
    rho: Fraction

    def __post_init__(self) -> None:
        for name in ("units_truncated", "rows_removed", "max_rows", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise TypeError(f"{name} must be an int")
            object.__setattr__(self, name, int(value))
        check_contribution_bound(self.max_rows)
        if self.cap < 1:
            raise ValueError("cap must be at least 1")
        for name in ("sigma2", "sensitivity_squared", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int) or value <= 0:
                raise ValueError(f"{name} must be a positive exact Fraction")
            object.__setattr__(self, name, Fraction(value))
        if self.sensitivity_squared != 1 + self.cap * self.cap:
            raise ValueError("sensitivity_squared must be 1 + cap²")
        if self.rho != self.sensitivity_squared / (2 * self.sigma2):
            raise ValueError("rho must equal sensitivity² / (2·sigma2) exactly")

    @property
    def sigma(self) -> float:
        return math.sqrt(float(self.sigma2))

    @property
    def parts(self) -> tuple[tuple[str, Fraction, Fraction], ...]:
        """(what, sensitivity, ρ) per coordinate, with the shared ``sigma2``; the ρ add up to
        :attr:`rho` exactly."""
        return (
            ("units that lost rows", Fraction(1), gaussian_rho(1, self.sigma2)),
            (
                f"rows removed, each unit counted up to {self.cap}",
                Fraction(self.cap),
                gaussian_rho(self.cap, self.sigma2),
            ),
        )

    def describe(self) -> dict[str, object]:
        """JSON-able ledger/report detail (public: DP outputs and public parameters)."""
        return {
            "mechanism": TRUNCATION_MECHANISM,
            "max_rows": self.max_rows,
            "cap": self.cap,
            "noisy_units_truncated": self.units_truncated,
            "noisy_rows_removed_capped": self.rows_removed,
            "sigma2": str(self.sigma2),
            "rho": str(self.rho),
        }


def noisy_truncation(
    truncation: Truncation,
    rho: Fraction,
    max_rows: int,
    source: random.Random | None = None,
    *,
    cap: int | None = None,
) -> NoisyTruncation:
    """Release (units that lost rows, rows removed capped at C per unit) with N_Z(0, σ²) each,
    σ² = (1 + C²)/(2ρ): ρ-zCDP per unit (module docstring). ``max_rows`` is the k the truncation
    used; ``cap`` is C (default :func:`default_cap`); ``source=None`` draws from the OS CSPRNG."""
    if isinstance(rho, bool) or not isinstance(rho, Fraction | int):
        raise TypeError("rho must be an exact Fraction")
    budget = Fraction(rho)
    if budget <= 0:
        raise ValueError("rho must be positive")
    k = check_contribution_bound(max_rows)
    c = default_cap(k) if cap is None else cap
    if isinstance(c, bool) or not isinstance(c, int) or c < 1:
        raise ValueError("cap must be a positive int")
    sensitivity_squared = Fraction(1 + c * c)
    sigma2 = sensitivity_squared / (2 * budget)
    excess = np.asarray(truncation.excess, dtype=np.int64)
    exact = np.array([truncation.units_truncated, int(np.minimum(excess, c).sum())], dtype=np.int64)
    noisy = exact + discrete_gaussian_noise(sigma2, 2, source)
    return NoisyTruncation(
        units_truncated=int(noisy[0]),
        rows_removed=int(noisy[1]),
        max_rows=k,
        cap=c,
        sigma2=sigma2,
        sensitivity_squared=sensitivity_squared,
        rho=budget,
    )


__all__ = ["MIN_CAP", "TRUNCATION_MECHANISM", "NoisyTruncation", "default_cap", "noisy_truncation"]
