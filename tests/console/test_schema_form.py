"""The schema draft as a form and back: unedited it is the draft; edits are written as JSON."""

from __future__ import annotations

from typing import Any

import pytest

from app.console.schema_form import (
    SchemaFormError,
    form_values,
    rows_from_form,
    rows_from_schema,
    schema_extra,
    schema_from_rows,
)
from engine.tables.encoding import SchemaSpec

DRAFT: dict[str, Any] = {
    "columns": [
        {"name": "id", "type": "ignore"},
        {
            "name": "city",
            "type": "categorical",
            "categories": {"discover": True, "max": 200},
            "other": "other",
            "nullable": True,
        },
        {
            "name": "grams",
            "type": "numeric",
            "integer": True,
            "min": -1000000000000000,
            "max": 1000000000000000,
            "bins": {"quantiles": 16, "range": True},
        },
        {
            "name": "weight",
            "type": "numeric",
            "decimals": 2,
            "min": -1e15,
            "max": 1e15,
            "bins": {"quantiles": 16, "range": True},
        },
        {
            "name": "opened",
            "type": "date",
            "format": "%b-%Y",
            "min": "1900-01-01",
            "max": "2099-12-31",
            "bins": {"quantiles": 16, "range": True},
        },
        {"name": "smoker", "type": "boolean", "nullable": True},
        {
            "name": "age",
            "type": "numeric",
            "integer": True,
            "min": 18,
            "max": 91,
            "bins": 73,
            "clip": True,
        },
        {"name": "colour", "type": "categorical", "categories": ["red", "a, b", "blue"]},
        {"name": "hour", "type": "numeric", "min": 0, "max": 24, "bins": [0, 6.5, 12, 24]},
        {"name": "code", "type": "codes", "size": 7},
        {
            "name": "state",
            "type": "categorical",
            "categories": {"discover": True, "max": 63, "candidates": ["AK", "AL", "New York"]},
            "other": "other",
            "nullable": True,
        },
    ],
    "missing_values": ["", "NA"],
}


def _round_trip(schema: dict[str, Any], edits: dict[str, str | None]) -> dict[str, Any]:
    submitted = form_values(rows_from_schema(schema), schema_extra(schema))
    for key, value in edits.items():
        if value is None:
            submitted.pop(key, None)
        else:
            submitted[key] = value
    return schema_from_rows(rows_from_form(submitted, 1000), submitted["schema_extra"])


def test_an_unedited_form_is_the_draft() -> None:
    assert _round_trip(DRAFT, {}) == DRAFT


def test_a_candidate_list_travels_with_its_column() -> None:
    """The form shows no candidate list, but keeps it: unedited, and with its "at most" edited."""
    rows = rows_from_schema(DRAFT)
    assert rows[10].domain == "discover" and rows[10].max_categories == "63"
    assert rows[10].categories == ""  # the declared-categories box stays empty
    edited = _round_trip(DRAFT, {"col.10.max_categories": "10"})
    assert edited["columns"][10]["categories"] == {
        "discover": True,
        "max": 10,
        "candidates": ["AK", "AL", "New York"],
    }
    declared = _round_trip(DRAFT, {"col.10.domain": "declare", "col.10.categories": "OR, WA"})
    assert declared["columns"][10]["categories"] == ["OR", "WA"]


def test_edits_of_type_nullable_and_domain_are_written() -> None:
    edited = _round_trip(
        DRAFT,
        {
            "col.1.nullable": None,  # unticked
            "col.1.domain": "declare",
            "col.1.categories": "Paris, Lyon",
            "col.5.type": "ignore",
            "col.2.domain": "declare",
            "col.2.min": "0",
            "col.2.max": "5000",
            "col.2.bins": "10",
            "col.4.range": None,
        },
    )
    columns = {c["name"]: c for c in edited["columns"]}
    assert columns["city"]["categories"] == ["Paris", "Lyon"]
    assert columns["city"]["nullable"] is False  # it was declared nullable: now explicitly not
    assert columns["smoker"] == {"name": "smoker", "type": "ignore"}
    assert columns["grams"]["bins"] == 10
    assert (columns["grams"]["min"], columns["grams"]["max"]) == (0, 5000)
    assert columns["grams"]["integer"] is True  # a key the form does not edit is kept
    assert columns["opened"]["bins"] == {"quantiles": 16, "range": False}
    assert columns["id"] == {"name": "id", "type": "ignore"}


def test_a_type_change_drops_the_old_types_keys() -> None:
    edited = _round_trip(DRAFT, {"col.0.type": "categorical", "col.0.domain": "discover"})
    # "At most" left empty takes the draft's cap: without one the upload refused the schema with
    # "max must be an integer from 1 to 100000", a field the form does not show (issue 26 §5).
    assert edited["columns"][0] == {
        "name": "id",
        "type": "categorical",
        "categories": {"discover": True, "max": 200},
        "other": "other",
    }
    SchemaSpec.from_json({"columns": edited["columns"][:1]})  # the engine accepts the column
    numeric = _round_trip(DRAFT, {"col.2.type": "categorical", "col.2.domain": "discover"})
    assert numeric["columns"][2]["categories"] == {"discover": True, "max": 200}
    SchemaSpec.from_json({"columns": numeric["columns"][2:3]})


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"col.2.domain": "declare", "col.2.bins": "ten"}, "bins must be a whole number"),
        ({"col.2.min": "low"}, "min must be a number"),
        ({"col.7.categories": ""}, "declare its categories"),
        ({"col.3.type": "float"}, "choose a type"),
        ({"col.count": "x"}, "incomplete"),
    ],
)
def test_values_that_are_not_json_are_refused_by_column(
    edits: dict[str, str], message: str
) -> None:
    with pytest.raises(SchemaFormError, match=message):
        _round_trip(DRAFT, edits)
