"""What a run will cost before it runs: predicted wall time and peak memory, with a stated error.

Public information only: the declared domain, the validated params and a row count the caller
may use (the rows requested, or the exact count for a caller allowed to see it). Nothing here
reads data or noise, so a prediction reveals nothing the caller did not give it.

The model, per method ``m``::

    seconds = exp(a_m) · T^b_m        T = the work bound of Mechanism.estimate_resources(rows)
                                          plus one unit per input cell (rows × columns)
    memory  = exp(c_m) · M^d_m        M = the memory bound of Mechanism.estimate_resources(rows)
                                          plus the input codes (rows × columns × 8 bytes)

``T`` and ``M`` are the deliberate upper bounds the service refuses jobs on (app.jobs.resources);
the fit turns them into predictions. ``a, b, c, d`` are least squares in log space over the
calibration runs of ``benchmarks/cost_model.py`` (every method, default params, ε = 1, every
benchmark dataset), and each prediction's *factor* is the largest ratio, either way, between a
measured and a predicted value over those runs: on the calibration runs the measured value lies
in [prediction / factor, prediction × factor]. Runs with other params or much larger domains
are extrapolations, and the machine the benchmark ran on is not the worker's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from pydantic import BaseModel

from engine.domain import Domain
from engine.mechanisms.base import Mechanism

INPUT_BYTES_PER_CELL: Final = 8
"""The engine holds the input as int64 codes."""

COST_COEFFICIENTS: Final[dict[str, dict[str, float]]] = {}
"""Per method: ``seconds_log_scale`` (a), ``seconds_exponent`` (b), ``seconds_factor``,
``memory_log_scale`` (c), ``memory_exponent`` (d), ``memory_factor``. Produced by
``python -m benchmarks.cost_model --data ../shared/data --fit`` (docs/benchmarks.md, "Cost
preview: predicted vs measured"); a method missing here has no prediction."""


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


def cost_features(
    mechanism: Mechanism, domain: Domain, params: BaseModel, rows: int
) -> tuple[float, float]:
    """The public features ``(T, M)`` of the model (module docstring) for ``rows`` rows."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError("rows must be a non-negative int")
    estimate = mechanism.estimate_resources(domain, params, rows)
    input_cells = rows * len(domain)
    work = float(estimate.work + input_cells + 1)
    memory = float(estimate.memory_bytes + input_cells * INPUT_BYTES_PER_CELL)
    return work, memory


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
        work, memory = cost_features(mechanism, domain, params, rows)
        seconds = math.exp(
            coefficients["seconds_log_scale"] + coefficients["seconds_exponent"] * math.log(work)
        )
        peak = math.exp(
            coefficients["memory_log_scale"] + coefficients["memory_exponent"] * math.log(memory)
        )
    except OverflowError:
        return None
    if not (math.isfinite(seconds) and math.isfinite(peak)):
        return None
    return CostPrediction(
        seconds=seconds,
        peak_memory_bytes=max(1, round(peak)),
        seconds_factor=coefficients["seconds_factor"],
        memory_factor=coefficients["memory_factor"],
    )
