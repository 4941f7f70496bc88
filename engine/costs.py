"""What a run will cost before it runs: predicted wall time and peak memory, with a stated error.

Public information only: the declared domain, the validated params, the job's ρ and a row count
the caller may use (the rows requested, or the exact count for a caller allowed to see it).
Nothing here reads data or noise, so a prediction reveals nothing the caller did not give it.

The model, per method ``m``, with ``n`` rows (the input's; the output's too, since a run without
``rows`` makes about as many rows as it read), ``d`` columns, ``C`` = n·d cells and ``r = ρ/ρ₁``
(ρ₁ = :data:`RHO_REFERENCE`, the ρ of ε = 1 at δ = 1e-9)::

    seconds = exp(a_m) · n^bn_m · d^bd_m · r^c_m · W(params) / W(calibration params)
    memory  = base_m + per_cell_m · C + (weight_m + rho_weight_m · max(log r, 0)) · E(params)

with ``c_m`` = ``c_below_m`` when ρ < ρ₁ and ``c_above_m`` otherwise: a power law in ρ whose
exponent may change at ρ₁ (the adaptive methods add rounds and larger marginals as ρ grows).
Rows and columns have their own exponents because the marginal-based methods' work grows faster
in the columns (pairs of them) than in the rows. A run in a regime of its method
(:meth:`Mechanism.cost_regime`: aim's batches of rounds, by default above 64 columns) whose time
depends on ρ otherwise has its own terms: ``seconds`` as above times ``exp(o_g) · r^(c_g − c)``,
``o_g`` and ``c_g`` (below and above ρ₁) fitted on that regime's runs alone, the method's terms
unchanged (aim batched: the time falls from ε = 0.1 to 1, where sizing candidates against a tiny
model dominates, then is about flat as the model fills its cap); its memory has its own bound
weights (``weight_g``, ``rho_weight_g``: aim's bound counts every candidate's table, a batch
scores 500), and it states its own factors: the worst ratios over its runs, or the method's if
larger (a regime's few runs state no tighter error). The bound term of
the memory grows with log r above ρ₁ (aim fills more of its model cap when larger marginals are
affordable). ``W`` is the
method's expected work (:meth:`Mechanism.expected_work`: the work bound of
:meth:`Mechanism.estimate_resources`, or for aim that bound with its rounds in batches) and ``E``
the part of its memory bound above the one-way baseline (the model cap and the tables a method
holds): the deliberate upper bounds the service refuses jobs on (app.jobs.resources). The
calibration runs use the params of :meth:`Mechanism.calibration_params` (the defaults, except
aim's on tables of more than 64 columns, whose batches of rounds came after its runs), where the
ratio is 1, so ``a, bn, bd, c`` are fitted on the row and column counts and ρ alone, and other
params scale the time as the work says (twice the iterations, twice the fitting): that part is
an assumption, not a measurement (for aim's batches it was checked on one 196-column table:
docs/benchmarks.md, "AIM on 196 columns: batches of rounds").

The coefficients are fitted on the runs of ``benchmarks/cost_model.py`` (every method, default
params, ε = 0.1, 1 and 10 at δ = 1e-9, every benchmark dataset, runs past 120 s at ε ≠ 1 left
out; ``a, bn, bd, c`` by least squares in log space, the memory terms by non-negative least
squares of the relative error). Each prediction's *factor* is the largest ratio, either way,
between a measured and a predicted value over those runs: on the calibration runs the
measurement lies in [prediction / factor, prediction × factor]. ρ outside [ρ(ε = 0.1),
ρ(ε = 10)] (about 1.8e-4 to 1.09), other params, much larger domains and other machines are
extrapolations; docs/benchmarks.md ("Cost preview: predicted vs measured") lists every
calibration run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from pydantic import BaseModel

from engine.domain import Domain
from engine.mechanisms.base import Mechanism, resource_estimate
from engine.privacy_unit.group import row_level_rho

RHO_REFERENCE: Final[Fraction] = Fraction("0.014973057673")
"""ρ₁ of the model: ``engine.accounting.rho_from_epsilon_delta(1, 1e-9)``, the ρ of ε = 1."""

# Fitted by `python -m benchmarks.cost_model --data ../shared/data --from-json docs/cost_model.json
# --fit` (docs/cost_model.json holds every run fitted on; the same fit as when it was produced from
# the ε = 1 runs it held before and the files of the ε = 0.1 and 10 runs) on the runs measured by
# `python -m benchmarks.cost_model --data ../shared/data` (ε = 1), `… --datasets temporal-match2
# --methods ppsyn --cap 1500` (ε = 1, past the 300 s cap), `… --datasets adult nist-taxi nltcs
# salary titanic --epsilons 0.1 10 --cap 120` and `… --datasets temporal-match2 --epsilons 0.1 10
# --cap 120 --skip temporal-match2:aim:… temporal-match2:ppsyn:…` on 2026-11-26 (docs/benchmarks.md,
# "Cost preview: predicted vs measured"). `aim` was refitted on 2026-12-01 after its defaults
# changed (issue 25: model cap 10 MB, candidate subsets, local growth), on runs measured by `python
# -m benchmarks.cost_model --data CALIB --methods aim --epsilons 0.1 1 10 --cap 300`, where CALIB
# holds the six integer-coded tables and the discovered codes of the raw diamonds, flights and loans
# at ε = 1 (`python -m benchmarks.export_codes --nested`), merged by `--from-json
# docs/cost_model.json THAT.json`. That machine ran aim on adult at ε = 1 in 10.6 s against 3.5 s on
# 2026-11-26, so aim's seconds are those of a slower machine than the other methods'. All were
# refitted on 2026-12-02 (issue 25: raw and wide tables in the calibration) with the runs of `python
# -m benchmarks.cost_model --data CALIB --datasets diamonds flights loans wide200 --methods
# independent mst privsyn privmrf dpcopula --epsilons 0.1 1 10 --cap 300` and `… --datasets diamonds
# flights loans temporal-match2 --methods ppsyn --epsilons 0.1 1 10 --cap 800` added (wide200:
# `python -m benchmarks.wide_table`, 196 columns after the draft; ppsyn's runs replace its older
# ones on temporal-match2, measured before its candidate cap), merged by `--from-json
# docs/cost_model.json THOSE.json --fit`; the two commands ran side by side, one per core. `aim` has
# no new runs: only its memory terms moved (by under 1 %). aim's `batched_*` terms (its runs above
# 64 columns, Mechanism.cost_regime) were added on 2026-12-05 (issue 25), fitted on CPU seconds of
# `python -m benchmarks.cost_model --data CALIB --datasets T --methods aim --epsilons 0.1 1 10 --cap
# 900` for T = wide100, wide150 and wide200 (`python -m benchmarks.wide_table --columns 100 --seed
# 2`, `--columns 150 --seed 3` and the 196-column table; codes by `benchmarks.export_codes
# --epsilon 1`; wide200's runs recorded as wide200b, its codes re-exported since the runs above),
# merged by `--from-json docs/cost_model.json THOSE.json --fit`: every other coefficient is the
# same to the digit (the regime's runs are left out of the method's own fit).
COST_COEFFICIENTS: Final[dict[str, dict[str, float]]] = {
    "independent": {
        "seconds_log_scale": -14.2508,
        "seconds_rows_exponent": 0.7382,
        "seconds_columns_exponent": 1.1977,
        "seconds_rho_exponent_below": 0.0211,
        "seconds_rho_exponent_above": -0.0322,
        "seconds_factor": 3.19,
        "memory_base_bytes": 218243527.0,
        "memory_bytes_per_cell": 18.581,
        "memory_bound_weight": 0.0,
        "memory_bound_weight_rho": 0.0,
        "memory_factor": 1.16,
    },
    "mst": {
        "seconds_log_scale": -8.6449,
        "seconds_rows_exponent": 0.4263,
        "seconds_columns_exponent": 1.6794,
        "seconds_rho_exponent_below": 0.081,
        "seconds_rho_exponent_above": -0.0244,
        "seconds_factor": 4.03,
        "memory_base_bytes": 215162998.0,
        "memory_bytes_per_cell": 13.689,
        "memory_bound_weight": 1.4559,
        "memory_bound_weight_rho": 0.0,
        "memory_factor": 1.36,
    },
    "aim": {
        "seconds_log_scale": -5.904,
        "seconds_rows_exponent": 0.3276,
        "seconds_columns_exponent": 1.9369,
        "seconds_rho_exponent_below": 0.1635,
        "seconds_rho_exponent_above": 0.14,
        "seconds_factor": 2.04,
        "memory_base_bytes": 174325996.0,
        "memory_bytes_per_cell": 37.188,
        "memory_bound_weight": 0.0709,
        "memory_bound_weight_rho": 0.0324,
        "memory_factor": 1.45,
        "batched_seconds_log_offset": -0.1819,
        "batched_seconds_rho_exponent_below": -0.1124,
        "batched_seconds_rho_exponent_above": 0.021,
        "batched_seconds_factor": 2.04,
        "batched_memory_bound_weight": 0.012301,
        "batched_memory_bound_weight_rho": 0.000687,
        "batched_memory_factor": 1.46,
    },
    "privsyn": {
        "seconds_log_scale": -13.4727,
        "seconds_rows_exponent": 0.9145,
        "seconds_columns_exponent": 1.9396,
        "seconds_rho_exponent_below": 0.1468,
        "seconds_rho_exponent_above": 0.0183,
        "seconds_factor": 5.12,
        "memory_base_bytes": 222481528.0,
        "memory_bytes_per_cell": 36.293,
        "memory_bound_weight": 0.0,
        "memory_bound_weight_rho": 0.0,
        "memory_factor": 1.22,
    },
    "ppsyn": {
        "seconds_log_scale": -8.0832,
        "seconds_rows_exponent": 0.5773,
        "seconds_columns_exponent": 1.9112,
        "seconds_rho_exponent_below": 0.1765,
        "seconds_rho_exponent_above": 0.0846,
        "seconds_factor": 3.74,
        "memory_base_bytes": 228179904.0,
        "memory_bytes_per_cell": 68.244,
        "memory_bound_weight": 0.0959,
        "memory_bound_weight_rho": 0.0332,
        "memory_factor": 2.08,
    },
    "privmrf": {
        "seconds_log_scale": -8.2669,
        "seconds_rows_exponent": 0.4664,
        "seconds_columns_exponent": 1.7033,
        "seconds_rho_exponent_below": 0.1985,
        "seconds_rho_exponent_above": 0.091,
        "seconds_factor": 6.29,
        "memory_base_bytes": 234650360.0,
        "memory_bytes_per_cell": 25.115,
        "memory_bound_weight": 0.0,
        "memory_bound_weight_rho": 0.0023,
        "memory_factor": 1.61,
    },
    "dpcopula": {
        "seconds_log_scale": -14.3259,
        "seconds_rows_exponent": 0.7271,
        "seconds_columns_exponent": 1.821,
        "seconds_rho_exponent_below": 0.0167,
        "seconds_rho_exponent_above": 0.0278,
        "seconds_factor": 2.93,
        "memory_base_bytes": 225152566.0,
        "memory_bytes_per_cell": 0.0,
        "memory_bound_weight": 0.7292,
        "memory_bound_weight_rho": 0.0,
        "memory_factor": 1.19,
    },
    "cipher": {
        "seconds_log_scale": -8.9517,
        "seconds_rows_exponent": 1.0,
        "seconds_columns_exponent": 1.0,
        "seconds_rho_exponent_below": 0.0729,
        "seconds_rho_exponent_above": -0.0539,
        "seconds_factor": 6.29,
        "memory_base_bytes": 222481528.0,
        "memory_bytes_per_cell": 25.115,
        "memory_bound_weight": 0.2572,
        "memory_bound_weight_rho": 0.0,
        "memory_factor": 2.08,
    },
}
"""Per method: ``seconds_log_scale`` (a), ``seconds_rows_exponent`` and
``seconds_columns_exponent`` (b_n, b_d),
``seconds_rho_exponent_below`` and ``seconds_rho_exponent_above`` (c), ``seconds_factor``,
``memory_base_bytes``, ``memory_bytes_per_cell``, ``memory_bound_weight``,
``memory_bound_weight_rho`` (rho_weight), ``memory_factor``.
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
    """The public inputs of the model (module docstring): ``rows`` = n, ``columns`` = d,
    ``cells`` = C = n·d, ``work_ratio`` = W(params)/W(the params the method was calibrated
    with: its defaults, or ``Mechanism.calibration_params``), W the method's
    ``Mechanism.expected_work``, ``bound_extra_bytes`` = E(params), ``regime`` the run's
    ``Mechanism.cost_regime`` (None: the method's own ρ terms)."""

    rows: int
    columns: int
    cells: int
    work_ratio: float
    bound_extra_bytes: int
    regime: str | None = None


