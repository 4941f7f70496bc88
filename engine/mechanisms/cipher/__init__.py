"""CIPHER: a full joint distribution from noisy low-order marginals by stepwise ridge solves
(Eugenio & Liu, "Construction of Differentially Private Empirical Distributions from a low-order
Marginals Set through Solving Linear Equations with l_2 Regularization", SAND2021-0088 C;
arXiv:1812.05671).

The mechanism is in mechanism.py."""

from engine.mechanisms.cipher.mechanism import CIPHERMechanism

__all__ = ["CIPHERMechanism"]
