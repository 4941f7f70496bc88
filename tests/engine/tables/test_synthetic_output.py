"""Batched decode and write of a synthetic table equal the one-shot decode with the same rng."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.tables.encoding import SchemaLimits, TableSchema
from engine.tables.local import write_table
from engine.tables.synthetic_output import write_synthetic
from tests.engine.test_columns import ENTRIES

LIMITS = SchemaLimits(max_columns=50, max_domain_size=1000, max_total_domain_size=5000)


def every_kind() -> TableSchema:
    return TableSchema.from_json(
        {"columns": [{"name": kind, **entry} for kind, entry in ENTRIES.items()]}, LIMITS
    )


def random_codes(schema: TableSchema, rows: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.column_stack([rng.integers(0, column.size, rows) for column in schema.columns])


@pytest.mark.parametrize("batch_rows", [7, 97, 1000, 5000])
def test_batched_decode_equals_the_one_shot_decode(batch_rows: int) -> None:
    schema = every_kind()
    codes = random_codes(schema, 1000, seed=1)  # null codes included (the last code)
    once = schema.to_arrow(schema.decode(codes, np.random.default_rng(7)))
    batches = list(schema.decode_batches(codes, np.random.default_rng(7), batch_rows))
    assert len(batches) == -(-1000 // batch_rows)
    assert pa.concat_tables(batches).equals(once)
    # The draws do depend on the seed (numeric, date and datetime values inside their bins).
    other = schema.to_arrow(schema.decode(codes, np.random.default_rng(8)))
    assert not other.equals(once)


def test_decode_batches_refuses_a_non_positive_batch() -> None:
    schema = every_kind()
    with pytest.raises(ValueError, match="batch_rows"):
        list(schema.decode_batches(random_codes(schema, 3, 0), np.random.default_rng(0), 0))


@pytest.mark.parametrize("file_format", ["parquet", "csv"])
def test_write_synthetic_equals_writing_the_one_shot_decode(
    tmp_path: Path, file_format: str
) -> None:
    schema = every_kind()
    codes = random_codes(schema, 700, seed=2)
    batched = tmp_path / f"batched.{file_format}"
    write_synthetic(schema, codes, np.random.default_rng(3), batched, file_format, batch_rows=64)  # type: ignore[arg-type]
    once = tmp_path / f"once.{file_format}"
    write_table(schema.decode(codes, np.random.default_rng(3)), once, schema)
    if file_format == "csv":
        assert batched.read_bytes() == once.read_bytes()
    else:
        written = pq.read_table(batched)
        assert written.schema.equals(pq.read_table(once).schema, check_metadata=True)
        assert written.equals(pq.read_table(once))
        assert pq.ParquetFile(batched).metadata.num_row_groups == -(-700 // 64)


def test_write_synthetic_of_no_rows_writes_the_header_only(tmp_path: Path) -> None:
    schema = every_kind()
    codes = np.zeros((0, len(schema.columns)), dtype=np.int64)
    out = tmp_path / "empty.parquet"
    write_synthetic(schema, codes, np.random.default_rng(0), out, "parquet")
    table = pq.read_table(out)
    assert table.num_rows == 0
    assert table.column_names == list(schema.names)
