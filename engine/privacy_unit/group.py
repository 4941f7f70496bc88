"""From row-level to unit-level privacy: the group scaling every mechanism and discovery uses.

With a privacy unit of at most k rows (after :func:`engine.privacy_unit.truncate`), neighbouring
tables D, D' differ by the rows of one unit: D' = D plus (or minus) at most k rows. Every
mechanism here is analysed at the row level (one added or removed row) and run at the row-level
budget ρ_row = ρ/k² (:func:`row_level_rho`); what it releases is then stated at the unit level.

Claim (the group scaling). Let q be a statistic whose L2 sensitivity under adding or removing one
row is at most Δ on *every* table (so also on every intermediate table below). Write D' = D ∪ {x₁,
…, x_m}, m ≤ k, and D_j = D ∪ {x₁, …, x_j}. By the triangle inequality

    ‖q(D') − q(D)‖₂ ≤ Σ_j ‖q(D_j) − q(D_{j−1})‖₂ ≤ m·Δ ≤ k·Δ,

so q has L2 sensitivity kΔ under unit neighbours, and releasing q + N_Z(0, σ²) per coordinate
is (kΔ)²/(2σ²) = k²·Δ²/(2σ²)-zCDP (Canonne, Kamath, Steinke 2020, Theorem 14). The noise is
drawn at σ² = Δ²/(2ρ_row), so each release costs k²·ρ_row per unit, and the releases of a run,
which add up to ρ_row at the row level, add up to k²·ρ_row = ρ per unit (adaptive composition,
Bun & Steinke 2016, Lemma 2.3: each step's bound holds for every fixed earlier output).
Likewise a score with per-row sensitivity Δ changes by at most kΔ per unit, so an
exponential-mechanism draw weighted exp(ε·q/(2Δ)) is the exponential mechanism with parameter kε
at sensitivity kΔ: kε-bounded range, (kε)²/8 = k²·ε²/8-zCDP (Cesar & Rogers 2021).

For a randomised statistic (a CSPRNG subsample, a random block assignment, as in dpcopula) the
same bound follows from the group privacy of zCDP: a ρ_row-zCDP mechanism is k²ρ_row-zCDP for
groups of k rows (Bun & Steinke 2016, Proposition 27), whatever it does inside.

Tightness. For a contingency table the factor k is attained: all k rows of one unit can fall in
one cell, which then moves by k (L2 change k; spread over cells c₁ + … + c_j = k the change is
√(Σ c_i²) ≤ k). So no tighter bound holds for counts, and the mechanisms use k·Δ throughout; the
one release that gets its own derivation is the open-set category discovery, whose δ comes from
a threshold (engine/discovery/categories.py, :func:`split_tail_bound`).

With k = 1 nothing changes: ρ_row = ρ and every stated figure is the row-level one.
"""

from __future__ import annotations

import math
from fractions import Fraction

from engine.privacy_unit.truncation import MAX_MAX_ROWS


def check_contribution_bound(contribution_bound: int) -> int:
    """``contribution_bound`` (k) as an int from 1 to :data:`MAX_MAX_ROWS`; ``ValueError`` else."""
    k = contribution_bound
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_MAX_ROWS:
        raise ValueError(f"contribution_bound must be an integer from 1 to {MAX_MAX_ROWS}")
    return k


def row_level_rho(rho: Fraction | int, contribution_bound: int) -> Fraction:
    """ρ/k²: the row-level budget a run that must be ρ-zCDP per unit of at most k rows spends
    (the noise scale it buys, σ² = Δ²/(2ρ/k²) = (kΔ)²/(2ρ), is the unit-level one). Exact."""
    if isinstance(rho, bool) or not isinstance(rho, Fraction | int):
        raise TypeError("rho must be an exact Fraction")
    k = check_contribution_bound(contribution_bound)
    return Fraction(rho) / (k * k)


def unit_level_rho(rho_row: Fraction | int, contribution_bound: int) -> Fraction:
    """k²·ρ_row: what a release charged ρ_row at the row level costs per unit of ≤ k rows."""
    if isinstance(rho_row, bool) or not isinstance(rho_row, Fraction | int):
        raise TypeError("rho must be an exact Fraction")
    k = check_contribution_bound(contribution_bound)
    return Fraction(rho_row) * (k * k)


def unit_level_epsilon(epsilon_row: float, rho_row: Fraction, contribution_bound: int) -> float:
    """k·ε as a float for an exponential-mechanism draw with parameter ε at the row level that
    was charged ρ_row ≥ ε²/8: the largest float ≤ k·ε whose square over 8 is at most k²·ρ_row
    exactly (k·ε can round up by half an ulp; the draw itself is unchanged, only its statement)."""
    k = check_contribution_bound(contribution_bound)
    charged = unit_level_rho(rho_row, k)
    eps = float(Fraction(epsilon_row) * k)
    while eps > 0 and Fraction(eps) ** 2 / 8 > charged:
        eps = math.nextafter(eps, 0.0)
    if not eps > 0:
        raise ValueError("epsilon must be positive")
    return eps


__all__ = [
    "check_contribution_bound",
    "row_level_rho",
    "unit_level_epsilon",
    "unit_level_rho",
]
