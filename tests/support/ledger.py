"""Ledger reconciliation against the database, for tests."""

from __future__ import annotations

import uuid
from decimal import Decimal

from app.budget import service as budget_service
from tests.support.stack import Stack


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
