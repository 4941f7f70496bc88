"""Issue 28 §2: declared rules the synthetic output keeps (engine/constraints).

Each rule kind is checked on decoded values; rows that break one are redrawn from a model, then
repaired; the written table has no violation left, the counts add up, and the same seed writes
the same file. Schema parsing refuses rules that name unknown or ignored columns, mix kinds,
name undeclared values or can never hold, with a message that names the rule.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pytest

from engine.constraints.keep import RuleKeeper
from engine.constraints.rules import MAX_COMBINATIONS, MAX_RULES
from engine.tables.encoding import SchemaError, SchemaLimits, SchemaSpec, TableSchema
from engine.tables.synthetic_output import write_synthetic

COLUMNS: list[dict[str, Any]] = [
    {"name": "start", "type": "numeric", "min": 0, "max": 100, "bins": 10, "integer": True},
    {"name": "end", "type": "numeric", "min": 0, "max": 100, "bins": 10, "integer": True},
    {"name": "age", "type": "numeric", "min": 0, "max": 90, "bins": 9, "integer": True},
    {"name": "wrkstat", "type": "categorical", "categories": ["Full-Time", "Part-Time", "Retired"]},
    {"name": "a", "type": "numeric", "min": 0, "max": 10, "bins": 5, "decimals": 1},
    {"name": "b", "type": "numeric", "min": 0, "max": 10, "bins": 5, "decimals": 1},
    {"name": "total", "type": "numeric", "min": 0, "max": 20, "bins": 5, "decimals": 1},
    {"name": "d1", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 12},
    {"name": "d2", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 12},
    {"name": "x", "type": "categorical", "categories": ["p", "q", "r"]},
    {"name": "y", "type": "boolean", "nullable": True},
    {"name": "note", "type": "ignore"},
]
RULES: list[dict[str, Any]] = [
    {"compare": ["end", ">=", "start"]},
    {"compare": ["age", ">=", 16], "if": {"wrkstat": ["Full-Time"]}},
    {"sum": {"column": "total", "of": ["a", "b"]}},
    {"compare": ["d2", ">", "d1"], "name": "ends after it starts"},
    {"allowed": {"columns": ["x", "y"], "combinations": [["p", True], ["q", False]]}},
]


def _schema(rules: list[dict[str, Any]] | None = None) -> TableSchema:
    return TableSchema.from_json({"columns": COLUMNS, "rules": RULES if rules is None else rules})


def _uniform(schema: TableSchema) -> Any:
    sizes = schema.domain().sizes

    def sample(rows: int, rng: np.random.Generator) -> npt.NDArray[np.integer[Any]]:
        return np.stack([rng.integers(0, s, rows) for s in sizes], axis=1).astype(np.uint8)

    return sample


def _violations(frame: pd.DataFrame) -> dict[str, int]:
    d1, d2 = pd.to_datetime(frame["d1"]), pd.to_datetime(frame["d2"])
    known = frame["y"].notna()
    combos = ~(
        ((frame["x"] == "p") & (frame["y"].astype(str) == "True"))
        | ((frame["x"] == "q") & (frame["y"].astype(str) == "False"))
    )
    return {
        "end >= start": int((frame["end"] < frame["start"]).sum()),
        "age": int(((frame["wrkstat"] == "Full-Time") & (frame["age"] < 16)).sum()),
        "sum": int(((frame["total"] - frame["a"] - frame["b"]).abs() > 0.05).sum()),
        "dates": int((d2 <= d1).sum()),
        "allowed": int((combos & known).sum()),
    }


def _write(schema: TableSchema, tmp_path: Path, sampler: Any, seed: int = 7) -> Any:
    codes = _uniform(schema)(3000, np.random.default_rng(1))
    out = tmp_path / f"out-{seed}-{sampler is not None}.csv"
    kept = write_synthetic(
        schema, codes, np.random.default_rng(seed), out, "csv", batch_rows=1000, sampler=sampler
    )
    return kept, pd.read_csv(out), out


def test_unkept_rows_break_every_rule_kind(tmp_path: Path) -> None:
    """The check below is not vacuous: without rules, uniform codes break each rule."""
    schema = _schema([])
    codes = _uniform(schema)(3000, np.random.default_rng(1))
    out = tmp_path / "plain.csv"
    assert write_synthetic(schema, codes, np.random.default_rng(7), out, "csv") is None
    assert all(count > 100 for count in _violations(pd.read_csv(out)).values())


@pytest.mark.parametrize("redraw", [True, False])
def test_written_rows_keep_every_rule(tmp_path: Path, redraw: bool) -> None:
    schema = _schema()
    kept, frame, _ = _write(schema, tmp_path, _uniform(schema) if redraw else None)
    assert _violations(frame) == dict.fromkeys(_violations(frame), 0)
    report = kept.report
    assert report.rows == 3000 and report.remaining_rows == 0
    assert [r.remaining for r in report.rules] == [0] * len(RULES)
    assert all(r.violating_before > 100 for r in report.rules)
    assert report.rules[3].rule == "ends after it starts"
    assert report.rules[1].rule == "age >= 16 if wrkstat in ['Full-Time']"
    for counts in report.rules:
        # Every row that broke a rule was redrawn or repaired (a repair may also mend a row
        # that a redraw or another repair broke).
        mended = counts.resampled_in_bins + counts.redrawn + counts.repaired
        assert mended >= counts.violating_before
    if redraw:
        assert report.redrawn_rows > 0 and report.drawn_rows > 0
        # The sum is never redrawn for: a redrawn row's total is repaired like any other.
        assert report.rules[2].repaired > 0
    else:
        assert report.redrawn_rows == 0 and report.drawn_rows == 0
        assert report.resampled_rows > 0  # values drawn again inside their bins
        assert report.resampled_rows + report.repaired_rows >= report.violating_rows_before


def test_written_codes_are_the_written_values(tmp_path: Path) -> None:
    """The codes handed to the reports encode the rows that were written (redrawn and
    repaired rows included)."""
    schema = _schema()
    kept, _, out = _write(schema, tmp_path, _uniform(schema))
    frame = pd.read_csv(out, dtype=str, keep_default_na=False)
    frame["note"] = ""
    encoded = schema.encode(frame)
    assert not encoded.invalid_rows
    np.testing.assert_array_equal(encoded.codes, kept.codes.astype(np.int64))


def test_same_seed_same_file(tmp_path: Path) -> None:
    schema = _schema()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    sampler = _uniform(schema)
    one = _write(schema, tmp_path / "a", sampler, seed=3)
    two = _write(schema, tmp_path / "b", sampler, seed=3)
    other = _write(schema, tmp_path / "b", sampler, seed=4)
    assert one[2].read_bytes() == two[2].read_bytes()
    assert one[2].read_bytes() != other[2].read_bytes()
    assert one[0].report.to_json() == two[0].report.to_json()
    np.testing.assert_array_equal(one[0].codes, two[0].codes)


def test_repair_only_with_no_rounds(tmp_path: Path) -> None:
    schema = _schema()
    codes = _uniform(schema)(1000, np.random.default_rng(1))
    out = tmp_path / "repair.csv"
    kept = write_synthetic(
        schema, codes, np.random.default_rng(2), out, "csv", sampler=_uniform(schema), rounds=0
    )
    assert kept is not None
    report = kept.report
    assert report.resampled_rows == report.redrawn_rows == report.drawn_rows == 0
    assert report.repaired_rows == report.violating_rows_before > 0
    assert report.remaining_rows == 0
    assert _violations(pd.read_csv(out)) == dict.fromkeys(_violations(pd.read_csv(out)), 0)


def test_redraw_keeps_rows_from_the_model() -> None:
    """A redraw only replaces rows with rows the model drew that keep every rule: with a model
    that can draw kept rows, no row needs a repair of a compare rule."""
    schema = _schema([{"compare": ["end", ">=", "start"]}])
    keeper = RuleKeeper(
        schema,
        schema.rules,
        lambda drawn: schema.decode(drawn, np.random.default_rng(0)),
        _uniform(schema),
        np.random.default_rng(5),
    )
    codes = _uniform(schema)(500, np.random.default_rng(2))
    kept_codes, frame = keeper.keep(codes, schema.decode(codes, np.random.default_rng(3)))
    assert int((frame["end"] < frame["start"]).sum()) == 0
    assert keeper.report.rules[0].repaired == 0
    report = keeper.report
    # Same-bin pairs in the wrong order are mended inside their bins; pairs whose bins are in
    # the wrong order are redrawn from the model.
    assert report.resampled_rows > 0 and report.redrawn_rows > 0
    assert report.resampled_rows + report.redrawn_rows == report.violating_rows_before
    # Rows that kept the rule are untouched.
    fine = ~(schema.decode(codes, np.random.default_rng(3)).eval("end < start")).to_numpy()
    np.testing.assert_array_equal(kept_codes[fine], codes[fine])


def test_repairs_are_nearest() -> None:
    """Each repair, without a model: clamp, sum, nearest combination by fewest changes."""
    schema = _schema()
    keeper = RuleKeeper(
        schema,
        schema.rules,
        lambda c: schema.decode(c, np.random.default_rng(0)),
        None,
        np.random.default_rng(0),
    )
    frame = pd.DataFrame(
        {
            "start": pd.array([50, 10], dtype="Int64"),
            "end": pd.array([20, 30], dtype="Int64"),
            "age": pd.array([10, 10], dtype="Int64"),
            "wrkstat": pd.Categorical(
                ["Full-Time", "Retired"], categories=["Full-Time", "Part-Time", "Retired"]
            ),
            "a": pd.array([1.5, 2.0], dtype="Float64"),
            "b": pd.array([2.5, 3.0], dtype="Float64"),
            "total": pd.array([9.0, 5.0], dtype="Float64"),
            "d1": pd.Series(np.array(["2020-03-05", "2020-01-01"], dtype="datetime64[s]")),
            "d2": pd.Series(np.array(["2020-03-05", "2020-02-01"], dtype="datetime64[s]")),
            "x": pd.Categorical(["p", "r"], categories=["p", "q", "r"]),
            "y": pd.array([False, None], dtype="boolean"),
        }
    )
    codes = schema.encode_batch(schema.to_arrow(frame)).codes
    _, out = keeper.keep(codes, frame)
    assert list(out["end"]) == [50, 30]  # clamped to start; the second row kept it
    assert list(out["age"]) == [16, 10]  # the condition holds only on the first row
    assert list(out["total"]) == [4.0, 5.0]
    assert list(out["d2"].astype(str)) == ["2020-03-06", "2020-02-01"]
    # (p, False) is one change from (p, True) and from (q, False): no row keeps the rule (the
    # second row has a null y and is not checked), so the declared order decides: (p, True).
    assert str(out.loc[0, "x"]) == "p" and bool(out.loc[0, "y"]) is True
    assert str(out.loc[1, "x"]) == "r" and out["y"].isna().iloc[1]
    assert keeper.report.rules[4].repaired == 1


def test_condition_comparisons_and_constants() -> None:
    schema = TableSchema.from_json(
        {
            "columns": COLUMNS,
            "rules": [
                {"compare": ["wrkstat", "!=", {"value": "Full-Time"}], "if": {"age": {"<": 16}}},
                {"compare": ["d1", ">=", {"value": "2020-06-01"}]},
            ],
        }
    )
    keeper = RuleKeeper(
        schema,
        schema.rules,
        lambda c: schema.decode(c, np.random.default_rng(0)),
        None,
        np.random.default_rng(0),
    )
    codes = _uniform(schema)(2000, np.random.default_rng(9))
    _, frame = keeper.keep(codes, schema.decode(codes, np.random.default_rng(1)))
    assert not ((frame["age"] < 16) & (frame["wrkstat"] == "Full-Time")).any()
    assert (pd.to_datetime(frame["d1"]) >= pd.Timestamp("2020-06-01")).all()
    assert keeper.report.remaining_rows == 0 and keeper.report.rules[0].violating_before > 0


def test_rules_round_trip_and_are_public() -> None:
    schema = _schema()
    again = TableSchema.from_json(json.loads(json.dumps(schema.to_json())))
    assert again == schema and again.to_json()["rules"][3]["name"] == "ends after it starts"
    assert "rules" not in _schema([]).to_json()


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            {"compare": ["finish", ">=", "start"]},
            "rules[0] (finish >= start): column 'finish' is not in the schema",
        ),
        ({"compare": ["note", ">=", "start"]}, "column 'note' is ignored"),
        (
            {"compare": ["d1", ">=", "start"]},
            "'d1' is date and 'start' is numeric: they cannot be compared",
        ),
        ({"compare": ["wrkstat", "==", {"value": "Unemployed"}]}, "not a declared category"),
        ({"compare": ["wrkstat", ">=", {"value": "Retired"}]}, "compare it with == or !="),
        ({"compare": ["age", ">=", 200]}, "can never hold"),
        ({"compare": ["age", "==", 2.5]}, "the column's values are multiples of 1"),
        ({"compare": ["age", ">=", "16"]}, "column '16' is not in the schema"),
        ({"compare": ["d1", ">=", {"value": "June"}]}, "not an ISO 8601 date"),
        ({"compare": ["d1", ">=", {"value": "2020-01-10T05:00"}]}, "without a time"),
        ({"compare": ["age", ">=", 16], "if": {"d1": {"<": "2020-01-10 05"}}}, "without a time"),
        ({"compare": ["x", "==", "wrkstat"]}, 'use "allowed"'),
        ({"compare": ["age", "=>", 16]}, "an operator among"),
        (
            {"allowed": {"columns": ["x", "age"], "combinations": [["p", 1]]}},
            "allowed combinations take",
        ),
        ({"allowed": {"columns": ["x", "y"], "combinations": [["p"]]}}, "a list of 2 values"),
        ({"allowed": {"columns": ["x"], "combinations": [["p"], ["p"]]}}, "listed twice"),
        ({"sum": {"column": "total", "of": ["a", "wrkstat"]}}, "a sum takes numeric columns"),
        ({"sum": {"column": "a", "of": ["total", "b"]}}, None),
        ({"compare": ["age", ">=", 16], "if": {"wrkstat": {">=": 1}}}, "takes a list of values"),
        ({"compare": ["age", ">=", 16], "if": {"start": ["x"]}}, "takes comparisons"),
        ({"compare": ["age", ">=", 16], "when": {}}, "unknown keys 'when'"),
        ({"compare": ["age", ">=", 16], "sum": {}}, "exactly one of"),
    ],
)
def test_refused_rules_name_the_rule(rule: dict[str, Any], message: str | None) -> None:
    if message is None:  # a sum that can hold within the bounds: accepted
        SchemaSpec.from_json({"columns": COLUMNS, "rules": [rule]})
        return
    with pytest.raises(SchemaError) as error:
        SchemaSpec.from_json({"columns": COLUMNS, "rules": [rule]})
    assert message in str(error.value)
    assert str(error.value).startswith("rules[0]")


def test_sum_that_can_never_hold_is_refused() -> None:
    columns = [
        {"name": "a", "type": "numeric", "min": 0, "max": 1, "bins": 1},
        {"name": "t", "type": "numeric", "min": 5, "max": 6, "bins": 1},
    ]
    with pytest.raises(SchemaError, match="can never hold"):
        SchemaSpec.from_json({"columns": columns, "rules": [{"sum": {"column": "t", "of": ["a"]}}]})


def test_discovered_categories_cannot_be_named() -> None:
    columns = [
        {"name": "c", "type": "categorical", "categories": {"discover": True, "max": 5}},
        {"name": "n", "type": "numeric", "min": 0, "max": 9, "bins": 3},
    ]
    rule = {"compare": ["n", ">=", 1], "if": {"c": ["a"]}}
    with pytest.raises(SchemaError, match="categories discovered from the data"):
        SchemaSpec.from_json({"columns": columns, "rules": [rule]})
    # A rule on the declared column alone is fine while c is pending discovery.
    spec = SchemaSpec.from_json({"columns": columns, "rules": [{"compare": ["n", ">=", 1]}]})
    assert spec.resolve({"c": ["a", "b"]}).rules == spec.rules


def test_sizes_are_limited_before_parsing() -> None:
    limits = SchemaLimits(max_columns=50, max_domain_size=1000, max_total_domain_size=10_000)
    too_many = [{"compare": ["age", ">=", 16]}] * (MAX_RULES + 1)
    with pytest.raises(SchemaError, match=f"more than {MAX_RULES} rules"):
        SchemaSpec.from_json({"columns": COLUMNS, "rules": too_many}, limits)
    combos = [["p"]] * (MAX_COMBINATIONS + 1)
    big = [{"allowed": {"columns": ["x"], "combinations": combos}}]
    with pytest.raises(SchemaError, match="allowed combinations"):
        SchemaSpec.from_json({"columns": COLUMNS, "rules": big}, limits)
    with pytest.raises(SchemaError, match="rules must be a list"):
        SchemaSpec.from_json({"columns": COLUMNS, "rules": {}})


FUZZ_COLUMNS: list[dict[str, Any]] = [
    {"name": "n1", "type": "numeric", "min": 0, "max": 10, "bins": 3, "format": "%.2f"},
    {"name": "n2", "type": "numeric", "min": 0, "max": 10, "bins": 4, "integer": True},
    {"name": "n3", "type": "numeric", "min": -5, "max": 20, "bins": 5, "decimals": 2,
     "nullable": True},
    {"name": "c1", "type": "categorical", "categories": ["a", "b", "c"], "other": "o"},
    {"name": "c2", "type": "categorical", "categories": ["x", "y"], "nullable": True},
    {"name": "d1", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 3},
    {"name": "d2", "type": "date", "min": "2020-03-01", "max": "2021-06-30", "bins": 4},
    {"name": "t1", "type": "datetime", "min": "2020-01-01T00:00:00", "max": "2020-01-31T00:00:00",
     "bins": 3, "resolution": "hour"},
    {"name": "t2", "type": "datetime", "min": "2020-01-01T00:00:00", "max": "2020-01-31T00:00:00",
     "bins": 5, "format": "%Y-%m-%d %H:%M", "resolution": "second"},
    {"name": "b", "type": "boolean", "nullable": True},
    {"name": "k", "type": "codes", "size": 4},
]  # fmt: skip


def _random_rule(r: Any) -> dict[str, Any]:
    kinds = {"num": ["n1", "n2", "n3", "k"], "date": ["d1", "d2"], "dt": ["t1", "t2"]}
    consts: dict[str, list[Any]] = {
        "num": [0, 1, 2.5, 5, 9.99, 10],
        "date": ["2020-02-01", "2020-06-15", "2020-12-31"],
        "dt": ["2020-01-10T05:00:00", "2020-01-20"],
    }
    ops = ["<", "<=", ">", ">=", "==", "!="]
    t = r.random()
    body: dict[str, Any]
    if t < 0.45:
        kind = r.choice(list(kinds))
        left, right = r.sample(kinds[kind], 2)
        body = {"compare": [left, r.choice(ops), right]}
    elif t < 0.65:
        kind = r.choice(list(kinds))
        constant = r.choice(consts[kind])
        right = constant if kind == "num" else {"value": constant}
        body = {"compare": [r.choice(kinds[kind]), r.choice(ops), right]}
    elif t < 0.75:
        column = r.choice(["c1", "c2", "b"])
        value: Any = {"c1": {"value": r.choice(["a", "o"])}, "c2": {"value": "y"}}.get(
            column, r.choice([True, False])
        )
        body = {"compare": [column, r.choice(["==", "!="]), value]}
    elif t < 0.9:
        combos = {
            (r.choice(["a", "b", "c", "o"]), r.choice([True, False]), r.randint(0, 3))
            for _ in range(r.randint(1, 4))
        }
        body = {"allowed": {"columns": ["c1", "b", "k"], "combinations": [list(c) for c in combos]}}
    else:
        body = {"sum": {"column": "n1", "of": r.sample(["n2", "n3", "k"], 2)}}
    if r.random() < 0.4:
        body["if"] = r.choice(
            [
                {"c1": r.sample(["a", "b", "c", "o"], 2)},
                {"c2": ["x"]},
                {"b": [r.choice([True, False])]},
                {"k": [r.randint(0, 3)]},
                {"n1": {r.choice(["<", ">="]): r.choice([2, 5, 8])}},
                {"d1": {">=": "2020-05-01"}},
            ]
        )
    return body


def test_random_single_rules_leave_no_row_breaking_them(tmp_path: Path) -> None:
    """Every accepted rule of every kind, with or without a model, on uniform codes: no row
    is left breaking it (deterministic: a fixed seed; 2,500 rules were checked by hand)."""
    import random

    r = random.Random(7)
    checked = 0
    for i in range(100):
        rule = _random_rule(r)
        try:
            schema = TableSchema.from_json({"columns": FUZZ_COLUMNS, "rules": [rule]})
        except SchemaError:
            continue
        checked += 1
        sizes = schema.domain().sizes
        codes = np.stack([np.random.default_rng(i).integers(0, s, 200) for s in sizes], axis=1)

        def uniform(rows: int, rng: np.random.Generator, sizes: tuple[int, ...] = sizes) -> Any:
            return np.stack([rng.integers(0, s, rows) for s in sizes], axis=1)

        for sampler in (uniform, None):
            kept = write_synthetic(
                schema, codes, np.random.default_rng(i), tmp_path / "f.csv", "csv", sampler=sampler
            )
            assert kept is not None
            assert kept.report.remaining_rows == 0, (rule, kept.report.to_json())
    assert checked > 80


def test_a_rule_cannot_name_the_privacy_unit_column() -> None:
    """The unit's column is read for truncation only, never stored: a rule on it is refused."""
    columns = [*COLUMNS, {"name": "person", "type": "categorical", "categories": ["p1", "p2"]}]
    unit = {"column": "person", "max_rows": 2}
    rule = {"allowed": {"columns": ["person"], "combinations": [["p1"]]}}
    with pytest.raises(SchemaError, match="column 'person' is ignored"):
        SchemaSpec.from_json({"columns": columns, "privacy_unit": unit, "rules": [rule]})
    spec = SchemaSpec.from_json(
        {"columns": columns, "privacy_unit": unit, "rules": [{"compare": ["end", ">=", "start"]}]}
    )
    assert spec.privacy_unit is not None and len(spec.rules) == 1
    assert SchemaSpec.from_json(spec.to_json()) == spec


