"""Declared cross-column rules: their JSON form, parsing and validation from public facts.

A rule is declared by the data owner in the schema's ``"rules"`` list and is public (it is shown
with the dataset's schema). It is never proposed from the data. Validation uses only public
facts: column names and kinds, declared categories, declared bounds and the rule's constants; a
refused rule gets a message that names the rule (``rules[i]`` and its description), never a
data value.

Three kinds (docs/api.md, "Rules"):

* ``{"compare": ["end", ">=", "start"]}``: a column against another column of the same kind
  (numeric/codes, date, datetime) or against a constant (``["age", ">=", 16]``; a text or date
  constant is written ``{"value": "2020-01-01"}``, a bare string always names a column).
  Operators ``<``, ``<=``, ``>``, ``>=``, ``==``, ``!=``; categorical and boolean columns take
  ``==``/``!=`` against a declared value only.
* ``{"allowed": {"columns": ["a", "b"], "combinations": [["x", "y"], ...]}}``: the values of
  categorical, boolean or codes columns must be one of the listed combinations.
* ``{"sum": {"column": "total", "of": ["a", "b"]}}``: a numeric (or codes) column equals the sum
  of others, at the total's precision (``"tolerance"`` overrides it).

Every rule may carry ``"if": {column: [values]}`` (membership, for categorical, boolean and codes
columns) or ``"if": {column: {">=": 16}}`` (comparisons with constants, for numeric, codes, date
and datetime columns); every condition must hold for the rule to apply, and ``"name"`` (a short
label for the report). A row with a missing value in any column of a rule or its conditions is
not checked (as an SQL ``CHECK`` constraint).

The evaluation and keeping of rules on synthetic rows is :mod:`engine.constraints.keep`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from engine.columns import (
    BooleanColumn,
    CategoricalColumn,
    CodesColumn,
    DateColumn,
    DatetimeColumn,
    DiscoveredCategories,
    IgnoredColumn,
    NumericColumn,
    QuantileBins,
    SchemaError,
)
from engine.columns.output import number_places

MAX_RULES = 64
"""Rules a schema may declare."""
MAX_COMBINATIONS = 10_000
"""Allowed combinations over all rules of a schema."""
MAX_RULE_COLUMNS = 16
"""Columns one rule (its conditions included) may name."""
MAX_CONDITION_VALUES = 1_000
"""Values one membership condition may list."""
MAX_RULE_NAME_LENGTH = 100

OPS = ("<", "<=", ">", ">=", "==", "!=")
Op = Literal["<", "<=", ">", ">=", "==", "!="]
Scalar = str | int | float | bool
Kind = Literal["number", "date", "datetime", "label", "boolean"]
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_ISO = re.compile(r"\d{4}-\d{2}(-\d{2}([T ]\d{2}(:\d{2}(:\d{2})?)?)?)?\Z")
_RESOLUTION_SECONDS = {"day": 86_400, "hour": 3_600, "minute": 60, "second": 1}
_NUMPY_UNITS = {"year": "Y", "month": "M", "day": "D", "hour": "h", "minute": "m", "second": "s"}


def flip(op: str) -> str:
    """The operator with its operands swapped (``a >= b`` is ``b <= a``)."""
    return _FLIP[op]


def compare(left: np.ndarray, op: str, right: np.ndarray | float) -> npt.NDArray[np.bool_]:
    """``left op right`` elementwise (NaN compares false); ``==``/``!=`` with a 1e-9 relative
    tolerance (sums and decimals are floats)."""
    with np.errstate(invalid="ignore"):
        if op in ("==", "!="):
            equal = np.isclose(left, right, rtol=1e-9, atol=1e-9)
            if op == "==":
                return np.asarray(equal, dtype=bool)
            return np.asarray(~equal & ~np.isnan(left) & ~np.isnan(right), dtype=bool)
        functions = {
            "<": np.less,
            "<=": np.less_equal,
            ">": np.greater,
            ">=": np.greater_equal,
        }
        return np.asarray(functions[op](left, right), dtype=bool)


@dataclass(frozen=True)
class Condition:
    """One condition of a rule's ``"if"``: membership (``values``) or comparisons (``tests``)."""

    column: str
    values: tuple[Scalar, ...] | None = None
    tests: tuple[tuple[str, Scalar], ...] = ()

    def __post_init__(self) -> None:
        if (self.values is None) == (not self.tests):
            raise ValueError("a condition is either a membership or comparisons")
        if any(op not in OPS for op, _ in self.tests):
            raise ValueError("unknown operator")

    def to_json(self) -> Any:
        if self.values is not None:
            return list(self.values)
        return {op: value for op, value in self.tests}

    def describe(self) -> str:
        if self.values is not None:
            return f"{self.column} in [{', '.join(map(_text, self.values))}]"
        return " and ".join(f"{self.column} {op} {_text(v)}" for op, v in self.tests)


