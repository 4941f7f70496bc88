"""Running one attempt of a derived sample in a worker: claim, load the model, draw, publish.

A sample reads no data: only the job's published model (a DP output) and the public schema. So
unlike a job it has no charge, and a lost attempt is simply retried (the recovery loop puts it
back in the queue); the same seed draws the same rows, whichever attempt publishes.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta

import numpy as np

from app.config import JOB_SOFT_GRACE_SECONDS, Settings
from app.datasets import repository as dataset_repository
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import repository as job_repository
from app.jobs.export import store_table
from app.reports.names import MODEL, artefact_key
from app.samples import repository
from app.storage import Storage, discard, open_storage, sample_output_key
from engine.encoding import TableSchema
from engine.release.model_file import read_model_file

logger = logging.getLogger(__name__)

SAMPLE_FAILED = (
    "the sample could not be drawn (the operator's logs have the details); it cost nothing"
)
SAMPLE_GONE = "the release was erased with its dataset"


@dataclass(frozen=True)
class _Claimed:
    sample_id: uuid.UUID
    attempt: int
    rows: int
    seed: int
    model_key: str
    schema: TableSchema | None  # None: the dataset was erased


def execute_sample(settings: Settings, sample_id: uuid.UUID) -> str:
    """Answer one message for ``sample_id``. Returns the outcome; safe to deliver many times."""
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = open_storage(settings)
    now = utcnow()
    lease = timedelta(seconds=settings.job_time_limit_seconds + JOB_SOFT_GRACE_SECONDS)
    with transaction(factory) as session:
        sample = repository.claim(session, sample_id, now=now, lease_until=now + lease)
        if sample is None:
            return "skipped"
        job = job_repository.get(session, sample.job_id)
        dataset = dataset_repository.get(session, sample.dataset_id)
        assert job is not None  # a sample is created for an existing job (foreign key)
        erased = dataset is None or dataset.deleted_at is not None
        claimed = _Claimed(
            sample_id=sample.id,
            attempt=sample.attempt,
            rows=sample.rows,
            seed=sample.seed,
            model_key=artefact_key(job.id, job.attempt, MODEL),
            schema=None if erased or dataset is None else TableSchema.from_json(dataset.schema),
        )
    if claimed.schema is None:
        with transaction(factory) as session:
            repository.fail(session, sample_id, claimed.attempt, error=SAMPLE_GONE, now=utcnow())
        return "failed"
    output_key = sample_output_key(sample_id, claimed.attempt)
    try:
        rows = _draw(storage, claimed, claimed.schema, output_key)
        with transaction(factory) as session:
            published = repository.complete(
                session,
                sample_id,
                claimed.attempt,
                output_key=output_key,
                output_rows=rows,
                now=utcnow(),
            )
        if not published:
            discard(storage, output_key)
            return "lost"
        return "succeeded"
    except Exception as error:
        # The model file is gone when the dataset was erased after the claim.
        gone = isinstance(error, FileNotFoundError)
        if not gone:
            logger.exception("sample %s attempt %d failed", sample_id, claimed.attempt)
        discard(storage, output_key)
        with transaction(factory) as session:
            repository.fail(
                session,
                sample_id,
                claimed.attempt,
                error=SAMPLE_GONE if gone else SAMPLE_FAILED,
                now=utcnow(),
            )
        return "failed"


def _draw(storage: Storage, claimed: _Claimed, schema: TableSchema, output_key: str) -> int:
    with storage.local_copy(claimed.model_key) as path:
        model, _schema = read_model_file(path.read_bytes())
    rng = np.random.default_rng(claimed.seed)  # post-processing only; no DP noise is drawn here
    codes = model.sample(claimed.rows, rng)
    store_table(storage, schema, codes, rng, output_key)
    return int(codes.shape[0])
