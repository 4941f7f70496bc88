"""The schema's ``privacy_unit`` (issue 28 §1): parsed from public facts with precise messages,
the unit's column turned into a column that is read but never stored, round-tripped exactly."""

from __future__ import annotations

import re
from typing import Any

import pytest

from engine.privacy_unit import DEFAULT_MAX_ROWS, MAX_MAX_ROWS, PrivacyUnit
from engine.tables.encoding import IgnoredColumn, SchemaError, SchemaSpec

COLUMNS: list[dict[str, Any]] = [
    {"name": "person", "type": "categorical", "categories": ["p1", "p2"]},
    {"name": "age", "type": "numeric", "min": 0, "max": 100, "bins": 4},
    {"name": "city", "type": "categorical", "categories": ["a", "b"]},
]


def _spec(unit: Any, columns: list[dict[str, Any]] | None = None, **extra: Any) -> SchemaSpec:
    return SchemaSpec.from_json({"columns": columns or COLUMNS, "privacy_unit": unit, **extra})


def test_the_unit_column_is_read_never_stored_and_k_defaults_to_one() -> None:
    spec = _spec({"column": "person"})
    assert spec.privacy_unit == PrivacyUnit("person", DEFAULT_MAX_ROWS)
    assert spec.entries[0] == IgnoredColumn("person")
    table = spec.complete()
    assert table.names == ("age", "city")
    assert table.ignored == ("person",)  # the file must have it; nothing encodes it
    assert "person" in table.file_names


def test_round_trip_keeps_the_unit_and_k() -> None:
    spec = _spec({"column": "person", "max_rows": 5})
    again = SchemaSpec.from_json(spec.to_json())
    assert again == spec
    assert spec.to_json()["privacy_unit"] == {"column": "person", "max_rows": 5}
    # Without a unit the JSON has no such key (a row-level schema is unchanged).
    assert "privacy_unit" not in SchemaSpec.from_json({"columns": COLUMNS}).to_json()


def test_an_ignored_column_may_be_the_unit() -> None:
    columns = [{"name": "person", "type": "ignore"}, *COLUMNS[1:]]
    assert _spec({"column": "person", "max_rows": 3}, columns).privacy_unit == PrivacyUnit(
        "person", 3
    )


@pytest.mark.parametrize(
    ("unit", "message"),
    [
        ("person", "privacy_unit must be an object"),
        ({"max_rows": 2}, "privacy_unit: column must be the name of a column"),
        ({"column": ""}, "privacy_unit: column must be the name of a column"),
        ({"column": 3}, "privacy_unit: column must be the name of a column"),
        ({"column": "nobody"}, "privacy_unit: column 'nobody' is not in columns"),
        ({"column": "person", "max_rows": 0}, f"privacy_unit: max_rows must be an integer from 1 to {MAX_MAX_ROWS}"),
        ({"column": "person", "max_rows": MAX_MAX_ROWS + 1}, "privacy_unit: max_rows must be an integer"),
        ({"column": "person", "max_rows": 2.5}, "privacy_unit: max_rows must be an integer"),
        ({"column": "person", "max_rows": True}, "privacy_unit: max_rows must be an integer"),
        ({"column": "person", "k": 2}, "privacy_unit has no keys but column and max_rows (not 'k')"),
    ],
)  # fmt: skip
def test_refusals_are_precise(unit: Any, message: str) -> None:
    with pytest.raises(SchemaError, match="^" + re.escape(message)):
        _spec(unit)


def test_the_unit_cannot_be_the_only_stored_column_nor_a_discovered_one() -> None:
    with pytest.raises(SchemaError, match="declare at least one other column"):
        _spec({"column": "person"}, [COLUMNS[0], {"name": "x", "type": "ignore"}])
    with pytest.raises(SchemaError, match="cannot be a discovered column"):
        _spec({"column": "person"}, discovered=["person"])


def test_a_domain_map_has_no_privacy_unit() -> None:
    with pytest.raises(SchemaError, match="a domain map gives each column an integer size"):
        SchemaSpec.from_json({"a": 2, "privacy_unit": {"column": "a"}})
