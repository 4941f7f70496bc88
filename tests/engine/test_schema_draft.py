"""Schema drafts from raw tables: kinds, nullability, formats, and no raw value in a default draft."""

from __future__ import annotations

import json
import random
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from engine.accounting import rho_from_epsilon_delta
from engine.discovery.plan import allocate
from engine.discovery.schema import discover, provisional, requests_for, resolve
from engine.schema_draft.cli import schema
from engine.schema_draft.inference import DraftError, draft_schema
from engine.tables.encoding import SchemaSpec

ROWS = 400


def _raw_frame() -> pd.DataFrame:
    rng = random.Random(5)
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    rows = []
    for i in range(ROWS):
        rows.append(
            {
                "id": f"ID-{rng.randrange(10**9):09d}",
                "note": " ".join(rng.choice("abcdefgh") * rng.randint(2, 6) for _ in range(6)),
                "member": rng.choice(["yes", "no", "Yes", ""]),
                "grams": str(rng.randint(327, 18_823)),
                "ratio": "" if i % 9 == 0 else f"{rng.uniform(0.213, 5.017):.3f}",
                "floor": str(rng.randint(1, 12)),
                "city": rng.choice(["Lisbon", "Oslo", "Quito", "Hanoi", "NA"]),
                "opened": f"{rng.choice(months)}-{rng.randint(2014, 2018)}",
                "seen": f"2019-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T0{rng.randint(0, 9)}:00:00Z",
                "empty": "",
            }
        )
    rows[1].update(grams="327", ratio="0.213")  # the extremes, so the bounds are known
    rows[2].update(grams="18823", ratio="5.017")
    return pd.DataFrame(rows)


@pytest.fixture
def raw_csv(tmp_path: Path) -> Path:
    path = tmp_path / "raw.csv"
    _raw_frame().to_csv(path, index=False)
    return path


def _entries(path: Path, **options: bool) -> dict[str, dict[str, object]]:
    draft = draft_schema(path, **options)  # type: ignore[arg-type]
    return {column.entry["name"]: column.entry for column in draft.columns}


def test_kinds_nullability_and_formats(raw_csv: Path) -> None:
    entries = _entries(raw_csv)
    assert entries["id"] == {"name": "id", "type": "ignore"}
    assert entries["note"] == {"name": "note", "type": "ignore"}
    assert entries["empty"] == {"name": "empty", "type": "ignore"}
    # Each side written as most of its cells are: "Yes" (the fixture draws yes and Yes alike;
    # its seed gives Yes more) and "no"; the default spellings are still read.
    assert entries["member"] == {
        "name": "member",
        "type": "boolean",
        "true_values": ["Yes", "true", "1", "y", "t"],
        "false_values": ["no", "false", "0", "n", "f"],
        "nullable": True,
    }
    # Every proposed column is nullable, whether or not a value is missing in it.
    window = {
        "min": -(10**15),
        "max": 10**15,
        "bins": {"quantiles": 16, "range": True},
        "nullable": True,
    }
    assert entries["grams"] == {"name": "grams", "type": "numeric", "integer": True, **window}
    # Integers 1 … 12: beyond the small-integer windows (0 … 7 at most), the learned range.
    assert entries["floor"] == {"name": "floor", "type": "numeric", "integer": True, **window}
    assert entries["ratio"] == {
        "name": "ratio",
        "type": "numeric",
        "decimals": 3,
        "format": "%.3f",  # every value written with 3 places (2.100): so is the output
        "min": -1e15,
        "max": 1e15,
        "bins": {"quantiles": 16, "range": True},
        "nullable": True,
    }
    # "NA" is a missing spelling by default: the column is nullable, not a category "NA".
    assert entries["city"] == {
        "name": "city",
        "type": "categorical",
        "categories": {"discover": True, "max": 200},
        "other": "other",
        "nullable": True,
    }
    dates = {"bins": {"quantiles": 16, "range": True}, "nullable": True}
    assert entries["opened"] == {
        "name": "opened",
        "type": "date",
        "format": "%b-%Y",
        "min": "1900-01-01",
        "max": "2099-12-31",
        **dates,
    }
    assert entries["seen"] == {
        "name": "seen",
        "type": "datetime",
        "format": "%Y-%m-%dT%H:%M:%SZ",
        "min": "1900-01-01T00:00:00",
        "max": "2099-12-31T23:59:59",
        **dates,
    }


