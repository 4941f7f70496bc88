"""The release tier of a quality report: what a release is worth, from DP outputs only.

Privacy claim. :func:`build_release_report` takes the public schema, the :class:`ReleaseRecord`
(the noisy measurements and charges the mechanism released and the ledger paid for), the
synthetic codes (a DP output) and optionally the fitted model's marginals (post-processing of the
noisy measurements). It has no parameter through which real data could enter, so every number it
returns is post-processing of DP outputs and costs no further ρ; every label comes from the schema
(:func:`engine.columns.labels.code_labels`). Rounding and ordering are deterministic: the same
inputs give the same report, byte for byte once serialised.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.accounting import epsilon_from_rho_delta
from engine.domain import Dataset
from engine.evaluation import DENSE_CELL_LIMIT
from engine.marginals import count_marginal
from engine.release.record import MeasuredMarginal, ReleaseRecord
from engine.reports.common import (
    MAX_CODES_SHOWN,
    MAX_DISTRIBUTION_COLUMNS,
    MAX_MATRIX_COLUMNS,
    REST_LABEL,
    TOP_PAIRS,
    FloatArray,
    cap_note,
    check_codes,
    column_labels,
    fold,
    matrix_columns,
    mutual_information,
    rounded,
    rounded_list,
    shares,
    shown_codes,
)
from engine.tables.encoding import TableSchema

ModelMarginal = Callable[[tuple[str, ...]], npt.NDArray[np.float64]]

MAX_MI_PAIRS = 600
"""Mutual information is computed for at most this many pairs: those of the first
:data:`MAX_MATRIX_COLUMNS` columns, then connected pairs."""
MAX_GROUP_LABELS = 3
"""A compressed measurement cell is labelled by its first few codes' labels and a count."""

EXPLANATIONS: dict[str, str] = {
    "rho": "The privacy budget this release spent, in zero-concentrated DP (ρ). Smaller is more "
    "private; the whole release, including this report, is covered by it.",
    "privacy_profile": "The same guarantee as (ε, δ)-differential privacy at several δ: for "
    "any two tables that differ in one row and any set S of outcomes, P[release ∈ S] ≤ e^ε · "
    "P[release' ∈ S] + δ. δ is the conversion's δ (from ρ to ε) plus the δ the dataset's "
    "discovery spent on its published domain (categories found in the data); ε is the "
    "conversion's at its δ. Smaller ε is more private; δ should be far below 1 / (number of "
    "rows).",
    "estimated_total": "The mechanism's noisy estimate of the number of rows (a DP number, not "
    "the exact count).",
    "sigma": "Standard deviation of the noise added to each cell of this measurement, in rows. "
    "Smaller means a more precise measurement.",
    "rho_share": "The part of the release's ρ this item used.",
    "expected_noise_tvd": "How far the noisy table is expected to be from the true one because "
    "of the noise alone: ½·σ·√(2/π)·cells / noisy total, on the TVD scale (0 = exact, 1 = "
    "completely different). Small (below 0.05) means the measurement is informative.",
    "model_residual_tvd": "TVD between the noisy measurement (negative cells set to 0, "
    "normalised) and the model's (or the synthetic rows') table on the same cells. Near the "
    "expected noise error means the model fits the measurement as well as the noise allows; "
    "much larger means the model could not match it.",
    "distribution": "Share of synthetic rows in each category or bin, beside the noisy measured "
    "share with a ±2σ/N̂ error bar (about 95% of noise draws fall inside). Bars inside the error "
    "bars agree with the measurement; noisy shares can be slightly negative because of noise.",
    "connected": "Pairs of columns measured together (or linked in the model's structure). The "
    "synthetic data can reproduce the relation of a connected pair; an unconnected pair's "
    "relation is only implied through other columns, so it is often weakened.",
    "rules": "The schema's declared rules (cross-column constraints) and what keeping them did "
    "to the synthetic rows: how many rows broke each rule as first drawn, how many had their "
    "values drawn again inside the same bins (the model's draw kept), how many were redrawn "
    "from the model (rejection within the stated number of rounds), how many were then "
    "repaired to the nearest row that keeps it, and how many still break it (0 unless a repair "
    "of another rule undid it). Computed from the model's output only; no privacy cost.",
    "mutual_information": "How much knowing one column tells about the other, in bits, from the "
    "model (or the synthetic rows): 0 = independent. The normalised value divides by the smaller "
    "column's entropy: 1 = one column determines the other; n/a (–) when a column has a single "
    "category (its entropy is zero, so nothing can be divided by it).",
}
NOTES = (
    "Release tier: every number here is computed from the differentially private release "
    "(noisy measurements, the fitted model, the synthetic rows) and the public schema. It reads "
    "no real data, quotes no real value and costs no further privacy budget.",
    "It tells how precise the measurements were and how well the synthetic data follows them; "
    "it cannot tell how close the synthetic data is to the real data beyond that (the owner "
    "tier does).",
)


