"""Schema drafts for owners: read an uploaded file, propose a schema, store nothing.

The file is read once by :func:`engine.schema_draft.draft_schema`. A CSV header wider than
``max_columns`` is refused before any row is read. Parquet is first checked like an
upload (footer size, every page header, the page and batch budgets of
app/datasets/parquet_pages.py, here with every text column decoded to plain strings, as the draft
reads it), so a file that would blow up the API process is refused before decoding.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from app.config import Settings
from app.datasets.ingest import (
    PARQUET_MAGIC,
    IngestLimits,
    UploadRejected,
    check_parquet_footer,
    read_csv_header,
    upload_read_plan,
)
from app.datasets.parquet_pages import ParquetRefused
from app.drafts.schemas import DraftColumnReason, PrivacyUnitSuggestion, SchemaDraftOut
from engine.schema_draft import DEFAULT_MISSING_VALUES, draft_schema
from engine.schema_draft.inference import DraftError, SchemaDraft

SHOW_VALUES_WARNING = (
    "the categories and bounds in this draft are the data's own values: every analyst of the "
    "dataset sees whatever its schema declares"
)
MAX_MISSING_SPELLINGS = 100


def parse_missing_values(raw: str | None) -> tuple[str, ...]:
    """The ``missing_values`` form field: a JSON list of strings, or the default set."""
    if raw is None:
        return DEFAULT_MISSING_VALUES
    try:
        values = json.loads(raw)
    except (ValueError, RecursionError):
        raise UploadRejected(422, "missing_values must be a JSON list of strings") from None
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise UploadRejected(422, "missing_values must be a JSON list of strings")
    if len(values) > MAX_MISSING_SPELLINGS or any(len(v) > 64 for v in values):
        raise UploadRejected(
            422, f"missing_values: at most {MAX_MISSING_SPELLINGS} spellings of 64 characters"
        )
    return tuple(values)


def draft_for_upload(
    path: Path,
    settings: Settings,
    *,
    missing_values: tuple[str, ...],
    show_values: bool,
    stop: Callable[[], bool] | None = None,
) -> SchemaDraftOut:
    """Draft a schema for the file at ``path`` (CPU work: call it off the event loop), from its
    first ``RHOSYNTH_DRAFT_SAMPLE_BYTES`` of decoded values; ``stop`` (the client left) is asked
    between batches."""
    if path.stat().st_size > settings.max_draft_bytes:
        raise UploadRejected(
            413,
            f"drafts read at most {settings.max_draft_bytes} bytes; draft a sample, or run "
            "`rhosynth schema draft` locally",
        )
    with open(path, "rb") as handle:
        is_parquet = handle.read(4) == PARQUET_MAGIC
    plan = _parquet_plan(path, settings) if is_parquet else None
    if not is_parquet:  # the header's width is checked before the draft reads any row
        limits = IngestLimits(settings.max_columns, settings.max_rows, settings.max_cell_bytes)
        header, _ = read_csv_header(path, limits)
        if len(header) > settings.max_columns:
            raise UploadRejected(422, f"the file has more than {settings.max_columns} columns")
    try:
        draft = draft_schema(
            path,
            missing_values=missing_values,
            show_values=show_values,
            parquet_batches=plan,
            max_sample_bytes=settings.draft_sample_bytes,
            stop=stop,
        )
    except DraftError as error:
        raise UploadRejected(422, str(error)) from None
    if len(draft.columns) > settings.max_columns:
        raise UploadRejected(422, f"the file has more than {settings.max_columns} columns")
    unit = draft.privacy_unit
    return SchemaDraftOut(
        schema_=draft.to_json(),
        reasons=[DraftColumnReason(name=c.entry["name"], reason=c.reason) for c in draft.columns],
        rows=draft.rows,
        discovers=draft.discovers,
        show_values=show_values,
        warning=draft_warning(draft),
        privacy_unit=None if unit is None else PrivacyUnitSuggestion(**unit.to_json()),
    )


def draft_warning(draft: SchemaDraft) -> str:
    """What the draft took from the data without DP (and, with show_values, that its categories
    and bounds are the data's own): the response's ``warning``."""
    disclosure = draft.disclosure()
    return f"{SHOW_VALUES_WARNING}. {disclosure}" if draft.show_values else disclosure


def _parquet_plan(path: Path, settings: Settings) -> list[tuple[int, int]]:
    check_parquet_footer(path)
    try:
        metadata = pq.ParquetFile(path).metadata
    except (pa.ArrowException, OSError):
        raise UploadRejected(415, "the file is neither a readable Parquet file nor CSV") from None
    if metadata.num_columns > settings.max_columns:
        raise UploadRejected(422, f"the file has more than {settings.max_columns} columns")
    if metadata.num_rows > settings.max_rows:
        raise UploadRejected(422, f"the table has more than {settings.max_rows} rows")
    try:
        # The draft decodes every column to plain values: no column is read as a dictionary.
        plan = upload_read_plan(
            path, metadata, list(range(metadata.num_columns)), [], settings.max_cell_bytes
        )
    except ParquetRefused as refused:
        raise UploadRejected(422, refused.message) from None
    return [(group.index, group.batch_rows) for group in plan.row_groups]
