"""app.jobs.resources: the per-job limits applied at submission and to the output size."""

from __future__ import annotations

from fractions import Fraction

import pytest

from app.config import Settings
from app.jobs.resources import (
    TIME_BOUND_SLACK,
    ResourcesExceeded,
    check_predicted_time,
    check_resources,
    output_rows_limit,
)
from engine.costs import CostPrediction, predict_cost
from engine.domain import Domain
from engine.mechanisms import get_mechanism
from engine.mechanisms.base import (
    BASE_MEMORY_BYTES,
    OUTPUT_BYTES_PER_CELL,
    SAMPLING_MODEL_BYTES_PER_CELL,
    DomainRefused,
    widest_columns,
)
from tests.support.stack import SHORT_LEASE

DOMAIN = Domain(tuple(f"c{i}" for i in range(10)), (10,) * 10)


def _settings(**values: object) -> Settings:
    return Settings.model_validate(values)


def test_output_is_capped_at_the_rows_that_fit() -> None:
    independent = get_mechanism("independent")
    params = independent.validate_params({})
    settings = _settings(job_memory_limit_mb=512, max_output_rows=10**9)
    cap = output_rows_limit(settings, independent, DOMAIN, params)
    # int64 samplers: the model's sampling share plus 48 bytes per output cell.
    free = 512 * 2**20 - BASE_MEMORY_BYTES - SAMPLING_MODEL_BYTES_PER_CELL * sum(DOMAIN.sizes)
    assert cap == free // (10 * OUTPUT_BYTES_PER_CELL)
    assert 0 < cap < 10**9
    check_resources(settings, independent, DOMAIN, params, cap)
    with pytest.raises(ResourcesExceeded, match=f"at most {cap} rows fit"):
        check_resources(settings, independent, DOMAIN, params, cap + 1)
    # Without rows the job is accepted: its output is capped instead.
    assert check_resources(settings, independent, DOMAIN, params, None).memory_bytes <= 512 * 2**20


@pytest.mark.parametrize("method", ["independent", "mst", "aim", "ppsyn", "privmrf", "dpcopula"])
@pytest.mark.parametrize("limit_mb", [1024, 3072])
def test_the_cap_is_the_largest_row_count_that_fits(method: str, limit_mb: int) -> None:
    """The estimate is not linear in the rows (the fit's memory and the sampler's do not add
    up), so the cap is searched: the cap fits the limit and one row more does not."""
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({})
    settings = _settings(job_memory_limit_mb=limit_mb, max_output_rows=10**9)
    cap = output_rows_limit(settings, mechanism, DOMAIN, params)
    limit = limit_mb * 2**20
    assert 0 <= cap < 10**9
    if cap:
        assert mechanism.estimate_resources(DOMAIN, params, cap).memory_bytes <= limit
    assert mechanism.estimate_resources(DOMAIN, params, cap + 1).memory_bytes > limit


def test_a_large_fit_does_not_take_the_output_s_memory() -> None:
    """aim's fit (its model at the cap) is released before rows are drawn: at 3 GiB its output
    cap on a narrow domain is past 10 M rows, where adding the two made it 1.4 M."""
    aim = get_mechanism("aim")
    params = aim.validate_params({"max_model_size_mb": 80})
    settings = _settings(job_memory_limit_mb=3072, max_output_rows=10**9)
    bare = aim.estimate_resources(DOMAIN, params, 0).memory_bytes
    assert bare > 2**30  # the fit alone is large
    assert output_rows_limit(settings, aim, DOMAIN, params) > 10_000_000


def test_the_service_row_limit_still_applies() -> None:
    independent = get_mechanism("independent")
    params = independent.validate_params({})
    small = _settings(job_memory_limit_mb=3072, max_output_rows=1000)
    assert output_rows_limit(small, independent, DOMAIN, params) == 1000
    large = _settings(job_memory_limit_mb=2**30, max_output_rows=10**9)
    assert output_rows_limit(large, independent, DOMAIN, params) == 10**9
    check_resources(large, independent, DOMAIN, params, 10**9)


def test_a_model_over_the_limit_is_refused_whatever_the_rows() -> None:
    privmrf = get_mechanism("privmrf")
    params = privmrf.validate_params({"max_model_cells": 10**8})
    settings = _settings(job_memory_limit_mb=3072)
    assert output_rows_limit(settings, privmrf, DOMAIN, params) == 0
    with pytest.raises(ResourcesExceeded, match=r"would need about 15\.\d GiB of memory"):
        check_resources(settings, privmrf, DOMAIN, params, None)
    assert BASE_MEMORY_BYTES < 3072 * 2**20


