"""PrivMRF: data synthesis via differentially private Markov random fields (Cai, Lei, Wei, Xiao,
PVLDB 14(11): 2190-2202, 2021).

The mechanism is in mechanism.py; its building blocks (parts.py) beside it."""

from engine.mechanisms.privmrf.mechanism import PrivMRFMechanism

__all__ = ["PrivMRFMechanism"]
