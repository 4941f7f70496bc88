"""Job rules: submission (validate, reserve, idempotency), cancellation, outputs, erasure.

Services flush and never commit; the request (or the worker's unit of work) commits. Celery is
told about a job only after the transaction that created it has committed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from app.api.types import format_decimal
from app.audit import service as audit
from app.auth.service import Principal
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.config import Settings
from app.datasets import repository as dataset_repository
from app.datasets.models import Dataset
from app.db.base import utcnow
from app.db.session import after_commit
from app.jobs import dispatch, repository
from app.jobs.models import TERMINAL_STATUSES, Job
from app.jobs.resources import ResourcesExceeded, check_predicted_time, check_resources
from app.jobs.schemas import (
    EpsilonDeltaBudgetIn,
    JobOut,
    JobRequest,
    OverBudgetOut,
    ProgressOut,
    QueueOut,
)
from app.reports.names import visible
from app.sources.reading import SourceChanged, SourceRefused, SourceSpec, check_unchanged
from app.storage import Storage, StorageUnavailable, job_output_prefix
from app.webhooks import outbox
from engine.accounting import epsilon_from_rho_delta, rho_from_epsilon_delta
from engine.costs import CostPrediction, predict_cost
from engine.domain import Domain
from engine.mechanisms import (
    MECHANISMS,
    DomainRefused,
    Mechanism,
    ResourceEstimate,
    get_mechanism,
)
from engine.reports.unit import unit_phrase
from engine.tables.encoding import TableSchema

SYSTEM_ACTOR = "system"


logger = logging.getLogger(__name__)


class InvalidJob(Exception):
    """The request cannot become a job (422). Nothing was reserved."""


class JobNotFound(Exception):
    pass


class JobConflict(Exception):
    """The job is not in a state that allows the action (409)."""


class IdempotencyMismatch(Exception):
    """The Idempotency-Key was already used for a different request (409, as Stripe does)."""


class SourceChangedSinceRegistration(JobConflict):
    """The registered source's files differ from what registration measured (409)."""


class DatasetUnavailable(Exception):
    """The dataset was deleted; no new jobs (409)."""


class OutputGone(Exception):
    """The output was erased with its dataset (410)."""


@dataclass(frozen=True)
class ResolvedBudget:
    rho: Decimal
    epsilon: Decimal | None
    delta: Decimal | None


def resolve_budget(request: JobRequest) -> ResolvedBudget:
    """ρ as given, or the largest ρ whose CKS bound meets (ε, δ), rounded down (the safe way)."""
    budget = request.budget
    if isinstance(budget, EpsilonDeltaBudgetIn):
        try:
            rho = rho_from_epsilon_delta(budget.epsilon, budget.delta)
        except ValueError:
            rho = Decimal(0)
        if rho <= 0:
            raise InvalidJob("the (ε, δ) budget is too small: it converts to ρ = 0")
        return ResolvedBudget(rho=rho, epsilon=budget.epsilon, delta=budget.delta)
    return ResolvedBudget(rho=budget.rho, epsilon=None, delta=None)


