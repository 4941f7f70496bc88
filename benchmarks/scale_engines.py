"""Past one machine: counting at 100 M rows through DuckDB and Spark (issue 29 §3).

The table is adult ×2,048 (100,028,416 rows, 14 columns: adult's codes from ``--data``, i.e.
../shared/data/adult/adult.csv, kept as they are, so every normalised marginal is adult's). It
is written in the stored layout of codes (engine.counting.parquet: one narrow unsigned column per
attribute) as a partitioned Parquet dataset of 128 parts of adult ×16 (781,472 rows each; the
parts are byte-identical copies of one file). The "10 M" table is the first 13 parts
(10,159,136 rows, symlinks).

Phases (each measured run is a child process, so its peak memory is its own; the parent samples
the resident memory of the child's whole process tree every 0.1 s with psutil, which covers
Spark's JVM, a grandchild of the Python driver):

* ``generate``: write the parts (``--workdir``);
* ``upload``: start moto's S3 server (as the tests do) and upload the 128 parts with boto3, then
  download them again to a scratch folder (what a worker does before counting: neither DuckDB's
  httpfs extension nor Hadoop's S3A connector is installed here, and the service never
  downloads code at run time, so the engines read local copies);
* ``count``: per engine (``duckdb``: threads 2, memory_limit 1GB; ``spark``: local[2],
  driver memory 1g) and per size, the row count, the 14 one-way tables, 10 two-way and 5
  three-way tables, each group timed (wall seconds);
* ``method``: ``independent``, ``mst`` and ``aim`` at ε = 1 (δ = 1e-9: ρ by
  engine.accounting.rho_from_epsilon_delta) through the engine at 100 M rows (``Mechanism.run``
  with ``max_rows=0``, so nothing is sampled inside the run), then the chunked writer
  (engine.tables.partitioned) draws 100 M rows as Parquet parts; wall per phase and peak RSS
  of the process tree. A method that does not run on counting engines on this branch is
  recorded as refused.
* ``numpy``: the in-memory path (``Dataset`` of narrow codes, ``independent``) at 10 M and 20 M
  rows: wall and peak RSS, to state its limit.

* ``writer``: each method fitted on adult alone (its driver-side time), then ``--rows-out`` rows
  drawn by the chunked writer at one and at two threads.

Results go to ``--json`` (one key per run; a recorded run is skipped unless ``--force``).
``--project 1 4 16 64`` prints docs/scale.md's projection to 1 B rows from the recorded runs.

    nice python -m benchmarks.scale_engines --data ../shared/data --workdir /work/scale29 \\
        --json docs/scale_engines.json --phases generate upload count method numpy
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PARTS = 128
TILE = 16
PARTS_10M = 13
MIB = 1024 * 1024


def adult_codes(data: Path) -> tuple[Any, np.ndarray]:
    """adult's domain and codes (48,842 × 14, uint8) from ``data``/adult."""
    from engine.domain import Domain

    folder = data / "adult"
    sizes = json.loads((folder / "adult-domain.json").read_text())
    domain = Domain(tuple(sizes), tuple(int(v) for v in sizes.values()))
    table = np.loadtxt(folder / "adult.csv", delimiter=",", skiprows=1, dtype=np.int64)
    return domain, table.astype(np.uint8)


def generate(data: Path, workdir: Path) -> dict[str, Any]:
    from engine.counting.parquet import write_codes
    from engine.domain import Dataset

    domain, codes = adult_codes(data)
    full, ten = workdir / "adult2048", workdir / "adult208"
    for folder in (full, ten):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    start = time.perf_counter()
    tiled = np.tile(codes, (TILE, 1))
    first = full / "part-00000.parquet"
    write_codes(Dataset(domain, np.asfortranarray(tiled)), first)
    for i in range(1, PARTS):
        shutil.copyfile(first, full / f"part-{i:05d}.parquet")
    for i in range(PARTS_10M):
        (ten / f"part-{i:05d}.parquet").symlink_to(full / f"part-{i:05d}.parquet")
    (workdir / "domain.json").write_text(
        json.dumps(dict(zip(domain.attributes, domain.sizes, strict=True)))
    )
    size = sum(p.stat().st_size for p in full.iterdir())
    return {
        "rows": int(tiled.shape[0]) * PARTS,
        "rows_10m": int(tiled.shape[0]) * PARTS_10M,
        "parts": PARTS,
        "mib": round(size / MIB, 1),
        "seconds": round(time.perf_counter() - start, 1),
    }


