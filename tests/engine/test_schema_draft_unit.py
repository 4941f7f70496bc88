"""The draft's privacy-unit suggestion (issue 28 §1): from a column's name and drafted kind only,
kept out of the schema (a draft accepted as is stays row-level and keeps every row)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.privacy_unit import DEFAULT_MAX_ROWS
from engine.schema_draft import draft_schema, propose_unit
from engine.schema_draft.units import looks_like_unit

CATEGORICAL: dict[str, Any] = {"type": "categorical"}


@pytest.mark.parametrize(
    "name",
    ["customer_id", "patientId", "DriverID", "borrower_no", "account_number", "user_key",
     "member id", "subject_code", "employee_nr", "ssn", "MRN", "email", "policyholder_ref"],
)  # fmt: skip
def test_person_and_account_ids_are_proposed(name: str) -> None:
    assert looks_like_unit(name, {"type": "ignore"})
    assert looks_like_unit(name, CATEGORICAL)
    assert looks_like_unit(name, {"type": "numeric", "integer": True})


@pytest.mark.parametrize(
    ("name", "entry"),
    [
        ("id", {"type": "ignore"}),  # an id, but of what: a row, an order, a visit?
        ("order_id", {"type": "ignore"}),
        ("transaction_id", CATEGORICAL),
        ("customer_age", {"type": "numeric", "integer": True}),
        ("customer", CATEGORICAL),  # no identifier word: a name or a segment
        ("customer_id", {"type": "date"}),  # the kind rules it out
        ("user_id", {"type": "boolean"}),
        ("account_number", {"type": "numeric"}),  # fractional numbers are measurements
    ],
)
def test_other_columns_are_not(name: str, entry: dict[str, Any]) -> None:
    assert not looks_like_unit(name, entry)


def test_the_draft_suggests_a_unit_without_adding_it_to_the_schema(tmp_path: Path) -> None:
    path = tmp_path / "visits.csv"
    lines = ["visit_id,customer_id,amount,shop"]
    lines += [f"v{i},c{i % 7},{i * 1.5},s{i % 3}" for i in range(60)]
    path.write_text("\n".join(lines) + "\n")
    draft = draft_schema(path)
    unit = draft.privacy_unit
    assert unit is not None and unit.column == "customer_id"
    assert unit.max_rows == DEFAULT_MAX_ROWS
    assert "'customer_id'" in unit.reason and "k-fold" in unit.reason
    assert "c1" not in unit.reason  # names no value
    assert "privacy_unit" not in draft.to_json()
    # Values play no part: the same names over other values give the same suggestion.
    assert propose_unit([{"name": "visit_id", "type": "ignore"}, {"name": "customer_id",
                          "type": "ignore"}]) == unit  # fmt: skip


def test_no_suggestion_without_a_person_id(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("id,age,city\n" + "".join(f"{i},{20 + i % 50},x{i % 3}\n" for i in range(50)))
    assert draft_schema(path).privacy_unit is None


def test_the_local_draft_command_prints_the_suggestion_apart_from_the_schema(
    tmp_path: Path,
) -> None:
    import json

    from click.testing import CliRunner

    from app.cli import main

    path = tmp_path / "claims.csv"
    path.write_text("patient_id,cost\n" + "".join(f"p{i % 9},{i}\n" for i in range(40)))
    result = CliRunner().invoke(main, ["schema", "draft", str(path)])
    assert result.exit_code == 0, result.output
    assert "suggestion (privacy unit): Column 'patient_id' looks like" in result.stderr
    assert "privacy_unit" not in json.loads(result.stdout)
