"""Scale: adult stacked ×k (up to ×205, 10 M rows) through the CLI, the service and mbi 2.0.

For each ``k`` in ``--times``, adult.csv is tiled ``k`` times into one CSV (the domain is kept:
every column stays integer codes ``0..size-1``). Then, per method (``mst``, ``aim``), phases:

* ``cli``: ``rhosynth synthesize`` in a child process (ε = 1, δ = 1e-9), wall time and peak RSS
  (``ru_maxrss`` of the child from ``wait4``); rows out = the default (the noisy estimate of
  the input's rows) and, for ``k`` in ``--fixed-rows-at``, also 48,842 rows;
* ``service``: a real API process (uvicorn) and a real Celery worker process on a PostgreSQL
  test database, Redis DB from ``RHOSYNTH_TEST_REDIS_URL`` and a local storage directory, with
  the service's default settings (not the test stack's small limits; ``--setting NAME=VALUE``
  overrides one, and such runs are kept under their own keys). Upload once per ``k`` (wall, the
  API's CPU time and peak RSS), then per method and rows: submit a job, poll it as the owner
  (the time each progress stage was first seen), take the wall and the worker's CPU time from
  submission to the end, wait up to ``--owner-wait`` seconds for the owner-tier report the
  worker builds after publication (then restart the worker so the next job does not queue
  behind it), download the CSV (wall, bytes, the API's peak RSS). A job still running after
  ``--job-cap`` seconds is cancelled and reported as not finished;
* ``mbi``: the reference runners (/work/shared/bench/peers/run_mbi2_*.py) on the same file in
  their own virtualenv (``--peers``), same ε and δ, wall, CPU time and peak RSS; a run is
  stopped at ``--peer-cap`` seconds and reported as "did not finish" (``--cli-cap`` does the
  same for the CLI).

Peak memory of the API and the worker: each phase first resets VmHWM (``echo 5 >
/proc/PID/clear_refs``) of every process of the group and at the end takes the largest VmHWM
of the group; a sampler thread also records the largest sum of VmRSS over the group every
0.2 s (the worker's job runs in a pool child process, so both are over the process group).
CPU time (user + system from /proc/PID/stat, or ``wait4`` for children) is the steadier figure
on a shared machine.

Quality: the mean 3-way TVD of /work/shared/bench/marginal_error.py between adult.csv and (a
uniform sample of at most ``--eval-rows`` rows of) each output. adult ×k has exactly adult's
normalised marginals, so comparing with adult.csv is the same as comparing with the ×k table.

Results go to ``--json`` after every phase (a phase already there is skipped unless ``--force``;
``--only`` selects phases), and the section "Scale: adult ×1 to ×205 (issue 15 §4)" of
``--out`` is rewritten from all results in the JSON.

    python -m benchmarks.scale --data ../shared/data --times 1 10 40 205 --methods mst aim \\
        --peers /work/peers/mbi/bin/python --out docs/benchmarks.md --json docs/scale.json
    python -m benchmarks.scale ... --only k=205 method=aim phase=service --force
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.sections import markdown_table, replace_section

HEADING = "## Scale: adult ×1 to ×205 (issue 15 §4)"
REPO = Path(__file__).resolve().parents[1]
ADULT_ROWS = 48_842
EPSILON, DELTA = "1", "1e-9"
PHASES = ("cli", "upload", "service", "mbi")
TARGETS = {
    "upload_seconds": 60.0,
    "api_peak_mb": 600.0,
    "mst_job_seconds": 60.0,
    "aim_job_seconds": 300.0,
    "worker_peak_mb": 4096.0,
}
MIB = 1024 * 1024


# ------------------------------------------------------------------------------------------
# Pure parts (tested in tests/benchmarks/test_scale.py)


def tile_csv(source: Path, times: int, target: Path) -> int:
    """Write ``source`` (a CSV with a header row) ``times`` times over into ``target``, with one
    header row; return the data rows written. Byte-level: values are copied, never re-typed."""
    if times < 1:
        raise ValueError("times must be at least 1")
    text = source.read_bytes()
    header, _, body = text.partition(b"\n")
    if body and not body.endswith(b"\n"):
        body += b"\n"
    rows = body.count(b"\n")
    temp = target.with_name(target.name + ".part")
    with open(temp, "wb") as handle:
        handle.write(header + b"\n")
        for _ in range(times):
            handle.write(body)
    temp.replace(target)
    return rows * times


def phase_key(k: int, method: str | None, phase: str, rows: int | None = None) -> str:
    """The key of one phase's result in the JSON, such as
    ``k=205/method=aim/phase=service/rows=default``."""
    parts = [f"k={k}"]
    if method is not None:
        parts.append(f"method={method}")
    parts.append(f"phase={phase}")
    if rows is not None or phase in ("cli", "service"):
        parts.append(f"rows={'default' if rows is None else rows}")
    return "/".join(parts)


def parse_only(items: Sequence[str]) -> dict[str, set[str]]:
    """``["k=205", "method=aim", "phase=service,mbi"]`` as ``{"k": {"205"}, ...}``."""
    selected: dict[str, set[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or name not in ("k", "method", "phase", "rows"):
            raise ValueError(f"--only takes k=, method=, phase=, rows=; got {item!r}")
        selected.setdefault(name, set()).update(v for v in values.split(",") if v)
    return selected


def selected(key: str, only: dict[str, set[str]]) -> bool:
    """Whether the phase ``key`` matches every clause of ``only`` (a clause that names a field
    the key lacks, such as ``method`` for an upload, does not exclude it)."""
    fields = dict(part.split("=", 1) for part in key.split("/"))
    return all(name not in fields or fields[name] in values for name, values in only.items())


def ratio(ours: float | None, reference: float | None) -> str:
    """``ours / reference`` as text (``"0.42×"``), or ``"–"`` when either is missing."""
    if ours is None or reference is None or reference <= 0:
        return "–"
    return f"{ours / reference:.2f}×"


def fmt_seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.1f} s" if value < 600 else f"{value / 60:.1f} min"


def fmt_mb(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} MB"


def _unfinished(run: dict[str, Any]) -> str:
    if run.get("killed_at_cap"):
        return f"did not finish in {fmt_seconds(run.get('cap_seconds'))}"
    return f"failed (exit {run.get('returncode')})"


def job_status(job: dict[str, Any]) -> str:
    """How a service job ended: its status, or "did not finish in …" at the benchmark's cap."""
    if job.get("not_finished_in") is not None:
        return f"did not finish in {fmt_seconds(job['not_finished_in'])}"
    if job.get("status") == "failed" and "memory" in str(job.get("error")):
        return "failed: memory limit"
    return str(job.get("status"))


