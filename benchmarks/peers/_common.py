"""What the peer runners share (numpy and pandas only: this runs in each peer's own virtualenv).

A runner is started by :mod:`benchmarks.raw_fidelity` with the peer's interpreter::

    PEER/bin/python benchmarks/peers/run_smartnoise.py --data T.csv --kinds T-kinds.json \
        --method mst --epsilon 1 --delta 1e-6 --seed 1 --out OUT.csv --meta OUT.json

``T-kinds.json`` (written by raw_fidelity from rhosynth's schema draft) names the columns the
draft keeps, each ``categorical`` or ``continuous``, whether it is an integer, and for dates and
timestamps the draft's format. :func:`read_input` turns the raw CSV into what the peers take:
categories as strings, numbers as float64 (integers too: dpmm's bin edges collide on integer
dtypes and its inverse transform cannot put NaN back into an int64 column), dates and timestamps
as days since 1970-01-01 (float; neither peer's MST or AIM takes a datetime column), missing
values as NaN. :func:`write_output` converts back (integers rounded, days to ISO dates or
timestamps) and writes the synthetic CSV; :func:`write_meta` writes the timing JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

EPOCH = pd.Timestamp("1970-01-01")
DAY = pd.Timedelta(days=1)


def parser(description: str, methods: tuple[str, ...]) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--data", required=True, type=Path, help="the raw CSV")
    ap.add_argument("--kinds", required=True, type=Path, help="the column kinds JSON")
    ap.add_argument("--method", required=True, choices=methods)
    ap.add_argument("--epsilon", required=True, type=float, help="the whole release's ε")
    ap.add_argument("--delta", required=True, type=float, help="the whole release's δ")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--preprocessor-share",
        type=float,
        default=0.1,
        help="the share of ε spent on the peer's DP preprocessing (bounds, bins)",
    )
    ap.add_argument("--out", required=True, type=Path, help="the synthetic CSV")
    ap.add_argument("--meta", required=True, type=Path, help="the timing JSON")
    return ap


def read_kinds(path: Path) -> dict[str, Any]:
    kinds: dict[str, Any] = json.loads(path.read_text())
    return kinds


def read_input(data: Path, kinds: dict[str, Any]) -> pd.DataFrame:
    """The kept columns of the raw CSV, typed for the peers (see the module docstring)."""
    names = [c["name"] for c in kinds["columns"]]
    raw = pd.read_csv(
        data,
        usecols=names,
        dtype=str,
        keep_default_na=False,
        na_values=kinds["missing_values"],
    )
    out: dict[str, pd.Series] = {}
    for column in kinds["columns"]:
        name = column["name"]
        values = raw[name].str.strip()
        if column["temporal"] is not None:
            stamps = pd.to_datetime(values, format=column["format"], errors="coerce")
            out[name] = (stamps - EPOCH) / DAY
        elif column["kind"] == "continuous":
            out[name] = pd.to_numeric(values, errors="coerce").astype("float64")
        else:
            out[name] = values.astype(object).where(values.notna(), np.nan)
    return pd.DataFrame(out, columns=names)


def to_output(synthetic: pd.DataFrame, kinds: dict[str, Any]) -> pd.DataFrame:
    """The peer's synthetic frame in the raw table's value space (post-processing only)."""
    out: dict[str, pd.Series] = {}
    for column in kinds["columns"]:
        name = column["name"]
        if name not in synthetic.columns:
            continue  # counted as missing by the metrics
        values = synthetic[name]
        if column["temporal"] is not None:
            days = pd.to_numeric(values, errors="coerce").astype("float64")
            stamps = EPOCH + pd.to_timedelta(days, unit="D")
            out[name] = stamps.dt.strftime(column["format"])  # the input's own spelling
        elif column["kind"] == "continuous":
            number = pd.to_numeric(values, errors="coerce").astype("float64")
            out[name] = number.round().astype("Int64") if column["integer"] else number
        else:
            out[name] = values
    return pd.DataFrame(out)


def peak_memory_mib() -> dict[str, float]:
    """This process's peak RSS (VmHWM) and the largest peak of its waited-for children, MiB."""
    self_kib = float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    self_kib = float(line.split()[1])
    except OSError:
        pass
    children_kib = float(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"peak_rss_mib": self_kib / 1024, "children_peak_rss_mib": children_kib / 1024}


def run(
    description: str,
    system: str,
    methods: tuple[str, ...],
    version: Callable[[], str],
    synthesize: Callable[[pd.DataFrame, dict[str, Any], argparse.Namespace], pd.DataFrame],
) -> None:
    """Parse the command line, read the input, time ``synthesize`` (fit and sample, the peer's
    own work), write the synthetic CSV and the timing JSON."""
    args = parser(description, methods).parse_args()
    started = time.perf_counter()
    kinds = read_kinds(args.kinds)
    frame = read_input(args.data, kinds)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    synthetic = synthesize(frame, kinds, args)
    synth_s = time.perf_counter() - started
    if len(synthetic) != len(frame):
        raise SystemExit(f"{system} returned {len(synthetic)} rows for {len(frame)}")
    started = time.perf_counter()
    tmp = args.out.with_name(args.out.name + ".part")
    to_output(synthetic, kinds).to_csv(tmp, index=False)
    tmp.replace(args.out)
    write_s = time.perf_counter() - started
    meta = {
        "system": system,
        "method": args.method,
        "version": version(),
        "epsilon": args.epsilon,
        "delta": args.delta,
        "seed": args.seed,
        "preprocessor_share": args.preprocessor_share,
        "rows": len(frame),
        "columns": list(frame.columns),
        "missing_columns": [c for c in frame.columns if c not in synthetic.columns],
        "read_s": read_s,
        "synth_s": synth_s,
        "write_s": write_s,
        "python": platform.python_version(),
        **peak_memory_mib(),
    }
    args.meta.write_text(json.dumps(meta, indent=2))
    print(json.dumps(meta), file=sys.stderr)
