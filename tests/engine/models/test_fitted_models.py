"""Every run's release record and re-samplable model (engine.release.from_result,
engine.models.fitted, engine.models.kinds).

Runs use a seeded ``noise_source`` and seeded ``rng``s, so every assertion here is deterministic;
the statistical bounds below are chosen so that they would fail with negligible probability for a
random seed as well (the bound is stated at each check).
"""

from __future__ import annotations

import io
import json
import math
import random
import zipfile
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from engine.domain import Dataset, Domain
from engine.marginals import Measurement
from engine.mechanisms import MECHANISMS, SynthesisResult
from engine.models.fitted import FittedModel, ModelError
from engine.release.from_result import record_from_result
from engine.release.record import RecordError, ReleaseRecord

RHO = Fraction(1, 2)
FAST: dict[str, Any] = {
    "iterations": 40,
    "round_iterations": 5,
    "selection_iterations": 20,
    "rounds": 6,
}
DOMAIN = Domain(("a", "b", "c", "d", "e"), (3, 4, 2, 5, 12))


def tiny_table(n: int = 400, seed: int = 3) -> Dataset:
    """Five columns; b follows a, and e is mostly 0 (so MST-style compression merges its tail)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 4, n))
    c = rng.integers(0, 2, n)
    d = rng.integers(0, 5, n)
    e = np.where(rng.random(n) < 0.85, 0, rng.integers(1, 12, n))
    return Dataset(DOMAIN, np.column_stack([a, b, c, d, e]).astype(np.int64))


_RUNS: dict[str, tuple[SynthesisResult, Any]] = {}


def run(method: str) -> tuple[SynthesisResult, Any]:
    """One run per method (cached across the tests of this module), 2,000 output rows."""
    if method not in _RUNS:
        mechanism = MECHANISMS[method]
        fast = {k: v for k, v in FAST.items() if k in mechanism.Params.model_fields}
        params = mechanism.validate_params(fast)
        result = mechanism.run(
            tiny_table(),
            RHO,
            params,
            rng=np.random.default_rng(1),
            rows=2000,
            noise_source=random.Random(7),
        )
        _RUNS[method] = (result, params)
    return _RUNS[method]


METHODS = sorted(MECHANISMS)


def assert_records_equal(first: ReleaseRecord, second: ReleaseRecord) -> None:
    assert first.method == second.method
    assert first.params == second.params
    assert first.rho == second.rho
    assert first.domain == second.domain
    assert first.estimated_total == second.estimated_total
    assert first.extra == second.extra
    assert first.charges == second.charges
    assert len(first.marginals) == len(second.marginals)
    for m, n in zip(first.marginals, second.marginals, strict=True):
        assert m.attributes == n.attributes
        assert (m.sigma2, m.rho) == (n.sigma2, n.rho)
        assert isinstance(n.sigma2, Fraction)
        np.testing.assert_array_equal(m.noisy_counts, n.noisy_counts)
        assert len(m.axis_maps) == len(n.axis_maps)
        for x, y in zip(m.axis_maps, n.axis_maps, strict=True):
            assert (x is None) == (y is None)
            if x is not None and y is not None:
                np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("method", METHODS)
def test_the_record_holds_every_release_and_round_trips(method: str) -> None:
    result, params = run(method)
    record = record_from_result(result, DOMAIN, method, params, RHO)
    spent = sum((m.rho for m in record.marginals), Fraction(0)) + sum(
        (c.rho for c in record.charges), Fraction(0)
    )
    assert spent == RHO == result.rho_spent
    assert len(record.marginals) == len(result.measurements)
    assert sum(c.kind == "selection" for c in record.charges) == len(result.selections)
    assert sum(c.kind == "release" for c in record.charges) == len(result.releases)
    assert record.params == params.model_dump(mode="json")
    assert_records_equal(record, ReleaseRecord.from_bytes(record.to_bytes()))
    # The record refuses a ρ that is not what the run released.
    with pytest.raises(RecordError):
        record_from_result(result, DOMAIN, method, params, RHO + Fraction(1, 10**6))


@pytest.mark.parametrize("method", METHODS)
def test_graphical_methods_report_their_cliques(method: str) -> None:
    result, _ = run(method)
    if method in ("mst", "aim", "ppsyn", "privmrf", "privsyn"):
        cliques = result.extra["cliques"]
        assert cliques and all(set(c) <= set(DOMAIN.attributes) for c in cliques)
    else:
        assert "cliques" not in result.extra


@pytest.mark.parametrize("method", METHODS)
def test_every_method_keeps_a_resamplable_model(method: str) -> None:
    mechanism = MECHANISMS[method]
    result, _ = run(method)
    assert mechanism.resamplable
    model = result.model
    assert isinstance(model, FittedModel)
    assert model.method == method
    assert model.domain == DOMAIN
    assert model.cells > 0
    assert model.estimated_total == pytest.approx(result.estimated_total)

    loaded = FittedModel.from_bytes(model.to_bytes())
    assert (loaded.kind, loaded.method, loaded.domain) == (model.kind, model.method, model.domain)
    assert loaded.estimated_total == model.estimated_total
    assert loaded.cells == model.cells

    first = model.sample(300, np.random.default_rng(11))
    assert first.shape == (300, len(DOMAIN))
    assert first.min() >= 0
    assert np.all(first.max(axis=0) < np.asarray(DOMAIN.sizes))
    np.testing.assert_array_equal(first, model.sample(300, np.random.default_rng(11)))
    np.testing.assert_array_equal(first, loaded.sample(300, np.random.default_rng(11)))
    # Two seeds give different rows (300 × 5 codes equal by chance: probability far below 1e-9).
    assert not np.array_equal(first, model.sample(300, np.random.default_rng(12)))
    assert model.sample(0, np.random.default_rng(1)).shape == (0, len(DOMAIN))

    for attributes in (["e"], ["a", "b"], ["e", "a", "c"]):
        table = model.marginal(attributes)
        assert table.shape == tuple(DOMAIN.size(a) for a in attributes)
        assert table.min() >= 0
        assert table.sum() == pytest.approx(1.0, abs=1e-9)
        np.testing.assert_allclose(loaded.marginal(attributes), table, atol=1e-9)
    # Axes follow the order asked for.
    np.testing.assert_allclose(model.marginal(["b", "a"]), model.marginal(["a", "b"]).T)


@pytest.mark.parametrize("method", METHODS)
def test_the_models_one_ways_match_the_runs_output(method: str) -> None:
    """The run's 2,000 rows were drawn from the saved model, so each column's histogram is
    within sampling error of the model's one-way marginal. For i.i.d. rows over k ≤ 12 values,
    E[TVD] ≤ ½√(k/n) ≤ 0.039 and (McDiarmid, one row moves the TVD by ≤ 1/n) P(TVD > 0.039 + t)
    ≤ exp(−2nt²); the bound 0.12 (t = 0.081) fails with probability below 1e-11 per column.
    The controlled-rounding samplers are closer still; GUM (privsyn) and the copula's sampled
    multi-column tables are not used here (one-way copula marginals are exact)."""
    result, _ = run(method)
    model = result.model
    assert model is not None
    n = result.codes.shape[0]
    for j, name in enumerate(DOMAIN.attributes):
        observed = np.bincount(result.codes[:, j], minlength=DOMAIN.sizes[j]) / n
        tvd = 0.5 * float(np.abs(observed - model.marginal([name])).sum())
        assert tvd < 0.12, (name, tvd)


def test_independent_marginals_are_products_of_one_ways() -> None:
    result, _ = run("independent")
    assert result.model is not None
    joint = result.model.marginal(["a", "e"])
    np.testing.assert_allclose(
        joint, np.outer(result.model.marginal(["a"]), result.model.marginal(["e"]))
    )


# --------------------------------------------------------------------------------------------
# Axis maps of compressed measurements
# --------------------------------------------------------------------------------------------


def test_mst_with_compression_records_consistent_axis_maps() -> None:
    """A column with 40 values, 95% of rows on one of them, at small ρ: MST merges its rare
    values, measures its pairs on the merged codes and records the map back."""
    rng = np.random.default_rng(5)
    n = 3000
    domain = Domain(("x", "y", "rare"), (2, 3, 40))
    x = rng.integers(0, 2, n)
    y = (x + rng.integers(0, 2, n)) % 3
    rare = np.where(rng.random(n) < 0.95, 0, rng.integers(1, 40, n))
    data = Dataset(domain, np.column_stack([x, y, rare]).astype(np.int64))
    mechanism = MECHANISMS["mst"]
    params = mechanism.validate_params({"iterations": 30, "selection_iterations": 10})
    rho = Fraction(1, 20)
    result = mechanism.run(
        data, rho, params, rng=np.random.default_rng(0), noise_source=random.Random(3)
    )
    assert result.axis_maps is not None
    assert len(result.axis_maps) == len(result.measurements)

    one_way = next(m for m in result.measurements if m.attributes == ("rare",))
    sigma = math.sqrt(float(one_way.sigma2))
    kept = one_way.noisy_counts >= 3 * sigma
    assert 1 <= kept.sum() < 40  # compression really happened

    record = record_from_result(result, domain, "mst", params, rho)
    mapped = 0
    for measurement, maps, marginal in zip(
        result.measurements, result.axis_maps, record.marginals, strict=True
    ):
        for axis, (name, mapping) in enumerate(zip(measurement.attributes, maps, strict=True)):
            if measurement is one_way or name != "rare":
                assert mapping is None  # one-ways use the original codes; x, y are not merged
                continue
            assert mapping is not None
            mapped += 1
            assert mapping.shape == (40,)
            assert measurement.noisy_counts.shape[axis] == int(kept.sum()) + 1
            # The kept values keep their own cells in order; the rest share the last one.
            np.testing.assert_array_equal(mapping[kept], np.arange(int(kept.sum())))
            assert np.all(mapping[~kept] == kept.sum())
            groups = marginal.groups(axis)
            assert sorted(code for group in groups for code in group) == list(range(40))
            assert all(groups)
    assert mapped >= 1
    assert_records_equal(record, ReleaseRecord.from_bytes(record.to_bytes()))


def test_synthesis_result_validates_axis_maps() -> None:
    counts = np.zeros((3,), dtype=np.int64)
    measurement = Measurement(("a",), counts, Fraction(1), Fraction(1), Fraction(1, 2))
    codes = np.zeros((1, 1), dtype=np.int64)

    def result(maps: Any) -> SynthesisResult:
        return SynthesisResult(codes, (measurement,), Fraction(1, 2), 1.0, axis_maps=maps)

    assert result(None).axis_maps is None
    assert result(((None,),)).axis_maps == ((None,),)
    ok = result(((np.array([0, 1, 2, 2]),),)).axis_maps
    assert ok is not None and ok[0][0] is not None and not ok[0][0].flags.writeable
    for bad in (
        (),  # one entry per measurement
        ((None, None),),  # one map per attribute
        ((np.array([0, 3]),),),  # points past the measured axis
        ((np.array([0.0, 1.0]),),),  # not integers
        ((np.array([], dtype=np.int64),),),  # empty
    ):
        with pytest.raises(ValueError):
            result(bad)
    with pytest.raises(TypeError):
        SynthesisResult(codes, (measurement,), Fraction(1, 2), 1.0, extra={"x": object()})


# --------------------------------------------------------------------------------------------
# Tampered model files
# --------------------------------------------------------------------------------------------


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _archive(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def _with_header(data: bytes, change: Any) -> bytes:
    members = _members(data)
    header = json.loads(bytes(np.load(io.BytesIO(members["model.json.npy"]))).decode())
    change(header)
    text = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    members["model.json.npy"] = _npy(text)
    return _archive(members)


@pytest.mark.parametrize("method", ["independent", "mst", "cipher", "dpcopula", "privsyn"])
def test_corrupted_or_tampered_models_are_refused(method: str) -> None:
    result, _ = run(method)
    assert result.model is not None
    good = result.model.to_bytes()
    members = _members(good)
    arrays = [name for name in members if name != "model.json.npy"]
    first = arrays[0]
    shape = np.load(io.BytesIO(members[first])).shape

    def header_set(key: str, value: Any) -> Any:
        return lambda header: header.__setitem__(key, value)

    bad_files = [
        b"",
        b"not a model at all",
        good[: len(good) // 2],  # truncated
        good[:100] + bytes(b ^ 0xFF for b in good[100:140]) + good[140:],  # flipped bytes
        _with_header(good, header_set("version", 99)),
        _with_header(good, header_set("kind", "unknown")),
        _with_header(good, header_set("domain", {"attributes": ["a"], "sizes": [3]})),
        _with_header(good, header_set("estimated_total", -1)),
        _with_header(good, header_set("body", [])),
        # A pickled object array in place of a numeric one: refused without unpickling.
        _archive({**members, first: _npy(np.array([{"x": 1}], dtype=object))}),
        # A float array of the wrong shape, or with a NaN, in place of a good one.
        _archive({**members, first: _npy(np.zeros(tuple(s + 1 for s in shape)))}),
        _archive({**members, first: _npy(np.full(shape, np.nan))}),
        # An array missing.
        _archive({k: v for k, v in members.items() if k != first}),
    ]
    for data in bad_files:
        with pytest.raises(ModelError):
            FittedModel.from_bytes(data)


def test_a_graphical_model_with_bad_cliques_is_refused() -> None:
    result, _ = run("aim")
    assert result.model is not None
    good = result.model.to_bytes()

    def rename(header: dict[str, Any]) -> None:
        header["body"]["cliques"][0][0] = "nope"

    def repeat(header: dict[str, Any]) -> None:
        clique = header["body"]["cliques"][0]
        clique[-1] = clique[0]

    for change in (rename, repeat):
        with pytest.raises(ModelError):
            FittedModel.from_bytes(_with_header(good, change))


def test_run_refuses_a_compressed_measurement_without_its_axis_map(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mechanism that measured merged codes but did not say so is caught by ``run``."""
    import engine.mechanisms.mst.mechanism as mst

    monkeypatch.setattr(mst, "measured_axis_maps", lambda *_args: None)
    rng = np.random.default_rng(5)
    domain = Domain(("x", "rare"), (2, 40))
    rare = np.where(rng.random(2000) < 0.95, 0, rng.integers(1, 40, 2000))
    data = Dataset(domain, np.column_stack([rng.integers(0, 2, 2000), rare]).astype(np.int64))
    mechanism = MECHANISMS["mst"]
    params = mechanism.validate_params({"iterations": 10, "selection_iterations": 5})
    with pytest.raises(RuntimeError, match="without an axis map"):
        mechanism.run(
            data,
            Fraction(1, 20),
            params,
            rng=np.random.default_rng(0),
            noise_source=random.Random(3),
        )
