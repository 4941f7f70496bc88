"""Owner tier (engine/reports/owner.py): metrics against hand-computed values on tiny tables."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from engine.columns.categorical import BooleanColumn, CategoricalColumn, CodesColumn
from engine.columns.numeric import NumericColumn
from engine.reports.html import render_html
from engine.reports.owner import (
    build_owner_report,
    cramers_v,
    nearest_hamming,
    pearson,
    row_keys,
    share_found,
    spearman,
)
from engine.tables.encoding import TableSchema

SCHEMA = TableSchema(
    (
        CategoricalColumn("a", ("x", "y")),
        NumericColumn("b", (0.0, 1.0, 2.0, 3.0)),
        BooleanColumn("c"),
    )
)
REAL = np.array([[0, 0, 0], [0, 1, 0], [1, 2, 1], [1, 2, 1], [0, 0, 1], [1, 1, 0]], dtype=np.int64)
SYNTH = np.array([[0, 0, 0], [0, 0, 0], [1, 2, 1], [1, 1, 1], [0, 2, 1], [1, 0, 0]], dtype=np.int64)


def _report(**kwargs: object) -> dict[str, object]:
    return build_owner_report(SCHEMA, REAL, SYNTH, rng=np.random.default_rng(7), **kwargs)  # type: ignore[arg-type]


def _counter_tvd(columns: tuple[int, ...]) -> float:
    real = Counter(tuple(row[list(columns)]) for row in REAL)
    synth = Counter(tuple(row[list(columns)]) for row in SYNTH)
    keys = set(real) | set(synth)
    return 0.5 * sum(abs(real[k] / 6 - synth[k] / 6) for k in keys)


def test_marginal_tvds_and_k_marginal_score_match_hand_counts() -> None:
    report = _report()
    marginals = report["marginals"]
    # 1-way: a and c have the same shares; b is [2,2,2]/6 vs [3,1,2]/6, TVD 1/6.
    assert marginals["mean_tvd"]["1"] == pytest.approx(1 / 18, rel=1e-5)
    pairs = [(0, 1), (0, 2), (1, 2)]
    assert marginals["mean_tvd"]["2"] == pytest.approx(
        sum(_counter_tvd(p) for p in pairs) / 3, rel=1e-5
    )
    # 3-way: 8 cells differ by exactly 1/6 each: TVD = ½·8/6 = 2/3, score 1000/3.
    assert marginals["mean_tvd"]["3"] == pytest.approx(2 / 3, rel=1e-5)
    assert marginals["k_marginal_score"] == pytest.approx(1000 / 3, rel=1e-5)
    b = next(d for d in report["distributions"] if d["column"] == "b")
    assert b["labels"] == ["[0, 1)", "[1, 2)", "[2, 3]"]
    assert b["real"] == pytest.approx([1 / 3, 1 / 3, 1 / 3], rel=1e-5)
    assert b["synthetic"] == pytest.approx([1 / 2, 1 / 6, 1 / 3], rel=1e-5)
    assert b["tvd"] == pytest.approx(1 / 6, rel=1e-5)


def test_correlations_match_hand_values() -> None:
    correlations = _report()["correlations"]
    # Ordered columns: numeric b and boolean c (categorical a is not ordered).
    assert correlations["ordered_columns"] == ["b", "c"]
    assert correlations["source"] == {"b": "codes", "c": "codes"}
    # b = 0,1,2,2,0,1; c = 0,0,1,1,1,0: Σ dev products 1, Σb² 4, Σc² 1.5 → r = 1/√6.
    assert correlations["pearson"]["real"][0][1] == pytest.approx(1 / math.sqrt(6), rel=1e-5)
    # Ranks are affine in the codes here (ties averaged), so Spearman equals Pearson.
    assert correlations["spearman"]["real"][0][1] == pytest.approx(1 / math.sqrt(6), rel=1e-5)
    # (a, c) real: [[2, 1], [1, 2]]; χ² = 4·0.25/1.5 = 2/3; V = √(2/3 / 6) = 1/3.
    names = correlations["columns"]
    v = correlations["cramers_v"]["real"][names.index("a")][names.index("c")]
    assert v == pytest.approx(1 / 3, rel=1e-5)
    synthetic_v = correlations["cramers_v"]["synthetic"][names.index("a")][names.index("c")]
    assert correlations["cramers_v"]["difference"][0][2] == pytest.approx(synthetic_v - v, abs=1e-5)


def test_novel_combinations_and_exact_matches() -> None:
    report = _report()
    # (1,1,1), (0,2,1), (1,0,0) never occur in the real table: 3 of 6 synthetic rows.
    assert report["novel_combinations"]["share"] == pytest.approx(0.5)
    assert report["disclosure"]["exact_match"]["synthetic_to_real"] == pytest.approx(0.5)
    worst = report["worst_pairs"]["pairs"]
    assert [p["tvd"] for p in worst] == sorted((p["tvd"] for p in worst), reverse=True)
    by_pair = {tuple(p["columns"]): p for p in worst}
    # (b, c) synthetic pairs: (0,0),(0,0),(2,1),(1,1),(2,1),(0,0); real has no (1,1): 1/6.
    assert by_pair[("b", "c")]["novel_share"] == pytest.approx(1 / 6, rel=1e-5)
    assert by_pair[("b", "c")]["tvd"] == pytest.approx(_counter_tvd((1, 2)), rel=1e-5)


def test_hamming_distance_to_closest_record_and_matches_by_hand() -> None:
    queries = np.array([[0, 0, 0], [1, 1, 1], [2, 0, 1]])
    reference = np.array([[0, 0, 1], [1, 1, 1], [2, 2, 2]])
    assert nearest_hamming(queries, reference).tolist() == [1, 0, 1]
    assert share_found(queries, reference, (3, 3, 3)) == pytest.approx(1 / 3)


def test_dcr_is_chunked_consistently(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    queries = rng.integers(0, 3, size=(50, 4))
    reference = rng.integers(0, 3, size=(40, 4))
    whole = nearest_hamming(queries, reference)
    monkeypatch.setattr("engine.reports.owner.DCR_CHUNK_CELLS", 7)
    assert nearest_hamming(queries, reference).tolist() == whole.tolist()
    brute = [min(int((q != r).sum()) for r in reference) for q in queries]
    assert whole.tolist() == brute


def test_row_keys_fall_back_to_sorting_for_huge_domains() -> None:
    a = np.array([[1, 2, 3], [4, 5, 6], [1, 2, 3]])
    b = np.array([[4, 5, 6], [7, 8, 9]])
    small = row_keys([a, b], (10, 10, 10))
    huge = row_keys([a, b], (2**40, 2**40, 10))
    for keys in (small, huge):
        assert keys[0][0] == keys[0][2] == keys[0][0]
        assert keys[0][1] == keys[1][0]
        assert len({*keys[0].tolist(), *keys[1].tolist()}) == 3


def test_disclosure_of_a_copied_table_is_flagged_against_the_holdout() -> None:
    schema = TableSchema(tuple(CodesColumn(f"c{i}", 50) for i in range(6)))
    rng = np.random.default_rng(11)
    real = rng.integers(0, 50, size=(2_000, 6))
    report = build_owner_report(schema, real, real.copy(), rng=np.random.default_rng(1))
    disclosure = report["disclosure"]
    # Rows of 6 columns with 50 codes each almost never repeat: the holdout baseline is ~0 while
    # a copy matches every row; half of the copy's sampled rows come from half A.
    assert disclosure["exact_match"]["synthetic_to_real"] == 1.0
    assert disclosure["exact_match"]["holdout_b_to_a"] < 0.01
    assert disclosure["exact_match"]["synthetic_to_a"] > 0.3
    assert disclosure["dcr"]["holdout_b_to_a"]["median"] > disclosure["dcr"]["synthetic_to_a"]["p5"]
    assert disclosure["dcr"]["synthetic_to_a"]["p5"] == 0.0
    assert sum(disclosure["dcr"]["holdout_b_to_a"]["histogram"]) == pytest.approx(1.0, abs=1e-5)


def test_pearson_and_spearman_use_decoded_values_when_given() -> None:
    schema = TableSchema(
        (NumericColumn("u", (0.0, 10.0, 20.0)), NumericColumn("v", (0.0, 10.0, 20.0)))
    )
    u = np.array([1.0, 2.0, 3.0, 12.0, 15.0, 19.0])
    v = np.array([2.0, 1.0, 5.0, 11.0, 19.0, 13.0])
    codes = np.column_stack([(u >= 10).astype(np.int64), (v >= 10).astype(np.int64)])
    values = pa.table({"u": u, "v": v})
    report = build_owner_report(
        schema,
        codes,
        codes,
        real_values=values,
        synthetic_values=values,
        rng=np.random.default_rng(0),
    )
    correlations = report["correlations"]
    assert correlations["source"] == {"u": "values", "v": "values"}
    assert correlations["pearson"]["real"][0][1] == pytest.approx(np.corrcoef(u, v)[0, 1], rel=1e-5)
    assert correlations["pearson"]["difference"][0][1] == 0.0
    with pytest.raises(ValueError, match="one row per row"):
        build_owner_report(
            schema, codes, codes, real_values=values.slice(1), rng=np.random.default_rng(0)
        )


def test_missing_rates_per_nullable_column() -> None:
    schema = TableSchema((NumericColumn("n", (0.0, 1.0, 2.0), nullable=True), BooleanColumn("c")))
    null = 2
    real = np.array([[0, 0], [null, 1], [1, 0], [null, 0]])
    synth = np.array([[0, 0], [1, 1], [1, 0], [null, 0], [0, 1]])
    report = build_owner_report(schema, real, synth, rng=np.random.default_rng(0))
    assert report["missing"] == [{"column": "n", "real": 0.5, "synthetic": 0.2}]


def test_pairwise_statistics_edge_cases() -> None:
    constant = np.zeros(10, dtype=np.int64)
    varied = np.arange(10, dtype=np.int64) % 3
    assert cramers_v(constant, varied) is None
    assert cramers_v(varied, varied) == pytest.approx(1.0)
    assert pearson(constant.astype(float), varied.astype(float)) is None
    x = np.array([1.0, np.nan, 3.0, 4.0, 10.0])
    y = np.array([2.0, 5.0, 1.0, 3.0, 100.0])
    # Rows without NaN: ranks (1,2,3,4) vs (2,1,3,4); 1 − 6·Σd²/(n(n²−1)) = 1 − 12/60 = 0.8.
    assert spearman(x, y) == pytest.approx(0.8)


def test_k_marginal_score_of_a_table_against_itself_is_1000() -> None:
    schema = TableSchema(tuple(CodesColumn(f"c{i}", 7) for i in range(5)))
    real = np.random.default_rng(5).integers(0, 7, size=(3_000, 5))
    report = build_owner_report(schema, real, real.copy(), rng=np.random.default_rng(0))
    assert report["marginals"]["k_marginal_score"] == 1000.0
    assert report["novel_combinations"]["share"] == 0.0


def test_k_marginal_score_of_a_uniform_table_against_a_structured_one_is_low() -> None:
    # Structured: every column copies one latent code, so each 3-way marginal sits on 10 of its
    # 1000 cells. A uniform table puts about 1% of its rows there, so its 3-way TVD is about
    # 0.99 and its score about 10. The threshold 100 would need ten times the expected mass on
    # those cells (≥ 500 of 5000 rows where ~50 are expected): false-failure rate far below
    # 1e-100 (Chernoff), i.e. never.
    schema = TableSchema(tuple(CodesColumn(f"c{i}", 10) for i in range(5)))
    rng = np.random.default_rng(9)
    latent = rng.integers(0, 10, size=5_000)
    structured = np.repeat(latent[:, None], 5, axis=1)
    uniform = rng.integers(0, 10, size=(5_000, 5))
    report = build_owner_report(schema, structured, uniform, rng=np.random.default_rng(0))
    assert report["marginals"]["k_marginal_score"] < 100


def test_a_200k_by_10_table_completes_within_its_caps() -> None:
    sizes = (2, 5, 10, 20, 50, 3, 7, 100, 4, 30)
    schema = TableSchema(tuple(CodesColumn(f"c{i}", s) for i, s in enumerate(sizes)))
    rng = np.random.default_rng(2)
    real = np.column_stack([rng.integers(0, s, size=200_000) for s in sizes])
    synth = np.column_stack([rng.integers(0, s, size=200_000) for s in sizes])
    report = build_owner_report(schema, real, synth, rng=np.random.default_rng(0))
    disclosure = report["disclosure"]
    assert disclosure["rows"]["reference_a"] + disclosure["rows"]["holdout_b"] == 20_000
    assert disclosure["rows"]["dcr_queries"] == 2_000
    assert report["correlations"]["rows_compared"] == {"real": 20_000, "synthetic": 20_000}
    assert report["marginals"]["subsets"]["3"] == {
        "total": 120,
        "shown": 120,
        "what": "column sets",
    }


def test_tables_above_the_counted_cap_are_counted_on_a_uniform_sample() -> None:
    # Real and synthetic: 10,000 rows, column c0 is 0 on the first 30% of rows and 1 on the
    # rest (sorted, so a sample that took the first rows would see only zeros). Each side is
    # counted on 1,000 rows drawn without replacement: the share of 1s is hypergeometric with
    # sd ≈ 0.0137, so a one-way TVD between the two samples above 0.1 is a deviation of about
    # 5 sd of their difference (≈ 0.019): false-failure rate below 1e-6 (the rng is seeded, so
    # the test is deterministic; the bound says the seed is not a lucky one).
    schema = TableSchema((CodesColumn("c0", 2), CodesColumn("c1", 3)))
    rng = np.random.default_rng(11)
    real = np.column_stack(
        [(np.arange(10_000) >= 3_000).astype(np.int64), rng.integers(0, 3, size=10_000)]
    )
    synth = real[rng.permutation(10_000)]
    report = build_owner_report(
        schema, real, synth, rng=np.random.default_rng(0), max_rows_counted=1_000
    )
    assert report["rows"] == {
        "real": 10_000,
        "synthetic": 10_000,
        "real_counted": 1_000,
        "synthetic_counted": 1_000,
    }
    assert report["caps"]["max_rows_counted"] == 1_000
    assert report["marginals"]["mean_tvd"]["1"] < 0.1
    shares = report["distributions"][0]
    assert abs(shares["real"][1] - 0.7) < 0.07, "a uniform sample, not the first rows"
    html = render_html(report, title="owner")
    assert "real rows counted (uniform sample)" in html
    # Under the cap every row is counted, as before.
    whole = build_owner_report(schema, real, synth, rng=np.random.default_rng(0))
    assert whole["rows"]["real_counted"] == 10_000
    assert whole["marginals"]["mean_tvd"]["1"] == 0.0


def test_narrow_codes_give_the_same_owner_report() -> None:
    """The worker hands the owner tier both tables in their narrowest unsigned type (a byte per
    cell here): row keys, flat cells and correlations must widen before any arithmetic, since
    the pair and triple products pass 255 and 65,535 (arithmetic in uint8 would wrap)."""
    sizes = (200, 150, 90, 3)
    schema = TableSchema(tuple(CodesColumn(f"c{i}", s) for i, s in enumerate(sizes)))
    rng = np.random.default_rng(4)
    real = np.column_stack([rng.integers(0, s, size=3_000) for s in sizes])
    real[:, 1] = (real[:, 0] * 7 + rng.integers(0, 2, size=3_000)) % sizes[1]
    synth = np.column_stack([rng.integers(0, s, size=2_500) for s in sizes])
    synth[:1000] = real[:1000]  # exact matches for the disclosure counts
    assert math.prod(sizes[:3]) > np.iinfo(np.uint16).max
    wide = build_owner_report(schema, real, synth, rng=np.random.default_rng(0))
    narrow = build_owner_report(
        schema,
        np.asfortranarray(real.astype(np.uint8)),
        np.asfortranarray(synth.astype(np.uint8)),
        rng=np.random.default_rng(0),
    )
    assert narrow == wide
    assert wide["disclosure"]["exact_match"]["synthetic_to_real"] >= 0.4
