"""Discovery for a schema: the requests its pending columns make, counting, and resolution.

Shared by the service's upload (app/datasets/discovery.py) and ``rhosynth synthesize``: both read
the table through their own bounded readers and hand each batch's pending columns, as pandas
Series, to :func:`discover`, which counts in one pass (two when a range is learned: the second
counts inside the released ranges), releases with engine/discovery/plan.py, and returns the
release; :func:`resolve` completes the schema.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from engine.columns.base import missing_mask, text_values
from engine.columns.spec import DiscoveredCategories, QuantileBins
from engine.discovery.plan import (
    CategoryRequest,
    Counts,
    Discovered,
    DiscoveryBudget,
    DiscoveryRefused,
    FineCounts,
    QuantileRequest,
    RangeRequest,
    Request,
    release_first,
    release_second,
)
from engine.discovery.quantiles import DEFAULT_GRID, QuantileGrid
from engine.tables.encoding import SchemaError, SchemaSpec, TableSchema

Column: TypeAlias = pd.Series | pa.Array
Batches = Callable[[], Iterable[Mapping[str, Column]]]
"""A fresh pass over the table: each batch maps the pending columns to their raw values (pandas
Series, or Arrow arrays, which numeric columns read faster; categories take Series)."""


def requests_for(spec: SchemaSpec) -> list[Request]:
    """One request per pending column that needs data (one declared quantile bin needs none).

    Raises ``ValueError`` when a declared bound cannot hold the grid (its message names no value).
    """
    return [_request(pending) for pending in spec.pending if _needs_data(pending)]


def _needs_data(pending: QuantileBins | DiscoveredCategories) -> bool:
    return not (
        isinstance(pending, QuantileBins) and pending.quantiles == 1 and not pending.learn_range
    )


def _request(pending: QuantileBins | DiscoveredCategories) -> Request:
    if isinstance(pending, QuantileBins):
        if pending.learn_range:
            # Range, bins and profile inside a public window (engine/discovery/learned.py).
            return RangeRequest(pending.name, pending.window(), pending.quantiles, rho=pending.rho)
        low, high = pending.bounds()
        grid = QuantileGrid(low, high, DEFAULT_GRID, integer=pending.integer)
        return QuantileRequest(pending.name, grid, pending.quantiles, rho=pending.rho)
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
    counts: Counts, spec: SchemaSpec, requests: Sequence[Request], batch: Mapping[str, Column]
) -> None:
    """Add one batch of the pending columns' raw values to the first pass's ``counts`` (exact,
    never released).

    Missing values are left out (they have their own public code when nullable); so are
    unparseable values, and for declared-window quantiles values outside the window, which the
    encoding pass then refuses or clips (a learned range counts them in its outside cells and
    clamps them). A value equal to a listed candidate is counted even if it equals a
    missing-value spelling: once released, a declared category wins over that spelling when the
    column is encoded.
    """
    pending = {p.name: p for p in spec.pending}
    if batch:
        counts.add_rows(len(next(iter(batch.values()))))
    for request in requests:
        series = batch[request.column]
        column = pending[request.column]
        if isinstance(column, QuantileBins):
            if isinstance(request, RangeRequest):
                numbers = column.learned_units(series, spec.missing_values)
                counts.add_numbers(request.column, numbers[np.isfinite(numbers)])
                continue
            numbers = column.values(series, spec.missing_values)
            low, high = column.bounds()
            inside = np.isfinite(numbers) & (numbers >= low) & (numbers <= high)
            counts.add_numbers(request.column, numbers[inside])
        else:
            if isinstance(series, pa.Array | pa.ChunkedArray):
                series = series.to_pandas()
            absent = missing_mask(series, spec.missing_values)
            text = text_values(series)
            if column.candidates is not None:  # as CategoricalColumn.encode matches them
                absent &= ~np.asarray(text.isin(column.candidates), dtype=bool)
            counts.add_text(request.column, text[~absent].astype(str))


def count_fine_batch(fine: FineCounts, spec: SchemaSpec, batch: Mapping[str, Column]) -> None:
    """Add one batch to the second pass: each learned range's finite values in learned units,
    clamped into its released range (exact, never released)."""
    pending = {p.name: p for p in spec.pending}
    for name in fine.grids:
        column = pending[name]
        assert isinstance(column, QuantileBins)
        numbers = column.learned_units(batch[name], spec.missing_values)
        fine.add_numbers(name, numbers[np.isfinite(numbers)])


def discover(
    spec: SchemaSpec,
    budget: DiscoveryBudget,
    batches: Batches,
    source: random.Random | None = None,
    *,
    contribution_bound: int = 1,
) -> Discovered:
    """Count, release, and (for learned ranges) count again inside the released ranges and
    release the bins: the whole discovery of ``spec``'s pending columns.

    ``budget`` is per privacy unit of at most k = ``contribution_bound`` rows (the table already
    truncated to k rows per unit; k = 1: per row). Every release runs at the row-level ρ/k² and
    is stated per unit; the result's ``rho``, ``costs()`` and ``describe()`` (which records
    ``max_rows_per_unit`` when k > 1) are per unit (engine/discovery/plan.py, ``Discovered``).

    ``batches()`` starts a fresh pass over the table each time it is called (once, or twice with
    a learned range). ``source=None`` draws the noise from the OS CSPRNG.
    """
    requests = list(budget.requests)
    counts = Counts(requests)
    for batch in batches():
        count_batch(counts, spec, requests, batch)
    first = release_first(budget, counts, source, contribution_bound=contribution_bound)
    fine = FineCounts(first.fine_grids)
    if first.fine_grids:
        for batch in batches():
            count_fine_batch(fine, spec, batch)
    return release_second(first, fine, source)


def resolve(spec: SchemaSpec, found: Discovered | None) -> TableSchema:
    """The complete schema: discovered edges and categories in place of the pending clauses.

    Raises :class:`DiscoveryRefused` (naming the column, never a value) when a categorical
    column without ``other`` released no category, and ``SchemaError`` for the rest.
    """
    resolved: dict[str, list[object]] = {p.name: [] for p in spec.pending if not _needs_data(p)}
    if found is not None:
        for name, bins in found.edges.items():
            resolved[name] = list(bins.edges[1:-1])
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
    learned = {} if found is None else dict(found.learned)
    # Only what a mechanism released (and was charged for) is marked discovered.
    names = [] if found is None else [*found.edges, *found.categories, *found.learned]
    return spec.resolve(resolved, learned=names, learned_bins=learned)


__all__ = [
    "Batches",
    "SchemaError",
    "count_batch",
    "count_fine_batch",
    "discover",
    "provisional",
    "requests_for",
    "resolve",
]