def over_budget_out(
    dataset_id: uuid.UUID, request: JobRequest, error: budget_service.BudgetExceeded
) -> OverBudgetOut:
    """The 409 body: what the request needs and what is left, in the request's own terms (ε at
    its δ when it gave (ε, δ)), and who can add budget (issue 26 §7: it named neither)."""
    out = OverBudgetOut(
        detail="",
        requested_rho=error.requested_rho,
        remaining_rho=error.remaining_rho,
        limit=error.limit,
        quota=error.quota,
    )
    if isinstance(request.budget, EpsilonDeltaBudgetIn):
        delta = request.budget.delta
        out = out.model_copy(
            update={
                "delta": format_decimal(delta),
                "requested_epsilon": format_decimal(request.budget.epsilon),
                "remaining_epsilon": format_decimal(
                    epsilon_from_rho_delta(error.remaining_rho, delta)
                ),
            }
        )
    needs, left = over_budget_terms(out)
    if error.limit == "quota":
        detail = (
            f"over {error.quota} on this dataset: the request needs {needs}, the quota has "
            f"{left} left. Ask for less, or ask an owner of the dataset to raise the quota "
            f"(PUT /v1/datasets/{dataset_id}/quotas/...); nothing was reserved"
        )
    elif error.limit == "unallocated":
        detail = (
            f"over the dataset's budget outside its reserved quotas: the request needs {needs}, "
            f"{left} is left beside the quotas' shares. Ask for less, or ask an owner of the "
            "dataset for a quota or more budget; nothing was reserved"
        )
    else:
        detail = (
            f"over the dataset's remaining privacy budget: the request needs {needs}, the "
            f"dataset has {left} left. Ask for less, or ask an owner of the dataset to add "
            f"budget (POST /v1/datasets/{dataset_id}/budget); nothing was reserved"
        )
    return out.model_copy(update={"detail": detail})


def over_budget_terms(out: OverBudgetOut) -> tuple[str, str]:
    """What an over-budget request needs and what is left, as text: ρ, and ε at the request's
    δ when it gave (ε, δ). The API's 409 sentence and the console's are built from these."""
    needs = f"ρ = {format_decimal(out.requested_rho)}"
    left = f"ρ = {format_decimal(out.remaining_rho)}"
    if out.delta is not None:
        needs = f"ε = {out.requested_epsilon} at δ = {out.delta} ({needs})"
        left = f"ε = {out.remaining_epsilon} at that δ ({left})"
    return needs, left


def fingerprint(dataset_id: uuid.UUID, request: JobRequest) -> str:
    """A hash of everything that defines the job, for Idempotency-Key comparison."""
    canonical = json.dumps(
        {"dataset_id": str(dataset_id), "request": request.model_dump(mode="json")},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ValidatedSubmission:
    """A request that passed every check a submission makes before reserving: the mechanism,
    its validated params, the budget, the dataset (locked for share) and its public domain,
    and the resource bound it was admitted on."""

    mechanism: Mechanism
    params: BaseModel
    budget: ResolvedBudget
    dataset: Dataset
    domain: Domain
    estimate: ResourceEstimate
    prediction: CostPrediction | None
    prediction_rows: int | None
    rows_source: RowsSource


RowsSource = Literal["requested", "dataset", "previous_release"]

_ROWS_SOURCE_TEXT: dict[RowsSource, str] = {
    "requested": "the rows requested",
    "dataset": "the table's row count",
    "previous_release": "an earlier release's noisy row count",
}


def prediction_rows(
    session: Session, principal: Principal, dataset: Dataset, rows: int | None
) -> tuple[int | None, RowsSource]:
    """The row count a cost prediction uses, from what the submitter may know: the rows
    requested; else, for owner keys, the table's exact row count (the owner's own data); else an
    earlier release's noisy row count (a DP output every key of the tenant sees), or None."""
    if rows is not None:
        return rows, "requested"
    if principal.is_owner:
        return dataset.n_rows, "dataset"
    return repository.latest_noisy_row_count(session, dataset.id), "previous_release"


def validate_submission(
    session: Session,
    settings: Settings,
    principal: Principal,
    dataset_id: uuid.UUID,
    request: JobRequest,
) -> ValidatedSubmission:
    """Every check that can be made without the data, in the order a submission makes them;
    changes nothing. Used by :func:`submit_job` and by the dry run (app.jobs.preview), so both
    refuse the same requests with the same messages.

    Raises InvalidJob, LookupError (no such dataset for this tenant) or DatasetUnavailable.
    """
    try:
        mechanism = get_mechanism(request.method)
    except KeyError:
        known = ", ".join(sorted(MECHANISMS))
        raise InvalidJob(f"unknown method {request.method!r}; available: {known}") from None
    try:
        params = mechanism.validate_params(request.params)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'params'}: {e['msg']}" for e in error.errors()
        )
        raise InvalidJob(f"invalid params for {request.method!r}: {problems}") from None
    budget = resolve_budget(request)
    if budget.rho > settings.max_budget_rho:
        raise InvalidJob(f"ρ is limited to {settings.max_budget_rho} per dataset")
    if request.rows is not None and request.rows > settings.max_output_rows:
        raise InvalidJob(f"rows is limited to {settings.max_output_rows}")

    dataset = dataset_repository.lock_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets, exclusive=False
    )
    if dataset is None:
        raise LookupError(dataset_id)
    if dataset.deleted_at is not None:
        raise DatasetUnavailable(dataset_id)
    if dataset.reads_source:
        check_registered_source(settings, mechanism, params, dataset)
    # The declared schema is public (the owner chose it); no data is read here.
    domain = TableSchema.from_json(dataset.schema).domain()
    try:
        mechanism.check_domain(domain, params)
        # Per person (issue 28 §1): the run spends ρ/k² at the row level.
        mechanism.check_budget(
            domain, params, Fraction(budget.rho), contribution_bound=dataset.unit_max_rows or 1
        )
    except DomainRefused as refused:
        raise InvalidJob(f"{request.method!r} cannot run on this dataset: {refused}") from None
    try:
        estimate = check_resources(settings, mechanism, domain, params, request.rows)
        # After the bound check, which needs no query: the row count may need one.
        rows, source = prediction_rows(session, principal, dataset, request.rows)
        prediction = (
            predict_cost(
                mechanism,
                domain,
                params,
                rows,
                Fraction(budget.rho),
                contribution_bound=dataset.unit_max_rows or 1,
            )
            if rows is not None
            else None
        )
        check_predicted_time(
            settings, mechanism, domain, prediction, rows, _ROWS_SOURCE_TEXT[source]
        )
    except ResourcesExceeded as exceeded:
        raise InvalidJob(str(exceeded)) from None
    return ValidatedSubmission(
        mechanism, params, budget, dataset, domain, estimate, prediction, rows, source
    )