def test_default_bounds_do_not_depend_on_the_data(tmp_path: Path) -> None:
    """Two tables with different ranges (a constant, a narrow range, an outlier) draft alike.
    (Integers all within 0 … 7 are the documented exception: see the small-integer tests.)"""
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text(
        "kids,level,when\n" + "".join(f"{33 + i % 5},50,2019-0{1 + i % 9}-01\n" for i in range(50))
    )
    second.write_text(
        "kids,level,when\n"
        + "".join(f"{i},0.5,1999-12-31\n" for i in range(49))
        + "1030,0.5,2031-01-01\n"
    )
    one, two = _entries(first), _entries(second)
    for name in ("kids", "when"):
        assert one[name] == two[name], name
    read = ("integer", "decimals", "format")  # read from the data (the disclosure names them)
    assert {k: v for k, v in one["level"].items() if k not in read} == {
        k: v for k, v in two["level"].items() if k not in read
    } | {"min": -(10**15), "max": 10**15}


def test_a_default_draft_contains_no_value_from_the_data(raw_csv: Path) -> None:
    frame = _raw_frame()
    draft = draft_schema(raw_csv)
    text = json.dumps(draft.to_json()) + " ".join(column.reason for column in draft.columns)
    for name in ("id", "note", "city", "opened", "seen"):
        for value in set(frame[name]) - {"", "NA"}:
            assert value not in text, name
    for name in ("grams", "ratio"):
        numbers = pd.to_numeric(frame[name], errors="coerce").dropna()
        for value in (numbers.min(), numbers.max()):
            assert f"{value:g}" not in text, name
    assert "2014" not in text and "2018" not in text and "2019" not in text  # no data years
    assert draft.discovers


def test_a_draft_by_meaning_contains_no_value_from_the_data(tmp_path: Path) -> None:
    """Windows and candidate lists by meaning, identifiers and decimals: no value of the file,
    no bound and no category that is not on a public list reaches the schema or its reasons."""
    rng = random.Random(11)
    rows = [
        [
            f"{44.8817 + rng.random() / 7:.4f}",
            f"{-93.3311 + rng.random() / 7:.4f}",
            rng.choice([2007, 2008, 2009]),
            rng.randint(23, 71),
            rng.choice(["Zanzibarland", "Quuxia"]),  # not countries: they may not be copied
            f"N{rng.randrange(10**6):06d}X{i}",
            rng.choice(["Torgersen", "Biscoe", "Dream"]),
        ]
        for i in range(300)
    ]
    header = ["lat", "lng", "year", "age", "country", "tag", "island"]
    path = _write(tmp_path / "t.csv", header, rows)
    draft = draft_schema(path)
    text = json.dumps(draft.to_json()) + " ".join(c.reason for c in draft.columns)
    text += draft.disclosure()
    for j, name in enumerate(header):
        cells = {str(row[j]) for row in rows}
        for cell in cells:
            if name in ("year", "age"):
                continue  # small integers: checked through the bounds below
            assert cell not in text, name
    for j in (2, 3):
        numbers = [int(row[j]) for row in rows]
        assert f": {min(numbers)}," not in text and f": {max(numbers)}," not in text
    entries = {c.entry["name"]: c.entry for c in draft.columns}
    assert entries["tag"]["type"] == "ignore"
    assert entries["island"]["categories"] == {"discover": True, "max": 200}


def test_show_values_proposes_the_data_own_domain(raw_csv: Path) -> None:
    frame = _raw_frame()
    entries = _entries(raw_csv, show_values=True)
    assert sorted(entries["city"]["categories"]) == ["Hanoi", "Lisbon", "Oslo", "Quito"]  # type: ignore[arg-type]
    grams = pd.to_numeric(frame["grams"])
    assert (entries["grams"]["min"], entries["grams"]["max"]) == (grams.min(), grams.max())
    # 1 … 12: one bin [k, k + 1) per integer (the review found 12 sharing the last bin with 11).
    assert (entries["floor"]["min"], entries["floor"]["max"], entries["floor"]["bins"]) == (
        1,
        13,
        12,
    )


