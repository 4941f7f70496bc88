"""The privacy cost of one discovery release, in the form the ledger records it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from engine.accounting import exact_fraction

JsonScalar = str | int | float | bool | None


# Exact budgets: floats (and bools) are refused so no rounding slips in (engine/accounting.py).
exact_budget = exact_fraction


@dataclass(frozen=True)
class DiscoveryCost:
    """What one discovery mechanism spent: (ρ, δ)-approximate zCDP (Bun & Steinke 2016, Def. 8.1).

    ``delta = 0`` is pure ρ-zCDP. Costs compose by adding both coordinates (Bun & Steinke 2016,
    Lemma 8.3 for approximate zCDP). ``parameters`` are the public parameters of the release
    (never anything learned from the data), as JSON scalars.
    """

    mechanism: str
    rho: Fraction
    delta: Fraction = Fraction(0)
    parameters: Mapping[str, JsonScalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.mechanism:
            raise ValueError("a cost names its mechanism")
        rho = exact_budget(self.rho, "rho")
        delta = exact_budget(self.delta, "delta")
        if rho < 0:
            raise ValueError("rho must be non-negative")
        if not 0 <= delta < 1:
            raise ValueError("delta must lie in [0, 1)")
        parameters = dict(self.parameters)
        for key, value in parameters.items():
            if not isinstance(key, str):
                raise TypeError("parameter names must be strings")
            if value is not None and not isinstance(value, str | int | float | bool):
                raise TypeError(f"parameter {key!r} must be a JSON scalar")
        object.__setattr__(self, "rho", rho)
        object.__setattr__(self, "delta", delta)
        # A read-only copy: the caller's dict cannot change a recorded cost.
        object.__setattr__(self, "parameters", MappingProxyType(parameters))

    def describe(self) -> dict[str, object]:
        """JSON-able ledger detail; ρ and δ as exact fraction strings ("1/20") and as floats."""
        return {
            "mechanism": self.mechanism,
            "rho": str(self.rho),
            "delta": str(self.delta),
            "rho_float": float(self.rho),
            "delta_float": float(self.delta),
            "parameters": dict(self.parameters),
        }
