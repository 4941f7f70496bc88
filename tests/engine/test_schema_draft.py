"""Schema drafts from raw tables: kinds, nullability, formats, and no raw value in a default draft."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from engine.schema_draft.cli import schema
from engine.schema_draft.inference import DraftError, draft_schema

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
    assert entries["member"] == {"name": "member", "type": "boolean", "nullable": True}
    window = {"min": -(10**15), "max": 10**15, "bins": {"quantiles": 16, "range": True}}
    assert entries["grams"] == {"name": "grams", "type": "numeric", "integer": True, **window}
    assert entries["floor"] == {"name": "floor", "type": "numeric", "integer": True, **window}
    assert entries["ratio"] == {
        "name": "ratio",
        "type": "numeric",
        "decimals": 3,
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
    dates = {"bins": {"quantiles": 16, "range": True}}
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
    """Two tables with different ranges (a constant, a small range, an outlier) draft alike."""
    first, second = tmp_path / "a.csv", tmp_path / "b.csv"
    first.write_text(
        "kids,level,when\n" + "".join(f"{3 + i % 5},5,2019-0{1 + i % 9}-01\n" for i in range(50))
    )
    second.write_text(
        "kids,level,when\n"
        + "".join(f"{i},0.5,1999-12-31\n" for i in range(49))
        + "1030,0.5,2031-01-01\n"
    )
    one, two = _entries(first), _entries(second)
    for name in ("kids", "when"):
        assert one[name] == two[name], name
    assert {k: v for k, v in one["level"].items() if k != "integer" and k != "decimals"} == {
        k: v for k, v in two["level"].items() if k != "integer" and k != "decimals"
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
    for name in ("grams", "member", "city"):
        assert entries[name] == csv_entries[name], name
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
    if any(c in "eE" for cell in present for c in cell):
        out["decimals"] = None
    else:
        out["decimals"] = max(len(c.strip().partition(".")[2].rstrip("0")) for c in present)
    return out


@pytest.mark.parametrize(
    ("cells", "numeric"),
    [
        (["  1.50 ", "2", " NA", "", "\t.5", "7.", "-0.000", "12.3400 ", "NA "], True),
        (["1e3", "2", "3.25", "NA"], True),
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
        assert stats.decimals == expected["decimals"]
