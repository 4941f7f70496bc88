"""The service under a bounded load on loopback (RELIABILITY.md, test 14).

What is measured, and how:

* A real stack from ``tests.support.stack.Stack``: its own PostgreSQL database built by the
  migrations, its own Redis queue, the API as a real uvicorn process and ``workers`` real Celery
  worker processes (concurrency 1 each). Lease, heartbeat, recovery and requeue intervals are set
  to the service's production defaults (the test stack shortens them for chaos tests).
* One tenant with an owner key (uploads) and an analyst key (everything else). Three datasets:
  ``tests/fixtures/adult-sample.csv`` (1,000 rows) with a large budget, the full adult table from
  ``--data`` (48,842 rows) with a large budget, and the sample again with a scarce budget so that
  budget refusals (409) happen under concurrency.
* ``users`` closed-loop virtual analysts, as asyncio tasks sharing one ``httpx.AsyncClient``, for
  ``duration`` seconds. Each browses (``GET /v1/datasets``, ``GET /v1/datasets/{id}``), submits a
  job when it has none running (small ρ, or (ε, δ); some with an ``Idempotency-Key``, half of
  those immediately re-sent as a client retry would), polls ``GET /v1/jobs/{id}`` and downloads
  ``GET /v1/jobs/{id}/output`` (CSV) once the job has succeeded; an exponential think time
  separates a user's requests. Latency is the client-side time from sending a request to having
  read the whole response body, so it includes queueing in the load generator itself.
* Job timing and throughput come from the job rows (exact timestamps, read directly from the
  database): queue wait ``started_at − created_at``, worker time ``finished_at − started_at``,
  jobs that finished inside the load window per minute per worker, the share of the window with
  at least one job waiting (near 100 % means the workers were the bottleneck, so the figure is
  their capacity under this load) and the mean number of jobs running per worker.
* After the load, the driver waits (bounded) for every job to finish, then checks each dataset's
  ledger with ``tests.support.ledger.assert_reconciled`` and checks spent + reserved ≤ total and
  spent = Σ ρ of the charged jobs exactly.
* CPU seconds used by the API process and each worker's process group during the window are read
  from /proc, to show where the machine's time went.

Run alone (from the repository root, so ``tests`` is importable):
``python -m benchmarks.service_load [--data ../shared/data] [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from benchmarks.sections import markdown_table

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

LIST_DATASETS = "GET /v1/datasets"
GET_DATASET = "GET /v1/datasets/{id}"
SUBMIT_JOB = "POST /v1/datasets/{id}/jobs"
REPLAY_JOB = "POST /v1/datasets/{id}/jobs (Idempotency-Key retry)"
GET_JOB = "GET /v1/jobs/{id}"
GET_OUTPUT = "GET /v1/jobs/{id}/output"
ENDPOINTS = (LIST_DATASETS, GET_DATASET, SUBMIT_JOB, REPLAY_JOB, GET_JOB, GET_OUTPUT)

PRODUCTION_TIMINGS: dict[str, Any] = {
    "job_lease_seconds": 60.0,
    "job_heartbeat_seconds": 10.0,
    "recovery_interval_seconds": 30.0,
    "requeue_after_seconds": 300.0,
}
"""The service's defaults (app.config.Settings), restored over the test stack's short ones."""


@dataclass(frozen=True)
class LoadConfig:
    """The shape of the load. Defaults: 16 users, 30 s, 2 workers (fits 2 cores)."""

    users: int = 16
    duration_seconds: float = 30.0
    workers: int = 2
    think_seconds: float = 0.1
    """Mean of the exponential pause between two requests of one user."""
    job_rho: str = "0.001"
    epsilon: str = "0.05"
    delta: str = "1e-9"
    epsilon_share: float = 0.2
    """Submissions that state (ε, δ) instead of ρ."""
    idempotent_share: float = 0.3
    replay_share: float = 0.5
    """Of the submissions with an Idempotency-Key, those re-sent at once with the same key."""
    full_table_share: float = 0.15
    scarce_share: float = 0.1
    budget_rho: str = "10"
    scarce_budget_rho: str = "0.005"
    drain_timeout_seconds: float = 120.0
    request_timeout_seconds: float = 60.0
    seed: int = 20_250_601

    @classmethod
    def quick(cls) -> LoadConfig:
        return cls(users=8, duration_seconds=10.0)


@dataclass
class EndpointStats:
    """Latencies (seconds) and outcomes of one endpoint."""

    latencies: list[float] = field(default_factory=list)
    sent_at: list[float] = field(default_factory=list)
    """Seconds from the start of the window to each request with a latency."""
    response_bytes: list[int] = field(default_factory=list)
    ok: int = 0
    budget_409: int = 0
    other_4xx: Counter[int] = field(default_factory=Counter)
    server_5xx: Counter[int] = field(default_factory=Counter)
    transport_errors: Counter[str] = field(default_factory=Counter)

    @property
    def count(self) -> int:
        return len(self.latencies) + sum(self.transport_errors.values())


@dataclass
class DatasetInfo:
    label: str
    id: str
    rows: int
    budget_rho: str
    upload_seconds: float


@dataclass
class LoadReport:
    """Everything :func:`run_load` measured."""

    config: LoadConfig
    datasets: list[DatasetInfo] = field(default_factory=list)
    warm_up_ms: dict[str, float] = field(default_factory=dict)
    endpoints: dict[str, EndpointStats] = field(default_factory=dict)
    output_by_dataset: dict[str, EndpointStats] = field(default_factory=dict)
    window_seconds: float = 0.0
    drain_seconds: float = 0.0
    drained: bool = False
    jobs: dict[str, Any] = field(default_factory=dict)
    ledger: list[dict[str, Any]] = field(default_factory=list)
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    log_problems: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


# ------------------------------------------------------------------------------------------
# The virtual users
# ------------------------------------------------------------------------------------------


class LoadDriver:
    """Shared state of the virtual users: the client, the datasets, the statistics."""

    def __init__(
        self, client: httpx.AsyncClient, config: LoadConfig, datasets: list[DatasetInfo]
    ) -> None:
        self.client = client
        self.config = config
        self.datasets = datasets
        self.by_label = {d.label: d for d in datasets}
        self.stats = {label: EndpointStats() for label in ENDPOINTS}
        self.output_by_dataset = {d.label: EndpointStats() for d in datasets}
        self.failures: list[str] = []
        self.deadline = 0.0
        self.window_started = time.perf_counter()

    async def call(self, label: str, method: str, url: str, **kwargs: Any) -> httpx.Response | None:
        """Send one request, record its latency and outcome; None on a transport error."""
        stats = self.stats[label]
        started = time.perf_counter()
        try:
            response = await self.client.request(method, url, **kwargs)
        except httpx.HTTPError as error:
            stats.transport_errors[type(error).__name__] += 1
            return None
        stats.latencies.append(time.perf_counter() - started)
        stats.sent_at.append(started - self.window_started)
        stats.response_bytes.append(len(response.content))
        status = response.status_code
        if 200 <= status < 300:
            stats.ok += 1
        elif status == 409 and label in (SUBMIT_JOB, REPLAY_JOB) and _is_budget_refusal(response):
            stats.budget_409 += 1
        elif status >= 500:
            stats.server_5xx[status] += 1
        else:
            stats.other_4xx[status] += 1
        return response

    def _job_body(self, rng: random.Random) -> dict[str, Any]:
        config = self.config
        budget: dict[str, str]
        if rng.random() < config.epsilon_share:
            budget = {"epsilon": config.epsilon, "delta": config.delta}
        else:
            budget = {"rho": config.job_rho}
        body: dict[str, Any] = {"method": "independent", "budget": budget}
        if rng.random() < 0.5:
            body["seed"] = rng.randrange(2**31)
        return body

    def _pick_target(self, rng: random.Random) -> DatasetInfo:
        config = self.config
        draw = rng.random()
        if draw < config.scarce_share:
            return self.by_label["scarce"]
        if draw < config.scarce_share + config.full_table_share and "adult-full" in self.by_label:
            return self.by_label["adult-full"]
        return self.by_label["adult-sample"]

    async def submit(self, rng: random.Random) -> tuple[str, str] | None:
        """Submit one job (maybe with a retried Idempotency-Key); (job id, dataset) if accepted."""
        target = self._pick_target(rng)
        url = f"/v1/datasets/{target.id}/jobs"
        body = self._job_body(rng)
        headers: dict[str, str] = {}
        if rng.random() < self.config.idempotent_share:
            headers["Idempotency-Key"] = f"bench-{uuid.uuid4()}"
        response = await self.call(SUBMIT_JOB, "POST", url, json=body, headers=headers)
        if response is None or response.status_code != 202:
            return None
        job_id = str(response.json()["id"])
        if headers and rng.random() < self.config.replay_share:
            replay = await self.call(REPLAY_JOB, "POST", url, json=body, headers=headers)
            if replay is not None and replay.status_code == 202:
                if str(replay.json()["id"]) != job_id:
                    self.failures.append(f"Idempotency-Key retry returned another job for {job_id}")
            elif replay is not None:
                self.failures.append(f"Idempotency-Key retry answered {replay.status_code}")
        return job_id, target.label

    async def analyst(self, user: int) -> None:
        """One closed-loop analyst: browse, submit, poll, download; until the deadline."""
        # Seeded on purpose: the load's shape is reproducible; nothing here is secret.
        rng = random.Random(f"{self.config.seed}|user|{user}")  # noqa: S311
        active: tuple[str, str] | None = None
        while time.monotonic() < self.deadline:
            if active is None:
                action = rng.choices(("list", "get", "submit"), weights=(1, 1, 2))[0]
            else:
                action = rng.choices(("list", "get", "poll"), weights=(1, 1, 4))[0]
            if action == "list":
                await self.call(LIST_DATASETS, "GET", "/v1/datasets")
            elif action == "get":
                dataset = rng.choice(self.datasets)
                await self.call(GET_DATASET, "GET", f"/v1/datasets/{dataset.id}")
            elif action == "submit":
                active = await self.submit(rng)
            elif active is not None:
                active = await self._poll(active)
            await asyncio.sleep(rng.expovariate(1.0 / self.config.think_seconds))

    async def _poll(self, active: tuple[str, str]) -> tuple[str, str] | None:
        job_id, dataset = active
        response = await self.call(GET_JOB, "GET", f"/v1/jobs/{job_id}")
        if response is None or response.status_code != 200:
            return active
        status = response.json()["status"]
        if status == "succeeded":
            download = await self.call(GET_OUTPUT, "GET", f"/v1/jobs/{job_id}/output")
            if download is not None:
                by_dataset = self.output_by_dataset[dataset]
                by_dataset.latencies.append(self.stats[GET_OUTPUT].latencies[-1])
                by_dataset.response_bytes.append(len(download.content))
            return None
        if status in ("failed", "cancelled"):
            self.failures.append(f"job {job_id} ended {status}")
            return None
        return active

    async def warm_up(self) -> dict[str, float]:
        """Requests before the window, not counted: one of each kind in turn (their latencies,
        in ms, are returned: first use of the API's broker producer and database pool), one job
        on the small table followed to its output, then one concurrent burst of dataset reads
        as wide as the user count (grows the API's connection pools)."""
        measured = self.stats
        self.stats = {label: EndpointStats() for label in ENDPOINTS}
        try:
            await self.call(LIST_DATASETS, "GET", "/v1/datasets")
            for dataset in self.datasets:
                await self.call(GET_DATASET, "GET", f"/v1/datasets/{dataset.id}")
            target = self.by_label["adult-sample"]
            body = {"method": "independent", "budget": {"rho": self.config.job_rho}}
            response = await self.call(
                SUBMIT_JOB, "POST", f"/v1/datasets/{target.id}/jobs", json=body
            )
            if response is not None and response.status_code == 202:
                active: tuple[str, str] | None = (str(response.json()["id"]), target.label)
                deadline = time.monotonic() + self.config.drain_timeout_seconds
                while active is not None and time.monotonic() < deadline:
                    active = await self._poll(active)
                    await asyncio.sleep(0.05)
            await asyncio.gather(
                *(
                    self.call(
                        GET_DATASET,
                        "GET",
                        f"/v1/datasets/{self.datasets[i % len(self.datasets)].id}",
                    )
                    for i in range(self.config.users)
                )
            )
            warm = self.stats
        finally:
            self.stats = measured
        self.output_by_dataset = {d.label: EndpointStats() for d in self.datasets}
        return {label: 1000 * s.latencies[0] for label, s in warm.items() if s.latencies}

    async def run(self) -> float:
        """Run every user until the deadline; return the window's length in seconds."""
        started = time.monotonic()
        self.window_started = time.perf_counter()
        self.deadline = started + self.config.duration_seconds
        await asyncio.gather(*(self.analyst(i) for i in range(self.config.users)))
        return time.monotonic() - started


def _is_budget_refusal(response: httpx.Response) -> bool:
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "remaining_rho" in body


# ------------------------------------------------------------------------------------------
# The stack, the datasets, the checks
# ------------------------------------------------------------------------------------------


def _upload(
    owner: httpx.Client, label: str, csv: Path, schema: str, budget_rho: str
) -> DatasetInfo:
    started = time.perf_counter()
    with open(csv, "rb") as handle:
        response = owner.post(
            "/v1/datasets",
            files={"file": (csv.name, handle, "text/csv")},
            data={"schema": schema, "name": label, "budget_rho": budget_rho},
        )
    elapsed = time.perf_counter() - started
    if response.status_code != 201:
        raise RuntimeError(f"upload of {label} answered {response.status_code}: {response.text}")
    body = response.json()
    return DatasetInfo(label, str(body["id"]), int(body["n_rows"]), budget_rho, elapsed)


def _process_group_cpu(pgid: int) -> float:
    """User + system CPU seconds of every live process in process group ``pgid``."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the command: state ppid pgrp session ... utime(12) stime(13).
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / ticks


def _cpu_snapshot(stack: Any) -> dict[str, float]:
    snapshot = {"load generator (this process)": time.process_time()}
    if stack.server is not None:
        snapshot["API (uvicorn)"] = _process_group_cpu(stack.server.pid)
    for i, worker in enumerate(stack.workers):
        snapshot[f"worker {i + 1} (Celery, process group)"] = _process_group_cpu(worker.pid)
    return snapshot


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    return float(np.percentile(np.asarray(values), q, method="inverted_cdf"))


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds()


def _job_rows(stack: Any, dataset_ids: list[str]) -> list[Any]:
    from sqlalchemy import select

    from app.jobs.models import Job

    ids = [uuid.UUID(i) for i in dataset_ids]
    with stack.session() as session:
        return list(
            session.execute(
                select(
                    Job.id,
                    Job.dataset_id,
                    Job.status,
                    Job.rho,
                    Job.attempt,
                    Job.created_at,
                    Job.started_at,
                    Job.finished_at,
                    Job.charged_at,
                    Job.output_rows,
                ).where(Job.dataset_id.in_(ids))
            ).all()
        )


def _wait_for_drain(stack: Any, dataset_ids: list[str], timeout: float) -> tuple[bool, float]:
    started = time.monotonic()
    while True:
        live = [r for r in _job_rows(stack, dataset_ids) if r.status in ("queued", "running")]
        if not live:
            return True, time.monotonic() - started
        if time.monotonic() - started > timeout:
            return False, time.monotonic() - started
        time.sleep(0.5)


def _covered_fraction(
    intervals: Iterable[tuple[datetime, datetime]], lo: datetime, hi: datetime
) -> float:
    """Fraction of [lo, hi] covered by at least one interval."""
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)
    covered = 0.0
    current_start: datetime | None = None
    current_end: datetime | None = None
    for a, b in clipped:
        if current_end is None or a > current_end:
            if current_start is not None and current_end is not None:
                covered += (current_end - current_start).total_seconds()
            current_start, current_end = a, b
        elif b > current_end:
            current_end = b
    if current_start is not None and current_end is not None:
        covered += (current_end - current_start).total_seconds()
    span = (hi - lo).total_seconds()
    return covered / span if span > 0 else 0.0


def summarize_jobs(
    rows: list[Any],
    datasets: list[DatasetInfo],
    window: tuple[datetime, datetime],
    drain_end: datetime,
    workers: int,
) -> dict[str, Any]:
    """Job counts, timings and throughput from the job rows (exact database timestamps)."""
    lo, hi = window
    label_of = {uuid.UUID(d.id): d.label for d in datasets}
    per_dataset: dict[str, Any] = {}
    for dataset in datasets:
        mine = [r for r in rows if label_of[r.dataset_id] == dataset.label]
        waits = [w for r in mine if (w := _seconds(r.started_at, r.created_at)) is not None]
        runs = [
            s
            for r in mine
            if r.status == "succeeded" and (s := _seconds(r.finished_at, r.started_at)) is not None
        ]
        per_dataset[dataset.label] = {
            "jobs": len(mine),
            "status": dict(Counter(r.status for r in mine)),
            "retried": sum(1 for r in mine if r.attempt > 1),
            "queue_wait": _quantiles(waits),
            "worker_time": _quantiles(runs),
            "output_rows": _quantiles([float(r.output_rows) for r in mine if r.output_rows]),
        }
    window_seconds = (hi - lo).total_seconds()
    in_window = [
        r for r in rows if r.status == "succeeded" and r.finished_at and lo <= r.finished_at <= hi
    ]
    waiting = [(r.created_at, r.started_at or drain_end) for r in rows]
    running = [(r.started_at, r.finished_at or drain_end) for r in rows if r.started_at]
    busy = sum((min(b, hi) - max(a, lo)).total_seconds() for a, b in running if b > lo and a < hi)
    succeeded = [r for r in rows if r.status == "succeeded"]
    busy_in_window = sum(
        (r.finished_at - r.started_at).total_seconds()
        for r in in_window
        if r.started_at is not None and r.finished_at is not None
    )
    return {
        "per_dataset": per_dataset,
        "succeeded_in_window": len(in_window),
        "per_minute_per_worker": len(in_window) / (window_seconds / 60) / workers,
        "succeeded_total": len(succeeded),
        "waiting_fraction": _covered_fraction(waiting, lo, hi),
        "running_per_worker": busy / window_seconds / workers if window_seconds > 0 else 0.0,
        "per_busy_worker_minute": len(in_window) / (busy_in_window / 60) if busy_in_window else 0.0,
    }


def _quantiles(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {
        "n": float(len(values)),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "max": max(values),
    }


def check_ledgers(stack: Any, datasets: list[DatasetInfo], rows: list[Any]) -> list[dict[str, Any]]:
    """Reconcile each dataset's ledger and compare its account with its jobs, exactly."""
    from tests.support.ledger import assert_reconciled

    results: list[dict[str, Any]] = []
    for dataset in datasets:
        entry: dict[str, Any] = {"dataset": dataset.label}
        try:
            account = assert_reconciled(stack, dataset.id).account
            entry["reconciled"] = True
        except AssertionError as error:
            entry["reconciled"] = False
            entry["error"] = str(error)
            with stack.session() as session:
                from app.budget import service as budget_service

                account = budget_service.reconcile(session, uuid.UUID(dataset.id)).account
        mine = [r for r in rows if str(r.dataset_id) == dataset.id]
        charged = sum((Decimal(r.rho) for r in mine if r.charged_at is not None), Decimal(0))
        reserved_live = sum(
            (
                Decimal(r.rho)
                for r in mine
                if r.charged_at is None and r.status in ("queued", "running")
            ),
            Decimal(0),
        )
        entry.update(
            total=_rho_text(account.total_rho),
            spent=_rho_text(account.spent_rho),
            reserved=_rho_text(account.reserved_rho),
            within_total=account.spent_rho + account.reserved_rho <= account.total_rho,
            spent_equals_charged_jobs=account.spent_rho == charged,
            reserved_equals_live_jobs=account.reserved_rho == reserved_live,
            charged_jobs=sum(1 for r in mine if r.charged_at is not None),
        )
        results.append(entry)
    return results


def _rho_text(value: Decimal) -> str:
    """Plain decimal text without exponent or trailing zeros (as the API writes ρ)."""
    return "0" if value == 0 else format(value.normalize(), "f")


def _log_problems(workdir: Path) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for log in sorted(workdir.glob("*.log")):
        kind = log.name.split("-")[0]
        for line in log.read_text(errors="replace").splitlines():
            if "Traceback (most recent call last)" in line:
                counts[f"{kind}: tracebacks"] += 1
            elif " ERROR " in line or line.startswith("ERROR"):
                counts[f"{kind}: ERROR lines"] += 1
    return dict(counts)


def run_load(
    config: LoadConfig,
    *,
    data_dir: Path | None = None,
    progress: Any = None,
    keep_workdir: bool = False,
) -> LoadReport:
    """Start a stack, load it, check it, destroy it (also on errors)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # tests.support lives in the repository, not the package
    from app.db.base import utcnow
    from tests.support import services
    from tests.support.stack import Stack

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    started = time.perf_counter()
    report = LoadReport(config=config)
    services.ensure_services()
    workdir = Path(tempfile.mkdtemp(prefix="rhosynth-load-"))
    stack: Stack | None = None
    try:
        say(f"starting stack: API + {config.workers} worker(s)")
        stack = Stack.create("bench", workdir, workers=config.workers, **PRODUCTION_TIMINGS)
        tenant = f"bench-{uuid.uuid4().hex[:10]}"
        owner_key = stack.create_key(tenant, "owner", "bench-owner")
        analyst_key = stack.create_key(tenant, "analyst", "bench-analyst")
        schema = (FIXTURES / "adult-domain.json").read_text()
        sample = FIXTURES / "adult-sample.csv"
        with stack.client(owner_key) as owner:
            report.datasets.append(
                _upload(owner, "adult-sample", sample, schema, config.budget_rho)
            )
            full = data_dir / "adult" / "adult.csv" if data_dir is not None else None
            if full is not None and full.is_file():
                report.datasets.append(
                    _upload(owner, "adult-full", full, schema, config.budget_rho)
                )
            report.datasets.append(
                _upload(owner, "scarce", sample, schema, config.scarce_budget_rho)
            )
        dataset_ids = [d.id for d in report.datasets]

        say(f"load: warm-up, then {config.users} users for {config.duration_seconds:.0f} s")
        driven = asyncio.run(_drive(stack, analyst_key, config, report.datasets))
        driver = driven.driver
        report.warm_up_ms = driven.warm_up_ms
        report.window_seconds = driven.window_seconds
        window_start, window_end = driven.window
        report.cpu_seconds = driven.cpu_seconds
        report.endpoints = driver.stats
        report.output_by_dataset = driver.output_by_dataset
        report.failures += driver.failures

        say("draining the queue")
        report.drained, report.drain_seconds = _wait_for_drain(
            stack, dataset_ids, config.drain_timeout_seconds
        )
        if not report.drained:
            report.failures.append(
                f"jobs still live {config.drain_timeout_seconds:.0f} s after the load"
            )
        rows = _job_rows(stack, dataset_ids)
        report.jobs = summarize_jobs(
            rows, report.datasets, (window_start, window_end), utcnow(), config.workers
        )
        report.ledger = check_ledgers(stack, report.datasets, rows)
        for entry in report.ledger:
            for check in (
                "reconciled",
                "within_total",
                "spent_equals_charged_jobs",
                "reserved_equals_live_jobs",
            ):
                if not entry[check]:
                    report.failures.append(f"ledger of {entry['dataset']}: {check} is false")
        for label, stats in report.endpoints.items():
            if stats.server_5xx or stats.transport_errors or stats.other_4xx:
                report.failures.append(
                    f"{label}: 5xx {dict(stats.server_5xx)}, other 4xx {dict(stats.other_4xx)}, "
                    f"transport errors {dict(stats.transport_errors)}"
                )
        report.log_problems = _log_problems(workdir)
    except Exception as error:
        report.failures.append(f"load benchmark aborted: {type(error).__name__}: {error}")
        if stack is not None:
            report.failures.append("stack logs (tail):\n" + stack.logs()[-3000:])
    finally:
        if stack is not None:
            say("destroying the stack")
            with contextlib.suppress(Exception):
                stack.destroy()
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class _Driven:
    driver: LoadDriver
    warm_up_ms: dict[str, float]
    window_seconds: float
    window: tuple[datetime, datetime]
    cpu_seconds: dict[str, float]


async def _drive(stack: Any, key: str, config: LoadConfig, datasets: list[DatasetInfo]) -> _Driven:
    """Warm up, then run the users; the window (and its CPU accounting) excludes the warm-up."""
    from app.db.base import utcnow

    limits = httpx.Limits(max_connections=config.users, max_keepalive_connections=config.users)
    async with httpx.AsyncClient(
        base_url=stack.base_url,
        headers={"Authorization": f"Bearer {key}"},
        timeout=config.request_timeout_seconds,
        limits=limits,
    ) as client:
        driver = LoadDriver(client, config, datasets)
        warm_up_ms = await driver.warm_up()
        cpu_before = _cpu_snapshot(stack)
        window_start = utcnow()
        window_seconds = await driver.run()
        window_end = utcnow()
        cpu_after = _cpu_snapshot(stack)
    return _Driven(
        driver=driver,
        warm_up_ms=warm_up_ms,
        window_seconds=window_seconds,
        window=(window_start, window_end),
        cpu_seconds={k: cpu_after[k] - cpu_before[k] for k in cpu_before},
    )


# ------------------------------------------------------------------------------------------
# The Markdown section
# ------------------------------------------------------------------------------------------


def _counter_text(counter: Counter[Any]) -> str:
    if not counter:
        return "0"
    return ", ".join(f"{k}: {v}" for k, v in sorted(counter.items(), key=lambda kv: str(kv[0])))


def _q_text(q: dict[str, float] | None, fmt: str = ".2f") -> str:
    if q is None:
        return "—"
    return f"{format(q['p50'], fmt)} / {format(q['p95'], fmt)} / {format(q['max'], fmt)}"


def render_markdown(report: LoadReport) -> str:
    """The load section of docs/benchmarks.md (numbers all from ``report``)."""
    config = report.config
    timings = ", ".join(f"{k}={v:g}" for k, v in PRODUCTION_TIMINGS.items())
    lines = [
        "## Service under load (RELIABILITY.md, test 14)",
        "",
        f"A real stack (`tests.support.stack.Stack`): PostgreSQL database built by the "
        f"migrations, Redis queue, the API as one uvicorn process, {config.workers} Celery "
        "worker process(es) at concurrency 1; lease/heartbeat/recovery/requeue at the "
        f"service's production defaults ({timings}). "
        f"{config.users} closed-loop virtual analysts (asyncio + one `httpx.AsyncClient`, "
        f"loopback) for {config.duration_seconds:g} s, exponential think time with mean "
        f"{config.think_seconds * 1000:.0f} ms. A user with no job in flight lists datasets, "
        "reads one, or submits a job (`independent`; "
        f"ρ = {config.job_rho}, or (ε, δ) = ({config.epsilon}, {config.delta}) for "
        f"{config.epsilon_share:.0%} of submissions; {config.idempotent_share:.0%} with an "
        f"`Idempotency-Key`, {config.replay_share:.0%} of those re-sent at once with the same "
        "key); "
        "a user with a job in flight polls it and downloads the CSV output once it has "
        "succeeded. Load generator, API, workers, PostgreSQL and Redis share the machine.",
        "",
    ]
    lines += markdown_table(
        ["dataset", "rows", "budget ρ", "share of submissions", "upload s"],
        [
            [
                d.label,
                f"{d.rows:,}",
                d.budget_rho,
                _share_text(config, d.label, report.datasets),
                f"{d.upload_seconds:.2f}",
            ]
            for d in report.datasets
        ],
        "lrrrr",
    )
    lines += ["", "### Latency per endpoint", ""]
    lines += [
        "Client-side, request sent → whole body read, in milliseconds (nearest-rank "
        "percentiles over all responses in the window). **409 budget**: refusals with the "
        "over-budget body, expected once the scarce dataset is spent; any 5xx or transport "
        "error is a failure. A warm-up before the window (one request of each kind, one job "
        "followed to its output, one burst of concurrent reads) is not counted; its first "
        "latencies, i.e. a freshly started API: "
        + (", ".join(f"`{k}` {v:.0f} ms" for k, v in report.warm_up_ms.items()) or "none")
        + ".",
        "",
    ]
    rows = []
    total_requests = 0
    for label in ENDPOINTS:
        stats = report.endpoints.get(label)
        if stats is None or stats.count == 0:
            continue
        total_requests += stats.count
        lat = [1000 * x for x in stats.latencies]
        rows.append(
            [
                f"`{label}`",
                f"{stats.count}",
                *_latency_cells(lat),
                f"{max(lat):.1f}" if lat else "—",
                f"{stats.ok}",
                f"{stats.budget_409}",
                _counter_text(stats.other_4xx),
                _counter_text(stats.server_5xx),
                _counter_text(stats.transport_errors),
            ]
        )
    lines += markdown_table(
        [
            "endpoint",
            "requests",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "2xx",
            "409 budget",
            "other 4xx",
            "5xx",
            "transport errors",
        ],
        rows,
        "lrrrrrrrrrr",
    )
    if report.window_seconds > 0:
        lines += [
            "",
            f"{total_requests} requests in {report.window_seconds:.1f} s "
            f"({total_requests / report.window_seconds:.0f} requests/s).",
        ]

    downloads = [
        [
            label,
            str(len(stats.latencies)),
            *_latency_cells([1000 * x for x in stats.latencies]),
            f"{statistics.median(stats.response_bytes) / 1024:,.0f}"
            if stats.response_bytes
            else "—",
        ]
        for label, stats in report.output_by_dataset.items()
        if stats.latencies
    ]
    if downloads:
        lines += ["", "`GET /v1/jobs/{id}/output` (CSV) by the job's table:", ""]
        lines += markdown_table(
            ["dataset", "downloads", "p50 ms", "p95 ms", "p99 ms", "median KiB"],
            downloads,
            "lrrrrr",
        )

    jobs = report.jobs
    if jobs:
        lines += ["", "### Jobs", ""]
        lines += [
            "From the job rows (exact timestamps), including the warm-up job on adult-sample. "
            "Times in seconds as p50 / p95 / max.",
            "",
        ]
        job_rows = []
        for label, info in jobs["per_dataset"].items():
            job_rows.append(
                [
                    label,
                    str(info["jobs"]),
                    ", ".join(f"{k}: {v}" for k, v in sorted(info["status"].items())) or "—",
                    str(info["retried"]),
                    _q_text(info["queue_wait"]),
                    _q_text(info["worker_time"]),
                    _q_text(info["output_rows"], ",.0f"),
                ]
            )
        lines += markdown_table(
            [
                "dataset",
                "jobs accepted",
                "final status",
                "attempts > 1",
                "queue wait s",
                "worker time s (succeeded)",
                "rows out",
            ],
            job_rows,
            "lrlrrrr",
        )
        lines += [
            "",
            f"- Jobs that succeeded inside the {report.window_seconds:.1f} s window: "
            f"**{jobs['succeeded_in_window']}**, i.e. "
            f"**{jobs['per_minute_per_worker']:.1f} jobs per minute per worker** "
            f"({config.workers} worker(s)).",
            f"- Share of the window with at least one job waiting in the queue: "
            f"{jobs['waiting_fraction']:.0%}; mean jobs running per worker: "
            f"{jobs['running_per_worker']:.2f}. Per busy worker-minute (those jobs over their "
            "worker time, `started_at` at the claim → `finished_at` at publication; Celery "
            "delivery and acknowledgement fall outside it, so this is an upper bound for a "
            f"worker that is never idle at this mix): {jobs['per_busy_worker_minute']:.1f} jobs.",
            f"- After the window: {'all jobs finished' if report.drained else 'NOT drained'} "
            f"within {report.drain_seconds:.1f} s; {jobs['succeeded_total']} jobs succeeded "
            "in all.",
        ]
    if report.cpu_seconds and report.window_seconds > 0:
        lines += ["", "CPU seconds used during the window (user + system, from /proc):", ""]
        lines += markdown_table(
            ["process", "CPU s", "share of one core"],
            [
                [name, f"{cpu:.1f}", f"{cpu / report.window_seconds:.0%}"]
                for name, cpu in report.cpu_seconds.items()
            ],
            "lrr",
        )
    if report.ledger:
        lines += ["", "### Ledger after the load", ""]
        lines += [
            "`tests.support.ledger.assert_reconciled` per dataset (ledger entries sum to the "
            "account), spent + reserved ≤ total, spent = Σ ρ of charged jobs, reserved = Σ ρ of "
            "live uncharged jobs; all exact decimal comparisons.",
            "",
        ]
        lines += markdown_table(
            [
                "dataset",
                "total ρ",
                "spent ρ",
                "reserved ρ",
                "charged jobs",
                "reconciles",
                "spent + reserved ≤ total",
                "spent = Σ charged",
                "reserved = Σ live",
            ],
            [
                [
                    e["dataset"],
                    e["total"],
                    e["spent"],
                    e["reserved"],
                    str(e["charged_jobs"]),
                    _yes(e["reconciled"]),
                    _yes(e["within_total"]),
                    _yes(e["spent_equals_charged_jobs"]),
                    _yes(e["reserved_equals_live_jobs"]),
                ]
                for e in report.ledger
            ],
            "lrrrrllll",
        )
    lines += [
        "",
        "Problems in the stack's logs: "
        + (", ".join(f"{k}: {v}" for k, v in report.log_problems.items()) or "none")
        + ".",
    ]
    if report.failures:
        lines += ["", "### Load failures", ""]
        lines += [f"- {f}" for f in _dedupe(report.failures)]
    lines += ["", f"Load benchmark wall time (stack start to destroy): {report.seconds:.0f} s.", ""]
    return "\n".join(lines)


def _latency_cells(latencies_ms: Sequence[float]) -> list[str]:
    if not latencies_ms:
        return ["—"] * 3
    return [f"{percentile(latencies_ms, q):.1f}" for q in (50, 95, 99)]


def _share_text(config: LoadConfig, label: str, datasets: list[DatasetInfo]) -> str:
    has_full = any(d.label == "adult-full" for d in datasets)
    shares = {
        "scarce": config.scarce_share,
        "adult-full": config.full_table_share if has_full else 0.0,
    }
    shares["adult-sample"] = 1.0 - shares["scarce"] - shares["adult-full"]
    return f"{shares.get(label, 0.0):.0%}"


def _yes(value: bool) -> str:
    return "yes" if value else "**NO**"


def _dedupe(items: Sequence[str]) -> list[str]:
    counts = Counter(items)
    return [f"{item} (×{n})" if n > 1 else item for item, n in counts.items()]


def report_to_json(report: LoadReport) -> dict[str, Any]:
    data = asdict(report)
    for label, stats in report.endpoints.items():
        lat = stats.latencies
        data["endpoints"][label]["latency_summary"] = {
            "n": len(lat),
            "p50": percentile(lat, 50) if lat else None,
            "p95": percentile(lat, 95) if lat else None,
            "p99": percentile(lat, 99) if lat else None,
            "mean": statistics.fmean(lat) if lat else None,
        }
    return data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="for the full adult table")
    parser.add_argument("--quick", action="store_true", help="8 users for 10 s")
    parser.add_argument("--users", type=int, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    config = LoadConfig.quick() if args.quick else LoadConfig()
    overrides = {
        k: v
        for k, v in (
            ("users", args.users),
            ("duration_seconds", args.duration),
            ("workers", args.workers),
        )
        if v is not None
    }
    if overrides:
        config = LoadConfig(**{**asdict(config), **overrides})
    report = run_load(
        config,
        data_dir=args.data.resolve() if args.data else None,
        progress=lambda message: print(f"[load] {message}", file=sys.stderr, flush=True),
        keep_workdir=args.keep_workdir,
    )
    if args.json:
        args.json.write_text(json.dumps(report_to_json(report), indent=1, default=str))
    print(render_markdown(report))
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