def test_parquet_with_types_and_nulls_drafts_like_csv(raw_csv: Path, tmp_path: Path) -> None:
    frame = _raw_frame()
    typed = pd.DataFrame(
        {
            "grams": pd.array(pd.to_numeric(frame["grams"]), dtype="Int64"),
            "ratio": pd.to_numeric(frame["ratio"].replace("", None)),
            "member": frame["member"].str.lower().map({"yes": True, "no": False}).astype("boolean"),
            "city": frame["city"].replace("NA", None),
            "seen": pd.to_datetime(frame["seen"]).dt.tz_localize(None),
        }
    )
    path = tmp_path / "raw.parquet"
    pq.write_table(pa.Table.from_pandas(typed, preserve_index=False), path)
    entries = _entries(path)
    csv_entries = _entries(raw_csv)
    for name in ("grams", "city"):
        assert entries[name] == csv_entries[name], name
    # Parquet booleans have no words: they stay bool, written true/false in CSV.
    assert entries["member"] == {"name": "member", "type": "boolean", "nullable": True}
    assert entries["ratio"]["type"] == "numeric" and entries["ratio"]["nullable"] is True
    assert "decimals" not in entries["ratio"]  # binary floats have no decimal places to read
    assert entries["seen"]["type"] == "datetime" and entries["seen"]["bins"]["range"] is True


def test_cli_prints_json_and_reasons(raw_csv: Path) -> None:
    result = CliRunner().invoke(schema, ["draft", str(raw_csv)])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert [c["name"] for c in printed["columns"]][:3] == ["id", "note", "member"]
    assert "" in printed["missing_values"] and "NA" in printed["missing_values"]
    assert "an identifier or free text" in result.stderr
    assert "charged to the dataset's budget" in result.stderr
    assert "warning: Read from the data without DP" in result.stderr


def test_unreadable_csv_is_refused_without_echoing_it(tmp_path: Path) -> None:
    path = tmp_path / "ragged.csv"
    path.write_text("a,b\nsecret-1,2\nsecret-3\n")
    with pytest.raises(DraftError) as refused:
        draft_schema(path)
    assert "secret" not in str(refused.value)


def _reference(cells: list[str], missing: frozenset[str]) -> dict[str, object]:
    """What the draft's text statistics mean, in plain Python (str.strip, str.lower, re)."""
    import re
    from collections import Counter

    present = [c for c in cells if c.strip() not in missing]
    words = {"true", "yes", "y", "t", "false", "no", "n", "f"}
    out: dict[str, object] = {
        "missing": len(cells) - len(present),
        "values": len(present),
        "counts": dict(Counter(present)),
        "digits": all(re.search("[0-9]", c) for c in present),
        "boolean": all(c.strip().lower() in words for c in present),
    }
    histogram = [0] * 9  # 0 … 6 decimals, more than 6, exponent notation
    for cell in present:
        if any(c in "eE" for c in cell):
            histogram[8] += 1
        else:
            histogram[min(len(cell.strip().partition(".")[2].rstrip("0")), 7)] += 1
    out["decimal_counts"] = histogram
    return out


@pytest.mark.parametrize(
    ("cells", "numeric"),
    [
        (["  1.50 ", "2", " NA", "", "\t.5", "7.", "-0.000", "12.3400 ", "NA "], True),
        (["1e3", "2", "3.25", "NA"], True),
        (["0.12345678", "1.1234567", "3.25", "4.000000"], True),
        (["1.5", " NA", "", "\u20031.0\u2003", "\x1c-0.000\x1c", "NA "], False),
        (["Yes", " no ", "T", "f", "NA", "\u0130", "K\u212a", "x y"], False),
    ],
)
def test_text_statistics_are_pythons_string_semantics(cells: list[str], numeric: bool) -> None:
    """The Arrow text statistics (two batches) against str.strip, str.lower and re over the
    same cells: missing spellings after stripping, counts, digits, booleans, decimals."""
    import pyarrow as pa

    from engine.schema_draft.inference import _Stats

    missing = frozenset({"", "NA"})
    stats = _Stats("c")
    half = len(cells) // 2
    for part in (cells[:half], cells[half:]):
        stats.add_text(pa.array(part, type=pa.string()), missing)
    expected = _reference(cells, missing)
    assert stats.missing == expected["missing"] and stats.values == expected["values"]
    assert stats.counts == expected["counts"]
    assert stats.digits == expected["digits"] and stats.boolean == expected["boolean"]
    assert stats.numeric == numeric  # pandas reads the numbers (not Unicode spaces)
    if numeric:
        assert stats.decimal_counts == expected["decimal_counts"]


# --- Public windows by meaning (docs/discovery.md, "Public windows by meaning") ---------------


