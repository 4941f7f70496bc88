"""CSV export: spreadsheet formulas are neutralised in text cells, numbers stay numbers."""

from __future__ import annotations

import csv
import io
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
