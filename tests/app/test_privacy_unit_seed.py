"""A table where every unit has one row, uploaded with a privacy unit and k = 1, gives the
release a row-level upload gives, seed for seed (issue 28 §1): truncation keeps every row in
order, discovery draws the same noise from the same budget (the truncation count is paid from a
share of its own, never from discovery's), the stored table and schema are identical, and a run
with the same noise source releases the same measurements and rows."""

from __future__ import annotations

import io
import random
from dataclasses import replace
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from app.datasets.discovery import discover_and_resolve
from app.datasets.ingest import IngestLimits, ingest_table, read_encoded_table
from app.datasets.units import (
    UnitLimits,
    release_truncation,
    truncation_pass,
    truncation_rho,
)
from engine.discovery.schema import provisional
from engine.domain import Dataset
from engine.mechanisms import get_mechanism
from engine.tables.encoding import SchemaSpec
from engine.tables.units import without_unit

LIMITS = IngestLimits(max_columns=20, max_rows=100_000, max_cell_bytes=1024)
COLUMNS: list[dict[str, Any]] = [
    {"name": "pid", "type": "ignore"},
    {"name": "age", "type": "numeric", "min": 0, "max": 100, "integer": True,
     "bins": {"quantiles": 4}},
    {"name": "city", "type": "categorical", "other": "Other",
     "categories": {"discover": True, "max": 5, "candidates": ["Lyon", "Paris", "Nantes", "Lille"]}},
    {"name": "tier", "type": "categorical", "categories": ["a", "b", "c"]},
]  # fmt: skip


def _csv(path: Path, rows: int, people: int | None = None) -> Path:
    rng = random.Random(3)
    frame = pd.DataFrame(
        {
            "pid": [f"p{rng.randrange(people) if people else i}" for i in range(rows)],
            "age": [rng.randint(18, 90) for _ in range(rows)],
            "city": [rng.choice(["Lyon", "Paris", "Nantes"]) for _ in range(rows)],
            "tier": [rng.choice("abc") for _ in range(rows)],
        }
    )
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    path.write_text(buffer.getvalue())
    return path


@pytest.mark.parametrize("method", ["independent", "aim"])
def test_one_row_per_unit_at_k1_releases_what_a_row_level_upload_releases(
    tmp_path: Path, method: str
) -> None:
    source = _csv(tmp_path / "table.csv", 1500)
    row_level = SchemaSpec.from_json({"columns": COLUMNS})
    per_unit = SchemaSpec.from_json({"columns": COLUMNS, "privacy_unit": {"column": "pid"}})
    assert per_unit.privacy_unit is not None and per_unit.privacy_unit.max_rows == 1

    truncation = truncation_pass(
        source, provisional(per_unit), per_unit.privacy_unit, LIMITS, UnitLimits(10**6)
    )
    assert (truncation.rows_removed, truncation.units, truncation.units_truncated) == (0, 1500, 0)
    budget = {"budget_rho": Decimal(2), "budget_delta": Decimal(0), "discovery_rho": None}
    plain = discover_and_resolve(source, row_level, LIMITS, noise=random.Random(11), **budget)
    unit = discover_and_resolve(
        source,
        per_unit,
        LIMITS,
        noise=random.Random(11),
        keep=truncation.keep,
        contribution_bound=1,
        **budget,
    )
    assert plain.discovered is not None and unit.discovered is not None
    assert (unit.rho, unit.delta) == (plain.rho, plain.delta)
    assert unit.discovered.describe() == plain.discovered.describe()
    stored = without_unit(unit.schema, per_unit.privacy_unit)
    # The same stored schema, but for the unit's column: the row-level upload keeps its name as
    # a dropped column; per person, no stored trace of it is left.
    assert plain.schema.ignored == ("pid",) and stored.ignored == ()
    assert stored == replace(plain.schema, ignored=())

    plain_rows = ingest_table(source, plain.schema, tmp_path / "plain.arrow", LIMITS)
    unit_rows = ingest_table(
        source, unit.schema, tmp_path / "unit.arrow", LIMITS, keep=truncation.keep
    )
    assert plain_rows == unit_rows == 1500
    codes = read_encoded_table(tmp_path / "plain.arrow", plain.schema)
    assert np.array_equal(codes, read_encoded_table(tmp_path / "unit.arrow", stored))

    # The job: the same table, the same seeds, k = 1 against the row-level default.
    mechanism = get_mechanism(method)
    params = mechanism.validate_params({})
    data = Dataset(stored.domain(), codes)
    runs = [
        mechanism.run(
            data,
            Fraction(1, 2),
            params,
            rng=np.random.default_rng(5),
            noise_source=random.Random(17),
            **bound,
        )
        for bound in ({}, {"contribution_bound": 1})
    ]
    assert np.array_equal(runs[0].codes, runs[1].codes)
    for a, b in zip(runs[0].measurements, runs[1].measurements, strict=True):
        assert (a.attributes, a.sigma2, a.rho) == (b.attributes, b.sigma2, b.rho)
        assert np.array_equal(a.noisy_counts, b.noisy_counts)


