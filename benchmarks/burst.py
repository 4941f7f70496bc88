"""Simultaneous requests, released together by a barrier, against a real rhosynth.

Issue 11's burst targets, measured the way a real burst arrives: every client thread has its own
HTTP client and waits at a ``threading.Barrier``; all of them connect and send at the same instant
(httpx opens the connection on the first request, so each response's time includes its connect).

* **Submissions.** ``n`` job submissions against a dataset whose budget fits exactly ``fit`` of
  them. Each client behaves as a well-written one: its own ``Idempotency-Key``, and on ``503`` it
  waits ``Retry-After`` and sends the same request again (safe because of the key). Recorded per
  client: the final status, the time of every response, and the number of 503s.
* **Reads.** ``n`` simultaneous ``GET /v1/jobs/{id}`` of one job.
* **Health.** While a burst runs, a probe thread calls ``GET /healthz`` every 100 ms and records
  each answer's latency (a probe that gets no answer within its timeout counts as one).
* **Open transactions** (PostgreSQL only). While a burst runs, a probe thread reads
  ``pg_stat_activity`` of the service's database every 50 ms and records the longest time any
  session had been ``idle in transaction``: a transaction left open while its request waits for
  something other than the database (a thread, the broker) shows up there.

Run alone (repository root; ``tests`` must be importable):
``python -m benchmarks.burst [--mode production|embedded|both] [--n 200] [--fit 20]
[--update docs/benchmarks.md]``. ``--update`` replaces the file's burst section (between
:data:`BEGIN` and :data:`END`; appended if absent) with this run's figures and command;
``benchmarks.run`` writes the same section in a full run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

from benchmarks.sections import git_commit

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
CLIENT_TIMEOUT = 60.0
MAX_RETRIES = 50


@dataclass
class ClientOutcome:
    """What one client of a burst saw: its final status and every response's latency."""

    status: int
    latencies: list[float]
    retries: int = 0
    error: str | None = None


@dataclass
class BurstReport:
    label: str
    outcomes: list[ClientOutcome]
    wall_seconds: float
    health_latencies: list[float] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    max_idle_in_transaction: float | None = None

    @property
    def statuses(self) -> Counter[int]:
        return Counter(o.status for o in self.outcomes)

    @property
    def latencies(self) -> list[float]:
        return [t for o in self.outcomes for t in o.latencies]

    @property
    def max_latency(self) -> float:
        return max(self.latencies, default=0.0)

    @property
    def retries(self) -> int:
        return sum(o.retries for o in self.outcomes)

    @property
    def errors(self) -> list[str]:
        return [o.error for o in self.outcomes if o.error]

    def quantile(self, q: float) -> float:
        return percentile(self.latencies, q)

    def summary(self) -> str:
        health = (
            f"; /healthz max {max(self.health_latencies):.3f} s over {len(self.health_latencies)}"
            f" probes, {len(self.health_failures)} failed"
            if self.health_latencies
            else ""
        )
        if self.max_idle_in_transaction is not None:
            health += f"; longest idle-in-transaction {self.max_idle_in_transaction:.3f} s"
        statuses = dict(sorted(self.statuses.items()))
        return (
            f"{self.label}: {len(self.outcomes)} clients, statuses {statuses}, "
            f"503 retries {self.retries}, latency p50 {self.quantile(50):.3f} s, "
            f"p99 {self.quantile(99):.3f} s, max {self.max_latency:.3f} s, "
            f"wall {self.wall_seconds:.2f} s{health}"
        )


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


class HealthProbe:
    """Calls /healthz every ``interval`` seconds from its own thread; records each latency."""

    def __init__(self, base_url: str, interval: float = 0.1, timeout: float = 10.0) -> None:
        self._url = f"{base_url}/healthz"
        self._interval = interval
        self._timeout = timeout
        self._stop = threading.Event()
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, name="health-probe", daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._timeout + 5)

    def _run(self) -> None:
        with httpx.Client(timeout=self._timeout) as client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    response = client.get(self._url)
                    if response.status_code != 200:
                        self.failures.append(f"status {response.status_code}")
                except httpx.HTTPError as error:
                    self.failures.append(type(error).__name__)
                self.latencies.append(time.perf_counter() - started)
                self._stop.wait(self._interval)


