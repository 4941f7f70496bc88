"""Value profiles: drawing values inside bins from a public profile, and learned columns.

Decoding is post-processing with the job's seeded rng, so every test here is deterministic.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from engine.columns.numeric import NumericColumn
from engine.columns.profile import profile_draws
from engine.columns.spec import QuantileBins, parse_column
from engine.columns.temporal import DateColumn, DatetimeColumn
from engine.discovery.cost import DiscoveryCost
from engine.discovery.learned import PROFILE_POINTS, LearnedBins
from engine.tables.encoding import SchemaError, SchemaSpec


def _bins_of(column: NumericColumn, values: np.ndarray) -> np.ndarray:
    return column.encode(pd.Series(values), ())


def test_a_profile_shapes_values_inside_a_coarse_bin() -> None:
    """Log-normal values in four bins: with their percentiles as the profile, the decoded
    values follow the data inside each bin (KS well under the uniform draw's)."""
    rng = np.random.default_rng(1)
    values = rng.lognormal(0.0, 1.0, 40_000)
    low, high = float(values.min()), float(values.max())
    edges = tuple(np.quantile(values, [0, 0.25, 0.5, 0.75, 1]).tolist())
    percentiles = np.percentile(values, np.arange(PROFILE_POINTS))
    percentiles[0], percentiles[-1] = low, high
    plain = NumericColumn("x", edges)
    shaped = NumericColumn("x", edges, profile=tuple(percentiles.tolist()))
    codes = plain.encode(pd.Series(values), ())
    uniform = plain.decode(codes, np.random.default_rng(2)).to_numpy(dtype=float)
    profiled = shaped.decode(codes, np.random.default_rng(2)).to_numpy(dtype=float)
    assert np.all(profiled >= low) and np.all(profiled <= high)
    assert np.array_equal(shaped.encode(pd.Series(profiled), ()), codes)  # same bins
    ks_uniform = stats.ks_2samp(values, uniform).statistic
    ks_profile = stats.ks_2samp(values, profiled).statistic
    assert ks_profile < 0.02 < ks_uniform, (ks_profile, ks_uniform)


def test_integer_and_decimal_columns_round_inside_the_bin() -> None:
    profile = tuple(np.linspace(0.5, 10.5, PROFILE_POINTS).tolist())
    column = NumericColumn("n", (0.5, 3.5, 10.5), integer=True, profile=profile)
    out = column.decode(np.array([0] * 500 + [1] * 500), np.random.default_rng(3))
    first, second = out[:500].to_numpy(dtype=int), out[500:].to_numpy(dtype=int)
    assert set(first) == {1, 2, 3} and set(second) == set(range(4, 11))
    money = NumericColumn(
        "m", (0.005, 1.005), decimals=2, profile=tuple(np.linspace(0.005, 1.005, 11).tolist())
    )
    drawn = money.decode(np.zeros(300, dtype=np.int64), np.random.default_rng(4))
    cents = drawn.to_numpy(dtype=float) * 100
    assert np.allclose(cents, np.round(cents)) and drawn.min() >= 0.01 and drawn.max() <= 1.0


def test_a_point_mass_in_the_profile_is_drawn_exactly() -> None:
    """Half the rows at the lower edge (a clamped tail or a floor at 0): the profile's first
    half repeats the edge, so half the decoded values are exactly it."""
    knots = [0.0] * 51 + list(np.linspace(0.0, 10.0, 51)[1:])
    column = NumericColumn("x", (0.0, 10.0), profile=tuple(knots))
    out = column.decode(np.zeros(4000, dtype=np.int64), np.random.default_rng(5))
    share = float((out.to_numpy(dtype=float) == 0.0).mean())
    assert 0.47 < share < 0.53


def test_a_bin_the_profile_gives_no_mass_is_drawn_uniformly() -> None:
    edges = np.array([0.0, 1.0, 2.0])
    profile = np.array([0.0, 0.5, 1.0])  # all mass in the first bin
    bins = np.array([1] * 1000)
    out = profile_draws(edges, profile, bins, np.random.default_rng(6).random(1000))
    assert out.min() >= 1.0 and out.max() <= 2.0 and 0.4 < out.mean() - 1.0 < 0.6


def test_profiles_round_trip_and_are_checked() -> None:
    entry = {"name": "x", "type": "numeric", "bins": [0, 1, 2], "profile": [0, 0.2, 2]}
    column = parse_column(entry, 0)
    assert isinstance(column, NumericColumn) and column.to_json()["profile"] == [0.0, 0.2, 2.0]
    for bad, message in (
        ([0, 3], "from the first bin edge"),
        ([0, 1.5, 1, 2], "non-decreasing"),
        ([0], "2 to 1001 points"),
        ("x", "list of numbers"),
    ):
        with pytest.raises(SchemaError, match=message):
            parse_column({**entry, "profile": bad}, 0)
    with pytest.raises(SchemaError, match="unknown keys profile"):
        parse_column({**entry, "bins": 2, "min": 0, "max": 2}, 0)
    dated = {
        "name": "d",
        "type": "date",
        "bins": ["2020-01-01", "2020-02-01", "2020-03-31"],
        "profile": ["2020-01-01", "2020-01-20", "2020-03-31"],
    }
    parsed = parse_column(dated, 0)
    assert isinstance(parsed, DateColumn) and parsed.to_json()["profile"] == dated["profile"]
    with pytest.raises(SchemaError, match="a profile needs bins given as a list"):
        parse_column({"name": "d", "type": "date", "min": "2020-01-01", "max": "2020-12-31",
                      "bins": 3, "profile": ["2020-01-01", "2020-12-31"]}, 0)  # fmt: skip


def _pending(entry: dict[str, object]) -> QuantileBins:
    spec = SchemaSpec.from_json({"columns": [entry]})
    (pending,) = spec.pending
    assert isinstance(pending, QuantileBins)
    return pending


def test_a_month_column_learns_in_months_and_resolves_to_month_starts() -> None:
    """A %b-%Y column counts in months since 1970 (its resolution); its learned edges, halfway
    between months, resolve to month starts and the last month's last day."""
    pending = _pending(
        {"name": "m", "type": "date", "format": "%b-%Y", "min": "1900-01-01",
         "max": "2099-12-31", "bins": {"quantiles": 16, "range": True}}
    )  # fmt: skip
    assert pending.period == "month"
    window = pending.window()
    assert window.step == 1.0 and window.scale == "linear"
    units = pending.learned_units(pd.Series(["Jan-2018", "Mar-2018", "NA"]), ("NA",))
    assert units[:2].tolist() == [576.0, 578.0] and np.isnan(units[2])
    cost = DiscoveryCost("x", Fraction(1))
    learned = LearnedBins((575.5, 576.5, 577.5, 578.5), None, True, True, 16, cost)
    column = pending.resolve_learned(learned)
    assert isinstance(column, DateColumn)
    assert column.to_json()["bins"] == ["2018-01-01", "2018-02-01", "2018-03-01", "2018-03-31"]
    assert column.clip and column.profile is None


def test_a_datetime_profile_resolves_inside_its_periods() -> None:
    pending = _pending(
        {"name": "t", "type": "datetime", "min": "2000-01-01T00:00:00",
         "max": "2030-12-31T23:59:59", "bins": {"quantiles": 4, "range": True}}
    )  # fmt: skip
    assert pending.period == "second"
    start = float(pd.Timestamp("2013-01-01").timestamp())
    edges = (start - 0.5, start + 86_400 - 0.5, start + 2 * 86_400 - 0.5)
    profile = tuple(np.linspace(edges[0], edges[-1], PROFILE_POINTS).tolist())
    learned = LearnedBins(edges, profile, False, True, 4, DiscoveryCost("x", Fraction(1)))
    column = pending.resolve_learned(learned)
    assert isinstance(column, DatetimeColumn)
    assert column.to_json()["bins"] == ["2013-01-01T00:00:00", "2013-01-02T00:00:00",
                                        "2013-01-02T23:59:59"]  # fmt: skip
    out = column.decode(np.array([0, 1] * 200), np.random.default_rng(7))
    assert out.min() >= pd.Timestamp("2013-01-01") and out.max() < pd.Timestamp("2013-01-03")
    again = parse_column(json.loads(json.dumps(column.to_json())), 0)
    assert again == column


def test_a_decimal_column_resolves_with_tidy_halfway_edges() -> None:
    pending = _pending(
        {"name": "p", "type": "numeric", "decimals": 1, "min": -1e15, "max": 1e15,
         "bins": {"quantiles": 4, "range": True}}
    )  # fmt: skip
    window = pending.window()
    assert window.step == pytest.approx(0.1)
    edges = (59.95000000000001, 80.04999999999, 100.05)
    learned = LearnedBins(edges, None, False, True, 4, DiscoveryCost("x", Fraction(1)))
    column = pending.resolve_learned(learned)
    assert column.to_json()["bins"] == [59.95, 80.05, 100.05]
    assert column.encode(pd.Series(["100.0", "60.0", "5"]), ()).tolist() == [1, 0, 0]
