"""``rhosynth report`` (engine/cli.py) on the people fixture: owner tier, and release tier."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

import numpy as np
from click.testing import CliRunner, Result

from app.cli import ENGINE_COMMANDS, main
from engine.cli import report
from engine.release.record import MeasuredMarginal, ReleaseRecord
from engine.tables.local import load_numeric_values, load_schema, load_table

FIXTURES = Path(__file__).parents[2] / "fixtures"
PEOPLE = FIXTURES / "people.csv"
PEOPLE_SCHEMA = FIXTURES / "people-schema.json"
RAW = FIXTURES / "raw-small.csv"
RAW_SCHEMA = FIXTURES / "raw-small-schema.json"


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(arg) for arg in args])


def _synthetic(tmp_path: Path) -> Path:
    out = tmp_path / "synthetic.csv"
    done = invoke(
        "synthesize", PEOPLE, "--schema", PEOPLE_SCHEMA, "--method", "independent",
        "--rho", "1", "--seed", "3", "--out", out,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    return out


def _record(tmp_path: Path) -> Path:
    schema = load_schema(PEOPLE_SCHEMA)
    domain = schema.domain()
    marginal = MeasuredMarginal(
        ("city",), np.arange(domain.size("city"), dtype=np.int64) * 5, Fraction(2), Fraction(1, 4)
    )
    record = ReleaseRecord("independent", {}, Fraction(1, 4), domain, 120.0, (marginal,))
    path = tmp_path / "record.npz"
    path.write_bytes(record.to_bytes())
    return path


def test_owner_tier_by_default(tmp_path: Path) -> None:
    synthetic = _synthetic(tmp_path)
    html = tmp_path / "report.html"
    out = tmp_path / "report.json"
    done = invoke(
        "report", PEOPLE, synthetic, "--schema", PEOPLE_SCHEMA, "--html", html, "--json", out
    )
    assert done.exit_code == 0, done.output
    data = json.loads(out.read_text())
    assert data["tier"] == "owner"
    assert data["rows"]["real"] == load_table(PEOPLE, load_schema(PEOPLE_SCHEMA)).shape[0]
    # Numeric columns are correlated on their values, read from the files.
    assert set(data["correlations"]["source"].values()) == {"values"}
    # ... and compared on them; the command prints the verdict's headline.
    assert data["values"]["available"] is True
    assert [c["column"] for c in data["values"]["columns"]] == ["age", "income"]
    assert data["verdict"]["headline"] in done.output
    assert html.read_text().startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob("*.partial"))


def test_release_tier_needs_its_own_file(tmp_path: Path) -> None:
    synthetic = _synthetic(tmp_path)
    record = _record(tmp_path)
    html = tmp_path / "owner.html"
    refused = invoke(
        "report", PEOPLE, synthetic, "--schema", PEOPLE_SCHEMA, "--html", html, "--record", record
    )
    assert refused.exit_code == 2
    assert "--release-html" in refused.output
    release_html = tmp_path / "release.html"
    release_json = tmp_path / "release.json"
    done = invoke(
        "report", PEOPLE, synthetic, "--schema", PEOPLE_SCHEMA, "--html", html,
        "--record", record, "--release-html", release_html, "--release-json", release_json,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    release = json.loads(release_json.read_text())
    assert release["tier"] == "release"
    assert release["measurements"][0]["attributes"] == ["city"]
    assert "release tier" in release_html.read_text()


def test_a_record_for_another_domain_is_refused(tmp_path: Path) -> None:
    from engine.domain import Domain

    other = ReleaseRecord(
        "x", {}, Fraction(1), Domain(("z",), (2,)), 1.0,
        (MeasuredMarginal(("z",), np.array([1, 1]), Fraction(1), Fraction(1)),),
    )  # fmt: skip
    path = tmp_path / "other.npz"
    path.write_bytes(other.to_bytes())
    done = invoke(
        "report", PEOPLE, PEOPLE, "--schema", PEOPLE_SCHEMA, "--html", tmp_path / "r.html",
        "--record", path, "--release-html", tmp_path / "s.html",
    )  # fmt: skip
    assert done.exit_code == 2
    assert "another domain" in done.output


def test_the_report_cannot_overwrite_an_input(tmp_path: Path) -> None:
    synthetic = _synthetic(tmp_path)
    done = invoke("report", PEOPLE, synthetic, "--schema", PEOPLE_SCHEMA, "--html", synthetic)
    assert done.exit_code == 2
    assert "--html must not overwrite an input file" in done.output


def test_numeric_values_are_read_row_aligned() -> None:
    schema = load_schema(PEOPLE_SCHEMA)
    values = load_numeric_values(PEOPLE, schema)
    codes = load_table(PEOPLE, schema)
    assert values.num_rows == codes.shape[0]
    assert values.column_names == ["age", "income"]
    assert values.column("age")[2].as_py() == 42.8


def test_a_raw_table_is_compared_on_numbers_dates_and_datetimes(tmp_path: Path) -> None:
    """The raw fixture has `ignore`d columns, which a synthetic table does not have, and date and
    datetime columns, compared in days and seconds."""
    synthetic = tmp_path / "raw-synthetic.csv"
    made = invoke(
        "synthesize", RAW, "--schema", RAW_SCHEMA, "--method", "independent", "--rho", "1",
        "--seed", "2", "--out", synthetic,
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    out = tmp_path / "raw.json"
    done = invoke(
        "report", RAW, synthetic, "--schema", RAW_SCHEMA, "--html", tmp_path / "raw.html",
        "--json", out,
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    data = json.loads(out.read_text())
    units = {c["column"]: c["unit"] for c in data["values"]["columns"]}
    assert units["joined"] == "days since 1970-01-01"
    assert units["seen"] == "seconds since 1970-01-01 UTC"
    assert units["age"] == "number"
    real = load_numeric_values(RAW, load_schema(RAW_SCHEMA))
    age = next(c for c in data["values"]["columns"] if c["column"] == "age")
    # Raw values, unclamped: the real range is the file's, not the schema's clipped one.
    assert age["real"]["min"] == np.nanmin(real.column("age").to_numpy(zero_copy_only=False))
    assert age["real"]["min"] < 0, "the fixture has an age below the declared minimum (clipped)"


def test_listed_short_help_matches_the_command() -> None:
    assert ENGINE_COMMANDS["report"][2] == report.get_short_help_str(limit=200)