def load_domain(workdir: Path) -> Any:
    from engine.domain import Domain

    sizes = json.loads((workdir / "domain.json").read_text())
    return Domain(tuple(sizes), tuple(int(v) for v in sizes.values()))


def upload(workdir: Path) -> dict[str, Any]:
    """Upload the parts to moto's S3 server and download them again (boto3, 4 threads each)."""
    from boto3.s3.transfer import TransferConfig

    from tests.support.s3 import start_server

    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        server = start_server(Path(scratch))
        try:
            client = server.client()
            bucket = server.bucket
            config = TransferConfig(max_concurrency=4)
            parts = sorted((workdir / "adult2048").iterdir())
            start = time.perf_counter()
            for part in parts:
                client.upload_file(
                    str(part), bucket, f"sources/adult2048/{part.name}", Config=config
                )
            up = time.perf_counter() - start
            down_dir = Path(scratch) / "down"
            down_dir.mkdir()
            start = time.perf_counter()
            for part in parts:
                client.download_file(
                    bucket,
                    f"sources/adult2048/{part.name}",
                    str(down_dir / part.name),
                    Config=config,
                )
            down = time.perf_counter() - start
        finally:
            server.stop()
    size = sum(p.stat().st_size for p in parts)
    return {
        "parts": len(parts),
        "mib": round(size / MIB, 1),
        "upload_s": round(up, 1),
        "download_s": round(down, 1),
    }


WORKLOAD_2 = [
    ("age", "income>50K"),
    ("education-num", "occupation"),
    ("marital-status", "relationship"),
    ("sex", "hours-per-week"),
    ("race", "native-country"),
    ("workclass", "occupation"),
    ("capital-gain", "income>50K"),
    ("age", "fnlwgt"),
    ("capital-loss", "hours-per-week"),
    ("relationship", "sex"),
]
WORKLOAD_3 = [
    ("age", "sex", "income>50K"),
    ("education-num", "occupation", "income>50K"),
    ("marital-status", "relationship", "sex"),
    ("workclass", "hours-per-week", "race"),
    ("age", "capital-gain", "native-country"),
]


def make_engine(kind: str, path: Path, domain: Any, spec: dict[str, Any] | None = None) -> Any:
    spec = spec or {}
    engine: Any
    if kind == "duckdb":
        from engine.counting.duckdb import DuckDBCounts

        limit = spec.get("memory_limit", "1GB")
        engine = DuckDBCounts(path, domain, memory_limit=limit, threads=2)
        if spec.get("unbatched"):
            engine.batched = False
        return engine
    from pyspark.sql import SparkSession

    from engine.counting.spark import SparkCounts

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rhosynth-scale")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    engine = SparkCounts(path, domain, session=session)
    if spec.get("unbatched"):
        engine.batched = False
    return engine


def child_count(spec: dict[str, Any]) -> dict[str, Any]:
    workdir = Path(spec["workdir"])
    domain = load_domain(workdir)
    path = workdir / spec["table"]
    start = time.perf_counter()
    engine = make_engine(spec["engine"], path, domain)
    out: dict[str, Any] = {"start_s": round(time.perf_counter() - start, 2)}
    start = time.perf_counter()
    out["rows"] = engine.n_rows
    out["row_count_s"] = round(time.perf_counter() - start, 2)
    for name, sets in (
        ("one_way", [(a,) for a in domain.attributes]),
        ("two_way", WORKLOAD_2),
        ("three_way", WORKLOAD_3),
    ):
        start = time.perf_counter()
        tables = engine.counts(sets)
        seconds = time.perf_counter() - start
        assert all(int(t.sum()) == out["rows"] for t in tables)
        out[f"{name}_s"] = round(seconds, 2)
        out[f"{name}_tables"] = len(sets)
    return out


