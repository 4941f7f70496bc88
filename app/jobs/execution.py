"""Running one job attempt in a worker: claim, charge, read, synthesise, publish.

The order is the privacy argument (rule 1): the claim and the conversion of the reservation into
spend commit in one transaction *before* the stored table is opened. From then on the charge is
never refunded, whatever happens. The output is published by a guarded UPDATE that succeeds only
if this attempt still owns the job and nobody asked to cancel it, so at most one output is ever
released per charge.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy.orm import Session, sessionmaker

from app.budget import service as budget_service
from app.config import Settings
from app.datasets import repository as dataset_repository
from app.datasets.ingest import read_encoded_table
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import repository
from app.jobs.repository import Claim
from app.jobs.resources import output_rows_limit
from app.storage import Storage, job_output_key
from engine.domain import Dataset as EngineDataset
from engine.encoding import TableSchema
from engine.mechanisms import get_mechanism
from engine.mechanisms.base import SynthesisCancelled

logger = logging.getLogger(__name__)

WORKER_ACTOR = "worker"
GENERIC_FAILURE = (
    "the synthesis failed with an internal error; the budget for this job stays spent "
    "(the operator's logs have the details)"
)
ENGINE_SHARE = 0.95  # of the progress bar; the rest is decoding and writing the output


class LostOwnership(Exception):
    """This attempt no longer owns the job (its lease ran out and the job was recovered)."""


@dataclass(frozen=True)
class AttemptOutcome:
    job_id: uuid.UUID
    status: str  # "succeeded", "failed", "cancelled", "lost", "skipped"


class _Lease:
    """Renews the attempt's lease from a background thread while the engine works."""

    def __init__(self, factory: sessionmaker[Session], settings: Settings, claim: Claim) -> None:
        self._factory = factory
        self._settings = settings
        self._claim = claim
        self._stop = threading.Event()
        self.lost = False
        self.cancel_requested = False
        self._thread = threading.Thread(target=self._run, name=f"lease-{claim.job_id}", daemon=True)

    def __enter__(self) -> _Lease:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._settings.job_heartbeat_seconds * 2)

    def _run(self) -> None:
        while not self._stop.wait(self._settings.job_heartbeat_seconds):
            try:
                with transaction(self._factory) as session:
                    state = repository.renew_lease(
                        session,
                        self._claim.job_id,
                        self._claim.attempt,
                        _lease_until(self._settings),
                    )
            except Exception:
                logger.warning("lease renewal failed for job %s", self._claim.job_id, exc_info=True)
                continue
            if state is None:
                self.lost = True
                return
            self.cancel_requested = state


class _Progress:
    """The engine's progress callback: writes progress, notices cancellation and lost leases."""

    def __init__(
        self, factory: sessionmaker[Session], settings: Settings, claim: Claim, lease: _Lease
    ) -> None:
        self._factory = factory
        self._settings = settings
        self._claim = claim
        self._lease = lease
        self._last_write = 0.0
        self._last_stage = ""

    def __call__(
        self, fraction: float, stage: str, *, scale: float = ENGINE_SHARE, offset: float = 0.0
    ) -> None:
        if self._lease.lost:
            raise LostOwnership(self._claim.job_id)
        if self._lease.cancel_requested:
            raise SynthesisCancelled(self._claim.job_id)
        now = time.monotonic()
        if stage == self._last_stage and now - self._last_write < 1.0:
            return
        self._last_stage, self._last_write = stage, now
        value = min(1.0, max(0.0, offset + scale * fraction))
        with transaction(self._factory) as session:
            state = repository.report_progress(
                session,
                self._claim.job_id,
                self._claim.attempt,
                fraction=value,
                stage=stage,
                lease_until=_lease_until(self._settings),
            )
        if state is None:
            raise LostOwnership(self._claim.job_id)
        if state:
            raise SynthesisCancelled(self._claim.job_id)

    def stage(self, fraction: float, stage: str) -> None:
        """Progress outside the engine (decoding, writing)."""
        self(fraction, stage, scale=1.0)


def _lease_until(settings: Settings) -> datetime:
    return utcnow() + timedelta(seconds=settings.job_lease_seconds)


def claim_and_charge(
    factory: sessionmaker[Session], settings: Settings, job_id: uuid.UUID
) -> Claim | None:
    """Start an attempt and, on the first one, turn the reservation into spend. Commits."""
    with transaction(factory) as session:
        now = utcnow()
        claim = repository.claim(
            session,
            job_id,
            now=now,
            lease_until=_lease_until(settings),
            max_attempts=settings.job_max_attempts,
        )
        if claim is None:
            return None
        if not claim.charged:
            # Privacy rule 1: charge before the first read of the data; never refunded.
            budget_service.spend_reservation(
                session, claim.dataset_id, claim.rho, job_id, WORKER_ACTOR
            )
            if not repository.mark_charged(session, job_id, claim.attempt, now):
                raise RuntimeError(f"job {job_id}: could not record its charge")
    return claim