def _compress(table: FloatArray, marginal: MeasuredMarginal) -> FloatArray:
    """A table over original codes summed into ``marginal``'s measured cells (its axis maps)."""
    out = np.asarray(table, dtype=np.float64)
    for axis, mapping in enumerate(marginal.axis_maps):
        if mapping is None:
            continue
        moved = np.moveaxis(out, axis, 0)
        summed = np.zeros((marginal.noisy_counts.shape[axis], *moved.shape[1:]))
        np.add.at(summed, mapping, moved)
        out = np.moveaxis(summed, 0, axis)
    return out


def _synthetic_measured(data: Dataset, marginal: MeasuredMarginal) -> FloatArray:
    """The synthetic rows' distribution on ``marginal``'s measured cells (no full-domain table)."""
    shape = marginal.noisy_counts.shape
    flat = np.zeros(data.n_rows, dtype=np.int64)
    for axis, (attr, mapping) in enumerate(
        zip(marginal.attributes, marginal.axis_maps, strict=True)
    ):
        codes = data.column(attr).astype(np.int64)
        flat *= shape[axis]
        flat += codes if mapping is None else mapping[codes]
    counts = np.bincount(flat, minlength=math.prod(shape)).astype(np.float64)
    out: FloatArray = (counts / counts.sum()).reshape(shape)
    return out


def _normalised(table: npt.ArrayLike) -> FloatArray | None:
    values = np.asarray(table, dtype=np.float64)
    total = float(values.sum())
    return values / total if total > 0 else None


class _Fit:
    """The distribution the release is judged by: the model's marginals, else the rows'."""

    def __init__(self, data: Dataset, model_marginal: ModelMarginal | None) -> None:
        self.data = data
        self.model_marginal = model_marginal
        self.source = "model" if model_marginal is not None else "synthetic rows"

    def table(self, attrs: tuple[str, ...]) -> FloatArray | None:
        if self.model_marginal is None:
            return _normalised(count_marginal(self.data, attrs))
        table = np.asarray(self.model_marginal(attrs), dtype=np.float64)
        expected = self.data.domain.project(attrs).sizes
        if table.shape != expected:
            raise ValueError(f"model_marginal{attrs!r} has shape {table.shape}, not {expected}")
        return _normalised(np.clip(table, 0.0, None))

    def measured(self, marginal: MeasuredMarginal) -> FloatArray | None:
        if self.model_marginal is None:
            return _synthetic_measured(self.data, marginal)
        table = self.table(marginal.attributes)
        return None if table is None else _compress(table, marginal)


def _measurement(record: ReleaseRecord, marginal: MeasuredMarginal, fit: _Fit) -> dict[str, Any]:
    noisy = marginal.noisy_counts.astype(np.float64)
    cells = int(noisy.size)
    noisy_total = float(noisy.sum())
    expected_l1 = marginal.sigma * math.sqrt(2.0 / math.pi) * cells
    clipped = _normalised(np.clip(noisy, 0.0, None))
    model = fit.measured(marginal)
    residual = (
        None if clipped is None or model is None else 0.5 * float(np.abs(clipped - model).sum())
    )
    return {
        "attributes": list(marginal.attributes),
        "cells": cells,
        "compressed": any(mapping is not None for mapping in marginal.axis_maps),
        "sigma": rounded(marginal.sigma),
        "rho_share": rounded(record.share(marginal.rho)),
        "noisy_total": rounded(noisy_total),
        "expected_noise_l1": rounded(expected_l1),
        "expected_noise_tvd": rounded(min(0.5 * expected_l1 / max(noisy_total, 1.0), 1.0)),
        "model_residual_tvd": rounded(residual),
    }


def _charge(record: ReleaseRecord, index: int) -> dict[str, Any]:
    charge = record.charges[index]
    out: dict[str, Any] = {
        "kind": charge.kind,
        "description": charge.description,
        "rho_share": rounded(record.share(charge.rho)),
        "sensitivity": rounded(charge.sensitivity),
    }
    if charge.epsilon is not None:
        out["epsilon"] = rounded(charge.epsilon)
    if charge.sigma2 is not None:
        out["sigma"] = rounded(math.sqrt(float(charge.sigma2)))
    return out


