"""PPSyn: partition-based synthetic data (Meifan Zhang, Dihang Deng, Lihua Yin, "Partition-based
differentially private synthetic data generation", arXiv 2310.06371), in a DP-safe variant.

The mechanism is in mechanism.py; the partition kernel (partition.py) beside it."""

from engine.mechanisms.ppsyn.mechanism import PPSynMechanism

__all__ = ["PPSynMechanism"]
