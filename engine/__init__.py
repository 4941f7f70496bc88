"""rhosynth's numeric engine: domains, exact ρ-zCDP accounting, exact discrete Gaussian noise,
marginal measurement and the synthesis mechanisms.

The engine knows nothing about HTTP, databases or queues; it takes encoded integer data, a privacy
budget ρ (a ``fractions.Fraction``) and explicit randomness, and returns synthetic codes together
with the noisy measurements it made.
"""

from engine.domain import Dataset, Domain

__all__ = ["Dataset", "Domain"]
