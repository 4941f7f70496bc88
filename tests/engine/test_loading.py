"""load_table and ingest_table give the pandas encoders' codes, column-major and narrow; the
refusal messages are the old ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.datasets.ingest import (
    IngestLimits,
    UploadRejected,
    encoded_arrow_schema,
    ingest_table,
    read_encoded_table,
)
from engine.tables.encoding import TableSchema, encode_values
from engine.tables.local import TableError, load_table

LIMITS = IngestLimits(max_columns=50, max_rows=1_000_000, max_cell_bytes=200)
SCHEMA: dict[str, Any] = {
    "columns": [
        {"name": "code", "type": "codes", "size": 300},
        {"name": "number", "type": "numeric", "bins": [0, 10, 20, 50], "nullable": True},
        {"name": "label", "type": "categorical", "categories": ["a", "b", "c"], "other": "o"},
        {"name": "day", "type": "date", "min": "2013-01-01", "max": "2013-12-31", "unit": "week"},
        {
            "name": "when",
            "type": "datetime",
            "min": "2013-01-01T00:00:00",
            "max": "2013-01-31T23:59:59",
            "unit": "day",
            "nullable": True,
        },
        {
            "name": "month",
            "type": "date",
            "format": "%b-%Y",
            "min": "2010-01-01",
            "max": "2020-12-31",
            "unit": "year",
            "nullable": True,
        },
        {"name": "flag", "type": "boolean"},
        {"name": "note", "type": "ignore"},
    ]
}


def _rows(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    days = pd.Timestamp("2013-01-01") + pd.to_timedelta(rng.integers(0, 365, n), unit="D")
    when = pd.Timestamp("2013-01-01") + pd.to_timedelta(rng.integers(0, 31 * 86400, n), unit="s")
    numbers = rng.uniform(0, 50, n).round(2).astype(str).astype(object)
    numbers[rng.random(n) < 0.1] = ""
    when_text = when.strftime("%Y-%m-%dT%H:%M:%SZ").to_numpy(dtype=object)
    when_text[rng.random(n) < 0.05] = "NA"
    when_text[:3] = [" 2013-01-05 10:00:00 ", "2013-01-05T10:00:00+02:00", "2013-01-05T10:00"]
    months = pd.Series(days).dt.strftime("%b-%Y").to_numpy(dtype=object)
    months[:4] = ["mar-2013", " Mar-2013", "", "MAR-2013"]
    return pd.DataFrame(
        {
            "code": rng.integers(0, 300, n).astype(str),
            "number": numbers,
            "label": rng.choice(["a", "b", "c", "d"], n),
            "day": days.strftime("%Y-%m-%d"),
            "when": when_text,
            "month": months,
            "flag": rng.choice(["true", "no", " Yes "], n),
            "note": "x",
        }
    )


def _expected(frame: pd.DataFrame, schema: TableSchema) -> np.ndarray:
    return np.column_stack(
        [
            encode_values(column, frame[column.name].astype(object), schema.missing_values)
            for column in schema.columns
        ]
    )


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_loaders_give_the_pandas_encoders_codes(tmp_path: Path, kind: str) -> None:
    schema = TableSchema.from_json(SCHEMA)
    frame = _rows(3000, 1)
    path = tmp_path / f"table.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path, row_group_size=700)
    expected = _expected(frame, schema)
    assert (expected >= 0).all()
    loaded = load_table(path, schema)
    assert loaded.dtype == np.int64 and loaded.flags.f_contiguous
    assert np.array_equal(loaded, expected)
    target = tmp_path / "codes.arrow"
    assert ingest_table(path, schema, target, LIMITS) == len(frame)
    with pa.OSFile(str(target)) as stored_file:
        assert pa.ipc.open_file(stored_file).schema == encoded_arrow_schema(schema)
    stored = read_encoded_table(target, schema)
    assert stored.flags.f_contiguous and np.array_equal(stored, expected)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_refusals_count_rows_per_column_and_reason(tmp_path: Path, kind: str) -> None:
    schema = TableSchema.from_json(SCHEMA)
    frame = _rows(500, 2)
    frame.loc[3, "code"] = "300"
    frame.loc[4, "code"] = "0x10"
    frame.loc[5:6, "day"] = ["2013-02-30", ""]
    frame.loc[7, "day"] = "2014-01-01"
    frame.loc[8, "month"] = "13-2013"
    path = tmp_path / f"table.{kind}"
    if kind == "csv":
        frame.to_csv(path, index=False)
    else:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    message = (
        "values do not match the schema: column 'code': 1 value outside the codes 0..299; "
        "column 'code': not an integer code in 1 row; column 'day': 1 missing value but the "
        "column is not nullable; column 'day': 1 value outside [2013-01-01, 2013-12-31], set "
        "clip or widen the bounds; column 'day': unparseable date in 1 row, expected format "
        "ISO 8601; column 'month': unparseable date in 1 row, expected format %b-%Y"
    )
    with pytest.raises(TableError) as refused:
        load_table(path, schema)
    assert str(refused.value) == message
    with pytest.raises(UploadRejected) as rejected:
        ingest_table(path, schema, tmp_path / "codes.arrow", LIMITS)
    assert rejected.value.message == message
    assert not (tmp_path / "codes.arrow").exists()
