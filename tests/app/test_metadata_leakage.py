"""RELIABILITY.md test 11: adding one row — with an extreme or a never-seen (but declared) value —
changes no non-noise field of any response an analyst receives; an undeclared value is refused
without echoing it."""

from __future__ import annotations

from typing import Any

from tests.conftest import Tenant
from tests.support.api import create_dataset, submit, upload

VOLATILE = {"id", "dataset_id", "name", "created_at", "started_at", "finished_at"}


def _stable(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in VOLATILE}


def test_one_extra_row_changes_nothing_an_analyst_sees(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    extreme = b"Marseille,100,3,200000\n"  # the top edge of every bin, a category never used
    first = create_dataset(tenant.owner, people_csv, people_schema, name="D")
    second = create_dataset(tenant.owner, people_csv + extreme, people_schema, name="D-prime")
    assert (first["n_rows"], second["n_rows"]) == (400, 401)  # owners see the difference

    views = [tenant.analyst.get(f"/v1/datasets/{d['id']}").json() for d in (first, second)]
    assert views[0]["n_rows"] is None
    assert _stable(views[0]) == _stable(views[1])
    listing = tenant.analyst.get("/v1/datasets").json()["items"]
    assert _stable(listing[0]) == _stable(listing[1])

    jobs = [
        submit(tenant.analyst, d["id"], rho="0.1", rows=10, seed=1).json() for d in (first, second)
    ]
    assert _stable(jobs[0]) == _stable(jobs[1])
    listed = [
        tenant.analyst.get(f"/v1/datasets/{d['id']}/jobs").json()["items"][0]
        for d in (first, second)
    ]
    assert _stable(listed[0]) == _stable(listed[1])


def test_undeclared_value_is_refused_without_echo(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    response = upload(tenant.owner, people_csv + b"Atlantis,1e9,7,-5\n", people_schema)
    assert response.status_code == 422
    detail = response.json()["detail"]
    for leaked in ("Atlantis", "1e9", "-5", "1000000000"):
        assert leaked not in response.text
    assert detail == (
        "values do not match the schema: column 'city': 1 value not among the declared "
        "categories, declare them or set \"other\"; column 'age': 1 value outside [0, 100], set "
        "clip or widen the bounds; column 'tier': 1 value outside the codes 0..3; column "
        "'income': 1 value outside [0, 200000], set clip or widen the bounds"
    )
