"""Release tier (engine/reports/release.py): DP post-processing only, deterministic, no raw value."""

from __future__ import annotations

import inspect
import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from engine.accounting import epsilon_from_rho_delta
from engine.columns.categorical import CategoricalColumn, CodesColumn
from engine.columns.numeric import NumericColumn
from engine.domain import Dataset
from engine.marginals import measure_marginal
from engine.release.record import Charge, MeasuredMarginal, ReleaseRecord
from engine.reports import build_release_report, render_html
from engine.reports.common import mutual_information
from engine.tables.encoding import TableSchema

DISTINCTIVE_TEXT = ("zebra-unique-771", "quokka-secret-042")
DISTINCTIVE_NUMBERS = (98765.4321, 12345.6789)


def _tiny() -> tuple[TableSchema, ReleaseRecord, np.ndarray]:
    schema = TableSchema((CodesColumn("a", 3), CodesColumn("b", 3)))
    one_way = MeasuredMarginal(("a",), np.array([50, 30, 20]), Fraction(4), Fraction(1, 8))
    pair = MeasuredMarginal(
        ("a", "b"), np.array([[40, 10, 0], [0, 30, 0], [5, 5, 10]]), Fraction(9), Fraction(1, 18)
    )
    charge = Charge("selection", "choose the pair", Fraction(1, 4) - Fraction(1, 18), 1.0, 0.5)
    record = ReleaseRecord(
        "test", {"k": 2}, Fraction(3, 8), schema.domain(), 100.0, (one_way, pair), (charge,)
    )
    a = np.repeat([0, 1, 2], [50, 30, 20])
    b = np.array([0] * 40 + [1] * 10 + [1] * 30 + [0] * 5 + [1] * 5 + [2] * 10)
    return schema, record, np.column_stack([a, b]).astype(np.int64)


def test_the_builder_takes_no_real_data() -> None:
    parameters = inspect.signature(build_release_report).parameters
    assert list(parameters) == [
        "schema",
        "record",
        "synthetic",
        "model_marginal",
        "deltas",
        "discovery_delta",
        "privacy_unit",  # k and the DP truncation count: public (issue 28 §1)
        "rules",  # counts of keeping the declared rules: functions of the model's output
        "synthetic_rows",  # a partitioned release's row count: the output's (issue 29 §2)
    ]


def test_a_subsample_report_states_the_release_rows() -> None:
    schema, record, synthetic = _tiny()
    assert "report_sample_rows" not in build_release_report(schema, record, synthetic)
    built = build_release_report(schema, record, synthetic, synthetic_rows=10_000_000)
    assert built["synthetic_rows"] == 10_000_000
    assert built["report_sample_rows"] == synthetic.shape[0]


def test_the_rules_kept_are_reported() -> None:
    """Issue 28 §2: what keeping the declared rules did is in the JSON and the HTML."""
    schema, record, synthetic = _tiny()
    assert build_release_report(schema, record, synthetic)["rules"] is None
    counts = {
        "rows": 4,
        "violating_rows_before": 2,
        "redrawn_rows": 1,
        "repaired_rows": 1,
        "remaining_rows": 0,
        "drawn_rows": 16,
        "redraw": "model",
        "redraw_rounds": 10,
        "rules": [
            {"rule": "end >= start", "violating_before": 2, "redrawn": 1, "repaired": 1,
             "remaining": 0}
        ],
    }  # fmt: skip
    report = build_release_report(schema, record, synthetic, rules=counts)
    assert report["rules"] == counts and "rules" in report["explanations"]
    html = render_html(report, title="t")
    assert "Rules kept" in html and "end &gt;= start" in html


def test_the_profile_adds_the_discovery_delta_and_states_dp_correctly() -> None:
    # Issue 24 §3: (ε(ρ, δ_conv), δ_conv + discovery δ), and (ε, δ)-DP worded as the inequality,
    # not as "with probability 1 − δ" (probabilistic DP, which the conversion does not give).
    schema, record, synthetic = _tiny()
    plain = build_release_report(schema, record, synthetic, deltas=(1e-6,))
    report = build_release_report(schema, record, synthetic, deltas=(1e-6,), discovery_delta=4e-7)
    [entry] = report["privacy_profile"]
    assert entry["conversion_delta"] == 1e-6 and entry["discovery_delta"] == 4e-7
    assert entry["delta"] == pytest.approx(1.4e-6)
    assert entry["epsilon"] == plain["privacy_profile"][0]["epsilon"]
    wording = report["explanations"]["privacy_profile"]
    assert "1 − δ" not in wording and "e^ε · P" in wording and "discovery" in wording
    html = render_html(report, title="t")
    assert "discovery δ" in html and "conversion δ" in html
    with pytest.raises(ValueError, match="discovery_delta"):
        build_release_report(schema, record, synthetic, discovery_delta=1.0)


