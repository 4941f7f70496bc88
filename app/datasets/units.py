"""Truncation to at most k rows per privacy unit, before anything else reads an upload.

With a privacy unit in the schema (``"privacy_unit": {"column": ..., "max_rows": k}``), the
upload is read once more, first: every row's keyed hash (a fresh key per upload, never stored) of
its unit and every other column as read, and its unit. :func:`engine.privacy_unit.truncate` keeps
the k rows of each unit with the smallest hashes (rows without a unit are dropped); discovery and
encoding then read only the kept rows (``keep``). The unit's values are held in memory for that
pass only, as Arrow bytes: at most :data:`UNIT_MAX_BYTES` bytes a cell and ``max_unit_rows`` rows
(docs/operations.md, "Privacy units"), both checked before the memory is taken.
"""

from __future__ import annotations

import random
from contextlib import closing
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

from app.datasets.ingest import IngestLimits, TableFiles, UploadRejected, read_batches
from engine.columns.spec import RHO_QUANTUM
from engine.privacy_unit import PrivacyUnit, Truncation, noisy_truncation
from engine.tables.encoding import TableSchema
from engine.tables.units import UnitCollector, reading_schema

UNIT_MAX_BYTES = 64
"""The longest unit value (an id) accepted, in UTF-8 bytes: the unit column is held in memory."""

UNIT_ROW_BYTES = 190
"""Peak memory per row of the truncation pass beside the unit's own bytes (its offset, hash,
dictionary index, keep flag, and truncation's factorisation and sort), measured: +335 MiB for
2,000,000 rows of 16-byte ids, +483 MiB for 64-byte ids (docs/operations.md)."""


@dataclass(frozen=True)
class UnitLimits:
    max_rows: int  # RHOSYNTH_MAX_UNIT_ROWS: rows of an upload with a privacy unit


def unit_memory_bytes(rows: int) -> int:
    """The most the truncation pass holds for ``rows`` rows (docs/operations.md)."""
    return rows * (UNIT_MAX_BYTES + UNIT_ROW_BYTES)


def truncation_pass(
    source: TableFiles,
    schema: TableSchema,
    unit: PrivacyUnit,
    limits: IngestLimits,
    unit_limits: UnitLimits,
    *,
    key: str | None = None,
) -> Truncation:
    """Which rows of ``source`` to keep: at most ``unit.max_rows`` per unit (exact figures:
    owner-only). ``schema`` is the upload's (the unit an ignored column of it); ``key`` is for
    tests (default: a fresh key from the OS CSPRNG, forgotten afterwards).

    Raises :class:`UploadRejected` when the file breaks a limit (more rows than
    ``unit_limits.max_rows``, a unit longer than :data:`UNIT_MAX_BYTES`); messages name the
    column and count rows, never a value.
    """
    max_rows = min(limits.max_rows, unit_limits.max_rows)
    # Every column of the file, read as text from a CSV (Parquet: its own types).
    reading = reading_schema(schema)
    collector = UnitCollector(
        unit, reading.names, schema.missing_values, key=key, max_unit_bytes=UNIT_MAX_BYTES
    )
    bounded = IngestLimits(limits.max_columns, max_rows, limits.max_cell_bytes)
    over_rows = f"a table with a privacy unit has at most {max_rows} rows"
    too_long = 0
    try:
        with closing(read_batches(source, reading, bounded)) as batches:
            for batch in batches:
                # Checked before the batch's units are held (a Parquet footer's row count is
                # checked by the reader before any batch).
                if collector.rows + batch.num_rows > max_rows:
                    raise UploadRejected(422, over_rows)
                too_long += collector.add(batch)
    except UploadRejected as rejected:
        if (
            max_rows < limits.max_rows
            and rejected.message == f"the table has more than {max_rows} rows"
        ):
            # The reader's own check (a Parquet footer) of the bound it was given: say which
            # limit the table broke, as docs/api.md does.
            raise UploadRejected(422, over_rows) from None
        raise
    if too_long:
        raise UploadRejected(
            422,
            f"column {unit.column!r} (the privacy unit): {too_long} rows hold a unit longer "
            f"than {UNIT_MAX_BYTES} bytes",
        )
    if collector.rows == 0:
        raise UploadRejected(422, "the table has no rows")
    return collector.truncate()


TRUNCATION_SHARE = Fraction(1, 100)
"""The share of a dataset's ρ that pays for the DP count of what truncation removed: taken in
addition to discovery's share (never from it), so that discovery and the jobs draw the same noise
as a row-level upload of the same budget (docs/privacy.md, "Privacy per person")."""


@dataclass(frozen=True)
class TruncationCharge:
    """The ledger's ``discover`` entry for the truncation count: ``rho``, its ``detail`` and the
    DP figures kept on the dataset for the reports (``released``)."""

    rho: Decimal
    detail: dict[str, Any]
    released: dict[str, Any]


def contribution_bound(unit: PrivacyUnit | None) -> int:
    """k: the rows one unit may add or remove (1 without a unit: a row is the unit)."""
    return 1 if unit is None else unit.max_rows


def truncation_rho(total_rho: Decimal) -> Decimal:
    """ρ of the truncation count: :data:`TRUNCATION_SHARE` of the budget, rounded down to the
    ledger's grid (public: a function of the budget alone)."""
    share = Fraction(total_rho) * TRUNCATION_SHARE
    steps = share // RHO_QUANTUM
    exact = Fraction(steps) * RHO_QUANTUM
    return Decimal(exact.numerator) / Decimal(exact.denominator)


def release_truncation(
    truncation: Truncation,
    unit: PrivacyUnit,
    *,
    total_rho: Decimal,
    discovery_spent: Decimal,
    source: random.Random | None = None,
) -> TruncationCharge:
    """The DP count of what truncation removed (:func:`engine.privacy_unit.noisy_truncation`)
    at ρ = :func:`truncation_rho`; raises :class:`UploadRejected` when the budget cannot pay for
    it beside discovery (a message from public inputs and discovery's DP cost only)."""
    rho = truncation_rho(total_rho)
    if rho <= 0 or discovery_spent + rho > total_rho:
        raise UploadRejected(
            422,
            f"budget_rho = {total_rho} cannot pay for discovery (ρ = {discovery_spent}) and the "
            f"count of rows truncation removed (ρ = {rho}, a hundredth of the budget): raise "
            "budget_rho or lower discovery_rho",
        )
    released = noisy_truncation(truncation, Fraction(rho), unit.max_rows, source)
    detail = {
        **released.describe(),
        "privacy_unit": {"max_rows": unit.max_rows},
        "what": "rows removed by truncation to at most k rows per unit (a DP count)",
    }
    figures = {
        "units_truncated": max(0, released.units_truncated),
        "rows_removed_at_least": max(0, released.rows_removed),
        "cap": released.cap,
        "sigma": released.sigma,
        "rho": str(rho),
    }
    return TruncationCharge(rho=rho, detail=detail, released=figures)


def truncation_figures(truncation: Truncation) -> dict[str, int]:
    """The exact figures of a truncation, for the owner only (not DP)."""
    return {
        "rows_in": truncation.rows_in,
        "rows_kept": truncation.rows_kept,
        "rows_removed": truncation.rows_removed,
        "units": truncation.units,
        "units_truncated": truncation.units_truncated,
        "rows_without_unit": truncation.rows_without_unit,
    }
