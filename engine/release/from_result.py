"""The :class:`~engine.release.record.ReleaseRecord` of a finished run, from its
:class:`~engine.mechanisms.base.SynthesisResult` (post-processing: it copies what was released).

The marginals are the run's noisy measurements with their axis maps (compressed axes map
original codes to measured cells); the charges are its exponential-mechanism selections (with
ε and sensitivity) and its other discrete-Gaussian releases (with σ² and sensitivity). The
record's constructor checks again that they add up to the job's ρ exactly.
"""

from __future__ import annotations

from fractions import Fraction

from pydantic import BaseModel

from engine.domain import Domain
from engine.mechanisms.base import SynthesisResult
from engine.release.record import Charge, MeasuredMarginal, RecordError, ReleaseRecord


def record_from_result(
    result: SynthesisResult, domain: Domain, method: str, params: BaseModel, rho: Fraction
) -> ReleaseRecord:
    """The record of what ``result`` released, for a run of ``method`` with ``params`` on
    ``domain`` (the original domain) charged ``rho``. :class:`RecordError` if the releases do
    not add up to ``rho`` or a measurement does not fit ``domain``."""
    if result.rho_spent != Fraction(rho):
        raise RecordError(f"the run released ρ = {result.rho_spent}, not the {rho} charged")
    maps = result.axis_maps or tuple((None,) * len(m.attributes) for m in result.measurements)
    marginals = tuple(
        MeasuredMarginal(
            attributes=m.attributes,
            noisy_counts=m.noisy_counts,
            sigma2=m.sigma2,
            rho=m.rho,
            axis_maps=axis_maps,
        )
        for m, axis_maps in zip(result.measurements, maps, strict=True)
    )
    charges = tuple(
        Charge(
            kind="selection",
            description=s.description,
            rho=s.rho,
            sensitivity=float(s.sensitivity),
            epsilon=float(s.epsilon),
        )
        for s in result.selections
    ) + tuple(
        Charge(
            kind="release",
            description=r.description,
            rho=r.rho,
            sensitivity=float(r.sensitivity),
            sigma2=r.sigma2,
        )
        for r in result.releases
    )
    return ReleaseRecord(
        method=method,
        params=params.model_dump(mode="json"),
        rho=Fraction(rho),
        domain=domain,
        estimated_total=result.estimated_total,
        marginals=marginals,
        charges=charges,
        extra=dict(result.extra),
    )
