"""PrivSyn: differentially private data synthesis with dense marginals and GUM (Zhang, Wang, Li,
He, Chen, Zhang, USENIX Security 2021).

The mechanism is in mechanism.py; its building blocks (parts.py) beside it."""

from engine.mechanisms.privsyn.mechanism import PrivSynMechanism

__all__ = ["PrivSynMechanism"]