def verdict(value: float | None, target: float) -> str:
    if value is None:
        return "–"
    return "met" if value <= target else "**not met**"


def ratio_rows(
    results: dict[str, Any], times: Sequence[int], methods: Sequence[str]
) -> list[list[str]]:
    """One row per (k, method): ours (CLI, service job) against mbi 2.0 on the same file; each
    cell is wall (CPU), peak; each ratio is ours / mbi for wall, CPU and peak memory."""
    rows = []
    for k in times:
        for method in methods:
            cli = results.get(phase_key(k, method, "cli"))
            job = succeeded_job(results, phase_key(k, method, "service"))
            mbi = results.get(phase_key(k, method, "mbi"))
            if not (cli or job or mbi):
                continue
            done = bool(mbi and mbi.get("finished"))
            ref = _figures(mbi, "wall_seconds", "cpu_seconds", "peak_mb") if done else None
            ours_cli = _figures(cli, "wall_seconds", "cpu_seconds", "peak_mb")
            ours_job = _figures(job, "job_seconds", "job_cpu_seconds", "worker_peak_mb")
            if mbi and not done:
                mbi_text = f"did not finish in {fmt_seconds(mbi.get('cap_seconds'))}"
            else:
                mbi_text = _cell(ref)
            rows.append(
                [
                    f"×{k}",
                    method,
                    _cell(ours_cli),
                    _cell(ours_job) + _settings_mark(job),
                    mbi_text,
                    _ratios(ours_cli, ref),
                    _ratios(ours_job, ref),
                    _tvd_text(cli, job, mbi),
                ]
            )
    return rows


Figures = tuple[float | None, float | None, float | None]


def _figures(phase: dict[str, Any] | None, *fields: str) -> Figures | None:
    if not phase:
        return None
    wall, cpu, peak = (phase.get(field) for field in fields)
    return wall, cpu, peak


def _cell(figures: Figures | None) -> str:
    wall, cpu, peak = figures or (None, None, None)
    return f"{fmt_seconds(wall)} ({fmt_seconds(cpu)} CPU), {fmt_mb(peak)}"


def _ratios(ours: Figures | None, reference: Figures | None) -> str:
    a = ours or (None, None, None)
    b = reference or (None, None, None)
    return " / ".join(ratio(x, y) for x, y in zip(a, b, strict=True))


def _settings_mark(job: dict[str, Any] | None) -> str:
    if not job or not job.get("settings"):
        return ""
    return " (" + ", ".join(f"{k} = {v}" for k, v in sorted(job["settings"].items())) + ")"


def succeeded_job(results: dict[str, Any], base: str) -> dict[str, Any] | None:
    """The service job under ``base`` (default settings) if it succeeded, else one with other
    settings that did (its ``settings`` say which), else the default one."""
    default = results.get(base)
    if default and default.get("status") == "succeeded":
        return dict(default)
    for key in sorted(results):
        if key.startswith(base + "/") and results[key].get("status") == "succeeded":
            return dict(results[key])
    return default


def _tvd_text(*phases: dict[str, Any] | None) -> str:
    values = []
    for phase in phases:
        tvd = phase.get("tvd3") if phase else None
        values.append("–" if tvd is None else f"{tvd:.3f}")
    return " / ".join(values)


