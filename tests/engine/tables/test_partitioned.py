"""Chunked, parallel output of a large synthetic table (engine/tables/partitioned.py, issue 29 §2)."""

from __future__ import annotations

import json
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.domain import Domain
from engine.tables.encoding import TableSchema
from engine.tables.partitioned import (
    PartitionCancelled,
    chunk_sizes,
    part_name,
    sample_shares,
    write_partitioned,
)
from engine.tables.synthetic_output import write_synthetic

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
PROBS = (np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.9]))


def codes_schema() -> TableSchema:
    return TableSchema.from_domain(Domain(("a", "b"), (4, 2)))


def fixed_sampler(rows: int, rng: np.random.Generator) -> np.ndarray:
    """Two independent columns with known probabilities (a stand-in for FittedModel.sample)."""
    return np.column_stack([rng.choice(len(p), size=rows, p=p) for p in PROBS]).astype(np.uint8)


def read_parts(folder: Path) -> pa.Table:
    return pa.concat_tables(pq.read_table(p) for p in sorted(folder.glob("part-*.parquet")))


def test_chunk_sizes_and_shares() -> None:
    assert chunk_sizes(2500, 1000) == [1000, 1000, 500]
    assert chunk_sizes(2000, 1000) == [1000, 1000]
    assert chunk_sizes(0, 1000) == [0]
    with pytest.raises(ValueError, match="chunk_rows"):
        chunk_sizes(10, 0)
    shares = sample_shares([1000, 1000, 500], 101)
    assert sum(shares) == 101 and shares[2] in (20, 21)
    assert sample_shares([3, 2], 100) == [3, 2]


def test_rows_parts_and_names(tmp_path: Path) -> None:
    out = write_partitioned(
        codes_schema(), fixed_sampler, 2500, 7, tmp_path, chunk_rows=1000, sample_rows=100
    )
    assert [p.name for p in out.parts] == [part_name(i) for i in range(3)]
    assert [p.rows for p in out.parts] == [1000, 1000, 500]
    assert out.rows == 2500
    assert sorted(p.name for p in tmp_path.iterdir()) == [part_name(i) for i in range(3)]
    for part in out.parts:
        assert pq.ParquetFile(tmp_path / part.name).metadata.num_rows == part.rows
        assert (tmp_path / part.name).stat().st_size == part.bytes
    assert read_parts(tmp_path).num_rows == 2500
    assert out.sample.shape == (100, 2)
    assert out.rules is None


def test_each_part_is_the_service_output_of_its_chunk(tmp_path: Path) -> None:
    """Part i is write_synthetic (the in-memory path's writer) of chunk i drawn with child i of
    the seed's SeedSequence: same format, same decode."""
    schema = codes_schema()
    write_partitioned(schema, fixed_sampler, 2500, 7, tmp_path, chunk_rows=1000)
    children = np.random.SeedSequence(7).spawn(3)
    for i, rows in enumerate([1000, 1000, 500]):
        rng = np.random.default_rng(children[i].spawn(2)[0])
        reference = tmp_path / f"ref-{i}.parquet"
        write_synthetic(schema, fixed_sampler(rows, rng), rng, reference, "parquet")
        assert pq.read_table(tmp_path / part_name(i)).equals(pq.read_table(reference))
        assert pq.read_schema(tmp_path / part_name(i)) == pq.read_schema(reference)


def test_same_seed_same_parts_whatever_the_workers(tmp_path: Path) -> None:
    runs = {}
    for name, seed, workers in (("a", 3, 1), ("b", 3, 4), ("c", 4, 2)):
        folder = tmp_path / name
        folder.mkdir()
        out = write_partitioned(
            codes_schema(), fixed_sampler, 3300, seed, folder, chunk_rows=500, workers=workers
        )
        assert len(out.parts) == 7
        runs[name] = [(folder / p.name).read_bytes() for p in out.parts], out.sample
    assert runs["a"][0] == runs["b"][0]
    np.testing.assert_array_equal(runs["a"][1], runs["b"][1])
    assert runs["a"][0] != runs["c"][0]


def test_the_output_follows_the_sampler_distribution(tmp_path: Path) -> None:
    """120,000 rows in 7 chunks: each column's shares within 5 standard errors of the sampler's
    probabilities (false failure rate below 1e-5 per cell, 6 cells), the sample's within 5 of
    its own standard errors; seeded, so the outcome is fixed."""
    rows = 120_000
    out = write_partitioned(
        codes_schema(), fixed_sampler, rows, 11, tmp_path, chunk_rows=17_500, sample_rows=20_000
    )
    table = read_parts(tmp_path)
    assert table.num_rows == rows
    for name, p in zip(("a", "b"), PROBS, strict=True):
        values = np.asarray(table.column(name).to_numpy(), dtype=np.int64)
        shares = np.bincount(values, minlength=len(p)) / rows
        assert np.all(np.abs(shares - p) < 5 * np.sqrt(p * (1 - p) / rows))
    sample = out.sample.astype(np.int64)
    for j, p in enumerate(PROBS):
        shares = np.bincount(sample[:, j], minlength=len(p)) / sample.shape[0]
        assert np.all(np.abs(shares - p) < 5 * np.sqrt(p * (1 - p) / sample.shape[0]))


