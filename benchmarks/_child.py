"""Work that runs in a fresh child process, so that what it measures belongs to one run only.

Invoked by :mod:`benchmarks.quality` as ``python -m benchmarks._child COMMAND SPEC_JSON``; prints
one JSON object on the last line of stdout. Engine modules are imported inside the commands, not
at module level, so that the ``profile`` command can wrap the noise sampler before anything binds
it, and so that a run's memory holds nothing it did not need.

Commands:

* ``synthesize``: load one dataset, run one mechanism once, write the synthetic codes as CSV.
  Reports load time, synthesis time (``Mechanism.run`` only), CSV write time, rows out, RSS
  before the run and the peak RSS of the run.
* ``profile``: run one mechanism many times on one dataset with timers around the discrete
  Gaussian sampler (``engine.noise``) and the contingency-table counting
  (``engine.marginals.count_marginal``), both inside the engine and inside a replica of the
  worker's job pipeline (read the stored Parquet table, synthesise, decode, write Parquet);
  optionally also around real worker jobs (``app.jobs.execution.execute_job`` run in this
  process against a worker-less test stack: PostgreSQL, Redis, the API).
"""

from __future__ import annotations

import functools
import json
import resource
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np


def read_memory_kib() -> dict[str, int]:
    """VmRSS (current) and VmHWM (peak since start or last reset) of this process, in KiB.

    Falls back to ``getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on Linux) without /proc.
    """
    values: dict[str, int] = {}
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0])
    except OSError:
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        values = {"VmRSS": peak, "VmHWM": peak}
    return values


def reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux ≥ 4.0: write ``5`` to /proc/self/clear_refs).

    Returns False where that is not possible; the peak then also covers loading the data.
    """
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def load_dataset(csv_path: str, domain_path: str) -> tuple[Any, Any]:
    """(TableSchema, engine Dataset) of a benchmark table: integer codes, domain from the JSON.

    The code array is made read-only before it is handed over, so ``Dataset`` keeps it without
    copying (its documented contract).
    """
    import pandas as pd

    from engine.domain import Dataset
    from engine.tables.encoding import TableSchema

    schema = TableSchema.from_json(json.loads(Path(domain_path).read_text()))
    names = list(schema.names)
    frame = pd.read_csv(csv_path, usecols=names)
    codes = np.ascontiguousarray(frame[names].to_numpy(dtype=np.int64))
    del frame
    codes.flags.writeable = False
    return schema, Dataset(schema.domain(), codes)


def synthesize(spec: dict[str, Any]) -> dict[str, Any]:
    """One run of one mechanism; see the module docstring for what is reported."""
    import pandas as pd

    from engine.mechanisms import get_mechanism

    started = time.perf_counter()
    schema, data = load_dataset(spec["csv"], spec["domain"])
    load_seconds = time.perf_counter() - started

    mechanism = get_mechanism(spec["method"])
    params = mechanism.validate_params(spec["params"])
    rng = np.random.default_rng(int(spec["seed"]))
    rho = Fraction(Decimal(spec["rho"]))

    before = read_memory_kib()
    peak_is_run_only = reset_peak_rss()
    started = time.perf_counter()
    cpu_started = time.process_time()
    result = mechanism.run(data, rho, params, rng=rng)
    synthesis_seconds = time.perf_counter() - started
    synthesis_cpu_seconds = time.process_time() - cpu_started
    after = read_memory_kib()

    started = time.perf_counter()
    pd.DataFrame(np.asarray(result.codes), columns=list(schema.names)).to_csv(
        spec["out_csv"], index=False
    )
    write_seconds = time.perf_counter() - started
    return {
        "load_seconds": load_seconds,
        "synthesis_seconds": synthesis_seconds,
        "synthesis_cpu_seconds": synthesis_cpu_seconds,
        "write_seconds": write_seconds,
        "rows_in": data.n_rows,
        "rows_out": int(result.codes.shape[0]),
        "estimated_total": float(result.estimated_total),
        "rss_before_run_kib": before["VmRSS"],
        "peak_rss_kib": max(after["VmHWM"], before["VmRSS"]),
        "peak_is_run_only": peak_is_run_only,
    }


class StageTimer:
    """Wraps functions to add up their wall time per label; nested timed calls count once."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        self._depth = 0

    def reset(self) -> None:
        self.seconds.clear()
        self.calls.clear()
        self.items.clear()

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return function(*args, **kwargs)
            self._depth += 1
            started = time.perf_counter()
            try:
                value = function(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - started
                self.calls[label] += 1
                self._depth -= 1
            self.items[label] += int(np.size(value))
            return value

        return timed


def install_timers(timer: StageTimer) -> list[str]:
    """Replace the noise samplers and the table counter by timed wrappers wherever bound.

    Every already-imported ``engine`` module that holds one of the original functions (as
    ``from engine.noise import discrete_gaussian_noise`` does) gets the wrapper, so mechanisms
    that call the sampler by any path are covered. Returns the ``module.attribute`` names patched.
    """
    import engine.marginals
    import engine.mechanisms  # imports every mechanism, so their bindings exist
    import engine.noise

    originals: dict[int, tuple[str, Callable[..., Any]]] = {}
    for name in ("discrete_gaussian_noise", "sample_discrete_gaussian"):
        function = getattr(engine.noise, name)
        originals[id(function)] = ("noise", function)
    count = engine.marginals.count_marginal
    originals[id(count)] = ("count", count)
    wrappers = {key: timer.wrap(label, fn) for key, (label, fn) in originals.items()}

    patched: list[str] = []
    for module_name, module in list(sys.modules.items()):
        if module is None or not (module_name == "engine" or module_name.startswith("engine.")):
            continue
        for attribute, value in list(vars(module).items()):
            if id(value) in originals and value is originals[id(value)][1]:
                setattr(module, attribute, wrappers[id(value)])
                patched.append(f"{module_name}.{attribute}")
    return sorted(patched)


def profile(spec: dict[str, Any]) -> dict[str, Any]:
    """Time the sampler inside ``Mechanism.run`` and inside a replica of the worker's job.

    The job replica follows ``app.jobs.execution._synthesize`` without the database: read the
    stored table written by ``app.datasets.ingest.ingest_table``, build the engine dataset, run
    the mechanism, decode the codes and write the output Parquet (zstd). Upload (ingest) is done
    once beforehand and is not part of the job.
    """
    timer = StageTimer()
    patched = install_timers(timer)

    import pyarrow as pa
    import pyarrow.parquet as pq

    from app.datasets.ingest import IngestLimits, ingest_table, read_encoded_table
    from engine.domain import Dataset
    from engine.mechanisms import get_mechanism
    from engine.tables.encoding import TableSchema

    schema = TableSchema.from_json(json.loads(Path(spec["domain"]).read_text()))
    workdir = Path(spec["workdir"])
    stored = workdir / "table.arrow"
    output = workdir / "output.parquet"
    limits = IngestLimits(max_columns=10_000, max_rows=1_000_000_000, max_cell_bytes=1024)
    ingest_table(Path(spec["csv"]), schema, stored, limits)

    mechanism = get_mechanism(spec["method"])
    params = mechanism.validate_params(spec["params"])
    rng = np.random.default_rng(int(spec["seed"]))
    results: dict[str, Any] = {"patched": patched, "by_rho": {}}
    for rho_text in spec["rhos"]:
        rho = Fraction(Decimal(rho_text))
        samples: list[dict[str, float]] = []
        for repeat in range(int(spec["warmup"]) + int(spec["repeats"])):
            timer.reset()
            t0 = time.perf_counter()
            codes = read_encoded_table(stored, schema)
            data = Dataset(schema.domain(), codes)
            del codes
            t1 = time.perf_counter()
            result = mechanism.run(data, rho, params, rng=rng)
            t2 = time.perf_counter()
            frame = schema.decode(np.asarray(result.codes), rng)
            table = pa.Table.from_pandas(frame, preserve_index=False)
            pq.write_table(table, output, compression="zstd")
            t3 = time.perf_counter()
            if repeat < int(spec["warmup"]):
                continue
            samples.append(
                {
                    "load": t1 - t0,
                    "run": t2 - t1,
                    "write": t3 - t2,
                    "job": t3 - t0,
                    "noise": timer.seconds["noise"],
                    "count": timer.seconds["count"],
                    "noise_calls": float(timer.calls["noise"]),
                    "noise_samples": float(timer.items["noise"]),
                    "rows_out": float(result.codes.shape[0]),
                }
            )
        results["by_rho"][rho_text] = samples
    if spec.get("worker_jobs"):
        try:
            results["worker_by_rho"] = profile_worker_jobs(spec, timer)
        except Exception as error:  # reported; the replica figures stand on their own
            results["worker_error"] = f"{type(error).__name__}: {error}"
    return results


def profile_worker_jobs(
    spec: dict[str, Any], timer: StageTimer
) -> dict[str, list[dict[str, float]]]:
    """Time real worker jobs: ``execute_job`` (claim and charge, progress writes, load, run,
    decode, write, publish) in this process, on jobs submitted through a real API.

    The stack (``tests.support.stack.Stack``) has no worker processes, so the jobs wait in the
    database until this process executes them one by one.
    """
    repo = Path(__file__).resolve().parents[1]
    if str(repo) not in sys.path:
        sys.path.insert(0, str(repo))
    import uuid

    from app.jobs.execution import execute_job
    from benchmarks.service_load import PRODUCTION_TIMINGS
    from tests.support import services
    from tests.support.stack import Stack

    services.ensure_services()
    stack = Stack.create("profile", Path(spec["workdir"]) / "stack", **PRODUCTION_TIMINGS)
    results: dict[str, list[dict[str, float]]] = {}
    try:
        tenant = f"bench-profile-{uuid.uuid4().hex[:8]}"
        owner = stack.client(stack.create_key(tenant, "owner", "bench-owner"))
        analyst = stack.client(stack.create_key(tenant, "analyst", "bench-analyst"))
        with open(spec["csv"], "rb") as handle:
            created = owner.post(
                "/v1/datasets",
                files={"file": (Path(spec["csv"]).name, handle, "text/csv")},
                data={
                    "schema": Path(spec["domain"]).read_text(),
                    "name": "profile",
                    "budget_rho": "1000",
                },
            )
        if created.status_code != 201:
            raise RuntimeError(f"upload answered {created.status_code}")
        dataset_id = created.json()["id"]
        settings = stack.settings
        warmup = int(spec["warmup"])
        for rho_text in spec["rhos"]:
            samples: list[dict[str, float]] = []
            for repeat in range(warmup + int(spec["repeats"])):
                response = analyst.post(
                    f"/v1/datasets/{dataset_id}/jobs",
                    json={
                        "method": spec["method"],
                        "budget": {"rho": rho_text},
                        "params": spec["params"],
                        # The API caps seeds (JSON-safe integers); stay well below.
                        "seed": (int(spec["seed"]) + repeat) % 2**31,
                    },
                )
                if response.status_code != 202:
                    raise RuntimeError(f"job submission answered {response.status_code}")
                timer.reset()
                started = time.perf_counter()
                outcome = execute_job(settings, uuid.UUID(response.json()["id"]))
                elapsed = time.perf_counter() - started
                if outcome.status != "succeeded":
                    raise RuntimeError(f"worker job ended {outcome.status}")
                if repeat >= warmup:
                    samples.append(
                        {
                            "job": elapsed,
                            "noise": timer.seconds["noise"],
                            "count": timer.seconds["count"],
                        }
                    )
            results[rho_text] = samples
        owner.close()
        analyst.close()
    finally:
        stack.destroy()
    return results


COMMANDS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "synthesize": synthesize,
    "profile": profile,
}


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in COMMANDS:
        print(f"usage: python -m benchmarks._child {{{','.join(COMMANDS)}}} SPEC_JSON")
        return 2
    result = COMMANDS[argv[0]](json.loads(argv[1]))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