def check_registered_source(
    settings: Settings, mechanism: Mechanism, params: BaseModel, dataset: Dataset
) -> None:
    """A job on a registered dataset without a copy (docs/sources.md), before anything is
    reserved: the method must count through an engine (a public fact: method × dataset kind),
    and the source's files must still be what registration measured (their metadata only: size,
    modification time, ETag). A PostgreSQL source is checked by the worker as it reads."""
    refusal = mechanism.engine_refusal(params)
    if refusal is not None:
        able = ", ".join(sorted(n for n in MECHANISMS if get_mechanism(n).runs_on_counts))
        raise InvalidJob(
            f"{refusal}: it cannot run on a registered source read in place (methods that "
            f"can: {able}). Or register the source with keep_copy."
        )
    if dataset.source_kind in ("s3", "local") and dataset.source and dataset.source_fingerprint:
        spec = SourceSpec.from_json(dataset.source)
        try:
            check_unchanged(spec, settings, dataset.source_fingerprint)
        except SourceChanged as changed:
            raise SourceChangedSinceRegistration(str(changed)) from None
        except SourceRefused as refused:
            # Its message may name where the source lives (a bucket, a path): the owner's
            # metadata, which analyst keys do not see. A fixed text per status only.
            raise SourceChangedSinceRegistration(
                "the registered source could not be checked: the object store could not be reached"
                if refused.status_code == 503
                else "the registered source could not be checked: the service's settings no "
                "longer allow reading it"
            ) from None