def test_the_sample_is_made_of_written_rows(tmp_path: Path) -> None:
    def distinct(rows: int, rng: np.random.Generator) -> np.ndarray:
        # Every row unique (a counter in two base-256 digits) so membership is exact.
        start = int(rng.integers(0, 2**15))
        counter = np.arange(start, start + rows) % 65_536
        return np.column_stack([counter // 256, counter % 256]).astype(np.uint8)

    schema = TableSchema.from_domain(Domain(("hi", "lo"), (256, 256)))
    out = write_partitioned(schema, distinct, 900, 1, tmp_path, chunk_rows=250, sample_rows=90)
    table = read_parts(tmp_path)
    written = set(
        zip(
            table.column("hi").to_numpy().tolist(),
            table.column("lo").to_numpy().tolist(),
            strict=True,
        )
    )
    picked = {tuple(row) for row in out.sample.tolist()}
    assert len(picked) == 90 and picked <= written


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_at_most_workers_chunks_are_alive(tmp_path: Path, workers: int) -> None:
    """The writer draws the next chunk only once one in flight is written and dropped: the
    chunks the sampler returned and that are still referenced never exceed ``workers`` (the
    bound that keeps a 100 M-row release in memory at a few chunks' size)."""
    lock = threading.Lock()
    state = {"alive": 0, "peak": 0, "calls": 0}

    def release() -> None:
        with lock:
            state["alive"] -= 1

    def counting(rows: int, rng: np.random.Generator) -> np.ndarray:
        codes = fixed_sampler(rows, rng)
        with lock:
            state["calls"] += 1
            state["alive"] += 1
            state["peak"] = max(state["peak"], state["alive"])
        weakref.finalize(codes, release)
        return codes

    out = write_partitioned(
        codes_schema(), counting, 20_000, 5, tmp_path, chunk_rows=1000, workers=workers
    )
    assert len(out.parts) == 20 and state["calls"] == 20
    assert state["alive"] == 0
    assert 1 <= state["peak"] <= workers


def test_rules_are_kept_in_every_chunk(tmp_path: Path) -> None:
    schema = TableSchema.from_json(json.loads((FIXTURES / "spans-schema.json").read_text()))
    sizes = [c.size for c in schema.columns]

    def uniform(rows: int, rng: np.random.Generator) -> np.ndarray:
        return np.column_stack([rng.integers(0, s, rows) for s in sizes]).astype(np.uint8)

    out = write_partitioned(schema, uniform, 5000, 2, tmp_path, chunk_rows=2000, workers=2)
    assert out.rules is not None
    report = out.rules.to_json()
    assert report["rows"] == 5000
    assert report["violating_rows_before"] > 0 and report["remaining_rows"] == 0
    # Summed over the chunks: part 0's own report is a part of the total.
    children = np.random.SeedSequence(2).spawn(3)
    rng = np.random.default_rng(children[0].spawn(2)[0])
    one = write_synthetic(
        schema, uniform(2000, rng), rng, tmp_path / "ref.parquet", "parquet", sampler=uniform
    )
    assert one is not None
    assert 0 < one.report.violating_rows_before < report["violating_rows_before"]
    assert pq.read_table(tmp_path / part_name(0)).equals(pq.read_table(tmp_path / "ref.parquet"))
    table = read_parts(tmp_path).to_pandas()
    assert (table["end"] >= table["start"]).all()


def test_cancelled_stops_before_drawing_more(tmp_path: Path) -> None:
    calls: list[int] = []

    def sampler(rows: int, rng: np.random.Generator) -> Any:
        calls.append(rows)
        return fixed_sampler(rows, rng)

    with pytest.raises(PartitionCancelled):
        write_partitioned(
            codes_schema(),
            sampler,
            10_000,
            0,
            tmp_path,
            chunk_rows=1000,
            workers=1,
            cancelled=lambda: len(calls) >= 2,
        )
    assert len(calls) == 2


def test_on_part_sees_the_parts_in_row_order(tmp_path: Path) -> None:
    seen: list[str] = []
    write_partitioned(
        codes_schema(),
        fixed_sampler,
        7000,
        0,
        tmp_path,
        chunk_rows=1000,
        workers=3,
        on_part=lambda part: seen.append(part.name),
    )
    assert seen == [part_name(i) for i in range(7)]