def test_numbers_match_hand_values() -> None:
    schema, record, synthetic = _tiny()
    report = build_release_report(schema, record, synthetic)
    assert report["tier"] == "release"
    first, second = report["measurements"]
    # σ = 2, 3 cells, noisy total 100: ½·2·√(2/π)·3/100.
    assert first["expected_noise_tvd"] == pytest.approx(
        0.5 * 2 * math.sqrt(2 / math.pi) * 3 / 100, rel=1e-5
    )
    assert first["rho_share"] == pytest.approx(1 / 3, rel=1e-5)
    # The synthetic rows reproduce both measurements exactly.
    assert first["model_residual_tvd"] == 0.0
    assert second["model_residual_tvd"] == 0.0
    assert report["charges"][0]["rho_share"] == pytest.approx((1 / 4 - 1 / 18) / (3 / 8), rel=1e-5)
    a = report["distributions"][0]
    assert a["noisy"] == [0.5, 0.3, 0.2]
    assert a["error"] == pytest.approx([2 * 2 / 100] * 3)
    assert report["distributions"][1]["noisy"] is None
    assert report["privacy_profile"][0] == {
        "delta": 1e-5,
        "conversion_delta": 1e-5,
        "discovery_delta": 0.0,
        "epsilon": pytest.approx(float(epsilon_from_rho_delta(Fraction(3, 8), 1e-5)), rel=1e-5),
    }
    pairs = report["pairs"]
    assert pairs["connected_pairs"] == [["a", "b"]]
    assert pairs["top_pairs"][0]["connected"] is True
    assert 0 < pairs["top_pairs"][0]["normalised_mi"] <= 1


def test_model_marginal_is_used_and_compressed_axes_are_mapped() -> None:
    schema = TableSchema((CodesColumn("a", 4), CodesColumn("b", 2)))
    # Codes 0 and 1 of a were measured together (MST-style compression).
    merged = MeasuredMarginal(
        ("a",), np.array([60, 30, 10]), Fraction(1), Fraction(1, 2), (np.array([0, 0, 1, 2]),)
    )
    record = ReleaseRecord("test", {}, Fraction(1, 2), schema.domain(), 100.0, (merged,))
    synthetic = np.column_stack([np.repeat([0, 1, 2, 3], [30, 30, 30, 10]), np.zeros(100)]).astype(
        np.int64
    )
    report = build_release_report(schema, record, synthetic)
    a = report["distributions"][0]
    assert a["labels"] == ["0 + 1", "2", "3"]
    assert a["synthetic"] == [0.6, 0.3, 0.1]
    assert report["measurements"][0]["model_residual_tvd"] == 0.0

    def uniform(attrs: tuple[str, ...]) -> np.ndarray:
        shape = schema.domain().project(attrs).sizes
        return np.full(shape, 1.0 / math.prod(shape))

    with_model = build_release_report(schema, record, synthetic, model_marginal=uniform)
    assert with_model["fit_source"] == "model"
    # Uniform on a → cells (0.5, 0.25, 0.25) against (0.6, 0.3, 0.1): TVD 0.15.
    assert with_model["measurements"][0]["model_residual_tvd"] == pytest.approx(0.15)
    assert with_model["pairs"]["top_pairs"][0]["mi_bits"] == 0.0
    with pytest.raises(ValueError, match="shape"):
        build_release_report(schema, record, synthetic, model_marginal=lambda _: np.ones(3))


def test_a_record_of_another_domain_is_refused() -> None:
    _, record, _ = _tiny()
    other = TableSchema((CodesColumn("a", 3), CodesColumn("b", 4)))
    with pytest.raises(ValueError, match="another domain"):
        build_release_report(other, record, np.zeros((3, 2), dtype=np.int64))


def _released_from_distinctive_table() -> tuple[TableSchema, ReleaseRecord, np.ndarray]:
    """Encode a table with distinctive raw values, measure it with DP noise, sample from it."""
    schema = TableSchema(
        (
            CategoricalColumn("pet", ("cat", "dog"), other="another pet"),
            NumericColumn("income", (0.0, 50_000.0, 100_000.0, 200_000.0)),
        )
    )
    rows = 400
    frame = pd.DataFrame(
        {
            "pet": [("cat", "dog", *DISTINCTIVE_TEXT)[i % 4] for i in range(rows)],
            "income": [
                str((31_000.5, 72_000.25, *DISTINCTIVE_NUMBERS)[i % 4]) for i in range(rows)
            ],
        }
    )
    encoded = schema.encode(frame)
    assert not encoded.problems
    data = Dataset(schema.domain(), encoded.codes)
    measurements = [
        measure_marginal(data, attrs, Fraction(1, 4)) for attrs in (("pet",), ("pet", "income"))
    ]
    marginals = tuple(
        MeasuredMarginal(m.attributes, m.noisy_counts, m.sigma2, m.rho) for m in measurements
    )
    record = ReleaseRecord("test", {}, Fraction(1, 2), schema.domain(), 401.0, marginals)
    # Post-processing: sample synthetic rows from the noisy 2-way table.
    table = np.clip(measurements[1].noisy_counts.astype(float), 0, None).ravel()
    cells = np.random.default_rng(0).choice(table.size, size=rows, p=table / table.sum())
    synthetic = np.column_stack(np.unravel_index(cells, schema.domain().sizes)).astype(np.int64)
    return schema, record, synthetic


