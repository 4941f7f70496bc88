"""Privacy per unit of at most k rows: every mechanism's releases, stated and checked.

Neighbours here are tables truncated to k rows per unit (engine.privacy_unit.truncate) that
differ by one unit's kept rows. The checks:

* brute force: for small random tables and every unit, removing that unit's kept rows moves
  every measured contingency table by at most the sensitivity the run recorded (L2, and L1 for
  the L1-error quality scores the selections use), and the bound k is attained;
* the per-row statistics behind the other releases (InDif, R-scores, Kendall numerators, PPSyn
  contributions) move by at most k times their row-level sensitivity;
* every recorded ρ is sensitivity²/(2σ²) and they add up to the ρ given;
* the unit-level run is the row-level run at ρ/k², seed for seed, restated;
* with k = 1 (every unit one row) the release equals today's row-level run, seed for seed.
"""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from engine.domain import Dataset, Domain
from engine.marginals import count_marginal
from engine.mechanisms import MECHANISMS, SynthesisResult, get_mechanism
from engine.mechanisms.base import MAX_NOISE_SIGMA2, ProgressReporter, per_unit_result
from engine.mechanisms.dpcopula.copula import pair_kendall_numerators
from engine.mechanisms.ppsyn.mechanism import partition_contribution
from engine.mechanisms.privmrf.parts import r_score, r_score_floor
from engine.mechanisms.privsyn.parts import indif_floor
from engine.privacy_unit import (
    row_hashes,
    row_level_rho,
    truncate,
    unit_level_epsilon,
    unit_level_rho,
)

KEY = "0123456789abcdef"
DOMAIN = Domain(("a", "b", "c"), (3, 4, 2))

FAST: dict[str, dict[str, Any]] = {
    "mst": {"iterations": 60, "selection_iterations": 20},
    "aim": {"iterations": 60, "round_iterations": 10, "rounds": 5},
    "ppsyn": {"iterations": 60, "round_iterations": 10, "rounds": 4},
    "privmrf": {"iterations": 40, "round_iterations": 10},
    "privsyn": {"iterations": 10, "consistency_rounds": 20},
}


def _params(name: str) -> Any:
    return get_mechanism(name).validate_params(FAST.get(name, {}))


def _units_table(
    rng: np.random.Generator, rows: int, units: int, k: int
) -> tuple[pd.DataFrame, Dataset, npt.NDArray[np.bool_]]:
    """A random table with a unit column, one planted unit with k+2 identical rows (so the worst
    case, all of a unit's kept rows in one cell, occurs), truncated to k rows per unit."""
    frame = pd.DataFrame(
        {
            "unit": [f"u{i}" for i in rng.integers(0, units, rows)],
            "a": rng.integers(0, 3, rows),
            "b": rng.integers(0, 4, rows),
            "c": rng.integers(0, 2, rows),
        }
    )
    planted = pd.DataFrame({"unit": ["planted"] * (k + 2), "a": 1, "b": 2, "c": 0})
    frame = pd.concat([frame, planted], ignore_index=True)
    kept = truncate(frame["unit"], row_hashes(frame, KEY), k).keep
    frame = frame[kept].reset_index(drop=True)
    data = Dataset(DOMAIN, frame[["a", "b", "c"]].to_numpy(dtype=np.int64))
    return frame, data, kept


def _mapped_table(data: Dataset, attributes: tuple[str, ...], maps: Any, shape: Any) -> Any:
    """The exact table a measurement measured: its attributes' codes through its axis maps."""
    if maps is None or all(m is None for m in maps):
        return count_marginal(data, attributes).astype(np.int64)
    table = np.zeros(shape, dtype=np.int64)
    index = tuple(
        data.column(a) if m is None else np.asarray(m)[data.column(a)]
        for a, m in zip(attributes, maps, strict=True)
    )
    np.add.at(table, index, 1)
    return table


def _run(name: str, data: Dataset, rho: Fraction, k: int, seed: int = 3) -> SynthesisResult:
    mechanism = get_mechanism(name)
    return mechanism.run(
        data,
        rho,
        _params(name),
        rng=np.random.default_rng(seed),
        noise_source=random.Random(seed),
        contribution_bound=k,
    )