def test_a_learned_range_never_refuses_a_rule_after_discovery(tmp_path: Path) -> None:
    """A rule is checked against a learned range's declared window before discovery; once the
    range is learned (a DP output, its discovery charged) it is not refused any more, so the
    upload's outcome does not hinge on what discovery learned: the repair keeps what it can and
    counts the rest in ``remaining``."""
    from fractions import Fraction

    from engine.discovery.cost import DiscoveryCost
    from engine.discovery.learned import LearnedBins

    columns = [
        {"name": "x", "type": "numeric", "integer": True, "min": 0, "max": 100,
         "bins": {"quantiles": 2, "range": True}},
        {"name": "y", "type": "numeric", "min": 0, "max": 100, "bins": 4, "integer": True},
    ]  # fmt: skip
    rules = [{"compare": ["x", "<=", 5]}, {"sum": {"column": "y", "of": ["x"]}}]
    spec = SchemaSpec.from_json({"columns": columns, "rules": rules})
    with pytest.raises(SchemaError, match="can never hold"):  # the declared window decides
        SchemaSpec.from_json({"columns": columns, "rules": [{"compare": ["x", ">", 100]}]})
    # Discovery learned [19.5, 80.5]: x <= 5 can no longer hold.
    cost = DiscoveryCost("x", Fraction(1))
    learned = LearnedBins((19.5, 50.5, 80.5), None, False, True, 2, cost)
    schema = spec.resolve({}, learned=["x"], learned_bins={"x": learned})
    assert schema.discovered == ("x",)
    assert TableSchema.from_json(schema.to_json()) == schema  # the stored schema reads back
    codes = np.random.default_rng(1).integers(0, 2, (500, 2))
    kept = write_synthetic(schema, codes, np.random.default_rng(2), tmp_path / "f.csv", "csv")
    assert kept is not None
    assert kept.report.rules[0].violating_before == 500
    assert kept.report.rules[0].remaining == 500  # counted, never hidden
    frame = pd.read_csv(tmp_path / "f.csv")
    assert frame["x"].min() >= 20  # repairs stay inside the learned range