def child_method(spec: dict[str, Any]) -> dict[str, Any]:
    from decimal import Decimal
    from fractions import Fraction

    from engine.accounting import rho_from_epsilon_delta
    from engine.mechanisms import get_mechanism

    workdir = Path(spec["workdir"])
    domain = load_domain(workdir)
    path = workdir / spec["table"]
    mechanism = get_mechanism(spec["method"])
    params = mechanism.validate_params(spec.get("params", {}))
    rho = Fraction(rho_from_epsilon_delta(Decimal("1"), Decimal("1e-9")))
    out: dict[str, Any] = {"rho": str(rho)}
    start = time.perf_counter()
    if spec["engine"] == "numpy":
        from engine.counting.duckdb import DuckDBCounts  # noqa: F401  (same imports as others)
        from engine.domain import Dataset

        rows = int(spec["numpy_rows"])
        import pyarrow.parquet as pq

        tables = []
        got = 0
        for part in sorted(path.iterdir()):
            t = pq.read_table(part)
            tables.append(np.column_stack([c.to_numpy() for c in t.columns]))
            got += tables[-1].shape[0]
            if got >= rows:
                break
        codes = np.asfortranarray(np.concatenate(tables)[:rows])
        del tables
        codes.flags.writeable = False
        engine: Any = Dataset(domain, codes)
        out["load_s"] = round(time.perf_counter() - start, 2)
    else:
        engine = make_engine(spec["engine"], path, domain, spec)
        out["start_s"] = round(time.perf_counter() - start, 2)
    scans = _count_scans(spec["engine"])
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    try:
        result = mechanism.run(engine, rho, params, rng=rng, max_rows=0)
    except Exception as error:  # recorded: a method refused on an engine
        out["refused"] = f"{type(error).__name__}: {error}"[:300]
        return out
    out["run_s"] = round(time.perf_counter() - start, 2)
    out["scans"] = scans[0]
    out["estimated_total"] = round(result.estimated_total)
    n_out = int(spec.get("rows_out", 0))
    if n_out and result.model is not None:
        from engine.tables.encoding import TableSchema
        from engine.tables.partitioned import write_partitioned

        schema = TableSchema.from_domain(domain)
        with tempfile.TemporaryDirectory(dir=spec.get("scratch")) as folder:
            start = time.perf_counter()
            written = write_partitioned(
                schema,
                result.model.sample,
                n_out,
                0,
                Path(folder),
                chunk_rows=int(spec.get("chunk_rows", 2_000_000)),
                workers=int(spec.get("workers", 2)),
            )
            out["write_s"] = round(time.perf_counter() - start, 2)
            out["rows_out"] = written.rows
            out["parts_out"] = len(written.parts)
            out["out_mib"] = round(sum(p.bytes for p in written.parts) / MIB, 1)
    return out


def _count_scans(engine: str) -> list[int]:
    """Count the queries that read the table (each one scan of the Parquet parts): DuckDB's
    executed statements, Spark's actions (``collect``, ``count``)."""
    counter = [0]
    if engine == "duckdb":
        from engine.counting.duckdb import DuckDBCounts

        fetch = DuckDBCounts._fetch

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter[0] += 1
            return fetch(self, *args, **kwargs)

        DuckDBCounts._fetch = counted  # type: ignore[method-assign]
    elif engine == "spark":
        # pyspark 4: sessions make pyspark.sql.classic's DataFrame, which overrides the actions.
        from pyspark.sql.classic.dataframe import DataFrame

        for name in ("collect", "count", "toArrow", "toPandas"):
            action = getattr(DataFrame, name, None)
            if action is None:
                continue

            def wrapped(self: Any, *args: Any, _action: Any = action, **kwargs: Any) -> Any:
                counter[0] += 1
                return _action(self, *args, **kwargs)

            setattr(DataFrame, name, wrapped)
    return counter


