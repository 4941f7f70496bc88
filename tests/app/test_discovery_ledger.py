"""The ledger's δ dimension and the ``discover`` entry, through the budget service, on PostgreSQL
and on SQLite: discovery spends ρ and δ with one guarded UPDATE (or changes nothing), grants can
add δ, and the entries reconcile with the account. On PostgreSQL, 50 discoveries released
together by a barrier never overspend ρ or δ."""

from __future__ import annotations

import secrets
import threading
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.auth.service import Principal, authenticate, create_key
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.budget.models import LedgerEntry
from app.cli import run_migrations
from app.config import Settings
from app.db.session import get_session_factory, transaction
from app.jobs import service as job_service
from app.jobs.schemas import JobRequest
from tests.support.ledger import D, add_tableless_dataset
from tests.support.stack import Stack

pytestmark = pytest.mark.usefixtures("_services")

DETAIL = {"mechanism": "open_set_categories", "columns": {"city": {"rho": "0.1", "delta": "1e-7"}}}


@dataclass
class Ledger:
    settings: Settings
    factory: sessionmaker[Session]
    principal: Principal

    def dataset(self, total_rho: str, total_delta: str = "0") -> uuid.UUID:
        with transaction(self.factory) as session:
            return add_tableless_dataset(session, self.principal, D(total_rho), D(total_delta))

    def discover(self, dataset_id: uuid.UUID, rho: str, delta: str) -> None:
        with transaction(self.factory) as session:
            budget_service.spend_discovery(
                session, dataset_id, D(rho), D(delta), DETAIL, self.principal.actor
            )

    def entries(self, dataset_id: uuid.UUID) -> list[LedgerEntry]:
        with transaction(self.factory) as session:
            return budget_repository.list_entries(session, dataset_id, limit=100, after_id=None)

    def reconciled(self, dataset_id: uuid.UUID) -> budget_service.Reconciliation:
        with transaction(self.factory) as session:
            result = budget_service.reconcile(session, dataset_id)
        assert result.consistent, result
        account = result.account
        assert account.spent_rho + account.reserved_rho <= account.total_rho
        assert 0 <= account.spent_delta <= account.total_delta < 1
        return result


@pytest.fixture(params=["postgresql", "sqlite"])
def ledger(request: pytest.FixtureRequest, api_stack: Stack, tmp_path: Path) -> Ledger:
    if request.param == "postgresql":
        settings = api_stack.settings
    else:
        settings = Settings(home=tmp_path, secret_key=secrets.token_urlsafe(48))
        run_migrations(settings)
    factory = get_session_factory(settings.sqlalchemy_url)
    with transaction(factory) as session:
        key = create_key(
            session, settings.secret_key_bytes(), f"disc-{uuid.uuid4().hex[:8]}", "owner", "k"
        )
    with transaction(factory) as session:
        principal = authenticate(session, settings.secret_key_bytes(), key.key)
    assert principal is not None
    return Ledger(settings, factory, principal)


def test_open_account_records_delta_in_the_grant(ledger: Ledger) -> None:
    dataset_id = ledger.dataset("2", total_delta="0.00001")
    [grant] = ledger.entries(dataset_id)
    assert (grant.kind, grant.rho, grant.delta, grant.job_id, grant.detail) == (
        "grant",
        D("2"),
        D("0.00001"),
        None,
        None,
    )
    result = ledger.reconciled(dataset_id)
    assert result.account.total_delta == D("0.00001") == result.granted_delta
    assert result.account.spent_delta == 0
    assert ledger.reconciled(ledger.dataset("1")).account.total_delta == 0