def cost_features(
    mechanism: Mechanism, domain: Domain, params: BaseModel, rows: int
) -> CostFeatures:
    """The features of a run of ``mechanism`` with ``params`` on ``domain`` with ``rows`` rows."""
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
        raise ValueError("rows must be a non-negative int")
    estimate = mechanism.estimate_resources(domain, params, rows)
    work = mechanism.expected_work(domain, params, rows)
    calibrated = mechanism.expected_work(domain, mechanism.calibration_params(domain), rows)
    # E as calibrated: the additive bound above the one-way baseline (ResourceEstimate).
    baseline = resource_estimate(domain, rows).additive_bytes
    return CostFeatures(
        rows=rows,
        columns=len(domain),
        cells=rows * len(domain),
        work_ratio=work / max(calibrated, 1),
        bound_extra_bytes=max(estimate.additive_bytes - baseline, 0),
        regime=mechanism.cost_regime(domain, params),
    )


def regime_terms(coefficients: dict[str, float], regime: str | None) -> tuple[float, float, float]:
    """``(log offset, c_below, c_above)`` of ``regime`` (module docstring): its own
    ``<regime>_seconds_*`` coefficients when calibrated, else the method's (offset 0)."""
    if regime is not None and f"{regime}_seconds_log_offset" in coefficients:
        return (
            coefficients[f"{regime}_seconds_log_offset"],
            coefficients[f"{regime}_seconds_rho_exponent_below"],
            coefficients[f"{regime}_seconds_rho_exponent_above"],
        )
    return (
        0.0,
        coefficients["seconds_rho_exponent_below"],
        coefficients["seconds_rho_exponent_above"],
    )


