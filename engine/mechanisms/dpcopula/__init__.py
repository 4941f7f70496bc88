"""DPCopula: differentially private synthetic data through a Gaussian copula (Haoran Li, Li
Xiong, Xiaoqian Jiang, "Differentially Private Synthesization of Multi-Dimensional Data using
Copula Functions", EDBT 2014), in a ρ-zCDP, add/remove-one-row variant.

The mechanism is in mechanism.py; the copula statistics and post-processing (copula.py)
beside it."""

from engine.mechanisms.dpcopula.mechanism import DPCopulaMechanism

__all__ = ["DPCopulaMechanism"]