@pytest.mark.parametrize("sampler", [False, True])
def test_formatted_continuous_columns_keep_the_rules_as_written(
    tmp_path: Path, sampler: bool
) -> None:
    """A continuous column written with "%.1f" keeps the rules in the CSV too: values checked
    as written (4.13 > 4.11 is written 4.1 > 4.1) and repaired onto the written grid, parts of a
    sum included (their rounding would otherwise move the written sum)."""
    columns = [
        {"name": "s", "type": "numeric", "min": 0, "max": 10, "bins": 2, "format": "%.1f"},
        {"name": "e", "type": "numeric", "min": 0, "max": 10, "bins": 2, "format": "%.1f"},
        {"name": "a", "type": "numeric", "min": 0, "max": 10, "bins": 2, "format": "%.1f"},
        {"name": "t", "type": "numeric", "min": 0, "max": 20, "bins": 2, "format": "%.1f"},
    ]
    rules = [{"compare": ["e", ">", "s"]}, {"sum": {"column": "t", "of": ["s", "a"]}}]
    schema = TableSchema.from_json({"columns": columns, "rules": rules})
    codes = np.random.default_rng(1).integers(0, 2, (3000, 4))
    draw = _uniform(schema) if sampler else None
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"f.{fmt}"
        kept = write_synthetic(
            schema, codes, np.random.default_rng(2), out, fmt, batch_rows=1000, sampler=draw
        )
        assert kept is not None and kept.report.remaining_rows == 0
        frame = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
        assert int((frame["e"] <= frame["s"]).sum()) == 0
        # Written at one place, the sum holds to the written precision (half a step).
        gap = (frame["t"] - frame["s"] - frame["a"]).abs()
        assert int((gap > 0.05 + 1e-9).sum()) == 0


