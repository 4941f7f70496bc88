"""Per-job resource limits decided at submission, from public information only.

A job's parameters, the declared domain and the requested rows bound what a run can need
(:meth:`engine.mechanisms.Mechanism.estimate_resources`); a request whose estimate exceeds the
per-job memory limit (``RHOSYNTH_JOB_MEMORY_LIMIT_MB``), or whose work bound exceeds
:data:`TIME_BOUND_SLACK` times the time limit (``RHOSYNTH_JOB_TIME_LIMIT_SECONDS``) at the
estimate's optimistic rate, is refused with 422 before anything is reserved. Nothing here reads
data, so a refusal reveals nothing about it.

The memory limit is the one the worker enforces (its address-space limit). The estimate bounds
the model, tables and output from per-cell costs measured here; it leaves out the input table,
whose length is private: the worker adds the table's own allowance to each job's limit
(:func:`app.jobs.limits.input_allowance_bytes`), so whether a job fits does not depend on it.
The work bound is not a prediction of the run time: it assumes the model at its cap in every
iteration of every round, which real runs rarely approach, so the time check only refuses
parameters far beyond anything that can finish (the review's `aim` with 100,000 rounds and
iterations); the worker's wall-time limit stops the rest.

A job whose predicted run time (:func:`engine.costs.predict_cost`, calibrated per method with a
stated error factor) exceeds the time limit even at the optimistic end of that factor is refused
too (:func:`check_predicted_time`), with the prediction in the message, instead of running until
the limit stops it. The prediction needs a row count, chosen from public facts only
(app.jobs.service.prediction_rows): the rows requested, an earlier release's noisy row count (a
DP output), or, for the owner, who knows it, the table's row count; the owner's refusal is shown
to the owner only. A derived sample is refused the same way when drawing its rows would pass the
time limit (:func:`check_sampling_time`).

Without ``rows`` the output size is the mechanism's noisy row count, which the submission cannot
know: it is capped at :func:`output_rows_limit`, the number of rows that fit in the memory limit
next to the method's model (and at ``RHOSYNTH_MAX_OUTPUT_ROWS``), so the worker never decodes more.
With ``rows`` at or above ``RHOSYNTH_PARTITIONED_OUTPUT_ROWS`` (a re-samplable method) the output
is drawn in chunks, so the estimate counts the chunks in flight and the reports' subsample
instead of every row (app/jobs/partitioned_output.py).
"""

from __future__ import annotations

from pydantic import BaseModel

from app.config import Settings
from app.jobs.partitioned_output import rows_in_memory
from engine.costs import CostPrediction
from engine.domain import Domain
from engine.mechanisms import Mechanism, ResourceEstimate
from engine.mechanisms.base import WORK_UNITS_PER_SECOND, widest_columns

_GIB = 2**30


class ResourcesExceeded(ValueError):
    """The job would exceed the per-job memory or time limit (public message, 422)."""


TIME_BOUND_SLACK = 10
"""How far the work bound may exceed the time limit before a job is refused. On the benchmark
datasets with default params the bound is 45–570 times what the runs took (``aim``: adult about
2,500 s of bound against 4.4 s measured at ε = 1, temporal-match2 about 6,100 s against 133 s;
docs/benchmarks.md), so a tenth of it is still far above any real run. Without this slack the
check refused ``aim`` with its defaults on temporal-match2 at the one-hour limit."""


def _memory_limit(settings: Settings) -> int:
    return settings.job_memory_limit_mb * 2**20


def _gib(value: int) -> str:
    try:
        return f"{value / _GIB:.1f} GiB"
    except OverflowError:  # a domain whose cells do not fit in a float
        return "more than 10^300 GiB"


def output_rows_limit(
    settings: Settings, mechanism: Mechanism, domain: Domain, params: BaseModel
) -> int:
    """The most output rows a job of ``mechanism`` with ``params`` on ``domain`` may produce:
    ``RHOSYNTH_MAX_OUTPUT_ROWS``, and no more than fit in the memory limit next to the rest of
    the run (0 when not even the rest fits). Public information only."""
    limit = _memory_limit(settings)

    def fits(rows: int) -> bool:
        return mechanism.estimate_resources(domain, params, rows).memory_bytes <= limit

    if not fits(0):
        return 0
    if fits(settings.max_output_rows):
        return settings.max_output_rows
    # The estimate grows with the rows but not linearly (the fit's memory and the sampler's do
    # not add up), so the largest count that fits is found by bisection: fits(low), not high.
    low, high = 0, settings.max_output_rows
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            low = middle
        else:
            high = middle
    return low