def test_work_far_beyond_the_time_limit_is_refused() -> None:
    aim = get_mechanism("aim")
    settings = _settings(job_time_limit_seconds=3600)
    # The review's example: 100,000 rounds and iterations.
    runaway = aim.validate_params(
        {"rounds": 100_000, "round_iterations": 100_000, "iterations": 100_000}
    )
    with pytest.raises(ResourcesExceeded, match="hours of work"):
        check_resources(settings, aim, DOMAIN, runaway, 100)
    fast = aim.validate_params({"rounds": 10, "round_iterations": 10, "iterations": 10})
    check_resources(settings, aim, DOMAIN, fast, 100)


def test_the_time_check_leaves_a_large_model_cap_alone_on_wide_domains() -> None:
    """The work bound assumes the model at its cap in every iteration; compared with the limit
    without slack it refused aim with an 80 MB model (its default until issue 25) on
    temporal-match2's domain (real runs: about 150 s) at the one-hour limit."""
    aim = get_mechanism("aim")
    settings = _settings(job_time_limit_seconds=3600)
    wide = Domain(tuple(f"c{i}" for i in range(24)), (8,) * 12 + (30,) * 12)
    params = aim.validate_params({"max_model_size_mb": 80})
    default = aim.validate_params({})
    assert check_resources(settings, aim, wide, default, 10_000).seconds < 3600
    estimate = check_resources(settings, aim, wide, params, 10_000)
    assert estimate.seconds > settings.job_time_limit_seconds  # the bound alone would refuse
    assert estimate.seconds <= TIME_BOUND_SLACK * settings.job_time_limit_seconds


def test_the_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RHOSYNTH_JOB_MEMORY_LIMIT_MB", raising=False)
    assert Settings().job_memory_limit_mb == 3072
    monkeypatch.setenv("RHOSYNTH_JOB_MEMORY_LIMIT_MB", "4096")
    assert Settings().job_memory_limit_mb == 4096
    monkeypatch.setenv("RHOSYNTH_JOB_MEMORY_LIMIT_MB", "100")
    with pytest.raises(ValueError, match="greater than or equal to 256"):
        Settings()


def _time_limit(seconds: int) -> Settings:
    """Settings with a short time limit (the lease and heartbeat below it, as they must be)."""
    return _settings(job_time_limit_seconds=seconds, **SHORT_LEASE)


def _prediction(seconds: float, factor: float) -> CostPrediction:
    return CostPrediction(seconds, 2**30, factor, 1.5)


def test_a_job_is_refused_only_when_even_the_optimistic_prediction_passes_the_limit() -> None:
    """Predicted 300 s within a factor of 2: at least 150 s. A limit of 149 s refuses it with
    the prediction and the rows it was made for in the message; 150 s lets it run."""
    aim = get_mechanism("aim")
    prediction = _prediction(300.0, 2.0)
    requested = "the rows requested"
    with pytest.raises(ResourcesExceeded) as refused:
        check_predicted_time(_time_limit(149), aim, DOMAIN, prediction, 5000, requested)
    message = str(refused.value)
    assert "'aim' with these params is predicted to take about 300 s" in message
    assert "within a factor of 2, so at least 150 s" in message
    assert "for 5000 rows, the rows requested" in message
    assert "time limit per job of 149 s" in message
    check_predicted_time(_time_limit(150), aim, DOMAIN, prediction, 5000, requested)
    # No prediction (an uncalibrated method, or no row count the submitter may know): no check.
    check_predicted_time(_time_limit(10), aim, DOMAIN, None, 5000, requested)
    check_predicted_time(_time_limit(10), aim, DOMAIN, prediction, None, requested)


def test_the_calibrated_prediction_refuses_slow_methods_and_admits_fast_ones() -> None:
    """On a 14-column domain with 10 M rows at ρ = 0.5, aim is predicted far slower than mst:
    a limit between their optimistic predictions refuses aim and admits mst."""
    sizes = (2, 5, 7, 9, 16, 16, 6, 10, 5, 2, 20, 20, 40, 42)
    domain = Domain(tuple(f"c{i}" for i in range(14)), sizes)
    aim, mst = get_mechanism("aim"), get_mechanism("mst")
    costs = {
        m.name: predict_cost(m, domain, m.validate_params({}), 10**7, Fraction(1, 2))
        for m in (aim, mst)
    }
    optimistic = {name: c.seconds / c.seconds_factor for name, c in costs.items() if c}
    assert optimistic["aim"] > 2 * optimistic["mst"] + 20, optimistic
    limit = _time_limit(max(10, round(optimistic["mst"]) + 10))
    with pytest.raises(ResourcesExceeded, match="is predicted to take about"):
        check_predicted_time(limit, aim, domain, costs["aim"], 10**7, "the rows requested")
    check_predicted_time(limit, mst, domain, costs["mst"], 10**7, "the rows requested")


WIDE = Domain(
    (*(f"c{i}" for i in range(30)), "amount", "city", "opened"),
    (8,) * 30 + (1024, 300, 2232),
)