def submit_job(
    session: Session,
    settings: Settings,
    principal: Principal,
    dataset_id: uuid.UUID,
    request: JobRequest,
    idempotency_key: str | None,
) -> tuple[Job, bool]:
    """Create a queued job and reserve its budget. Returns (job, created).

    Everything that can be checked without the data is checked before anything is reserved
    (:func:`validate_submission`). Raises InvalidJob, DatasetNotFound-like LookupError,
    DatasetUnavailable, IdempotencyMismatch or BudgetExceeded; in each case nothing is changed.
    """
    checked = validate_submission(session, settings, principal, dataset_id, request)
    mechanism, params, budget = checked.mechanism, checked.params, checked.budget

    now = utcnow()
    job_id = uuid.uuid4()
    if idempotency_key is not None:
        request_hash = fingerprint(dataset_id, request)
        if not repository.claim_idempotency_key(
            session, principal.tenant_id, idempotency_key, request_hash, job_id, now
        ):
            existing = repository.get_idempotency_key(session, principal.tenant_id, idempotency_key)
            if existing is None:  # pragma: no cover - the winner committed before we read
                raise JobConflict("concurrent request with the same Idempotency-Key; retry")
            if existing.request_hash != request_hash:
                raise IdempotencyMismatch(
                    "this Idempotency-Key was already used with a different request"
                )
            job = repository.get(session, existing.job_id)
            if job is None:  # pragma: no cover - foreign key guarantees it
                raise JobNotFound(existing.job_id)
            return job, False

    job = repository.add(
        session,
        Job(
            id=job_id,
            tenant_id=principal.tenant_id,
            dataset_id=dataset_id,
            method=mechanism.name,
            params=params.model_dump(mode="json"),
            rho=budget.rho,
            epsilon=decimal_text(budget.epsilon),
            delta=decimal_text(budget.delta),
            rows=request.rows,
            seed=request.seed,
            unit_max_rows=checked.dataset.unit_max_rows,
            status="queued",
            attempt=0,
            cancel_requested=False,
            progress_fraction=0.0,
            progress_stage="queued",
            submitted_by=principal.key_id,
            created_at=now,
            enqueued_at=now,
        ),
    )
    state = budget_service.reserve_budget(
        session,
        dataset_id,
        budget.rho,
        job_id,
        principal.actor,
        # Quotas limit analyst keys; an owner can grant itself any quota anyway.
        quota_key=None if principal.is_owner else principal.key_id,
    )
    # Read under the account lock reserve_budget took, which a policy change takes first too:
    # read before it, a submission waiting on an owner turning approval on was queued unapproved.
    pending = needs_approval(session, principal, dataset_id)
    if pending:
        job.status = job.progress_stage = "pending_approval"
        job.enqueued_at = None
        session.flush()
    outbox.record_budget_change(
        session,
        dataset_id,
        before=state.remaining_rho + budget.rho,
        after=state.remaining_rho,
        settings=settings,
    )
    if pending:
        outbox.record_approval(session, job_id, settings)
    # The audit entry last: its per-tenant lock is then held only until the commit.
    audit.record(
        session,
        principal,
        "job.submit",
        "job",
        job_id,
        {
            "dataset_id": str(dataset_id),
            "method": mechanism.name,
            "rho": str(budget.rho),
            "epsilon": decimal_text(budget.epsilon),
            "delta": decimal_text(budget.delta),
            "rows": request.rows,
        },
    )
    if not pending:
        after_commit(session, lambda: _enqueue(settings, job_id))
    return job, True


def needs_approval(session: Session, principal: Principal, dataset_id: uuid.UUID) -> bool:
    """Whether a submission waits for an owner (issue 27 §3): the dataset's owners turned
    approval on and the key is not an owner's. A fact the owner set, so public."""
    if principal.is_owner:
        return False
    policy = budget_repository.get_policy(session, dataset_id)
    return policy is not None and policy.approval_required


def _enqueue(settings: Settings, job_id: uuid.UUID) -> None:
    dispatch.ring(settings, job_id)