@pytest.mark.parametrize("redraw", [True, False])
def test_rule_counts_add_up(tmp_path: Path, redraw: bool) -> None:
    """A replaced row counts as mended for a rule only if the new row keeps it. A continuous
    sum (tolerance 1e-9 relative) holds by chance with probability 0, so it is never mended by a
    resample or a redraw: every row that broke it is counted as repaired. The compare rule,
    whose columns no other repair touches, has each row that broke it counted exactly once."""
    columns = [
        *COLUMNS[:2],
        {"name": "a", "type": "numeric", "min": 0, "max": 10, "bins": 5},
        {"name": "b", "type": "numeric", "min": 0, "max": 10, "bins": 5},
        {"name": "total", "type": "numeric", "min": 0, "max": 20, "bins": 5},
    ]
    rules = [{"compare": ["end", ">=", "start"]}, {"sum": {"column": "total", "of": ["a", "b"]}}]
    schema = TableSchema.from_json({"columns": columns, "rules": rules})
    codes = _uniform(schema)(3000, np.random.default_rng(1))
    out = tmp_path / "f.csv"
    kept = write_synthetic(
        schema, codes, np.random.default_rng(7), out, "csv", batch_rows=1000,
        sampler=_uniform(schema) if redraw else None,
    )  # fmt: skip
    assert kept is not None
    report = kept.report
    assert report.resampled_rows > 0 and (report.redrawn_rows > 0) == redraw
    ordered, total = report.rules
    assert ordered.violating_before > 100
    mended = ordered.resampled_in_bins + ordered.redrawn + ordered.repaired + ordered.remaining
    assert mended == ordered.violating_before
    assert total.resampled_in_bins == total.redrawn == 0
    assert total.repaired >= total.violating_before == 3000
    frame = pd.read_csv(out)
    assert int((frame["end"] < frame["start"]).sum()) == 0


