"""CSV export: spreadsheet formulas are neutralised in text cells, numbers stay numbers."""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.jobs.export import stream_csv
from engine.columns.spreadsheet import escape_cell, escape_text


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("=SUM(A1)", "'=SUM(A1)"),
        ("+1", "'+1"),
        ("-cmd", "'-cmd"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        ("", ""),
        (" =1+1", "' =1+1"),  # whitespace before a trigger (OWASP)
        ("  @SUM(A1)", "'  @SUM(A1)"),
        ("\n-2+3", "'\n-2+3"),
        ("\u00a0+1", "'\u00a0+1"),
        ("\u3000=1", "'\u3000=1"),
        ("\uff1d1+1", "'\uff1d1+1"),  # fullwidth forms: ＝ ＋ － ＠
        ("\uff0b1", "'\uff0b1"),
        ("\uff0d1", "'\uff0d1"),
        ("\uff20x", "'\uff20x"),
        ("  ", "  "),
        ("a \uff1d b", "a \uff1d b"),
    ],
)
def test_escape_cell(cell: str, expected: str) -> None:
    assert escape_cell(cell) == expected
    # The vectorised export applies the same rule as the single-cell function.
    assert escape_text(pa.array([cell])).to_pylist() == [expected]


def test_stream_csv(tmp_path: Path) -> None:
    frame = pd.DataFrame(
        {
            "=evil": ["x"] * 3,
            "city": pd.Categorical.from_codes(
                [0, 1, 2], categories=pd.Index([" -2", "a,b", 'q"\nr'])
            ),
            "value": [-2.5, 0.1, 1e-7],
            "code": [0, 1, 2],
        }
    )
    path = tmp_path / "out.parquet"
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    text = b"".join(stream_csv(path)).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["'=evil", "city", "value", "code"]
    assert [r[1] for r in rows[1:]] == ["' -2", "a,b", 'q"\nr']
    header, first = text.split("\n")[:2]
    assert header == '"\'=evil","city","value","code"'  # every header cell quoted
    assert first.startswith('"x","\' -2",-2.5,0')  # text quoted, numbers bare
    assert [float(r[2]) for r in rows[1:]] == [-2.5, 0.1, 1e-7]  # numbers are not escaped
    assert [r[3] for r in rows[1:]] == ["0", "1", "2"]


def test_stream_csv_writes_the_declared_spellings_and_formats(tmp_path: Path) -> None:
    """The download reads the stored Parquet's field metadata: boolean words, a zoned datetime
    (UTC, written with its Z or +00:00), whole numbers with their declared places, all plain."""
    import numpy as np

    from engine.tables.encoding import SchemaLimits, TableSchema
    from engine.tables.synthetic_output import write_synthetic

    schema = TableSchema.from_json(
        {
            "columns": [
                {"name": "ok", "type": "boolean", "true_values": ["YES"], "false_values": ["NO"]},
                {
                    "name": "at",
                    "type": "datetime",
                    "min": "2021-01-02T00:00:00",
                    "max": "2021-01-02T23:59:59",
                    "bins": 2,
                    "format": "%Y-%m-%dT%H:%M:%SZ",
                },
                {
                    "name": "off",
                    "type": "datetime",
                    "min": "2021-01-02T00:00:00",
                    "max": "2021-01-02T23:59:59",
                    "bins": 2,
                    "format": "%Y-%m-%d %H:%M:%S%z",
                },
                {
                    "name": "income",
                    "type": "numeric",
                    "min": 40000,
                    "max": 60000,
                    "bins": 2,
                    "integer": True,
                    "format": "%.1f",
                },
            ]
        },
        SchemaLimits(max_columns=10, max_domain_size=100, max_total_domain_size=1000),
    )
    path = tmp_path / "out.parquet"
    codes = np.array([[0, 0, 1, 1], [1, 1, 0, 0]])
    write_synthetic(schema, codes, np.random.default_rng(0), path, "parquet")
    assert pq.read_schema(path).field("at").type == pa.timestamp("ms", tz="UTC")
    lines = b"".join(stream_csv(path)).decode().splitlines()
    assert lines[0] == '"ok","at","off","income"'
    pattern = r"(YES|NO),2021-01-02T\d\d:\d\d:\d\dZ,2021-01-02 \d\d:\d\d:\d\d\+00:00,\d{5}\.0"
    assert [ln for ln in lines[1:] if not re.fullmatch(pattern, ln)] == []
    assert [ln.split(",")[0] for ln in lines[1:]] == ["NO", "YES"]
