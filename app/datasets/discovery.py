"""DP discovery at upload: count the pending columns, release their domain, complete the schema.

The upload's schema may leave a column's bins (``{"quantiles": k}``) or categories
(``{"discover": true, ...}``) to be learned from the data. This module reads the file once
(within the upload's memory bounds) to count exactly what the mechanisms need, splits the budget
(:func:`engine.discovery.plan.allocate`: the clause's own ρ/δ, else shares of ``discovery_rho``,
by default a tenth of ``budget_rho``, and of ``budget_delta``), releases with
:func:`engine.discovery.plan.release` (noise from the OS CSPRNG) and resolves the schema. The
caller charges ``Discovered.rho`` and ``Discovered.delta`` to the new dataset's ledger in the
transaction that creates it, before any job can exist; if anything fails before that commit,
the release is discarded and nobody but the uploader (the owner, who holds the data) saw an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa

from app.datasets.ingest import IngestLimits, UploadRejected, read_batches
from engine.columns.base import missing_mask, text_values
from engine.columns.spec import DELTA_QUANTUM, RHO_QUANTUM, DiscoveredCategories, QuantileBins
from engine.discovery.plan import (
    Allocation,
    CategoryRequest,
    Counts,
    Discovered,
    DiscoveryRefused,
    QuantileRequest,
    Request,
    allocate,
    release,
)
from engine.discovery.quantiles import DEFAULT_GRID, QuantileGrid
from engine.encoding import SchemaError, SchemaSpec, TableSchema


@dataclass(frozen=True)
class DiscoveryOutcome:
    schema: TableSchema
    discovered: Discovered | None

    @property
    def rho(self) -> Decimal:
        return _decimal(self.discovered.rho if self.discovered else Fraction(0))

    @property
    def delta(self) -> Decimal:
        return _decimal(self.discovered.delta if self.discovered else Fraction(0))


def _decimal(value: Fraction) -> Decimal:
    # Every allocation lies on the ledger's grid (allocate rounds down to it), so this is exact.
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    if Fraction(exact) != value:
        raise AssertionError("a discovery cost is not on the ledger's grid")
    return exact


def discover_and_resolve(
    source: Path,
    spec: SchemaSpec,
    limits: IngestLimits,
    *,
    budget_rho: Decimal,
    budget_delta: Decimal,
    discovery_rho: Decimal | None,
) -> DiscoveryOutcome:
    """The complete schema, and the discovery that completed it (None if nothing was pending).

    Raises :class:`UploadRejected` (422) when the budget cannot pay for the discoveries or a
    column cannot be counted; messages name columns and limits, never values.
    """
    try:
        requests = [_request(pending) for pending in spec.pending if _needs_data(pending)]
    except ValueError as error:  # a grid the declared bounds cannot hold (names no value)
        raise UploadRejected(422, f"invalid schema: {error}") from None
    trivial: dict[str, list[object]] = {p.name: [] for p in spec.pending if not _needs_data(p)}
    if not requests:
        return DiscoveryOutcome(_resolve(spec, trivial), None)
    try:
        allocations = allocate(
            requests,
            budget_rho=Fraction(budget_rho),
            budget_delta=Fraction(budget_delta),
            discovery_rho=None if discovery_rho is None else Fraction(discovery_rho),
            rho_quantum=RHO_QUANTUM,
            delta_quantum=DELTA_QUANTUM,
        )
        counts = _count(source, spec, requests, limits)
        found = release(allocations, counts)
    except DiscoveryRefused as refused:
        raise UploadRejected(422, str(refused)) from None
    resolved = dict(trivial)
    for name, bins in found.edges.items():
        resolved[name] = list(bins.edges[1:-1])
    for allocation in allocations:
        request = allocation.request
        if isinstance(request, CategoryRequest):
            resolved[request.column] = _categories(spec, request, found)
    return DiscoveryOutcome(_resolve(spec, resolved), found)


def _needs_data(pending: QuantileBins | DiscoveredCategories) -> bool:
    # One quantile bin is the declared bounds: nothing to learn, nothing to charge.
    return not (isinstance(pending, QuantileBins) and pending.quantiles == 1)


def _request(pending: QuantileBins | DiscoveredCategories) -> Request:
    if isinstance(pending, QuantileBins):
        low, high = pending.bounds()
        integer = pending.kind != "numeric" or bool(pending.to_json().get("integer"))
        grid = QuantileGrid(low, high, DEFAULT_GRID, integer=integer)
        return QuantileRequest(pending.name, grid, pending.quantiles, rho=pending.rho)
    return CategoryRequest(
        pending.name,
        pending.max_categories,
        candidates=pending.candidates,
        rho=pending.rho,
        delta=pending.delta,
    )


def _provisional(spec: SchemaSpec) -> TableSchema:
    """The schema with every pending column given a placeholder domain, to read the file."""
    placeholders: dict[str, list[object]] = {}
    for pending in spec.pending:
        if isinstance(pending, QuantileBins):
            placeholders[pending.name] = []
        else:
            first = pending.candidates[0] if pending.candidates else "provisional"
            placeholders[pending.name] = [] if pending.other else [first]
    return spec.resolve(placeholders)


def _count(source: Path, spec: SchemaSpec, requests: list[Request], limits: IngestLimits) -> Counts:
    counts = Counts(requests)
    pending = {p.name: p for p in spec.pending}
    for batch in read_batches(source, _provisional(spec), limits):
        for request in requests:
            values = batch.column(request.column)
            if isinstance(values, pa.DictionaryArray):
                values = values.dictionary_decode()
            series = values.to_pandas()
            column = pending[request.column]
            if isinstance(column, QuantileBins):
                numbers = column.values(series, spec.missing_values)
                low, high = column.bounds()
                # Outside values (without clip) and unparseable ones are left out here; the
                # encoding pass refuses the upload for them, with counts per reason.
                inside = np.isfinite(numbers) & (numbers >= low) & (numbers <= high)
                counts.add_numbers(request.column, numbers[inside])
            else:
                absent = missing_mask(series, spec.missing_values)
                counts.add_text(request.column, text_values(series[~absent]).astype(str))
    return counts


def _categories(spec: SchemaSpec, request: CategoryRequest, found: Discovered) -> list[object]:
    released = list(found.categories[request.column].categories)
    pending = next(p for p in spec.pending if p.name == request.column)
    assert isinstance(pending, DiscoveredCategories)
    other = pending.to_json().get("other")
    # A released value equal to the "other" label is that bucket already.
    kept: list[object] = [value for value in released if value != other]
    if not kept and other is None:
        raise UploadRejected(
            422,
            f"column {request.column!r}: no category cleared the discovery's threshold; declare "
            '"other", or give the discovery more rho',
        )
    return kept


def _resolve(spec: SchemaSpec, resolved: dict[str, list[object]]) -> TableSchema:
    try:
        return spec.resolve(resolved)
    except SchemaError as error:
        raise UploadRejected(422, f"after discovery: {error}") from None


__all__ = ["Allocation", "DiscoveryOutcome", "discover_and_resolve"]