def test_dates_and_datetimes_keep_the_rules_as_written(tmp_path: Path) -> None:
    """A datetime drawn to the second but written to the minute ("%Y-%m-%d %H:%M"), and a date
    written by month ("%Y-%m"), keep the rules in the CSV: a repair does not move a value by one
    second (written as the same minute) or to a day inside a month (written as its first)."""
    columns = [
        {"name": "t", "type": "datetime", "min": "2020-01-01T00:00:00",
         "max": "2020-01-31T00:00:00", "bins": 4, "format": "%Y-%m-%d %H:%M",
         "resolution": "second"},
        {"name": "u", "type": "datetime", "min": "2020-01-01T00:00:00",
         "max": "2020-01-31T00:00:00", "bins": 4, "format": "%Y-%m-%d %H:%M",
         "resolution": "second"},
        {"name": "d", "type": "date", "min": "2020-01-01", "max": "2020-12-31", "bins": 4,
         "format": "%Y-%m"},
    ]  # fmt: skip
    rules = [{"compare": ["u", ">", "t"]}, {"compare": ["d", ">=", {"value": "2020-03-15"}]}]
    schema = TableSchema.from_json({"columns": columns, "rules": rules})
    codes = np.random.default_rng(1).integers(0, 4, (2000, 3))
    out = tmp_path / "f.csv"
    kept = write_synthetic(schema, codes, np.random.default_rng(2), out, "csv")
    assert kept is not None and kept.report.remaining_rows == 0
    assert all(r.violating_before > 100 for r in kept.report.rules)
    frame = pd.read_csv(out, dtype=str)
    t = pd.to_datetime(frame["t"], format="%Y-%m-%d %H:%M")
    u = pd.to_datetime(frame["u"], format="%Y-%m-%d %H:%M")
    d = pd.to_datetime(frame["d"], format="%Y-%m")
    assert int((u <= t).sum()) == 0
    assert int((d < pd.Timestamp("2020-03-15")).sum()) == 0
    parquet = tmp_path / "f.parquet"
    write_synthetic(schema, codes, np.random.default_rng(2), parquet, "parquet")
    values = pd.read_parquet(parquet)
    assert int((values["u"] <= values["t"]).sum()) == 0
    assert int((pd.to_datetime(values["d"]) < pd.Timestamp("2020-03-15")).sum()) == 0


