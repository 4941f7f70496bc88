"""Run every benchmark and write docs/benchmarks.md.

``python -m benchmarks.run --data ../shared/data --out docs/benchmarks.md [--quick]``, from the
repository root (``make bench``). Runs :mod:`benchmarks.quality` (engine quality and speed, and
the sampler's share of an ``independent`` job), :mod:`benchmarks.service_load` (a real stack
under load) and :mod:`benchmarks.burst` (simultaneous requests in both modes), and writes one
Markdown file with the machine, the exact command, the date and the tables. Every number in that
file was measured by this invocation, except the reference figures quoted from
../shared/ENGINE-NOTES.md, which are labelled as such.

The exit status is 1 if any run failed (the file is written all the same, failures listed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks import burst, cost_model, quality, service_load
from benchmarks.aim_epsilon import HEADING as AIM_EPSILON
from benchmarks.artefacts import SECTION as ARTEFACTS
from benchmarks.sections import current_section, keep_other_sections, replace_section

REPO = Path(__file__).resolve().parents[1]

PACKAGES = (
    "numpy",
    "pandas",
    "scipy",
    "pyarrow",
    "fastapi",
    "uvicorn",
    "starlette",
    "pydantic",
    "sqlalchemy",
    "psycopg",
    "celery",
    "kombu",
    "redis",
    "httpx",
)


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def _first_line(path: str, key: str) -> str | None:
    try:
        with open(path) as handle:
            for line in handle:
                name, _, value = line.partition(":" if path.startswith("/proc") else "=")
                if name.strip() == key:
                    return value.strip().strip('"')
    except OSError:
        return None
    return None


def _git(*args: str) -> str | None:
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, no shell
            ["git", *args],  # noqa: S607 - git from PATH is what a developer runs
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except OSError:
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def _service_versions() -> dict[str, str]:
    versions: dict[str, str] = {}
    try:
        import psycopg
        import redis

        from tests.support import services

        with psycopg.connect(services.POSTGRES_URL, connect_timeout=5) as connection:
            row = connection.execute("SHOW server_version").fetchone()
            if row is not None:
                versions["PostgreSQL"] = str(row[0])
        info = redis.Redis.from_url(services.REDIS_URL, socket_connect_timeout=5).info("server")
        versions["Redis"] = str(info.get("redis_version"))
    except Exception as error:  # the versions are informative only
        versions["services"] = f"not queried ({type(error).__name__})"
    return versions


def machine_info() -> dict[str, Any]:
    """CPU, cores, RAM, OS, Python and package versions, git commit, load average."""
    mem_kib = _first_line("/proc/meminfo", "MemTotal")
    packages: dict[str, str] = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = "not installed"
    commit = _git("rev-parse", "--short=12", "HEAD")
    dirty = _git("status", "--porcelain")
    return {
        "cpu": _first_line("/proc/cpuinfo", "model name") or platform.processor() or "unknown",
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "ram_gib": int(mem_kib.split()[0]) / 1024**2 if mem_kib else None,
        "os": _first_line("/etc/os-release", "PRETTY_NAME") or platform.platform(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": packages,
        "services": _service_versions(),
        "commit": commit,
        "dirty": bool(dirty),
        "loadavg": os.getloadavg(),
    }


def _loadavg_text(values: tuple[float, float, float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def render(
    info: dict[str, Any],
    command: str,
    started: datetime,
    seconds: float,
    loadavg_end: tuple[float, float, float],
    quality_report: quality.QualityReport | None,
    load_report: service_load.LoadReport | None,
) -> str:
    """The whole docs/benchmarks.md."""
    packages = ", ".join(f"{k} {v}" for k, v in info["packages"].items())
    services = ", ".join(f"{k} {v}" for k, v in info["services"].items())
    commit = info["commit"] or "unknown"
    if info["dirty"]:
        commit += " (with uncommitted changes)"
    ram = f"{info['ram_gib']:.1f} GiB" if info["ram_gib"] else "unknown"
    lines = [
        "# rhosynth benchmarks",
        "",
        "Generated by `benchmarks/run.py`; do not edit by hand, regenerate with `make bench`. "
        "Every figure below was measured by the run described here, except those labelled "
        "*reference*.",
        "",
        "## Run",
        "",
        f"- Date: {started.strftime('%Y-%m-%d %H:%M UTC')}; benchmark wall time {seconds:.0f} s.",
        f"- Command (from the repository root): `{command}` (`make bench` runs it with "
        "`.venv/bin/python` and without `--quick`, `--repeats` or `--repeats-for`). The parts "
        "alone: `python -m benchmarks.quality --data "
        "../shared/data [--quick] [--repeats N]` and `python -m benchmarks.service_load "
        "--data ../shared/data [--quick] [--users N --duration S --workers N]`.",
        f"- Commit: `{commit}`",
        f"- CPU: {info['cpu']}; {info['logical_cpus']} logical CPUs "
        f"({info['usable_cpus']} usable by this process); RAM {ram}.",
        f"- OS: {info['os']}, kernel {info['kernel']}; Python {info['python']}.",
        f"- Packages: {packages}.",
        f"- Services: {services}.",
        f"- Load average (1 / 5 / 15 min) at start: {_loadavg_text(info['loadavg'])}; "
        f"at end: {_loadavg_text(loadavg_end)}. A load well above 0 at the start means "
        "something else was running and timings are noisy.",
        "",
    ]
    lines += ["## Headline", ""]
    lines += _headline(quality_report, load_report)
    lines += [""]
    if quality_report is not None:
        lines += [quality.render_markdown(quality_report)]
    if load_report is not None:
        lines += [service_load.render_markdown(load_report)]
    return "\n".join(lines).rstrip() + "\n"


def _headline(
    quality_report: quality.QualityReport | None, load_report: service_load.LoadReport | None
) -> list[str]:
    lines: list[str] = []
    if quality_report is not None:
        floors = quality.floor_spreads(quality_report)
        floor = floors.get("adult", {}).get("3")
        for method in quality_report.methods:
            runs = [
                r
                for r in quality_report.runs
                if r.dataset == "adult" and r.epsilon == 1.0 and r.method == method
            ]
            if not runs:
                continue
            tvd = {k: quality.Spread.of([r.tvd[k] for r in runs]) for k in runs[0].tvd}
            synth = quality.Spread.of([r.synthesis_seconds for r in runs])
            process = quality.Spread.of([r.process_seconds for r in runs])
            peak = quality.Spread.of([r.peak_rss_mib for r in runs])
            reference = quality.REFERENCE_ADULT_EPS1_3WAY.get(method)
            ref_text = f" (reference {reference:.3f})" if reference is not None else ""
            lines.append(
                f"- adult, ε = 1, `{method}`: mean TVD 1-way {tvd['1'].median:.4f}, "
                f"2-way {tvd['2'].median:.4f}, 3-way **{tvd['3'].median:.4f}**{ref_text}; "
                f"synthesis {synth.median:.3f} s (whole process {process.median:.2f} s), "
                f"peak RSS {peak.median:.0f} MiB."
            )
        if floor is not None:
            reference = quality.REFERENCE_ADULT_EPS1_3WAY["bootstrap floor"]
            lines.append(
                f"- adult bootstrap floor, 3-way: **{floor.median:.4f}** "
                f"(reference {reference:.3f})."
            )
        profiles = [quality_report.profile, *quality_report.extra_profiles]
        for profile in profiles:
            if profile is None:
                continue
            rho = quality_report.rhos.get("1")
            samples = profile["by_rho"].get(rho or "", [])
            if samples:
                noise = sum(s["noise"] for s in samples)
                lines.append(
                    f"- Discrete Gaussian sampler, `{profile['method']}` on adult, ε = 1: "
                    f"**{100 * noise / sum(s['run'] for s in samples):.1f} %** of "
                    f"`Mechanism.run`, {100 * noise / sum(s['job'] for s in samples):.1f} % of "
                    "the job without its database work" + _worker_share(profile, rho or "") + "."
                )
    if load_report is not None and load_report.endpoints:
        all_latencies = [
            1000 * x for stats in load_report.endpoints.values() for x in stats.latencies
        ]
        server_errors = sum(sum(s.server_5xx.values()) for s in load_report.endpoints.values())
        if all_latencies:
            p = [service_load.percentile(all_latencies, q) for q in (50, 95, 99)]
            lines.append(
                f"- Service, {load_report.config.users} users for "
                f"{load_report.config.duration_seconds:g} s, all endpoints: p50 {p[0]:.1f} ms, "
                f"p95 {p[1]:.1f} ms, p99 {p[2]:.1f} ms; 5xx: {server_errors}."
            )
        if load_report.jobs:
            lines.append(
                f"- Jobs: {load_report.jobs['per_minute_per_worker']:.1f} per minute per worker "
                f"under that load ({load_report.config.workers} workers), "
                f"{load_report.jobs['per_busy_worker_minute']:.1f} per busy worker-minute."
            )
        ledger_ok = load_report.ledger and all(
            e["reconciled"] and e["within_total"] and e["spent_equals_charged_jobs"]
            for e in load_report.ledger
        )
        lines.append(
            "- Ledger after the load: "
            + ("exact on every dataset." if ledger_ok else "**NOT exact, see below.**")
        )
    failures = (quality_report.failures if quality_report else []) + (
        load_report.failures if load_report else []
    )
    lines.append(f"- Failures: {len(failures)}" + (" (listed below)." if failures else "."))
    return lines


def _worker_share(profile: dict[str, Any], rho: str) -> str:
    samples = profile.get("worker_by_rho", {}).get(rho, [])
    if not samples:
        return ""
    share = sum(s["noise"] for s in samples) / sum(s["job"] for s in samples)
    return f", {100 * share:.1f} % of a real worker job (`execute_job`, with its database work)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="laid out like ../shared/data")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    parser.add_argument("--quick", action="store_true", help="small datasets, 1 repeat, short load")
    parser.add_argument(
        "--evaluator", type=Path, default=None, help="default: DATA/../bench/marginal_error.py"
    )
    parser.add_argument("--repeats", type=int, default=None, help="default 3 (1 with --quick)")
    parser.add_argument(
        "--repeats-for", nargs="*", default=None, metavar="DATASET=N", help="per-dataset repeats"
    )
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-load", action="store_true")
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument("--json", type=Path, default=None, help="also write raw results here")
    args = parser.parse_args(argv)
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # the load benchmark imports tests.support

    raw_args = sys.argv[1:] if argv is None else argv
    command = shlex.join(["python", "-m", "benchmarks.run", *raw_args])
    started_at = datetime.now(UTC)
    started = time.perf_counter()
    info = machine_info()
    data_dir = args.data.resolve()
    evaluator = (args.evaluator or data_dir.parent / "bench" / "marginal_error.py").resolve()

    quality_report = None
    if not args.skip_quality:
        _log("engine quality and speed")
        quality_report = quality.run_quality(
            data_dir,
            evaluator,
            quick=args.quick,
            repeats=args.repeats,
            repeats_for=quality.parse_repeats_for(args.repeats_for),
            progress=lambda message: _log(f"quality: {message}"),
        )
    load_report = None
    if not args.skip_load:
        _log("service under load")
        config = service_load.LoadConfig.quick() if args.quick else service_load.LoadConfig()
        load_report = service_load.run_load(
            config, data_dir=data_dir, progress=lambda message: _log(f"load: {message}")
        )

    burst_section = None
    if not args.skip_burst:
        _log("bursts of simultaneous requests")
        burst_started, burst_load = datetime.now(UTC), os.getloadavg()
        runs = [burst.run_mode(mode, n=200, fit=20) for mode in ("production", "embedded")]
        burst_section = burst.render_markdown(runs, command, burst_started, burst_load)

    text = render(
        info,
        command,
        started_at,
        time.perf_counter() - started,
        os.getloadavg(),
        quality_report,
        load_report,
    )
    if burst_section is not None:
        text = text.rstrip("\n") + "\n\n" + burst_section
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.out.is_file():
        # The cost-preview, artefact and AIM-across-ε sections are written by their own
        # scripts; keep them.
        previous = args.out.read_text()
        text = cost_model.replace_section(text, cost_model.current_section(previous))
        for heading in (ARTEFACTS, AIM_EPSILON):
            text = replace_section(text, heading, current_section(previous, heading))
        # And every other section this script does not write (hand-written ones, loading,
        # sampling, counting, scale, ppsyn speed, …).
        text = keep_other_sections(text, previous)
    args.out.write_text(text)
    _log(f"wrote {args.out}")
    if args.json:
        raw = {
            "machine": info,
            "command": command,
            "date": started_at.isoformat(),
            "quality": quality.report_to_json(quality_report) if quality_report else None,
            "load": service_load.report_to_json(load_report) if load_report else None,
        }
        args.json.write_text(json.dumps(raw, indent=1, default=str))
    failed = (quality_report is not None and bool(quality_report.failures)) or (
        load_report is not None and bool(load_report.failures)
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
