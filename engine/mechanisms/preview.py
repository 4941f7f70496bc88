"""What a run's first noisy releases will look like, stated before the run from public information.

A :class:`NoisePreview` is one release a mechanism will make first (typically the one-way
marginal of each column): what is measured, its L2 sensitivity, and the exact discrete Gaussian
variance σ² its share of ρ buys (σ² = Δ²/(2ρ), Canonne, Kamath, Steinke 2020). Mechanisms compute
it with the same budget-split code their run uses (:meth:`engine.mechanisms.Mechanism.first_noise`),
so the σ² stated here is the σ² of the run's first measurements exactly; later releases can depend
on noisy answers (adaptive selection) and are not previewed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from engine.accounting import gaussian_rho, sigma2_for_rho
from engine.marginals import MARGINAL_SENSITIVITY
from engine.privacy_unit.group import check_contribution_bound, unit_level_rho


@dataclass(frozen=True)
class NoisePreview:
    """One release a run will make first: ``description`` (public words), the ``attributes`` it
    is about, its ``sensitivity`` and discrete Gaussian ``sigma2``, and the ``rho`` it costs
    (``sensitivity² / (2·sigma2)`` exactly, checked)."""

    description: str
    attributes: tuple[str, ...]
    sensitivity: Fraction
    sigma2: Fraction
    rho: Fraction

    def __post_init__(self) -> None:
        for name in ("sensitivity", "sigma2", "rho"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, Fraction | int) or value <= 0:
                raise ValueError(f"{name} must be a positive exact Fraction")
            object.__setattr__(self, name, Fraction(value))
        object.__setattr__(self, "attributes", tuple(self.attributes))
        if self.rho != gaussian_rho(self.sensitivity, self.sigma2):
            raise ValueError("rho must equal sensitivity² / (2·sigma2) exactly")

    @property
    def sigma(self) -> float:
        """The noise's standard deviation (per cell or per score), as a float."""
        return math.sqrt(float(self.sigma2))


def marginal_preview(attributes: Sequence[str], rho: Fraction) -> NoisePreview:
    """The preview of ``engine.marginals.measure_marginal(data, attributes, rho)``: sensitivity 1,
    σ² = 1/(2ρ), the same conversion the measurement makes."""
    attrs = tuple(attributes)
    sigma2 = sigma2_for_rho(MARGINAL_SENSITIVITY, rho)
    what = "one-way marginal" if len(attrs) == 1 else f"{len(attrs)}-way marginal"
    return NoisePreview(
        description=f"{what} of {', '.join(attrs)}",
        attributes=attrs,
        sensitivity=MARGINAL_SENSITIVITY,
        sigma2=sigma2,
        rho=gaussian_rho(MARGINAL_SENSITIVITY, sigma2),
    )


def one_way_previews(
    attributes: Sequence[str], rhos: Sequence[Fraction]
) -> tuple[NoisePreview, ...]:
    """One :func:`marginal_preview` per attribute at its part of ρ."""
    return tuple(marginal_preview([a], r) for a, r in zip(attributes, rhos, strict=True))


def unit_previews(
    previews: Sequence[NoisePreview], contribution_bound: int
) -> tuple[NoisePreview, ...]:
    """``previews`` (made at the row-level budget ρ/k²) stated per unit of at most k rows: the
    same σ², sensitivity k·Δ and ρ = k²·ρ_row (engine/privacy_unit/group.py). k = 1: unchanged."""
    k = check_contribution_bound(contribution_bound)
    if k == 1:
        return tuple(previews)
    return tuple(
        NoisePreview(
            description=p.description,
            attributes=p.attributes,
            sensitivity=p.sensitivity * k,
            sigma2=p.sigma2,
            rho=unit_level_rho(p.rho, k),
        )
        for p in previews
    )
