"""MST: the maximum-spanning-tree mechanism (McKenna, Miklau, Sheldon, "Winning the NIST Contest:
A scalable and general approach to differentially private synthetic data", JPC 2021).

The mechanism is in mechanism.py."""

from engine.mechanisms.mst.mechanism import MSTMechanism

__all__ = ["MSTMechanism"]