def _write(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    lines = [",".join(header)] + [",".join(str(cell) for cell in row) for row in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


# name → the window drafted for integer values (None: the generic ±10^15 window).
INTEGER_WINDOWS = {
    "year": (1800, 2100),
    "birth_year": (1800, 2100),
    "yearBuilt": (1800, 2100),
    "year_of_birth": (1800, 2100),
    "age": (0, 130),
    "MotherAge": (0, 130),
    "age_in_years": (0, 130),
    "month": (1, 12),
    "month_of_year": (1, 12),
    "day": (1, 31),
    "day_of_month": (1, 31),
    "day_of_year": (1, 366),
    "hour": (0, 23),
    "hour_of_day": (0, 23),
    "dep_hour": (0, 23),
    "minute": (0, 59),
    "second": (0, 59),
    "weekday": (0, 7),
    "dayOfWeek": (0, 7),
    "DOW": (0, 7),
    "quarter": (1, 4),
    "pct_female": (0, 100),
    "Completion %": (0, 100),
    # Not windows by meaning: a unit, a transformation, a link word or two meanings in the name.
    "dep_time": None,
    "sched_dep_time": None,
    "interest_rate": None,
    "age_months": None,
    "years": None,
    "hours": None,
    "year_month": None,
    "minute_of_day": None,
    "visits_per_hour": None,
    "pct_change": None,
    "second_choice": None,
    "page": None,
    "flight": None,
}


def test_integer_windows_by_meaning_come_from_the_name(tmp_path: Path) -> None:
    names = list(INTEGER_WINDOWS)
    # Values above 31, so that the names without a meaning get the generic window, not a
    # small-integer one (a window by meaning wins over those: test_small_integers_...).
    path = _write(tmp_path / "t.csv", names, [[i % 3 + 40] * len(names) for i in range(40)])
    entries = _entries(path)
    for name, window in INTEGER_WINDOWS.items():
        entry = entries[name]
        assert entry["type"] == "numeric" and entry["integer"] is True, name
        assert entry["bins"] == {"quantiles": 16, "range": True}, name
        expected = window or (-(10**15), 10**15)
        assert (entry["min"], entry["max"]) == expected, name
        assert "clip" not in entry and entry["nullable"] is True, name
    reasons = {c.entry["name"]: c.reason for c in draft_schema(path).columns}
    assert "[0, 23], the public window for 'hour' chosen from the column's name" in reasons["hour"]
    assert "±10^15" in reasons["dep_time"]


def test_decimal_windows_by_meaning_and_long_beside_lat(tmp_path: Path) -> None:
    header = ["lat", "long", "Pickup_Longitude", "latitude_deg", "age", "percent", "hour", "year"]
    rows = [[44.91, -93.27, -73.98, 40.71, 30.5, 12.5, 1.5, 2013.5] for _ in range(30)]
    entries = _entries(_write(tmp_path / "t.csv", header, rows))
    windows = {name: (entries[name]["min"], entries[name]["max"]) for name in header}
    assert windows == {
        "lat": (-90.0, 90.0),
        "long": (-180.0, 180.0),  # "long" is a longitude beside a latitude column
        "Pickup_Longitude": (-180.0, 180.0),
        "latitude_deg": (-90.0, 90.0),
        "age": (0.0, 130.0),
        "percent": (0.0, 100.0),
        # hours, years ... are windows for integers only: 1.5 is not an hour of the clock.
        "hour": (-1e15, 1e15),
        "year": (-1e15, 1e15),
    }
    alone = _entries(_write(tmp_path / "u.csv", ["long", "x"], [[1.5, 2.5]] * 30))
    assert (alone["long"]["min"], alone["long"]["max"]) == (-1e15, 1e15)  # no latitude: generic


def test_a_window_by_meaning_does_not_change_with_the_values(tmp_path: Path) -> None:
    """The same names with other values (narrow, wide, outside the window, one outlier) draft the
    same entries: the window is chosen from the name alone."""
    header = ["lat", "lon", "year", "age", "month", "hour", "pct"]
    first = _write(
        tmp_path / "a.csv",
        header,
        [[45, -93, 2013, 30 + i % 7, 1 + i % 12, 5, 50] for i in range(60)],
    )
    second = _write(
        tmp_path / "b.csv",
        header,
        [[-89 + i, 179 - i, 1850 + i, i % 3, 12, 23 - i % 24, i] for i in range(59)]
        + [[1000, -5000, 99999, 400, 77, 99, 250]],
    )
    one, two = _entries(first), _entries(second)
    for name in header:
        assert one[name] == two[name], name


def test_windows_by_meaning_parse_as_discovery_clauses(tmp_path: Path) -> None:
    from engine.columns.spec import QuantileBins, parse_column

    header = ["lat", "year", "hour", "age"]
    entries = _entries(_write(tmp_path / "t.csv", header, [[45.5, 2013, 5, 31.5]] * 20))
    for name in header:
        parsed = parse_column(entries[name], 0)
        assert isinstance(parsed, QuantileBins) and parsed.learn_range, name
        low, high = parsed.bounds()
        assert (low, high) == (float(entries[name]["min"]), float(entries[name]["max"])), name


def test_name_tokens() -> None:
    from engine.schema_draft.meanings import tokens

    assert tokens("dayOfWeek") == ("day", "of", "week")
    assert tokens("userID") == ("user", "id")
    assert tokens("IDNum") == ("id", "num")
    assert tokens("Culmen Length (mm)") == ("culmen", "length", "mm")
    assert tokens("delinq_2y") == ("delinq", "2", "y")
    assert tokens("Growth %") == ("growth", "percent")
    assert tokens("pickup-latitude") == ("pickup", "latitude")
    assert tokens("") == ()


# --- Public candidate lists by meaning ---------------------------------------------------------


def test_candidate_lists_come_from_the_name(tmp_path: Path) -> None:
    from engine.columns.spec import DiscoveredCategories, parse_column
    from engine.schema_draft import public_lists

    header = ["state", "addr_state", "country", "birth_month", "day_of_week", "order_state"]
    rng = random.Random(3)
    rows = [
        [
            rng.choice(["CA", "NY", "TX", "WY"]),
            rng.choice(["Ohio", "Texas"]),
            rng.choice(["FR", "DEU", "Viet Nam"]),
            rng.choice(["Jan", "March", "dec"]),
            rng.choice(["Mon", "Thursday"]),
            rng.choice(["open", "closed"]),
        ]
        for _ in range(200)
    ]
    entries = _entries(_write(tmp_path / "t.csv", header, rows))
    states = public_lists.us_state_candidates()
    expected = {
        "state": (states, 63),
        "addr_state": (states, 63),
        "country": (public_lists.country_candidates(), public_lists.country_count()),
        "birth_month": (public_lists.month_candidates(), 12),
        "day_of_week": (public_lists.weekday_candidates(), 7),
    }
    for name, (candidates, most) in expected.items():
        entry = entries[name]
        assert entry["categories"] == {
            "discover": True,
            "max": most,
            "candidates": list(candidates),
        }, name
        assert entry["other"] == "other" and entry["nullable"] is True, name
        parsed = parse_column(entry, 0)  # within the spec's limits: pure ρ, no δ
        assert isinstance(parsed, DiscoveredCategories) and parsed.candidates == candidates
        assert parsed.delta is None and parsed.other
    # "order_state" is not a US state: discovered without a list, as before.
    assert entries["order_state"]["categories"] == {"discover": True, "max": 200}
    # The lists hold what they say: codes and names, and every row above is a candidate.
    assert {"DC", "PR", "GU", "VI", "AS", "MP", "California", "Puerto Rico"} <= set(states)
    countries = set(public_lists.country_candidates())
    assert {"US", "USA", "United States", "FR", "FRA", "France", "Germany", "DE"} <= countries
    assert public_lists.country_count() >= 249  # ISO 3166-1 (iso3166 package) and Kosovo
    assert {"January", "jan", "SEP", "Sept"} <= set(public_lists.month_candidates())
    assert {"Monday", "mon", "THU", "Thurs"} <= set(public_lists.weekday_candidates())
    for candidates in (states, countries, public_lists.month_candidates()):
        assert len(set(candidates)) == len(candidates) and "other" not in candidates


def test_a_candidate_list_does_not_change_with_the_values(tmp_path: Path) -> None:
    one = _entries(_write(tmp_path / "a.csv", ["state", "n"], [["CA", 1], ["NY", 2]] * 30))
    two = _entries(_write(tmp_path / "b.csv", ["state", "n"], [["Texas", 1], ["zz", 2]] * 30))
    assert one["state"] == two["state"]


def test_show_values_lists_the_data_own_categories_even_where_the_name_has_a_list(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "t.csv", ["state", "n"], [["CA", 1], ["NY", 2]] * 30)
    assert _entries(path, show_values=True)["state"]["categories"] == ["CA", "NY"]


# --- Identifier-like columns ---------------------------------------------------------------------


def test_identifier_like_columns_are_ignored(tmp_path: Path) -> None:
    """344 rows: an all-distinct text column of 190 values (with missing cells), text whose
    distinct values exceed a fifth of its values, all-distinct identifier-named integers;
    categories that repeat enough, non-identifier all-distinct integers and identifier-named
    integers that repeat are kept."""
    rng = random.Random(7)
    words = ["".join(rng.choice("abcdefghij") for _ in range(8)) for _ in range(400)]
    rows = []
    for i in range(344):
        rows.append(
            [
                words[i] if i < 190 else "",  # all distinct, no digit
                words[i % 80],  # 80 distinct values for 344 rows: more than a fifth
                words[i % 60],  # 60: a category averages 5.7 rows
                1000 + i,  # sample_id: all distinct
                1000 + i,  # serial: all distinct, but not named as an identifier
                i % 12,  # store_id: repeats
                7 * i,  # userId
            ]
        )
    header = ["name", "nickname", "band", "sample_id", "serial", "store_id", "userId"]
    path = _write(tmp_path / "t.csv", header, rows)
    draft = draft_schema(path)
    entries = {c.entry["name"]: c.entry for c in draft.columns}
    reasons = {c.entry["name"]: c.reason for c in draft.columns}
    assert [n for n in header if entries[n]["type"] == "ignore"] == [
        "name",
        "nickname",
        "sample_id",
        "userId",
    ]
    assert entries["band"]["type"] == "categorical"
    assert entries["serial"]["type"] == entries["store_id"]["type"] == "numeric"
    assert "every value is distinct" in reasons["name"]
    assert "more than 1 in 5 of its values are distinct" in reasons["nickname"]
    assert reasons["sample_id"].startswith("an identifier: its name says so")
    text = json.dumps(draft.to_json()) + " ".join(reasons.values())
    assert not any(word in text for word in words)


def test_identifier_named_parquet_integers_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table(
        {"row_id": pa.array(range(500), pa.int64()), "kids": pa.array([i % 4 for i in range(500)])}
    )
    pq.write_table(table, path)
    entries = _entries(path)
    assert entries["row_id"] == {"name": "row_id", "type": "ignore"}
    assert entries["kids"]["type"] == "numeric"


# --- Decimals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ([0, 0, 200, 0, 0, 0, 0, 0, 0], 2),
        ([0, 0, 199, 1, 0, 0, 0, 0, 0], 2),  # one value never decides
        ([0, 0, 198, 2, 0, 0, 0, 0, 0], 2),  # 1 % of 200 is tolerated
        ([0, 0, 197, 3, 0, 0, 0, 0, 0], 3),  # more than 1 %
        ([0, 0, 49, 1, 0, 0, 0, 0, 0], 2),  # fewer than 100 values: still one tolerated
        ([0, 0, 48, 2, 0, 0, 0, 0, 0], 3),
        ([0, 1, 0, 0, 0, 0, 0, 0, 0], 1),  # a single value: its own decimals
        ([90, 0, 0, 0, 0, 0, 0, 10, 0], 6),  # more than 6 decimals: capped
        ([99, 0, 0, 0, 0, 0, 0, 0, 1], 0),  # one value in exponent notation is tolerated
        ([90, 0, 0, 0, 0, 0, 0, 0, 10], None),  # many: full precision
    ],
)
def test_robust_decimals(counts: list[int], expected: int | None) -> None:
    from engine.schema_draft.inference import robust_decimals

    assert robust_decimals(counts) == expected