def child_writer(spec: dict[str, Any]) -> dict[str, Any]:
    """Fit ``spec["method"]`` on adult (numpy, 48,842 rows, ε = 1), then draw ``rows_out`` rows
    with the chunked writer at 1 and at 2 workers (threads): does a second thread help?"""
    from decimal import Decimal
    from fractions import Fraction

    from engine.accounting import rho_from_epsilon_delta
    from engine.domain import Dataset
    from engine.mechanisms import get_mechanism
    from engine.tables.encoding import TableSchema
    from engine.tables.partitioned import write_partitioned

    domain, codes = adult_codes(Path(spec["data"]))
    mechanism = get_mechanism(spec["method"])
    rho = Fraction(rho_from_epsilon_delta(Decimal("1"), Decimal("1e-9")))
    start = time.perf_counter()
    result = mechanism.run(
        Dataset(domain, np.asfortranarray(codes)),
        rho,
        mechanism.validate_params({}),
        rng=np.random.default_rng(0),
        max_rows=0,
    )
    out: dict[str, Any] = {"fit_s": round(time.perf_counter() - start, 2)}
    assert result.model is not None
    schema = TableSchema.from_domain(domain)
    for workers in (1, 2):
        with tempfile.TemporaryDirectory(dir=spec.get("scratch")) as folder:
            start = time.perf_counter()
            cpu = time.process_time()
            write_partitioned(
                schema,
                result.model.sample,
                int(spec["rows_out"]),
                0,
                Path(folder),
                chunk_rows=1_000_000,
                workers=workers,
            )
            out[f"write_{workers}_s"] = round(time.perf_counter() - start, 2)
            out[f"write_{workers}_cpu_s"] = round(time.process_time() - cpu, 2)
    return out


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``spec`` in a child process; its result plus the peak RSS of its process tree."""
    import psutil

    command = [sys.executable, "-m", "benchmarks.scale_engines", "--child", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)  # noqa: S603
    peak = {"tree": 0, "python": 0}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(process.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
                total = 0
                for p in procs:
                    with contextlib.suppress(psutil.Error):
                        total += p.memory_info().rss
                peak["tree"] = max(peak["tree"], total)
                peak["python"] = max(peak["python"], root.memory_info().rss)
            except psutil.Error:
                pass
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    stdout, _ = process.communicate()
    done.set()
    thread.join()
    wall = time.perf_counter() - start
    if process.returncode != 0:
        return {"failed": process.returncode, "wall_s": round(wall, 1)}
    result: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    result["wall_s"] = round(wall, 1)
    result["peak_tree_mib"] = round(peak["tree"] / MIB)
    result["peak_python_mib"] = round(peak["python"] / MIB)
    result["load_1m"] = round(os.getloadavg()[0], 2)
    return result


CORES_PER_NODE = 8
SPREAD = 0.7  # u: how well a scan spreads over the cluster's cores
JOB_OVERHEAD_S = 1.0  # o: fixed cost per Spark job on a cluster
TARGET_ROWS = 1_000_000_000
TABLES = {
    # Tables each method counted on adult through DuckDBCounts (one-, two-, three-way) and the
    # queries it made (counted by wrapping DuckDBCounts.counts and _fetch; ε = 1, seed 0).
    "independent": ((14, 0, 0), 14),
    "mst": ((14, 104, 0), 28),
    "aim": ((28, 101, 378), 39),
}


def project(results: dict[str, Any], nodes: list[int]) -> list[list[str]]:
    """docs/scale.md's table: counting at 1 B rows on ``nodes`` nodes of :data:`CORES_PER_NODE`
    cores: jobs × o + Σ tables × rows × (core-seconds per row of a k-way table, Spark local[2]
    at 100 M rows, one GROUP BY per table) / (nodes × cores × u), plus the driver-side time F
    (the method fitted on adult alone, ``writer/<method>/…`` ``fit_s``)."""
    spark = results["count/spark/100m"]
    rows = spark["rows"]
    per_row = [
        spark[f"{name}_s"] * 2 / (spark[f"{name}_tables"] * rows)
        for name in ("one_way", "two_way", "three_way")
    ]
    out = []
    for method, (tables, jobs) in TABLES.items():
        fit = results.get(f"writer/{method}/10000000", {}).get("fit_s", 0.0)
        work = TARGET_ROWS * sum(t * a for t, a in zip(tables, per_row, strict=True))
        cells = [
            method,
            "/".join(str(t) for t in tables),
            str(jobs),
            f"{work:,.0f}",
            f"{fit:.1f} s",
        ]
        for n in nodes:
            seconds = jobs * JOB_OVERHEAD_S + work / (n * CORES_PER_NODE * SPREAD) + fit
            cells.append(f"{seconds:,.0f} s")
        out.append(cells)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--child")
    parser.add_argument("--data", type=Path, default=Path("../shared/data"))
    parser.add_argument("--workdir", type=Path, default=REPO.parent / "scale29")
    parser.add_argument("--json", type=Path, default=REPO / "docs" / "scale_engines.json")
    parser.add_argument("--phases", nargs="+", default=["generate", "count"])
    parser.add_argument("--engines", nargs="+", default=["duckdb", "spark"])
    parser.add_argument("--sizes", nargs="+", default=["10m", "100m"])
    parser.add_argument("--methods", nargs="+", default=["independent", "mst", "aim"])
    parser.add_argument("--rows-out", type=int, default=100_000_000)
    parser.add_argument("--numpy-rows", type=int, nargs="+", default=[10_000_000, 20_000_000])
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--project", type=int, nargs="+", help="print docs/scale.md's table")
    parser.add_argument("--memory-limit", default="1GB", help="DuckDB's memory_limit")
    parser.add_argument(
        "--unbatched", action="store_true", help="one GROUP BY per table (no GROUPING SETS)"
    )
    args = parser.parse_args()
    if args.child:
        spec = json.loads(args.child)
        kinds = {"count": child_count, "method": child_method, "writer": child_writer}
        result = kinds[spec["kind"]](spec)
        print(json.dumps(result), flush=True)
        return
    results: dict[str, Any] = json.loads(args.json.read_text()) if args.json.exists() else {}
    if args.project:
        from benchmarks.sections import markdown_table

        header = ["method", "tables (1/2/3-way)", "jobs", "core-s", "F"]
        header += [f"{n} nodes" for n in args.project]
        print(
            "\n".join(
                markdown_table(
                    header, project(results, args.project), "lrrrr" + "r" * len(args.project)
                )
            )
        )
        return

    def record(key: str, compute: Any) -> None:
        if key in results and not args.force:
            return
        print(f"{key} ...", flush=True)
        value = compute()
        value["at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        results[key] = value
        print(key, json.dumps(value), flush=True)
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")

    tables = {"10m": "adult208", "100m": "adult2048"}
    workdir = str(args.workdir)
    for phase in args.phases:
        if phase == "generate":
            record("generate", lambda: generate(args.data, args.workdir))
        elif phase == "upload":
            record("upload", lambda: upload(args.workdir))
        elif phase == "count":
            for engine in args.engines:
                for size in args.sizes:
                    spec = {"kind": "count", "engine": engine, "table": tables[size]}
                    spec["workdir"] = workdir
                    record(f"count/{engine}/{size}", lambda s=spec: run_child(s))
        elif phase == "method":
            for engine in args.engines:
                for method in args.methods:
                    spec = {
                        "kind": "method",
                        "engine": engine,
                        "method": method,
                        "table": tables["100m"],
                        "workdir": workdir,
                        "rows_out": args.rows_out,
                        "scratch": workdir,
                        "memory_limit": args.memory_limit,
                        "unbatched": args.unbatched,
                    }
                    key = f"method/{engine}/{method}/100m"
                    if engine == "duckdb" and args.memory_limit != "1GB":
                        key += f"/memory_limit={args.memory_limit}"
                    if args.unbatched:
                        key += "/unbatched"
                    if not args.rows_out:
                        key += "/no-output"
                    record(key, lambda s=spec: run_child(s))
        elif phase == "writer":
            for method in args.methods:
                spec = {
                    "kind": "writer",
                    "method": method,
                    "data": str(args.data.resolve()),
                    "rows_out": args.rows_out,
                    "scratch": workdir,
                }
                record(f"writer/{method}/{args.rows_out}", lambda s=spec: run_child(s))
        elif phase == "numpy":
            for rows in args.numpy_rows:
                spec = {
                    "kind": "method",
                    "engine": "numpy",
                    "method": "independent",
                    "table": tables["100m"],
                    "workdir": workdir,
                    "numpy_rows": rows,
                }
                record(f"numpy/independent/{rows}", lambda s=spec: run_child(s))


if __name__ == "__main__":
    main()
