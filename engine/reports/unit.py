"""How a release states its privacy unit: "per person, at most k rows" beside ρ and ε.

A dataset with a privacy unit (issue 28 §1) keeps at most k rows of each person or account, and
every release is ρ-zCDP for neighbouring tables that differ by one unit: all of its rows, at most
k. A dataset without one is row-level: k = 1 and the unit is a row. The statement names neither
the unit's column nor any of its values; the truncation figures it may carry are DP (release
tier) or exact (owner tier only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unit_phrase(max_rows: int | None) -> str:
    """The guarantee's unit in words: ``"per person, at most k rows"`` or ``"per row"``."""
    if max_rows is None:
        return "per row"
    return f"per person, at most {max_rows} row{'' if max_rows == 1 else 's'}"


def unit_statement(
    max_rows: int | None,
    truncation: Mapping[str, Any] | None = None,
    *,
    exact: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The report's ``privacy_unit`` section, or None for a row-level dataset (``max_rows``
    None). ``truncation``: the DP count of what truncation removed (any tier); ``exact``: its
    exact figures (the owner tier only)."""
    if max_rows is None:
        return None
    out: dict[str, Any] = {
        "max_rows": max_rows,
        "guarantee": unit_phrase(max_rows),
        "explanation": (
            f"ρ and ε hold for a whole person or account: a table with or without all of one "
            f"person's rows, of which at most {max_rows} were kept at upload."
        ),
    }
    if truncation is not None:
        out["truncation"] = dict(truncation)
    if exact is not None:
        out["truncation_exact"] = dict(exact)
    return out


__all__ = ["unit_phrase", "unit_statement"]