@pytest.mark.parametrize("name", sorted(MECHANISMS))
@pytest.mark.parametrize("k", [2, 4])
def test_every_measurement_moves_at_most_its_recorded_sensitivity_per_unit(
    name: str, k: int
) -> None:
    rng = np.random.default_rng(k * 101 + len(name))
    frame, data, _ = _units_table(rng, 150, 40, k)
    rho = Fraction(2)
    result = _run(name, data, rho, k)
    assert result.rho_spent == rho and result.rho_used == rho
    total = Fraction(0)
    for m in result.measurements:
        assert m.sensitivity == k  # every contingency table: per-row 1, per unit k
        assert m.rho == m.sensitivity**2 / (2 * m.sigma2)
        total += m.rho
    for r in result.releases:
        assert r.rho == r.sensitivity**2 / (2 * r.sigma2)
        total += r.rho
    for s in result.selections:
        assert Fraction(s.epsilon) ** 2 / 8 <= s.rho
        total += s.rho
    assert total == rho
    maps = result.axis_maps or tuple((None,) * len(m.attributes) for m in result.measurements)
    worst = 0.0
    for unit in frame["unit"].unique():
        keep = (frame["unit"] != unit).to_numpy()
        neighbour = Dataset(DOMAIN, data.codes[keep])
        for m, entry in zip(result.measurements, maps, strict=True):
            shape = m.noisy_counts.shape
            before = _mapped_table(data, m.attributes, entry, shape)
            after = _mapped_table(neighbour, m.attributes, entry, shape)
            change = np.asarray(before - after, dtype=np.float64)
            l2 = float(np.sqrt((change**2).sum()))
            assert l2 <= float(m.sensitivity) + 1e-9
            # The L1-error quality scores of the selections move by at most the L1 change.
            assert float(np.abs(change).sum()) <= k
            worst = max(worst, l2)
    # The planted unit's k identical kept rows move one cell by k: the bound is attained.
    assert worst == pytest.approx(k)


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_the_unit_level_run_is_the_row_level_run_at_rho_over_k_squared(name: str) -> None:
    """Same seeds: identical synthetic rows and noisy values; charges scaled by k and k²."""
    k = 3
    _, data, _ = _units_table(np.random.default_rng(7), 120, 30, k)
    rho = Fraction(3, 2)
    unit = _run(name, data, rho, k)
    row = _run(name, data, row_level_rho(rho, k), 1)
    assert np.array_equal(unit.codes, row.codes)
    assert len(unit.measurements) == len(row.measurements)
    for u, r in zip(unit.measurements, row.measurements, strict=True):
        assert np.array_equal(u.noisy_counts, r.noisy_counts)
        assert (u.sigma2, u.sensitivity, u.rho) == (r.sigma2, k * r.sensitivity, k * k * r.rho)
    for ug, rg in zip(unit.releases, row.releases, strict=True):
        assert (ug.sigma2, ug.sensitivity, ug.rho) == (rg.sigma2, k * rg.sensitivity, 9 * rg.rho)
    for us, rs in zip(unit.selections, row.selections, strict=True):
        assert us.sensitivity == k * rs.sensitivity and us.rho == k * k * rs.rho
        assert us.epsilon == pytest.approx(k * rs.epsilon, rel=1e-15)
    assert len(unit.releases) == len(row.releases)
    assert len(unit.selections) == len(row.selections)
    assert row.rho_spent * k * k == unit.rho_spent == rho
    assert unit.extra == {**row.extra, "max_rows_per_unit": k}
    assert "max_rows_per_unit" not in row.extra


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_one_row_per_unit_at_k_1_is_todays_row_level_release(name: str) -> None:
    """A table where every unit has one row, truncated at k = 1, releases exactly what the
    row-level run on the same rows releases, seed for seed (and run() without the argument is
    that run)."""
    rng = np.random.default_rng(19)
    rows = 200
    frame = pd.DataFrame(
        {
            "unit": [f"person{i}" for i in range(rows)],
            "a": rng.integers(0, 3, rows),
            "b": rng.integers(0, 4, rows),
            "c": rng.integers(0, 2, rows),
        }
    )
    kept = truncate(frame["unit"], row_hashes(frame, KEY), 1)
    assert kept.keep.all() and kept.rows_removed == 0
    data = Dataset(DOMAIN, frame[["a", "b", "c"]].to_numpy(dtype=np.int64))
    mechanism = get_mechanism(name)
    today = mechanism.run(
        data,
        Fraction(1),
        _params(name),
        rng=np.random.default_rng(4),
        noise_source=random.Random(4),
    )
    per_unit = _run(name, Dataset(DOMAIN, data.codes[kept.keep]), Fraction(1), 1, seed=4)
    assert np.array_equal(today.codes, per_unit.codes)
    assert today.rho_spent == per_unit.rho_spent == 1
    for a, b in zip(today.measurements, per_unit.measurements, strict=True):
        assert np.array_equal(a.noisy_counts, b.noisy_counts)
        assert (a.attributes, a.sigma2, a.sensitivity, a.rho) == (
            b.attributes,
            b.sigma2,
            b.sensitivity,
            b.rho,
        )
    assert today.selections == per_unit.selections
    assert today.releases == per_unit.releases
    assert per_unit_result(today, 1) is today


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_k_1_runs_the_mechanism_at_the_given_rho_and_returns_its_result_unchanged(
    name: str,
) -> None:
    """k = 1 is today's release: ``run(..., contribution_bound=1)`` returns exactly what the
    mechanism itself (``_synthesize``, which this branch does not change) returns at the ρ given,
    seed for seed: same rows, noisy values and charges. The test above compares run() with
    run(); this one would fail if the wrapper changed the ρ, the noise or the charges at k = 1
    (measured once against main's run() too: identical digests for all eight methods)."""
    rng = np.random.default_rng(23)
    codes = np.stack([rng.integers(0, s, 150) for s in DOMAIN.sizes], axis=1).astype(np.int64)
    data = Dataset(DOMAIN, codes)
    mechanism = get_mechanism(name)
    rho = Fraction(7, 5)
    ran = _run(name, data, rho, 1, seed=6)
    direct = mechanism._synthesize(
        data,
        rho,
        _params(name),
        rng=np.random.default_rng(6),
        rows=None,
        max_rows=None,
        progress=ProgressReporter(None, mechanism.milestones),
        noise_source=random.Random(6),
    )
    assert np.array_equal(ran.codes, direct.codes)
    assert len(ran.measurements) == len(direct.measurements)
    for a, b in zip(ran.measurements, direct.measurements, strict=True):
        assert np.array_equal(a.noisy_counts, b.noisy_counts)
        assert (a.attributes, a.sigma2, a.sensitivity, a.rho) == (
            b.attributes,
            b.sigma2,
            b.sensitivity,
            b.rho,
        )
    assert ran.selections == direct.selections and ran.releases == direct.releases
    assert ran.rho_used == direct.rho_used == rho
    assert dict(ran.extra) == dict(direct.extra)


