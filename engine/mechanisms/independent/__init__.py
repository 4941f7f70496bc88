"""Independent columns: the baseline that keeps every 1-way marginal and no correlation.

The mechanism is in mechanism.py."""

from engine.mechanisms.independent.mechanism import IndependentMechanism

__all__ = ["IndependentMechanism"]
