"""What a run will cost before it runs: predicted wall time and peak memory, with a stated error.

Public information only: the declared domain, the validated params and a row count the caller
may use (the rows requested, or the exact count for a caller allowed to see it). Nothing here
reads data or noise, so a prediction reveals nothing the caller did not give it.

The model, per method ``m``, with ``C`` = rows × columns (the input's cells; the output's too,
since a run without ``rows`` makes about as many rows as it read)::

    seconds = exp(a_m) · C^b_m · W(params) / W(default params)
    memory  = base_m + per_cell_m · C + weight_m · E(params)

``W`` is the work bound of :meth:`Mechanism.estimate_resources` and ``E`` the part of its memory
bound above the one-way baseline (the model cap and the tables a method holds): the deliberate
upper bounds the service refuses jobs on (app.jobs.resources). The calibration runs use the
default params, where the ratio ``W(params)/W(default params)`` is 1, so ``a, b`` are fitted on
the row and column counts alone and other params scale the time as the work bound says (twice the
iterations, twice the fitting): that part is the bound's assumption, not a measurement.

The coefficients are fitted on the runs of ``benchmarks/cost_model.py`` (every method, default
params, ε = 1, every benchmark dataset; ``a, b`` by least squares in log space, the memory terms
by non-negative least squares of the relative error). Each prediction's *factor* is the largest
ratio, either way, between a measured and a predicted value over those runs: on the calibration
runs the measurement lies in [prediction / factor, prediction × factor]. Other ρ (the adaptive
methods do more work at large ε), other params, much larger domains and other machines are
extrapolations; docs/benchmarks.md ("Cost preview: predicted vs measured") shows how far the
calibration carries to the runs at ε = 0.1 and 10.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel

from engine.domain import Domain
from engine.mechanisms.base import Mechanism, resource_estimate

# Fitted by `python -m benchmarks.cost_model --data ../shared/data --from-json docs/cost_model.json
# --fit` on the runs measured by `python -m benchmarks.cost_model --data ../shared/data` and, for
# ppsyn on temporal-match2 (past the 300 s cap), `… --datasets temporal-match2 --methods ppsyn
# --cap 1500` on 2026-11-26 (docs/benchmarks.md, "Cost preview: predicted vs measured").
COST_COEFFICIENTS: Final[dict[str, dict[str, float]]] = {
    "independent": {
        "seconds_log_scale": -13.2023,
        "seconds_cells_exponent": 0.724,
        "seconds_factor": 2.75,
        "memory_base_bytes": 235122079.0,
        "memory_bytes_per_cell": 24.084,
        "memory_bound_weight": 0.0,
        "memory_factor": 1.01,
    },
    "mst": {
        "seconds_log_scale": -6.7702,
        "seconds_cells_exponent": 0.5156,
        "seconds_factor": 2.57,
        "memory_base_bytes": 236313787.0,
        "memory_bytes_per_cell": 51.316,
        "memory_bound_weight": 0.1361,
        "memory_factor": 1.01,
    },
    "aim": {
        "seconds_log_scale": -8.42,
        "seconds_cells_exponent": 0.7869,
        "seconds_factor": 4.13,
        "memory_base_bytes": 214776605.0,
        "memory_bytes_per_cell": 153.605,
        "memory_bound_weight": 0.0,
        "memory_factor": 1.13,
    },
    "privsyn": {
        "seconds_log_scale": -12.5625,
        "seconds_cells_exponent": 1.0166,
        "seconds_factor": 2.32,
        "memory_base_bytes": 238334832.0,
        "memory_bytes_per_cell": 42.585,
        "memory_bound_weight": 1.3488,
        "memory_factor": 1.03,
    },
    "ppsyn": {
        "seconds_log_scale": -7.5291,
        "seconds_cells_exponent": 0.7909,
        "seconds_factor": 3.66,
        "memory_base_bytes": 185213676.0,
        "memory_bytes_per_cell": 113.296,
        "memory_bound_weight": 0.1719,
        "memory_factor": 1.23,
    },
    "privmrf": {
        "seconds_log_scale": -4.6215,
        "seconds_cells_exponent": 0.421,
        "seconds_factor": 5.47,
        "memory_base_bytes": 239224628.0,
        "memory_bytes_per_cell": 56.224,
        "memory_bound_weight": 0.0,
        "memory_factor": 1.03,
    },
    "dpcopula": {
        "seconds_log_scale": -12.6718,
        "seconds_cells_exponent": 0.8046,
        "seconds_factor": 2.05,
        "memory_base_bytes": 239974084.0,
        "memory_bytes_per_cell": 25.035,
        "memory_bound_weight": 0.2558,
        "memory_factor": 1.03,
    },
    "cipher": {
        "seconds_log_scale": -8.9515,
        "seconds_cells_exponent": 1.0,
        "seconds_factor": 5.47,
        "memory_base_bytes": 236313787.0,
        "memory_bytes_per_cell": 51.316,
        "memory_bound_weight": 0.2237,
        "memory_factor": 1.23,
    },
}
"""Per method: ``seconds_log_scale`` (a), ``seconds_cells_exponent`` (b), ``seconds_factor``,
``memory_base_bytes``, ``memory_bytes_per_cell``, ``memory_bound_weight``, ``memory_factor``.
Produced by ``python -m benchmarks.cost_model --data ../shared/data --fit`` (printed; the runs it
was fitted on are in docs/cost_model.json); a method missing here has no prediction."""


@dataclass(frozen=True)
class CostPrediction:
    """Predicted wall seconds of ``Mechanism.run`` and peak resident memory of the run (the
    loaded table included), each with its stated multiplicative error ``*_factor`` ≥ 1."""

    seconds: float
    peak_memory_bytes: int
    seconds_factor: float
    memory_factor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError("seconds must be positive and finite")
        if isinstance(self.peak_memory_bytes, bool) or self.peak_memory_bytes <= 0:
            raise ValueError("peak_memory_bytes must be a positive int")
        for name in ("seconds_factor", "memory_factor"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 1):
                raise ValueError(f"{name} must be a finite number ≥ 1")


@dataclass(frozen=True)
class CostFeatures:
    """The public inputs of the model (module docstring): ``cells`` = C, ``work_ratio`` =
    W(params)/W(default params), ``bound_extra_bytes`` = E(params)."""

    cells: int
    work_ratio: float
    bound_extra_bytes: int


def cost_features(
    mechanism: Mechanism, domain: Domain, params: BaseModel, rows: int
) -> CostFeatures:
    """The features of a run of ``mechanism`` with ``params`` on ``domain`` with ``rows`` rows."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError("rows must be a non-negative int")
    estimate = mechanism.estimate_resources(domain, params, rows)
    default = mechanism.estimate_resources(domain, mechanism.validate_params({}), rows)
    baseline = resource_estimate(domain, rows).memory_bytes
    return CostFeatures(
        cells=rows * len(domain),
        work_ratio=estimate.work / max(default.work, 1),
        bound_extra_bytes=max(estimate.memory_bytes - baseline, 0),
    )


def predict_cost(
    mechanism: Mechanism, domain: Domain, params: BaseModel, rows: int
) -> CostPrediction | None:
    """The predicted cost of running ``mechanism`` with ``params`` on ``domain`` with ``rows``
    rows in and out; None when the method has no calibrated coefficients or the prediction is
    beyond a float (a domain no run could handle: the service refuses it on its bounds)."""
    coefficients = COST_COEFFICIENTS.get(mechanism.name)
    if coefficients is None:
        return None
    try:
        features = cost_features(mechanism, domain, params, rows)
        seconds = (
            math.exp(coefficients["seconds_log_scale"])
            * max(features.cells, 1) ** coefficients["seconds_cells_exponent"]
            * features.work_ratio
        )
        peak = (
            coefficients["memory_base_bytes"]
            + coefficients["memory_bytes_per_cell"] * features.cells
            + coefficients["memory_bound_weight"] * features.bound_extra_bytes
        )
    except OverflowError:
        return None
    if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(peak) and peak >= 1):
        return None
    return CostPrediction(
        seconds=seconds,
        peak_memory_bytes=round(peak),
        seconds_factor=coefficients["seconds_factor"],
        memory_factor=coefficients["memory_factor"],
    )