def test_previews_and_budget_checks_are_stated_per_unit() -> None:
    mechanism = get_mechanism("mst")
    params = mechanism.validate_params({})
    rho = Fraction(1)
    row = mechanism.first_noise(DOMAIN, params, rho / 25)
    unit = mechanism.noise_preview(DOMAIN, params, rho, contribution_bound=5)
    assert mechanism.noise_preview(DOMAIN, params, rho) == mechanism.first_noise(
        DOMAIN, params, rho
    )
    for u, r in zip(unit, row, strict=True):
        assert (u.sigma2, u.sensitivity, u.rho) == (r.sigma2, 5 * r.sensitivity, 25 * r.rho)
    # A ρ that is enough per row can be too small per unit of 1000 rows (σ ∝ k).
    from engine.mechanisms import DomainRefused

    # 10 times the smallest ρ the row level accepts (smallest_release_rho is linear in ρ).
    tiny = 10 / (2 * MAX_NOISE_SIGMA2 * mechanism.smallest_release_rho(DOMAIN, params, rho))
    mechanism.check_budget(DOMAIN, params, tiny)
    with pytest.raises(DomainRefused):
        mechanism.check_budget(DOMAIN, params, tiny, contribution_bound=1000)


def test_contribution_bound_is_validated() -> None:
    data = Dataset(DOMAIN, np.zeros((5, 3), dtype=np.int64))
    mechanism = get_mechanism("independent")
    for bad in (0, -1, 1001, True, 2.0):
        with pytest.raises(ValueError, match="contribution_bound"):
            mechanism.run(
                data,
                Fraction(1),
                mechanism.validate_params({}),
                rng=np.random.default_rng(0),
                contribution_bound=bad,  # type: ignore[arg-type]
            )


