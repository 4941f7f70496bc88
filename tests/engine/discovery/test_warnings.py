"""Domain warnings: every rule fires on the domain it is about, and not on a sensible one.

Deterministic: the schemas are written out (the edges a broken discovery released in issue 23
among them); the one mechanism run uses a seeded source and its public threshold only.
"""

from __future__ import annotations

import json
import random
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from engine.accounting import rho_from_epsilon_delta
from engine.discovery.categories import discover_open_set
from engine.discovery.plan import Discovered
from engine.discovery.tails import smallest_tail_threshold
from engine.discovery.warnings import (
    CATEGORY_THRESHOLD_ROWS,
    CODES,
    END_BIN_FACTOR,
    RANGE_FACTOR,
    REFERENCE_DELTA,
    SMALL_EPSILON,
    DomainWarning,
    domain_warnings,
)
from engine.tables.encoding import TableSchema

FIXTURES = Path(__file__).parents[2] / "fixtures"


def _schema(*columns: dict[str, Any], discovered: tuple[str, ...] = ()) -> TableSchema:
    raw: dict[str, Any] = {"columns": list(columns)}
    if discovered:
        raw["discovered"] = list(discovered)
    return TableSchema.from_json(raw)


def _codes(warnings: tuple[DomainWarning, ...]) -> list[tuple[str, str | None]]:
    return [(w.code, w.column) for w in warnings]


def _discovered(**categories: Any) -> Discovered:
    return Discovered(edges={}, categories=categories, allocations=())


# ------------------------------------------------------------------ nothing to say


def test_a_sensible_domain_gets_no_warning() -> None:
    # The people fixture (declared) plus discovered columns whose learned domains look like the
    # data: quantile bins of a long-tailed income (last bin 142x the median inner bin, outer
    # span 22x the inner one: both natural for a long tail), a year with one bin per value, a
    # date range by months.
    people = json.loads((FIXTURES / "people-schema.json").read_text())
    income = [0, 3_000, 8_000, 12_000, 15_000, 18_000, 21_000, 25_000, 30_000, 600_000]
    schema = _schema(
        *people["columns"],
        {"name": "salary", "type": "numeric", "bins": income, "clip": True},
        {"name": "year", "type": "numeric", "integer": True,
         "bins": [2010, 2011, 2012, 2013, 2014, 2015, 2016, 2017]},
        {"name": "joined", "type": "date",
         "bins": ["2019-01-01", "2019-02-01", "2019-03-01", "2019-04-01", "2019-04-30"]},
        {"name": "state", "type": "categorical", "categories": ["MN", "WI"], "other": "Other"},
        discovered=("salary", "year", "joined", "state"),
    )  # fmt: skip
    found = discover_open_set(
        {"MN": 5_000, "WI": 4_000},
        max_categories=10,
        rho=Fraction(1, 10),
        delta=Fraction(1, 10**6),
        source=random.Random(3),
    )
    assert found.threshold <= CATEGORY_THRESHOLD_ROWS
    warnings = domain_warnings(
        schema, discovered=_discovered(state=found), budget_rho=Fraction(1), discovery_rho=None
    )
    assert warnings == ()


# ------------------------------------------------------------------ wide end bins


def test_a_learned_year_whose_last_bin_runs_to_2e11_is_flagged() -> None:
    # issue 23: year's last bin was [2017, 2.59e11].
    edges = [2010, 2011, 2012, 2013, 2014, 2015, 2016, 2017, 259_262_625_691]
    schema = _schema(
        {"name": "year", "type": "numeric", "integer": True, "bins": edges, "clip": True},
        discovered=("year",),
    )
    (end, wide) = domain_warnings(schema)
    assert (end.code, end.column) == ("wide_end_bin", "year")
    assert end.message == (
        "column 'year': its last bin [2017, 2.59e11] is 2.6e11× wider than the median bin: "
        "declare max, or give discovery more ρ"
    )
    assert (wide.code, wide.column) == ("wide_range", "year")
    assert "[2010, 2.59e11]" in wide.message and "[2011, 2017]" in wide.message


def test_first_bin_and_the_threshold_itself() -> None:
    # A body measurement whose first bin starts at -7.8e11 (issue 23); at exactly the factor
    # nothing is said, just above it is.
    below = _schema({"name": "mass", "type": "numeric", "bins": [-7.8e11, 3000, 3500, 4000, 6000]})
    (warning,) = domain_warnings(below)
    assert warning.code == "wide_end_bin" and "its first bin [-7.8e11, 3000]" in warning.message
    assert "declare a tighter min or more bins" in warning.message  # declared, not learned
    at = [10 - END_BIN_FACTOR, 10, 11, 12, 13]
    assert domain_warnings(_schema({"name": "x", "type": "numeric", "bins": at})) == ()
    above = [10 - END_BIN_FACTOR - 0.5, 10, 11, 12, 13]
    assert _codes(domain_warnings(_schema({"name": "x", "type": "numeric", "bins": above}))) == [
        ("wide_end_bin", "x")
    ]


