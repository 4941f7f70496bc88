"""Raw-table fidelity against peers (issue 23 §5): values, not bins, of rhosynth's releases and of
smartnoise-synth's and dpmm's, scored by one metric function.

Systems (``--systems``): ``rhosynth-mst``, ``rhosynth-aim`` (the upload's code path in-process, as
benchmarks/raw_tables.py drives it: ``rhosynth schema draft`` accepted as is, then
:func:`app.datasets.discovery.discover_and_resolve`, :func:`app.datasets.ingest.ingest_table`,
the method with default parameters, and the download's decoding,
:func:`engine.tables.synthetic_output.write_synthetic`); ``smartnoise-mst``, ``smartnoise-aim``,
``dpmm-mst``, ``dpmm-aim`` (benchmarks/peers/run_smartnoise.py and run_dpmm.py, each with the
peer's own virtualenv, ``--peers``; see ../shared/bench/peers/README.md). Every run is a child
process, stopped at ``--time-limit`` minutes (its process group is killed and the run reported as
not finished), and measures its own time and peak memory.

Budget: each release is (ε, 1e-6)-DP in all. rhosynth: the dataset's budget is
``rho_from_epsilon_delta(ε, 5e-7)`` and ``budget_delta = 5e-7`` (open-set category discovery's δ);
discovery takes its default share of ρ and the method the rest (rows out: the real row count, as an
analyst may ask). Peers: (ε, 1e-6) with a tenth of ε for their DP preprocessing (bounds, bins), by
basic composition (``<peer>-pre<share>``, e.g. ``dpmm-mst-pre0.5``, gives it another share). The
peers get the columns the draft keeps, categorical or continuous as the draft says (dates and
timestamps as days since 1970-01-01, continuous, converted back; integers as floats, rounded back),
and sample as many rows as the real table has.

Outputs are cached in ``--out`` (default ../peers-out, outside the checkout) as
``<system>-<table>-eps<ε>-seed<s>.{parquet,csv}`` with a ``.json`` of times (and ``.log``); a
cached run is reused unless ``--rerun``; metrics are recomputed from the cached outputs every time
(``--cached-only`` runs nothing new). Metrics: :func:`fidelity` and :func:`ml_efficacy`, defined
below, on the columns the draft keeps.

    nice -n 10 python -m benchmarks.raw_fidelity --data ../shared/data/raw --time-limit 30 \
        --update docs/benchmarks.md --json ../peers-out/raw_fidelity.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from fractions import Fraction
from itertools import combinations
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
from scipy import stats

from benchmarks.sections import git_commit, markdown_table

BEGIN = "<!-- raw-fidelity:begin (benchmarks/raw_fidelity.py) -->"
END = "<!-- raw-fidelity:end -->"
HEADING = "## Raw-table fidelity (issue 23 §5)"

TOTAL_DELTA = 1e-6
DISCOVERY_DELTA = Decimal("5e-7")
METHOD_DELTA = Decimal("5e-7")
TARGETS = {"diamonds": "price", "loans": "interest_rate", "flights": "arr_delay"}
"""The ML efficacy target per table (regression)."""
RARE_SHARE = 0.01
"""In 2-way TVDs, categories below this share of the real rows are grouped into one bin."""
TEST_SHARE = 0.2
SPLIT_SEED = 0
ML_MAX_CATEGORIES = 250
"""HistGradientBoosting's categorical features take at most 255 categories: the most frequent
real ones are kept, the rest read as missing."""
EPOCH = pd.Timestamp("1970-01-01")
DAY = pd.Timedelta(days=1)

Kind = Literal["numeric", "date", "categorical"]


# --------------------------------------------------------------------------------------------
# Systems and column kinds


PEER_SHARE = 0.1
"""The share of ε the peers spend on DP preprocessing (bounds, bins), as their docs suggest."""


@dataclass(frozen=True)
class System:
    name: str
    family: Literal["rhosynth", "smartnoise", "dpmm"]
    method: Literal["mst", "aim"]
    share: float = PEER_SHARE

    @property
    def suffix(self) -> str:
        return "parquet" if self.family == "rhosynth" else "csv"

    @property
    def runner(self) -> Path:
        return Path(__file__).resolve().parent / "peers" / f"run_{self.family}.py"

    @property
    def venv(self) -> str:
        return {"smartnoise": "sn", "dpmm": "dpmm"}[self.family]


SYSTEMS = {
    s.name: s
    for s in (
        System("rhosynth-mst", "rhosynth", "mst"),
        System("rhosynth-aim", "rhosynth", "aim"),
        System("smartnoise-mst", "smartnoise", "mst"),
        System("smartnoise-aim", "smartnoise", "aim"),
        System("dpmm-mst", "dpmm", "mst"),
        System("dpmm-aim", "dpmm", "aim"),
    )
}


def system(name: str) -> System:
    """A system by name; a peer's name may end in ``-pre<share>``: the same peer with that share
    of ε for its DP preprocessing instead of :data:`PEER_SHARE` (``dpmm-mst-pre0.5``)."""
    if name in SYSTEMS:
        return SYSTEMS[name]
    base, _, share = name.rpartition("-pre")
    if base in SYSTEMS and SYSTEMS[base].family != "rhosynth":
        with contextlib.suppress(ValueError):
            value = float(share)
            if 0 < value < 1:
                peer = SYSTEMS[base]
                return System(name, peer.family, peer.method, value)
    raise ValueError(
        f"unknown system {name!r}; known: {', '.join(SYSTEMS)} (peers also -pre<share>)"
    )


@dataclass(frozen=True)
class ColumnKind:
    """How the metrics read one kept column: ``numeric`` (every real value is a number: small
    integer codes stay numeric), ``date`` (the draft's date or datetime, read with its format and
    compared as days since 1970-01-01 at the format's resolution) or ``categorical``."""

    name: str
    kind: Kind
    format: str | None = None


@dataclass(frozen=True)
class TableKinds:
    """A table's kept columns as the metrics read them, and as the peers are given them."""

    columns: tuple[ColumnKind, ...]
    missing_values: tuple[str, ...]
    peers: dict[str, Any]


def draft_kinds(path: Path) -> TableKinds:
    """The kept columns of rhosynth's draft of ``path`` (accepted as is), for metrics and peers."""
    from engine.schema_draft import draft_schema

    draft = draft_schema(path)
    kept = [c.entry for c in draft.columns if c.entry.get("type") != "ignore"]
    missing = tuple(draft.missing_values)
    raw = read_raw(path, [e["name"] for e in kept], missing)
    columns = []
    peers = []
    for entry in kept:
        name, kind = entry["name"], entry.get("type")
        if kind in ("date", "datetime"):
            columns.append(ColumnKind(name, "date", entry["format"]))
            peers.append(
                {
                    "name": name,
                    "kind": "continuous",
                    "integer": False,
                    "temporal": kind,
                    "format": entry["format"],
                }
            )
            continue
        values = raw[name].dropna()
        numeric = bool(len(values)) and bool(pd.to_numeric(values, errors="coerce").notna().all())
        columns.append(ColumnKind(name, "numeric" if numeric else "categorical"))
        continuous = kind == "numeric"
        peers.append(
            {
                "name": name,
                "kind": "continuous" if continuous else "categorical",
                "integer": bool(continuous and entry.get("integer", False)),
                "temporal": None,
                "format": None,
            }
        )
    peer_kinds = {"table": path.stem, "missing_values": list(missing), "columns": peers}
    return TableKinds(tuple(columns), missing, peer_kinds)


def read_raw(path: Path, names: Sequence[str], missing_values: Iterable[str]) -> pd.DataFrame:
    """The named columns of a raw CSV as stripped strings, the draft's missing spellings as NA."""
    frame = pd.read_csv(
        path, usecols=list(names), dtype=str, keep_default_na=False, na_values=list(missing_values)
    )
    return frame.apply(lambda s: s.str.strip())[list(names)]


def canonical(frame: pd.DataFrame, kinds: Sequence[ColumnKind]) -> pd.DataFrame:
    """``frame`` (raw strings, a peer's CSV or rhosynth's typed Parquet) as the metrics read it:
    numeric and date columns float64 (dates as days since 1970-01-01, truncated to the draft
    format's resolution), categories as stripped strings, missing as NaN. Columns ``frame`` lacks
    are left out (the metrics count them as worst)."""
    out: dict[str, pd.Series] = {}
    for column in kinds:
        if column.name not in frame.columns:
            continue
        values = frame[column.name]
        if column.kind == "date":
            assert column.format is not None
            if pd.api.types.is_datetime64_any_dtype(values):
                stamps = pd.Series(values)
            else:
                text = values.astype("string")
                stamps = pd.to_datetime(text, format=column.format, errors="coerce")
            # Every system at the resolution the real column is written at (a month, a second).
            stamps = pd.to_datetime(
                stamps.dt.strftime(column.format), format=column.format, errors="coerce"
            )
            out[column.name] = ((stamps - EPOCH) / DAY).astype("float64")
        elif column.kind == "numeric":
            if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
                values = pd.to_numeric(values.astype("string"), errors="coerce")
            out[column.name] = pd.Series(
                values.to_numpy(dtype="float64", na_value=np.nan), index=frame.index
            )
        else:
            text = values.astype("string").str.strip()
            out[column.name] = pd.Series(text.to_numpy(dtype=object, na_value=np.nan))
    return pd.DataFrame(out)


def read_synthetic(path: Path, kinds: Sequence[ColumnKind]) -> pd.DataFrame:
    if path.suffix == ".parquet":
        frame = pq.read_table(path).to_pandas(date_as_object=False)
    else:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_values=[""])
    return canonical(frame, kinds)