def decimal_text(value: Decimal | None) -> str | None:
    """A Decimal as the plain text a job keeps (no exponent), or None."""
    return None if value is None else format(value.normalize(), "f")


def get_job(session: Session, principal: Principal, job_id: uuid.UUID) -> Job:
    job = repository.get_for_tenant(
        session, job_id, principal.tenant_id, datasets=principal.datasets
    )
    if job is None:
        raise JobNotFound(job_id)
    return job


def list_jobs(
    session: Session, principal: Principal, dataset_id: uuid.UUID, *, limit: int, offset: int
) -> list[Job]:
    if (
        dataset_repository.get_for_tenant(
            session, dataset_id, principal.tenant_id, datasets=principal.datasets
        )
        is None
    ):
        raise LookupError(dataset_id)
    return repository.list_for_dataset(session, dataset_id, limit=limit, offset=offset)


def _cancel_locked(
    session: Session,
    job: Job,
    actor: str,
    reason: str | None,
    settings: Settings | None = None,
) -> None:
    """Cancel a locked live job: release its reservation if it never ran, else ask it to stop
    (its worker ends it, and records its ``job.cancelled`` event)."""
    now = utcnow()
    if job.status == "pending_approval":
        closed = repository.close_pending(
            session,
            job.id,
            status="cancelled",
            now=now,
            reason=reason or "cancelled before an owner decided",
            decided_by=None,
        )
        if closed is not None:
            # Never approved, so never claimed: the reservation goes back.
            budget_service.release_reservation(session, job.dataset_id, job.rho, job.id, actor)
            # A cancelled job like a queued one: subscribers to job.cancelled learn of it.
            outbox.record_job_ended(session, job.id, settings)
        return
    if job.status == "queued":
        cancelled = repository.cancel_queued(session, job.id, now=now, reason=reason)
        if cancelled is not None:
            if cancelled.charged_at is None:
                # Never claimed, so the data was never read: the reservation goes back.
                budget_service.release_reservation(session, job.dataset_id, job.rho, job.id, actor)
            outbox.record_job_ended(session, job.id, settings)
        return
    if job.status == "running":
        repository.request_cancel(session, job.id)


def cancel_job(
    session: Session, principal: Principal, job_id: uuid.UUID, settings: Settings | None = None
) -> Job:
    job = repository.lock_for_tenant(
        session, job_id, principal.tenant_id, datasets=principal.datasets
    )
    if job is None:
        raise JobNotFound(job_id)
    if job.status in TERMINAL_STATUSES:
        raise JobConflict(f"the job has already finished ({job.status})")
    _cancel_locked(session, job, principal.actor, reason=None, settings=settings)
    session.flush()
    session.refresh(job)
    audit.record(
        session, principal, "job.cancel", "job", job.id, {"dataset_id": str(job.dataset_id)}
    )
    return job


def stop_jobs_for_deleted_dataset(
    session: Session, dataset_id: uuid.UUID, actor: str
) -> list[uuid.UUID]:
    """Cancel every live job of a dataset being erased; return all its job ids."""
    for job in repository.lock_active_for_dataset(session, dataset_id):
        _cancel_locked(session, job, actor, reason="the dataset was deleted")
    return repository.job_ids_for_dataset(session, dataset_id)


def erase_outputs(storage: Storage, job_id: uuid.UUID) -> None:
    storage.delete_tree(job_output_prefix(job_id))


def output_key(
    session: Session, storage: Storage, principal: Principal, job_id: uuid.UUID
) -> tuple[Job, str]:
    """The job and the key of its published output, which is stored (else OutputGone)."""
    job, dataset = published_job(session, principal, job_id)
    assert job.output_key is not None  # published_job checked it
    require_stored(session, storage, dataset, job.output_key, job_id)
    audit.record(
        session,
        principal,
        "job.download",
        "job",
        job.id,
        {"dataset_id": str(job.dataset_id), "artefact": "output"},
    )
    return job, job.output_key