def test_truncation_keeps_k_rows_per_unit_and_its_count_is_paid_beside_discovery(
    tmp_path: Path,
) -> None:
    source = _csv(tmp_path / "table.csv", 3000, people=200)
    spec = SchemaSpec.from_json(
        {"columns": COLUMNS, "privacy_unit": {"column": "pid", "max_rows": 5}}
    )
    assert spec.privacy_unit is not None
    frame = pd.read_csv(source)
    expected = int(frame.groupby("pid").size().clip(upper=5).sum())
    truncation = truncation_pass(
        source, provisional(spec), spec.privacy_unit, LIMITS, UnitLimits(10**6)
    )
    assert truncation.rows_kept == expected < 3000
    kept = frame[truncation.keep]
    assert int(kept.groupby("pid").size().max()) == 5
    # A fresh key per upload: another pass keeps another choice of rows (not "the first k").
    again = truncation_pass(source, provisional(spec), spec.privacy_unit, LIMITS, UnitLimits(10**6))
    assert again.rows_kept == expected and not np.array_equal(again.keep, truncation.keep)

    charge = release_truncation(
        truncation,
        spec.privacy_unit,
        total_rho=Decimal(2),
        discovery_spent=Decimal("0.4"),
        source=random.Random(1),
    )
    assert charge.rho == truncation_rho(Decimal(2)) == Decimal("0.02")
    assert charge.detail["max_rows"] == 5 and Fraction(charge.detail["rho"]) == Fraction(1, 50)
    assert "pid" not in str(charge.detail) and "p1" not in str(charge.released)
    with pytest.raises(Exception, match="cannot pay for discovery"):
        release_truncation(
            truncation, spec.privacy_unit, total_rho=Decimal(2), discovery_spent=Decimal(2)
        )


def test_limits_are_checked_before_the_units_are_held(tmp_path: Path) -> None:
    source = _csv(tmp_path / "table.csv", 500)
    spec = SchemaSpec.from_json({"columns": COLUMNS, "privacy_unit": {"column": "pid"}})
    assert spec.privacy_unit is not None
    with pytest.raises(Exception, match="a table with a privacy unit has at most 100 rows"):
        truncation_pass(source, provisional(spec), spec.privacy_unit, LIMITS, UnitLimits(100))
    # A Parquet file's footer is checked before any batch, with the same message (not the
    # RHOSYNTH_MAX_ROWS one, which names another limit than the one the table broke).
    parquet = tmp_path / "table.parquet"
    pd.read_csv(source).to_parquet(parquet, index=False)
    with pytest.raises(Exception, match="a table with a privacy unit has at most 100 rows"):
        truncation_pass(parquet, provisional(spec), spec.privacy_unit, LIMITS, UnitLimits(100))
    long = tmp_path / "long.csv"
    long.write_text("pid,age,city,tier\n" + "x" * 300 + ",30,Lyon,a\n")
    with pytest.raises(Exception, match=r"column 'pid' \(the privacy unit\): 1 rows hold a unit"):
        truncation_pass(long, provisional(spec), spec.privacy_unit, LIMITS, UnitLimits(100))


def test_kept_batches_filter_in_file_order_and_refuse_another_reading() -> None:
    import pyarrow as pa

    from engine.tables.units import kept_batches

    batches = [pa.record_batch({"a": [1, 2, 3]}), pa.record_batch({"a": [4, 5]})]
    keep = np.array([True, False, True, False, False])
    kept = list(kept_batches(batches, keep))
    assert [b.column("a").to_pylist() for b in kept] == [[1, 3]]
    with pytest.raises(ValueError, match="fewer rows"):
        list(kept_batches(batches, np.ones(6, dtype=bool)))
    with pytest.raises(ValueError, match="more rows"):
        list(kept_batches(batches, np.ones(4, dtype=bool)))