# --------------------------------------------------------------------------------------------
# Metrics (one definition for every system)


@dataclass
class Fidelity:
    """One synthetic table against the real one, on the kept columns (see :func:`fidelity`)."""

    outside: dict[str, float] = field(default_factory=dict)
    ks: dict[str, float] = field(default_factory=dict)
    category_tvd: dict[str, float] = field(default_factory=dict)
    missing_gap: dict[str, float] = field(default_factory=dict)
    correlation_diff: float | None = None
    correlation_pairs: int = 0
    pair_tvd: float | None = None
    pairs: int = 0
    missing_columns: list[str] = field(default_factory=list)

    @property
    def outside_worst(self) -> tuple[str, float] | None:
        if not self.outside:
            return None
        name = max(self.outside, key=lambda k: self.outside[k])
        return name, self.outside[name]

    @property
    def outside_mean(self) -> float | None:
        return _mean(self.outside.values())

    @property
    def ks_mean(self) -> float | None:
        return _mean(self.ks.values())

    @property
    def category_tvd_mean(self) -> float | None:
        return _mean(self.category_tvd.values())

    @property
    def missing_gap_mean(self) -> float | None:
        return _mean(self.missing_gap.values())

    def summary(self) -> dict[str, Any]:
        worst = self.outside_worst
        return {
            "outside_worst_column": worst[0] if worst else None,
            "outside_worst": worst[1] if worst else None,
            "outside_mean": self.outside_mean,
            "ks_mean": self.ks_mean,
            "category_tvd_mean": self.category_tvd_mean,
            "missing_gap_mean": self.missing_gap_mean,
            "correlation_diff": self.correlation_diff,
            "correlation_pairs": self.correlation_pairs,
            "pair_tvd": self.pair_tvd,
            "pairs": self.pairs,
            "missing_columns": self.missing_columns,
            "per_column": {
                "outside": self.outside,
                "ks": self.ks,
                "category_tvd": self.category_tvd,
                "missing_gap": self.missing_gap,
            },
        }