def test_wide_domain_refusals_name_the_widest_columns_and_what_to_change() -> None:
    """Issue 25: a refusal on a wide domain says which columns make the model large (the three
    with the most values, widest first) and which of the method's params bound it."""
    aim, mst = get_mechanism("aim"), get_mechanism("mst")
    widest = "'opened' (2,232 values), 'amount' (1,024 values) and 'city' (300 values)"
    runaway = aim.validate_params({"rounds": 100_000, "round_iterations": 100_000})
    with pytest.raises(ResourcesExceeded) as work:
        check_resources(_settings(job_time_limit_seconds=3600), aim, WIDE, runaway, 100)
    with pytest.raises(ResourcesExceeded) as predicted:
        check_predicted_time(
            _time_limit(60), mst, WIDE, _prediction(900.0, 2.0), 10_000, "the rows requested"
        )
    for refusal in (work, predicted):
        message = str(refusal.value)
        assert f"Its widest columns are {widest}" in message, message
        assert "fewer bins or categories on the widest columns in the schema" in message
        assert "fewer columns (the 33 declared: ignore some)" in message
    assert "a lower degree, a smaller max_model_size_mb, fewer rounds" in str(work.value)
    # mst has no degree, model cap or rounds: only what it has is suggested.
    assert "degree" not in str(predicted.value)
    assert "max_model_size_mb" not in str(predicted.value)
    assert "fewer iterations" in str(predicted.value)
    assert "choose a faster method such as 'independent'" in str(predicted.value)
    # Columns of one size: none is named as the widest.
    bare = aim.validate_params({"rounds": 100_000, "round_iterations": 100_000})
    with pytest.raises(ResourcesExceeded, match="Its 10 columns have 10 values each; to make"):
        check_resources(_settings(job_time_limit_seconds=3600), aim, DOMAIN, bare, 100)


def test_a_memory_refusal_suggests_only_what_lowers_memory() -> None:
    """Rounds and iterations change the work, not the memory: a memory refusal does not suggest
    them (found by a second reader)."""
    privmrf = get_mechanism("privmrf")
    params = privmrf.validate_params({"max_model_cells": 10**8})
    with pytest.raises(ResourcesExceeded) as refused:
        check_resources(_settings(job_memory_limit_mb=3072), privmrf, WIDE, params, None)
    message = str(refused.value)
    assert "a smaller max_model_cells or a smaller max_clique_cells, or choose another" in message
    assert "rounds" not in message and "iterations" not in message


def test_widest_columns_reads_in_the_singular_and_the_plural() -> None:
    assert widest_columns(Domain(("a",), (1,))) == "its one column has 1 value"
    assert widest_columns(Domain(("a", "b"), (3, 3))) == "its 2 columns have 3 values each"
    assert widest_columns(Domain(("a", "b"), (1, 1200))) == (
        "its widest columns are 'b' (1,200 values) and 'a' (1 value)"
    )


def test_a_model_cap_below_the_one_ways_names_the_widest_columns() -> None:
    aim = get_mechanism("aim")
    params = aim.validate_params({"max_model_size_mb": 0.01})  # 1,310 cells
    with pytest.raises(DomainRefused) as refused:
        aim.check_domain(WIDE, params)
    message = str(refused.value)
    assert "every one-way marginal (3,796 cells)" in message
    assert "'opened' (2,232 values), 'amount' (1,024 values) and 'city' (300 values)" in message
    assert "raise max_model_size_mb, or give those columns fewer bins" in message


def test_a_chunked_release_holds_a_few_chunks_but_its_time_counts_every_row() -> None:
    """A release drawn in chunks (app/jobs/partitioned_output.py): the memory estimate counts
    the chunks in flight and the reports' subsample, but drawing and writing every row still
    takes its time, so the time check counts all of them."""
    independent = get_mechanism("independent")
    params = independent.validate_params({})
    wide = Domain(tuple(f"c{i}" for i in range(100)), (2,) * 100)
    settings = _settings(
        **SHORT_LEASE,
        job_time_limit_seconds=10,
        max_output_rows=10**10,
        partitioned_output_rows=1_000_000,
        output_chunk_rows=100_000,
        output_workers=2,
        report_sample_rows=100_000,
    )
    held = independent.estimate_resources(wide, params, 300_000)
    # 10^7 rows × 100 columns: 10^9 output cells, 10 s of work at 10^8 units a second.
    estimate = check_resources(settings, independent, wide, params, 10**7)
    assert estimate.memory_bytes == held.memory_bytes
    assert estimate.work == independent.estimate_resources(wide, params, 10**7).work
    # 2 × 10^8 rows: 2 × 10^10 cells, past TIME_BOUND_SLACK × the 10 s limit.
    with pytest.raises(ResourcesExceeded, match="of work"):
        check_resources(settings, independent, wide, params, 2 * 10**8)
