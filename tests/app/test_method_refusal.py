"""A method that cannot run on a dataset's declared domain is refused at submission (422), before
any budget is reserved; CIPHER's full-joint cap is the case in point (real HTTP, no worker)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit, untouched_budget
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack


@pytest.fixture
def dataset(tenant: Tenant, people_csv: bytes, people_schema: str) -> dict[str, Any]:
    return create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")


def _ledger(tenant: Tenant, dataset_id: str) -> list[tuple[str, str]]:
    items = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()["items"]
    return [(e["kind"], e["rho"]) for e in items]


def _people_cells(people_schema: str) -> int:
    """The declared domain's size: city (categories), age (bins), tier (codes), income (edges)."""
    sizes = []
    for column in json.loads(people_schema)["columns"]:
        if column["type"] == "categorical":
            sizes.append(len(column["categories"]))
        elif column["type"] == "codes":
            sizes.append(column["size"])
        elif isinstance(column["bins"], int):
            sizes.append(column["bins"])
        else:
            sizes.append(len(column["bins"]) - 1)
    return math.prod(sizes)


def test_people_domain_size(people_schema: str) -> None:
    assert _people_cells(people_schema) == 7 * 10 * 4 * 5 == 1400


@pytest.mark.parametrize("budget_body", [{"rho": "0.3"}, {"epsilon": 1, "delta": "1e-9"}])
def test_cipher_over_its_cap_is_refused_before_reserving(
    api_stack: Stack,
    tenant: Tenant,
    dataset: dict[str, Any],
    people_schema: str,
    budget_body: dict[str, Any],
) -> None:
    cells = _people_cells(people_schema)
    cap = cells - 1
    response = submit(
        tenant.analyst,
        dataset["id"],
        method="cipher",
        params={"max_cells": cap},
        budget=budget_body,
    )
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert "'cipher' cannot run on this dataset" in detail
    assert f"this domain has {cells} cells" in detail
    assert f"max_cells = {cap}" in detail
    assert budget(tenant.analyst, dataset["id"]) == untouched_budget("1")
    assert _ledger(tenant, dataset["id"]) == [("grant", "1")]
    assert tenant.analyst.get(f"/v1/datasets/{dataset['id']}/jobs").json()["items"] == []
    assert_reconciled(api_stack, dataset["id"])


def test_cipher_reconstruction_cap_is_refused_too(tenant: Tenant, dataset: dict[str, Any]) -> None:
    response = submit(
        tenant.analyst,
        dataset["id"],
        method="cipher",
        params={"max_reconstructed_cells": 10},
    )
    assert response.status_code == 422, response.text
    assert "max_reconstructed_cells = 10" in response.json()["detail"]
    assert _ledger(tenant, dataset["id"]) == [("grant", "1")]


def test_refusal_is_not_idempotently_remembered(tenant: Tenant, dataset: dict[str, Any]) -> None:
    """A refused request reserves nothing, so the same key can be reused once it fits."""
    key = {"Idempotency-Key": "cipher-refusal-then-fit"}
    refused = submit(
        tenant.analyst,
        dataset["id"],
        method="cipher",
        params={"max_cells": 10},
        headers=key,
    )
    assert refused.status_code == 422, refused.text
    accepted = submit(tenant.analyst, dataset["id"], method="cipher", rho="0.2", headers=key)
    assert accepted.status_code == 202, accepted.text


def test_cipher_that_fits_is_accepted(
    api_stack: Stack, tenant: Tenant, dataset: dict[str, Any], people_schema: str
) -> None:
    cells = _people_cells(people_schema)
    response = submit(
        tenant.analyst,
        dataset["id"],
        method="cipher",
        rho="0.3",
        params={"max_cells": cells, "order": 2},
        seed=4,
    )
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["method"] == "cipher" and job["status"] == "queued"
    assert budget(tenant.analyst, dataset["id"])["reserved_rho"] == "0.3"
    assert _ledger(tenant, dataset["id"]) == [("grant", "1"), ("reserve", "0.3")]
    assert submit(tenant.analyst, dataset["id"], method="cipher", rho="0.1").status_code == 202
    assert_reconciled(api_stack, dataset["id"])


def test_cipher_is_listed_with_its_params(tenant: Tenant) -> None:
    methods = {m["name"]: m for m in tenant.analyst.get("/v1/methods").json()["items"]}
    properties = methods["cipher"]["params_schema"]["properties"]
    assert {"order", "lam", "clip_mid", "target", "max_cells", "max_reconstructed_cells"} <= set(
        properties
    )
    assert all(p.get("description") for p in properties.values())
