"""Running one job attempt in a worker: claim, charge, read, synthesise, publish.

The order is the privacy argument (rule 1): the claim and the conversion of the reservation into
spend commit in one transaction *before* the stored table is opened. From then on the charge is
never refunded, whatever happens. The output is published by a guarded UPDATE that succeeds only
if this attempt still owns the job and nobody asked to cancel it, so at most one output is ever
released per charge.

The worker bounds each attempt (app/jobs/limits.py): a deadline set at the claim, checked at every
progress report and by the lease thread, and an address-space limit on the pool process. A job
that reaches either ends failed with a fixed text, stays charged and is not retried.

A Celery message is a doorbell: ``execute_job`` claims the queued job that is fairest to start
next (app/jobs/repository.py, ``claim_next``), which may be another job than the one it names.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
from sqlalchemy.orm import Session, sessionmaker

from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.config import JOB_SOFT_GRACE_SECONDS, Settings
from app.datasets import repository as dataset_repository
from app.datasets.ingest import read_stored_table
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import dispatch, partitioned_output, repository
from app.jobs.export import store_table
from app.jobs.limits import (
    JobTimeLimitExceeded,
    caused_by_memory_error,
    enforced_memory_limit_mb,
    input_allowance_bytes,
    memory_limit_error,
    raised_memory_limit,
    time_limit_error,
)
from app.jobs.owner_tier import release_title, save_owner_input, send_owner_tier
from app.jobs.progress import PHASES, ProgressPoint, engine_point
from app.jobs.repository import Claim
from app.jobs.resources import output_rows_limit
from app.reports.artefacts import (
    ArtefactWriter,
    write_release_artefacts,
)
from app.sources.counting import engine_allowance_bytes, source_engine
from app.sources.reading import SOURCE_CHANGED, SourceChanged, SourceSpec
from app.storage import Storage, dataset_values_key, discard, job_output_key, open_storage
from app.webhooks import outbox
from engine.counting import CountingEngine
from engine.domain import Dataset as EngineDataset
from engine.mechanisms import get_mechanism
from engine.mechanisms.base import SynthesisCancelled
from engine.release.from_result import record_from_result
from engine.reports.unit import unit_statement
from engine.tables.encoding import TableSchema

logger = logging.getLogger(__name__)

WORKER_ACTOR = "worker"
GENERIC_FAILURE = (
    "the synthesis failed with an internal error; the budget for this job stays spent "
    "(the operator's logs have the details)"
)

SOURCE_CHANGED_FAILURE = f"{SOURCE_CHANGED}; the budget for this job stays spent"


class LostOwnership(Exception):
    """This attempt no longer owns the job (its lease ran out and the job was recovered)."""


@dataclass(frozen=True)
class AttemptOutcome:
    job_id: uuid.UUID
    status: str  # "succeeded", "failed", "cancelled", "lost", "skipped"


class _Lease:
    """Renews the attempt's lease from a background thread while the engine works, and watches
    the attempt's deadline.

    Past the deadline the engine is stopped at its next progress report (``past_deadline``). If
    the attempt still runs ``JOB_SOFT_GRACE_SECONDS`` later (the engine reports no progress, and
    Celery's soft time limit, due at the same moment, did not stop it either), this thread ends
    the job failed itself, so that it can no longer publish, and stops renewing the lease;
    Celery's hard time limit then kills the process.
    """

    def __init__(self, factory: sessionmaker[Session], settings: Settings, claim: Claim) -> None:
        self._factory = factory
        self._settings = settings
        self._claim = claim
        # The deadline on this process's monotonic clock (claim.deadline_at is wall-clock time).
        remaining = (claim.deadline_at - utcnow()).total_seconds()
        self._deadline = time.monotonic() + remaining
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

    def past_deadline(self) -> bool:
        return time.monotonic() >= self._deadline

    def _run(self) -> None:
        while not self._stop.wait(self._settings.job_heartbeat_seconds):
            if time.monotonic() >= self._deadline + JOB_SOFT_GRACE_SECONDS:
                self._end_past_deadline()
                return
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

    def _end_past_deadline(self) -> None:
        logger.warning(
            "job %s attempt %d still running %d s past its deadline; ending it failed",
            self._claim.job_id,
            self._claim.attempt,
            JOB_SOFT_GRACE_SECONDS,
        )
        try:
            _finish(
                self._factory,
                self._settings,
                self._claim,
                "failed",
                time_limit_error(self._settings.job_time_limit_seconds),
            )
        except Exception:
            # The lease then runs out; the recovery loop fails the job with the same text.
            logger.warning("could not end job %s", self._claim.job_id, exc_info=True)


class _Progress:
    """The engine's two progress callbacks: write progress, notice cancellation and lost leases.

    Public progress (every key) changes only at a point of the public schedule
    (``app.jobs.progress``): an engine milestone or a service phase, written at once. Detail
    progress (owner keys only) is the engine's own, which can depend on the noise, written at
    most about once per second per stage. Every report, of either kind, checks for a lost lease
    and a cancel request first.
    """

    def __init__(
        self, factory: sessionmaker[Session], settings: Settings, claim: Claim, lease: _Lease
    ) -> None:
        self._factory = factory
        self._settings = settings
        self._claim = claim
        self._lease = lease
        self._last_write = 0.0
        self._detail = ProgressPoint(0.0, "starting")
        self._written_stage = ""

    def __call__(self, fraction: float, stage: str) -> None:
        """The engine's detailed progress (``Mechanism.run``'s ``progress``)."""
        self._check()
        self._detail = engine_point(fraction, stage)
        if stage == self._written_stage and time.monotonic() - self._last_write < 1.0:
            return
        self._write(public=None)

    def milestone(self, fraction: float, stage: str) -> None:
        """The engine reached a public milestone (``Mechanism.run``'s ``on_milestone``)."""
        self._check()
        self._write(public=engine_point(fraction, stage))

    def phase(self, name: str) -> None:
        """A public phase of the service around the engine (``load``, ``write``)."""
        self._check()
        self._detail = PHASES[name]
        self._write(public=PHASES[name])

    def check(self) -> None:
        """Raise if the attempt must stop (time limit, lost lease, cancel), without writing."""
        self._check()

    def _check(self) -> None:
        if self._lease.past_deadline():  # the job's time limit (app/jobs/limits.py)
            raise JobTimeLimitExceeded(self._claim.job_id)
        if self._lease.lost:
            raise LostOwnership(self._claim.job_id)
        if self._lease.cancel_requested:
            raise SynthesisCancelled(self._claim.job_id)

    def _write(self, *, public: ProgressPoint | None) -> None:
        self._written_stage, self._last_write = self._detail.stage, time.monotonic()
        with transaction(self._factory) as session:
            state = repository.report_progress(
                session,
                self._claim.job_id,
                self._claim.attempt,
                detail=self._detail,
                public=public,
                lease_until=_lease_until(self._settings),
            )
        if state is None:
            raise LostOwnership(self._claim.job_id)
        if state:
            raise SynthesisCancelled(self._claim.job_id)


def _lease_until(settings: Settings) -> datetime:
    return utcnow() + timedelta(seconds=settings.job_lease_seconds)


def _deadline(settings: Settings, now: datetime) -> datetime:
    return now + timedelta(seconds=settings.job_time_limit_seconds)


def _charge_first_claim(session: Session, claim: Claim, now: datetime) -> None:
    if not claim.charged:
        # Privacy rule 1: charge before the first read of the data; never refunded.
        budget_service.spend_reservation(
            session, claim.dataset_id, claim.rho, claim.job_id, WORKER_ACTOR
        )
        if not repository.mark_charged(session, claim.job_id, claim.attempt, now):
            raise RuntimeError(f"job {claim.job_id}: could not record its charge")


def claim_and_charge(
    factory: sessionmaker[Session], settings: Settings, job_id: uuid.UUID
) -> Claim | None:
    """Start an attempt of this very job and, on the first one, turn the reservation into spend.
    Commits.

    Not the worker's path (:func:`claim_next_and_charge` is: a message starts the fairest job,
    not its own); tests use this to drive one named job through the state machine of a claim.
    """
    with transaction(factory) as session:
        now = utcnow()
        claim = repository.claim(
            session,
            job_id,
            now=now,
            lease_until=_lease_until(settings),
            deadline_at=_deadline(settings, now),
            max_attempts=settings.job_max_attempts,
        )
        if claim is not None:
            _charge_first_claim(session, claim, now)
    return claim


def claim_next_and_charge(
    factory: sessionmaker[Session], settings: Settings, doorbell: uuid.UUID
) -> Claim | None:
    """What a message for job ``doorbell`` starts: the queued job that is fairest to start next
    (any tenant's), or else, if there is none, ``doorbell`` itself when its worker was lost
    before its deadline (a message redelivered after a crash). Charges a first claim. Commits."""
    with transaction(factory) as session:
        now = utcnow()
        lease_until, deadline_at = _lease_until(settings), _deadline(settings, now)
        max_attempts = settings.job_max_attempts
        claim = repository.claim_next(
            session,
            now=now,
            lease_until=lease_until,
            deadline_at=deadline_at,
            max_attempts=max_attempts,
            tenant_max_running=settings.tenant_max_running,
        )
        if claim is None:
            claim = repository.claim(
                session,
                doorbell,
                now=now,
                lease_until=lease_until,
                deadline_at=deadline_at,
                max_attempts=max_attempts,
                lost_only=True,
            )
        if claim is not None:
            _charge_first_claim(session, claim, now)
    return claim


def execute_job(settings: Settings, job_id: uuid.UUID) -> AttemptOutcome:
    """Answer one message for ``job_id``: run one attempt of the fairest claimable job, if there
    is one (the database decides, not the message)."""
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = claim_next_and_charge(factory, settings, job_id)
    if claim is None:
        logger.info("job %s: nothing to do (already claimed, finished or cancelled)", job_id)
        return AttemptOutcome(job_id, "skipped")
    if claim.job_id != job_id:
        logger.info("job %s: its message started job %s (fair order)", job_id, claim.job_id)
    try:
        return _run_attempt(factory, settings, claim)
    finally:
        if settings.tenant_max_running is not None:
            _ring_for_capped_jobs(factory, settings)


def _run_attempt(
    factory: sessionmaker[Session], settings: Settings, claim: Claim
) -> AttemptOutcome:
    job_id = claim.job_id
    storage = open_storage(settings)
    output_key = job_output_key(job_id, claim.attempt)
    with _Lease(factory, settings, claim) as lease:
        writer = ArtefactWriter(storage, job_id, claim.attempt, past_deadline=lease.past_deadline)
        progress = _Progress(factory, settings, claim, lease)
        try:
            rows, published_key = _synthesize(
                factory, settings, storage, claim, progress, output_key, writer
            )
            with transaction(factory) as session:
                published = repository.complete(
                    session,
                    job_id,
                    claim.attempt,
                    output_key=published_key,
                    output_rows=rows,
                    artefacts=writer.written,
                    now=utcnow(),
                )
                if published:
                    outbox.record_job_ended(session, job_id, settings)
            if published:
                logger.info("job %s attempt %d succeeded", job_id, claim.attempt)
                # After the commit: a reports worker builds the owner tier, never this slot.
                send_owner_tier(settings, job_id)
                return AttemptOutcome(job_id, "succeeded")
            discard(storage, output_key, writer.prefix)
            return _finish_unpublished(factory, settings, claim)
        except SynthesisCancelled:
            discard(storage, output_key, writer.prefix)
            _finish(factory, settings, claim, "cancelled", None)
            logger.info("job %s cancelled during attempt %d", job_id, claim.attempt)
            return AttemptOutcome(job_id, "cancelled")
        except LostOwnership:
            discard(storage, output_key, writer.prefix)
            logger.warning(
                "job %s attempt %d lost its lease; another attempt owns it", job_id, claim.attempt
            )
            return AttemptOutcome(job_id, "lost")
        except Exception as error:
            discard(storage, output_key, writer.prefix)
            # Logged in full for the operator; the job record gets no data-derived text.
            reason: str
            if caused_by_memory_error(error):
                limit_mb = enforced_memory_limit_mb() or settings.job_memory_limit_mb
                logger.warning(
                    "job %s attempt %d ran out of memory (limit %d MB)",
                    job_id,
                    claim.attempt,
                    limit_mb,
                    exc_info=True,
                )
                reason = memory_limit_error(limit_mb)
            elif isinstance(error, JobTimeLimitExceeded) or lease.past_deadline():
                # Also Celery's soft time limit, and anything else raised past the deadline.
                logger.warning(
                    "job %s attempt %d exceeded its time limit of %d s",
                    job_id,
                    claim.attempt,
                    settings.job_time_limit_seconds,
                    exc_info=not isinstance(error, JobTimeLimitExceeded),
                )
                reason = time_limit_error(settings.job_time_limit_seconds)
            elif isinstance(error, SourceChanged):
                # The registered source no longer matches what registration measured: the
                # owner changed it. Charged at the claim like any failure (privacy rule 1).
                logger.warning("job %s: its registered source changed", job_id)
                reason = SOURCE_CHANGED_FAILURE
            else:
                logger.exception("job %s attempt %d failed", job_id, claim.attempt)
                reason = GENERIC_FAILURE
            # The traceback may outlive this block (a log handler can keep the record): drop
            # the locals of the engine's finished frames, which hold its arrays.
            traceback.clear_frames(error.__traceback__)
        # Only a failure gets here. Outside the except block the exception, its traceback and
        # the engine's frames (with their arrays) are released; collect them before writing the
        # outcome: after a memory failure the write itself could otherwise fail, the lease
        # thread stop, and the recovery loop re-run the job with fresh noise for its one charge.
        gc.collect()
        _finish_failed(factory, settings, claim, reason)
        return AttemptOutcome(job_id, "failed")


def _ring_for_capped_jobs(factory: sessionmaker[Session], settings: Settings) -> None:
    """With a per-tenant cap, a message that found only capped tenants' jobs did nothing and is
    gone; a slot of this tenant has just freed, so send one more message for the queue."""
    try:
        with transaction(factory) as session:
            waiting = repository.oldest_queued(session)
    except Exception:
        logger.warning("could not look for queued jobs after an attempt", exc_info=True)
        return
    if waiting is not None:
        dispatch.enqueue_job(settings, waiting)


def _finish_failed(
    factory: sessionmaker[Session], settings: Settings, claim: Claim, reason: str
) -> None:
    """End the attempt ``failed`` with ``reason``, trying twice: a write that fails once (out of
    memory after a memory failure, a dropped connection) is retried after a collection."""
    try:
        _finish(factory, settings, claim, "failed", reason)
    except Exception:
        logger.warning(
            "job %s: recording the failure failed; retrying", claim.job_id, exc_info=True
        )
        gc.collect()
        _finish(factory, settings, claim, "failed", reason)


def _finish(
    factory: sessionmaker[Session],
    settings: Settings,
    claim: Claim,
    status: str,
    error: str | None,
) -> None:
    with transaction(factory) as session:
        if repository.finish(
            session, claim.job_id, claim.attempt, status=status, error=error, now=utcnow()
        ):
            outbox.record_job_ended(session, claim.job_id, settings)


def _finish_unpublished(
    factory: sessionmaker[Session], settings: Settings, claim: Claim
) -> AttemptOutcome:
    """The output was ready but could not be published: cancelled meanwhile, past its deadline
    (the publish transaction checks it), or lost."""
    with transaction(factory) as session:
        now = utcnow()
        job = repository.get(session, claim.job_id)
        if job is None or job.status != "running" or job.attempt != claim.attempt:
            return AttemptOutcome(claim.job_id, "lost")
        # Each event only if this finish changed the job: the recovery loop may have ended the
        # attempt since the read above, and written the job's event itself.
        if job.cancel_requested:
            if repository.finish(
                session, claim.job_id, claim.attempt, status="cancelled", error=None, now=now
            ):
                outbox.record_job_ended(session, claim.job_id, settings)
            return AttemptOutcome(claim.job_id, "cancelled")
        if job.deadline_at is not None and job.deadline_at < now:
            if repository.finish(
                session,
                claim.job_id,
                claim.attempt,
                status="failed",
                error=time_limit_error(settings.job_time_limit_seconds),
                now=now,
            ):
                outbox.record_job_ended(session, claim.job_id, settings)
            return AttemptOutcome(claim.job_id, "failed")
    return AttemptOutcome(claim.job_id, "lost")


@dataclass(frozen=True)
class _Source:
    """What a run reads of its dataset's record before it loads the table."""

    schema: TableSchema
    table_key: str | None  # None: a registered source read in place (``source``)
    values_key: str  # the raw values, for the owner tier after publication
    discovery_delta: float  # the δ discovery spent on the published domain
    allowance: int  # the input table's address space, added to the memory limit
    contribution_bound: int = 1  # k: the rows one privacy unit may have (1: row-level)
    unit: dict[str, Any] | None = None  # the reports' statement of the unit (public)
    source: SourceSpec | None = None  # a registered source without a copy (docs/sources.md)
    fingerprint: dict[str, Any] | None = None  # what its registration measured
    engine: str = "duckdb"  # the counting engine recorded at registration
    registered_rows: int = 0  # the rows registration counted (private: bounds the re-read)

    @property
    def unit_max_rows(self) -> int | None:
        return None if self.unit is None else int(self.unit["max_rows"])


def _source(factory: sessionmaker[Session], settings: Settings, claim: Claim) -> _Source:
    with transaction(factory) as session:
        dataset = dataset_repository.get(session, claim.dataset_id)
        if dataset is None or not dataset.readable:
            raise SynthesisCancelled(claim.job_id)  # erased after submission
        schema = TableSchema.from_json(dataset.schema)
        account = budget_repository.get_account(session, claim.dataset_id)
        if dataset.reads_source:
            # Counted by an engine over the source: the in-memory input allowance does not
            # apply; DuckDB's buffer pool (a setting, public) is added to the memory limit
            # instead, so the engine's memory never decides whether the job fits.
            assert dataset.source is not None
            engine = dataset.source_engine or settings.source_engine
            return _Source(
                schema,
                None,
                dataset_values_key(dataset.id),
                float(account.spent_delta) if account is not None else 0.0,
                engine_allowance_bytes(settings, engine),
                source=SourceSpec.from_json(dataset.source),
                fingerprint=dataset.source_fingerprint,
                engine=engine,
                registered_rows=dataset.n_rows,
            )
        # The input table's own address space (private: its exact rows), added to this job's
        # memory limit so that whether the job fits depends on the public estimate only.
        domain = schema.domain()
        return _Source(
            schema,
            dataset.storage_key,
            dataset_values_key(dataset.id),
            float(account.spent_delta) if account is not None else 0.0,
            input_allowance_bytes(
                dataset.n_rows,
                len(domain),
                domain.code_dtype.itemsize,
                get_mechanism(claim.method).counting_cache_bytes,
            ),
            contribution_bound=dataset.unit_max_rows or 1,
            unit=unit_statement(dataset.unit_max_rows, dataset.truncation_release),
        )


def _synthesize(
    factory: sessionmaker[Session],
    settings: Settings,
    storage: Storage,
    claim: Claim,
    progress: _Progress,
    output_key: str,
    writer: ArtefactWriter,
) -> tuple[int, str]:
    """Run the attempt up to publication; returns the synthetic table's row count and the key
    it is published under (``output_key``, or a partitioned output's manifest)."""
    source = _source(factory, settings, claim)
    # The job's memory limit is raised by its input table's allowance while it runs.
    with raised_memory_limit(source.allowance):
        schema, table_key = source.schema, source.table_key
        mechanism = get_mechanism(claim.method)
        params = mechanism.validate_params(claim.params)
        # Seeds drive post-processing only; DP noise comes from the CSPRNG inside the engine.
        rng = np.random.default_rng(claim.seed)
        # A large release is drawn in chunks after the run (public facts decide).
        chunked = partitioned_output.applies(settings, mechanism, claim.rows)

        progress.phase("load")
        with contextlib.ExitStack() as reading:
            data: EngineDataset | CountingEngine
            if table_key is None:
                # A registered source (app/sources/counting.py): its fingerprint checked, its
                # rows encoded into scratch codes and counted by the operator's engine.
                assert source.source is not None and source.fingerprint is not None
                refusal = mechanism.engine_refusal(params)
                if refusal is not None:  # refused at submission; never reached
                    raise RuntimeError(refusal)
                data = reading.enter_context(
                    source_engine(
                        settings,
                        storage,
                        source.source,
                        source.fingerprint,
                        schema,
                        source.engine,
                        source.registered_rows,
                    )
                )
            else:
                # The engine's run takes the codes at their stored width: at 10 M rows × 14
                # columns, 134 MB instead of 1.1 GB of int64.
                codes = read_stored_table(storage, table_key, schema, narrow=True)
                codes.flags.writeable = False  # the engine keeps a read-only view
                data = EngineDataset(schema.domain(), codes)
                del codes
            result = mechanism.run(
                data,
                Fraction(claim.rho),
                params,
                rng=rng,
                rows=claim.rows,
                # Public caps. Rows the analyst asked for were checked at submission against
                # the output and memory limits and are produced as asked; a row count taken from
                # the noisy estimate is capped at RHOSYNTH_MAX_OUTPUT_ROWS and at the rows that
                # fit the per-job memory limit.
                max_rows=(
                    0  # the model only: its rows are drawn in chunks below
                    if chunked
                    else settings.max_output_rows
                    if claim.rows is not None
                    else output_rows_limit(settings, mechanism, data.domain, params)
                ),
                progress=progress,
                on_milestone=progress.milestone,
                # Privacy per person (issue 28 §1): ρ per unit of at most k rows, the run spends
                # ρ/k² at the row level and states its releases at sensitivity k.
                contribution_bound=source.contribution_bound,
            )
            del data
        progress.phase("write")
        synthetic = result.codes
        # Declared rules are kept on the output (engine.constraints.keep): rows that break one
        # are redrawn from the fitted model with the job's post-processing rng, then repaired.
        # No ρ: only the model's output is used; the counts go to the release report.
        model = result.model
        published_key, rows_out, rules = output_key, None, None
        if chunked:
            if model is None or claim.rows is None:  # applies() asked for both
                raise RuntimeError("a chunked output needs rows and a re-samplable model")
            # Parts uploaded as they are written; reports get a uniform subsample.
            stored = partitioned_output.store_partitioned(
                storage,
                settings,
                schema,
                model.sample,
                claim.rows,
                claim.seed,
                output_key,
                check=progress.check,
            )
            synthetic, published_key, rows_out = stored.sample, stored.key, stored.rows
            rules = None if stored.rules is None else stored.rules.to_json()
        else:
            kept = store_table(
                storage,
                schema,
                synthetic,
                rng,
                output_key,
                sampler=model.sample if model is not None else None,
            )
            if kept is not None:
                synthetic, rules = kept.codes, kept.report.to_json()

        # The release's artefacts: post-processing of what was released (app/reports/artefacts.py).
        # The owner tier, which reads the real table, is built after publication by a reports
        # worker (app/jobs/owner_tier.py).
        progress.phase("report")
        title = release_title(claim.job_id, claim.method, Decimal(claim.rho), source.unit_max_rows)
        record = record_from_result(
            result, schema.domain(), mechanism.name, params, Fraction(claim.rho)
        )
        write_release_artefacts(
            writer,
            schema,
            record,
            result.model,
            synthetic,
            title,
            discovery_delta=source.discovery_delta,
            rules=rules,
            privacy_unit=source.unit,
            synthetic_rows=rows_out,
        )
        del record, result
        # What the owner tier compares, for the reports worker (its size is public: rows ×
        # columns); removed once the owner tier is built (app/jobs/owner_tier.py).
        if table_key is not None:
            # A registered source read in place has no stored table to compare with: no owner
            # tier (app/jobs/owner_tier.py ends it "none").
            save_owner_input(storage, claim.job_id, claim.attempt, synthetic)
        return (int(synthetic.shape[0]) if rows_out is None else rows_out), published_key
