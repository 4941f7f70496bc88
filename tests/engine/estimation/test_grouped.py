"""Grouped (partitioned) measurements: y = Q·μ + z with Q a group-indicator matrix."""

from __future__ import annotations

import numpy as np
import pytest

from engine.domain import Domain
from engine.estimation import NoisyMarginal, estimate


@pytest.fixture
def domain() -> Domain:
    return Domain.from_mapping({"a": 3, "b": 4, "c": 2})


def test_identity_grouping_equals_plain_measurement(domain: Domain) -> None:
    rng = np.random.default_rng(0)
    table = rng.uniform(5, 50, size=(4, 3))  # attributes in the order (b, a)
    plain = NoisyMarginal(("b", "a"), table, 2.0)
    grouped = NoisyMarginal(("b", "a"), table.ravel(), 2.0, groups=np.arange(12).reshape(4, 3))
    one = NoisyMarginal(("c",), np.array([80.0, 120.0]), 1.0)
    a = estimate(domain, [plain, one], iterations=300, tolerance=0)
    b = estimate(domain, [grouped, one], iterations=300, tolerance=0)
    assert a.loss == pytest.approx(b.loss, rel=1e-9, abs=1e-9)
    np.testing.assert_allclose(a.project(["a", "b", "c"]), b.project(["a", "b", "c"]), rtol=1e-8)


def test_grouped_measurement_is_fitted_as_group_sums(domain: Domain) -> None:
    groups = np.array([[0, 0, 1, 1], [2, 2, 2, 3], [3, 3, 3, 3]])  # (a, b)
    sums = np.array([30.0, 10.0, 45.0, 115.0])
    y = NoisyMarginal(("a", "b"), sums, 1.0, groups=groups)
    model = estimate(domain, [y], iterations=2000, tolerance=0)
    mu = model.project(["a", "b"])
    fitted = np.bincount(groups.ravel(), weights=mu.ravel(), minlength=4)
    np.testing.assert_allclose(fitted, sums, atol=0.05)
    # Within a group, with no other information, the maximum-entropy fit is uniform.
    np.testing.assert_allclose(mu[0, :2], 15.0, atol=0.05)
    np.testing.assert_allclose(mu[2], 115.0 / 5, atol=0.05)
    assert model.total == pytest.approx(200.0)


def test_grouped_and_plain_measurements_of_the_same_set_combine(domain: Domain) -> None:
    groups = np.array([0, 0, 1])
    coarse = NoisyMarginal(("a",), np.array([60.0, 40.0]), 0.1, groups=groups)
    fine = NoisyMarginal(("a",), np.array([10.0, 50.0, 40.0]), 10.0)
    model = estimate(domain, [coarse, fine], iterations=3000, tolerance=0)
    mu = model.project(["a"])
    assert mu[0] + mu[1] == pytest.approx(60.0, abs=0.1)
    assert mu[1] > mu[0]


@pytest.mark.parametrize(
    ("values", "groups", "message"),
    [
        (np.array([1.0, 2.0]), np.array([[0, 1]]), "one axis"),
        (np.array([[1.0, 2.0]]), np.array([0, 1]), "1-D"),
        (np.array([1.0, 2.0]), np.array([0, 2]), "map every cell"),
        (np.array([1.0, 2.0, 3.0]), np.array([0, 2]), "at least one cell"),
        (np.array([1.0]), np.array([0.5]), "integers"),
    ],
)
def test_grouped_measurement_validation(
    values: np.ndarray, groups: np.ndarray, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        NoisyMarginal(("a",), values, 1.0, groups=groups)


def test_grouped_shape_must_match_domain(domain: Domain) -> None:
    y = NoisyMarginal(("a",), np.array([1.0, 2.0]), 1.0, groups=np.array([0, 1]))
    with pytest.raises(ValueError, match="domain says"):
        estimate(domain, [y], iterations=10)