def regime_coefficient(coefficients: dict[str, float], regime: str | None, name: str) -> float:
    """``<regime>_<name>`` when the regime has it, else the method's ``name`` (the memory bound
    weights and the stated factors)."""
    if regime is not None and f"{regime}_{name}" in coefficients:
        return coefficients[f"{regime}_{name}"]
    return coefficients[name]


def rho_exponent(
    coefficients: dict[str, float], rho_ratio: float, regime: str | None = None
) -> float:
    """The exponent ``c`` of ``r = ρ/ρ₁`` (module docstring): below or above ρ₁, the
    ``regime``'s when it has its own."""
    _, below, above = regime_terms(coefficients, regime)
    return below if rho_ratio < 1 else above


MEMORY_CAP_FACTOR = 1.5
"""How far above the memory bound plus the input a predicted peak may go (:func:`predict_cost`):
the calibration runs peaked at up to 1.19 times it (mst on temporal-match2, whose bound leaves
out the CSV reading of the CLI runs)."""


def predict_cost(
    mechanism: Mechanism,
    domain: Domain,
    params: BaseModel,
    rows: int,
    rho: Fraction,
    *,
    contribution_bound: int = 1,
) -> CostPrediction | None:
    """The predicted cost of running ``mechanism`` with ``params`` at ``rho`` on ``domain`` with
    ``rows`` rows in and out; None when the method has no calibrated coefficients or the
    prediction is beyond a float (a domain no run could handle: the service refuses it on its
    bounds). With a privacy unit of at most k = ``contribution_bound`` rows the run works at
    the row-level ρ/k² (engine.privacy_unit.row_level_rho), which is what the time depends on."""
    if not rho > 0:
        raise ValueError("rho must be positive")
    rho = row_level_rho(Fraction(rho), contribution_bound)
    coefficients = COST_COEFFICIENTS.get(mechanism.name)
    if coefficients is None:
        return None
    try:
        features = cost_features(mechanism, domain, params, rows)
        ratio = float(Fraction(rho) / RHO_REFERENCE)
        offset, _, _ = regime_terms(coefficients, features.regime)
        seconds = (
            math.exp(coefficients["seconds_log_scale"] + offset)
            * max(features.rows, 1) ** coefficients["seconds_rows_exponent"]
            * max(features.columns, 1) ** coefficients["seconds_columns_exponent"]
            * ratio ** rho_exponent(coefficients, ratio, features.regime)
            * features.work_ratio
        )
        peak = (
            coefficients["memory_base_bytes"]
            + coefficients["memory_bytes_per_cell"] * features.cells
            + (
                regime_coefficient(coefficients, features.regime, "memory_bound_weight")
                + regime_coefficient(coefficients, features.regime, "memory_bound_weight_rho")
                * max(math.log(ratio), 0.0)
            )
            * features.bound_extra_bytes
        )
        # The calibration runs predate the narrow codes (int64 tables and outputs): past them the
        # fitted memory term overshoots (mst on adult x205, 10 M rows in and out: 6.9 GiB
        # predicted, 1.3 GB measured). A prediction never exceeds MEMORY_CAP_FACTOR times the
        # method's deliberate bound plus the input table, held twice (as loaded and re-coded)
        # at its code width.
        width = domain.code_dtype.itemsize
        bound = mechanism.estimate_resources(domain, params, rows).memory_bytes
        peak = min(peak, MEMORY_CAP_FACTOR * (bound + 2 * rows * len(domain) * width))
    except OverflowError:
        return None
    if not (math.isfinite(seconds) and seconds > 0 and math.isfinite(peak) and peak >= 1):
        return None
    return CostPrediction(
        seconds=seconds,
        peak_memory_bytes=round(peak),
        seconds_factor=regime_coefficient(coefficients, features.regime, "seconds_factor"),
        memory_factor=regime_coefficient(coefficients, features.regime, "memory_factor"),
    )
