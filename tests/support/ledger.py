"""Ledger reconciliation against the database, for tests."""

from __future__ import annotations

import uuid
from decimal import Decimal

from sqlalchemy.orm import Session

from app.auth.service import Principal
from app.budget import service as budget_service
from app.datasets.models import Dataset
from tests.support.stack import Stack


def add_tableless_dataset(
    session: Session, principal: Principal, total_rho: Decimal, total_delta: Decimal = Decimal(0)
) -> uuid.UUID:
    """A dataset row with an open budget account and no stored table (for ledger tests that
    never run a job's engine)."""
    dataset_id = uuid.uuid4()
    session.add(
        Dataset(
            id=dataset_id,
            tenant_id=principal.tenant_id,
            name="ledger-test",
            schema={"a": 2},
            n_rows=1,
            n_columns=1,
            storage_key=None,
            created_by=principal.key_id,
        )
    )
    session.flush()
    budget_service.open_account(
        session, dataset_id, total_rho, principal.actor, total_delta=total_delta
    )
    return dataset_id


def assert_reconciled(stack: Stack, dataset_id: str | uuid.UUID) -> budget_service.Reconciliation:
    """The ledger's entries sum to the account's columns, and the account is within its total."""
    with stack.session() as session:
        result = budget_service.reconcile(session, uuid.UUID(str(dataset_id)))
    account = result.account
    assert result.consistent, result
    assert account.spent_rho >= 0 and account.reserved_rho >= 0
    assert account.spent_rho + account.reserved_rho <= account.total_rho
    return result


def D(value: str) -> Decimal:
    return Decimal(value)