# ------------------------------------------------------------------------------------------
# Machine, memory


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    total_mb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                total_mb = int(line.split()[1]) / 1024
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "ram_mb": total_mb,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def group_pids(pgid: int) -> list[int]:
    """The live processes of process group ``pgid`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 5 (after the parenthesised command, which may hold spaces) is the pgrp.
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids


def group_cpu_seconds(pgid: int) -> float:
    """CPU time (user + system) used so far by the live processes of group ``pgid``."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in group_pids(pgid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / ticks


def status_kib(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class GroupMemory:
    """Peak memory of a process group over one phase: the largest VmHWM of its processes
    (reset at the start with clear_refs) and the largest sampled sum of their VmRSS."""

    def __init__(self, pgid: int, interval: float = 0.2) -> None:
        self.pgid = pgid
        self.interval = interval
        self.peak_sum_kib = 0
        self.hwm_reset = True
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.cpu_seconds = 0.0

    def __enter__(self) -> GroupMemory:
        self.cpu_seconds = -group_cpu_seconds(self.pgid)
        for pid in group_pids(self.pgid):
            try:
                with open(f"/proc/{pid}/clear_refs", "w") as handle:
                    handle.write("5")
            except OSError:
                self.hwm_reset = False
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample_once()
        self.cpu_seconds += group_cpu_seconds(self.pgid)

    def _sample_once(self) -> None:
        total = sum(status_kib(pid, "VmRSS") or 0 for pid in group_pids(self.pgid))
        self.peak_sum_kib = max(self.peak_sum_kib, total)

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample_once()

    def hwm_kib(self) -> int:
        return max((status_kib(pid, "VmHWM") or 0 for pid in group_pids(self.pgid)), default=0)

    def summary(self, prefix: str) -> dict[str, Any]:
        return {
            f"{prefix}_peak_mb": self.hwm_kib() / 1024,
            f"{prefix}_sampled_sum_mb": self.peak_sum_kib / 1024,
            f"{prefix}_hwm_reset": self.hwm_reset,
            f"{prefix}_cpu_seconds": self.cpu_seconds,
        }


def run_child(
    argv: Sequence[str], *, cap: float | None = None, log: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``argv``; wall time, peak RSS, exit status; killed after ``cap`` seconds.

    The peak is the child's VmHWM, read from /proc every 0.1 s until it exits (VmHWM only
    rises, so only the last 0.1 s can be missed). ``ru_maxrss`` from ``wait4`` is not used for
    it: Linux carries a process's maxrss across exec, so a child forked from this driver after
    it had evaluated a 10 M-row output reported the driver's 2.2 GB (kept as ``ru_maxrss_mb``).
    """
    started = time.perf_counter()
    with open(log, "wb") as out:
        process = subprocess.Popen(  # noqa: S603 - our own commands, no shell
            list(argv), stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env,
            start_new_session=True,
        )  # fmt: skip
        timer = None
        killed = threading.Event()
        if cap is not None:

            def stop() -> None:
                killed.set()
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, 9)

            timer = threading.Timer(cap, stop)
            timer.start()
        peak_kib = [0]
        done = threading.Event()

        def watch() -> None:
            status_path = Path(f"/proc/{process.pid}/status")
            while not done.is_set():
                with contextlib.suppress(OSError, ValueError):
                    for line in status_path.read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            peak_kib[0] = max(peak_kib[0], int(line.split()[1]))
                done.wait(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        # The child stays a zombie (its /proc entry readable) until wait4 reaps it.
        with contextlib.suppress(ChildProcessError):
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        done.set()
        watcher.join()
        _pid, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if timer is not None:
            timer.cancel()
    return {
        "wall_seconds": time.perf_counter() - started,
        "peak_mb": (peak_kib[0] or usage.ru_maxrss) / 1024,
        "ru_maxrss_mb": usage.ru_maxrss / 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "returncode": process.returncode,
        "finished": process.returncode == 0 and not killed.is_set(),
        "killed_at_cap": killed.is_set(),
        "cap_seconds": cap,
        "log": str(log),
    }


def count_rows(csv_path: Path) -> int:
    with open(csv_path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(MIB), b"")) - 1


def tvd3(real: Path, synth: Path, domain: Path, eval_rows: int, work: Path) -> dict[str, Any]:
    """Mean 3-way TVD (marginal_error.py) of ``synth`` (a sample of ``eval_rows`` rows if it has
    more) against adult.csv."""
    import pandas as pd

    sys.path.insert(0, str(Path(os.environ["RHOSYNTH_BENCH_SHARED"]) / "bench"))
    from marginal_error import marginal_errors  # type: ignore[import-not-found]

    rows = count_rows(synth)
    target = synth
    if rows > eval_rows:
        frame = pd.read_csv(synth, usecols=list(json.loads(domain.read_text())))
        frame = frame.sample(n=eval_rows, random_state=0)
        target = work / f"{synth.stem}-sample.csv"
        frame.to_csv(target, index=False)
        del frame
    result = marginal_errors(str(real), str(target), str(domain), 3)
    if target != synth:
        target.unlink()
    means = {int(k): float(v["mean_tvd"]) for k, v in result["ways"].items()}
    return {"tvd3": means.get(3), "tvd_by_way": means, "eval_rows": min(rows, eval_rows)}


# ------------------------------------------------------------------------------------------
# The runs


@dataclass
class Config:
    data: Path
    times: list[int]
    methods: list[str]
    fixed_rows_at: list[int]
    peers: str | None
    peer_cap: float
    owner_wait: float
    job_cap: float
    cli_cap: float | None
    eval_rows: int
    work: Path
    json_path: Path
    out: Path | None
    only: dict[str, set[str]]
    force: bool
    skip_eval: bool
    settings: dict[str, str]


class Runner:
    def __init__(self, config: Config) -> None:
        self.c = config
        self.results: dict[str, Any] = {}
        self.recorded: set[str] = set()
        if config.json_path.exists():
            self.results = json.loads(config.json_path.read_text()).get("results", {})
        self.adult = config.data / "adult" / "adult.csv"
        self.domain = config.data / "adult" / "adult-domain.json"
        self.shared = config.data.resolve().parent
        os.environ["RHOSYNTH_BENCH_SHARED"] = str(self.shared)

    # -- bookkeeping
    @property
    def suffix(self) -> str:
        """Runs with settings other than the defaults are kept under their own keys."""
        if not self.c.settings:
            return ""
        return "/settings=" + ",".join(f"{k}:{v}" for k, v in sorted(self.c.settings.items()))

    def wanted(self, key: str) -> bool:
        if not selected(key, self.c.only):
            return False
        return self.c.force or key + self.suffix not in self.results

    def record(self, key: str, value: dict[str, Any]) -> None:
        key += self.suffix
        self.recorded.add(key)
        self.results[key] = {
            **value,
            "recorded_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        }
        self.save()
        print(f"{key}: {json.dumps(value)}", flush=True)

    def save(self) -> None:
        """Merge this run's results into the JSON (runs of other subsets may write it too: a
        lock file orders them) and rewrite the section from everything recorded there."""
        self.c.json_path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.c.json_path.with_name(self.c.json_path.name + ".lock")
        with open(lock, "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            if self.c.json_path.exists():
                held = json.loads(self.c.json_path.read_text()).get("results", {})
                self.results = {**held, **{k: self.results[k] for k in self.recorded}}
            document = {"machine": machine(), "results": self.results}
            temp = self.c.json_path.with_name(self.c.json_path.name + ".part")
            temp.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
            temp.replace(self.c.json_path)
            if self.c.out is not None:
                old = self.c.out.read_text() if self.c.out.exists() else ""
                self.c.out.write_text(replace_section(old, HEADING, render(document)))

    def tiled(self, k: int) -> Path:
        path = self.c.work / f"adult-x{k}.csv"
        if not path.exists():
            tile_csv(self.adult, k, path)
        return path

    def rows_variants(self, k: int) -> list[int | None]:
        return [None, ADULT_ROWS] if k in self.c.fixed_rows_at and k != 1 else [None]

    def evaluate(self, synth: Path) -> dict[str, Any]:
        if self.c.skip_eval or not synth.exists():
            return {}
        started = time.perf_counter()
        try:
            found = tvd3(self.adult, synth, self.domain, self.c.eval_rows, self.c.work)
        except Exception as error:  # reported beside the timing, which stands on its own
            return {"eval_error": f"{type(error).__name__}: {error}"}
        return {**found, "eval_seconds": time.perf_counter() - started}

    # -- phases
    def run(self) -> None:
        for k in self.c.times:
            self.run_cli(k)
            self.run_mbi(k)
            self.run_service(k)

    def run_cli(self, k: int) -> None:
        for method in self.c.methods:
            for rows in self.rows_variants(k):
                key = phase_key(k, method, "cli", rows)
                if not self.wanted(key):
                    continue
                data = self.tiled(k)
                out = self.c.work / f"cli-{method}-x{k}-{rows or 'default'}.csv"
                argv = [
                    str(Path(sys.executable).with_name("rhosynth")),
                    "synthesize", str(data), "--schema", str(self.domain), "--method", method,
                    "--epsilon", EPSILON, "--delta", DELTA, "--seed", "0", "--out", str(out),
                    "--no-progress",
                ]  # fmt: skip
                if rows is not None:
                    argv += ["--rows", str(rows)]
                load = loadavg()
                run = run_child(argv, cap=self.c.cli_cap, log=out.with_suffix(".log"))
                run.update(load_at_start=load, rows_in=ADULT_ROWS * k)
                if run["finished"]:
                    run["rows_out"] = count_rows(out)
                    run.update(self.evaluate(out))
                    out.unlink()
                self.record(key, run)

    def run_mbi(self, k: int) -> None:
        if self.c.peers is None:
            return
        for method in self.c.methods:
            key = phase_key(k, method, "mbi")
            if not self.wanted(key):
                continue
            data = self.tiled(k)
            out = self.c.work / f"mbi-{method}-x{k}.csv"
            meta = out.with_suffix(".meta.json")
            runner = self.shared / "bench" / "peers" / f"run_mbi2_{method}.py"
            argv = [
                self.c.peers, str(runner), "--data", str(data), "--domain", str(self.domain),
                "--out", str(out), "--epsilon", EPSILON, "--delta", DELTA, "--seed", "0",
                "--meta", str(meta),
            ]  # fmt: skip
            load = loadavg()
            run = run_child(argv, cap=self.c.peer_cap, log=out.with_suffix(".log"))
            run.update(load_at_start=load, rows_in=ADULT_ROWS * k)
            if run["finished"]:
                with contextlib.suppress(OSError, ValueError):
                    run["stage_seconds"] = json.loads(meta.read_text()).get("stage_seconds")
                run["rows_out"] = count_rows(out)
                run.update(self.evaluate(out))
                out.unlink()
            self.record(key, run)

    def run_service(self, k: int) -> None:
        upload_key = phase_key(k, None, "upload")
        job_keys = [
            (method, rows, phase_key(k, method, "service", rows))
            for method in self.c.methods
            for rows in self.rows_variants(k)
        ]
        jobs = [item for item in job_keys if self.wanted(item[2])]
        if not jobs and not self.wanted(upload_key):
            return
        data = self.tiled(k)
        with service_stack(self.c.work / f"stack-x{k}", self.c.settings) as stack:
            owner, analyst = stack_clients(stack)
            load = loadavg()
            api = GroupMemory(stack.server.pid)
            with api:
                started = time.perf_counter()
                with open(data, "rb") as handle:
                    response = owner.post(
                        "/v1/datasets",
                        files={"file": (data.name, handle, "text/csv")},
                        data={
                            "schema": self.domain.read_text(),
                            "name": f"adult-x{k}",
                            "budget_rho": "100",
                        },
                        timeout=3600,
                    )
                upload_seconds = time.perf_counter() - started
            upload: dict[str, Any] = {
                "upload_seconds": upload_seconds,
                "status": response.status_code,
                "bytes": data.stat().st_size,
                "rows_in": ADULT_ROWS * k,
                "load_at_start": load,
                **api.summary("api"),
            }
            if response.status_code != 201:
                upload["error"] = response.text[:500]
                self.record(upload_key, upload)
                return
            dataset_id = response.json()["id"]
            if self.wanted(upload_key):
                self.record(upload_key, upload)
            for method, rows, key in jobs:
                worker = stack.workers[0]
                result = self.one_job(
                    stack, owner, analyst, worker.pid, dataset_id, method, rows, k
                )
                self.record(key, result)
                if not result.get("owner_tier_seen", True):
                    # Still building the owner-tier report: a fresh worker, so that the next
                    # job's time does not include waiting for it.
                    stack.kill(worker)
                    stack.start_worker()
            owner.close()
            analyst.close()

    def one_job(
        self, stack: Any, owner: Any, analyst: Any, worker_pid: int, dataset_id: str, method: str,
        rows: int | None, k: int,
    ) -> dict[str, Any]:  # fmt: skip
        body: dict[str, Any] = {
            "method": method,
            "budget": {"epsilon": EPSILON, "delta": DELTA},
            "seed": 0,
        }
        if rows is not None:
            body["rows"] = rows
        load = loadavg()
        result: dict[str, Any] = {
            "load_at_start": load,
            "rows_in": ADULT_ROWS * k,
            "settings": self.c.settings,
        }
        memory = GroupMemory(worker_pid)
        with memory:
            started = time.perf_counter()
            cpu_start = group_cpu_seconds(worker_pid)
            response = analyst.post(f"/v1/datasets/{dataset_id}/jobs", json=body)
            if response.status_code != 202:
                result.update(status=response.status_code, error=response.text[:500])
                return result
            job_id = response.json()["id"]
            job: dict[str, Any] = {}
            # Seconds from submission at which each stage was first seen (the owner's view
            # of the engine's progress; "load", "write" and "report" are the service's phases).
            stages: dict[str, float] = {}
            while True:
                job = owner.get(f"/v1/jobs/{job_id}").json()
                detail = job.get("progress_detail") or job.get("progress") or {}
                stage = str(detail.get("stage", "?"))
                stages.setdefault(stage, round(time.perf_counter() - started, 2))
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
                if time.perf_counter() - started > self.c.job_cap:
                    # Over the benchmark's cap: cancelled, recorded as not finished (with the
                    # progress it had reached).
                    result.update(not_finished_in=self.c.job_cap, progress_at_cap=detail)
                    break
                time.sleep(0.25)
            result["stages_first_seen"] = stages
            result["job_seconds"] = time.perf_counter() - started
            result["job_cpu_seconds"] = group_cpu_seconds(worker_pid) - cpu_start
            # The owner tier of the report is built after publication (app/jobs/execution.py):
            # wait for the worker to go idle so its memory is part of the peak.
            if job["status"] == "succeeded":
                result["owner_wait"] = self.c.owner_wait
                result["owner_tier_seen"] = _wait_owner_tier(owner, job_id, self.c.owner_wait)
                result["owner_tier_seconds"] = time.perf_counter() - started
        result.update(memory.summary("worker"))
        if "not_finished_in" in result:
            owner.post(f"/v1/jobs/{job_id}/cancel")
            stack.kill(stack.workers[0])  # cancellation waits for the engine's next check
            stack.start_worker()
        result.update(
            status=job["status"], error=job.get("error"), rows_out=job.get("output_rows"),
            started_at=job.get("started_at"), finished_at=job.get("finished_at"),
        )  # fmt: skip
        if job["status"] != "succeeded":
            result["worker_log_tail"] = stack.logs()[-3000:]
            return result
        out = self.c.work / f"service-{method}-x{k}-{rows or 'default'}.csv"
        load = loadavg()
        api = GroupMemory(stack.server.pid)
        with api:
            started = time.perf_counter()
            size = 0
            with analyst.stream("GET", f"/v1/jobs/{job_id}/output", params={"format": "csv"},
                                timeout=3600) as stream, open(out, "wb") as handle:  # fmt: skip
                for chunk in stream.iter_bytes(MIB):
                    size += len(chunk)
                    handle.write(chunk)
            result["download_seconds"] = time.perf_counter() - started
        result.update(download_bytes=size, download_load_at_start=load)
        result.update({f"download_{k}": v for k, v in api.summary("api").items()})
        result.update(self.evaluate(out))
        out.unlink(missing_ok=True)
        return result


def _wait_owner_tier(owner: Any, job_id: str, timeout: float) -> bool:
    """Until the job lists its owner-tier report (built by the worker after publication), or
    ``timeout``; whether it appeared."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        artefacts = owner.get(f"/v1/jobs/{job_id}").json().get("artefacts") or []
        if "report-owner.json" in artefacts:
            return True
        time.sleep(0.25)
    return False


