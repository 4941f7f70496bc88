"""Counting through the three engines of engine.counting (issue 29 §2, first piece).

Adult-like codes (14 columns with sizes close to adult's; skewed codes from a seeded generator,
not read from ../shared) are generated at each ``--rows`` and written as Parquet in the stored
layout (engine.counting.parquet: one narrow unsigned column per attribute). The same workload
is then counted by numpy (``Dataset.counts`` on the codes in memory), DuckDB (``DuckDBCounts``
over the file: ``--threads``, ``--memory-limit``) and Spark (``SparkCounts``, ``--master``):
the row count, the 14 one-way tables (what ``independent`` measures) and 20 two-way tables.
Every engine's tables are checked equal to numpy's. Times are wall seconds of ``counts`` alone
(the Spark session's start and the Parquet write are reported apart); one run each, on a
shared machine, so read them as orders of magnitude.

    python -m benchmarks.counting_engines --rows 1000000 10000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ADULT_LIKE = {
    "age": 74,
    "workclass": 9,
    "fnlwgt": 100,
    "education": 16,
    "education-num": 16,
    "marital-status": 7,
    "occupation": 15,
    "relationship": 6,
    "race": 5,
    "sex": 2,
    "capital-gain": 50,
    "capital-loss": 50,
    "hours-per-week": 96,
    "native-country": 42,
}


def codes(rows: int, seed: int = 0) -> Any:
    """A Dataset of adult-like skewed codes (each column ``floor(size · u²)``)."""
    from engine.domain import Dataset, Domain

    domain = Domain(tuple(ADULT_LIKE), tuple(ADULT_LIKE.values()))
    rng = np.random.default_rng(seed)
    columns = np.empty((rows, len(domain)), dtype=np.uint8, order="F")
    for j, size in enumerate(domain.sizes):
        columns[:, j] = (size * rng.random(rows) ** 2).astype(np.uint8)
    columns.flags.writeable = False
    return Dataset(domain, columns)


def workload(attributes: tuple[str, ...]) -> list[tuple[str, ...]]:
    return [()] + [(a,) for a in attributes] + list(itertools.combinations(attributes, 2))[:20]


def timed(engine: Any, sets: list[tuple[str, ...]]) -> tuple[float, list[Any]]:
    start = time.perf_counter()
    tables = engine.counts(sets)
    return time.perf_counter() - start, tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--memory-limit", default="2GB")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args()

    from engine.counting.duckdb import DuckDBCounts
    from engine.counting.parquet import write_codes

    session = None
    spark_start = None
    if not args.no_spark:
        from engine.counting.spark import spark_session

        start = time.perf_counter()
        session = spark_session(args.master)
        spark_start = time.perf_counter() - start
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for rows in args.rows:
            data = codes(rows)
            sets = workload(data.domain.attributes)
            path = Path(folder) / f"codes-{rows}.parquet"
            start = time.perf_counter()
            write_codes(data, path)
            written = time.perf_counter() - start
            row: dict[str, Any] = {
                "rows": rows,
                "tables": len(sets),
                "parquet_mib": round(path.stat().st_size / 2**20, 1),
                "parquet_write_s": round(written, 2),
            }
            seconds, expected = timed(data, sets)
            row["numpy_s"] = round(seconds, 2)
            engines: list[tuple[str, Any]] = [
                (
                    "duckdb_s",
                    DuckDBCounts(
                        path, data.domain, memory_limit=args.memory_limit, threads=args.threads
                    ),
                )
            ]
            if session is not None:
                from engine.counting.spark import SparkCounts

                engines.append(("spark_s", SparkCounts(path, data.domain, session=session)))
            for key, engine in engines:
                seconds, tables = timed(engine, sets)
                for want, got in zip(expected, tables, strict=True):
                    np.testing.assert_array_equal(got, want)
                row[key] = round(seconds, 2)
            results.append(row)
            print(json.dumps(row), flush=True)
    if spark_start is not None:
        print(json.dumps({"spark_session_start_s": round(spark_start, 2)}))
        assert session is not None
        session.stop()


if __name__ == "__main__":
    main()
