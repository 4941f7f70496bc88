"""Mechanism.first_noise states the σ² of a run's first releases exactly (cost preview).

Each case runs the mechanism once on a tiny table and compares the preview, computed before the
run from the domain, the params and ρ alone, with the first releases the run reports. σ² and ρ
are exact fractions, so the comparison is equality; the noise values play no part.
"""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from engine.domain import Dataset
from engine.mechanisms import MECHANISMS, get_mechanism
from engine.mechanisms.preview import NoisePreview
from tests.engine.support import correlated
from tests.engine.test_public_progress import FAST

# (method, extra params, which list of the result the preview describes, columns kept).
CASES: list[tuple[str, dict[str, Any], str, tuple[str, ...] | None]] = [
    ("independent", {}, "measurements", None),
    ("mst", {}, "measurements", None),
    ("aim", {}, "measurements", None),
    ("aim", {"one_way_share": 0.2, "one_way_split": "equal"}, "measurements", None),
    ("privsyn", {}, "measurements", None),
    ("ppsyn", {}, "measurements", None),
    ("privmrf", {}, "measurements", None),
    ("privmrf", {"compress": False}, "releases", None),
    ("cipher", {}, "measurements", None),
    ("dpcopula", {}, "measurements", None),
    ("dpcopula", {"hybrid": False}, "measurements", None),
    ("dpcopula", {}, "measurements", ("c", "d")),  # every column a partition key
]


def _subset(data: Dataset, columns: tuple[str, ...] | None) -> Dataset:
    if columns is None:
        return data
    domain = data.domain.project(columns)
    return Dataset(domain, np.stack([data.column(c) for c in columns], axis=1).astype(np.int64))


def test_every_method_is_covered() -> None:
    assert {case[0] for case in CASES} == set(MECHANISMS)


@pytest.mark.parametrize(("method", "extra", "stream", "columns"), CASES)
@pytest.mark.parametrize("rho", [Fraction(1, 2), Fraction(3, 7)])
def test_preview_equals_first_releases_of_a_run(
    method: str,
    extra: dict[str, Any],
    stream: str,
    columns: tuple[str, ...] | None,
    rho: Fraction,
) -> None:
    data = _subset(correlated(400, seed=5), columns)
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({**FAST[method], **extra})
    preview = mechanism.first_noise(data.domain, params, rho)
    assert preview, f"{method} states no first noise"
    assert all(isinstance(p, NoisePreview) for p in preview)
    assert sum((p.rho for p in preview), Fraction(0)) <= rho

    result = mechanism.run(
        data, rho, params, rng=np.random.default_rng(1), noise_source=random.Random(2)
    )
    released = getattr(result, stream)[: len(preview)]
    assert len(released) == len(preview)
    for stated, made in zip(preview, released, strict=True):
        assert stated.sigma2 == made.sigma2
        assert stated.rho == made.rho
        assert stated.sensitivity == made.sensitivity
        if stream == "measurements":
            assert stated.attributes == made.attributes


def test_preview_follows_rho() -> None:
    """Halving ρ doubles every σ² (the preview is not a constant)."""
    data = correlated(50, seed=1)
    mechanism = get_mechanism("aim")
    params = mechanism.validate_params({})
    full = mechanism.first_noise(data.domain, params, Fraction(1))
    half = mechanism.first_noise(data.domain, params, Fraction(1, 2))
    assert [2 * p.sigma2 for p in full] == [p.sigma2 for p in half]