def _mean(values: Iterable[float]) -> float | None:
    items = list(values)
    return float(np.mean(items)) if items else None


def outside_share(real: pd.Series, synth: pd.Series) -> float:
    """The share of the synthetic column's non-missing values outside the real [min, max]
    (0 when it has none: the KS statistic then counts it as worst)."""
    values = synth.dropna().to_numpy()
    truth = real.dropna().to_numpy()
    if not len(values) or not len(truth):
        return 0.0
    return float(np.mean((values < truth.min()) | (values > truth.max())))


def ks_statistic(real: pd.Series, synth: pd.Series) -> float:
    """The two-sample Kolmogorov–Smirnov statistic of the non-missing values (1 when either
    side has none)."""
    a, b = real.dropna().to_numpy(), synth.dropna().to_numpy()
    if not len(a) or not len(b):
        return 1.0
    return float(stats.ks_2samp(a, b).statistic)


def category_tvd(real: pd.Series, synth: pd.Series) -> float:
    """Total-variation distance between the distributions of non-missing categories (1 when
    either side has none)."""
    p = real.dropna().value_counts(normalize=True)
    q = synth.dropna().value_counts(normalize=True)
    if p.empty or q.empty:
        return 1.0
    joined = pd.concat([p, q], axis=1).fillna(0.0).to_numpy()
    return float(0.5 * np.abs(joined[:, 0] - joined[:, 1]).sum())


def missing_gap(real: pd.Series, synth: pd.Series) -> float:
    """|real missing rate − synthetic missing rate|."""
    return abs(float(real.isna().mean()) - float(synth.isna().mean()))


def spearman_diff(
    real: pd.DataFrame, synth: pd.DataFrame, names: Sequence[str]
) -> tuple[float | None, int]:
    """Mean |Spearman ρ_real − ρ_synth| over the pairs of ``names`` (pairwise-complete rows),
    and the number of pairs. Pairs whose real correlation is undefined (a constant column) are
    left out; an undefined synthetic one counts as 0; a pair with a column the synthetic table
    lacks counts as 1 + |ρ_real| (the worst)."""
    if len(names) < 2:
        return None, 0
    rc = real[list(names)].corr(method="spearman")
    present = [n for n in names if n in synth.columns]
    sc = synth[present].corr(method="spearman") if len(present) >= 2 else pd.DataFrame()
    diffs = []
    for a, b in combinations(names, 2):
        r = rc.loc[a, b]
        if not np.isfinite(r):
            continue
        if a not in synth.columns or b not in synth.columns:
            diffs.append(1.0 + abs(r))
            continue
        s = sc.loc[a, b]
        diffs.append(abs(r - (s if np.isfinite(s) else 0.0)))
    return (float(np.mean(diffs)) if diffs else None), len(diffs)


def real_bins(real: pd.Series, kind: Kind) -> tuple[Any, int]:
    """How :func:`bin_codes` cuts a column: a numeric or date column at the real deciles (bins
    ``0..len(edges)``), categories as themselves with those under :data:`RARE_SHARE` of the real
    rows grouped; missing values get the last bin. Returns (edges or category list, bin count)."""
    if kind == "categorical":
        shares = real.dropna().value_counts() / len(real)
        kept = sorted(str(v) for v in shares[shares >= RARE_SHARE].index)
        return kept, len(kept) + 2  # + the rare group + missing
    values = real.dropna().to_numpy()
    edges = np.unique(np.quantile(values, np.linspace(0.1, 0.9, 9))) if len(values) else []
    return np.asarray(edges, dtype="float64"), len(edges) + 2  # + missing


def bin_codes(values: pd.Series, kind: Kind, cut: Any, size: int) -> np.ndarray:
    """``values`` as bin indices ``0..size-1`` (see :func:`real_bins`); missing → ``size - 1``."""
    missing = values.isna().to_numpy()
    if kind == "categorical":
        index = {c: i for i, c in enumerate(cut)}
        codes = np.fromiter(
            (index.get(v, len(cut)) for v in values.to_numpy()), dtype=np.int64, count=len(values)
        )
    else:
        codes = np.searchsorted(cut, values.to_numpy(dtype="float64"), side="right")
    codes = codes.astype(np.int64)
    codes[missing] = size - 1
    return codes


def pair_tvd(
    real: pd.DataFrame, synth: pd.DataFrame, kinds: Sequence[ColumnKind]
) -> tuple[float | None, int]:
    """Mean 2-way TVD over every pair of kept columns, each cut by :func:`real_bins` (the same
    cuts for both tables); a pair with a column the synthetic table lacks counts as 1."""
    cuts = {c.name: real_bins(real[c.name], c.kind) for c in kinds}
    real_codes = {c.name: bin_codes(real[c.name], c.kind, *cuts[c.name]) for c in kinds}
    synth_codes = {
        c.name: bin_codes(synth[c.name], c.kind, *cuts[c.name])
        for c in kinds
        if c.name in synth.columns
    }
    tvds = []
    for a, b in combinations([c.name for c in kinds], 2):
        if a not in synth_codes or b not in synth_codes:
            tvds.append(1.0)
            continue
        size = cuts[a][1] * cuts[b][1]
        p = np.bincount(real_codes[a] * cuts[b][1] + real_codes[b], minlength=size) / len(real)
        q = np.bincount(synth_codes[a] * cuts[b][1] + synth_codes[b], minlength=size)
        q = q / max(1, len(synth))
        tvds.append(0.5 * float(np.abs(p - q).sum()))
    return (float(np.mean(tvds)) if tvds else None), len(tvds)