def test_unit_level_epsilon_never_exceeds_the_charge() -> None:
    from engine.selection import epsilon_for_rho

    rng = np.random.default_rng(0)
    for _ in range(2000):
        rho = Fraction(int(rng.integers(1, 10**9)), int(rng.integers(1, 10**9)))
        k = int(rng.integers(2, 1001))
        eps = epsilon_for_rho(rho)
        unit = unit_level_epsilon(eps, rho, k)
        assert Fraction(unit) ** 2 / 8 <= unit_level_rho(rho, k)
        assert unit == pytest.approx(k * eps, rel=1e-15)


# --- The statistics behind the other releases: per row Δ, per unit k·Δ (brute force) ----------


def _removals(table: npt.NDArray[np.int64], k: int) -> list[npt.NDArray[np.int64]]:
    """Every table obtained by removing at most k rows (any cells) from ``table``."""
    cells = [i for i, c in enumerate(table.ravel()) for _ in range(int(c))]
    out = []
    for size in range(1, k + 1):
        for chosen in set(itertools.combinations(cells, size)):
            other = table.ravel().copy()
            for i in chosen:
                other[i] -= 1
            out.append(other.reshape(table.shape))
    return out


@pytest.mark.parametrize("k", [2, 3])
def test_indif_r_score_and_contribution_move_at_most_k_times_their_row_sensitivity(k: int) -> None:
    rng = np.random.default_rng(k)
    model = np.full((2, 3), 1.5)
    groups = np.array([[0, 0, 1], [1, 2, 2]])
    for _ in range(25):
        table = rng.integers(0, 4, (2, 3)).astype(np.int64)
        for other in _removals(table, k):
            # PrivSyn: ⌊g·InDif⌋, per row 4g.
            assert abs(indif_floor(table, 5) - indif_floor(other, 5)) <= 4 * 5 * k
            # PrivMRF: R-score per row 2, its floor on grid g per row 2g.
            assert abs(r_score(table) - r_score(other)) <= 2 * k + 1e-9
            assert abs(r_score_floor(table, 7) - r_score_floor(other, 7)) <= 2 * 7 * k
            # PPSyn: contribution per row 1.
            a = partition_contribution(table, model, groups)
            b = partition_contribution(other, model, groups)
            assert abs(a - b) <= k + 1e-9


@pytest.mark.parametrize("k", [2, 4])
def test_kendall_numerator_moves_at_most_2k_times_n_minus_1(k: int) -> None:
    """DPCopula's S on all rows (n ≤ n̂): removing a unit's ≤ k rows moves S by at most
    k·2(n̂ − 1) (here with n̂ = n, the largest the rows allow)."""
    rng = np.random.default_rng(k + 40)
    for _ in range(40):
        n = int(rng.integers(k + 2, 14))
        x = rng.integers(0, 3, n)
        y = rng.integers(0, 3, n)
        part = np.zeros(n, dtype=np.int64)
        s = int(pair_kendall_numerators(part, x, y, 1, 3, 3)[0])
        for size in range(1, k + 1):
            for removed in itertools.combinations(range(n), size):
                keep = np.setdiff1d(np.arange(n), removed)
                t = pair_kendall_numerators(part[keep], x[keep], y[keep], 1, 3, 3)[0]
                assert abs(s - int(t)) <= k * 2 * (n - 1)


def test_a_histogram_of_k_rows_moves_by_at_most_k_and_exactly_k_in_one_cell() -> None:
    """The bound the counts use cannot be tightened: √(Σ c_i²) ≤ Σ c_i = k, equality at one cell."""
    for k in range(1, 7):
        worst = 0.0
        for cells in itertools.product(range(3), repeat=k):
            counts = np.bincount(np.array(cells), minlength=3)
            worst = max(worst, math.sqrt(float((counts**2).sum())))
        assert worst == k
