"""Synthesis mechanisms by name: the registry the app validates job requests against."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from engine.mechanisms.aim import AIMMechanism
from engine.mechanisms.base import (
    DomainRefused,
    GaussianCharge,
    Mechanism,
    ProgressCallback,
    ResourceEstimate,
    SelectionCharge,
    SynthesisCancelled,
    SynthesisResult,
)
from engine.mechanisms.cipher import CIPHERMechanism
from engine.mechanisms.dpcopula import DPCopulaMechanism
from engine.mechanisms.independent import IndependentMechanism
from engine.mechanisms.mst import MSTMechanism
from engine.mechanisms.ppsyn import PPSynMechanism
from engine.mechanisms.privmrf import PrivMRFMechanism
from engine.mechanisms.privsyn import PrivSynMechanism

MECHANISMS: Mapping[str, Mechanism] = MappingProxyType(
    {
        mechanism.name: mechanism
        for mechanism in (
            IndependentMechanism(),
            MSTMechanism(),
            AIMMechanism(),
            PrivSynMechanism(),
            PPSynMechanism(),
            PrivMRFMechanism(),
            CIPHERMechanism(),
            DPCopulaMechanism(),
        )
    }
)
"""Read-only ``{name: mechanism}``; mechanisms hold no state, so one instance serves every job."""


def get_mechanism(name: str) -> Mechanism:
    """The mechanism called ``name``; ``KeyError`` if there is none."""
    try:
        return MECHANISMS[name]
    except KeyError:
        raise KeyError(f"unknown mechanism {name!r}") from None


__all__ = [
    "MECHANISMS",
    "DomainRefused",
    "GaussianCharge",
    "Mechanism",
    "ProgressCallback",
    "ResourceEstimate",
    "SelectionCharge",
    "SynthesisCancelled",
    "SynthesisResult",
    "get_mechanism",
]