def execute_job(settings: Settings, job_id: uuid.UUID) -> AttemptOutcome:
    """Run one attempt of ``job_id`` if it is claimable; the database decides, not the message."""
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = Storage(settings.resolved_storage_dir)
    claim = claim_and_charge(factory, settings, job_id)
    if claim is None:
        logger.info("job %s: nothing to do (already claimed, finished or cancelled)", job_id)
        return AttemptOutcome(job_id, "skipped")

    output_key = job_output_key(job_id, claim.attempt)
    with _Lease(factory, settings, claim) as lease:
        progress = _Progress(factory, settings, claim, lease)
        try:
            rows = _synthesize(factory, settings, storage, claim, progress, output_key)
            with transaction(factory) as session:
                published = repository.complete(
                    session,
                    job_id,
                    claim.attempt,
                    output_key=output_key,
                    output_rows=rows,
                    now=utcnow(),
                )
            if published:
                logger.info("job %s attempt %d succeeded", job_id, claim.attempt)
                return AttemptOutcome(job_id, "succeeded")
            storage.delete(output_key)
            return _finish_unpublished(factory, claim)
        except SynthesisCancelled:
            storage.delete(output_key)
            _finish(factory, claim, "cancelled", None)
            logger.info("job %s cancelled during attempt %d", job_id, claim.attempt)
            return AttemptOutcome(job_id, "cancelled")
        except LostOwnership:
            storage.delete(output_key)
            logger.warning(
                "job %s attempt %d lost its lease; another attempt owns it", job_id, claim.attempt
            )
            return AttemptOutcome(job_id, "lost")
        except Exception:
            storage.delete(output_key)
            # Logged in full for the operator; the job record gets no data-derived text.
            logger.exception("job %s attempt %d failed", job_id, claim.attempt)
            _finish(factory, claim, "failed", GENERIC_FAILURE)
            return AttemptOutcome(job_id, "failed")


def _finish(factory: sessionmaker[Session], claim: Claim, status: str, error: str | None) -> None:
    with transaction(factory) as session:
        repository.finish(
            session, claim.job_id, claim.attempt, status=status, error=error, now=utcnow()
        )


def _finish_unpublished(factory: sessionmaker[Session], claim: Claim) -> AttemptOutcome:
    """The output was ready but could not be published: cancelled meanwhile, or lost."""
    with transaction(factory) as session:
        job = repository.get(session, claim.job_id)
        if (
            job is not None
            and job.status == "running"
            and job.attempt == claim.attempt
            and job.cancel_requested
        ):
            repository.finish(
                session, claim.job_id, claim.attempt, status="cancelled", error=None, now=utcnow()
            )
            return AttemptOutcome(claim.job_id, "cancelled")
    return AttemptOutcome(claim.job_id, "lost")


def _synthesize(
    factory: sessionmaker[Session],
    settings: Settings,
    storage: Storage,
    claim: Claim,
    progress: _Progress,
    output_key: str,
) -> int:
    with transaction(factory) as session:
        dataset = dataset_repository.get(session, claim.dataset_id)
        if dataset is None or dataset.storage_key is None:
            raise SynthesisCancelled(claim.job_id)  # erased after submission
        schema = TableSchema.from_json(dataset.schema)
        table_key = dataset.storage_key
    mechanism = get_mechanism(claim.method)
    params = mechanism.validate_params(claim.params)
    # Seeds drive post-processing only; DP noise comes from the CSPRNG inside the engine.
    rng = np.random.default_rng(claim.seed)

    progress.stage(0.0, "load")
    codes = read_encoded_table(storage.path(table_key), schema)
    codes.flags.writeable = False  # the engine keeps a read-only view instead of copying it
    data = EngineDataset(schema.domain(), codes)
    del codes
    result = mechanism.run(
        data,
        Fraction(claim.rho),
        params,
        rng=rng,
        rows=claim.rows,
        # Public cap: RHOSYNTH_MAX_OUTPUT_ROWS and the rows that fit the per-job memory limit.
        max_rows=output_rows_limit(settings, mechanism, data.domain, params),
        progress=progress,
    )
    del data
    progress.stage(ENGINE_SHARE, "write")
    synthetic = result.codes
    frame = schema.decode(synthetic, rng)
    temp = storage.temp_path(".parquet")
    try:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), temp, compression="zstd")
        storage.put(temp, output_key)
    finally:
        temp.unlink(missing_ok=True)
    return int(synthetic.shape[0])