def test_repairs_stay_inside_bounds_just_past_a_grid_value(tmp_path: Path) -> None:
    """A bound a hair above a grid value (3.0000000001 for an integer column, within the grid's
    1e-9 slack) must not let a repair write 3, outside the declared domain (the job would
    fail when the repaired row is encoded)."""
    columns = [
        {"name": "x", "type": "numeric", "min": 3.0000000001, "max": 10, "bins": 1,
         "integer": True},
        {"name": "y", "type": "numeric", "min": 0, "max": 10, "bins": 1, "integer": True},
    ]  # fmt: skip
    schema = TableSchema.from_json({"columns": columns, "rules": [{"compare": ["x", "<=", "y"]}]})
    codes = np.zeros((500, 2), dtype=np.uint8)
    kept = write_synthetic(schema, codes, np.random.default_rng(2), tmp_path / "f.csv", "csv")
    assert kept is not None and kept.report.repaired_rows > 0
    frame = pd.read_csv(tmp_path / "f.csv")
    assert int((frame["x"] > frame["y"]).sum()) == 0


@pytest.mark.parametrize("op", [">", "<"])
def test_strict_comparison_with_a_formatted_column_holds_as_written(
    tmp_path: Path, op: str
) -> None:
    """``n > m`` where m is drawn continuous and written at two places: a repair must beat m as
    written too (m = 2.996 is written 3.00: n = 3.00 keeps it as decoded, not as written)."""
    columns = [
        {"name": "n", "type": "numeric", "min": 0, "max": 10, "bins": 2, "decimals": 2},
        {"name": "m", "type": "numeric", "min": 0, "max": 10, "bins": 2, "format": "%.2f"},
    ]
    schema = TableSchema.from_json({"columns": columns, "rules": [{"compare": ["n", op, "m"]}]})
    codes = np.random.default_rng(1).integers(0, 2, (4000, 2))
    out = tmp_path / "f.csv"
    kept = write_synthetic(schema, codes, np.random.default_rng(2), out, "csv")
    assert kept is not None and kept.report.remaining_rows == 0
    frame = pd.read_csv(out)
    broken = frame["n"] <= frame["m"] if op == ">" else frame["n"] >= frame["m"]
    assert int(broken.sum()) == 0
