"""Discovery for a schema: the requests its pending columns make, counting, and resolution.

Shared by the service's upload (app/datasets/discovery.py) and ``rhosynth synthesize``: both read
the table once through their own bounded readers and hand each batch's pending columns, as pandas
Series, to :func:`count_batch`; then :func:`allocate` and :func:`release`
(engine/discovery/plan.py) run, and :func:`resolve` completes the schema.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from engine.columns.base import missing_mask, text_values
from engine.columns.spec import DiscoveredCategories, QuantileBins
from engine.discovery.plan import (
    CategoryRequest,
    Counts,
    Discovered,
    DiscoveryRefused,
    QuantileRequest,
    Request,
)
from engine.discovery.quantiles import DEFAULT_GRID, MAX_GRID, QuantileGrid
from engine.encoding import SchemaError, SchemaSpec, TableSchema


def requests_for(spec: SchemaSpec) -> list[Request]:
    """One request per pending column that needs data (one quantile bin needs none).

    Raises ``ValueError`` when a declared bound cannot hold the grid (its message names no value).
    """
    return [_request(pending) for pending in spec.pending if _needs_data(pending)]


def _needs_data(pending: QuantileBins | DiscoveredCategories) -> bool:
    return not (isinstance(pending, QuantileBins) and pending.quantiles == 1)


def _request(pending: QuantileBins | DiscoveredCategories) -> Request:
    if isinstance(pending, QuantileBins):
        low, high = pending.bounds()
        integer = pending.kind != "numeric" or bool(pending.to_json().get("integer"))
        if pending.learn_range:
            # A public window much wider than the data: the finest grid, and for numbers a
            # symmetric-log one (cells of ~0.1 % of the value over ±1e15).
            scale = "log" if pending.kind == "numeric" else "linear"
            grid = QuantileGrid(low, high, MAX_GRID, integer=integer, scale=scale)
        else:
            grid = QuantileGrid(low, high, DEFAULT_GRID, integer=integer)
        return QuantileRequest(
            pending.name, grid, pending.quantiles, rho=pending.rho, learn_range=pending.learn_range
        )
    return CategoryRequest(
        pending.name,
        pending.max_categories,
        candidates=pending.candidates,
        rho=pending.rho,
        delta=pending.delta,
    )


def provisional(spec: SchemaSpec) -> TableSchema:
    """The schema with a placeholder domain for every pending column: enough to read the file
    (which columns, which to skip), never to encode it."""
    placeholders: dict[str, list[object]] = {}
    for pending in spec.pending:
        if isinstance(pending, QuantileBins):
            placeholders[pending.name] = list(pending.bounds()) if pending.learn_range else []
        else:
            first = pending.candidates[0] if pending.candidates else "provisional"
            placeholders[pending.name] = [] if pending.other else [first]
    return spec.resolve(placeholders)


def count_batch(
    counts: Counts, spec: SchemaSpec, requests: Sequence[Request], batch: Mapping[str, pd.Series]
) -> None:
    """Add one batch of the pending columns' raw values to ``counts`` (exact, never released).

    Missing values are left out (they have their own public code when nullable); so are values
    outside the declared bounds or unparseable, which the encoding pass then refuses or clips.
    A value equal to a listed candidate is counted even if it equals a missing-value spelling:
    once released, a declared category wins over that spelling when the column is encoded.
    """
    pending = {p.name: p for p in spec.pending}
    for request in requests:
        series = batch[request.column]
        column = pending[request.column]
        if isinstance(column, QuantileBins):
            numbers = column.values(series, spec.missing_values)
            low, high = column.bounds()
            inside = np.isfinite(numbers) & (numbers >= low) & (numbers <= high)
            counts.add_numbers(request.column, numbers[inside])
        else:
            absent = missing_mask(series, spec.missing_values)
            text = text_values(series)
            if column.candidates is not None:  # as CategoricalColumn.encode matches them
                absent &= ~np.asarray(text.isin(column.candidates), dtype=bool)
            counts.add_text(request.column, text[~absent].astype(str))


def resolve(spec: SchemaSpec, found: Discovered | None) -> TableSchema:
    """The complete schema: discovered edges and categories in place of the pending clauses.

    Raises :class:`DiscoveryRefused` (naming the column, never a value) when a categorical
    column without ``other`` released no category, and ``SchemaError`` for the rest.
    """
    resolved: dict[str, list[object]] = {p.name: [] for p in spec.pending if not _needs_data(p)}
    if found is not None:
        ranged = {p.name for p in spec.pending if isinstance(p, QuantileBins) and p.learn_range}
        for name, bins in found.edges.items():
            resolved[name] = list(bins.edges if name in ranged else bins.edges[1:-1])
        for name, categories in found.categories.items():
            pending = next(p for p in spec.pending if p.name == name)
            other = pending.to_json().get("other")
            # A released value equal to the "other" label is that bucket already.
            kept: list[object] = [v for v in categories.categories if v != other]
            if not kept and other is None:
                raise DiscoveryRefused(
                    f"column {name!r}: no category cleared the discovery's threshold; declare "
                    '"other", or give the discovery more rho'
                )
            resolved[name] = kept
    # Only what a mechanism released (and was charged for) is marked discovered.
    learned = [] if found is None else [*found.edges, *found.categories]
    return spec.resolve(resolved, learned=learned)


__all__ = ["SchemaError", "count_batch", "provisional", "requests_for", "resolve"]
