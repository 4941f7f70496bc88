"""The budget of AIM's adaptive rounds: what each round spends, when the run ends, and whether an
annealing step (σ halved, selection ε doubled, so each round costs 4×) is allowed.

A pure function of public quantities (ρ, the params and the anneal decisions, which are
post-processing of noisy measurements), in exact fractions, so that the charges of a run sum to
its ρ exactly whatever the sequence of anneal decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

ANNEAL_FACTOR = 4
"""Halving σ and doubling ε multiplies both ρ-costs of a round (1/(2σ²) and ε²/8) by 4."""


@dataclass(frozen=True)
class RoundCharge:
    """What one round spends: ``select`` on the exponential mechanism, ``measure`` on the
    Gaussian measurement; ``last`` when the round took exactly what was left."""

    select: Fraction
    measure: Fraction
    last: bool

    @property
    def sigma2(self) -> Fraction:
        """σ² of the measurement (L2 sensitivity 1): ρ = 1/(2σ²)."""
        return 1 / (2 * self.measure)


@dataclass(frozen=True)
class RoundBudget:
    """The state between rounds: ``total`` ρ for the rounds, ``used`` so far, the current
    per-round ``select`` and ``measure`` ρ, the selection share s of a last round, and
    ``min_rounds_after_anneal`` k: an anneal is allowed only when what is left after the current
    round covers at least k rounds at the new cost (``None``: always allowed, the paper's rule).

    Invariant (k ≥ 2): after an accepted anneal at least k more rounds run, whatever is decided
    later; the rounds end when what is left does not cover two rounds, and the last one takes
    exactly the remainder, so the charges sum to ``total``."""

    total: Fraction
    used: Fraction
    select: Fraction
    measure: Fraction
    select_share: Fraction
    min_rounds_after_anneal: int | None
    finished: bool = False

    def __post_init__(self) -> None:
        for name in ("total", "used", "select", "measure", "select_share"):
            if not isinstance(getattr(self, name), Fraction):
                raise TypeError(f"{name} must be a Fraction")
        if self.total <= 0 or self.select <= 0 or self.measure <= 0:
            raise ValueError("total, select and measure must be positive")
        if not 0 <= self.used <= self.total:
            raise ValueError("used must lie in [0, total]")
        if not 0 < self.select_share < 1:
            raise ValueError("select_share must lie in (0, 1)")
        k = self.min_rounds_after_anneal
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 2):
            raise ValueError("min_rounds_after_anneal must be an integer ≥ 2 or None")

    @classmethod
    def start(
        cls,
        total: Fraction,
        used: Fraction,
        rounds: int,
        select_share: Fraction,
        min_rounds_after_anneal: int | None,
    ) -> RoundBudget:
        """AIM's first state: each round costs ρ/T (ρ = ``total``, the run's whole budget), s of
        it for selection, with ``used`` already spent (the first one-way marginals)."""
        return cls(
            total=total,
            used=used,
            select=select_share * total / rounds,
            measure=(1 - select_share) * total / rounds,
            select_share=select_share,
            min_rounds_after_anneal=min_rounds_after_anneal,
        )

    @property
    def remaining(self) -> Fraction:
        return self.total - self.used

    @property
    def round_cost(self) -> Fraction:
        return self.select + self.measure

    def next_round(self) -> tuple[RoundBudget, RoundCharge]:
        """Charge one round: at the current cost, or, when what is left would not cover two
        rounds, exactly the remainder (s of it for selection)."""
        if self.finished:
            raise RuntimeError("the rounds are over")
        if self.remaining < 2 * self.round_cost:
            select = self.remaining * self.select_share
            charge = RoundCharge(select=select, measure=self.remaining - select, last=True)
            return replace(self, used=self.total, finished=True), charge
        charge = RoundCharge(select=self.select, measure=self.measure, last=False)
        return replace(self, used=self.used + self.round_cost), charge

    def may_anneal(self) -> bool:
        """Whether what is left covers ``min_rounds_after_anneal`` rounds at 4× the cost."""
        if self.finished:
            return False
        k = self.min_rounds_after_anneal
        return k is None or self.remaining >= k * ANNEAL_FACTOR * self.round_cost

    def anneal(self) -> RoundBudget:
        """σ halved and ε doubled when :meth:`may_anneal`, else unchanged."""
        if not self.may_anneal():
            return self
        return replace(
            self, select=self.select * ANNEAL_FACTOR, measure=self.measure * ANNEAL_FACTOR
        )