class IdleTransactionProbe:
    """Samples ``pg_stat_activity`` of one database; keeps the longest ``idle in transaction``."""

    def __init__(self, admin_url: str, database: str, interval: float = 0.05) -> None:
        self._admin_url = admin_url
        self._database = database
        self._interval = interval
        self._stop = threading.Event()
        self.longest = 0.0
        self._thread = threading.Thread(target=self._run, name="idle-tx-probe", daemon=True)

    def __enter__(self) -> IdleTransactionProbe:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self._admin_url, autocommit=True) as connection:
            while not self._stop.is_set():
                row = connection.execute(
                    "SELECT coalesce(max(extract(epoch FROM now() - state_change)), 0) "
                    "FROM pg_stat_activity WHERE datname = %s AND state = 'idle in transaction'",
                    (self._database,),
                ).fetchone()
                self.longest = max(self.longest, float(row[0]) if row else 0.0)
                self._stop.wait(self._interval)


def _burst(
    label: str,
    n: int,
    base_url: str,
    token: str,
    request: Callable[[httpx.Client, int], httpx.Response],
    *,
    retry_503: bool,
) -> BurstReport:
    barrier = threading.Barrier(n + 1)
    outcomes: list[ClientOutcome | None] = [None] * n

    def client_thread(i: int) -> None:
        latencies: list[float] = []
        retries = 0
        with httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}"},
            timeout=CLIENT_TIMEOUT,
        ) as client:
            barrier.wait()
            try:
                while True:
                    started = time.perf_counter()
                    response = request(client, i)
                    latencies.append(time.perf_counter() - started)
                    if response.status_code == 503 and retry_503 and retries < MAX_RETRIES:
                        retries += 1
                        time.sleep(float(response.headers.get("Retry-After", "1")))
                        continue
                    outcomes[i] = ClientOutcome(response.status_code, latencies, retries)
                    return
            except httpx.HTTPError as error:
                latencies.append(time.perf_counter() - started)
                outcomes[i] = ClientOutcome(0, latencies, retries, type(error).__name__)

    threads = [threading.Thread(target=client_thread, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    return BurstReport(label, [o for o in outcomes if o is not None], wall)


def submission_burst(
    base_url: str, token: str, dataset_id: str, *, n: int, rho: str, method: str = "independent"
) -> BurstReport:
    """``n`` simultaneous job submissions, each with its own Idempotency-Key, 503s retried."""
    tag = uuid.uuid4().hex

    def submit(client: httpx.Client, i: int) -> httpx.Response:
        return client.post(
            f"/v1/datasets/{dataset_id}/jobs",
            json={"method": method, "budget": {"rho": rho}, "rows": 100},
            headers={"Idempotency-Key": f"burst-{tag}-{i}"},
        )

    return _burst("submissions", n, base_url, token, submit, retry_503=True)


def read_burst(base_url: str, token: str, job_id: str, *, n: int) -> BurstReport:
    """``n`` simultaneous reads of one job (no retries: a 503 counts as it is)."""

    def read(client: httpx.Client, _i: int) -> httpx.Response:
        return client.get(f"/v1/jobs/{job_id}")

    return _burst("reads", n, base_url, token, read, retry_503=False)


def upload_people(base_url: str, owner_key: str, budget_rho: str) -> str:
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {owner_key}"}, timeout=60
    ) as client:
        response = client.post(
            "/v1/datasets",
            files={"file": ("people.csv", (FIXTURES / "people.csv").read_bytes(), "text/csv")},
            data={
                "schema": (FIXTURES / "people-schema.json").read_text(),
                "name": "burst",
                "budget_rho": budget_rho,
            },
        )
    response.raise_for_status()
    return str(response.json()["id"])


@dataclass
class Service:
    """A running rhosynth to burst: its URL, an owner and an analyst key of one tenant, and (on
    PostgreSQL) what the open-transaction probe needs."""

    base_url: str
    owner_key: str
    analyst_key: str
    admin_url: str | None = None
    database: str | None = None
    api_pid: int | None = None  # the one API process (production); None: several (embedded)

    def idle_probe(self) -> contextlib.AbstractContextManager[IdleTransactionProbe | None]:
        if self.admin_url is None or self.database is None:
            return contextlib.nullcontext()
        return IdleTransactionProbe(self.admin_url, self.database)


@dataclass
class BurstRun:
    mode: str
    submissions: BurstReport
    reads: BurstReport
    budget: dict[str, str]
    cores: int | None
    cpu_per_read_ms: float | None = None


SEQUENTIAL_READS = 1000


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_read(service: Service, job_id: str, n: int = SEQUENTIAL_READS) -> float | None:
    """The API process's CPU per ``GET /v1/jobs/{id}``, in ms: ``n`` reads one after the other
    on one keep-alive connection, the process's CPU time before and after (None without one API
    process to measure). The workers run meanwhile, so this is an upper bound."""
    if service.api_pid is None:
        return None
    with httpx.Client(
        base_url=service.base_url,
        headers={"Authorization": f"Bearer {service.analyst_key}"},
        timeout=60,
    ) as client:
        client.get(f"/v1/jobs/{job_id}").raise_for_status()  # connect, warm
        before = _cpu_seconds(service.api_pid)
        for _ in range(n):
            client.get(f"/v1/jobs/{job_id}").raise_for_status()
        after = _cpu_seconds(service.api_pid)
    return (after - before) / n * 1000


def _probed(service: Service, burst: Callable[[], BurstReport]) -> BurstReport:
    with HealthProbe(service.base_url) as health, service.idle_probe() as idle:
        report = burst()
    report.health_latencies = health.latencies
    report.health_failures = health.failures
    report.max_idle_in_transaction = None if idle is None else idle.longest
    return report


def run_bursts(service: Service, *, n: int, fit: int) -> BurstRun:
    """Upload a dataset with a budget for ``fit`` jobs, then the submission and read bursts,
    each with the health (and open-transaction) probes running alongside."""
    rho = "0.05"
    base, analyst = service.base_url, service.analyst_key
    dataset_id = upload_people(base, service.owner_key, str(round(0.05 * fit, 12)))
    submissions = _probed(
        service, lambda: submission_burst(base, analyst, dataset_id, n=n, rho=rho)
    )
    with httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {analyst}"}, timeout=60
    ) as client:
        jobs = client.get(f"/v1/datasets/{dataset_id}/jobs").json()["items"]
        budget = client.get(f"/v1/datasets/{dataset_id}").json()["budget"]
    reads = _probed(service, lambda: read_burst(base, analyst, jobs[0]["id"], n=n))
    cpu = cpu_per_read(service, jobs[0]["id"])
    return BurstRun("", submissions, reads, budget, len(os.sched_getaffinity(0)), cpu)


