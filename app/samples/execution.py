"""Running one attempt of a derived sample in a worker: claim, load the model, draw, publish.

A sample reads no data: only the job's published model (a DP output) and the public schema. So
unlike a job it has no charge, and a lost attempt is simply retried (the recovery loop puts it
back in the queue); the same seed draws the same rows, whichever attempt publishes. Like a job,
a running sample holds a short lease (``RHOSYNTH_JOB_LEASE_SECONDS``) renewed by a heartbeat
thread every ``RHOSYNTH_JOB_HEARTBEAT_SECONDS``, so a sample whose process died is back in the
queue within a lease, not after the time limit (issue 24 §6: a SIGKILLed sample held its
tenant's slot for 61 minutes).
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.datasets import repository as dataset_repository
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import repository as job_repository
from app.jobs.export import store_table
from app.reports.names import MODEL, artefact_key
from app.samples import repository
from app.storage import Storage, discard, open_storage, sample_output_key
from app.webhooks import outbox
from engine.release.model_file import read_model_file
from engine.tables.encoding import TableSchema

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


def execute_sample(settings: Settings, message_id: uuid.UUID) -> str:
    """Answer one message. Returns the outcome; safe to deliver many times.

    A message is a doorbell, as for jobs: it draws the queued sample fairest to draw next
    (:func:`app.samples.repository.claim_next`), which may be another than ``message_id``; each
    sample is sent one message, so every queued sample is drawn."""
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = open_storage(settings)
    now = utcnow()
    lease = timedelta(seconds=settings.job_lease_seconds)
    with transaction(factory) as session:
        sample = repository.claim_next(session, now=now, lease_until=now + lease)
        if sample is None:
            logger.debug("sample message %s: nothing queued", message_id)
            return "skipped"
        sample_id = sample.id
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
        with _Heartbeat(factory, settings, claimed):
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
            if published:
                outbox.record_sample_ready(session, sample_id, settings)
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


class _Heartbeat:
    """Renews a running sample's lease every ``job_heartbeat_seconds`` while it draws."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings, claimed: _Claimed):
        self._factory = factory
        self._settings = settings
        self._claimed = claimed
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"sample-lease-{claimed.sample_id}", daemon=True
        )

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._settings.job_heartbeat_seconds * 2)

    def _run(self) -> None:
        while not self._stop.wait(self._settings.job_heartbeat_seconds):
            lease_until = utcnow() + timedelta(seconds=self._settings.job_lease_seconds)
            try:
                with transaction(self._factory) as session:
                    owned = repository.renew_lease(
                        session, self._claimed.sample_id, self._claimed.attempt, lease_until
                    )
            except Exception:
                logger.warning(
                    "lease renewal failed for sample %s", self._claimed.sample_id, exc_info=True
                )
                continue
            if not owned:  # recovered elsewhere; its publish will fail as not owned
                return


def _draw(storage: Storage, claimed: _Claimed, schema: TableSchema, output_key: str) -> int:
    with storage.local_copy(claimed.model_key) as path:
        model, _schema = read_model_file(path.read_bytes())
    rng = np.random.default_rng(claimed.seed)  # post-processing only; no DP noise is drawn here
    codes = model.sample(claimed.rows, rng)
    # The schema's rules are kept as in the job (redrawn from the model, then repaired); the
    # counts are not stored for a sample (a sample has no report).
    kept = store_table(storage, schema, codes, rng, output_key, sampler=model.sample)
    if kept is not None:
        report = kept.report
        logger.info(
            "sample %s: %d of %d rows broke a rule; %d resampled in their bins, %d redrawn, "
            "%d repaired, %d still breaking",
            claimed.sample_id,
            report.violating_rows_before,
            report.rows,
            report.resampled_rows,
            report.redrawn_rows,
            report.repaired_rows,
            report.remaining_rows,
        )
    return int(codes.shape[0])