def test_one_row_does_not_decide_the_decimals(tmp_path: Path) -> None:
    values = [f"{1 + i / 100:.2f}" for i in range(1, 300)]
    base = _write(tmp_path / "a.csv", ["weight"], [[v] for v in values])
    odd = _write(tmp_path / "b.csv", ["weight"], [[v] for v in [*values, "3.14159"]])
    sci = _write(tmp_path / "c.csv", ["weight"], [[v] for v in [*values, "1.5e-07"]])
    assert _entries(base)["weight"]["decimals"] == 2
    assert _entries(odd)["weight"] == _entries(base)["weight"]
    assert _entries(sci)["weight"] == _entries(base)["weight"]


# --- Header detection --------------------------------------------------------------------------


def test_a_csv_without_a_header_row_is_refused_without_naming_a_value(
    raw_csv: Path, tmp_path: Path
) -> None:
    rows = raw_csv.read_text().splitlines()[1:]
    headless = tmp_path / "headless.csv"
    headless.write_text("\n".join(rows) + "\n")
    with pytest.raises(DraftError) as refused:
        draft_schema(headless)
    message = str(refused.value)
    assert message.startswith("the first row looks like data, not column names: add a header row")
    first = rows[0].split(",")
    assert not any(cell and cell in message for cell in first)
    numbers = _write(
        tmp_path / "numbers.csv", ["17", "2.5", "2019-03-01"], [[3, 1.5, "2019-01-02"]] * 9
    )
    with pytest.raises(DraftError, match="looks like data"):
        draft_schema(numbers)


