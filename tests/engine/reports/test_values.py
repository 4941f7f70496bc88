"""The owner tier's value metrics (engine/reports/values.py) on constructed tables with known
answers, the verdict that names the worst columns, and the fallback without real values."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engine.columns.categorical import CodesColumn
from engine.columns.numeric import NumericColumn
from engine.columns.temporal import DateColumn
from engine.reports.html import render_html
from engine.reports.owner import build_owner_report
from engine.reports.values import (
    KS_THRESHOLD,
    NOT_GIVEN,
    ValueSource,
    ks_threshold,
)
from engine.tables.encoding import TableSchema

EDGES = (0.0, 50.0, 100.0, 150.0, 200.0)
SCHEMA = TableSchema(
    (
        NumericColumn("x", EDGES),
        NumericColumn("y", EDGES, nullable=True),
        CodesColumn("k", 3),
    )
)
GRID = np.arange(100, dtype=np.float64)  # 0, 1, ..., 99: exact quantiles and CDFs


def _codes(values: np.ndarray, column: NumericColumn) -> np.ndarray:
    edges = np.asarray(column.edges)
    # As clip would: values outside the edges go to the end bins.
    codes = np.clip(np.searchsorted(edges, values, side="right") - 1, 0, len(edges) - 2)
    if column.null_code is not None:
        codes = np.where(np.isnan(values), column.null_code, codes)
    return codes.astype(np.int64)


def _table(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, pa.Table]:
    k = np.arange(x.size) % 3
    codes = np.column_stack([_codes(x, SCHEMA.columns[0]), _codes(y, SCHEMA.columns[1]), k])
    return codes, pa.table({"x": x, "y": pa.array(y, from_pandas=True)})


def _report(
    real: tuple[np.ndarray, np.ndarray], synthetic: tuple[np.ndarray, np.ndarray], **kwargs: Any
) -> dict[str, Any]:
    real_codes, real_values = _table(*real)
    synth_codes, synth_values = _table(*synthetic)
    return build_owner_report(
        SCHEMA,
        real_codes,
        synth_codes,
        real_values=real_values,
        synthetic_values=synth_values,
        rng=np.random.default_rng(0),
        **kwargs,
    )


def _column(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(c for c in report["values"]["columns"] if c["column"] == name)
    return found


def test_a_perfect_copy_scores_zero_everywhere() -> None:
    report = _report((GRID, GRID.copy()), (GRID.copy(), GRID.copy()))
    for name in ("x", "y"):
        column = _column(report, name)
        assert column["ks"] == 0.0
        assert column["outside_share"] == 0.0
        assert column["mean_error"] == 0.0 and column["std_error"] == 0.0
        assert set(column["quantile_errors"].values()) == {0.0}
        assert column["missing_rate_gap"] == 0.0
        assert column["flagged"] is False
    assert report["verdict"]["status"] == "values_close"
    assert report["verdict"]["flagged"] == []
    assert report["correlations"]["source"] == {"x": "values", "y": "values"}


def test_a_column_shifted_past_the_real_range_has_the_right_outside_share_and_ks() -> None:
    # Synthetic x = real x + 50: 50 of its 100 values lie above the real maximum 99, none below;
    # the CDFs differ by 0.5 at 49 (real: 50 of 100 values ≤ 49; synthetic: none).
    report = _report((GRID, GRID), (GRID + 50, GRID))
    x = _column(report, "x")
    assert x["real"]["min"] == 0.0 and x["real"]["max"] == 99.0
    assert x["synthetic"]["min"] == 50.0 and x["synthetic"]["max"] == 149.0
    assert x["above_share"] == 0.5 and x["below_share"] == 0.0
    assert x["outside_share"] == 0.5
    assert x["ks"] == pytest.approx(0.5)
    scale = float(np.std(GRID))  # √((100² − 1)/12), the population standard deviation
    assert x["scale"] == pytest.approx(scale)
    assert x["mean_error"] == pytest.approx(50 / scale, rel=1e-5)
    assert x["median_error"] == pytest.approx(50 / scale, rel=1e-5)
    assert x["std_error"] == 0.0
    assert x["quantile_errors"]["99"] == pytest.approx(50 / scale, rel=1e-5)
    assert x["flagged"] and x["reasons"] == ["outside_range", "ks"]
    assert not _column(report, "y")["flagged"]


def test_values_below_the_real_minimum_count_as_outside() -> None:
    report = _report((GRID, GRID), (GRID, GRID - 10))
    y = _column(report, "y")
    assert y["below_share"] == 0.1 and y["above_share"] == 0.0
    assert y["ks"] == pytest.approx(0.1)
    # 10 % outside flags the column; KS = 0.1 is not above the threshold.
    assert y["reasons"] == ["outside_range"]


def test_missing_rates_are_compared_on_values() -> None:
    real_y = GRID.copy()
    real_y[:20] = np.nan
    synth_y = GRID.copy()
    synth_y[:30] = np.nan
    report = _report((GRID, real_y), (GRID, synth_y))
    y = _column(report, "y")
    assert y["real"]["missing_rate"] == 0.2 and y["synthetic"]["missing_rate"] == 0.3
    assert y["missing_rate_gap"] == pytest.approx(0.1)
    assert "missing_rate" in y["reasons"]


def test_the_verdict_names_the_worst_columns_first_and_the_score_is_not_the_verdict() -> None:
    # y misses most (60 % outside), then x (20 %): the headline names y first, with its numbers.
    report = _report((GRID, GRID), (GRID + 20, GRID + 60))
    verdict = report["verdict"]
    assert verdict["status"] == "values_off"
    assert verdict["flagged"] == ["y", "x"]
    assert [c["column"] for c in verdict["worst_columns"]] == ["y", "x"]
    headline = verdict["headline"]
    assert headline.startswith("Worst columns: y (KS 0.6, 60 % of synthetic values outside")
    assert headline.index("y (") < headline.index("x (KS 0.2, 20 %")
    assert "2 of 2 numeric and date columns" in headline
    assert "not the verdict" in headline
    assert list(report)[:2] == ["tier", "verdict"], "the report opens with its verdict"
    page = render_html(report, title="owner")
    assert page.index("Verdict") < page.index("Values") < page.index("Summary")
    assert "Worst columns: y" in page
    assert "It is not the verdict" in page


def test_bins_hide_what_values_show() -> None:
    # Inside the same bins: real x in [0, 10], synthetic x in [40, 50): identical codes, so the
    # k-marginal score is 1000, while every synthetic value lies outside the real range.
    real = np.linspace(0, 10, 100)
    synthetic = np.linspace(40, 49.9, 100)
    report = _report((real, GRID), (synthetic, GRID))
    assert report["marginals"]["k_marginal_score"] == 1000.0
    x = _column(report, "x")
    assert x["outside_share"] == 1.0 and x["ks"] == 1.0
    assert report["verdict"]["status"] == "values_off"


def test_without_real_values_the_report_compares_bins_and_says_so() -> None:
    codes, _ = _table(GRID, GRID)
    report = build_owner_report(SCHEMA, codes, codes, rng=np.random.default_rng(0))
    assert report["values"] == {"available": False, "reason": NOT_GIVEN, "columns": []}
    verdict = report["verdict"]
    assert verdict["status"] == "bins_only"
    assert verdict["headline"].startswith("Values not compared.")
    assert "compares bins" in verdict["headline"]
    assert report["correlations"]["source"] == {"x": "codes", "y": "codes"}
    told = build_owner_report(
        SCHEMA, codes, codes, rng=np.random.default_rng(0), values_unavailable="Stored long ago."
    )
    assert told["values"]["reason"] == "Stored long ago."
    assert "Stored long ago." in told["verdict"]["headline"]
    assert "Stored long ago." in render_html(told, title="owner")


def test_a_schema_without_value_columns_says_so() -> None:
    schema = TableSchema((CodesColumn("a", 3), CodesColumn("b", 2)))
    codes = np.column_stack([np.arange(30) % 3, np.arange(30) % 2])
    report = build_owner_report(schema, codes, codes, rng=np.random.default_rng(0))
    assert report["values"]["available"] is True and report["values"]["columns"] == []
    assert report["verdict"]["status"] == "no_value_columns"
    assert report["verdict"]["headline"].startswith("No numeric or date column")


def _batches(table: pa.Table, size: int) -> ValueSource:
    return ValueSource(lambda: table.to_batches(max_chunksize=size))


def test_streamed_values_give_the_same_report_as_whole_tables() -> None:
    rng = np.random.default_rng(3)
    real_x, synth_x = rng.normal(80, 20, 5_000), rng.normal(90, 30, 4_000)
    real_y, synth_y = rng.uniform(0, 200, 5_000), rng.uniform(0, 200, 4_000)
    real_y[rng.random(5_000) < 0.1] = np.nan
    real_codes, real_values = _table(np.clip(real_x, 0, 200), real_y)
    synth_codes, synth_values = _table(np.clip(synth_x, 0, 200), synth_y)
    whole = build_owner_report(
        SCHEMA,
        real_codes,
        synth_codes,
        real_values=real_values,
        synthetic_values=synth_values,
        rng=np.random.default_rng(1),
    )
    streamed = build_owner_report(
        SCHEMA,
        real_codes,
        synth_codes,
        real_values=_batches(real_values, 333),
        synthetic_values=_batches(synth_values, 1_000),
        rng=np.random.default_rng(1),
    )
    assert streamed == whole
    assert whole["correlations"]["source"]["x"] == "values"


def test_the_sample_is_capped_while_ranges_and_outside_shares_count_every_row() -> None:
    # One synthetic value in 10,000 lies above the real range: the exact pass finds it although
    # only 100 rows per table are sampled for KS and quantiles.
    x = np.linspace(0, 100, 10_000)
    synthetic = x.copy()
    synthetic[1234] = 150.0
    y = np.full(10_000, 5.0)
    report = _report((x, y), (synthetic, y), max_value_rows=100)
    column = _column(report, "x")
    assert column["outside_share"] == pytest.approx(1e-4)
    assert column["synthetic"]["max"] == 150.0
    assert column["real"]["sampled"] == 100 and column["synthetic"]["sampled"] == 100
    caps = report["values"]["caps"]
    assert caps["sampled"] == {"real": 100, "synthetic": 100}
    assert report["caps"]["max_value_rows"] == 100
    # A constant real column has no spread: its errors are n/a, not divisions by zero.
    assert _column(report, "y")["mean_error"] is None


def test_values_that_do_not_line_up_with_the_codes_fall_back_to_bins() -> None:
    codes, values = _table(GRID, GRID)
    with pytest.raises(ValueError, match="one row per row"):
        build_owner_report(
            SCHEMA,
            codes,
            codes,
            real_values=values.slice(1),
            synthetic_values=values,
            rng=np.random.default_rng(0),
        )
    # A streamed source only finds out while reading: the report falls back and says why.
    report = build_owner_report(
        SCHEMA,
        codes,
        codes,
        real_values=_batches(values.slice(1), 10),
        synthetic_values=values,
        rng=np.random.default_rng(0),
    )
    assert report["values"]["available"] is False
    assert "99 rows, the codes 100" in report["values"]["reason"]


def test_dates_are_compared_in_days() -> None:
    schema = TableSchema((DateColumn("d", (0, 10_000, 20_000, 30_000)),))
    days = np.arange(18_000, 18_100, dtype=np.float64)
    codes = np.full((100, 1), 1, dtype=np.int64)
    codes[days >= 20_000] = 2
    synthetic_days = pa.array((days + 10).astype(np.int32)).cast(pa.date32())
    report = build_owner_report(
        schema,
        codes,
        codes,
        real_values=pa.table({"d": days}),  # a stored values file: days as float64
        synthetic_values=pa.table({"d": synthetic_days}),  # a decoded output: date32
        rng=np.random.default_rng(0),
    )
    d = report["values"]["columns"][0]
    assert d["unit"] == "days since 1970-01-01"
    assert d["above_share"] == 0.1 and d["ks"] == pytest.approx(0.1)
    page = render_html(report, title="dates")
    assert "2019-04-14 … 2019-07-22" in page  # days 18000 and 18099 as dates


def test_the_ks_threshold_allows_for_small_samples() -> None:
    assert ks_threshold(100_000, 100_000) == KS_THRESHOLD
    small = ks_threshold(344, 344)
    assert small == pytest.approx(math.sqrt(-math.log(0.005) / 2) * math.sqrt(2 / 344))
    assert small > KS_THRESHOLD
