"""The δ dimension over real HTTP: the upload's optional ``budget_delta``, δ in the dataset's
budget, grants of δ, and ``discover`` entries (δ and detail) in the ledger."""

from __future__ import annotations

import uuid

import pytest

from app.budget import service as budget_service
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, untouched_budget, upload
from tests.support.ledger import D, assert_reconciled
from tests.support.stack import Stack


def test_upload_without_budget_delta_has_none(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    assert dataset["budget"]["total_delta"] == "0"
    assert dataset["budget"]["spent_delta"] == "0"
    assert dataset["budget"]["remaining_delta"] == "0"


def test_upload_with_budget_delta_is_shown_and_granted(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(
        tenant.owner, people_csv, people_schema, budget_rho="1", budget_delta="1e-6"
    )
    expected = untouched_budget("1", "0.000001")
    assert expected["total_delta"] == expected["remaining_delta"] == "0.000001"
    assert dataset["budget"] == expected
    assert budget(tenant.analyst, dataset["id"]) == expected  # the budget is public to analysts
    ledger = tenant.owner.get(f"/v1/datasets/{dataset['id']}/ledger").json()
    [grant] = ledger["items"]
    assert (grant["kind"], grant["rho"], grant["delta"], grant["detail"]) == (
        "grant",
        "1",
        "0.000001",
        None,
    )
    assert ledger["budget"] == expected
    assert assert_reconciled(api_stack, dataset["id"]).granted_delta == D("0.000001")


@pytest.mark.parametrize(
    "budget_delta",
    [
        "-0.1",
        "1",
        "1.5",
        "abc",
        "",
        "NaN",
        "Infinity",
        "1e999999999",
        "0.0000000000000000001",
        "0.9999999999999999",
        "0.0011",
    ],
)
def test_bad_budget_delta_is_refused(
    tenant: Tenant, people_csv: bytes, people_schema: str, budget_delta: str
) -> None:
    response = upload(tenant.owner, people_csv, people_schema, budget_delta=budget_delta)
    assert response.status_code == 422, response.text
    assert "budget_delta" in response.json()["detail"]
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


def test_budget_delta_as_a_file_is_refused(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    response = tenant.owner.post(
        "/v1/datasets",
        files={
            "file": ("t.csv", people_csv, "text/csv"),
            "budget_delta": ("d", b"0.1", "text/plain"),
        },
        data={"schema": people_schema, "name": "x", "budget_rho": "1"},
    )
    # Refused before anything is read (the form allows one file: 400, as for any extra file).
    assert response.status_code in (400, 422), response.text
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


def test_grants_add_delta(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="0.5")
    url = f"/v1/datasets/{dataset['id']}"
    response = tenant.owner.post(f"{url}/budget", json={"add_rho": "0.25", "add_delta": "1e-7"})
    assert response.status_code == 200, response.text
    assert response.json()["budget"]["total_delta"] == "0.0000001"
    assert response.json()["budget"]["total_rho"] == "0.75"
    for bad in (-1e-9, 1, "1", "x", "NaN", "0.0000000000000000001", True):
        response = tenant.owner.post(f"{url}/budget", json={"add_rho": "0.1", "add_delta": bad})
        assert response.status_code == 422, (bad, response.text)
    # Above the documented cap of 0.001 (issue 24 §11: 0.9999999999999999 was accepted).
    for bad in ("0.9999999", "0.9999999999999999", "0.0010000001", "0.1"):
        response = tenant.owner.post(f"{url}/budget", json={"add_rho": "0.1", "add_delta": bad})
        assert response.status_code == 422, (bad, response.text)
    assert tenant.owner.post(f"{url}/budget", json={"add_delta": "0.1"}).status_code == 422
    entries = tenant.owner.get(f"{url}/ledger").json()["items"]
    assert [(e["kind"], e["rho"], e["delta"]) for e in entries] == [
        ("grant", "0.5", "0"),
        ("grant", "0.25", "0.0000001"),
    ]
    assert budget(tenant.analyst, dataset["id"])["total_delta"] == "0.0000001"
    assert_reconciled(api_stack, dataset["id"])


def test_ledger_shows_discover_entries(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(
        tenant.owner, people_csv, people_schema, budget_rho="1", budget_delta="0.000001"
    )
    detail = {"mechanism": "open_set_categories", "columns": {"city": {"rho": "0.2"}}}
    with api_stack.session() as session:
        budget_service.spend_discovery(
            session, uuid.UUID(dataset["id"]), D("0.2"), D("0.0000004"), detail, "system"
        )
    ledger = tenant.owner.get(f"/v1/datasets/{dataset['id']}/ledger").json()
    discover = ledger["items"][-1]
    assert {k: discover[k] for k in ("kind", "rho", "delta", "job_id", "actor", "detail")} == {
        "kind": "discover",
        "rho": "0.2",
        "delta": "0.0000004",
        "job_id": None,
        "actor": "system",
        "detail": detail,
    }
    shown = budget(tenant.analyst, dataset["id"])
    assert (shown["spent_rho"], shown["remaining_rho"]) == ("0.2", "0.8")
    assert (shown["spent_delta"], shown["remaining_delta"]) == ("0.0000004", "0.0000006")
    assert tenant.analyst.get(f"/v1/datasets/{dataset['id']}/ledger").status_code == 403
    result = assert_reconciled(api_stack, dataset["id"])
    assert result.discovered == D("0.2") and result.discovered_delta == D("0.0000004")


def test_openapi_documents_delta(api_stack: Stack) -> None:
    with api_stack.client() as client:
        spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert "add_delta" in schemas["GrantRequest"]["properties"]
    assert {"total_delta", "spent_delta", "remaining_delta"} <= set(
        schemas["BudgetOut"]["properties"]
    )
    assert "discover" in schemas["LedgerEntryOut"]["properties"]["kind"]["enum"]
    form = spec["paths"]["/v1/datasets"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert "budget_delta" in form["schema"]["properties"]


def test_dry_run_adds_the_discovery_delta_to_every_delta(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    # Issue 24 §3: a release uses the domain discovery published, so its (ε, δ) carries the
    # discovery's δ on top of the conversion's.
    dataset = create_dataset(
        tenant.owner, people_csv, people_schema, budget_rho="1", budget_delta="0.000001"
    )
    body = {"method": "independent", "budget": {"rho": "0.1"}, "rows": 10}
    before = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs", json=body, params={"dry_run": "true"}
    ).json()
    assert before["discovery_delta"] == "0"
    assert all(p["delta"] == p["conversion_delta"] for p in before["privacy_profile"])
    detail = {"mechanism": "open_set_categories", "columns": {"city": {"rho": "0.2"}}}
    with api_stack.session() as session:
        budget_service.spend_discovery(
            session, uuid.UUID(dataset["id"]), D("0.2"), D("0.0000004"), detail, "system"
        )
    after = tenant.analyst.post(
        f"/v1/datasets/{dataset['id']}/jobs", json=body, params={"dry_run": "true"}
    ).json()
    assert after["discovery_delta"] == "0.0000004"
    for old, new in zip(before["privacy_profile"], after["privacy_profile"], strict=True):
        assert new["epsilon"] == old["epsilon"]  # ε is the conversion's: ρ only
        assert new["conversion_delta"] == old["conversion_delta"]
        assert D(new["delta"]) == D(new["conversion_delta"]) + D("0.0000004")
