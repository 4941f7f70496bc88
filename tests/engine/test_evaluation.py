"""Marginal TVD (engine.evaluation) against its definition and the shared independent evaluator."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from engine import evaluation
from engine.domain import Domain
from engine.evaluation import bootstrap_floor, marginal_tvd, mean_tvd, unrank_combination

FIXTURES = Path(__file__).parents[1] / "fixtures"
SHARED_EVALUATOR = Path(__file__).resolve().parents[3] / "shared" / "bench" / "marginal_error.py"

IntArray = npt.NDArray[np.int64]


def adult_sample() -> tuple[IntArray, Domain]:
    domain = Domain.from_mapping(json.loads((FIXTURES / "adult-domain.json").read_text()))
    frame = pd.read_csv(FIXTURES / "adult-sample.csv")
    return frame[list(domain.attributes)].to_numpy(dtype=np.int64), domain


def naive_mean_tvd(
    real: IntArray, synth: IntArray, domain: Domain, max_way: int
) -> dict[int, float]:
    """The definition, spelled out with pandas group-bys (no flat indices, no bincount)."""
    names = list(domain.attributes)
    real_frame = pd.DataFrame(real, columns=names)
    synth_frame = pd.DataFrame(synth, columns=names)
    result: dict[int, float] = {}
    for k in range(1, min(max_way, len(names)) + 1):
        values = []
        for combo in itertools.combinations(names, k):
            p = real_frame.groupby(list(combo)).size() / len(real_frame)
            q = synth_frame.groupby(list(combo)).size() / len(synth_frame)
            joined = pd.concat([p, q], axis=1).fillna(0.0)
            values.append(0.5 * float((joined.iloc[:, 0] - joined.iloc[:, 1]).abs().sum()))
        result[k] = sum(values) / len(values)
    return result


@st.composite
def table_pairs(draw: st.DrawFn) -> tuple[IntArray, IntArray, Domain]:
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    domain = Domain(tuple(f"c{i}" for i in range(len(sizes))), tuple(sizes))

    def table(n: int) -> IntArray:
        rows = [[draw(st.integers(0, size - 1)) for size in sizes] for _ in range(n)]
        return np.array(rows, dtype=np.int64).reshape(n, len(sizes))

    return table(draw(st.integers(1, 25))), table(draw(st.integers(1, 25))), domain


# --------------------------------------------------------------------------------------------
# marginal_tvd
# --------------------------------------------------------------------------------------------


def test_marginal_tvd_of_a_worked_example() -> None:
    domain = Domain.from_mapping({"a": 2})
    real = np.array([[0], [0], [1], [1]])
    synth = np.array([[0], [1], [1]])
    # p = (1/2, 1/2), q = (1/3, 2/3): ½(1/6 + 1/6) = 1/6.
    assert marginal_tvd(real, synth, domain, ["a"]) == pytest.approx(1 / 6, abs=1e-15)


def test_marginal_tvd_of_a_two_way_example() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 2})
    real = np.array([[0, 0], [0, 1], [1, 1], [1, 1]])
    synth = np.array([[0, 0], [1, 0]])
    # p over (00, 01, 10, 11) = (¼, ¼, 0, ½); q = (½, 0, ½, 0): ½(¼ + ¼ + ½ + ½) = ¾.
    assert marginal_tvd(real, synth, domain, ["a", "b"]) == pytest.approx(0.75, abs=1e-15)
    # The 1-way marginal of a is (½, ½) in both tables.
    assert marginal_tvd(real, synth, domain, ["a"]) == 0.0


def test_marginal_tvd_bounds() -> None:
    domain = Domain.from_mapping({"a": 3, "b": 2})
    real = np.array([[0, 0], [1, 1], [2, 0]])
    assert marginal_tvd(real, real, domain, ["a", "b"]) == 0.0
    disjoint = np.array([[0, 1], [1, 0]])
    assert marginal_tvd(real, disjoint, domain, ["a", "b"]) == pytest.approx(1.0, abs=1e-15)


def test_marginal_tvd_attribute_order_does_not_matter() -> None:
    codes, domain = adult_sample()
    other = np.roll(codes, 7, axis=0)
    other[:, 1] = codes[:, 1][::-1]
    forward = marginal_tvd(codes, other, domain, ["age", "workclass", "sex"])
    backward = marginal_tvd(codes, other, domain, ["sex", "workclass", "age"])
    assert forward == pytest.approx(backward, abs=1e-15)


@pytest.mark.parametrize(
    ("real", "synth", "error"),
    [
        (np.zeros((3, 1), dtype=np.int64), np.zeros((3, 2), dtype=np.int64), ValueError),
        (np.zeros((3, 2), dtype=np.int64), np.full((3, 2), 5, dtype=np.int64), ValueError),
        (np.zeros((0, 2), dtype=np.int64), np.zeros((3, 2), dtype=np.int64), ValueError),
        (np.zeros((3, 2), dtype=np.float64), np.zeros((3, 2), dtype=np.int64), ValueError),
        (np.zeros(3, dtype=np.int64), np.zeros((3, 2), dtype=np.int64), ValueError),
    ],
)
def test_tables_are_validated(real: IntArray, synth: IntArray, error: type[Exception]) -> None:
    domain = Domain.from_mapping({"a": 2, "b": 3})
    with pytest.raises(error):
        marginal_tvd(real, synth, domain, ["a"])
    with pytest.raises(error):
        mean_tvd(real, synth, domain)


def test_marginal_tvd_needs_known_attributes() -> None:
    domain = Domain.from_mapping({"a": 2})
    table = np.zeros((2, 1), dtype=np.int64)
    with pytest.raises(KeyError):
        marginal_tvd(table, table, domain, ["zzz"])
    with pytest.raises(ValueError, match="at least one attribute"):
        marginal_tvd(table, table, domain, [])


def test_inputs_are_neither_copied_into_nor_changed() -> None:
    codes, domain = adult_sample()
    before = codes.copy()
    mean_tvd(codes, codes[::-1], domain, max_way=2)
    assert codes.flags.writeable
    np.testing.assert_array_equal(codes, before)


# --------------------------------------------------------------------------------------------
# mean_tvd: the definition
# --------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(table_pairs(), st.integers(1, 4))
def test_mean_tvd_matches_a_naive_groupby(
    pair: tuple[IntArray, IntArray, Domain], max_way: int
) -> None:
    real, synth, domain = pair
    ours = mean_tvd(real, synth, domain, max_way=max_way)
    naive = naive_mean_tvd(real, synth, domain, max_way)
    assert ours.keys() == naive.keys()
    for k in naive:
        assert ours[k] == pytest.approx(naive[k], abs=1e-12)
        assert 0.0 <= ours[k] <= 1.0


@settings(max_examples=30, deadline=None)
@given(table_pairs())
def test_sparse_path_equals_dense_path(pair: tuple[IntArray, IntArray, Domain]) -> None:
    # Hypothesis reruns the body, so the limit is patched by hand rather than by monkeypatch.
    real, synth, domain = pair
    dense = mean_tvd(real, synth, domain, max_way=3)
    original = evaluation.DENSE_CELL_LIMIT
    evaluation.DENSE_CELL_LIMIT = 0
    try:
        sparse = mean_tvd(real, synth, domain, max_way=3)
    finally:
        evaluation.DENSE_CELL_LIMIT = original
    for k in dense:
        assert sparse[k] == pytest.approx(dense[k], abs=1e-12)


def test_marginals_with_more_cells_than_int64_are_compared_exactly() -> None:
    # 2^32 · 2^32 cells: no flat index fits in int64, so rows are compared with np.unique.
    domain = Domain.from_mapping({"a": 2**32, "b": 2**32, "c": 3})
    rng = np.random.default_rng(5)
    real = rng.integers(0, 3, size=(40, 3))
    synth = rng.integers(0, 3, size=(33, 3))
    ours = mean_tvd(real, synth, domain, max_way=3)
    naive = naive_mean_tvd(real, synth, domain, 3)
    for k in naive:
        assert ours[k] == pytest.approx(naive[k], abs=1e-12)


def test_max_way_stops_at_the_number_of_columns() -> None:
    domain = Domain.from_mapping({"a": 2, "b": 2})
    table = np.array([[0, 1], [1, 0]])
    assert list(mean_tvd(table, table, domain, max_way=5)) == [1, 2]
    assert list(mean_tvd(table, table, domain, max_way=1)) == [1]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_max_way_must_be_a_positive_int(bad: object) -> None:
    domain = Domain.from_mapping({"a": 2})
    table = np.zeros((2, 1), dtype=np.int64)
    with pytest.raises(ValueError, match="max_way"):
        mean_tvd(table, table, domain, max_way=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_marginals"):
        mean_tvd(table, table, domain, max_marginals=bad)  # type: ignore[arg-type]


@pytest.mark.skipif(not SHARED_EVALUATOR.exists(), reason="../shared/bench is not available")
def test_mean_tvd_agrees_with_the_shared_evaluator(tmp_path: Path) -> None:
    """Run ../shared/bench/marginal_error.py on the adult sample and a perturbed copy of it."""
    codes, domain = adult_sample()
    rng = np.random.default_rng(2024)
    perturbed = codes.copy()
    for j, size in enumerate(domain.sizes):
        rows = rng.random(len(perturbed)) < 0.1 + 0.05 * j
        perturbed[rows, j] = rng.integers(0, size, size=int(rows.sum()))
    # Different row counts: drop some rows and duplicate others.
    keep = rng.permutation(len(perturbed))[:900]
    perturbed = np.concatenate([perturbed[keep], perturbed[keep[:37]]])
    real_csv = FIXTURES / "adult-sample.csv"
    synth_csv = tmp_path / "synth.csv"
    pd.DataFrame(perturbed, columns=list(domain.attributes)).to_csv(synth_csv, index=False)
    out = tmp_path / "evaluator.json"

    subprocess.run(
        [
            sys.executable,
            str(SHARED_EVALUATOR),
            str(real_csv),
            str(synth_csv),
            str(FIXTURES / "adult-domain.json"),
            "--max-way",
            "3",
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    reference = json.loads(out.read_text())
    ours = mean_tvd(codes, perturbed, domain, max_way=3)
    assert reference["n_real"] == len(codes)
    assert reference["n_synth"] == len(perturbed)
    assert set(reference["ways"]) == {"1", "2", "3"}
    for k, way in reference["ways"].items():
        assert way["count"] == math.comb(len(domain), int(k))
        assert ours[int(k)] == pytest.approx(way["mean_tvd"], abs=1e-12)
        assert ours[int(k)] > 0


# --------------------------------------------------------------------------------------------
# Sampling marginals
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(0, 8))
def test_unrank_combination_enumerates_combinations_in_order(n: int) -> None:
    for k in range(0, n + 1):
        expected = list(itertools.combinations(range(n), k))
        assert [unrank_combination(r, n, k) for r in range(len(expected))] == expected


def test_unrank_combination_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="rank"):
        unrank_combination(10, 5, 2)
    with pytest.raises(ValueError, match="rank"):
        unrank_combination(-1, 5, 2)
    with pytest.raises(ValueError, match="k <= n"):
        unrank_combination(0, 2, 3)


def test_unrank_combination_handles_huge_counts() -> None:
    n, k = 200, 3
    assert unrank_combination(math.comb(n, k) - 1, n, k) == (197, 198, 199)


def test_max_marginals_at_or_above_the_count_is_the_full_mean() -> None:
    codes, domain = adult_sample()
    other = codes[::-1].copy()
    other[:, 0] = codes[:, 0]
    full = mean_tvd(codes, other[:500], domain, max_way=2)
    assert mean_tvd(codes, other[:500], domain, max_way=2, max_marginals=91) == full
    assert mean_tvd(codes, other[:500], domain, max_way=2, max_marginals=10_000) == full


def test_max_marginals_samples_a_seeded_subset() -> None:
    codes, domain = adult_sample()
    synth = codes[np.random.default_rng(1).integers(0, len(codes), size=400)]
    every = [
        marginal_tvd(codes, synth, domain, combo)
        for combo in itertools.combinations(domain.attributes, 2)
    ]
    first = mean_tvd(
        codes, synth, domain, max_way=2, max_marginals=14, rng=np.random.default_rng(3)
    )
    again = mean_tvd(
        codes, synth, domain, max_way=2, max_marginals=14, rng=np.random.default_rng(3)
    )
    other = mean_tvd(
        codes, synth, domain, max_way=2, max_marginals=14, rng=np.random.default_rng(4)
    )
    assert first == again
    assert first[2] != other[2]
    assert min(every) <= first[2] <= max(every)
    # The 14 one-way marginals fit under max_marginals=14: k = 1 is the exact mean.
    assert first[1] == mean_tvd(codes, synth, domain, max_way=1)[1]
    # rng=None is a fixed default, so evaluations are repeatable.
    default = mean_tvd(codes, synth, domain, max_way=2, max_marginals=10)
    assert default == mean_tvd(codes, synth, domain, max_way=2, max_marginals=10)


def test_sampled_marginals_are_uniform() -> None:
    """With one sampled 1-way marginal the score names the column: count which, over many seeds.

    Columns are built so each has a distinct TVD. Chi-square against uniform at p > 1e-3; seeded,
    so deterministic.
    """
    n_columns = 5
    domain = Domain.from_mapping({f"c{j}": 2 for j in range(n_columns)})
    real = np.zeros((20, n_columns), dtype=np.int64)
    synth = np.zeros((20, n_columns), dtype=np.int64)
    for j in range(n_columns):
        synth[: 2 * (j + 1), j] = 1  # TVD of column j = 2(j+1)/20
    tvd_to_column = {round(2 * (j + 1) / 20, 12): j for j in range(n_columns)}
    draws = 3000
    counts = np.zeros(n_columns, dtype=np.int64)
    for seed in range(draws):
        score = mean_tvd(
            real, synth, domain, max_way=1, max_marginals=1, rng=np.random.default_rng(seed)
        )[1]
        counts[tvd_to_column[round(score, 12)]] += 1
    assert stats.chisquare(counts).pvalue > 1e-3


# --------------------------------------------------------------------------------------------
# bootstrap_floor
# --------------------------------------------------------------------------------------------


def test_bootstrap_floor_is_the_tvd_of_a_resample() -> None:
    codes, domain = adult_sample()
    floor = bootstrap_floor(codes, domain, np.random.default_rng(11), max_way=3)
    rng = np.random.default_rng(11)
    resample = codes[rng.integers(0, len(codes), size=len(codes))]
    assert floor == mean_tvd(codes, resample, domain, max_way=3)
    assert list(floor) == [1, 2, 3]
    assert 0 < floor[1] < floor[2] < floor[3] < 1
    assert bootstrap_floor(codes, domain, np.random.default_rng(11)) == floor
    assert bootstrap_floor(codes, domain, np.random.default_rng(12)) != floor


def test_bootstrap_floor_with_sampled_marginals() -> None:
    codes, domain = adult_sample()
    floor = bootstrap_floor(codes, domain, np.random.default_rng(0), max_way=3, max_marginals=20)
    assert all(0 < value < 1 for value in floor.values())