def _one_way(record: ReleaseRecord, attr: str) -> MeasuredMarginal | None:
    """The most precise one-way measurement of ``attr`` (smallest σ; the first on ties)."""
    candidates = [m for m in record.marginals if m.attributes == (attr,)]
    return min(candidates, key=lambda m: m.sigma2) if candidates else None


def _group_label(labels: Sequence[str], codes: Sequence[int]) -> str:
    head = " + ".join(labels[code] for code in codes[:MAX_GROUP_LABELS])
    more = len(codes) - MAX_GROUP_LABELS
    return f"{head} + {more} more" if more > 0 else head


def _distribution(
    attr: str, labels: tuple[str, ...], data: Dataset, record: ReleaseRecord, n_hat: float
) -> dict[str, Any]:
    synthetic = shares(data, attr)
    measured = _one_way(record, attr)
    if measured is None:
        entry_labels = list(labels)
        noisy: FloatArray | None = None
    else:
        # A compressed measurement has one noisy cell per group of codes: compare on the groups.
        entry_labels = [_group_label(labels, group) for group in measured.groups(0)]
        synthetic = _compress(synthetic, measured)
        noisy = measured.noisy_counts.astype(np.float64) / n_hat
    weights = synthetic if noisy is None else np.maximum(synthetic, np.abs(noisy))
    codes, rest = shown_codes(weights)
    out: dict[str, Any] = {
        "column": attr,
        "labels": [entry_labels[c] for c in codes] + ([REST_LABEL] if rest else []),
        "synthetic": rounded_list(fold(synthetic, codes, rest)),
        "noisy": None,
        "error": None,
        "entries": cap_note(len(entry_labels), len(codes) + int(rest), "categories or bins"),
    }
    if measured is not None and noisy is not None:
        # The noise of a sum of k cells has standard deviation σ·√k.
        counts = np.asarray(fold(np.ones(len(entry_labels)), codes, rest))
        out["noisy"] = rounded_list(fold(noisy, codes, rest))
        out["error"] = rounded_list(2.0 * measured.sigma * np.sqrt(counts) / n_hat)
        out["sigma"] = rounded(measured.sigma)
    return out


def _connected_pairs(record: ReleaseRecord) -> set[tuple[str, str]]:
    order = {attr: i for i, attr in enumerate(record.domain.attributes)}
    groups: list[Sequence[str]] = [m.attributes for m in record.marginals]
    cliques = record.extra.get("cliques", [])
    if isinstance(cliques, list):
        for clique in cliques:
            if isinstance(clique, list) and all(isinstance(a, str) and a in order for a in clique):
                groups.append(clique)
    pairs: set[tuple[str, str]] = set()
    for group in groups:
        for a, b in itertools.combinations(sorted(set(group), key=order.__getitem__), 2):
            pairs.add((a, b))
    return pairs


def _pairs(record: ReleaseRecord, fit: _Fit) -> dict[str, Any]:
    domain = record.domain
    order = {attr: i for i, attr in enumerate(domain.attributes)}
    connected = _connected_pairs(record)
    shown = matrix_columns(domain)
    wanted = list(itertools.combinations(shown, 2))
    wanted += sorted(connected - set(wanted), key=lambda p: (order[p[0]], order[p[1]]))
    computed = wanted[:MAX_MI_PAIRS]
    values: dict[tuple[str, str], tuple[float, float | None]] = {}
    skipped = 0
    for pair in computed:
        if domain.cells(pair) > DENSE_CELL_LIMIT:
            skipped += 1  # a dense joint table this large is not worth its memory here
            continue
        table = fit.table(pair)
        values[pair] = (0.0, None) if table is None else mutual_information(table)
    matrix: list[list[float | None]] = [
        [
            None
            if a == b or (pair := (a, b) if order[a] < order[b] else (b, a)) not in values
            else rounded(values[pair][1])
            for b in shown
        ]
        for a in shown
    ]
    # A pair with a one-category column has no normalised MI ("n/a"): ranked last.
    ranked = sorted(
        values.items(),
        key=lambda item: (-(item[1][1] if item[1][1] is not None else -1.0), order[item[0][0]]),
    )
    return {
        "source": fit.source,
        "connected_pairs": [
            list(p) for p in sorted(connected, key=lambda p: (order[p[0]], order[p[1]]))
        ],
        "matrix": {"columns": list(shown), "normalised_mi": matrix},
        "top_pairs": [
            {
                "columns": list(pair),
                "mi_bits": rounded(mi),
                "normalised_mi": rounded(normalised),
                "connected": pair in connected,
            }
            for pair, (mi, normalised) in ranked[:TOP_PAIRS]
        ],
        "caps": {
            "matrix_columns": cap_note(len(domain), len(shown), "columns"),
            "pairs_computed": cap_note(len(wanted), len(computed) - skipped, "pairs"),
            "pair_cell_limit": DENSE_CELL_LIMIT,
            "top_pairs": TOP_PAIRS,
        },
    }