def published_job(session: Session, principal: Principal, job_id: uuid.UUID) -> tuple[Job, Dataset]:
    """A succeeded job of ``principal`` (else JobNotFound or JobConflict) and its dataset, which
    is not deleted (else OutputGone). Whether a given object of it is stored: require_stored."""
    job = get_job(session, principal, job_id)
    if job.status != "succeeded" or job.output_key is None:
        raise JobConflict(f"the job has no output (status: {job.status})")
    return job, live_dataset(session, job.dataset_id, job_id)


def live_dataset(session: Session, dataset_id: uuid.UUID, object_id: uuid.UUID) -> Dataset:
    """The dataset a published object (of job or sample ``object_id``) belongs to; OutputGone
    once its deletion committed."""
    dataset = dataset_repository.get(session, dataset_id)
    if dataset is None or dataset.deleted_at is not None:
        raise OutputGone(object_id)
    return dataset


def require_stored(
    session: Session, storage: Storage, dataset: Dataset, key: str, object_id: uuid.UUID
) -> None:
    """Return if the published object ``key`` of a live dataset is stored. Missing: OutputGone
    when the dataset's deletion committed meanwhile (its erasure runs after the commit), else
    StorageUnavailable (503): a published object that vanished while its dataset lives is a
    storage fault (a lost bucket, a lifecycle rule), not an erasure, and is logged as one."""
    if storage.exists(key):
        return
    # READ COMMITTED: re-reading the row sees a deletion that committed after it was first read.
    session.refresh(dataset)
    if dataset.deleted_at is not None:
        raise OutputGone(object_id)
    logger.error(
        "published object %s of live dataset %s is missing from %s",
        key,
        dataset.id,
        storage.describe(),
    )
    raise StorageUnavailable(f"published object {key} is missing from storage")


def _coarse(value: datetime | None) -> datetime | None:
    # Run times can depend on the data; analysts get minute resolution only.
    return None if value is None else value.replace(second=0, microsecond=0)


def queue_clock() -> datetime:
    """The clock the queue's snapshot minute is read from (a seam for tests)."""
    return utcnow()


QUEUE_SNAPSHOT_LAG = timedelta(seconds=60)
"""How far behind the last whole minute the queue is counted: T = floor(now, 60 s) − 60 s. A
claim, cancel or finish is stamped just before its transaction commits; a commit that lands
after the first read of a minute would otherwise show in some answers of that minute and not
in others, which times it finer than the minute. Stamps are older than their commits by the
transaction's lock waits (milliseconds for a claim; SQLite's busy timeout is 30 s), well under
this lag."""


def queue_minute(now: datetime) -> datetime:
    """The minute T a queue read at ``now`` is counted at."""
    return now.replace(second=0, microsecond=0) - QUEUE_SNAPSHOT_LAG


def queue_out(session: Session, job: Job, now: datetime | None = None) -> QueueOut | None:
    """Where a queued job stands, counted on the queue as it stood at the minute
    T = floor(now, 60 s) − 60 s (:data:`QUEUE_SNAPSHOT_LAG`); None once the job is not queued
    (issue 26 §3).

    ``claim_next`` takes one job per tenant in the order of ``tenants_in_fair_order`` and then
    starts again (a tenant's latest start moves it to the back), so the job at position p of its
    tenant's queue is started after p − 1 jobs of its own tenant and, of every other tenant t with
    q_t queued, min(q_t, p) if t comes before its tenant in that order or min(q_t, p − 1) if after.
    The counts and the order are those of T (``repository.queue_at``): every input is a job's
    state at T or the asking job's own, so the answer changes only when T does, at a whole
    minute (docs/privacy.md, "A queued job's place"). An estimate: arrivals, cancels, run times
    and the per-tenant running cap move it."""
    if job.status != "queued":
        return None
    as_of = queue_minute(queue_clock() if now is None else now)
    tenants = repository.queue_at(session, job.id, job.tenant_id, job.created_at, as_of)
    rank = next((i for i, t in enumerate(tenants) if t.tenant_id == job.tenant_id), None)
    if rank is None:  # pragma: no cover - the asking job always counts in its own tenant
        return None
    position = tenants[rank].before + 1
    ahead = position - 1
    for i, tenant in enumerate(tenants):
        if i != rank:
            ahead += min(tenant.queued, position if i < rank else position - 1)
    return QueueOut(as_of=as_of, position=position, jobs_ahead=ahead)