@contextlib.contextmanager
def production_service(workdir: Path, **overrides: object) -> Iterator[Service]:
    """A production-mode stack: PostgreSQL, Redis, uvicorn and one Celery worker."""
    from benchmarks.service_load import PRODUCTION_TIMINGS
    from tests.support import services
    from tests.support.stack import Stack

    services.ensure_services()
    stack = Stack.create("burst", workdir, workers=1, **{**PRODUCTION_TIMINGS, **overrides})
    try:
        tenant = f"burst-{uuid.uuid4().hex[:8]}"
        yield Service(
            stack.base_url,
            stack.create_key(tenant, "owner"),
            stack.create_key(tenant, "analyst"),
            admin_url=services.POSTGRES_URL,
            database=stack.database,
            api_pid=stack.server.pid if stack.server is not None else None,
        )
    finally:
        stack.destroy()


@contextlib.contextmanager
def embedded_service(workdir: Path, **overrides: object) -> Iterator[Service]:
    """``rhosynth run``: SQLite, kombu's SQLAlchemy broker and one worker, as ``make run``."""
    from tests.support.stack import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RHOSYNTH_")}
    env.update({"RHOSYNTH_HOME": str(workdir), "RHOSYNTH_PORT": str(port), "PYTHONUNBUFFERED": "1"})
    env.update({f"RHOSYNTH_{k.upper()}": str(v) for k, v in overrides.items()})
    log = open(workdir / "run.log", "wb")  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "run"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((workdir / "run.log").read_text()[-4000:])
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.2)
        keys = []
        for role in ("owner", "analyst"):
            command = ["keys", "create", "--tenant", "burst", "--role", role, "--name", role]
            result = subprocess.run(  # noqa: S603 - our own CLI, fixed arguments
                [sys.executable, "-m", "app.cli", *command],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            keys.append(result.stdout.strip().splitlines()[-1])
        yield Service(base, keys[0], keys[1])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        log.close()


SERVICES = {"production": production_service, "embedded": embedded_service}


def run_mode(mode: str, *, n: int, fit: int, **overrides: object) -> BurstRun:
    with (
        tempfile.TemporaryDirectory(prefix=f"rhosynth-burst-{mode}-") as tmp,
        SERVICES[mode](Path(tmp), **overrides) as service,
    ):
        run = run_bursts(service, n=n, fit=fit)
        run.mode = mode
        return run


BEGIN = "<!-- burst:begin (benchmarks/burst.py) -->"
END = "<!-- burst:end -->"


def _row(run: BurstRun, report: BurstReport) -> str:
    statuses = ", ".join(
        f"{count} × {code or 'no answer'}" for code, count in sorted(report.statuses.items())
    )
    health = max(report.health_latencies, default=float("nan"))
    idle = (
        "n/a (SQLite)"
        if report.max_idle_in_transaction is None
        else f"{report.max_idle_in_transaction:.3f}"
    )
    return (
        f"| {run.mode} | {report.label} | {statuses} | {report.retries} | "
        f"{report.quantile(50):.3f} | {report.quantile(99):.3f} | {report.max_latency:.3f} | "
        f"{health:.3f} ({len(report.health_latencies)} probes, "
        f"{len(report.health_failures)} failed) | {idle} |"
    )


def render_markdown(
    runs: list[BurstRun], command: str, started: datetime, load: tuple[float, float, float]
) -> str:
    """The burst section of docs/benchmarks.md, with its own command, date and machine."""
    lines = [
        BEGIN,
        "## Bursts of simultaneous requests (issue 11)",
        "",
        f"Measured by `{command}` (from the repository root) on "
        f"{started.strftime('%Y-%m-%d %H:%M UTC')}, commit `{git_commit(length=7)}`, "
        f"{os.cpu_count()} logical CPUs ({len(os.sched_getaffinity(0))} usable), "
        f"{platform.python_implementation()} {platform.python_version()}; load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}. `make test` runs the same bursts as "
        "`tests/workers/test_burst.py` (marker `load`) and asserts their behaviour and bounds "
        "that catch a stall on any machine (every response within 10 s, `/healthz` within "
        "5 s); the latency targets below are timings, met or not on the machine of this run.",
        "",
        "Every client thread has its own HTTP client and waits at a barrier; all are released "
        "at once, and each opens its TCP connection then (httpx connects on the first "
        "request). *submissions*: a dataset whose budget fits exactly the accepted count, each "
        "client with its own Idempotency-Key, retrying after a 503 as `Retry-After` says. "
        "*reads*: `GET /v1/jobs/{id}` of one job. Latencies are per response, in seconds, "
        "client side. A probe calls `/healthz` every 100 ms during each burst; on PostgreSQL "
        "another samples `pg_stat_activity` every 50 ms for the longest `idle in transaction`.",
        "",
        "| mode | burst | final statuses | 503 retries | p50 | p99 | max | /healthz max | "
        "longest idle in transaction |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for run in runs:
        lines.append(_row(run, run.submissions))
        lines.append(_row(run, run.reads))
    lines += [
        "",
        "Targets (issue 11, on 2 cores, both modes): 200 submissions against a budget for 20 → "
        "exactly 20 × 202 and 180 × 409, every response within 10 s; 200 reads with p99 below "
        "1 s (issue 24 §4; issue 11 asked for 2 s); "
        "`/healthz` within 1 s throughout; no transaction open while a request waits for "
        "anything but the database. Before the fix (the review's figures) 200 submissions gave "
        "5 × 202, 24 × 503 and 171 client timeouts at 90 s, and `/healthz` stopped answering for "
        "about 4.5 minutes.",
        "",
        *_verdicts(runs),
        *[
            f"* {run.mode}: the API process's CPU per read, {SEQUENTIAL_READS:,} sequential "
            f"reads on one keep-alive connection after the bursts (the workers still running "
            f"the queued jobs): {run.cpu_per_read_ms:.2f} ms."
            for run in runs
            if run.cpu_per_read_ms is not None
        ],
        END,
    ]
    return "\n".join(lines) + "\n"


def _verdicts(runs: list[BurstRun]) -> list[str]:
    """Whether this run met each latency target of the issue, per mode."""
    lines = []
    for run in runs:
        probes = [*run.submissions.health_latencies, *run.reads.health_latencies]
        failed = run.submissions.health_failures or run.reads.health_failures
        checks = [
            (
                "every response within 10 s",
                max(run.submissions.max_latency, run.reads.max_latency),
                10.0,
            ),
            ("reads p99 < 1 s (issue 24 §4)", run.reads.quantile(99), 1.0),
            # No probe, or a probe that failed, is not a health answer within the bound.
            ("`/healthz` within 1 s", max(probes) if probes and not failed else math.inf, 1.0),
        ]
        said = "; ".join(
            f"{name}: {value:.3f} s, {'met' if value <= bound else 'NOT met'}"
            for name, value, bound in checks
        )
        lines.append(f"* {run.mode}: {said}.")
    return lines


def update_section(path: Path, section: str) -> None:
    """Replace the burst section of ``path`` (or append it)."""
    text = path.read_text() if path.exists() else ""
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section.rstrip("\n") + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mode", choices=["production", "embedded", "both"], default="both")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--fit", type=int, default=20)
    parser.add_argument("--api-threads", type=int, default=None, help="RHOSYNTH_API_THREADS")
    parser.add_argument(
        "--polled-read",
        choices=["on", "off"],
        default="on",
        help="RHOSYNTH_POLLED_JOB_READ: job reads answered below the framework (on, the "
        "default) or by the FastAPI route (off), for before/after runs",
    )
    parser.add_argument("--update", type=Path, default=None, help="e.g. docs/benchmarks.md")
    args = parser.parse_args(argv)
    raw = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "benchmarks.burst", *raw])
    started, load = datetime.now(UTC), os.getloadavg()
    modes = ["production", "embedded"] if args.mode == "both" else [args.mode]
    overrides: dict[str, object] = {"polled_job_read": args.polled_read == "on"}
    if args.api_threads is not None:
        overrides["api_threads"] = args.api_threads
    runs = []
    for mode in modes:
        run = run_mode(mode, n=args.n, fit=args.fit, **overrides)
        runs.append(run)
        print(f"[{mode}] {run.submissions.summary()}")
        print(f"[{mode}] {run.reads.summary()}")
        print(f"[{mode}] budget after: {run.budget}; cores {run.cores}")
        if run.cpu_per_read_ms is not None:
            print(f"[{mode}] API CPU per read: {run.cpu_per_read_ms:.2f} ms")
        if run.submissions.errors or run.reads.errors:
            print(f"[{mode}] client errors: {Counter(run.submissions.errors + run.reads.errors)}")
    if args.update is not None:
        update_section(args.update, render_markdown(runs, command, started, load))
        print(f"updated {args.update}")


if __name__ == "__main__":
    main()
