"""A 100 M-row table registered on S3, through the service (issue 29 §3).

What is measured, and how:

* A real stack from ``tests.support.stack.Stack`` (its own PostgreSQL database built by the
  migrations, its own Redis queue, the API as a real uvicorn process, one real Celery job worker
  with concurrency 1, no reports worker: a registered source read in place has no owner tier) and
  moto's S3-protocol server (``tests.support.s3``) in its own process. The service stores its own
  objects on local disk; the source lives in the moto bucket, which is the one allowed source
  bucket (``RHOSYNTH_SOURCE_S3_BUCKETS``). Lease, heartbeat, recovery and requeue intervals are the
  production defaults.
* The table: adult × 2,048 (100,028,416 rows, 14 integer-code columns, 128 Parquet parts, made by
  ``benchmarks/scale_engines.py``; ``--parts`` and ``--domain`` point at them). The parts are
  uploaded under one prefix, then registered over HTTP (``POST /v1/datasets/sources``) with the
  declared schema (the domain map: every column integer codes ``0..size-1``, so no discovery);
  registration validates every row: its wall time is the request's.
* A job (``mst``, then optionally ``aim``) at (ε, δ) = (1, 10⁻⁹), asking for as many rows as the
  table has (a partitioned output, ``RHOSYNTH_PARTITIONED_OUTPUT_ROWS``), counted by the worker's
  DuckDB (``RHOSYNTH_DUCKDB_MEMORY_LIMIT=1GB``, 2 threads) or Spark ``local[2]`` (a second
  registration of the same prefix under a stack whose ``RHOSYNTH_SOURCE_ENGINE=spark``: the engine
  is recorded at registration). The per-job memory limit is 2 GiB
  (``RHOSYNTH_JOB_MEMORY_LIMIT_MB=2048``).
* Job wall time from the job row (``finished_at − started_at``, and ``created_at`` for the
  queue); the public progress stage is polled every second and each stage's first sighting kept
  (client-side, ±1 s).
* Peak memory: a thread reads ``VmRSS`` from ``/proc/<pid>/status`` of every process in the
  worker's process group (pool children and a Spark JVM included) every 0.5 s and keeps the
  largest sum; the same for the API's group (registration runs there).

Run from the repository root: ``nice -n 5 python -m benchmarks.scale_service
[--runs duckdb/mst,duckdb/aim,spark/mst] [--out /work/scale29/service.json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

PARTS = Path("/work/scale29/adult2048")
DOMAIN = Path("/work/scale29/domain.json")
OUT = Path("/work/scale29/service.json")
EPSILON, DELTA = "1", "1e-9"
BUDGET_RHO = "1"  # ρ(ε=1, δ=1e-9) ≈ 0.01497


def _group_rss_kib(pgid: int) -> int:
    """Sum of VmRSS (KiB) of every live process whose process group is ``pgid``."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after "(comm)": state, ppid, pgrp
                continue
            with open(f"/proc/{entry.name}/status") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        break
        except (OSError, IndexError, ValueError):
            continue
    return total


class PeakSampler:
    """Peak of the summed RSS of some process groups, sampled every ``interval`` seconds."""

    def __init__(self, groups: dict[str, int], interval: float = 0.5) -> None:
        self.groups = groups
        self.interval = interval
        self.peak_kib = dict.fromkeys(groups, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for label, pgid in self.groups.items():
                self.peak_kib[label] = max(self.peak_kib[label], _group_rss_kib(pgid))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def mib(self) -> dict[str, int]:
        return {label: round(kib / 1024) for label, kib in self.peak_kib.items()}


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def upload_parts(s3: Any, prefix: str, parts: Path) -> dict[str, Any]:
    files = sorted(parts.glob("*.parquet"))
    client = s3.client()
    started = time.perf_counter()
    for path in files:
        client.upload_file(str(path), s3.bucket, f"{prefix}/{path.name}")
    return {
        "parts": len(files),
        "mib": round(sum(p.stat().st_size for p in files) / 2**20, 1),
        "upload_s": round(time.perf_counter() - started, 1),
    }


def register(owner: httpx.Client, uri: str, schema: dict[str, int], label: str) -> dict[str, Any]:
    body = {
        "name": f"adult2048-{label}",
        "source": {"kind": "s3", "uri": uri, "format": "parquet"},
        "schema": schema,
        "budget_rho": BUDGET_RHO,
        "budget_delta": "1e-6",
    }
    started = time.perf_counter()
    response = owner.post("/v1/datasets/sources", json=body, timeout=3600)
    seconds = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"registration refused: {response.status_code} {response.text[:2000]}")
    dataset = response.json()
    return {
        "dataset_id": dataset["id"],
        "register_s": round(seconds, 1),
        "engine": (dataset.get("source") or {}).get("engine"),
        "load_1m": _load(),
    }