def test_discovery_spends_rho_and_delta_in_one_entry(ledger: Ledger) -> None:
    dataset_id = ledger.dataset("1", total_delta="0.000001")
    ledger.discover(dataset_id, "0.25", "0.0000004")
    entries = ledger.entries(dataset_id)
    discover = entries[-1]
    assert (discover.kind, discover.rho, discover.delta, discover.job_id) == (
        "discover",
        D("0.25"),
        D("0.0000004"),
        None,
    )
    assert discover.detail == DETAIL
    result = ledger.reconciled(dataset_id)
    assert result.account.spent_rho == D("0.25") and result.discovered == D("0.25")
    assert result.spent == 0  # no job spent anything
    assert result.account.spent_delta == D("0.0000004")
    assert result.account.remaining_delta == D("0.0000006")
    # A δ-free discovery (candidate categories, quantile bins: pure zCDP) spends ρ only, and a
    # ρ-free one δ only.
    ledger.discover(dataset_id, "0.25", "0")
    ledger.discover(dataset_id, "0", "0.0000001")
    result = ledger.reconciled(dataset_id)
    assert result.account.spent_rho == D("0.5")
    assert result.account.spent_delta == D("0.0000005")


@pytest.mark.parametrize(
    ("rho", "delta", "remaining_rho", "remaining_delta"),
    [
        ("0.6", "0", "0.5", "0.000001"),  # ρ does not fit, δ does
        ("0.1", "0.0000011", "0.5", "0.000001"),  # δ does not fit, ρ does
        ("0.6", "0.0000011", "0.5", "0.000001"),  # neither
    ],
)
def test_discovery_that_does_not_fit_changes_nothing(
    ledger: Ledger, rho: str, delta: str, remaining_rho: str, remaining_delta: str
) -> None:
    dataset_id = ledger.dataset("1", total_delta="0.000001")
    # Half the ρ is reserved by a queued job: reservations count against discovery too.
    with transaction(ledger.factory) as session:
        job_service.submit_job(
            session,
            ledger.settings,
            ledger.principal,
            dataset_id,
            JobRequest(method="independent", budget={"rho": "0.5"}),
            None,
        )
    before = ledger.entries(dataset_id)
    with pytest.raises(budget_service.BudgetExceeded) as refused:
        ledger.discover(dataset_id, rho, delta)
    assert refused.value.requested_rho == D(rho) and refused.value.requested_delta == D(delta)
    assert refused.value.remaining_rho == D(remaining_rho)
    assert refused.value.remaining_delta == D(remaining_delta)
    assert [e.id for e in ledger.entries(dataset_id)] == [e.id for e in before]
    account = ledger.reconciled(dataset_id).account
    assert (account.spent_rho, account.spent_delta) == (D("0"), D("0"))
    # Exactly what remains still fits.
    ledger.discover(dataset_id, remaining_rho, remaining_delta)
    account = ledger.reconciled(dataset_id).account
    assert account.remaining_rho == 0 and account.remaining_delta == 0


def test_discovery_needs_granted_delta(ledger: Ledger) -> None:
    dataset_id = ledger.dataset("1")
    with pytest.raises(budget_service.BudgetExceeded):
        ledger.discover(dataset_id, "0.1", "0.000000000000000001")
    ledger.discover(dataset_id, "0.1", "0")  # pure zCDP discovery needs no δ
    assert ledger.reconciled(dataset_id).account.spent_rho == D("0.1")


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        ("0", "0"),  # charges nothing
        ("-0.1", "0.0000001"),
        ("0.1", "-0.0000001"),
        ("0.0000000000001", "0"),  # ρ below the 1e-12 grid: never rounded
        ("0.1", "0.0000000000000000001"),  # δ below the 1e-18 grid
    ],
)
def test_invalid_discovery_amounts_are_refused(ledger: Ledger, rho: str, delta: str) -> None:
    dataset_id = ledger.dataset("1", total_delta="0.000001")
    with pytest.raises(ValueError):
        ledger.discover(dataset_id, rho, delta)
    assert [e.kind for e in ledger.entries(dataset_id)] == ["grant"]