def test_two_bins_have_no_inner_bin_to_compare_with() -> None:
    schema = _schema({"name": "x", "type": "numeric", "bins": [0, 1, 1e12]}, discovered=("x",))
    assert domain_warnings(schema) == ()


def test_dates_are_shown_as_dates() -> None:
    bins = ["2010-01-01", "2010-02-01", "2010-03-01", "2010-04-01", "2099-12-31"]
    schema = _schema({"name": "day", "type": "date", "bins": bins}, discovered=("day",))
    codes = _codes(domain_warnings(schema))
    assert codes == [("wide_end_bin", "day"), ("wide_range", "day")]
    message = domain_warnings(schema)[0].message
    assert "its last bin [2010-04-01, 2099-12-31]" in message


# ------------------------------------------------------------------ wide learned ranges


def test_a_latitude_range_stretched_by_a_false_hit_is_flagged_only_when_learned() -> None:
    # issue 23: latitude's learned edges.
    edges = [40.88, 44.94, 44.99, 45.04, 70.90]
    learned = _schema({"name": "lat", "type": "numeric", "bins": edges}, discovered=("lat",))
    codes = _codes(domain_warnings(learned))
    assert ("wide_range", "lat") in codes
    (wide,) = [w for w in domain_warnings(learned) if w.code == "wide_range"]
    assert wide.message == (
        "column 'lat': the range [40.88, 70.9] is 300× wider than its inner quantiles "
        "[44.94, 45.04]: declare min and max, or give discovery more ρ"
    )
    declared = _schema({"name": "lat", "type": "numeric", "bins": edges})
    assert ("wide_range", "lat") not in _codes(domain_warnings(declared))


def test_range_factor_boundary() -> None:
    # Inner span 2 (edges 1..3), inner bins of width 1: the end bins stay below END_BIN_FACTOR.
    half = RANGE_FACTOR - 1  # outer = 2 + 2 * half = 2 * RANGE_FACTOR: exactly the factor
    at = [1 - half, 1, 2, 3, 3 + half]
    schema = _schema({"name": "x", "type": "numeric", "bins": at}, discovered=("x",))
    assert domain_warnings(schema) == ()
    above = [1 - half - 0.01, 1, 2, 3, 3 + half]
    schema = _schema({"name": "x", "type": "numeric", "bins": above}, discovered=("x",))
    assert _codes(domain_warnings(schema)) == [("wide_range", "x")]


# ------------------------------------------------------------------ one bin, all "other"


def test_one_bin() -> None:
    schema = _schema(
        {"name": "n", "type": "numeric", "bins": [0, 5]},
        {"name": "d", "type": "date", "bins": ["2020-01-01", "2020-12-31"]},
        discovered=("d",),
    )
    (number, date) = domain_warnings(schema)
    assert (number.code, number.column) == ("one_bin", "n")
    assert number.message == (
        "column 'n' has a single bin [0, 5]: synthetic values are spread uniformly over it; "
        "declare more bins"
    )
    assert (date.code, date.column) == ("one_bin", "d")
    assert "[2020-01-01, 2020-12-31]" in date.message and "give discovery more ρ" in date.message


def test_a_single_bin_holding_one_value_is_no_warning() -> None:
    """A constant column learned as one bin per value (flights' year, always 2013; a month
    column that holds one month) is exactly right: nothing is spread over a range."""
    schema = _schema(
        {"name": "year", "type": "numeric", "integer": True, "bins": [2012.5, 2013.5]},
        {"name": "m", "type": "date", "format": "%b-%Y", "bins": ["2018-03-01", "2018-03-31"]},
        {"name": "x", "type": "numeric", "integer": True, "bins": [0.5, 2.5]},
        discovered=("year", "m", "x"),
    )
    assert _codes(domain_warnings(schema)) == [("one_bin", "x")]


def test_all_other() -> None:
    schema = _schema(
        {"name": "city", "type": "categorical", "categories": [], "other": "Other"},
        {"name": "tier", "type": "categorical", "categories": ["a"], "other": "Other"},
        discovered=("city", "tier"),
    )
    (warning,) = domain_warnings(schema)
    assert (warning.code, warning.column) == ("all_other", "city")
    assert warning.message == (
        "column 'city' has no category: every value becomes 'Other'; declare the categories, "
        "or give discovery more ρ"
    )