def fidelity(real: pd.DataFrame, synth: pd.DataFrame, kinds: Sequence[ColumnKind]) -> Fidelity:
    """Every metric but ML efficacy, of ``synth`` against ``real`` (both as :func:`canonical`
    gives them). A kept column the synthetic table lacks counts as worst in each metric: 1 for a
    share, a KS statistic, a TVD or a missing-rate gap."""
    result = Fidelity()
    for column in kinds:
        name = column.name
        if name not in synth.columns:
            result.missing_columns.append(name)
            result.missing_gap[name] = 1.0
            if column.kind == "categorical":
                result.category_tvd[name] = 1.0
            else:
                result.outside[name] = 1.0
                result.ks[name] = 1.0
            continue
        result.missing_gap[name] = missing_gap(real[name], synth[name])
        if column.kind == "categorical":
            result.category_tvd[name] = category_tvd(real[name], synth[name])
        else:
            result.outside[name] = outside_share(real[name], synth[name])
            result.ks[name] = ks_statistic(real[name], synth[name])
    numbers = [c.name for c in kinds if c.kind != "categorical"]
    result.correlation_diff, result.correlation_pairs = spearman_diff(real, synth, numbers)
    result.pair_tvd, result.pairs = pair_tvd(real, synth, kinds)
    return result


def holdout_mask(rows: int, seed: int = SPLIT_SEED) -> np.ndarray:
    """The real rows held out for ML efficacy: a fixed random :data:`TEST_SHARE` of them."""
    order = np.random.default_rng(seed).permutation(rows)
    mask = np.zeros(rows, dtype=bool)
    mask[order[: round(TEST_SHARE * rows)]] = True
    return mask


def _features(
    frame: pd.DataFrame,
    kinds: Sequence[ColumnKind],
    target: str,
    categories: Mapping[str, list[str]],
) -> pd.DataFrame:
    out: dict[str, pd.Series] = {}
    for column in kinds:
        if column.name == target:
            continue
        if column.name in frame.columns:
            values = frame[column.name]
        else:  # a column the synthetic table lacks: all missing
            values = pd.Series(np.nan, index=frame.index, dtype=object)
        if column.kind == "categorical":
            known = categories[column.name]
            values = values.where(values.isin(known))  # the rest read as missing
            out[column.name] = pd.Series(
                pd.Categorical(values, categories=known), index=frame.index
            )
        else:
            out[column.name] = values.astype("float64")
    return pd.DataFrame(out, index=frame.index)


def ml_efficacy(
    real: pd.DataFrame,
    train: pd.DataFrame | None,
    kinds: Sequence[ColumnKind],
    target: str,
    seed: int = SPLIT_SEED,
) -> float | None:
    """R² on the held-out real rows (:func:`holdout_mask`) of scikit-learn's
    HistGradientBoostingRegressor (default parameters, categorical features native) trained on
    ``train`` to predict ``target`` from the other kept columns; ``train=None`` trains on the
    other 80 % of the real rows (the baseline). Rows with a missing target are dropped. None when
    the training table has no target values (the column missing or all missing)."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.metrics import r2_score

    mask = holdout_mask(len(real), seed)
    test = real[mask]
    if train is None:
        train = real[~mask]
    if target not in train.columns:
        return None
    categories = {
        c.name: [
            str(v) for v in real[c.name].dropna().value_counts().index[:ML_MAX_CATEGORIES].tolist()
        ]
        for c in kinds
        if c.kind == "categorical" and c.name != target
    }
    train = train[train[target].notna()]
    test = test[test[target].notna()]
    if len(train) < 2 or len(test) < 2:
        return None
    model = HistGradientBoostingRegressor(random_state=seed, categorical_features="from_dtype")
    model.fit(_features(train, kinds, target, categories), train[target].astype("float64"))
    predicted = model.predict(_features(test, kinds, target, categories))
    return float(r2_score(test[target].astype("float64"), predicted))


# --------------------------------------------------------------------------------------------
# Running the systems (each run a child process)


def run_key(system: str, table: str, epsilon: float, seed: int) -> str:
    return f"{system}-{table}-eps{epsilon:g}-seed{seed}"


@dataclass(frozen=True)
class Discovered:
    """A raw table after rhosynth's upload: the schema discovery resolved, the stored codes, the
    row count, and what discovery spent (ρ, δ) and left for the method (``method_rho``)."""

    schema: Any
    codes: np.ndarray
    rows: int
    total_rho: Decimal
    discovery_rho: Decimal
    discovery_delta: Decimal
    method_rho: Fraction


def discovered(
    path: Path, draft: Any, epsilon: float, noise: random.Random | None = None
) -> Discovered:
    """The upload as the service does it: ``draft`` (the schema draft, accepted as is) resolved
    by discovery under (ε, 1e-6), then ingested; raises UploadRejected as the upload would.
    ``noise`` (benchmarks only) fixes discovery's noise for paired comparisons."""
    from app.datasets.discovery import discover_and_resolve
    from app.datasets.ingest import IngestLimits, ingest_table, read_encoded_table
    from engine.accounting import rho_from_epsilon_delta
    from engine.tables.encoding import SchemaSpec

    limits = IngestLimits(max_columns=1000, max_rows=100_000_000, max_cell_bytes=1024)
    total = rho_from_epsilon_delta(Decimal(str(epsilon)), METHOD_DELTA)
    outcome = discover_and_resolve(
        path,
        SchemaSpec.from_json(draft.to_json()),
        limits,
        budget_rho=total,
        budget_delta=DISCOVERY_DELTA,
        discovery_rho=None,
        noise=noise,
    )
    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / "table.arrow"
        rows = ingest_table(path, outcome.schema, target, limits)
        codes = read_encoded_table(target, outcome.schema, narrow=True)
    return Discovered(
        outcome.schema,
        codes,
        rows,
        total,
        outcome.rho,
        outcome.delta,
        Fraction(total) - Fraction(outcome.rho),
    )