def run_job(
    stack: Any, analyst: httpx.Client, dataset_id: str, method: str, rows: int, timeout: float
) -> dict[str, Any]:
    body = {
        "method": method,
        "budget": {"epsilon": EPSILON, "delta": DELTA},
        "rows": rows,
        "seed": 29,
    }
    response = analyst.post(f"/v1/datasets/{dataset_id}/jobs", json=body, timeout=600)
    if response.status_code != 202:
        return {"refused": f"{response.status_code} {response.text[:2000]}"}
    job_id = response.json()["id"]
    started = time.perf_counter()
    stages: dict[str, float] = {}
    job: dict[str, Any] = {}
    while time.perf_counter() - started < timeout:
        job = analyst.get(f"/v1/jobs/{job_id}").json()
        stage = (job.get("progress") or {}).get("stage") or job["status"]
        stages.setdefault(stage, round(time.perf_counter() - started, 1))
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(1.0)
    result: dict[str, Any] = {
        "job_id": job_id,
        "status": job.get("status"),
        "client_wall_s": round(time.perf_counter() - started, 1),
        "stages_first_seen_s": stages,
        "error": job.get("error"),
    }
    if job.get("status") not in ("succeeded", "failed", "cancelled"):
        result["did_not_finish"] = f"not finished after {timeout:.0f} s; cancelled"
        analyst.post(f"/v1/jobs/{job_id}/cancel")
    from sqlalchemy import text

    with stack.session() as session:
        row = (
            session.execute(
                text(
                    "SELECT created_at, charged_at, started_at, finished_at, output_rows, "
                    "output_key, status FROM jobs WHERE id = :id"
                ),
                {"id": job_id},
            )
            .mappings()
            .one()
        )
    if row["started_at"] and row["finished_at"]:
        result["job_wall_s"] = round((row["finished_at"] - row["started_at"]).total_seconds(), 1)
        result["queue_s"] = round((row["started_at"] - row["created_at"]).total_seconds(), 1)
    result["output_rows"] = row["output_rows"]
    if job.get("status") == "succeeded":
        parts = analyst.get(f"/v1/jobs/{job_id}/output/parts")
        if parts.status_code == 200:
            listing = parts.json()
            items = listing.get("parts", listing if isinstance(listing, list) else [])
            result["parts_out"] = len(items)
            result["rows_in_parts"] = sum(int(p.get("rows", 0)) for p in items)
        else:
            result["parts_listing"] = f"{parts.status_code} {parts.text[:300]}"
    return result


@contextlib.contextmanager
def service(
    s3: Any, workdir: Path, engine: str, name: str
) -> Iterator[tuple[Any, httpx.Client, httpx.Client]]:
    from tests.conftest import make_tenant
    from tests.support.stack import Stack

    stack = Stack.create(
        name,
        workdir / name,
        workers=1,
        reports_worker=False,
        job_lease_seconds=60.0,
        job_heartbeat_seconds=10.0,
        recovery_interval_seconds=30.0,
        requeue_after_seconds=300.0,
        job_time_limit_seconds=3600,
        job_memory_limit_mb=2048,
        max_upload_bytes=1024**3,  # the service default (the test stack has 8 MiB)
        max_output_rows=100_028_416,
        max_rows=100_028_416,  # adult × 2,048 is 28,416 rows above the default 100 M
        source_engine=engine,
        source_s3_buckets=json.dumps([s3.bucket]),
        s3_endpoint_url=s3.endpoint,
        s3_region="us-east-1",
        s3_addressing_style="path",
        duckdb_memory_limit="1GB",
        duckdb_threads=2,
        spark_master="local[2]",
        log_level="INFO",
    )
    tenant = make_tenant(stack)
    try:
        yield stack, tenant.owner, tenant.analyst
    finally:
        tenant.close()
        stack.destroy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", default="duckdb/mst")
    parser.add_argument("--parts", type=Path, default=PARTS)
    parser.add_argument("--domain", type=Path, default=DOMAIN)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--rows", type=int, default=100_028_416)
    parser.add_argument("--timeout", type=float, default=2400)
    args = parser.parse_args(argv)

    from tests.support.s3 import credentials, start_server

    schema = json.loads(args.domain.read_text())
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}

    def save() -> None:
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True, default=str) + "\n")

    runs = [r.split("/") for r in args.runs.split(",")]
    with tempfile.TemporaryDirectory(prefix="scale-service-") as tmp, credentials():
        workdir = Path(tmp)
        s3 = start_server(workdir / "s3")
        try:
            prefix = f"sources-{uuid.uuid4().hex[:8]}/adult2048"
            results["upload"] = {"at": _now(), **upload_parts(s3, prefix, args.parts)}
            save()
            uri = f"s3://{s3.bucket}/{prefix}"
            print("uploaded", results["upload"], flush=True)
            for engine in dict.fromkeys(e for e, _ in runs):
                with service(s3, workdir, engine, f"scale{engine}") as (stack, owner, analyst):
                    assert stack.server is not None
                    groups = {"api": stack.server.pid, "worker": stack.workers[0].pid}
                    with PeakSampler(groups) as sampler:
                        reg = register(owner, uri, schema, engine)
                    reg["peak_mib"] = sampler.mib()
                    methods = "+".join(m for e, m in runs if e == engine)
                    results[f"register/{engine}/for-{methods}"] = {"at": _now(), **reg}
                    save()
                    print("registered", reg, flush=True)
                    for _, method in (r for r in runs if r[0] == engine):
                        load_before = _load()
                        with PeakSampler(groups) as sampler:
                            job = run_job(
                                stack, analyst, reg["dataset_id"], method, args.rows, args.timeout
                            )
                        job.update(
                            at=_now(),
                            load_1m_before=load_before,
                            load_1m_after=_load(),
                            peak_worker_group_mib=sampler.mib()["worker"],
                            peak_api_group_mib=sampler.mib()["api"],
                        )
                        if job.get("status") != "succeeded":
                            job["log_tail"] = stack.logs()[-3000:]
                        results[f"job/{engine}/{method}"] = job
                        save()
                        print(method, engine, json.dumps(job, default=str)[:1500], flush=True)
        finally:
            s3.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
