"""dp_quantile_edges: shape of the edges, accuracy, the exact noise scale, refusals.

Deterministic except ``test_edges_are_close_to_the_true_quantiles_at_large_rho`` (seeded; its
false-failure rate for a fresh seed is stated there).
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import numpy as np
import numpy.typing as npt
import pytest

import engine.discovery.quantiles as quantiles
from engine.discovery import QuantileGrid, dp_quantile_edges, dp_quantile_edges_from_counts
from engine.discovery.quantiles import _consistent_leaves, _tree_levels, grid_edges

IntArray = npt.NDArray[np.int64]


def zero_noise(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
    return np.zeros(shape, dtype=np.int64)


def normal_values(n: int, seed: int) -> npt.NDArray[np.float64]:
    return np.clip(np.random.default_rng(seed).normal(50.0, 12.0, n), 0.0, 100.0)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("integer", [False, True])
def test_edges_are_strictly_increasing_and_span_the_bounds(seed: int, integer: bool) -> None:
    values = normal_values(500, seed)
    if integer:
        values = np.round(values)
    rho = Fraction(1, 10 ** (seed % 3 + 1))
    result = dp_quantile_edges(
        values,
        lower=0,
        upper=100,
        bins=7,
        rho=rho,
        integer=integer,
        source=random.Random(seed),
    )
    edges = np.array(result.edges)
    assert edges[0] == 0.0 and edges[-1] == 100.0
    assert np.all(np.diff(edges) > 0)
    assert 1 <= result.bins <= 7 and result.requested_bins == 7
    assert result.merged == (result.bins < 7)
    if integer:
        assert np.all(edges == np.round(edges))
    assert result.cost.rho == rho and result.cost.delta == 0


def assert_ranks_close(
    values: npt.NDArray[np.float64], bins: int, rho: Fraction, seed: int, tolerance: float
) -> None:
    """Every edge of ``bins`` learned on [0, 100] (1024 cells) has the rank j/bins within
    ``tolerance``, up to the one grid cell an edge may be late."""
    result = dp_quantile_edges(
        values, lower=0, upper=100, bins=bins, rho=rho, source=random.Random(seed)
    )
    assert result.bins == bins
    cell = 100 / 1024
    for j, edge in enumerate(result.edges[1:-1], start=1):
        q = j / bins
        assert np.mean(values < edge) >= q - tolerance
        assert np.mean(values < edge - cell) <= q + tolerance


def test_edges_are_close_to_the_true_quantiles_at_large_rho() -> None:
    # ρ = 10 over L = 11 levels: σ² = 0.55 per node. A prefix sum of the least-squares leaves has
    # variance at most L·σ² ≈ 6 (SD 2.5 rows), the total SD < 1 row; the tolerance, 0.002 of
    # 20 000 rows = 40 rows, is more than 10 SD, so a fresh seed fails with probability < 1e-20
    # per edge. Edges sit on grid boundaries, so each may also be one cell (≤ 0.6% here) late.
    values = normal_values(20_000, 7)
    bins = 10
    assert_ranks_close(values, bins, Fraction(10), 3, 0.002)


def test_empty_cells_do_not_bias_the_edges() -> None:
    # All rows in [45, 55] of [0, 100]: about 900 of the 1024 cells are empty. ρ = 1/10 gives
    # σ² = 55 per node; a prefix sum's SD is at most √(L·σ²) ≈ 25 rows, so the tolerance of 0.01
    # (200 of 20 000 rows, 8 SD) fails a fresh seed with probability < 1e-14 per edge. Clamping
    # negative leaves to 0 before the prefix sums would add hundreds of rows to the lower tail and
    # move the first edge's rank by about 2% (checked: it fails this test).
    values = np.random.default_rng(5).uniform(45.0, 55.0, 20_000)
    bins = 4
    assert_ranks_close(values, bins, Fraction(1, 10), 8, 0.01)


def test_without_noise_the_edges_are_the_grid_quantiles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantiles, "discrete_gaussian_noise", zero_noise)
    values = np.array([1.0, 2.0, 3.0, 4.0])
    # Grid boundaries 0, 1, …, 8; edge j is the first boundary b with #(values < b) ≥ j·n/bins.
    two = dp_quantile_edges(values, lower=0, upper=8, bins=2, rho=Fraction(1), grid=8)
    assert two.edges == (0.0, 3.0, 8.0)
    four = dp_quantile_edges(values, lower=0, upper=8, bins=4, rho=Fraction(1), grid=8)
    assert four.edges == (0.0, 2.0, 3.0, 4.0, 8.0)


def test_equal_quantiles_are_merged_into_fewer_bins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantiles, "discrete_gaussian_noise", zero_noise)
    result = dp_quantile_edges(np.full(100, 5.0), lower=0, upper=10, bins=4, rho=Fraction(1))
    # Every row is in the cell [5, 5 + 10/1024): all three quantiles land on its right boundary.
    assert result.edges == (0.0, 5.0 + 10 / 1024, 10.0)
    assert result.bins == 2 and result.merged


def test_the_value_at_upper_goes_in_the_last_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantiles, "discrete_gaussian_noise", zero_noise)
    values = np.array([0.0, 0.0, 8.0, 8.0])
    result = dp_quantile_edges(values, lower=0, upper=8, bins=2, rho=Fraction(1), grid=8)
    assert result.edges == (0.0, 1.0, 8.0)


def test_integer_grid_has_integer_cells() -> None:
    assert grid_edges(0, 5, 1024, integer=True).tolist() == [0, 1, 2, 3, 4, 5]
    wide = grid_edges(-3, 2000, 1024, integer=True)
    assert wide[0] == -3 and wide[-1] == 2000
    assert np.all(wide == np.round(wide)) and np.all(np.diff(wide) > 0)
    assert wide.size - 1 <= 1024


def test_no_noise_with_one_bin_and_no_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> IntArray:
        raise AssertionError("bins = 1 must not measure anything")

    monkeypatch.setattr(quantiles, "discrete_gaussian_noise", refuse)
    result = dp_quantile_edges(np.array([1.0]), lower=0, upper=2, bins=1, rho=Fraction(1))
    assert result.edges == (0.0, 2.0) and result.cost.rho == 0


@pytest.mark.parametrize(("grid", "levels"), [(1024, 11), (1000, 11), (3, 3), (2, 2), (1, 1)])
def test_every_level_gets_sigma2_levels_over_two_rho(
    monkeypatch: pytest.MonkeyPatch, grid: int, levels: int
) -> None:
    calls: list[tuple[Fraction, int]] = []

    def spy(sigma2: Fraction, shape: int, source: random.Random | None = None) -> IntArray:
        calls.append((sigma2, shape))
        return np.zeros(shape, dtype=np.int64)

    monkeypatch.setattr(quantiles, "discrete_gaussian_noise", spy)
    rho = Fraction(3, 7)
    result = dp_quantile_edges(normal_values(50, 1), lower=0, upper=100, bins=3, rho=rho, grid=grid)
    assert len(calls) == levels
    assert all(sigma2 == Fraction(levels) / (2 * rho) for sigma2, _ in calls)
    # Composition: the levels' ρ = 1/(2σ²) add up to exactly the ρ charged.
    assert sum((1 / (2 * sigma2) for sigma2, _ in calls), Fraction(0)) == rho == result.cost.rho
    sizes = [size for _, size in calls]
    assert sizes[0] == grid and sizes[-1] == 1
    assert all(b == math.ceil(a / 2) for a, b in itertools.pairwise(sizes))


@pytest.mark.parametrize("cells", [1, 2, 3, 13, 64])
def test_consistent_leaves_are_the_least_squares_solution(cells: int) -> None:
    rng = np.random.default_rng(cells)
    tree = _tree_levels(rng.integers(0, 20, cells))
    noisy = [level + rng.integers(-4, 5, level.size) for level in tree]
    rows, measured = [], []
    for depth, level in enumerate(noisy):
        for j, value in enumerate(level.tolist()):
            row = np.zeros(cells)
            row[j * 2**depth : (j + 1) * 2**depth] = 1.0
            rows.append(row)
            measured.append(value)
    expected = np.linalg.lstsq(np.array(rows), np.array(measured, dtype=float), rcond=None)[0]
    np.testing.assert_allclose(_consistent_leaves(noisy, 3.0), expected, atol=1e-9)


def test_runs_with_the_secure_source() -> None:
    result = dp_quantile_edges(normal_values(200, 2), lower=0, upper=100, bins=4, rho=Fraction(1))
    assert result.edges[0] == 0 and result.edges[-1] == 100


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"lower": 1, "upper": 1}, ValueError),
        ({"lower": 2, "upper": 1}, ValueError),
        ({"lower": 0, "upper": math.inf}, ValueError),
        ({"bins": 0}, ValueError),
        ({"bins": 2.5}, ValueError),
        ({"rho": Fraction(0)}, ValueError),
        ({"rho": Fraction(-1)}, ValueError),
        ({"rho": 0.5}, TypeError),
        ({"grid": 0}, ValueError),
        ({"integer": True, "lower": 0.5}, ValueError),
        ({"lower": -1e308, "upper": 1e308}, ValueError),
        ({"lower": 1.0, "upper": 1.0 + 1e-13}, ValueError),
        ({"integer": True, "lower": 0, "upper": 2.0**60}, ValueError),
    ],
)
def test_refusals(kwargs: dict[str, object], error: type[Exception]) -> None:
    arguments: dict[str, object] = {"lower": 0, "upper": 10, "bins": 3, "rho": Fraction(1)}
    arguments.update(kwargs)
    with pytest.raises(error):
        dp_quantile_edges(np.array([1.0]), **arguments)  # type: ignore[arg-type]


def test_values_outside_the_bounds_are_counted_not_shown() -> None:
    values = np.array([1.0, 2.0, 123456.789, -98765.4321])
    with pytest.raises(ValueError, match="2 rows lie outside") as refused:
        dp_quantile_edges(values, lower=0, upper=10, bins=3, rho=Fraction(1))
    assert "123456" not in str(refused.value) and "98765" not in str(refused.value)
    with pytest.raises(ValueError, match="1 missing"):
        dp_quantile_edges(np.array([1.0, np.nan]), lower=0, upper=10, bins=3, rho=Fraction(1))
    with pytest.raises(ValueError, match="one-dimensional"):
        dp_quantile_edges(np.ones((2, 2)), lower=0, upper=10, bins=3, rho=Fraction(1))


def test_counts_summed_over_batches_give_the_same_release() -> None:
    """Streaming: counting a column batch by batch and releasing from the summed counts is the
    same mechanism as releasing from all the values (same noise draws, same edges)."""
    values = np.random.default_rng(3).gamma(2.0, 10.0, size=5_000).clip(0, 200)
    grid = QuantileGrid(0.0, 200.0, 256)
    summed = sum(grid.count(part) for part in np.array_split(values, 7))
    assert summed.tolist() == grid.count(values).tolist()
    one_shot = dp_quantile_edges(
        values, lower=0.0, upper=200.0, bins=8, rho=Fraction(1), grid=256, source=random.Random(9)
    )
    streamed = dp_quantile_edges_from_counts(
        summed, grid=grid, bins=8, rho=Fraction(1), source=random.Random(9)
    )
    assert streamed == one_shot
    with pytest.raises(ValueError, match="one per grid cell"):
        dp_quantile_edges_from_counts(summed[:-1], grid=grid, bins=8, rho=Fraction(1))


def test_log_grids_are_public_and_integer_log_grids_distinct() -> None:
    grid = QuantileGrid(-1e15, 1e15, 1 << 16, scale="log")
    bounds = grid.boundaries
    assert bounds[0] == -1e15 and bounds[-1] == 1e15 and np.all(np.diff(bounds) > 0)
    ratio = bounds[-1] / bounds[-2]
    assert 1.0005 < ratio < 1.002  # cells about 0.1 % of the value wide far from 0
    integer = QuantileGrid(-(10**15), 10**15, 1 << 16, integer=True, scale="log").boundaries
    assert np.all(np.diff(integer) > 0) and np.all(integer == np.round(integer))
    assert 0.0 in integer.tolist() and 1.0 in integer.tolist()