def build_release_report(
    schema: TableSchema,
    record: ReleaseRecord,
    synthetic: npt.NDArray[np.integer[Any]],
    *,
    model_marginal: Callable[[tuple[str, ...]], npt.NDArray[np.float64]] | None = None,
    deltas: Sequence[float] = (1e-5, 1e-6, 1e-7, 1e-8, 1e-9),
    discovery_delta: float = 0.0,
    privacy_unit: Mapping[str, Any] | None = None,
    rules: Mapping[str, Any] | None = None,
    synthetic_rows: int | None = None,
) -> dict[str, Any]:
    """The release-tier report (JSON-able) of one release; DP post-processing only.

    ``privacy_unit``: the dataset's unit (:func:`engine.reports.unit.unit_statement`, with the
    DP count of what truncation removed), shown beside ρ; None for a row-level dataset.

    ``synthetic`` holds the released rows' codes (rows × columns, domain order);
    ``model_marginal(attrs)`` returns the fitted model's distribution over ``attrs`` (shape: the
    attributes' sizes, original codes). Without it, the synthetic rows' marginals stand in.
    ``discovery_delta``: the δ the dataset's discovery spent (its ledger's ``spent_delta``),
    added to each conversion δ of the privacy profile: the release uses the discovered domain.
    ``rules``: what keeping the schema's declared rules did (``KeepReport.to_json``, functions
    of the model's output only), shown under ``"rules"`` (null when the schema has none).
    ``synthetic_rows``: the release's row count when ``synthetic`` is a uniform subsample of its
    rows (a partitioned output: engine.tables.partitioned); the shares are then the subsample's
    and ``"report_sample_rows"`` says how many rows they were computed on.
    Raises ValueError when the record's domain is not the schema's.
    """
    domain = schema.domain()
    if record.domain != domain:
        raise ValueError("the release record was made for another domain than the schema's")
    data = check_codes(schema, synthetic, "synthetic")
    fit = _Fit(data, model_marginal)
    labels = column_labels(schema)
    noisy_sum = max((float(m.noisy_counts.sum()) for m in record.marginals), default=0.0)
    n_hat = record.estimated_total if record.estimated_total > 0 else max(noisy_sum, 1.0)
    if not 0 <= discovery_delta < 1:
        raise ValueError("discovery_delta must be in [0, 1)")
    profile = [
        {
            "delta": float(delta) + discovery_delta,
            "conversion_delta": float(delta),
            "discovery_delta": discovery_delta,
            "epsilon": rounded(float(epsilon_from_rho_delta(record.rho, delta))),
        }
        for delta in deltas
    ]
    distribution_columns = domain.attributes[:MAX_DISTRIBUTION_COLUMNS]
    unit = {} if privacy_unit is None else {"privacy_unit": dict(privacy_unit)}
    return {
        **unit,
        "tier": "release",
        "notes": list(NOTES),
        "explanations": dict(EXPLANATIONS),
        "method": record.method,
        "params": record.params,
        "rho": {
            "exact": f"{record.rho.numerator}/{record.rho.denominator}",
            "value": rounded(float(record.rho)),
        },
        "privacy_profile": profile,
        "estimated_total": rounded(record.estimated_total),
        "synthetic_rows": data.n_rows if synthetic_rows is None else int(synthetic_rows),
        **({} if synthetic_rows is None else {"report_sample_rows": data.n_rows}),
        "columns": [
            {"name": column.name, "type": column.type, "size": column.size}
            for column in schema.columns
        ],
        "measurements": [_measurement(record, m, fit) for m in record.marginals],
        "charges": [_charge(record, i) for i in range(len(record.charges))],
        "fit_source": fit.source,
        "distributions": [
            _distribution(attr, labels[attr], data, record, n_hat) for attr in distribution_columns
        ],
        "pairs": _pairs(record, fit),
        "rules": None if rules is None else dict(rules),
        "caps": {
            "distribution_columns": cap_note(
                len(domain), len(distribution_columns), "columns with a distribution"
            ),
            "codes_per_distribution": MAX_CODES_SHOWN,
            "matrix_columns": MAX_MATRIX_COLUMNS,
            "mi_pairs": MAX_MI_PAIRS,
        },
    }
