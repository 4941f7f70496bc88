"""Issue 12 end to end in production mode: a raw table (text, numbers, dates in two formats,
missing values in every type, identifiers) goes from the service's draft, accepted as is, through
charged DP discovery to a downloaded `aim` release (tests/support/raw.py holds the checks)."""

from __future__ import annotations

from tests.conftest import Tenant
from tests.support.raw import release_raw_fixture
from tests.support.stack import Stack


def test_raw_table_from_draft_to_release(worker_stack: Stack, worker_tenant: Tenant) -> None:
    release_raw_fixture(worker_tenant.owner, worker_tenant.analyst)
