"""Budget-split weights shared by the mechanisms (exact fractions for ``split_rho``).

PrivSyn's allocation gives each marginal a share of ρ ∝ cells^(2/3) (Zhang et al., "PrivSyn",
USENIX Security 2021, §4); PPSyn, PrivMRF and DPCopula use it for their one-way marginals too.
The weights only move the split: ``split_rho`` makes the parts add up to ρ exactly whatever they
are, so rounding a weight to a fraction costs no privacy.
"""

from __future__ import annotations

from fractions import Fraction

from engine.accounting import split_rho
from engine.domain import Domain

SHARE_DENOMINATOR = 10**6
"""Float shares and weights are turned into fractions with at most this denominator."""


def exact_weight(value: float) -> Fraction:
    """A float share or weight as a nearby exact fraction (denominator ≤ 10⁶)."""
    return Fraction(value).limit_denominator(SHARE_DENOMINATOR)


def size_weight(cells: int) -> Fraction:
    """cells^(2/3) as a positive exact weight for ``split_rho``."""
    return max(exact_weight(cells ** (2 / 3)), Fraction(1, SHARE_DENOMINATOR))


def one_way_parts(domain: Domain, one_way_rho: Fraction) -> tuple[Fraction, ...]:
    """The one-way marginals' ρ split ∝ size^(2/3), one part per column in domain order."""
    return split_rho(one_way_rho, [size_weight(size) for size in domain.sizes])
