"""DP discovery at upload: count the pending columns, release their domain, complete the schema.

The upload's schema may leave a column's bins (``{"quantiles": k}``, with ``"range": true``
the range too) or categories (``{"discover": true, ...}``) to be learned from the data. This
module reads the file within the upload's memory bounds (:func:`app.datasets.ingest.read_batches`)
once, or twice when a range is learned, to count exactly what the mechanisms need
(engine/discovery/schema.py :func:`discover`); the budget is split by
:func:`engine.discovery.plan.allocate` (the clause's own ρ/δ, else shares of ``discovery_rho``, by
default a fifth of ``budget_rho``, split by need after a noisy row count, and of
``budget_delta``); the releases draw their noise from the OS CSPRNG, and the schema is resolved.
The caller charges ``rho`` and ``delta`` to the new dataset's ledger in the transaction that
creates it, before any job can exist; if anything fails before that commit, the release is
discarded and nobody but the uploader (the owner, who holds the data) saw an error.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa

from app.budget.service import MAX_DETAIL_BYTES
from app.datasets.ingest import IngestLimits, TableFiles, UploadRejected, read_batches
from engine.columns.spec import DELTA_QUANTUM, RHO_QUANTUM
from engine.discovery.plan import (
    Discovered,
    DiscoveryRefused,
    QuantileRequest,
    RangeRequest,
    Request,
    allocate,
    detail_bound,
)
from engine.discovery.schema import discover, provisional, requests_for, resolve
from engine.tables.encoding import SchemaError, SchemaSpec, TableSchema
from engine.tables.units import kept_batches

logger = logging.getLogger(__name__)


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
    source: TableFiles,
    spec: SchemaSpec,
    limits: IngestLimits,
    *,
    budget_rho: Decimal,
    budget_delta: Decimal,
    discovery_rho: Decimal | None,
    noise: random.Random | None = None,
    keep: np.ndarray | None = None,
    contribution_bound: int = 1,
) -> DiscoveryOutcome:
    """The complete schema, and the discovery that completed it (None if nothing was pending).

    ``noise`` is for benchmarks that compare two versions of discovery on the same noise
    (benchmarks/discovery_domains.py ``--paired``); the service never passes it, so its noise
    comes from the OS CSPRNG.

    With a privacy unit, ``keep`` marks the rows truncation kept (app/datasets/units.py): only
    those are read, and every release is calibrated to ``contribution_bound`` (k) rows per unit.

    Raises :class:`UploadRejected` (422) when the budget cannot pay for the discoveries or a
    column cannot be counted; messages name columns and limits, never values.
    """
    try:
        requests = requests_for(spec)
    except ValueError as error:  # a grid the declared bounds cannot hold (names no value)
        raise UploadRejected(422, f"invalid schema: {error}") from None
    found = None
    try:
        if requests:
            budget = allocate(
                requests,
                budget_rho=Fraction(budget_rho),
                budget_delta=Fraction(budget_delta),
                discovery_rho=None if discovery_rho is None else Fraction(discovery_rho),
                rho_quantum=RHO_QUANTUM,
                delta_quantum=DELTA_QUANTUM,
            )
            # The ledger entry's size depends on public inputs only: checked before reading.
            if detail_bound(budget) > MAX_DETAIL_BYTES:
                raise UploadRejected(422, _too_many(len(requests)))
            reading = provisional(spec)

            def batches() -> Iterator[dict[str, pd.Series | pa.Array]]:
                # One pass over the file (discovery makes two when it learns a range).
                read = read_batches(source, reading, limits)
                for batch in read if keep is None else kept_batches(read, keep):
                    yield _series(batch, requests)

            found = discover(
                spec, budget, batches, source=noise, contribution_bound=contribution_bound
            )
            if len(json.dumps(found.describe(), allow_nan=False).encode()) > MAX_DETAIL_BYTES:
                raise UploadRejected(422, _too_many(len(requests)))  # the bound should prevent it
        return DiscoveryOutcome(resolve(spec, found), found)
    except DiscoveryRefused as refused:
        raise UploadRejected(422, str(refused)) from None
    except SchemaError as error:
        raise UploadRejected(422, f"after discovery: {error}") from None
    except ValueError:
        # A learned domain the engine could not build (a bug or a limit): the message comes
        # from DP outputs and public inputs at most, but is kept generic for the owner anyway.
        logger.exception("discovery failed to build a learned domain")
        raise UploadRejected(
            422,
            "discovery could not build a column's learned domain; declare the bounds of the "
            "numeric and date columns, or retry",
        ) from None


NUMBERS = (QuantileRequest, RangeRequest)


def _too_many(columns: int) -> str:
    return (
        f"discovering {columns} columns would make a ledger entry over the limit of "
        f"{MAX_DETAIL_BYTES} bytes: declare the bins or categories of some of them, or shorten "
        "their names"
    )


def _series(batch: pa.RecordBatch, requests: list[Request]) -> dict[str, pd.Series | pa.Array]:
    """The requested columns of a batch: numbers as Arrow arrays (read in Arrow), the rest as
    pandas Series."""
    out: dict[str, pd.Series | pa.Array] = {}
    for request in requests:
        values = batch.column(request.column)
        if isinstance(values, pa.DictionaryArray):
            values = values.dictionary_decode()
        out[request.column] = values if isinstance(request, NUMBERS) else values.to_pandas()
    return out
