"""RELIABILITY.md test 2: a Hypothesis state machine drives the real services — submit (reserve),
claim (spend), cancel (release or stop), failure, worker loss (recovery), grant — against
PostgreSQL, and checks after every step that the account matches a model, stays within its
total and reconciles with the ledger."""

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
from sqlalchemy import update

from app.auth.service import Principal, authenticate
from app.budget import service as budget_service
from app.db.base import utcnow
from app.db.session import get_session_factory
from app.jobs import repository as job_repository
from app.jobs import service as job_service
from app.jobs.execution import claim_and_charge
from app.jobs.models import Job
from app.jobs.schemas import JobRequest
from tests.support.ledger import add_tableless_dataset, assert_reconciled
from tests.support.stack import Stack

RHO = st.decimals(min_value=Decimal("0.001"), max_value=Decimal("0.6"), places=3)


@dataclass
class ModelJob:
    rho: Decimal
    status: str = "queued"
    charged: bool = False
    attempts: int = 0


class BudgetMachine(RuleBasedStateMachine):
    stack: ClassVar[Stack]
    steps_run: ClassVar[int] = 0

    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        stack = self.stack
        self.settings = stack.settings
        self.factory = get_session_factory(self.settings.sqlalchemy_url)
        tenant = f"sm-{uuid.uuid4().hex[:10]}"
        key = stack.create_key(tenant, "owner")
        with stack.session() as session:
            principal = authenticate(session, self.settings.secret_key_bytes(), key)
            assert principal is not None
            self.principal: Principal = principal
            self.dataset_id = add_tableless_dataset(session, principal, Decimal(1))
        self.total = Decimal(1)
        self.model: dict[uuid.UUID, ModelJob] = {}

    def _reserved(self) -> Decimal:
        return sum(
            (
                j.rho
                for j in self.model.values()
                if j.status in ("queued", "running") and not j.charged
            ),
            Decimal(0),
        )

    def _spent(self) -> Decimal:
        return sum((j.rho for j in self.model.values() if j.charged), Decimal(0))

    @rule(target=jobs, rho=RHO)
    def submit(self, rho: Decimal) -> uuid.UUID:
        BudgetMachine.steps_run += 1
        request = JobRequest(method="independent", budget={"rho": rho})
        fits = self._spent() + self._reserved() + rho <= self.total
        try:
            with self.stack.session() as session:
                job, created = job_service.submit_job(
                    session, self.settings, self.principal, self.dataset_id, request, None
                )
        except budget_service.BudgetExceeded as refused:
            assert not fits
            assert refused.remaining_rho == self.total - self._spent() - self._reserved()
            return uuid.uuid4()  # a job that does not exist: later rules on it must be no-ops
        assert fits and created
        self.model[job.id] = ModelJob(rho=rho)
        return job.id

    @rule(job_id=jobs)
    def claim(self, job_id: uuid.UUID) -> None:
        BudgetMachine.steps_run += 1
        claim = claim_and_charge(self.factory, self.settings, job_id)
        job = self.model.get(job_id)
        claimable = (
            job is not None
            and job.status == "queued"
            and job.attempts < self.settings.job_max_attempts
        )
        assert (claim is not None) == claimable
        if claim is not None and job is not None:
            job.status, job.charged = "running", True
            job.attempts += 1
            assert claim.attempt == job.attempts

    @rule(job_id=jobs)
    def cancel(self, job_id: uuid.UUID) -> None:
        BudgetMachine.steps_run += 1
        job = self.model.get(job_id)
        try:
            with self.stack.session() as session:
                job_service.cancel_job(session, self.principal, job_id)
        except job_service.JobNotFound:
            assert job is None
            return
        except job_service.JobConflict:
            assert job is not None and job.status in ("succeeded", "failed", "cancelled")
            return
        assert job is not None
        if job.status == "queued":
            job.status = "cancelled"
        elif job.status == "running":
            job.status = "cancel-requested"

    @rule(job_id=jobs, succeed=st.booleans())
    def finish(self, job_id: uuid.UUID, succeed: bool) -> None:
        BudgetMachine.steps_run += 1
        job = self.model.get(job_id)
        if job is None or job.status not in ("running", "cancel-requested"):
            return
        with self.stack.session() as session:
            if succeed and job.status == "running":
                done = job_repository.complete(
                    session, job_id, job.attempts, output_key="x", output_rows=1, now=utcnow()
                )
                job.status = "succeeded"
            else:
                status = "cancelled" if job.status == "cancel-requested" else "failed"
                done = job_repository.finish(
                    session, job_id, job.attempts, status=status, error=None, now=utcnow()
                )
                job.status = status
        assert done

    @rule(job_id=jobs)
    def worker_dies(self, job_id: uuid.UUID) -> None:
        """The lease runs out and recovery requeues (or fails, or cancels) the job."""
        BudgetMachine.steps_run += 1
        job = self.model.get(job_id)
        if job is None or job.status not in ("running", "cancel-requested"):
            return
        with self.stack.session() as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )
        with self.stack.session() as session:
            outcome = job_repository.recover_expired(
                session,
                job_id,
                now=utcnow(),
                max_attempts=self.settings.job_max_attempts,
                time_limit_error="the job exceeded its time limit",
            )
        if job.status == "cancel-requested":
            assert outcome == "cancelled"
            job.status = "cancelled"
        elif job.attempts < self.settings.job_max_attempts:
            assert outcome == "requeued"
            job.status = "queued"
        else:
            assert outcome == "failed"
            job.status = "failed"

    @rule(add=RHO)
    def grant(self, add: Decimal) -> None:
        BudgetMachine.steps_run += 1
        with self.stack.session() as session:
            budget_service.grant_budget(
                session, self.dataset_id, add, Decimal(1000), self.principal.actor
            )
        self.total += add

    @invariant()
    def account_matches_model_and_ledger(self) -> None:
        result = assert_reconciled(self.stack, self.dataset_id)
        assert result.account.total_rho == self.total
        assert result.account.spent_rho == self._spent()
        assert result.account.reserved_rho == self._reserved()
        assert result.spent <= result.reserved  # every spend came from a reservation


def test_budget_state_machine(api_stack: Stack) -> None:
    BudgetMachine.stack = api_stack
    BudgetMachine.steps_run = 0
    run_state_machine_as_test(
        BudgetMachine,
        settings=settings(
            max_examples=100,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )
    print(f"budget state machine: {BudgetMachine.steps_run} steps over 100 examples")
    assert BudgetMachine.steps_run > 1000


def test_cancel_after_crash_keeps_charge(api_stack: Stack) -> None:
    """A job whose worker died is requeued still charged; cancelling it then releases nothing."""
    BudgetMachine.stack = api_stack
    machine = BudgetMachine()
    job_id = machine.submit(Decimal("0.25"))
    machine.claim(job_id)
    machine.worker_dies(job_id)
    assert machine.model[job_id].status == "queued" and machine.model[job_id].charged
    machine.cancel(job_id)
    machine.account_matches_model_and_ledger()
    with api_stack.session() as session:
        kinds = [
            e.kind
            for e in budget_service.repository.list_entries(
                session, machine.dataset_id, limit=10, after_id=None
            )
        ]
    assert kinds == ["grant", "reserve", "spend"]
    machine.claim(job_id)  # a cancelled job is never claimed again
    assert machine.model[job_id].status == "cancelled"
