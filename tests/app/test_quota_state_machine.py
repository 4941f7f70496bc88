"""The budget state machine with quotas and owner approval (issue 27 §2, §3): a Hypothesis
state machine drives the real services on PostgreSQL (the API stack's database): an analyst
key with a quota submits jobs that wait for approval, an owner submits unheld jobs; approve,
reject, expire, claim, cancel, finish and quota changes interleave. After every step the
dataset's account and the quota match a model (reserved = jobs not yet charged that hold a
reservation; spent = charged jobs), stay within their totals and reconcile with their ledgers."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import select, update

from app.auth.service import Principal, authenticate
from app.budget import quotas
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.budget.models import BudgetQuota
from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs import approvals
from app.jobs import repository as job_repository
from app.jobs import service as job_service
from app.jobs.execution import claim_and_charge
from app.jobs.models import Job
from app.jobs.schemas import JobRequest
from tests.support.ledger import add_tableless_dataset, assert_reconciled
from tests.support.stack import Stack

RHO = st.decimals(min_value=Decimal("0.01"), max_value=Decimal("0.4"), places=2)
HOLDING = ("pending_approval", "queued", "running")


@dataclass
class ModelJob:
    rho: Decimal
    analyst: bool
    status: str
    charged: bool = False


class QuotaMachine(RuleBasedStateMachine):
    stack: ClassVar[Stack]
    steps_run: ClassVar[int] = 0

    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        stack = self.stack
        self.settings = stack.settings
        self.factory = get_session_factory(self.settings.sqlalchemy_url)
        tenant = f"qsm-{uuid.uuid4().hex[:10]}"
        owner_key = stack.create_key(tenant, "owner")
        analyst_key = stack.create_key(tenant, "analyst")
        with stack.session() as session:
            owner = authenticate(session, self.settings.secret_key_bytes(), owner_key)
            analyst = authenticate(session, self.settings.secret_key_bytes(), analyst_key)
            assert owner is not None and analyst is not None
            self.owner: Principal = owner
            self.analyst: Principal = analyst
            self.dataset_id = add_tableless_dataset(session, owner, Decimal(1))
        with stack.session() as session:
            quotas.set_policy(
                session, owner, self.dataset_id, "shared", False, approval_required=True
            )
            quotas.set_key_quota(session, owner, self.dataset_id, analyst.key_id, Decimal("0.6"))
        self.total = Decimal(1)
        self.granted = Decimal("0.6")
        self.model: dict[uuid.UUID, ModelJob] = {}

    def _reserved(self, analyst_only: bool = False) -> Decimal:
        return sum(
            (
                j.rho
                for j in self.model.values()
                if j.status in HOLDING and not j.charged and (j.analyst or not analyst_only)
            ),
            Decimal(0),
        )

    def _spent(self, analyst_only: bool = False) -> Decimal:
        return sum(
            (j.rho for j in self.model.values() if j.charged and (j.analyst or not analyst_only)),
            Decimal(0),
        )

    @rule(target=jobs, rho=RHO, analyst=st.booleans())
    def submit(self, rho: Decimal, analyst: bool) -> uuid.UUID:
        QuotaMachine.steps_run += 1
        principal = self.analyst if analyst else self.owner
        fits_dataset = self._spent() + self._reserved() + rho <= self.total
        fits_quota = not analyst or self._spent(True) + self._reserved(True) + rho <= self.granted
        try:
            with self.stack.session() as session:
                job, _ = job_service.submit_job(
                    session,
                    self.settings,
                    principal,
                    self.dataset_id,
                    JobRequest(method="independent", budget={"rho": rho}),
                    None,
                )
        except budget_service.BudgetExceeded as refused:
            assert not (fits_dataset and fits_quota)
            assert refused.limit == ("dataset" if not fits_dataset else "quota")
            return uuid.uuid4()
        assert fits_dataset and fits_quota
        assert job.status == ("pending_approval" if analyst else "queued")
        self.model[job.id] = ModelJob(rho=rho, analyst=analyst, status=job.status)
        return job.id

    @rule(job_id=jobs, approve=st.booleans())
    def decide(self, job_id: uuid.UUID, approve: bool) -> None:
        QuotaMachine.steps_run += 1
        job = self.model.get(job_id)
        try:
            with self.stack.session() as session:
                if approve:
                    approvals.approve_job(session, self.settings, self.owner, job_id)
                else:
                    approvals.reject_job(session, self.owner, job_id, "no")
        except job_service.JobNotFound:
            assert job is None
            return
        except job_service.JobConflict:
            assert job is not None and job.status != "pending_approval"
            return
        assert job is not None and job.status == "pending_approval"
        job.status = "queued" if approve else "rejected"

    @rule(job_id=jobs)
    def expire(self, job_id: uuid.UUID) -> None:
        QuotaMachine.steps_run += 1
        job = self.model.get(job_id)
        if job is None:
            return
        with self.stack.session() as session:
            session.execute(
                update(Job).where(Job.id == job_id).values(created_at=utcnow() - timedelta(days=30))
            )
        # The API stack's database is shared: earlier examples' pending jobs expire too.
        expired = [
            j for j in approvals.expire_pending(self.factory, self.settings) if j in self.model
        ]
        assert (job_id in expired) == (job.status == "pending_approval")
        for other in expired:
            assert self.model[other].status == "pending_approval"
            self.model[other].status = "expired"

    @rule(job_id=jobs)
    def claim(self, job_id: uuid.UUID) -> None:
        QuotaMachine.steps_run += 1
        job = self.model.get(job_id)
        claim = claim_and_charge(self.factory, self.settings, job_id)
        assert (claim is not None) == (job is not None and job.status == "queued")
        if claim is not None and job is not None:
            job.status, job.charged = "running", True

    @rule(job_id=jobs)
    def cancel(self, job_id: uuid.UUID) -> None:
        QuotaMachine.steps_run += 1
        job = self.model.get(job_id)
        try:
            with self.stack.session() as session:
                job_service.cancel_job(session, self.analyst, job_id)
        except job_service.JobNotFound:
            assert job is None
            return
        except job_service.JobConflict:
            assert job is not None and job.status not in HOLDING
            return
        assert job is not None
        if job.status in ("pending_approval", "queued"):
            job.status = "cancelled"

    @rule(job_id=jobs)
    def finish(self, job_id: uuid.UUID) -> None:
        QuotaMachine.steps_run += 1
        job = self.model.get(job_id)
        if job is None or job.status != "running":
            return
        with self.stack.session() as session:
            assert job_repository.finish(
                session, job_id, 1, status="failed", error=None, now=utcnow()
            )
        job.status = "failed"

    @rule(rho=RHO)
    def set_quota(self, rho: Decimal) -> None:
        QuotaMachine.steps_run += 1
        used = self._spent(True) + self._reserved(True)
        try:
            with self.stack.session() as session:
                quotas.set_key_quota(session, self.owner, self.dataset_id, self.analyst.key_id, rho)
        except quotas.QuotaConflict:
            assert rho < used
            return
        assert rho >= used
        self.granted = rho

    @invariant()
    def account_and_quota_match_the_model(self) -> None:
        result = assert_reconciled(self.stack, self.dataset_id)
        assert result.account.spent_rho == self._spent()
        assert result.account.reserved_rho == self._reserved()
        with self.stack.session() as session:
            (quota,) = session.scalars(
                select(BudgetQuota).where(
                    BudgetQuota.dataset_id == self.dataset_id, BudgetQuota.removed_at.is_(None)
                )
            )
            entries = budget_repository.quota_entries(session, quota.id)
        assert (quota.granted_rho, quota.spent_rho, quota.reserved_rho) == (
            self.granted,
            self._spent(True),
            self._reserved(True),
        )
        sums = {kind: Decimal(0) for kind in ("reserve", "spend", "release")}
        for entry in entries:
            if entry.kind in sums:
                sums[entry.kind] += entry.rho
        assert sums["spend"] == quota.spent_rho
        assert sums["reserve"] - sums["spend"] - sums["release"] == quota.reserved_rho


def test_quota_state_machine(api_stack: Stack) -> None:
    QuotaMachine.stack = api_stack
    QuotaMachine.steps_run = 0
    run_state_machine_as_test(
        QuotaMachine,
        settings=settings(
            max_examples=25,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )
    assert QuotaMachine.steps_run > 250
