"""The health queries docs/operations.md gives operators run as written on PostgreSQL, and the
ledger-consistency query flags exactly the datasets whose ledger does not add up."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from sqlalchemy import text

from app.budget import service as budget_service
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.ledger import D
from tests.support.stack import Stack

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
MARKER = "-- datasets whose ledger does not add up to their account: must return no rows"


def _consistency_query() -> str:
    doc = OPERATIONS.read_text(encoding="utf-8")
    start = doc.index(MARKER)
    query = doc[start : doc.index(";", start) + 1]
    return re.sub(r"^\s*--.*$", "", query, flags=re.MULTILINE).strip()


def test_the_ledger_query_accepts_discovery_and_flags_a_mismatch(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """Issue 24 §11: the query ignored `discover` entries and flagged every dataset that used
    discovery. A dataset with a discover entry (ρ and δ) and a reserved job adds up; the same
    query flags an account whose numbers no longer match its ledger."""
    dataset = create_dataset(
        tenant.owner, people_csv, people_schema, budget_rho="1", budget_delta="0.000001"
    )
    dataset_id = uuid.UUID(dataset["id"])
    detail = {"mechanism": "open_set_categories", "columns": {"city": {"rho": "0.2"}}}
    with api_stack.session() as session:
        budget_service.spend_discovery(
            session, dataset_id, D("0.2"), D("0.0000004"), detail, "system"
        )
    # A reservation (this stack runs no worker): reserve entries count in reserved_rho.
    assert submit(tenant.analyst, dataset["id"], rho="0.1").status_code == 202
    query = _consistency_query()
    with api_stack.session() as session:
        flagged = {row[0] for row in session.execute(text(query))}
    assert dataset_id not in flagged
    # A copy of the query over an account whose spent δ is off by the discovery's δ: flagged.
    tampered = query.replace(
        "FROM budget_accounts a",
        "FROM (SELECT dataset_id, total_rho, spent_rho, reserved_rho, total_delta, "
        "spent_delta + 0.0000001 AS spent_delta FROM budget_accounts) a",
    )
    assert tampered != query
    with api_stack.session() as session:
        flagged = {row[0] for row in session.execute(text(tampered))}
    assert dataset_id in flagged
