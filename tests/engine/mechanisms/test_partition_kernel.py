"""Algorithm 4 compiled (issue 15 §3): the same partitions as the numpy implementation it
replaced, and the same PPSyn runs.

``reference_split_partition`` below is the implementation that engine/mechanisms/ppsyn/partition.py
had before the change (numpy calls per box), kept here only as the reference. Both sum in a
different order, so a cut whose squared error ties *exactly* in exact arithmetic (a box whose
slabs are mirror images) may be broken differently by rounding; random real-valued counts (the
model's marginals are such) have no such ties, and the mechanism's runs below do not meet one.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

import engine.mechanisms.ppsyn.partition as partition_module
from engine.domain import Dataset, Domain
from engine.mechanisms import get_mechanism
from engine.mechanisms.ppsyn.partition import (
    SPLIT_NOISE,
    SPLIT_PAPER,
    NoiseRule,
    PaperRule,
    Partition,
    Rule,
    _split_kernel,
    reconstruction_error,
    split_kernel,
    split_partition,
)
from tests.engine.support import correlated

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FloatArray = npt.NDArray[np.float64]


# --- The implementation before the change (reference only) ----------------------------------


def _box_error(values: FloatArray) -> float:
    return float(np.abs(values - values.mean()).sum()) if values.size > 1 else 0.0


def _best_cut(values: FloatArray, axis: int) -> tuple[int, float] | None:
    width = values.shape[axis]
    if width < 2:
        return None
    rows = np.moveaxis(values, axis, 0).reshape(width, -1)
    per = rows.shape[1]
    sums = np.cumsum(rows.sum(axis=1))
    squares = np.cumsum((rows * rows).sum(axis=1))
    total, total_sq = sums[-1], squares[-1]
    left_n = np.arange(1, width) * per
    right_n = (width - np.arange(1, width)) * per
    left_s, left_q = sums[:-1], squares[:-1]
    right_s, right_q = total - left_s, total_sq - left_q
    sse = (left_q - left_s**2 / left_n) + (right_q - right_s**2 / right_n)
    cut = int(np.argmin(sse))
    return cut + 1, float(sse[cut])


Box = tuple[tuple[int, int], ...]


def reference_split_partition(
    counts: npt.ArrayLike, rule: Rule, max_groups: int = 1024, patience: int = 1
) -> Partition:
    q = np.asarray(counts, dtype=np.float64)
    rises = 0
    shape = q.shape
    k = q.ndim
    boxes: list[Box] = [tuple((0, s) for s in shape)]
    errors = [_box_error(q)]
    heap: list[tuple[float, int]] = [(-errors[0], 0)] if q.size > 1 else []
    error = errors[0]
    current = rule.cost(1, error)
    best_cost, best_count = current, 1
    history: list[tuple[int, Box, Box]] = []
    step = 0
    while len(boxes) < max_groups and heap:
        _, b = heapq.heappop(heap)
        box = boxes[b]
        values = q[tuple(slice(lo, hi) for lo, hi in box)]
        found = None
        for offset in range(k):
            axis = (step + offset) % k
            cut = _best_cut(values, axis)
            if cut is not None:
                found = (axis, cut[0])
                break
        if found is None:
            continue
        axis, at = found
        lo, hi = box[axis]
        left = tuple((lo, lo + at) if a == axis else r for a, r in enumerate(box))
        right = tuple((lo + at, hi) if a == axis else r for a, r in enumerate(box))
        index: list[slice] = [slice(None)] * k
        index[axis] = slice(0, at)
        left_err = _box_error(values[tuple(index)])
        index[axis] = slice(at, hi - lo)
        right_err = _box_error(values[tuple(index)])
        history.append((b, box, left))
        boxes[b] = left
        boxes.append(right)
        error = max(0.0, error - errors[b] + left_err + right_err)
        errors[b] = left_err
        errors.append(right_err)
        if math.prod(h - l2 for l2, h in left) > 1:
            heapq.heappush(heap, (-left_err, b))
        if math.prod(h - l2 for l2, h in right) > 1:
            heapq.heappush(heap, (-right_err, len(boxes) - 1))
        step += 1
        trial = rule.cost(len(boxes), error)
        if trial < best_cost:
            best_cost, best_count = trial, len(boxes)
        if math.isfinite(current) and trial > current:
            rises += 1
            if rises >= patience:
                break
        else:
            rises = 0
        current = trial
    for b, box, _ in reversed(history[best_count - 1 :]):
        boxes[b] = box
    best_boxes = boxes[:best_count]
    groups = np.empty(shape, dtype=np.intp)
    for label, box in enumerate(best_boxes):
        groups[tuple(slice(lo, hi) for lo, hi in box)] = label
    return Partition(groups, len(best_boxes), reconstruction_error(q, groups), best_cost)


# --- Fixtures ----------------------------------------------------------------------------------


def model_like(seed: int) -> FloatArray:
    """A 2- to 4-way table of positive reals with structure (a product of one-ways times noise,
    some near-empty cells), like a fitted model's marginal."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in rng.integers(2, 12, size=int(rng.integers(2, 5))))
    table = np.ones(shape)
    for axis, size in enumerate(shape):
        one_way = rng.gamma(0.7, size=size) * 100
        table = table * one_way.reshape([size if a == axis else 1 for a in range(len(shape))])
    table *= rng.lognormal(0.0, 0.5, size=shape)
    table[rng.random(shape) < 0.1] *= 1e-6
    return table


