"""Every accepted parameter set runs: a job can never fail after its charge for a reason that is
decidable from the public domain, the params, ρ and the requested rows.

Hypothesis draws, for each method, parameters from its ``Params`` (every field, including the
extremes of its accepted range: tiny shares, the largest rounds, null options), ρ from 1e-9 to
1e3, and a tiny table (2–5 columns, 1–6 codes each, 0–40 rows). A draw the submission checks
refuse (``validate_params`` raising, ``check_domain`` or ``check_budget`` raising
``DomainRefused``) is what the service answers with 422 before reserving; every other draw must
run ``Mechanism.run`` to the end without an exception.

Work parameters (iterations, rounds, candidates, …) only repeat work on a tiny table, so they
are drawn small (at most the caps in ``_WORK_CAPS``, from their lower bound) to keep the test
fast.
"""

from __future__ import annotations

import math
import random
import types
import typing
from fractions import Fraction
from typing import Any

import annotated_types
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from engine.domain import Dataset, Domain
from engine.mechanisms import MECHANISMS, DomainRefused, get_mechanism

# Fields that only repeat work: drawn from [low, cap] instead of their whole range.
_WORK_CAPS: dict[str, int] = {
    "iterations": 20,
    "round_iterations": 5,
    "selection_iterations": 5,
    "consistency_rounds": 20,
    "alpha_step": 20,
    "candidates": 50,
    "max_groups": 64,
    "split_patience": 4,
    # Rounds change the budget split (ρ/T), but a run of T = 100,000 rounds takes minutes even
    # on a tiny table: drawn up to 300 here. What a large T does to the split (a tiny ρ/T, hence
    # a huge σ) is what check_budget decides from the same bound at any T.
    "rounds": 300,
}
_TINY_FLOATS = (5e-324, 1e-300, 1e-12, 1e-9, 1e-7, 1e-6)


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None, bool, bool]:
    low = high = None
    low_open = high_open = False
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            low = item.ge
        elif isinstance(item, annotated_types.Gt):
            low, low_open = item.gt, True
        elif isinstance(item, annotated_types.Le):
            high = item.le
        elif isinstance(item, annotated_types.Lt):
            high, high_open = item.lt, True
    return low, high, low_open, high_open  # type: ignore[return-value]


def _float_strategy(metadata: list[Any]) -> st.SearchStrategy[float]:
    low, high, low_open, high_open = _bounds(metadata)
    low = -1e6 if low is None else float(low)
    high = 1e6 if high is None else float(high)
    special = [low if not low_open else low + t for t in _TINY_FLOATS] if low_open else [low]
    special += [high - t for t in _TINY_FLOATS] if high_open else [high]
    if low_open:
        special += [low + t for t in _TINY_FLOATS]
    inside = [v for v in special if (low < v or (not low_open and v == low)) and v <= high]
    return st.one_of(
        st.sampled_from(inside),
        st.floats(low, high, exclude_min=low_open, exclude_max=high_open),
    )


def _int_strategy(name: str, metadata: list[Any]) -> st.SearchStrategy[int]:
    low, high, low_open, high_open = _bounds(metadata)
    low_i = 0 if low is None else int(low) + (1 if low_open else 0)
    high_i = 10**6 if high is None else int(high) - (1 if high_open else 0)
    if name in _WORK_CAPS:
        return st.integers(low_i, max(low_i, min(high_i, _WORK_CAPS[name])))
    return st.one_of(st.sampled_from([low_i, high_i]), st.integers(low_i, high_i))


def _field_strategy(name: str, annotation: Any, metadata: list[Any]) -> st.SearchStrategy[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:  # a union member with bounds of its own (AIM's max_candidates)
        base, *extra = typing.get_args(annotation)
        bounds = [item for e in extra for item in getattr(e, "metadata", [e])]
        return _field_strategy(name, base, [*metadata, *bounds])
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = [_field_strategy(name, a, metadata) for a in options]
        return st.one_of(st.none(), *inner)
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(annotation))
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return _int_strategy(name, metadata)
    if annotation is float:
        return _float_strategy(metadata)
    raise NotImplementedError(f"no strategy for {name}: {annotation!r}")


