"""The noisy measurements of a release as downloadable tables ("the contingency tables").

Every cell is labelled with the public domain's labels (:func:`engine.columns.labels.code_labels`);
a cell of a compressed axis, which counted several original values together, is labelled with
all of them joined by ``" | "`` (at most :data:`MAX_GROUP_LABELS` shown, then how many more).
The counts are the released noisy counts, integers that can be negative; nothing here reads data.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa

from engine.columns.labels import code_labels
from engine.release.record import MeasuredMarginal, ReleaseRecord
from engine.tables.encoding import TableSchema

MAX_GROUP_LABELS = 5
MAX_JSON_CELLS = 1_000_000
"""A JSON download lists at most this many cells in total (Parquet has no cap)."""


class TooLarge(ValueError):
    """The measurements have more cells than a JSON download lists (use Parquet)."""


def _group_label(labels: tuple[str, ...], codes: list[int]) -> str:
    shown = [labels[code] for code in codes[:MAX_GROUP_LABELS]]
    more = len(codes) - len(shown)
    return " | ".join(shown) + (f" | … ({more} more)" if more else "")


def axis_labels(schema: TableSchema, marginal: MeasuredMarginal) -> list[list[str]]:
    """For each axis of ``marginal``, the label of each measured index."""
    out = []
    for axis, name in enumerate(marginal.attributes):
        labels = code_labels(schema.column(name))
        out.append([_group_label(labels, codes) for codes in marginal.groups(axis)])
    return out


def _summary(record: ReleaseRecord, index: int, marginal: MeasuredMarginal) -> dict[str, Any]:
    return {
        "index": index,
        "attributes": list(marginal.attributes),
        "shape": list(marginal.noisy_counts.shape),
        "sigma": marginal.sigma,
        "rho": str(marginal.rho),
        "share_of_rho": record.share(marginal.rho),
        "compressed": any(mapping is not None for mapping in marginal.axis_maps),
    }


def measurements_json(record: ReleaseRecord, schema: TableSchema) -> dict[str, Any]:
    """Every noisy marginal with its labels and counts (row-major over its axes)."""
    cells = sum(int(m.noisy_counts.size) for m in record.marginals)
    if cells > MAX_JSON_CELLS:
        raise TooLarge(
            f"the release measured {cells} cells; JSON lists at most {MAX_JSON_CELLS} "
            "(download format=parquet)"
        )
    items = []
    for index, marginal in enumerate(record.marginals):
        item = _summary(record, index, marginal)
        item["labels"] = axis_labels(schema, marginal)
        item["noisy_counts"] = marginal.noisy_counts.ravel().tolist()
        items.append(item)
    return {
        "method": record.method,
        "rho": str(record.rho),
        "noise": "discrete Gaussian, independent per cell, standard deviation sigma",
        "measurements": items,
        "other_releases": [charge.to_json() for charge in record.charges],
    }


def measurements_arrow(record: ReleaseRecord, schema: TableSchema) -> pa.Table:
    """One row per measured cell: the measurement's index and attributes, the cell's label on
    each of its axes (``cell``, in the order of ``attributes``), the noisy count and σ."""
    index_col: list[int] = []
    attrs_col: list[list[str]] = []
    cell_col: list[list[str]] = []
    counts: list[np.ndarray] = []
    sigma_col: list[float] = []
    for index, marginal in enumerate(record.marginals):
        labels = axis_labels(schema, marginal)
        size = int(marginal.noisy_counts.size)
        index_col.extend([index] * size)
        attrs_col.extend([list(marginal.attributes)] * size)
        cell_col.extend(list(cell) for cell in itertools.product(*labels))
        counts.append(marginal.noisy_counts.ravel())
        sigma_col.extend([marginal.sigma] * size)
    noisy = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    return pa.table(
        {
            "measurement": pa.array(index_col, pa.int32()),
            "attributes": pa.array(attrs_col, pa.list_(pa.string())),
            "cell": pa.array(cell_col, pa.list_(pa.string())),
            "noisy_count": pa.array(noisy, pa.int64()),
            "sigma": pa.array(sigma_col, pa.float64()),
        }
    )