def rhosynth_child(spec: dict[str, Any]) -> None:
    """One rhosynth release in this process (``--child``): draft → discovery → ingest → method
    → decode, writing ``spec["out"]`` (Parquet) and ``spec["meta"]`` (JSON)."""
    from app.datasets.ingest import UploadRejected
    from engine.domain import Dataset
    from engine.mechanisms import MECHANISMS
    from engine.schema_draft import draft_schema
    from engine.tables.synthetic_output import write_synthetic

    path, out, meta_path = Path(spec["data"]), Path(spec["out"]), Path(spec["meta"])
    epsilon, seed, method = float(spec["epsilon"]), int(spec["seed"]), str(spec["method"])
    meta: dict[str, Any] = {
        "system": f"rhosynth-{method}",
        "method": method,
        "version": f"rhosynth {git_commit(length=7)}",
        "epsilon": epsilon,
        "delta": TOTAL_DELTA,
        "seed": seed,
    }
    started = time.perf_counter()
    draft = draft_schema(path)
    meta["draft_s"] = time.perf_counter() - started
    started = time.perf_counter()
    # A "noise_seed" fixes the DP noise of discovery and of the method (paired comparisons of
    # two versions of the code: not DP, a benchmark's way to hold the noise fixed).
    noise_seed = spec.get("noise_seed")
    noise = None if noise_seed is None else random.Random(int(noise_seed))  # noqa: S311
    try:
        upload = discovered(path, draft, epsilon, noise)
    except UploadRejected as rejected:
        meta.update(status="refused", error=f"422 {rejected.message}")
        meta_path.write_text(json.dumps(meta, indent=2))
        return
    schema, codes = upload.schema, upload.codes
    meta["upload_s"] = time.perf_counter() - started
    mechanism = MECHANISMS[method]
    codes.flags.writeable = False
    rng = np.random.default_rng(seed)  # post-processing only, as the worker seeds it
    started = time.perf_counter()
    result = mechanism.run(
        Dataset(schema.domain(), codes),
        upload.method_rho,
        mechanism.Params(),
        rng=rng,
        rows=upload.rows,
        noise_source=noise,
    )
    meta["job_s"] = time.perf_counter() - started
    started = time.perf_counter()
    partial = out.with_name(out.name + ".part")
    write_synthetic(schema, result.codes, rng, partial, "parquet")
    partial.replace(out)
    meta["decode_s"] = time.perf_counter() - started
    meta["synth_s"] = meta["draft_s"] + meta["upload_s"] + meta["job_s"] + meta["decode_s"]
    meta.update(
        status="ok",
        rows=upload.rows,
        total_rho=str(upload.total_rho),
        discovery_rho=str(upload.discovery_rho.normalize()),
        discovery_delta=f"{upload.discovery_delta:.3g}",
        method_rho=f"{float(upload.method_rho):.6f}",
        peak_rss_mib=_peak_rss_mib(),
    )
    meta_path.write_text(json.dumps(meta, indent=2))


def _peak_rss_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class RunSettings:
    data: Path
    out: Path
    peers: Path
    seed: int
    time_limit_s: float
    rerun: bool
    cached_only: bool


