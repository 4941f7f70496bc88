"""AIM: an adaptive and iterative mechanism (McKenna, Mullins, Sheldon, Miklau, "AIM: An Adaptive
and Iterative Mechanism for Differentially Private Synthetic Data", PVLDB 2022).

The mechanism is in mechanism.py; the round budget (round_budget.py) beside it."""

from engine.mechanisms.aim.mechanism import AIMMechanism

__all__ = ["AIMMechanism"]