@dataclass(frozen=True)
class Compare:
    """``left op right`` where ``right`` is a column (``right_column``) or a constant."""

    left: str
    op: str
    right_column: str | None = None
    value: Scalar | None = None
    when: tuple[Condition, ...] = ()
    name: str | None = None

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError("unknown operator")
        if (self.right_column is None) == (self.value is None):
            raise ValueError("compare against a column or a constant")

    @property
    def columns(self) -> tuple[str, ...]:
        """The columns the rule constrains (its conditions' columns are not among them)."""
        return (self.left,) if self.right_column is None else (self.left, self.right_column)

    def body(self) -> dict[str, Any]:
        right: Any = self.right_column
        if self.right_column is None:
            right = self.value if not isinstance(self.value, str) else {"value": self.value}
        return {"compare": [self.left, self.op, right]}

    def text(self) -> str:
        right = self.right_column if self.right_column is not None else _text(self.value)
        return f"{self.left} {self.op} {right}"


@dataclass(frozen=True)
class Allowed:
    """The values of ``columns`` are one of ``combinations`` (one value per column each)."""

    columns: tuple[str, ...]
    combinations: tuple[tuple[Scalar, ...], ...]
    when: tuple[Condition, ...] = ()
    name: str | None = None

    def __post_init__(self) -> None:
        if not self.columns or not self.combinations:
            raise ValueError("an allowed rule needs columns and combinations")
        if any(len(c) != len(self.columns) for c in self.combinations):
            raise ValueError("each combination gives one value per column")

    def body(self) -> dict[str, Any]:
        return {
            "allowed": {
                "columns": list(self.columns),
                "combinations": [list(c) for c in self.combinations],
            }
        }

    def text(self) -> str:
        count = len(self.combinations)
        plural = "s" if count != 1 else ""
        return f"({', '.join(self.columns)}) in {count} allowed combination{plural}"


@dataclass(frozen=True)
class Sum:
    """``column`` equals the sum of ``parts`` (within ``tolerance``, default: the total's
    precision, half its step, or 1e-9 relative for a continuous total)."""

    column: str
    parts: tuple[str, ...]
    tolerance: float | None = None
    when: tuple[Condition, ...] = ()
    name: str | None = None

    def __post_init__(self) -> None:
        if not self.parts:
            raise ValueError("a sum needs parts")
        if self.tolerance is not None and not (
            math.isfinite(self.tolerance) and self.tolerance >= 0
        ):
            raise ValueError("tolerance must be finite and non-negative")

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.column, *self.parts)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"column": self.column, "of": list(self.parts)}
        if self.tolerance is not None:
            out["tolerance"] = self.tolerance
        return {"sum": out}

    def text(self) -> str:
        return f"{self.column} = {' + '.join(self.parts)}"


Rule = Compare | Allowed | Sum


def rule_columns(rule: Rule) -> tuple[str, ...]:
    """Every column a rule names: its own, then its conditions'."""
    own = rule.columns
    return own + tuple(c.column for c in rule.when if c.column not in own)