def run_system(
    system: System, table: str, epsilon: float, kinds_path: Path, settings: RunSettings
) -> dict[str, Any]:
    """The run's timing JSON (cached unless ``rerun``), running it first if needed."""
    stem = run_key(system.name, table, epsilon, settings.seed)
    out = settings.out / f"{stem}.{system.suffix}"
    meta_path = settings.out / f"{stem}.json"
    if meta_path.exists() and not settings.rerun:
        meta: dict[str, Any] = json.loads(meta_path.read_text())
        status = meta.get("status")
        reusable = (
            (status == "ok" and out.exists())
            or status in ("refused", "failed")
            or (status == "timeout" and meta.get("limit_s", 0) >= settings.time_limit_s)
        )
        if reusable or settings.cached_only:
            return meta
    if settings.cached_only:
        return {"status": "not run"}
    out.unlink(missing_ok=True)
    meta_path.unlink(missing_ok=True)
    data = settings.data / f"{table}.csv"
    if system.family == "rhosynth":
        spec = {
            "data": str(data.resolve()),
            "method": system.method,
            "epsilon": epsilon,
            "seed": settings.seed,
            "out": str(out.resolve()),
            "meta": str(meta_path.resolve()),
        }
        command = [sys.executable, "-m", "benchmarks.raw_fidelity", "--child", json.dumps(spec)]
    else:
        python = settings.peers / system.venv / "bin" / "python"
        command = [
            str(python),
            str(system.runner),
            "--data",
            str(data),
            "--kinds",
            str(kinds_path),
            "--method",
            system.method,
            "--epsilon",
            f"{epsilon:g}",
            "--delta",
            f"{TOTAL_DELTA:g}",
            "--seed",
            str(settings.seed),
            "--preprocessor-share",
            f"{system.share:g}",
            "--out",
            str(out),
            "--meta",
            str(meta_path),
        ]
    log = settings.out / f"{stem}.log"
    print(f"[raw_fidelity] {stem}: {shlex.join(command)}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    with open(log, "wb") as handle:
        process = subprocess.Popen(  # noqa: S603 - our own argv, no shell
            command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = process.wait(timeout=settings.time_limit_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the run's own process group
            process.wait()
            code = None
    wall = time.perf_counter() - started
    if code is None:
        meta = {"status": "timeout", "limit_s": settings.time_limit_s, "wall_s": wall}
    elif code != 0 or not meta_path.exists():
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        meta = {"status": "failed", "returncode": code, "wall_s": wall, "error": "\n".join(tail)}
    else:
        meta = json.loads(meta_path.read_text())
        meta.setdefault("status", "ok")
        meta["wall_s"] = wall
    meta.update(system=system.name, table=table, epsilon=epsilon, seed=settings.seed)
    if system.family != "rhosynth":
        meta["kinds"] = json.loads(kinds_path.read_text())
    meta_path.write_text(json.dumps(meta, indent=2))
    print(f"[raw_fidelity] {stem}: {meta['status']} in {wall:.1f} s", file=sys.stderr, flush=True)
    return meta


# --------------------------------------------------------------------------------------------
# Scoring and rendering


@dataclass
class Row:
    table: str
    epsilon: float
    system: str
    status: str
    synth_s: float | None = None
    wall_s: float | None = None
    peak_rss_mib: float | None = None
    ml_r2: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


def score_runs(
    table: str,
    real: pd.DataFrame,
    kinds: TableKinds,
    runs: Sequence[tuple[System, float, dict[str, Any]]],
    settings: RunSettings,
    ml: bool | Sequence[float],
) -> tuple[list[Row], float | None]:
    """Metrics of each run; ML efficacy for every run (``ml`` true), none, or only the runs at
    the ε in ``ml`` (it is the slowest metric)."""
    target = TARGETS.get(table)
    columns = kinds.columns
    baseline = ml_efficacy(real, None, columns, target) if ml and target else None
    rows = []
    for system, epsilon, meta in runs:
        status = meta.get("status", "not run")
        row = Row(table, epsilon, system.name, status, meta=meta)
        if status == "ok":
            stem = run_key(system.name, table, epsilon, settings.seed)
            synth = read_synthetic(settings.out / f"{stem}.{system.suffix}", columns)
            row.metrics = fidelity(real, synth, columns).summary()
            wanted = ml is True or (not isinstance(ml, bool) and epsilon in ml)
            row.ml_r2 = ml_efficacy(real, synth, columns, target) if wanted and target else None
            row.synth_s = meta.get("synth_s")
            row.wall_s = meta.get("wall_s")
            peaks = [meta.get("peak_rss_mib"), meta.get("children_peak_rss_mib")]
            row.peak_rss_mib = max((p for p in peaks if p is not None), default=None)
            if system.family != "rhosynth" and meta.get("kinds") != kinds.peers:
                row.note = "peer given an older draft's column kinds (rerun with --rerun)"
        elif status == "timeout":
            row.note = f"did not finish in {meta['limit_s'] / 60:g} min"
        elif status in ("failed", "refused"):
            row.note = str(meta.get("error", "")).strip().splitlines()[-1][:300]
        rows.append(row)
        print(f"[raw_fidelity] scored {table} ε={epsilon:g} {system.name}", file=sys.stderr)
    return rows, baseline


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def render_table(rows: Sequence[Row]) -> list[str]:
    header = [
        "ε",
        "system",
        "outside range: worst column",
        "mean",
        "KS",
        "category TVD",
        "NA gap",
        "Spearman diff",
        "2-way TVD",
        "ML R²",
        "time s",
        "peak MiB",
    ]
    body = []
    for r in rows:
        m = r.metrics
        if r.status != "ok":
            body.append([f"{r.epsilon:g}", r.system, f"{r.status}: {r.note}", *[""] * 9])
            continue
        worst = (
            f"{_pct(m['outside_worst'])} ({m['outside_worst_column']})"
            if m["outside_worst_column"]
            else "–"
        )
        body.append(
            [
                f"{r.epsilon:g}",
                r.system + (f" ⚠ {r.note}" if r.note else ""),
                worst,
                _pct(m["outside_mean"]),
                _f(m["ks_mean"]),
                _f(m["category_tvd_mean"]),
                _f(m["missing_gap_mean"], 4),
                _f(m["correlation_diff"]),
                _f(m["pair_tvd"]),
                _f(r.ml_r2),
                _f(r.synth_s, 1),
                _f(r.peak_rss_mib, 0),
            ]
        )
    return markdown_table(header, body, "rllrrrrrrrrr")


def targets(rows: Sequence[Row], epsilon: float = 1.0) -> list[list[str]]:
    """Issue 23 §5's targets for each rhosynth method at ``epsilon``: no column above 1 % outside
    the real range; mean KS, 2-way TVD and ML R² better than the best finished peer run (either
    method), on the same table; at least 10× faster than both peers with the same method on the
    same table (a peer that did not finish counts at its time limit, a lower bound; a peer that
    failed or was not run is left out of the comparison and named)."""
    out = []
    every = [r for r in rows if r.epsilon == epsilon]
    for r in every:
        if not r.system.startswith("rhosynth"):
            continue
        at = [p for p in every if p.table == r.table]
        peers = [p for p in at if not p.system.startswith("rhosynth") and p.status == "ok"]
        if r.status != "ok":
            out.append([r.table, r.system, f"{r.status}", "not met", "not met", "not met", ""])
            continue
        m = r.metrics
        worst = m["outside_worst"] or 0.0
        cells = [r.table, r.system, f"{_pct(worst)}: {'met' if worst <= 0.01 else 'not met'}"]
        for key, better in (
            ("ks_mean", min),
            ("pair_tvd", min),
            ("ml_r2", max),
        ):
            mine = r.ml_r2 if key == "ml_r2" else m[key]
            theirs = [p.ml_r2 if key == "ml_r2" else p.metrics[key] for p in peers]
            theirs = [t for t in theirs if t is not None]
            if mine is None or not theirs:
                cells.append("n/a")
                continue
            best = better(theirs)
            won = mine < best if better is min else mine > best
            cells.append(f"{_f(mine)} vs {_f(best)}: {'met' if won else 'not met'}")
        method = r.system.split("-", 1)[1]
        ratios = []
        for family in ("smartnoise", "dpmm"):
            peer = next((p for p in at if p.system == f"{family}-{method}"), None)
            if peer is None or r.synth_s is None:
                ratios.append(f"{family}: n/a")
                continue
            if peer.status == "ok" and peer.synth_s is not None:
                ratios.append(f"{family} {peer.synth_s / r.synth_s:.1f}×")
            elif peer.status == "timeout":
                ratios.append(f"{family} > {peer.meta['limit_s'] / r.synth_s:.1f}× (DNF)")
            else:
                ratios.append(f"{family}: {peer.status}")
        compared = [
            family
            for family in ("smartnoise", "dpmm")
            if (peer := next((p for p in at if p.system == f"{family}-{method}"), None)) is not None
            and peer.status in ("ok", "timeout")
        ]
        fast = bool(compared) and all(_ratio_ok(f, at, method, r.synth_s) for f in compared)
        cells.append(", ".join(ratios) + f": {'met' if fast else 'not met'}")
        out.append(cells)
    return out


def _ratio_ok(family: str, rows: Sequence[Row], method: str, mine: float | None) -> bool:
    peer = next((p for p in rows if p.system == f"{family}-{method}"), None)
    if peer is None or mine is None:
        return False
    if peer.status == "ok" and peer.synth_s is not None:
        return peer.synth_s >= 10 * mine
    if peer.status == "timeout":
        return bool(peer.meta["limit_s"] >= 10 * mine)
    return False


def machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        kib = int(Path("/proc/meminfo").read_text().split("\n")[0].split()[1])
        memory = f", {kib / 1024**2:.0f} GiB RAM"
    return f"{os.cpu_count()} × {model}{memory}, {platform.system()} {platform.release()}"


def render(
    rows: Sequence[Row],
    baselines: Mapping[str, float | None],
    commands: Sequence[str],
    time_limit_min: float,
    kinds: Mapping[str, TableKinds],
) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    versions = sorted(
        {str(r.meta.get("version")) for r in rows if r.meta.get("version") and r.status == "ok"}
    )
    lines = [
        BEGIN,
        HEADING,
        "",
        f"Measured by `{commands[0]}`"
        + "".join(f", then `{c}`" for c in commands[1:])
        + f" on {now}, commit `{git_commit(length=7)}`, {machine()}, CPython "
        f"{platform.python_version()} (rhosynth). Versions: {', '.join(versions) or 'n/a'}. "
        "One seed; DP noise is fresh each run. Cached runs (../peers-out) are reused: the "
        "per-run JSON there records when and with which version each was made.",
        "",
        "**Budget.** Every release is (ε, 1e-6)-DP in all. rhosynth: the schema draft accepted "
        "as is; the dataset's budget is ρ = `rho_from_epsilon_delta(ε, 5e-7)` with "
        "`budget_delta = 5e-7` for open-set category discovery; discovery takes its default "
        "share of ρ, the method (default parameters) the rest; rows out = the real row count. "
        "smartnoise-synth 1.0.8 (`Synthesizer.create(m, epsilon=ε, delta=1e-6)`, "
        "`fit(..., preprocessor_eps=0.1·ε, nullable=True)`, the preprocessor's ε subtracted "
        "from ε) and dpmm 0.1.9 (`MSTPipeline`/`AIMPipeline(epsilon=0.9·ε, delta=1e-6, "
        "proc_epsilon=0.1·ε, disable_processing=False)`) each in its own virtualenv "
        "(../shared/bench/peers/README.md), driven by benchmarks/peers/run_*.py. The peers get "
        "the columns the draft keeps, categorical or continuous as the draft says; dates and "
        "timestamps as days since 1970-01-01 (continuous) written back in the input's format; "
        "integers as floats, rounded back. Both peers read category lists (and dpmm a fill "
        "value per nullable column and static columns) from the data without charge; rhosynth "
        "learns them with DP.",
        "",
        "**Metrics** (one function, `fidelity` and `ml_efficacy` in benchmarks/raw_fidelity.py, "
        "on the draft's kept columns; a column a system does not return counts as worst). "
        "*Outside range*: share of a column's synthetic values outside the real [min, max], "
        "numeric and date columns (dates at the resolution of their format): the worst column "
        "and the mean over columns. *KS*: mean two-sample Kolmogorov–Smirnov statistic over "
        "numeric and date columns (non-missing values). *Category TVD*: mean total-variation "
        "distance of the non-missing category distributions of the text columns (a column is "
        "numeric when every real value is a number: small integer codes count as numeric, not "
        "as categories). *NA gap*: mean |real − synthetic missing rate| over all kept columns. "
        "*Spearman diff*: mean absolute difference of the Spearman correlation matrices over "
        "numeric and date columns (pairwise-complete rows; pairs with a constant real column "
        "left out). *2-way TVD*: mean TVD over all pairs of kept columns, numeric and date "
        "columns cut at the real deciles, categories as themselves with those under 1 % of the "
        "real rows grouped, missing as its own bin. *ML R²*: scikit-learn's "
        "HistGradientBoostingRegressor (default parameters, native categories) trained on the "
        "synthetic table, tested on a fixed 20 % of the real rows (the synthesizers saw those "
        "rows too); *real* = trained on the other 80 %. Targets: "
        + ", ".join(f"{t} → {c}" for t, c in TARGETS.items())
        + ". *time s*: rhosynth's draft + upload (discovery, encoding) + job + decode, in one "
        "process; the peers' fit + sample (reading and converting the CSV excluded). *peak "
        "MiB*: the run's process peak RSS (VmHWM), including reading the table. Each run is "
        f"stopped after {time_limit_min:g} min.",
        "",
    ]
    for table in dict.fromkeys(r.table for r in rows):
        chosen = [r for r in rows if r.table == table]
        k = kinds[table]
        counts = {kind: sum(1 for c in k.columns if c.kind == kind) for kind in ("numeric", "date")}
        cats = len(k.columns) - counts["numeric"] - counts["date"]
        lines += [
            f"### {table}",
            "",
            f"{len(k.columns)} kept columns ({counts['numeric']} numeric, {counts['date']} date, "
            f"{cats} categorical); ML target `{TARGETS.get(table)}`, real baseline R² = "
            f"{_f(baselines.get(table))}.",
            "",
            *render_table(chosen),
            "",
        ]
    lines += [
        "### Issue 23 §5 targets at ε = 1",
        "",
        "Per table and rhosynth method: the worst column's share outside the real range "
        "(target ≤ 1 %); mean KS, 2-way TVD (lower is better) and ML R² (higher) against the "
        "best finished peer run of either method; time against each peer with the same method "
        "(target ≥ 10×).",
        "",
        *markdown_table(
            ["table", "system", "worst outside", "KS", "2-way TVD", "ML R²", "speed-up"],
            targets(rows),
            "lllllll",
        ),
        "",
    ]
    failed = [r for r in rows if r.status in ("failed", "refused")]
    if failed:
        lines += ["Runs that failed:", ""]
        for r in failed:
            lines.append(f"* {r.system}, {r.table}, ε = {r.epsilon:g}: `{r.note}`")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def update(document: Path, section: str) -> None:
    """Replace the section between :data:`BEGIN` and :data:`END` (appended if absent)."""
    text = document.read_text() if document.exists() else ""
    if BEGIN in text and END in text:
        head = text[: text.index(BEGIN)]
        tail = text[text.index(END) + len(END) :].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    document.write_text(text)


def _csv(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help="the raw tables' directory")
    parser.add_argument("--tables", default="diamonds,loans,flights")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--epsilons", default="0.3,1,3")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("../peers-out"), help="run cache")
    parser.add_argument("--peers", type=Path, default=Path("../peers"), help="peer virtualenvs")
    parser.add_argument("--time-limit", type=float, default=30.0, help="minutes per run")
    parser.add_argument("--rerun", action="store_true", help="ignore cached runs")
    parser.add_argument("--cached-only", action="store_true", help="run nothing new")
    parser.add_argument("--no-ml", action="store_true", help="skip ML efficacy")
    parser.add_argument(
        "--ml-epsilons", default=None, help="ML efficacy only at these ε (comma-separated)"
    )
    parser.add_argument(
        "--command",
        action="append",
        default=[],
        help="an earlier command line to name in the section (repeatable)",
    )
    parser.add_argument("--update", type=Path, default=None, help="rewrite this Markdown section")
    parser.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = parser.parse_args(raw)
    if args.child is not None:
        rhosynth_child(json.loads(args.child))
        return
    if args.data is None:
        parser.error("--data is required")
    try:
        systems = [system(s) for s in _csv(args.systems)]
    except ValueError as error:
        parser.error(str(error))
    epsilons = [float(e) for e in _csv(args.epsilons)]
    settings = RunSettings(
        data=args.data,
        out=args.out.resolve(),
        peers=args.peers.resolve(),
        seed=args.seed,
        time_limit_s=60 * args.time_limit,
        rerun=args.rerun,
        cached_only=args.cached_only,
    )
    (settings.out / "inputs").mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    baselines: dict[str, float | None] = {}
    table_kinds: dict[str, TableKinds] = {}
    for table in _csv(args.tables):
        path = args.data / f"{table}.csv"
        kinds = draft_kinds(path)
        table_kinds[table] = kinds
        kinds_path = settings.out / "inputs" / f"{table}-kinds.json"
        kinds_path.write_text(json.dumps(kinds.peers, indent=2))
        runs = [
            (system, epsilon, run_system(system, table, epsilon, kinds_path, settings))
            for epsilon in epsilons
            for system in systems
        ]
        real = canonical(
            read_raw(path, [c.name for c in kinds.columns], kinds.missing_values), kinds.columns
        )
        ml: bool | list[float] = not args.no_ml
        if ml and args.ml_epsilons is not None:
            ml = [float(e) for e in _csv(args.ml_epsilons)]
        scored, baselines[table] = score_runs(table, real, kinds, runs, settings, ml)
        rows += scored
    command = shlex.join(["python", "-m", "benchmarks.raw_fidelity", *raw])
    section = render(rows, baselines, [*args.command, command], args.time_limit, table_kinds)
    print(section)
    if args.update is not None:
        update(args.update, section)
    if args.json is not None:
        records = [
            {**asdict(r), "meta": {k: v for k, v in r.meta.items() if k != "kinds"}} for r in rows
        ]
        args.json.write_text(
            json.dumps({"baselines": baselines, "runs": records}, indent=2, default=str)
        )


if __name__ == "__main__":
    main()
