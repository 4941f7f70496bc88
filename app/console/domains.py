"""Each column's domain as the dataset page shows it: bin edges (dates as dates) or categories.

Everything here comes from the API's ``ColumnOut``: declared values, or values learned with DP
at upload (``discovered``), which are DP outputs and public. Long lists are folded by the
template (``<details>``); the summary names the first and last values and the count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.datasets.schemas import ColumnOut

FOLD_AFTER = 12
"""Lists longer than this are shown folded (their summary first)."""


@dataclass(frozen=True)
class ColumnDomain:
    kind: str  # "bins", "categories", "boolean" or "codes"
    values: tuple[str, ...]
    learned: bool
    other: str | None = None
    note: str | None = None

    @property
    def folded(self) -> bool:
        return len(self.values) > FOLD_AFTER

    @property
    def summary(self) -> str:
        count = len(self.values)
        if self.kind == "bins":
            what = f"{count - 1} bin{'s' if count != 2 else ''}, {count} edges"
        else:
            what = f"{count} categor{'ies' if count != 1 else 'y'}"
        if count == 0:
            return what
        return f"{what}: {self.values[0]} … {self.values[-1]}"


def edge_text(edge: float | str) -> str:
    """An edge as stored: dates as their ISO text, whole numbers without ".0", others exact."""
    if isinstance(edge, str):
        return edge
    number = float(edge)
    if math.isfinite(number) and number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return repr(number)


def column_domain(column: ColumnOut) -> ColumnDomain:
    learned = column.discovered
    if column.bins is not None:
        edges = tuple(edge_text(edge) for edge in column.bins)
        notes = ["the last edge is included"] if column.type in ("date", "datetime") else []
        if column.profile is not None:
            points = column.profile
            middle = points[len(points) // 2]
            notes.append(
                f"values inside a bin follow a {'learned ' if learned else ''}profile of "
                f"{len(points)} percentiles (median {edge_text(middle)})"
            )
        return ColumnDomain("bins", edges, learned, note="; ".join(notes) or None)
    if column.categories is not None:
        return ColumnDomain("categories", tuple(column.categories), learned, other=column.other)
    if column.type == "boolean":
        spellings = [*(column.true_values or ()), *(column.false_values or ())]
        note = f"spellings: {', '.join(spellings)}" if spellings else None
        return ColumnDomain("boolean", ("true", "false"), False, note=note)
    codes = column.size - int(column.nullable)
    return ColumnDomain("codes", (), False, note=f"integer codes 0 … {codes - 1}")
