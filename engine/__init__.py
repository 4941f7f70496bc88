"""rhosynth's numeric engine: domains, exact ρ-zCDP accounting, exact discrete Gaussian noise,
marginal measurement and the synthesis mechanisms.

The engine knows nothing about HTTP, databases or queues; it takes encoded integer data, a privacy
budget ρ (a ``fractions.Fraction``) and explicit randomness, and returns synthetic codes together
with the noisy measurements it made.

``Dataset`` and ``Domain`` are loaded on first use, so that importing a light submodule (the
command line's definitions, engine/cli.py) does not import numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.domain import Dataset, Domain

__all__ = ["Dataset", "Domain"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from engine import domain

        return getattr(domain, name)
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
