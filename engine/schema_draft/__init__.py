"""Drafting a schema from a raw table (issue 12, section 3; issue 23, section 2).

:func:`draft_schema` reads a CSV or Parquet file once, in bounded memory, and proposes a
``{"columns": [...]}`` schema. It runs on the owner's side (``rhosynth schema draft``, or the
service's draft endpoint for an owner, which stores nothing). A draft accepted as is never
publishes a raw value: category lists, bin edges and the ranges of numbers and dates are proposed
as DP discovery inside public windows (chosen from a column's name where it has a meaning,
engine/schema_draft/meanings.py, else generic) or among public candidate lists chosen from the
name (engine/schema_draft/public_lists.py); identifier-like and free-text columns are proposed as
``ignore``; every column is nullable. What it does read from the data without DP (kinds, date
formats, decimals, dropped columns, which integer columns fit a small window 0 … 7 and get one
declared bin per value) is named by :meth:`SchemaDraft.disclosure`. A CSV whose first
row looks like data is refused. ``show_values=True`` proposes the data's own categories and
bounds for the owner to edit instead, with a warning, since whatever is declared is visible to
every analyst.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.schema_draft.inference import (
        DEFAULT_MISSING_VALUES,
        ColumnDraft,
        DraftCancelled,
        SchemaDraft,
        draft_schema,
    )
    from engine.schema_draft.units import UnitProposal, propose_unit

# Loaded on first use (numpy, pandas and pyarrow come with them), so that `rhosynth schema
# --help` (engine/schema_draft/cli.py) imports none of them.
_HOMES = {
    "DEFAULT_MISSING_VALUES": "engine.schema_draft.inference",
    "ColumnDraft": "engine.schema_draft.inference",
    "DraftCancelled": "engine.schema_draft.inference",
    "SchemaDraft": "engine.schema_draft.inference",
    "draft_schema": "engine.schema_draft.inference",
    "UnitProposal": "engine.schema_draft.units",
    "propose_unit": "engine.schema_draft.units",
}

__all__ = [
    "DEFAULT_MISSING_VALUES",
    "ColumnDraft",
    "DraftCancelled",
    "SchemaDraft",
    "UnitProposal",
    "draft_schema",
    "propose_unit",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'engine.schema_draft' has no attribute {name!r}")
    return getattr(import_module(home), name)