def params_strategy(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Raw params: each field either left out (its default) or drawn from its accepted range."""
    fields = {
        name: st.one_of(st.none(), _field_strategy(name, info.annotation, info.metadata)).map(
            lambda v: ("default",) if v is None else ("set", v)
        )
        if not _is_optional(info.annotation)
        else st.one_of(
            st.just(("default",)),
            _field_strategy(name, info.annotation, info.metadata).map(lambda v: ("set", v)),
        )
        for name, info in model.model_fields.items()
    }
    return st.fixed_dictionaries(fields).map(
        lambda drawn: {k: v[1] for k, v in drawn.items() if v[0] == "set"}
    )


def _is_optional(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


@st.composite
def tiny_tables(draw: st.DrawFn) -> Dataset:
    d = draw(st.integers(2, 5))
    sizes = draw(st.lists(st.integers(1, 6), min_size=d, max_size=d))
    n = draw(st.integers(0, 40))
    domain = Domain(tuple(f"c{i}" for i in range(d)), tuple(sizes))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    codes = np.column_stack([rng.integers(0, s, n) for s in sizes]).reshape(n, d)
    return Dataset(domain, codes.astype(np.int64))


rhos = st.one_of(
    st.sampled_from([Fraction(1, 10**9), Fraction(1, 10**6), Fraction(1000)]),
    st.integers(-9, 3).map(lambda e: Fraction(10) ** e),
    st.fractions(min_value=Fraction(1, 10**9), max_value=Fraction(1000)).filter(lambda f: f > 0),
)


@pytest.mark.parametrize("method", sorted(MECHANISMS))
def test_every_accepted_parameter_set_runs(method: str) -> None:
    mechanism = get_mechanism(method)

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(
        raw=params_strategy(mechanism.Params),
        data=tiny_tables(),
        rho=rhos,
        rows=st.one_of(st.none(), st.integers(1, 30)),
        seed=st.integers(0, 2**32 - 1),
    )
    def run(raw: dict[str, Any], data: Dataset, rho: Fraction, rows: int | None, seed: int) -> None:
        try:
            params = mechanism.validate_params(raw)
        except ValidationError:
            return  # refused at submission (422)
        try:
            mechanism.check_domain(data.domain, params)
            mechanism.check_budget(data.domain, params, rho)
        except DomainRefused:
            return  # refused at submission (422)
        estimate = mechanism.estimate_resources(data.domain, params, rows or 60)
        assert estimate.memory_bytes > 0
        try:
            result = mechanism.run(
                data,
                rho,
                params,
                rng=np.random.default_rng(seed),
                rows=rows,
                max_rows=60,
                noise_source=random.Random(seed),
            )
        except Exception as error:
            raise AssertionError(
                f"{method} failed with params={raw!r}, sizes={data.domain.sizes}, "
                f"n={data.n_rows}, rho={rho}, rows={rows}: {error!r}"
            ) from error
        assert result.rho_spent == rho
        assert math.isfinite(result.estimated_total)

    run()


@pytest.mark.parametrize(
    ("method", "raw"),
    [
        ("privmrf", {"selection_share": 1e-7}),
        ("aim", {"one_way_share": 1e-7}),
        ("privsyn", {"indif_share": 1e-7}),
        ("ppsyn", {"one_way_share": 0.5, "selection_share": 0.4999999}),
        ("privsyn", {"one_way_share": 0.5, "indif_share": 0.4999999}),
        ("aim", {"selection_share": 0.9999999}),
    ],
)
def test_review_examples_now_run(method: str, raw: dict[str, Any]) -> None:
    """The outside review's examples that passed validation and then raised after the charge
    (a share rounded to 0, or shares summing to 1 after rounding) now run: shares are exact."""
    mechanism = get_mechanism(method)
    work = {"iterations": 10, "round_iterations": 3}
    fast = {k: v for k, v in work.items() if k in mechanism.Params.model_fields}
    params = mechanism.validate_params({**fast, **raw})
    rng = np.random.default_rng(3)
    domain = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
    codes = np.column_stack([rng.integers(0, s, 200) for s in domain.sizes]).astype(np.int64)
    data = Dataset(domain, codes)
    mechanism.check_domain(domain, params)
    mechanism.check_budget(domain, params, Fraction(1, 10))
    result = mechanism.run(data, Fraction(1, 10), params, rng=rng, rows=50)
    assert result.rho_spent == Fraction(1, 10)


def test_review_example_aim_rounds_below_columns_is_refused() -> None:
    """AIM with one_way_share null and rounds = 2 on 4 columns: the one-way marginals would take
    4·0.95/2 of ρ. Refused by check_domain (422 at submission) instead of raising after."""
    mechanism = get_mechanism("aim")
    params = mechanism.validate_params({"one_way_share": None, "rounds": 2})
    with pytest.raises(DomainRefused, match=r"rounds must be above 3\.8"):
        mechanism.check_domain(Domain(("a", "b", "c", "d"), (3, 4, 2, 5)), params)
    ok = mechanism.validate_params({"one_way_share": None, "rounds": 4, "round_iterations": 3})
    domain = Domain(("a", "b", "c", "d"), (3, 4, 2, 5))
    mechanism.check_domain(domain, ok)
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, s, 100) for s in domain.sizes]).astype(np.int64)
    result = mechanism.run(Dataset(domain, codes), Fraction(1), ok, rng=rng, rows=10)
    assert result.rho_spent == 1
