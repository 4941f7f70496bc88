"""The truncation pass's collector (engine/tables/units.py) on Parquet's own types: binary
columns are hashed and grouped by their bytes, whether or not they are UTF-8, and a value is
never copied into an error message."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from engine.privacy_unit import PrivacyUnit
from engine.tables.units import UnitCollector

KEY = "0123456789abcdef"


def _collect(batch: pa.RecordBatch, max_rows: int = 1) -> tuple[UnitCollector, np.ndarray]:
    collector = UnitCollector(
        PrivacyUnit("pid", max_rows), batch.schema.names, ("", "NA"), key=KEY, max_unit_bytes=64
    )
    assert collector.add(batch) == 0
    return collector, collector.truncate().keep


def test_binary_units_that_are_not_utf8_are_grouped_by_their_bytes() -> None:
    # A Parquet BINARY id (e.g. a raw hash) need not be UTF-8: before, casting it to text made
    # pandas raise an ArrowException whose message held the value's bytes (a 500 at upload).
    units = [b"\xff\xfesecret", b"ok", b"\xff\xfesecret", b"\xff\xfdother", None]
    batch = pa.record_batch(
        {
            "pid": pa.array(units, pa.binary()),
            "blob": pa.array([b"\x80", b"x", b"\x81", b"\x82", b"y"], pa.large_binary()),
            "a": pa.array(["p", "q", "p", "q", "p"]),
        }
    )
    _, keep = _collect(batch)
    # Three units of which one has two rows (one kept); the row without a unit is dropped.
    assert keep.sum() == 3 and not keep[4] and keep[0] != keep[2]


def test_a_binary_column_hashes_as_the_same_text_does() -> None:
    # A CSV's text and a Parquet file's UTF-8 bytes of the same cells choose the same rows.
    ids = ["u1", "u1", "u2", "u1", "u2", "u3"]
    other = ["a", "b", "c", "d", "e", "f"]
    text = pa.record_batch({"pid": pa.array(ids), "x": pa.array(other)})
    raw = pa.record_batch(
        {
            "pid": pa.array([s.encode() for s in ids], pa.binary()),
            "x": pa.array([s.encode() for s in other], pa.binary(1)),
        }
    )
    assert np.array_equal(_collect(text)[1], _collect(raw)[1])