def describe(rule: Rule) -> str:
    """A one-line public description (the rule's declared text, never data)."""
    text = rule.text()
    if rule.when:
        text += " if " + " and ".join(c.describe() for c in rule.when)
    return text


def rule_to_json(rule: Rule) -> dict[str, Any]:
    """The normalised JSON form (what ``parse_rules`` reads back to an equal rule)."""
    out = rule.body()
    if rule.when:
        out["if"] = {c.column: c.to_json() for c in rule.when}
    if rule.name is not None:
        out["name"] = rule.name
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


# --- parsing (structure only) -----------------------------------------------------------------


def _scalar(value: Any, where: str) -> Scalar:
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise SchemaError(f"{where}: values must be strings, numbers or true/false")


def _name(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise SchemaError(f"{where}: {what} must be a column name")
    return value


def _conditions(raw: Any, where: str) -> tuple[Condition, ...]:
    if not isinstance(raw, Mapping) or not raw:
        raise SchemaError(f'{where}: "if" must be an object of column: [values] or {{op: value}}')
    out = []
    for column, test in raw.items():
        if isinstance(test, list):
            if not test or len(test) > MAX_CONDITION_VALUES:
                raise SchemaError(
                    f"{where}: the condition on {column!r} lists 1 to {MAX_CONDITION_VALUES} values"
                )
            out.append(Condition(column, values=tuple(_scalar(v, where) for v in test)))
        elif isinstance(test, Mapping) and test and set(test) <= set(OPS):
            tests = tuple((op, _scalar(v, where)) for op, v in test.items())
            out.append(Condition(column, tests=tests))
        else:
            raise SchemaError(
                f"{where}: the condition on {column!r} must be a list of values or an object "
                f"of comparisons ({', '.join(OPS)})"
            )
    return tuple(out)


def _right(value: Any, where: str) -> tuple[str | None, Scalar | None]:
    if isinstance(value, str):
        if not value:
            raise SchemaError(f"{where}: the right side names no column")
        return value, None
    if isinstance(value, Mapping):
        if set(value) != {"value"}:
            raise SchemaError(f'{where}: a constant is written {{"value": ...}}')
        return None, _scalar(value["value"], where)
    return None, _scalar(value, where)


def parse_rule(raw: Any, position: int) -> Rule:
    """One rule's JSON (structure only; :func:`check_rules` checks it against the columns)."""
    where = f"rules[{position}]"
    if not isinstance(raw, Mapping):
        raise SchemaError(f"{where} must be an object")
    kinds = [k for k in ("compare", "allowed", "sum") if k in raw]
    if len(kinds) != 1:
        raise SchemaError(f'{where} needs exactly one of "compare", "allowed" or "sum"')
    unknown = sorted(set(raw) - {kinds[0], "if", "name"})
    if unknown:
        raise SchemaError(f"{where}: unknown keys {', '.join(map(repr, unknown))}")
    name = raw.get("name")
    if name is not None and (
        not isinstance(name, str) or not 0 < len(name) <= MAX_RULE_NAME_LENGTH
    ):
        raise SchemaError(f"{where}: name must be a string of 1 to {MAX_RULE_NAME_LENGTH} chars")
    when = _conditions(raw["if"], where) if "if" in raw else ()
    body = raw[kinds[0]]
    if kinds[0] == "compare":
        if not isinstance(body, list) or len(body) != 3 or body[1] not in OPS:
            raise SchemaError(
                f'{where}: "compare" is [column, operator, column or constant] with an operator '
                f"among {', '.join(OPS)}"
            )
        column, value = _right(body[2], where)
        return Compare(_name(body[0], where, "the left side"), body[1], column, value, when, name)
    if kinds[0] == "allowed":
        if not isinstance(body, Mapping) or set(body) != {"columns", "combinations"}:
            raise SchemaError(f'{where}: "allowed" is {{"columns": [...], "combinations": [...]}}')
        columns, combos = body["columns"], body["combinations"]
        if not isinstance(columns, list) or not columns:
            raise SchemaError(f"{where}: columns must be a non-empty list of column names")
        names = tuple(_name(c, where, "columns") for c in columns)
        if not isinstance(combos, list) or not combos:
            raise SchemaError(f"{where}: combinations must be a non-empty list")
        parsed = []
        for combo in combos:
            if not isinstance(combo, list) or len(combo) != len(names):
                raise SchemaError(
                    f"{where}: each combination is a list of {len(names)} values (one per column)"
                )
            parsed.append(tuple(_scalar(v, where) for v in combo))
        return Allowed(names, tuple(parsed), when, name)
    if not isinstance(body, Mapping) or not {"column", "of"} <= set(body) <= {
        "column",
        "of",
        "tolerance",
    }:
        raise SchemaError(f'{where}: "sum" is {{"column": ..., "of": [...], "tolerance": t}}')
    parts = body["of"]
    if not isinstance(parts, list) or not parts:
        raise SchemaError(f'{where}: "of" must be a non-empty list of column names')
    tolerance = body.get("tolerance")
    if tolerance is not None and (
        isinstance(tolerance, bool)
        or not isinstance(tolerance, int | float)
        or not math.isfinite(tolerance)
        or tolerance < 0
    ):
        raise SchemaError(f"{where}: tolerance must be a non-negative number")
    return Sum(
        _name(body["column"], where, "column"),
        tuple(_name(p, where, '"of"') for p in parts),
        None if tolerance is None else float(tolerance),
        when,
        name,
    )


def parse_rules(raw: Any) -> tuple[Rule, ...]:
    """The ``"rules"`` list of a schema (structure only); :class:`SchemaError` otherwise."""
    if not isinstance(raw, list):
        raise SchemaError("rules must be a list")
    check_rule_sizes(raw)
    return tuple(parse_rule(entry, i) for i, entry in enumerate(raw))


def check_rule_sizes(raw: Any) -> None:
    """Refuse a raw ``"rules"`` list that declares too much, reading only list lengths (before
    anything is built from it)."""
    if not isinstance(raw, list):
        return
    if len(raw) > MAX_RULES:
        raise SchemaError(f"the schema declares more than {MAX_RULES} rules")
    total = 0
    for entry in raw:
        body = entry.get("allowed") if isinstance(entry, Mapping) else None
        combos = body.get("combinations") if isinstance(body, Mapping) else None
        if isinstance(combos, list):
            total += len(combos)
    if total > MAX_COMBINATIONS:
        raise SchemaError(f"the rules list more than {MAX_COMBINATIONS} allowed combinations")


# --- public facts of a column -----------------------------------------------------------------


@dataclass(frozen=True)
class Facts:
    """What a rule may rely on about a column: all declared (or the declared window of a range
    to be learned). Values are in *view units*: numbers; days (dates) or seconds (datetimes)
    since 1970-01-01; the label's position (categorical); 1/0 (boolean)."""

    name: str
    kind: Kind
    low: float
    high: float
    step: float | None  # the grid of values (None: continuous)
    labels: tuple[str, ...] | None = None  # categorical labels; None: discovered (unknown)
    codes: bool = False  # a codes column (a number kind that is also discrete)
    # The decimal places a numeric column is written at: its decimals, or for a continuous
    # column written with a "%.Nf" format, N (None: integers, or the shortest form).
    places: int | None = None
    # A date or datetime column: the numpy unit of the values it writes ("D", "h", "m", "s",
    # or the calendar's "M", "Y"), the grid its repaired values are put on.
    unit: str | None = None

    @property
    def grid(self) -> float | None:
        """The grid repairs put values on: the column's own (``step``), or for a continuous
        column written with N decimal places, multiples of 10^-N (so a repaired value is
        written as it was checked)."""
        if self.step is not None or self.places is None:
            return self.step
        return 10.0**-self.places

    @property
    def base(self) -> str:
        """The numpy unit of the view values of a date (days) or datetime (seconds)."""
        return "D" if self.kind == "date" else "s"

    def constant(self, value: Scalar, where: str) -> float:
        """A rule's constant in view units; :class:`SchemaError` if it does not fit the kind."""
        what = f"{where}: column {self.name!r}"
        if self.kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise SchemaError(f"{what} is numeric: compare it with a number")
            return float(value)
        if self.kind in ("date", "datetime"):
            if not isinstance(value, str):
                raise SchemaError(f"{what} is a {self.kind}: give an ISO 8601 text constant")
            refused = f"{what}: a constant is not an ISO 8601 {self.kind} (without a zone, UTC)"
            if not _ISO.match(value):
                raise SchemaError(refused)
            if self.kind == "date" and len(value) > len("2020-01-01"):
                # A time would be cut off: d >= "2020-01-10T05:00" would keep 2020-01-10.
                raise SchemaError(f"{what} is a date: give a date constant without a time")
            try:
                stamp = np.datetime64(value.replace(" ", "T"))
            except (ValueError, OverflowError):
                raise SchemaError(refused) from None
            unit = "D" if self.kind == "date" else "s"
            return float(stamp.astype(f"datetime64[{unit}]").astype(np.int64))
        if self.kind == "boolean":
            if not isinstance(value, bool):
                raise SchemaError(f"{what} is boolean: compare it with true or false")
            return 1.0 if value else 0.0
        if self.labels is None:
            raise SchemaError(
                f"{what} has its categories discovered from the data; a rule can name its values "
                "only when they are declared"
            )
        text = _label(value)
        if text not in self.labels:
            raise SchemaError(f"{what}: a rule names a value that is not a declared category")
        return float(self.labels.index(text))

    @property
    def kind_text(self) -> str:
        """The kind as the schema names it."""
        if self.codes:
            return "codes"
        return {"number": "numeric", "label": "categorical"}.get(self.kind, self.kind)

    @property
    def discrete(self) -> bool:
        return self.kind in ("label", "boolean") or self.codes

    @property
    def cardinality(self) -> int:
        """The number of distinct view values of a discrete column."""
        if self.kind == "boolean":
            return 2
        if self.labels is not None:
            return len(self.labels)
        return int(self.high) + 1


def _label(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def column_facts(entry: Any) -> Facts:
    """The public facts of a schema entry (complete or pending); SchemaError for an ignored
    column."""
    if isinstance(entry, IgnoredColumn):
        raise SchemaError("ignored")
    name = entry.name
    if isinstance(entry, QuantileBins):
        entry_low, entry_high = entry.bounds()
        provisional = entry.provisional()
        base = column_facts(provisional)
        return Facts(
            name, base.kind, entry_low, entry_high, base.step, places=base.places, unit=base.unit
        )
    if isinstance(entry, NumericColumn):
        places = number_places(entry.format) if entry.format is not None else None
        if entry.step is not None:  # integers are exact; decimals are written at their places
            places = entry.decimals
        return Facts(name, "number", entry.edges[0], entry.edges[-1], entry.step, places=places)
    if isinstance(entry, CodesColumn):
        return Facts(name, "number", 0.0, float(entry.size - 1), 1.0, codes=True)
    if isinstance(entry, DateColumn | DatetimeColumn):
        kind: Kind = "date" if isinstance(entry, DateColumn) else "datetime"
        written = entry.written_resolution  # what the CSV shows (its format may be coarser)
        seconds = _RESOLUTION_SECONDS.get(written)
        if seconds is None:
            step = None  # a month/year resolution, whose grid is not evenly spaced
        else:
            step = max(1.0, seconds / 86_400) if kind == "date" else float(seconds)
        low, high = float(entry.edges[0]), float(entry.edges[-1] - 1)
        return Facts(name, kind, low, high, step, unit=_NUMPY_UNITS[written])
    if isinstance(entry, BooleanColumn):
        return Facts(name, "boolean", 0.0, 1.0, 1.0)
    if isinstance(entry, CategoricalColumn):
        labels = entry.labels
        return Facts(name, "label", 0.0, float(len(labels) - 1), 1.0, labels=labels)
    if isinstance(entry, DiscoveredCategories):
        return Facts(name, "label", 0.0, float(entry.size), 1.0, labels=None)
    raise SchemaError(f"column {name!r}: unknown column type")


# --- validation against the columns -----------------------------------------------------------


def check_rules(
    rules: Sequence[Rule], entries: Sequence[Any], learned: Collection[str] = ()
) -> None:
    """Refuse a rule that names an unknown or ignored column, mixes kinds, names an undeclared
    value, or can never hold given the declared bounds. Public facts only.

    ``learned`` names columns whose bins were learned with DP at upload: their bounds are not
    declared (a learned range is a DP output inside its declared window), so a rule naming one is
    not checked against bounds here. It was checked against the declared window before
    discovery (the pending column's facts); refusing it after discovery would make an upload
    whose discovery was charged fail on what discovery learned. A rule the learned range makes
    impossible is left to the repair, and the rows it cannot mend are counted in ``remaining``.
    """
    by_name = {entry.name: entry for entry in entries}
    unlearned = set(learned)
    for i, rule in enumerate(rules):
        where = f"rules[{i}] ({describe(rule)})"
        names = rule_columns(rule)
        if len(names) > MAX_RULE_COLUMNS:
            raise SchemaError(f"{where}: a rule names at most {MAX_RULE_COLUMNS} columns")
        facts: dict[str, Facts] = {}
        for name in names:
            entry = by_name.get(name)
            if entry is None:
                raise SchemaError(f"{where}: column {name!r} is not in the schema")
            if isinstance(entry, IgnoredColumn):
                raise SchemaError(f"{where}: column {name!r} is ignored (never stored)")
            facts[name] = column_facts(entry)
        check_rule(rule, facts, where, bounds=not unlearned & set(names))


def check_rule(rule: Rule, facts: Mapping[str, Facts], where: str, *, bounds: bool = True) -> None:
    """One rule against its columns' facts (see :func:`check_rules`); ``bounds=False`` skips
    the checks that read the columns' bounds (whether the rule can ever hold within them)."""
    for condition in rule.when:
        fact = facts[condition.column]
        if condition.values is not None:
            if not fact.discrete:
                raise SchemaError(
                    f"{where}: the condition on {condition.column!r} lists values; a "
                    f'{fact.kind_text} column takes comparisons ({{">=": ...}})'
                )
            for value in condition.values:
                _discrete_value(fact, value, where)
        else:
            if fact.kind in ("label", "boolean"):
                raise SchemaError(
                    f"{where}: the condition on {condition.column!r} compares; a "
                    f"{fact.kind_text} column takes a list of values"
                )
            for _, value in condition.tests:
                fact.constant(value, where)
    if isinstance(rule, Compare):
        _check_compare(rule, facts, where, bounds)
    elif isinstance(rule, Allowed):
        if len(set(rule.columns)) != len(rule.columns):
            raise SchemaError(f"{where}: the columns must be distinct")
        for name in rule.columns:
            if not facts[name].discrete:
                raise SchemaError(
                    f"{where}: column {name!r} is {facts[name].kind_text}; allowed "
                    "combinations take categorical, boolean or codes columns"
                )
        seen = set()
        for combo in rule.combinations:
            pairs = zip(rule.columns, combo, strict=True)
            key = tuple(_discrete_value(facts[n], v, where) for n, v in pairs)
            if key in seen:
                raise SchemaError(f"{where}: a combination is listed twice")
            seen.add(key)
    else:
        names = rule.columns
        if len(set(names)) != len(names):
            raise SchemaError(f"{where}: the total and its parts must be distinct columns")
        for name in names:
            if facts[name].kind != "number":
                raise SchemaError(
                    f"{where}: column {name!r} is {facts[name].kind_text}; a sum takes "
                    "numeric columns"
                )
        total = facts[rule.column]
        low = sum(facts[p].low for p in rule.parts)
        high = sum(facts[p].high for p in rule.parts)
        if bounds and (high < total.low or low > total.high):
            raise SchemaError(f"{where}: can never hold within the columns' declared bounds")


def _discrete_value(fact: Facts, value: Scalar, where: str) -> float:
    if fact.codes:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= fact.high:
            raise SchemaError(
                f"{where}: column {fact.name!r} holds codes 0 to {int(fact.high)}: "
                "a rule names a value outside them"
            )
        return float(value)
    return fact.constant(value, where)


def _check_compare(rule: Compare, facts: Mapping[str, Facts], where: str, bounds: bool) -> None:
    left = facts[rule.left]
    op = rule.op
    if rule.right_column is None:
        assert rule.value is not None
        value = left.constant(rule.value, where)
        if left.kind in ("label", "boolean"):
            if op not in ("==", "!="):
                raise SchemaError(
                    f"{where}: column {rule.left!r} is {left.kind_text}: compare it with == or !="
                )
            if op == "!=" and left.cardinality < 2:
                raise SchemaError(f"{where}: can never hold (the column has one value)")
            return
        _check_step(left, op, where)
        if bounds and not _feasible(left.low, left.high, op, value, value):
            raise SchemaError(f"{where}: can never hold within the column's declared bounds")
        if op == "==" and left.step is not None:
            steps = value / left.step
            if abs(steps - round(steps)) > 1e-9 * max(1.0, abs(steps)):
                raise SchemaError(
                    f"{where}: can never hold: the column's values are multiples of {left.step:g}"
                )
        return
    right = facts[rule.right_column]
    if rule.right_column == rule.left:
        raise SchemaError(f"{where}: compares a column with itself")
    if left.kind in ("label", "boolean") or right.kind in ("label", "boolean"):
        raise SchemaError(
            f"{where}: categorical and boolean columns are compared with constants; "
            'use "allowed" for combinations of two columns'
        )
    if left.kind != right.kind:
        raise SchemaError(
            f"{where}: column {rule.left!r} is {left.kind_text} and {rule.right_column!r} is "
            f"{right.kind_text}: they cannot be compared"
        )
    _check_step(left, op, where)
    _check_step(right, flip(op), where)
    if bounds and not _feasible(left.low, left.high, op, right.low, right.high):
        raise SchemaError(f"{where}: can never hold within the columns' declared bounds")


def _check_step(fact: Facts, op: str, where: str) -> None:
    if op in ("<", ">", "!=") and fact.step is None and fact.kind in ("date", "datetime"):
        raise SchemaError(
            f"{where}: column {fact.name!r} is written at a month or year resolution: use "
            "<=, >= or =="
        )


def _feasible(low: float, high: float, op: str, other_low: float, other_high: float) -> bool:
    """Whether some value of [low, high] and some of [other_low, other_high] satisfy ``op``."""
    if op in (">=", ">"):
        return high > other_low or (op == ">=" and high == other_low)
    if op in ("<=", "<"):
        return low < other_high or (op == "<=" and low == other_high)
    if op == "==":
        return max(low, other_low) <= min(high, other_high)
    return not (low == high == other_low == other_high)


__all__ = [
    "MAX_COMBINATIONS",
    "MAX_RULES",
    "OPS",
    "Allowed",
    "Compare",
    "Condition",
    "Facts",
    "Rule",
    "Sum",
    "check_rule",
    "check_rule_sizes",
    "check_rules",
    "column_facts",
    "compare",
    "describe",
    "flip",
    "parse_rule",
    "parse_rules",
    "rule_columns",
    "rule_to_json",
]