def test_no_raw_value_reaches_the_json_or_the_html() -> None:
    schema, record, synthetic = _released_from_distinctive_table()
    report = build_release_report(schema, record, synthetic)
    text = json.dumps(report)
    page = render_html(report, title="release")
    raw = [*DISTINCTIVE_TEXT, *(f"{n}" for n in DISTINCTIVE_NUMBERS), "98765", "12345.6"]
    for value in raw:
        assert value not in text
        assert value not in page
    # The other bucket's label (public) does appear: the check would see a leaked value.
    assert "another pet" in text


def test_identical_output_when_called_twice() -> None:
    schema, record, synthetic = _released_from_distinctive_table()
    first = json.dumps(build_release_report(schema, record, synthetic))
    second = json.dumps(build_release_report(schema, record, synthetic))
    assert first == second


def test_normalised_mi_is_not_available_for_a_one_category_column() -> None:
    """Issue 23: a column that sits on one category had floating-point entropies of ~1e-16 bits,
    and MI / min(H) = 3e-16 / 3e-16 showed as 1 ("one column determines the other")."""
    # A model whose column a is category 0 but for a crumb of 1e-17: H(a) ≈ 5.6e-16 bits.
    crumb = np.array([[1.0, 0.0], [0.0, 1e-17]])
    assert mutual_information(crumb) == (0.0, None)
    # A column of one category exactly: no normalised MI either (0/0).
    assert mutual_information(np.array([[0.3, 0.2, 0.5]])) == (0.0, None)
    # Two fair coins that copy each other: 1 bit, normalised 1.
    mi, normalised = mutual_information(np.array([[0.5, 0.0], [0.0, 0.5]]))
    assert mi == pytest.approx(1.0) and normalised == pytest.approx(1.0)
    # A genuinely rare category (one row in ten million) is still a second category.
    rare = np.array([[1 - 1e-7, 0.0], [0.0, 1e-7]])
    assert mutual_information(rare)[1] == pytest.approx(1.0)


def test_the_release_tier_shows_n_a_for_a_one_category_column() -> None:
    schema = TableSchema((CodesColumn("a", 2), CodesColumn("b", 2), CodesColumn("c", 2)))
    marginal = MeasuredMarginal(("a",), np.array([100, 0]), Fraction(1), Fraction(1, 2))
    record = ReleaseRecord("test", {}, Fraction(1, 2), schema.domain(), 100.0, (marginal,))
    synthetic = np.column_stack([np.zeros(100), np.arange(100) % 2, np.arange(100) % 2]).astype(
        np.int64
    )

    def model(attrs: tuple[str, ...]) -> np.ndarray:
        # a is constant up to floating-point crumbs; b and c copy each other.
        one = {"a": np.array([1.0, 1e-17]), "b": np.array([0.5, 0.5]), "c": np.array([0.5, 0.5])}
        if attrs == ("b", "c"):
            return np.array([[0.5, 0.0], [0.0, 0.5]])
        if attrs == ("a", "b"):
            return np.array([[0.5, 0.5], [0.0, 1e-17]])
        if attrs == ("a", "c"):
            return np.array([[0.5, 0.5], [1e-17, 0.0]])
        return one[attrs[0]]

    report = build_release_report(schema, record, synthetic, model_marginal=model)
    pairs = {tuple(p["columns"]): p for p in report["pairs"]["top_pairs"]}
    assert pairs[("b", "c")]["normalised_mi"] == pytest.approx(1.0)
    for pair in (("a", "b"), ("a", "c")):
        assert pairs[pair]["normalised_mi"] is None
        assert pairs[pair]["mi_bits"] == 0.0
    assert report["pairs"]["top_pairs"][0]["columns"] == ["b", "c"], "n/a pairs rank last"
    matrix = report["pairs"]["matrix"]["normalised_mi"]
    assert matrix[0][1] is None and matrix[1][2] == pytest.approx(1.0)
    assert "<html" in render_html(report, title="mi")