# ------------------------------------------------------------------ budgets


def test_small_budget_at_the_epsilon_boundary() -> None:
    schema = _schema({"name": "tier", "type": "codes", "size": 3})
    (warning,) = domain_warnings(schema, budget_rho=Fraction(1, 1000))
    assert (warning.code, warning.column) == ("small_budget", None)
    assert warning.message.startswith("the dataset's budget ρ = 0.001 is only ε ≈ 0.18 at δ = 1e-6")
    # The largest ρ whose ε is at most 0.3 (rounded down on the 1e-12 grid) still warns unless
    # its ε is exactly 0.3; a ρ a little above does not.
    largest = Fraction(rho_from_epsilon_delta(float(SMALL_EPSILON), float(REFERENCE_DELTA)))
    assert _codes(domain_warnings(schema, budget_rho=largest - Fraction(1, 10**6))) == [
        ("small_budget", None)
    ]
    assert domain_warnings(schema, budget_rho=largest + Fraction(1, 10**6)) == ()


def _city_schema() -> TableSchema:
    return _schema(
        {"name": "city", "type": "categorical", "categories": ["Lyon"], "other": "Other"},
        discovered=("city",),
    )


def test_a_discovery_threshold_above_100_rows_is_flagged() -> None:
    # ρ = 1e-4 for the column (the default tenth of ε = 1 shared by 14 columns, issue 23).
    found = discover_open_set(
        {"Lyon": 20_000},
        max_categories=10,
        rho=Fraction(1, 10_000),
        delta=Fraction(1, 10**6),
        source=random.Random(5),
    )
    assert found.categories == ("Lyon",)
    assert found.threshold > CATEGORY_THRESHOLD_ROWS
    (warning,) = domain_warnings(_city_schema(), discovered=_discovered(city=found))
    assert (warning.code, warning.column) == ("small_discovery_budget", "city")
    assert f"about {found.threshold:,} rows" in warning.message
    assert "become 'Other'" in warning.message


def test_without_the_release_the_threshold_is_estimated_from_discovery_rho() -> None:
    small = Fraction(1, 10_000)
    (warning,) = domain_warnings(_city_schema(), discovery_rho=small)
    tau = 1 + smallest_tail_threshold(1 / (2 * small), REFERENCE_DELTA)
    assert warning.code == "small_discovery_budget" and f"about {tau:,} rows" in warning.message
    assert domain_warnings(_city_schema(), discovery_rho=Fraction(1, 10)) == ()
    # Declared categories cost nothing and need no threshold.
    declared = _schema({"name": "city", "type": "categorical", "categories": ["Lyon"]})
    assert domain_warnings(declared, discovery_rho=small) == ()


# ------------------------------------------------------------------ merging and wire form


def test_the_discoverys_own_warnings_are_merged_without_repeats_and_ordered() -> None:
    schema = _schema(
        {"name": "a", "type": "numeric", "bins": [0, 1]},
        {"name": "lat", "type": "numeric", "bins": [40.88, 44.94, 44.99, 45.04, 70.90]},
        discovered=("lat",),
    )
    own = (
        DomainWarning("wide_range", "lat", "the discovery's own words"),
        DomainWarning("range_hit_window", "lat", "column 'lat': a learned edge hit the window"),
    )
    release = Discovered(edges={}, categories={}, allocations=(), warnings=own)
    warnings = domain_warnings(schema, discovered=release, budget_rho=Fraction(1, 1000))
    assert _codes(warnings) == [
        ("small_budget", None),
        ("one_bin", "a"),
        ("wide_range", "lat"),
        ("range_hit_window", "lat"),
        ("wide_end_bin", "lat"),
    ]
    assert warnings[2].message == "the discovery's own words"
    assert {code for code, _ in _codes(warnings)} - {"range_hit_window"} <= set(CODES)


def test_wire_form_round_trips_and_is_validated() -> None:
    warning = DomainWarning("one_bin", "n", "column 'n' has a single bin [0, 5]")
    assert warning.to_json() == {"code": "one_bin", "column": "n", "message": warning.message}
    assert DomainWarning.from_json(warning.to_json()) == warning
    assert DomainWarning.from_json({"code": "small_budget", "message": "m"}).column is None
    with pytest.raises(ValueError):
        DomainWarning("", None, "m")
    with pytest.raises(ValueError):
        DomainWarning("c", None, "")