@contextlib.contextmanager
def service_stack(workdir: Path, settings: dict[str, str]) -> Iterator[Any]:
    """A real API process and one real worker process with the service's default limits
    (``settings``: RHOSYNTH_* overrides, for example ``job_memory_limit_mb``)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from app.config import Settings
    from benchmarks.service_load import PRODUCTION_TIMINGS
    from tests.support import services
    from tests.support.stack import Stack

    defaults = Settings.model_fields
    production = {
        name: defaults[name].default
        for name in ("max_upload_bytes", "max_output_rows", "log_level")
    }
    services.ensure_services()
    values = {**PRODUCTION_TIMINGS, **production, **settings}
    stack = Stack.create("scale", workdir, workers=1, **values)
    try:
        yield stack
    finally:
        stack.destroy()
        # The stored tables and outputs (tens to hundreds of MB a run); the logs stay.
        shutil.rmtree(workdir / "storage", ignore_errors=True)


def stack_clients(stack: Any) -> tuple[Any, Any]:
    tenant = f"bench-scale-{uuid.uuid4().hex[:8]}"
    owner = stack.client(stack.create_key(tenant, "owner", "bench-owner"))
    analyst = stack.client(stack.create_key(tenant, "analyst", "bench-analyst"))
    return owner, analyst


# ------------------------------------------------------------------------------------------
# The section


def _get(results: dict[str, Any], key: str, field: str) -> Any:
    return results.get(key, {}).get(field)


def _order(key: str) -> tuple[int, str]:
    return int(key.split("/")[0][2:]), key


def render(document: dict[str, Any]) -> str:
    results: dict[str, Any] = document["results"]
    m = document["machine"]
    times = sorted({int(key.split("/")[0][2:]) for key in results})
    # Runs with other settings (diagnostics) appear in the service tables only.
    methods = [x for x in ("mst", "aim") if any(f"method={x}/" in key for key in results)]
    lines = [
        HEADING,
        "",
        "adult (48,842 rows, 14 columns, domain kept) tiled ×k into one CSV, ε = 1, δ = 1e-9, "
        "seed 0, through the CLI (`rhosynth synthesize` in a child process), through the "
        "service (a real uvicorn API process and one real Celery worker process, PostgreSQL, "
        "Redis, local storage; the service's default limits) and through mbi 2.0 "
        "(/work/shared/bench/peers, its own virtualenv) on the same file. Written by "
        "`python -m benchmarks.scale` (results in its `--json`; each phase is recorded with "
        "the 1-minute load average at its start).",
        "",
        f"Machine: {m.get('cpu')}, {m.get('cores')} cores, "
        f"{(m.get('ram_mb') or 0) / 1024:.1f} GiB RAM, Python {m.get('python')}. "
        "The machine was shared with other work (see the load averages); timings are noisy, "
        "ratios taken in the same session are the steadier figures.",
        "",
        "Reproduce (mbi 2.0 goes in its own virtualenv outside the checkout; it is not a test "
        "dependency): `python3.11 -m venv /work/peers/mbi && /work/peers/mbi/bin/pip install "
        '"mbi==2.0.0" pandas`, then `RHOSYNTH_TEST_REDIS_URL=redis://127.0.0.1:6379/7 '
        "python -m benchmarks.scale --data ../shared/data --times 1 10 40 205 --methods mst aim "
        "--peers /work/peers/mbi/bin/python --out docs/benchmarks.md --json docs/scale.json` "
        "(PostgreSQL and Redis as for the tests). Recorded phases are skipped; re-run a subset "
        "with `--only k=205 method=aim phase=service --force`; a run with other service settings "
        "(`--setting job_memory_limit_mb=8192`) is kept beside the default one.",
        "",
        "Peak memory: CLI and mbi, the child's VmHWM polled every 0.1 s (`ru_maxrss` from "
        "`wait4` is not used: Linux carries it across exec, so runs recorded before "
        "2026-11-26 20:50 UTC that followed a large evaluation in the driver show the "
        "driver's RSS); API and worker, the "
        "largest VmHWM of the process group (reset with `clear_refs` at the start of the "
        "phase; the worker's job runs in its pool child). Worker peak covers the job and the "
        "owner-tier report built after publication for as long as the run waited for it "
        "(`--owner-wait`; `owner_tier_seen` in the JSON says whether it finished).",
        "",
        "### Targets (issue 15 §3): adult ×205 through the service",
        "",
    ]
    target_rows = []
    up = results.get(phase_key(205, None, "upload"))
    if up:
        target_rows.append(
            [
                "upload ≤ 60 s",
                fmt_seconds(up.get("upload_seconds")),
                verdict(up.get("upload_seconds"), TARGETS["upload_seconds"]),
                f"CPU {fmt_seconds(up.get('api_cpu_seconds'))}",
                up.get("load_at_start", "?"),
            ]
        )
        target_rows.append(
            [
                "API peak ≤ 600 MB (upload)",
                fmt_mb(up.get("api_peak_mb")),
                verdict(up.get("api_peak_mb"), TARGETS["api_peak_mb"]),
                "",
                up.get("load_at_start", "?"),
            ]
        )
    for method in methods:
        for rows in (None, ADULT_ROWS):
            base = phase_key(205, method, "service", rows)
            for key in sorted(k for k in results if k == base or k.startswith(base + "/")):
                job = results[key]
                label = f"{method}, rows = {'default' if rows is None else f'{rows:,}'}"
                if key != base:
                    label += " (" + key[len(base) + 1 :].replace(":", " = ") + ")"
                limit = TARGETS[f"{method}_job_seconds"]
                ended = job_status(job)
                measured = fmt_seconds(job.get("job_seconds"))
                ok = job.get("status") == "succeeded"
                target_rows.append(
                    [
                        f"{label}: job ≤ {fmt_seconds(limit)}",
                        measured if ok else f"{measured} ({ended})",
                        verdict(job.get("job_seconds"), limit) if ok else "**not met**",
                        f"CPU {fmt_seconds(job.get('job_cpu_seconds'))}",
                        job.get("load_at_start", "?"),
                    ]
                )
                target_rows.append(
                    [
                        f"{label}: worker peak ≤ 4 GB",
                        fmt_mb(job.get("worker_peak_mb")),
                        verdict(job.get("worker_peak_mb"), TARGETS["worker_peak_mb"])
                        if ok
                        else "–",
                        "",
                        job.get("load_at_start", "?"),
                    ]
                )
    if target_rows:
        lines += markdown_table(
            ["target", "measured", "", "", "load at start"], target_rows, "lrlrl"
        )
    else:
        lines.append("(not measured yet)")
    lines += ["", "### CLI", ""]
    cli_rows = []
    for k in times:
        for method in methods:
            for rows in (None, ADULT_ROWS):
                run = results.get(phase_key(k, method, "cli", rows))
                if not run:
                    continue
                cli_rows.append(
                    [
                        f"×{k}",
                        f"{k * ADULT_ROWS:,}",
                        method,
                        "default" if rows is None else f"{rows:,}",
                        f"{run.get('rows_out', 0):,}" if run.get("finished") else _unfinished(run),
                        fmt_seconds(run.get("wall_seconds")),
                        fmt_seconds(run.get("cpu_seconds")),
                        fmt_mb(run.get("peak_mb")),
                        _tvd_text(run),
                        run.get("load_at_start", "?"),
                    ]
                )
    lines += markdown_table(
        ["k", "rows in", "method", "rows asked", "rows out", "wall", "CPU", "peak RSS",
         "3-way TVD", "load"],
        cli_rows, "lrllrrrrrl",
    )  # fmt: skip
    lines += ["", "### Service: upload", ""]
    upload_rows = []
    for key in sorted(results, key=_order):
        up = results[key]
        if "/phase=upload" not in key:
            continue
        upload_rows.append(
            [
                key.split("/")[0].replace("k=", "×"),
                f"{up.get('bytes', 0) / MIB:,.0f} MiB",
                fmt_seconds(up.get("upload_seconds")),
                fmt_seconds(up.get("api_cpu_seconds")),
                fmt_mb(up.get("api_peak_mb")),
                fmt_mb(up.get("api_sampled_sum_mb")),
                str(up.get("status")),
                up.get("load_at_start", "?"),
            ]
        )
    lines += markdown_table(
        ["k", "CSV", "upload wall", "API CPU", "API peak (VmHWM)", "API peak (sampled RSS)",
         "status", "load"],
        upload_rows, "lrrrrrll",
    )  # fmt: skip
    lines += ["", "### Service: jobs and download", ""]
    job_rows = []
    for key in sorted(results, key=_order):
        job = results[key]
        fields = dict(part.split("=", 1) for part in key.split("/"))
        if fields.get("phase") != "service":
            continue
        job_rows.append(
            [
                f"×{fields['k']}",
                fields["method"],
                "default" if fields["rows"] == "default" else f"{int(fields['rows']):,}",
                fields.get("settings", "defaults").replace(":", " = "),
                job_status(job),
                "–" if job.get("rows_out") is None else f"{job['rows_out']:,}",
                fmt_seconds(job.get("job_seconds")),
                fmt_seconds(job.get("job_cpu_seconds")),
                fmt_mb(job.get("worker_peak_mb")),
                fmt_seconds(job.get("download_seconds")),
                fmt_mb(job.get("download_api_peak_mb")),
                _tvd_text(job),
                job.get("load_at_start", "?"),
            ]
        )
    lines += markdown_table(
        ["k", "method", "rows asked", "settings", "status", "rows out", "submit → end",
         "worker CPU", "worker peak", "CSV download", "API peak (download)", "3-way TVD",
         "load"],
        job_rows, "llllllrrrrrrl",
    )  # fmt: skip
    failures = [
        f"- {key}: {value.get('error')}"
        for key, value in sorted(results.items())
        if value.get("error")
    ]
    if failures:
        lines += ["", "Errors:", "", *failures]
    lines += [
        "",
        "### Against mbi 2.0 (same file, same session)",
        "",
        "Each cell: wall (CPU time), peak RSS. Ratios are ours / mbi for wall / CPU / peak; "
        "CPU time is the steadier figure on a shared machine. The CLI runs the "
        "same engine as the worker without the service around it. 3-way TVD: CLI / service / "
        "mbi, against adult.csv on a uniform sample of the output (see `eval_rows` in the "
        "JSON) where the output is larger.",
        "",
    ]
    lines += markdown_table(
        ["k", "method", "ours, CLI", "ours, service job", "mbi 2.0", "CLI / mbi",
         "service / mbi", "3-way TVD"],
        ratio_rows(results, times, methods), "llrrrrrr",
    )  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="../shared/data")
    parser.add_argument("--times", type=int, nargs="+", default=[1, 10, 40, 205])
    parser.add_argument("--methods", nargs="+", default=["mst", "aim"])
    parser.add_argument("--fixed-rows-at", type=int, nargs="*", default=[205],
                        help="k at which jobs also ask for 48,842 rows")  # fmt: skip
    parser.add_argument("--peers", default=None, help="python of the mbi 2.0 virtualenv")
    parser.add_argument("--peer-cap", type=float, default=1800.0, help="seconds per mbi run")
    parser.add_argument("--job-cap", type=float, default=3600.0,
                        help="seconds after which a service job is cancelled and reported as "
                        "not finished")  # fmt: skip
    parser.add_argument("--cli-cap", type=float, default=None, help="seconds per CLI run")
    parser.add_argument("--owner-wait", type=float, default=900.0,
                        help="seconds to wait for a job's owner-tier report (built after "
                        "publication) before restarting the worker for the next job")  # fmt: skip
    parser.add_argument("--eval-rows", type=int, default=1_000_000)
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None, help="tiled files, outputs, logs")
    parser.add_argument("--json", dest="json_path", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=None, help="docs/benchmarks.md")
    parser.add_argument("--only", nargs="*", default=[], help="k=205 method=aim phase=service")
    parser.add_argument("--force", action="store_true", help="re-run phases already recorded")
    parser.add_argument("--setting", nargs="*", default=[], metavar="NAME=VALUE",
                        help="service settings other than the defaults (e.g. "
                        "job_memory_limit_mb=6144), recorded with each job")  # fmt: skip
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args(argv)
    work = args.workdir or Path(tempfile.gettempdir()) / "rhosynth-scale"
    work.mkdir(parents=True, exist_ok=True)
    config = Config(
        data=args.data, times=args.times, methods=args.methods, fixed_rows_at=args.fixed_rows_at,
        peers=args.peers, peer_cap=args.peer_cap, owner_wait=args.owner_wait, job_cap=args.job_cap,
        cli_cap=args.cli_cap,
        eval_rows=args.eval_rows, work=work,
        json_path=args.json_path, out=args.out, only=parse_only(args.only), force=args.force,
        skip_eval=args.skip_eval, settings=dict(item.split("=", 1) for item in args.setting),
    )  # fmt: skip
    runner = Runner(config)
    if not args.render_only:
        runner.run()
    runner.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