def test_grants_add_delta_below_one(ledger: Ledger) -> None:
    dataset_id = ledger.dataset("1")
    with transaction(ledger.factory) as session:
        state = budget_service.grant_budget(
            session, dataset_id, D("0.5"), D("1000"), "test", add_delta=D("0.5")
        )
    assert (state.total_rho, state.total_delta) == (D("1.5"), D("0.5"))
    for add_delta in ("0.5", "0.6"):  # the total δ would reach or pass 1
        with (
            pytest.raises(budget_service.BudgetLimitExceeded, match="δ"),
            transaction(ledger.factory) as session,
        ):
            budget_service.grant_budget(
                session, dataset_id, D("0.1"), D("1000"), "test", add_delta=D(add_delta)
            )
    with transaction(ledger.factory) as session:
        budget_service.grant_budget(
            session, dataset_id, D("0.1"), D("1000"), "test", add_delta=D("0.499999999999999999")
        )
    result = ledger.reconciled(dataset_id)
    assert result.account.total_delta == D("0.999999999999999999")
    assert result.account.total_rho == D("1.6")
    assert [(e.kind, e.delta) for e in ledger.entries(dataset_id)] == [
        ("grant", 0),
        ("grant", D("0.5")),
        ("grant", D("0.499999999999999999")),
    ]


def test_reconcile_sees_a_discover_entry_missing_from_the_account(ledger: Ledger) -> None:
    """The reconciliation is not vacuous: an entry without its account change is caught."""
    dataset_id = ledger.dataset("1", total_delta="0.000001")
    with transaction(ledger.factory) as session:
        budget_repository.append_entry(
            session,
            dataset_id=dataset_id,
            kind="discover",
            rho=D("0"),
            delta=D("0.0000001"),
            job_id=None,
            actor="test",
        )
    with transaction(ledger.factory) as session:
        assert not budget_service.reconcile(session, dataset_id).consistent


def _discover_together(
    url: str, dataset_id: uuid.UUID, callers: int, rho: Decimal, delta: Decimal
) -> tuple[int, int]:
    """``callers`` threads, each with its own connection, released at once; returns (charged,
    refused)."""
    engine = create_engine(url, pool_size=callers, max_overflow=0, pool_timeout=60)
    factory = sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
    barrier = threading.Barrier(callers)
    outcomes: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def caller() -> None:
        try:
            with transaction(factory) as session:
                session.connection()  # connect before the barrier, so all start together
                barrier.wait(timeout=60)
                budget_service.spend_discovery(session, dataset_id, rho, delta, DETAIL, "test")
            outcome = "charged"
        except budget_service.BudgetExceeded:
            outcome = "refused"
        except BaseException as error:  # reported below, with every other caller's outcome
            with lock:
                errors.append(error)
            return
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=caller) for _ in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    engine.dispose()
    assert not errors, errors
    assert len(outcomes) == callers
    return outcomes.count("charged"), outcomes.count("refused")


@pytest.mark.parametrize(
    ("rho", "delta", "fits"),
    [
        ("0.1", "0.00000001", 10),  # ρ runs out first: 10 × 0.1 = 1
        ("0.01", "0.00000007", 14),  # δ runs out first: 14 × 7e-8 = 9.8e-7 ≤ 1e-6 < 15 × 7e-8
    ],
)
def test_fifty_simultaneous_discoveries_never_overspend_on_postgresql(
    api_stack: Stack, rho: str, delta: str, fits: int
) -> None:
    url = api_stack.settings.sqlalchemy_url
    factory = get_session_factory(url)
    key = api_stack.create_key(f"disc-race-{uuid.uuid4().hex[:8]}", "owner")
    with transaction(factory) as session:
        principal = authenticate(session, api_stack.settings.secret_key_bytes(), key)
        assert principal is not None
        dataset_id = add_tableless_dataset(session, principal, D("1"), D("0.000001"))
    charged, refused = _discover_together(url, dataset_id, 50, D(rho), D(delta))
    assert (charged, refused) == (fits, 50 - fits)
    with transaction(factory) as session:
        result = budget_service.reconcile(session, dataset_id)
        kinds = session.scalars(
            select(LedgerEntry.kind).where(LedgerEntry.dataset_id == dataset_id)
        ).all()
    assert result.consistent, result
    assert kinds.count("discover") == fits
    account = result.account
    assert account.spent_rho == D(rho) * fits <= account.total_rho
    assert account.spent_delta == D(delta) * fits <= account.total_delta
