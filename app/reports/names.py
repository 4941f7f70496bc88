"""The names of a job's artefacts, where they are stored, and which keys may see them.

Kept apart from the writer (app/reports/artefacts.py, worker side, which imports the report
builders and matplotlib), so the API imports only this.
"""

from __future__ import annotations

import uuid

from app.storage import job_attempt_prefix

RECORD = "record.npz"
MODEL = "model.npz"
MEASUREMENTS_JSON = "measurements.json"
MEASUREMENTS_PARQUET = "measurements.parquet"
RELEASE_JSON = "report-release.json"
RELEASE_HTML = "report-release.html"
OWNER_JSON = "report-owner.json"
OWNER_HTML = "report-owner.html"

OWNER_ONLY = frozenset({OWNER_JSON, OWNER_HTML})
ALL = (
    RECORD,
    MODEL,
    MEASUREMENTS_JSON,
    MEASUREMENTS_PARQUET,
    RELEASE_JSON,
    RELEASE_HTML,
    OWNER_JSON,
    OWNER_HTML,
)


def artefact_key(job_id: uuid.UUID, attempt: int, name: str) -> str:
    if name not in ALL:
        raise ValueError(f"unknown artefact {name!r}")
    return f"{job_attempt_prefix(job_id, attempt)}/{name}"


OWNER_INPUT = "owner-input.npy"
"""The synthetic codes the job worker leaves for the owner tier (app/jobs/owner_tier.py): in the
attempt's folder, never listed among its artefacts nor served, removed once the owner tier is
built or given up."""


def owner_input_key(job_id: uuid.UUID, attempt: int) -> str:
    return f"{job_attempt_prefix(job_id, attempt)}/{OWNER_INPUT}"


def visible(names: list[str] | None, *, owner: bool) -> list[str]:
    """The published artefacts a key may see listed (owner-tier names for owners only)."""
    return [name for name in names or [] if owner or name not in OWNER_ONLY]