RULES: list[tuple[Rule, int, int]] = [
    (NoiseRule(0.5), 1024, 8),
    (NoiseRule(5.0), 1024, 8),
    (NoiseRule(50.0), 1024, 1),
    (NoiseRule(1.0), 13, 3),
    (PaperRule(20_000.0, 0.7), 1024, 1),
    (PaperRule(500.0, 0.7), 64, 4),
]


@pytest.mark.parametrize("seed", range(60))
def test_same_partitions_as_the_numpy_implementation(seed: int) -> None:
    counts = model_like(seed)
    for rule, max_groups, patience in RULES:
        new = split_partition(counts, rule, max_groups, patience)
        old = reference_split_partition(counts, rule, max_groups, patience)
        assert new.n_groups == old.n_groups
        assert np.array_equal(new.groups, old.groups)
        # RE is recomputed from the groups; the cost is the running sum of the splits' RE
        # changes, terms up to the table's mass that cancel: it carries their rounding.
        assert new.reconstruction_error == old.reconstruction_error
        assert new.cost == pytest.approx(old.cost, abs=1e-12 * float(counts.sum()))


@pytest.mark.parametrize("seed", range(20))
def test_compiled_kernel_is_the_python_function(seed: int) -> None:
    """numba's machine code and the plain function (which the module falls back to without
    numba) agree bit for bit: no fast-math reassociation."""
    counts = model_like(1000 + seed)
    flat = counts.ravel()
    shape = np.array(counts.shape, dtype=np.int64)
    compiled = split_kernel()
    assert compiled is not _split_kernel
    for kind, a, b in ((SPLIT_NOISE, 3.0, 0.0), (SPLIT_PAPER, 5000.0, 0.7)):
        fast = compiled(flat, shape, kind, a, b, 1024, 8)
        slow = _split_kernel(flat, shape, kind, a, b, 1024, 8)
        assert np.array_equal(fast[0], slow[0])
        assert fast[1:] == slow[1:]


def adult_sample() -> Dataset:
    domain = Domain.from_mapping(json.loads((FIXTURES / "adult-domain.json").read_text()))
    frame = pd.read_csv(FIXTURES / "adult-sample.csv")
    return Dataset(domain, frame[list(domain.attributes)].to_numpy(dtype=np.int64))


@pytest.mark.parametrize(
    ("name", "rho"),
    [("correlated", Fraction(1, 50)), ("correlated", Fraction(2)), ("adult", Fraction(1, 10))],
)
def test_ppsyn_runs_are_unchanged(
    monkeypatch: pytest.MonkeyPatch, name: str, rho: Fraction
) -> None:
    """Same seeded noise source and rng: the compiled Algorithm 4 gives the same run (rows,
    selections, releases) as the implementation it replaced."""
    data = correlated(2000, 11) if name == "correlated" else adult_sample()
    mechanism = get_mechanism("ppsyn")
    params = mechanism.validate_params({"rounds": 8, "round_iterations": 20, "iterations": 100})
    calls = 0

    def counted(*args: object, **kwargs: object) -> Partition:
        nonlocal calls
        calls += 1
        return split_partition(*args, **kwargs)  # type: ignore[arg-type]

    def run() -> tuple[npt.NDArray[np.int64], list[str], list[str]]:
        result = mechanism.run(
            data, rho, params, rng=np.random.default_rng(4), noise_source=random.Random(17)
        )
        return (
            np.asarray(result.codes),
            [s.description for s in result.selections],
            [r.description for r in result.releases],
        )

    monkeypatch.setattr(partition_module, "split_partition", counted)
    new = run()
    assert calls > 0  # Algorithm 4 ran
    monkeypatch.setattr(partition_module, "split_partition", reference_split_partition)
    old = run()
    assert np.array_equal(new[0], old[0])
    assert new[1:] == old[1:]