class _PlaceCache:
    """The places answered in the current minute, per job (``job_read``): a cost saving only.

    ``queue_out`` is a function of the queue at T and of the asking job, so within a minute it
    gives one answer per job: a burst of reads of one queued job counts it once per API process
    and minute instead of once per read. Emptied when a newer minute is stored (a read that
    started in an older minute and stores late is not kept); when full, further places of the
    minute are counted on each read rather than stored. The privacy argument does not rest on
    it (docs/privacy.md, "A queued job's place")."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._minute: datetime | None = None
        self._places: dict[uuid.UUID, QueueOut | None] = {}

    def get(self, minute: datetime, job_id: uuid.UUID) -> tuple[bool, QueueOut | None]:
        with self._lock:
            if minute != self._minute or job_id not in self._places:
                return False, None
            return True, self._places[job_id]

    def put(self, minute: datetime, job_id: uuid.UUID, place: QueueOut | None) -> None:
        with self._lock:
            if self._minute is not None and minute < self._minute:
                return  # a read of an older minute that stores late: keep the newer minute
            if minute != self._minute:
                self._minute, self._places = minute, {}
            if len(self._places) < self.LIMIT:
                self._places[job_id] = place


_places = _PlaceCache()


def job_read(session: Session, principal: Principal, job_id: uuid.UUID) -> JobOut:
    """What ``GET /v1/jobs/{id}`` answers (the route and app/jobs/polled_read.py): the job's view
    with, while it is queued, its place in the queue (counted once per job and minute in this
    process: ``_PlaceCache``). Raises JobNotFound."""
    job = get_job(session, principal, job_id)
    place: QueueOut | None = None
    if job.status == "queued":
        now = queue_clock()
        minute = now.replace(second=0, microsecond=0)
        known, place = _places.get(minute, job.id)
        if not known:
            place = queue_out(session, job, now)
            _places.put(minute, job.id, place)
    return job_out(job, principal, queue=place)


def job_out(job: Job, principal: Principal, queue: QueueOut | None = None) -> JobOut:
    exact = principal.is_owner
    public = ProgressOut(fraction=job.progress_fraction, stage=job.progress_stage)
    detail: ProgressOut | None = None
    if exact:
        # Noise-dependent, so owners only; before any attempt reported it, it is the public one.
        detail = (
            public
            if job.detail_stage is None or job.detail_fraction is None
            else ProgressOut(fraction=job.detail_fraction, stage=job.detail_stage)
        )
    return JobOut(
        id=job.id,
        dataset_id=job.dataset_id,
        method=job.method,
        params=job.params,
        status=job.status,
        rho=job.rho,
        epsilon=job.epsilon,
        delta=job.delta,
        privacy_unit=unit_phrase(job.unit_max_rows),
        unit_max_rows=job.unit_max_rows,
        rows=job.rows,
        seed=job.seed,
        progress=public,
        progress_detail=detail,
        cancel_requested=job.cancel_requested,
        created_at=job.created_at,
        started_at=job.started_at if exact else _coarse(job.started_at),
        finished_at=job.finished_at if exact else _coarse(job.finished_at),
        error=job.error,
        output_rows=job.output_rows,
        decided_at=job.decided_at,
        decision_reason=job.decision_reason,
        artefacts=visible(job.artefacts, owner=principal.is_owner),
        queue=queue,
    )