def check_resources(
    settings: Settings,
    mechanism: Mechanism,
    domain: Domain,
    params: BaseModel,
    rows: int | None,
) -> ResourceEstimate:
    """Raise :class:`ResourcesExceeded` if the job cannot fit the per-job limits; return the
    estimate for the rows it may produce (``rows``, else :func:`output_rows_limit`)."""
    limit = _memory_limit(settings)
    name = mechanism.name
    # The cap (a bisection over the estimate) only when it is needed: no rows, or a message.
    # A release drawn in chunks holds a few chunks, not its rows (app/jobs/partitioned_output.py).
    held = rows_in_memory(settings, mechanism, rows)
    bound = held if held is not None else output_rows_limit(settings, mechanism, domain, params)
    estimate = mechanism.estimate_resources(domain, params, bound)
    if estimate.memory_bytes > limit:
        bare = mechanism.estimate_resources(domain, params, 0).memory_bytes
        if bare > limit:
            raise ResourcesExceeded(
                f"{name!r} with these params would need about {_gib(bare)} of memory on this "
                f"dataset's declared domain; the limit per job is {_gib(limit)}. "
                f"{_capital(domain_hint(mechanism, domain, work=False))}, or choose another "
                "method"
            )
        cap = output_rows_limit(settings, mechanism, domain, params)
        raise ResourcesExceeded(
            f"{name!r} with rows = {bound} would need about {_gib(estimate.memory_bytes)} of "
            f"memory on this dataset's {len(domain)} columns; the limit per job is "
            f"{_gib(limit)}: at most {cap} rows fit"
        )
    seconds = estimate.seconds
    if seconds > TIME_BOUND_SLACK * settings.job_time_limit_seconds:
        raise ResourcesExceeded(
            f"{name!r} with these params could need up to {_duration(seconds)} of work on "
            f"this dataset's declared domain, more than {TIME_BOUND_SLACK} times the limit per "
            f"job of {_duration(settings.job_time_limit_seconds)}. "
            f"{_capital(domain_hint(mechanism, domain))}"
        )
    return estimate


_SIZE_PARAMS = (
    ("degree", "a lower degree"),
    ("max_model_size_mb", "a smaller max_model_size_mb"),
    ("max_model_cells", "a smaller max_model_cells"),
    ("max_clique_cells", "a smaller max_clique_cells"),
    ("max_cells", "a smaller max_cells"),
)
"""Params that bound a method's model and tables (its memory), with what to ask for."""
_WORK_PARAMS = (
    ("rounds", "fewer rounds"),
    ("round_iterations", "fewer round_iterations"),
    ("iterations", "fewer iterations"),
    ("max_candidates", "a lower max_candidates"),
)
"""Params that bound only a method's work (its time)."""


def domain_hint(mechanism: Mechanism, domain: Domain, work: bool = True) -> str:
    """Which columns make the model large and what to change (issue 25): the columns with the
    most values, and the params of ``mechanism`` that bound its model (and, with ``work``, its
    work: rounds and iterations lower the time, not the memory). Public: the schema's sizes and
    the method's params only."""
    fields = mechanism.Params.model_fields
    changes = ["fewer bins or categories on the widest columns in the schema"]
    if len(domain) > 20:
        changes.append(f"fewer columns (the {len(domain)} declared: ignore some)")
    changes += [text for name, text in _SIZE_PARAMS if name in fields]
    if work:
        changes += [text for name, text in _WORK_PARAMS if name in fields]
    return (
        f"{widest_columns(domain)}; to make it smaller or faster: "
        + ", ".join(changes[:-1])
        + (" or " if len(changes) > 1 else "")
        + changes[-1]
    )


def _duration(seconds: float) -> str:
    if seconds < 600:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} hours"


def check_predicted_time(
    settings: Settings,
    mechanism: Mechanism,
    domain: Domain,
    prediction: CostPrediction | None,
    rows: int | None,
    rows_source: str,
) -> None:
    """Raise :class:`ResourcesExceeded` when even the optimistic end of the predicted run time
    (the prediction divided by its stated error factor) is past the time limit per job: such a
    job would run until the limit stops it, its budget spent. ``rows`` and ``rows_source`` say
    which row count the prediction used (public to whoever submits)."""
    if prediction is None or rows is None:
        return
    limit = settings.job_time_limit_seconds
    optimistic = prediction.seconds / prediction.seconds_factor
    if optimistic <= limit:
        return
    raise ResourcesExceeded(
        f"{mechanism.name!r} with these params is predicted to take about "
        f"{_duration(prediction.seconds)} on this dataset (within a factor of "
        f"{prediction.seconds_factor:.2g}, so at least {_duration(optimistic)}; predicted for "
        f"{rows} rows, {rows_source}), more than the time limit per job of {_duration(limit)}. "
        f"{_capital(domain_hint(mechanism, domain))}; or ask for fewer rows, or choose a faster "
        f"method such as {'independent' if mechanism.name == 'mst' else 'mst'!r}"
    )


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def check_sampling_time(
    settings: Settings, mechanism: Mechanism, domain: Domain, params: BaseModel, rows: int
) -> None:
    """Raise :class:`ResourcesExceeded` when drawing ``rows`` rows from a saved model of
    ``mechanism`` (a derived sample) would pass the time limit per job even at the optimistic
    rate (:meth:`engine.mechanisms.Mechanism.sampling_work`): it would run until the limit
    stops it. Public information only (the method, its params, the schema, ``rows``)."""
    limit = settings.job_time_limit_seconds
    seconds = mechanism.sampling_work(domain, params, rows) / WORK_UNITS_PER_SECOND
    if seconds <= limit:
        return
    per_row = mechanism.sampling_work(domain, params, 1) / WORK_UNITS_PER_SECOND
    raise ResourcesExceeded(
        f"drawing {rows} rows from this {mechanism.name!r} model needs at least about "
        f"{_duration(seconds)}, more than the time limit per job of {_duration(limit)}: ask "
        f"for at most {int(limit / per_row)} rows"
    )
