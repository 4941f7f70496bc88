"""The independent mechanism, the Mechanism contract and the registry."""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.domain import Dataset, Domain
from engine.estimation.simplex import project_to_simplex
from engine.marginals import Measurement, count_marginal, measure_marginal
from engine.mechanisms import MECHANISMS, SynthesisCancelled, SynthesisResult, get_mechanism
from engine.mechanisms.base import GaussianCharge, Mechanism, ProgressReporter
from engine.mechanisms.independent.mechanism import (
    IndependentMechanism,
    IndependentParams,
    estimate_total,
)

MakeDataset = Callable[[Domain, int, int], Dataset]

MECHANISM = IndependentMechanism()
PARAMS = MECHANISM.validate_params({})


def run(
    data: Dataset,
    rho: Fraction,
    *,
    seed: int = 0,
    noise_seed: int | None = 0,
    rows: int | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> SynthesisResult:
    return MECHANISM.run(
        data,
        rho,
        PARAMS,
        rng=np.random.default_rng(seed),
        rows=rows,
        progress=progress,
        noise_source=None if noise_seed is None else random.Random(noise_seed),
    )


@pytest.mark.parametrize("d", [1, 2, 3, 7])
@pytest.mark.parametrize(
    "rho",
    [Fraction(1, 3), Fraction(1), Fraction(2, 7), Fraction(123_456_789_011, 10**12), Fraction(5)],
)
def test_measurements_spend_exactly_rho(d: int, rho: Fraction, make_dataset: MakeDataset) -> None:
    domain = Domain(tuple(f"c{i}" for i in range(d)), tuple(range(1, d + 1)))
    result = run(make_dataset(domain, 50, d), rho)
    assert len(result.measurements) == d
    assert sum((m.rho for m in result.measurements), Fraction(0)) == rho
    assert result.rho_used == rho
    for m, attr in zip(result.measurements, domain.attributes, strict=True):
        assert m.attributes == (attr,)
        assert m.rho == rho / d
        assert m.sigma2 == Fraction(d) / (2 * rho)
        assert m.sensitivity == 1


def test_output_shape_and_codes_in_domain(small_domain: Domain, make_dataset: MakeDataset) -> None:
    result = run(make_dataset(small_domain, 400, 1), Fraction(1, 2), rows=1000)
    assert result.codes.shape == (1000, len(small_domain))
    assert np.issubdtype(result.codes.dtype, np.integer)
    assert result.codes.min() >= 0
    assert np.all(result.codes.max(axis=0) < np.array(small_domain.sizes))
    # The size-1 column can only hold code 0.
    assert not result.codes[:, small_domain.index("flag")].any()


def test_rows_default_to_the_noisy_total(small_domain: Domain, make_dataset: MakeDataset) -> None:
    data = make_dataset(small_domain, 5000, 2)
    result = run(data, Fraction(10**6))
    assert abs(result.estimated_total - 5000) <= 50
    assert result.codes.shape[0] == max(1, round(result.estimated_total))


def test_rows_default_is_noisy_not_the_true_count(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((100, len(small_domain)), dtype=np.int64))
    sizes = {run(data, Fraction(1, 100), noise_seed=s).codes.shape[0] for s in range(10)}
    assert len(sizes) > 1


@pytest.mark.parametrize("rows", [0, 1, 37])
def test_explicit_rows(rows: int, small_domain: Domain, make_dataset: MakeDataset) -> None:
    result = run(make_dataset(small_domain, 100, 3), Fraction(1), rows=rows)
    assert result.codes.shape == (rows, len(small_domain))


def test_empty_dataset_still_works(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.empty((0, len(small_domain)), dtype=np.int64))
    for noise_seed in range(5):
        result = run(data, Fraction(1, 10), noise_seed=noise_seed)
        assert result.estimated_total >= 0
        assert result.codes.shape == (max(1, round(result.estimated_total)), len(small_domain))
        assert sum((m.rho for m in result.measurements), Fraction(0)) == Fraction(1, 10)


def test_all_size_one_columns() -> None:
    domain = Domain.from_mapping({"a": 1, "b": 1})
    data = Dataset(domain, np.zeros((10, 2), dtype=np.int64))
    result = run(data, Fraction(1), rows=5)
    assert result.codes.shape == (5, 2)
    assert not result.codes.any()


def test_progress_is_monotone_staged_and_ends_at_one(
    small_domain: Domain, make_dataset: MakeDataset
) -> None:
    events: list[tuple[float, str]] = []
    run(
        make_dataset(small_domain, 100, 4), Fraction(1), progress=lambda f, s: events.append((f, s))
    )
    fractions = [f for f, _ in events]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    assert all(0.0 <= f <= 1.0 for f in fractions)
    stages = [s for _, s in events]
    assert stages[0] == "measure"
    for stage in ("measure", "estimate", "sample"):
        assert stages.count(stage) >= 2, f"{stage} must report its start and its end"
    assert stages.index("measure") < stages.index("estimate") < stages.index("sample")


@pytest.mark.parametrize("stage", ["measure", "estimate", "sample"])
def test_cancellation_propagates(
    stage: str, small_domain: Domain, make_dataset: MakeDataset
) -> None:
    def cancel(fraction: float, current: str) -> None:
        if current == stage:
            raise SynthesisCancelled

    with pytest.raises(SynthesisCancelled):
        run(make_dataset(small_domain, 100, 5), Fraction(1), progress=cancel)


def test_any_exception_from_progress_propagates(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((3, len(small_domain)), dtype=np.int64))

    def boom(fraction: float, stage: str) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(data, Fraction(1), progress=boom)


def test_reproducible_with_the_same_seeds(small_domain: Domain, make_dataset: MakeDataset) -> None:
    data = make_dataset(small_domain, 300, 6)
    first = run(data, Fraction(1, 3), seed=11, noise_seed=12)
    second = run(data, Fraction(1, 3), seed=11, noise_seed=12)
    np.testing.assert_array_equal(first.codes, second.codes)
    for a, b in zip(first.measurements, second.measurements, strict=True):
        np.testing.assert_array_equal(a.noisy_counts, b.noisy_counts)
    assert first.estimated_total == second.estimated_total

    other_noise = run(data, Fraction(1, 3), seed=11, noise_seed=13)
    assert any(
        not np.array_equal(a.noisy_counts, b.noisy_counts)
        for a, b in zip(first.measurements, other_noise.measurements, strict=True)
    )
    other_sampling = run(data, Fraction(1, 3), seed=99, noise_seed=12, rows=300)
    same_sampling = run(data, Fraction(1, 3), seed=11, noise_seed=12, rows=300)
    assert not np.array_equal(other_sampling.codes, same_sampling.codes)


def test_large_rho_reproduces_the_one_way_marginals(
    small_domain: Domain, make_dataset: MakeDataset
) -> None:
    data = make_dataset(small_domain, 20_000, 7)
    result = run(data, Fraction(10**6), rows=200_000)
    synthetic = Dataset(small_domain, result.codes)
    for attr in small_domain.attributes:
        real = count_marginal(data, [attr]) / data.n_rows
        fake = count_marginal(synthetic, [attr]) / synthetic.n_rows
        assert 0.5 * np.abs(real - fake).sum() < 0.01, attr


def test_noise_is_drawn_from_the_csprng_by_default(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((50, len(small_domain)), dtype=np.int64))
    result = run(data, Fraction(1, 10), noise_seed=None, rows=3)
    assert result.codes.shape == (3, len(small_domain))


def test_params_are_strict_and_schema_forbids_extras() -> None:
    assert isinstance(PARAMS, IndependentParams)
    with pytest.raises(pydantic.ValidationError):
        MECHANISM.validate_params({"epochs": 3})
    schema = MECHANISM.params_schema()
    assert schema["additionalProperties"] is False
    assert schema["properties"] == {}


@pytest.mark.parametrize(
    ("rho", "error"),
    [(Fraction(0), ValueError), (Fraction(-1, 2), ValueError), (0.5, TypeError), (True, TypeError)],
)
def test_run_rejects_bad_rho(rho: object, error: type[Exception], small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((2, len(small_domain)), dtype=np.int64))
    with pytest.raises(error):
        run(data, rho)  # type: ignore[arg-type]


def test_run_rejects_bad_arguments(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((2, len(small_domain)), dtype=np.int64))
    with pytest.raises(ValueError):
        run(data, Fraction(1), rows=-1)

    class OtherParams(pydantic.BaseModel):
        pass

    with pytest.raises(TypeError):
        MECHANISM.run(data, Fraction(1), OtherParams(), rng=np.random.default_rng(0))
    with pytest.raises(TypeError):
        MECHANISM.run(data, Fraction(1), PARAMS, rng=random.Random(0))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        MECHANISM.run(data.codes, Fraction(1), PARAMS, rng=np.random.default_rng(0))  # type: ignore[arg-type]


class _Misbehaving(Mechanism):
    """Measures ``factor`` × the ρ it is given, or returns the wrong number of rows."""

    name = "misbehaving"
    description = "test double"
    Params = IndependentParams

    def __init__(self, factor: Fraction, extra_rows: int = 0) -> None:
        self.factor = factor
        self.extra_rows = extra_rows

    def _synthesize(
        self,
        data: Dataset,
        rho: Fraction,
        params: pydantic.BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        measurement = measure_marginal(data, [data.domain.attributes[0]], rho * self.factor)
        n = (rows if rows is not None else 1) + self.extra_rows
        return SynthesisResult(
            codes=np.zeros((n, len(data.domain)), dtype=np.int64),
            measurements=(measurement,),
            rho_used=rho,
            estimated_total=0.0,
        )


@pytest.mark.parametrize("factor", [Fraction(2), Fraction(1, 2), Fraction(10**12 + 1, 10**12)])
def test_base_class_refuses_mechanisms_that_misspend(
    factor: Fraction, small_domain: Domain
) -> None:
    data = Dataset(small_domain, np.zeros((2, len(small_domain)), dtype=np.int64))
    with pytest.raises(RuntimeError, match="rho"):
        _Misbehaving(factor).run(data, Fraction(1), PARAMS, rng=np.random.default_rng(0))


class _Releasing(Mechanism):
    """Measures half of ρ as a marginal and charges ``release_share`` × ρ as a GaussianCharge."""

    name = "releasing"
    description = "test double"
    Params = IndependentParams

    def __init__(self, release_share: Fraction) -> None:
        self.release_share = release_share

    def _synthesize(
        self,
        data: Dataset,
        rho: Fraction,
        params: pydantic.BaseModel,
        *,
        rng: np.random.Generator,
        rows: int | None,
        max_rows: int | None,
        progress: ProgressReporter,
        noise_source: random.Random | None,
    ) -> SynthesisResult:
        measurement = measure_marginal(data, [data.domain.attributes[0]], rho / 2)
        release_rho = rho * self.release_share
        sensitivity = Fraction(4)
        release = GaussianCharge(
            "test release", sensitivity, sensitivity**2 / (2 * release_rho), release_rho
        )
        return SynthesisResult(
            codes=np.zeros((rows or 1, len(data.domain)), dtype=np.int64),
            measurements=(measurement,),
            rho_used=rho,
            estimated_total=0.0,
            releases=(release,),
        )


def test_base_class_counts_gaussian_releases(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((2, len(small_domain)), dtype=np.int64))
    result = _Releasing(Fraction(1, 2)).run(
        data, Fraction(1), PARAMS, rng=np.random.default_rng(0), rows=3
    )
    assert result.rho_spent == Fraction(1)
    for share in (Fraction(1, 4), Fraction(3, 4)):
        with pytest.raises(RuntimeError, match="rho"):
            _Releasing(share).run(data, Fraction(1), PARAMS, rng=np.random.default_rng(0), rows=3)
    with pytest.raises(ValueError, match="exactly"):
        GaussianCharge("wrong", Fraction(4), Fraction(1), Fraction(1))


def test_base_class_refuses_wrong_row_counts(small_domain: Domain) -> None:
    data = Dataset(small_domain, np.zeros((2, len(small_domain)), dtype=np.int64))
    mechanism = _Misbehaving(Fraction(1), extra_rows=1)
    with pytest.raises(RuntimeError, match="shape"):
        mechanism.run(data, Fraction(1), PARAMS, rng=np.random.default_rng(0), rows=4)
    _Misbehaving(Fraction(1)).run(data, Fraction(1), PARAMS, rng=np.random.default_rng(0), rows=4)


def test_progress_reporter_refuses_going_backwards() -> None:
    reporter = ProgressReporter(None)
    reporter(0.5, "measure")
    with pytest.raises(ValueError):
        reporter(0.4, "measure")
    with pytest.raises(ValueError):
        reporter(1.5, "measure")


def test_registry() -> None:
    assert isinstance(MECHANISMS, MappingProxyType)
    assert get_mechanism("independent") is MECHANISMS["independent"]
    assert isinstance(MECHANISMS["independent"], IndependentMechanism)
    for name, mechanism in MECHANISMS.items():
        assert mechanism.name == name
        assert mechanism.description
    with pytest.raises(KeyError):
        get_mechanism("nope")
    with pytest.raises(TypeError):
        MECHANISMS["x"] = MECHANISM  # type: ignore[index]


def test_estimate_total_weights_by_precision() -> None:
    def measurement(counts: list[int], sigma2: Fraction) -> Measurement:
        return Measurement(
            ("a",), np.array(counts, dtype=np.int64), sigma2, Fraction(1), 1 / (2 * sigma2)
        )

    # Sums 100 (2 cells, σ² = 1: variance 2) and 130 (1 cell, σ² = 4: variance 4): weights 2 : 1.
    estimate = estimate_total((measurement([40, 60], Fraction(1)), measurement([130], Fraction(4))))
    assert estimate == pytest.approx((2 * 100 + 130) / 3)
    assert estimate_total((measurement([-5, -7], Fraction(1)),)) == 0.0


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=40),
    total=st.one_of(st.just(0.0), st.floats(min_value=1e-3, max_value=1e6)),
)
def test_simplex_projection_is_the_euclidean_projection(values: list[float], total: float) -> None:
    v = np.array(values)
    x = project_to_simplex(v, total)
    assert np.all(x >= 0)
    assert x.sum() == pytest.approx(total, rel=1e-9, abs=1e-6)
    if total == 0:
        assert not x.any()
        return
    # KKT: x = max(v − θ, 0) for one θ, read off any positive coordinate.
    positive = x > 0
    theta = float(np.mean((v - x)[positive]))
    np.testing.assert_allclose(x, np.maximum(v - theta, 0), rtol=1e-9, atol=1e-6)


