"""A schema (``{"columns": [...]}``) as an editable form, and the form turned back into JSON.

The console shows a schema draft (``POST /v1/schema-drafts``) as one row per column: its type, its
nullable flag, and whether its categories or bins are declared (public: never learned from the
data, shown to every analyst key) or discovered with DP at upload (charged to the budget; see
docs/discovery.md). The form only writes JSON: the schema it produces is validated by the upload
route exactly like one sent to the API, so no schema rule lives here.

Keys the form does not edit (a date's ``format``, a number's ``decimals``, ``other``, a discovery
clause's own ``rho``...) travel in a hidden copy of the column's original entry and are kept
while its type is unchanged, so a draft submitted without edits is the draft itself.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.privacy_unit import DEFAULT_MAX_ROWS
from engine.schema_draft.inference import MAX_CATEGORIES as DRAFT_MAX_CATEGORIES

COLUMN_TYPES = ("categorical", "numeric", "date", "datetime", "boolean", "codes", "ignore")
BINNED = ("numeric", "date", "datetime")
NULLABLE_TYPES = ("categorical", "numeric", "date", "datetime", "boolean")
MANAGED = ("nullable", "categories", "min", "max", "bins", "size")
COUNT_FIELD = "col.count"
EXTRA_FIELD = "schema_extra"
UNIT_COLUMN_FIELD = "unit.column"  # the privacy unit's column; "" for privacy per row
UNIT_ROWS_FIELD = "unit.max_rows"  # k; "" for the default
FIELDS_PER_COLUMN = 12
"""Form fields one column row sends (the multipart parser's field cap is sized from it)."""


class SchemaFormError(ValueError):
    """A form value that cannot be written as JSON (names the column, never a data value)."""


@dataclass(frozen=True)
class ColumnRow:
    """One column of the form, as text the inputs show and send back."""

    index: int
    name: str
    type: str
    nullable: bool
    domain: str  # "discover" (learned with DP at upload) or "declare" (public)
    categories: str  # declared categories: comma-separated, or a JSON list
    max_categories: str  # discovery: at most this many categories
    min: str
    max: str
    bins: str  # declared: a count or comma-separated edges; codes: the number of codes
    quantiles: str  # discovery: this many bins at DP quantiles
    learn_range: bool  # discovery: min/max are a public window, the range is learned with DP
    original: str  # the column's entry as drafted (JSON), for the keys the form does not edit

    def field(self, key: str) -> str:
        return f"col.{self.index}.{key}"


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def _list_text(values: Sequence[Any]) -> str:
    """Comma-separated when that reads back the same, else the JSON list."""
    texts = [_text(v) for v in values]
    plain = all(isinstance(v, str) for v in values) and all(
        t and t == t.strip() and "," not in t and not t.startswith("[") for t in texts
    )
    return ", ".join(texts) if plain else json.dumps(list(values))


def rows_from_schema(schema: Mapping[str, Any]) -> list[ColumnRow]:
    """The form's rows for a schema's columns."""
    rows = []
    for index, entry in enumerate(schema.get("columns", [])):
        if not isinstance(entry, Mapping):
            continue
        categories = entry.get("categories")
        bins = entry.get("bins")
        discover = isinstance(categories, Mapping) or isinstance(bins, Mapping)
        rows.append(
            ColumnRow(
                index=index,
                name=str(entry.get("name", "")),
                type=str(entry.get("type", "ignore")),
                nullable=entry.get("nullable") is True,
                domain="discover" if discover else "declare",
                categories=_list_text(categories) if isinstance(categories, list) else "",
                max_categories=_text(categories.get("max"))
                if isinstance(categories, Mapping)
                else "",
                min=_text(entry.get("min")),
                max=_text(entry.get("max")),
                bins=_bins_text(entry),
                quantiles=_text(bins.get("quantiles")) if isinstance(bins, Mapping) else "",
                learn_range=isinstance(bins, Mapping) and bins.get("range") is True,
                original=json.dumps(dict(entry), separators=(",", ":")),
            )
        )
    return rows


def _bins_text(entry: Mapping[str, Any]) -> str:
    if entry.get("type") == "codes":
        return _text(entry.get("size"))
    bins = entry.get("bins")
    if isinstance(bins, list):
        return ", ".join(_text(b) for b in bins)
    return "" if isinstance(bins, Mapping) else _text(bins)


def schema_extra(schema: Mapping[str, Any]) -> str:
    """The schema's keys other than ``columns`` and ``privacy_unit`` (``missing_values``...),
    as JSON (the privacy unit has inputs of its own: :func:`unit_values`)."""
    return json.dumps(
        {k: v for k, v in schema.items() if k not in ("columns", "privacy_unit")},
        separators=(",", ":"),
    )


def unit_values(schema: Mapping[str, Any]) -> dict[str, str]:
    """The privacy unit's inputs for a schema: its column and k, or empty (privacy per row).

    A draft's suggestion (``POST /v1/schema-drafts``'s ``privacy_unit``) is shown beside them,
    never filled in: a draft accepted as is keeps every row (docs/console.md)."""
    unit = schema.get("privacy_unit")
    if not isinstance(unit, Mapping):
        return {UNIT_COLUMN_FIELD: "", UNIT_ROWS_FIELD: ""}
    return {
        UNIT_COLUMN_FIELD: _text(unit.get("column")),
        UNIT_ROWS_FIELD: _text(unit.get("max_rows")),
    }


def apply_unit(schema: dict[str, Any], form: Mapping[str, str]) -> dict[str, Any]:
    """``schema`` with the form's privacy unit (or none): the upload validates it."""
    column = form.get(UNIT_COLUMN_FIELD, "")
    rows = form.get(UNIT_ROWS_FIELD, "").strip()
    schema.pop("privacy_unit", None)
    if not column:
        if rows:
            raise SchemaFormError("the privacy unit: choose its column, or leave k empty")
        return schema
    unit: dict[str, Any] = {"column": column}
    if rows:
        unit["max_rows"] = _integer(rows, "k (rows per person)", "the privacy unit")
    schema["privacy_unit"] = unit
    return schema


def apply_unit_to_json(text: str, form: Mapping[str, str]) -> str | None:
    """The JSON source's schema text with the form's privacy unit added, or None when it needs
    no change: no unit was chosen, the schema already names the same one (k defaulting as the
    upload defaults it), or the text is not a JSON object (the upload refuses it as usual).

    The unit's inputs show whichever schema source is chosen: a unit chosen there must not be
    dropped silently by the JSON source (a row-level dataset its owner believes per person).
    A JSON schema that names another unit is refused (:class:`SchemaFormError`)."""
    wanted = apply_unit({}, form).get("privacy_unit")
    if wanted is None:
        return None
    try:
        schema = json.loads(text)
    except ValueError:
        return None
    if not isinstance(schema, dict):
        return None
    current = schema.get("privacy_unit")
    if current is None:
        schema["privacy_unit"] = wanted
        return json.dumps(schema, indent=2)
    if (
        isinstance(current, Mapping)
        and current.get("column") == wanted["column"]
        and current.get("max_rows", DEFAULT_MAX_ROWS) == wanted.get("max_rows", DEFAULT_MAX_ROWS)
    ):
        return None
    raise SchemaFormError(
        "the privacy unit: the JSON schema names another privacy unit than the one chosen "
        "above; choose the same one, or none above to keep the schema's"
    )


def form_values(rows: Sequence[ColumnRow], extra: str) -> dict[str, str]:
    """What a browser sends for these rows when nothing is edited (unticked boxes send nothing)."""
    values = {COUNT_FIELD: str(len(rows)), EXTRA_FIELD: extra}
    for row in rows:
        values.update(
            {
                row.field("name"): row.name,
                row.field("type"): row.type,
                row.field("domain"): row.domain,
                row.field("categories"): row.categories,
                row.field("max_categories"): row.max_categories,
                row.field("min"): row.min,
                row.field("max"): row.max,
                row.field("bins"): row.bins,
                row.field("quantiles"): row.quantiles,
                row.field("original"): row.original,
            }
        )
        if row.nullable:
            values[row.field("nullable")] = "yes"
        if row.learn_range:
            values[row.field("range")] = "yes"
    return values


def rows_from_form(form: Mapping[str, str], max_columns: int) -> list[ColumnRow]:
    """The rows as submitted (to build the schema, or to show the form again after an error)."""
    try:
        count = int(form.get(COUNT_FIELD, "0"))
    except ValueError:
        raise SchemaFormError("the column form is incomplete; draft the schema again") from None
    if not 0 <= count <= max_columns:
        raise SchemaFormError(f"the form has more than {max_columns} columns")

    def get(index: int, key: str) -> str:
        return form.get(f"col.{index}.{key}", "").strip()

    return [
        ColumnRow(
            index=i,
            name=form.get(f"col.{i}.name", ""),
            type=get(i, "type"),
            nullable=get(i, "nullable") == "yes",
            domain="discover" if get(i, "domain") == "discover" else "declare",
            categories=get(i, "categories"),
            max_categories=get(i, "max_categories"),
            min=get(i, "min"),
            max=get(i, "max"),
            bins=get(i, "bins"),
            quantiles=get(i, "quantiles"),
            learn_range=get(i, "range") == "yes",
            original=form.get(f"col.{i}.original", ""),
        )
        for i in range(count)
    ]


def schema_from_rows(rows: Sequence[ColumnRow], extra: str) -> dict[str, Any]:
    """The schema JSON the rows describe (validated afterwards by the upload itself)."""
    try:
        top = json.loads(extra) if extra.strip() else {}
    except ValueError:
        raise SchemaFormError("the schema's options are not valid JSON") from None
    if not isinstance(top, dict):
        raise SchemaFormError("the schema's options are not a JSON object")
    top.pop("columns", None)
    return {"columns": [_entry(row) for row in rows], **top}


def _original(row: ColumnRow) -> dict[str, Any]:
    try:
        value = json.loads(row.original) if row.original else {}
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def _entry(row: ColumnRow) -> dict[str, Any]:
    where = f"column {row.name!r}"
    if row.type not in COLUMN_TYPES:
        raise SchemaFormError(f"{where}: choose a type")
    original = _original(row)
    same_type = original.get("type") == row.type
    entry: dict[str, Any] = dict(original) if same_type else {}
    entry["name"] = row.name
    entry["type"] = row.type
    for key in MANAGED:
        entry.pop(key, None)
    if row.type in NULLABLE_TYPES and (row.nullable or ("nullable" in original and same_type)):
        entry["nullable"] = row.nullable
    if row.type == "categorical":
        entry["categories"] = _categories(row, original if same_type else {}, where)
        if row.domain == "discover":
            entry.setdefault("other", "other")
    elif row.type in BINNED:
        numeric = row.type == "numeric"
        for key in ("min", "max"):
            text = getattr(row, key)
            if text:
                entry[key] = _number(text, key, where) if numeric else text
        bins = _bins(row, original if same_type else {}, numeric, where)
        if bins is not None:
            entry["bins"] = bins
    elif row.type == "codes":
        entry["size"] = _integer(row.bins, "the number of codes", where)
    return entry


def _categories(row: ColumnRow, original: Mapping[str, Any], where: str) -> Any:
    if row.domain == "discover":
        clause = original.get("categories")
        found: dict[str, Any] = dict(clause) if isinstance(clause, Mapping) else {}
        found["discover"] = True
        previous = found.pop("max", None)
        if row.max_categories:
            found["max"] = _integer(row.max_categories, "the most categories", where)
        else:
            # An empty "At most" (a column switched to categorical) keeps the clause's own cap
            # or takes the draft's; the schema needs one (issue 26 §5: the upload answered
            # "max must be an integer from 1 to 100000", naming a field the form does not have).
            found["max"] = previous if isinstance(previous, int) else DRAFT_MAX_CATEGORIES
        return found
    text = row.categories
    if text.startswith("["):
        try:
            values = json.loads(text)
        except ValueError:
            raise SchemaFormError(f"{where}: the categories are not a valid JSON list") from None
        if not isinstance(values, list):
            raise SchemaFormError(f"{where}: the categories are not a JSON list")
        return values
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values:
        raise SchemaFormError(f"{where}: declare its categories or discover them with DP")
    return values


def _bins(row: ColumnRow, original: Mapping[str, Any], numeric: bool, where: str) -> Any:
    if row.domain == "discover":
        clause = original.get("bins")
        found: dict[str, Any] = dict(clause) if isinstance(clause, Mapping) else {}
        found["quantiles"] = _integer(row.quantiles or "16", "the number of DP bins", where)
        if row.learn_range:
            found["range"] = True
        elif "range" in found:
            found["range"] = False
        return found
    if not row.bins:
        return None
    parts = [part.strip() for part in row.bins.split(",")]
    if len(parts) == 1:
        return _integer(parts[0], "bins", where)
    return [_number(p, "a bin edge", where) if numeric else p for p in parts]


def _integer(text: str, what: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SchemaFormError(f"{where}: {what} must be a whole number") from None


def _number(text: str, what: str, where: str) -> int | float:
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SchemaFormError(f"{where}: {what} must be a number")
    return value