def test_headers_that_read_as_names_are_kept(raw_csv: Path, tmp_path: Path) -> None:
    """The shipped fixtures, the test tables, and headers with a number among names."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    for path in sorted(fixtures.glob("*.csv")):
        assert draft_schema(path).columns, path.name
    draft_schema(raw_csv)
    # One numeric name among names: "2019" reads as a number, "score" and "city" do not.
    mixed = _write(
        tmp_path / "m.csv", ["city", "2019", "score"], [["Oslo", 3, 1.5], ["Lima", 4, 2]] * 9
    )
    assert [c.entry["name"] for c in draft_schema(mixed).columns] == ["city", "2019", "score"]
    twice = _write(tmp_path / "t.csv", ["a", "a"], [["x", "y"]] * 5)
    with pytest.raises(DraftError, match="names a column twice"):
        draft_schema(twice)


# --- What the draft says it read from the data ------------------------------------------------


def test_the_disclosure_names_what_was_read_from_the_data(raw_csv: Path) -> None:
    draft = draft_schema(raw_csv)
    text = draft.disclosure()
    assert text.startswith("Read from the data without DP")
    assert "each column's kind" in text
    assert "the date format of 'opened', 'seen'" in text
    assert "the decimals of 'ratio'" in text
    assert "which columns are dropped ('id', 'note', 'empty'" in text
    assert "Nothing else in this schema comes from the data: every column is nullable" in text
    frame = _raw_frame()
    for name in ("id", "note", "city", "opened", "seen", "grams", "ratio"):
        for value in set(frame[name]) - {"", "NA"}:
            assert value not in text, name
    shown = draft_schema(raw_csv, show_values=True).disclosure()
    assert "Nothing else" not in shown and "the data's own" in shown


def test_a_draft_reads_a_bounded_sample_and_says_so(tmp_path: Path) -> None:
    """Issue 24 §7: a draft's work is bounded by the decoded bytes it reads (a 1.7 MB Parquet
    file of repeated long values took 116 s); past the budget it is of the first rows, and its
    warning says the kinds were read from them."""
    path = tmp_path / "t.csv"
    path.write_text("a,b\n" + "".join(f"{i},x{i % 7}\n" for i in range(800_000)))  # 3 blocks
    whole = draft_schema(path)
    assert whole.rows == 800_000 and not whole.sampled
    assert "read from all of its values" in whole.disclosure()
    sample = draft_schema(path, max_sample_bytes=64 * 1024)
    assert sample.sampled and 0 < sample.rows < 800_000
    assert f"first {sample.rows:,} rows" in sample.disclosure()
    assert [c.entry["type"] for c in sample.columns] == [c.entry["type"] for c in whole.columns]


def test_a_draft_stops_when_asked_between_batches(tmp_path: Path) -> None:
    from engine.schema_draft import DraftCancelled

    path = tmp_path / "t.csv"
    path.write_text("a\n" + "1\n" * 3_000_000)  # several 4 MiB blocks
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return True

    with pytest.raises(DraftCancelled):
        draft_schema(path, stop=stop)
    assert asked == [1]  # stopped after the first batch


# --- Small integers and identifiers (issue 26 §5, issue 23 §2) ------------------------------------


def _small_integer_table(tmp_path: Path, rows: int = 10_000) -> Path:
    rng = random.Random(26)
    header = [
        "status", "children", "flag", "top", "wide", "signed", "hour", "cohort", "year", "zeros"
    ]  # fmt: skip
    table = []
    for _ in range(rows):
        table.append(
            [
                rng.randint(1, 5),  # a 5-value code
                min(8, int(rng.expovariate(0.7))),  # a child count 0 … 8
                rng.randint(0, 1),  # a flag
                rng.randint(0, 31),  # the widest small window
                rng.randint(0, 32),  # one more value: no small window
                rng.randint(-1, 3),  # a negative code: no small window
                rng.randint(0, 3),  # a window by meaning wins
                rng.randint(2015, 2023),  # years without a meaning in the name
                rng.randint(2015, 2023),  # years with one
                0,  # a column of zeros: the window 0 … 0 (nothing drawn elsewhere)
            ]
        )
    return _write(tmp_path / "codes.csv", header, table)


def test_small_integers_get_a_small_window_and_one_bin_per_value(tmp_path: Path) -> None:
    """A 5-value code, a 0 … 8 count and a flag were drafted as 16 bins at DP quantiles inside
    ±10^15 (issue 26 §5): those within 0 … 7 get the smallest public window 0 … 0, 1, 3 or 7
    that holds them, with one declared bin per value, and the warning names the windows; wider
    ones keep the learned range (one bin per value when it holds at most 32 integers)."""
    path = _small_integer_table(tmp_path)
    draft = draft_schema(path)
    entries = {c.entry["name"]: c.entry for c in draft.columns}
    reasons = {c.entry["name"]: c.reason for c in draft.columns}
    for name, top in (("status", 7), ("flag", 1), ("zeros", 0)):
        assert entries[name] == {
            "name": name,
            "type": "numeric",
            "integer": True,
            "min": -0.5,
            "max": top + 0.5,
            "bins": top + 1,
            "clip": True,
            "nullable": True,
        }, name
        assert f"every value lies in 0 … {top}" in reasons[name], name
        assert "one bin per value is declared" in reasons[name], name
    generic = {"min": -(10**15), "max": 10**15, "bins": {"quantiles": 16, "range": True}}
    for name in ("children", "top", "wide", "signed", "cohort"):
        assert {k: entries[name][k] for k in generic} == generic, name
        assert "one bin per value if it holds at most 32 integers" in reasons[name], name
    assert (entries["hour"]["min"], entries["hour"]["max"]) == (0, 23)  # the name's window
    assert (entries["year"]["min"], entries["year"]["max"]) == (1800, 2100)
    warning = draft.disclosure()
    assert "'status' in 0 … 7, 'flag' in 0 … 1, 'zeros' in 0 … 0" in warning
    assert "'children'" not in warning and "'wide'" not in warning and "'hour'" not in warning
    # Declared, so nothing to learn for them; each value is its own code.
    spec = SchemaSpec.from_json(draft.to_json())
    assert {r.column for r in requests_for(spec)} == {
        "children", "top", "wide", "signed", "hour", "cohort", "year"
    }  # fmt: skip
    schema = provisional(spec)  # the learned ranges' placeholders; the declared bins as is
    for name, top in (("status", 7), ("flag", 1), ("zeros", 0)):
        column = next(column for column in schema.columns if column.name == name)
        values = [str(v) for v in range(top + 1)]
        codes = column.encode(pd.Series([*values, ""]), schema.missing_values)
        assert list(codes) == [*range(top + 1), column.size - 1], name
        # Each code decodes to its own integer and nothing else: with edges at integers the
        # last, closed bin [top, top + 1] decoded top + 1 about half the time (a flag gave 2).
        rng = np.random.default_rng(5)
        for code in range(top + 1):
            drawn = column.decode(np.full(200, code), rng)
            assert set(pd.Series(drawn).dropna().astype(int)) == {code}, (name, code)


def test_years_learned_at_upload_get_one_bin_per_value(tmp_path: Path) -> None:
    """Integers beyond the small windows keep a learned range; at ε = 1 (δ = 10⁻⁶) on 10,000 rows
    discovery gives the nine years 2015 … 2023 one bin each, named or not (fixed noise seed)."""
    path = _small_integer_table(tmp_path)
    spec = SchemaSpec.from_json(draft_schema(path).to_json())
    frame = pd.read_csv(path, dtype=str)
    requests = requests_for(spec)
    rho = Fraction(rho_from_epsilon_delta(Decimal(1), Decimal("1e-6")))
    budget = allocate(requests, budget_rho=rho, rho_quantum=Fraction(1, 10**12))
    found = discover(
        spec, budget, lambda: [{r.column: frame[r.column] for r in requests}], random.Random(4)
    )
    schema = resolve(spec, found)
    for name in ("cohort", "year"):
        column = next(c for c in schema.columns if c.name == name)
        assert list(column.edges) == [2014.5 + i for i in range(10)], name


def test_an_all_distinct_id_is_ignored(tmp_path: Path) -> None:
    """Issue 26 §5 reported an all-distinct id of 190 values drafted as a discovered categorical
    (it came out all "other"): "ID-000123" cells beside other columns are dropped (a regression
    test: the draft already did so)."""
    rng = random.Random(190)
    ids = rng.sample(range(10**6), 190)
    rows = [
        [f"ID-{ids[i]:06d}", rng.choice(["lo", "mid", "hi"]), rng.randint(0, 90)]
        for i in range(190)
    ]
    path = _write(tmp_path / "t.csv", ["id", "grade", "score"], rows)
    draft = draft_schema(path)
    entries = {c.entry["name"]: c.entry for c in draft.columns}
    assert entries["id"] == {"name": "id", "type": "ignore"}
    assert entries["grade"]["type"] == "categorical"
    assert "every value is distinct" in draft.columns[0].reason
    assert "which columns are dropped ('id'" in draft.disclosure()
