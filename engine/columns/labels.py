"""Human-readable labels of a column's codes, from the declared (or DP-discovered) schema only.

Every label is a function of the public domain: a category name, a bin's interval, a boolean word,
an integer code. Reports and the noisy-measurement downloads use them, so they never quote a value
of the data. The null code (nullable columns) is labelled :data:`MISSING_LABEL`.
"""

from __future__ import annotations

from engine.columns.categorical import BooleanColumn, CategoricalColumn, CodesColumn
from engine.columns.numeric import NumericColumn
from engine.columns.spec import Column
from engine.columns.temporal import DateColumn, DatetimeColumn

MISSING_LABEL = "(missing)"


def _number(value: float) -> str:
    return f"{value:.6g}"


def _intervals(lows: list[str], highs: list[str]) -> list[str]:
    return [f"[{low}, {high})" for low, high in zip(lows, highs, strict=True)]


def code_labels(column: Column) -> tuple[str, ...]:
    """One label per code ``0..size-1`` of ``column``, in code order."""
    labels: list[str]
    if isinstance(column, CategoricalColumn):
        labels = list(column.labels)
    elif isinstance(column, BooleanColumn):
        labels = ["false", "true"]
    elif isinstance(column, CodesColumn):
        labels = [str(code) for code in range(column.size)]
    elif isinstance(column, NumericColumn):
        edges = [_number(edge) for edge in column.edges]
        labels = _intervals(edges[:-1], edges[1:])
        labels[-1] = f"[{edges[-2]}, {edges[-1]}]"
    elif isinstance(column, DateColumn | DatetimeColumn):
        stamps = [column.iso(edge) for edge in column.edges]
        labels = _intervals(stamps[:-1], stamps[1:])
    else:  # pragma: no cover - Column is a closed union
        raise TypeError(f"unknown column type {type(column).__name__}")
    if column.null_code is not None:
        labels.append(MISSING_LABEL)
    return tuple(labels)
