"""Pieces both report tiers share: labels, capped per-code shares, mutual information, rounding.

Nothing here reads data by itself: each helper is a function of the arrays it is given, so the
release tier can call them on synthetic codes and DP numbers only, and the owner tier on the real
table as well.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from engine.columns.labels import code_labels
from engine.domain import Dataset, Domain
from engine.marginals import count_marginal
from engine.tables.encoding import TableSchema

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Codes = npt.NDArray[np.integer[Any]]

MAX_DISTRIBUTION_COLUMNS = 50
"""Per-column distributions (and their plots) are given for at most this many columns."""
MAX_CODES_SHOWN = 40
"""A distribution lists at most this many codes (largest first); the rest are summed into one."""
REST_LABEL = "(all other codes)"
MAX_MATRIX_COLUMNS = 30
"""Pairwise matrices (mutual information, correlations) cover at most this many columns."""
TOP_PAIRS = 20
"""Lists of pairs (strongest dependence, worst TVD) keep this many."""
DIGITS = 6
"""Every float in a report is rounded to this many significant digits (stable JSON, no noise
digits that look more precise than they are)."""


def rounded(value: float | None) -> float | None:
    """``value`` to :data:`DIGITS` significant digits; None and non-finite numbers become None."""
    if value is None or not math.isfinite(value):
        return None
    if value == 0:
        return 0.0
    return float(f"{value:.{DIGITS}g}")


def rounded_list(values: Sequence[float] | FloatArray) -> list[float | None]:
    return [rounded(float(v)) for v in values]


def column_labels(schema: TableSchema) -> dict[str, tuple[str, ...]]:
    """Every column's code labels (public: from the schema only)."""
    return {column.name: code_labels(column) for column in schema.columns}


def check_codes(schema: TableSchema, codes: npt.ArrayLike, what: str) -> Dataset:
    """``codes`` as a read-only :class:`Dataset` of the schema's domain (no copy when possible)."""
    array = np.asarray(codes)
    if array.ndim != 2 or array.shape[0] == 0:
        raise ValueError(f"the {what} table must be a non-empty 2-D array of codes")
    view = array.view()
    view.flags.writeable = False
    try:
        return Dataset(schema.domain(), view)
    except ValueError as error:
        raise ValueError(f"the {what} table: {error}") from None


def shares(data: Dataset, attr: str) -> FloatArray:
    """The one-way distribution of ``attr`` (sums to 1)."""
    counts = count_marginal(data, (attr,)).astype(np.float64)
    return counts / max(float(counts.sum()), 1.0)


def shown_codes(weights: FloatArray, cap: int = MAX_CODES_SHOWN) -> tuple[list[int], bool]:
    """The codes a distribution lists: all of them in code order when there are at most ``cap``,
    else the ``cap - 1`` with the largest ``weights`` (in code order) and a flag that the rest
    are summed into one :data:`REST_LABEL` entry."""
    size = weights.size
    if size <= cap:
        return list(range(size)), False
    keep = np.sort(np.argsort(-weights, kind="stable")[: cap - 1])
    return [int(code) for code in keep], True


def fold(values: FloatArray, codes: Sequence[int], rest: bool) -> list[float]:
    """``values`` at ``codes``, then (when ``rest``) the sum of all the others."""
    out = [float(values[code]) for code in codes]
    if rest:
        out.append(float(values.sum() - values[list(codes)].sum()))
    return out


def entropy_bits(p: FloatArray) -> float:
    q = p[p > 0]
    return float(-(q * np.log2(q)).sum())


ENTROPY_TOLERANCE = 1e-9
"""Entropies (and mutual information) below this many bits are taken as zero. Floating-point
sums of a distribution that sits on one category leave entropies of about 1e-16 bits, and the
ratio of two such crumbs is meaningless (it showed normalised MI = 1 for MI = 3e-16); a real
column whose rarest category holds one row in ten million still has an entropy above 2e-6 bits."""


def mutual_information(joint: FloatArray) -> tuple[float, float | None]:
    """``(MI in bits, MI / min(H(A), H(B)))`` of a 2-D joint distribution (normalised here).

    MI = Σ p(a, b)·log2(p(a, b) / (p(a)·p(b))): 0 when the columns are independent, at most the
    smaller entropy. The normalised value lies in [0, 1]; it is None ("n/a") when either
    column has one category, or an entropy below :data:`ENTROPY_TOLERANCE` (MI is then 0: a
    constant column tells nothing about another)."""
    total = float(joint.sum())
    if total <= 0:
        return 0.0, None
    p = joint / total
    pa = p.sum(axis=1)
    pb = p.sum(axis=0)
    floor = min(entropy_bits(pa), entropy_bits(pb))
    if floor < ENTROPY_TOLERANCE:
        return 0.0, None
    outer = np.outer(pa, pb)
    mask = p > 0
    mi = max(float((p[mask] * np.log2(p[mask] / outer[mask])).sum()), 0.0)
    if mi < ENTROPY_TOLERANCE:
        mi = 0.0
    return mi, min(mi / floor, 1.0)


def matrix_columns(domain: Domain) -> tuple[str, ...]:
    """The columns a pairwise matrix covers: the first :data:`MAX_MATRIX_COLUMNS` in order."""
    return domain.attributes[:MAX_MATRIX_COLUMNS]


def cap_note(total: int, shown: int, what: str) -> dict[str, Any]:
    return {"total": total, "shown": shown, "what": what}