def test_simplex_projection_examples() -> None:
    np.testing.assert_allclose(project_to_simplex([3.0, 1.0], 2.0), [2.0, 0.0])
    np.testing.assert_allclose(project_to_simplex([1.0, 1.0], 4.0), [2.0, 2.0])
    np.testing.assert_allclose(project_to_simplex([-5.0, 10.0, 2.0], 6.0), [0.0, 6.0, 0.0])
    with pytest.raises(ValueError):
        project_to_simplex([], 1.0)
    with pytest.raises(ValueError):
        project_to_simplex([1.0], -1.0)


def test_max_rows_caps_the_noisy_estimate(
    make_dataset: Callable[[Domain, int, int], Dataset], small_domain: Domain
) -> None:
    data = make_dataset(small_domain, 500, 3)
    mechanism = get_mechanism("independent")
    result = mechanism.run(
        data,
        Fraction(1000),
        mechanism.validate_params({}),
        rng=np.random.default_rng(0),
        max_rows=40,
    )
    assert result.codes.shape == (40, len(small_domain))
    assert result.estimated_total > 400  # the cap applies to the output, not the estimate
    explicit = mechanism.run(
        data,
        Fraction(1),
        mechanism.validate_params({}),
        rng=np.random.default_rng(0),
        rows=7,
        max_rows=5,
    )
    assert explicit.codes.shape[0] == 5
