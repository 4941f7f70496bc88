"""RELIABILITY.md test 12: API fuzzing from the service's own OpenAPI document (schemathesis).

Every operation gets generated requests (valid and invalid) sent over HTTP to the running API
with an owner key; each response must not be a 5xx and must conform to the documented schema.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.config import Settings
from app.main import create_app
from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset
from tests.support.stack import Stack

SCHEMA = schemathesis.openapi.from_dict(create_app(Settings()).openapi())
CALLS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def fuzz_tenant(api_stack: Stack, people_csv: bytes, people_schema: str) -> Iterator[Tenant]:
    tenant = make_tenant(api_stack)
    create_dataset(tenant.owner, people_csv, people_schema, budget_rho="5")
    yield tenant
    tenant.close()
    print(
        f"\nschemathesis: {sum(CALLS.values())} requests, by status {dict(sorted(CALLS.items()))}"
    )


@SCHEMA.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_and_never_fails(
    case: schemathesis.Case, api_stack: Stack, fuzz_tenant: Tenant
) -> None:
    auth = {"Authorization": fuzz_tenant.owner.headers["Authorization"]}
    case.headers = {**(case.headers or {}), **auth}
    response = case.call(base_url=api_stack.base_url)
    CALLS[str(response.status_code)] += 1
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
        ],
        headers=auth,
    )
