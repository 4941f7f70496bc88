"""The check_domain hook: refused before any data is touched, accepted by default."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from pydantic import BaseModel

from engine.domain import Dataset, Domain
from engine.mechanisms import DomainRefused, get_mechanism
from engine.mechanisms.independent.mechanism import IndependentMechanism


class _Refusing(IndependentMechanism):
    name = "refusing"

    def check_domain(self, domain: Domain, params: BaseModel) -> None:
        if len(domain) > 1:
            raise DomainRefused(f"{len(domain)} attributes, cap 1")

    def _synthesize(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        raise AssertionError("the data must not be touched after a refusal")


def _data() -> Dataset:
    domain = Domain(("a", "b"), (2, 3))
    return Dataset(domain, np.array([[0, 1], [1, 2]], dtype=np.int64))


def test_run_refuses_before_synthesising() -> None:
    mechanism = _Refusing()
    with pytest.raises(DomainRefused, match="cap 1"):
        mechanism.run(
            _data(), Fraction(1), mechanism.validate_params({}), rng=np.random.default_rng(0)
        )


def test_default_accepts_every_domain() -> None:
    mechanism = get_mechanism("independent")
    mechanism.check_domain(_data().domain, mechanism.validate_params({}))
