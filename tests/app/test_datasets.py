"""Dataset upload, validation, visibility, budgets and erasure, over real HTTP."""

from __future__ import annotations

import io
import json
import uuid

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit, untouched_budget, upload
from tests.support.ledger import D, assert_reconciled
from tests.support.stack import Stack

# The column options a plain column leaves at their defaults (see docs/api.md, schema).
UNSET_OPTIONS = {
    "profile": None,
    "nullable": False,
    "other": None,
    "ordered": False,
    "integer": False,
    "decimals": None,
    "clip": False,
    "format": None,
    "resolution": None,
    "true_values": None,
    "false_values": None,
    "discovered": False,
}


def _stored_tables(stack: Stack) -> int:
    root = stack.settings.resolved_storage_dir / "datasets"
    return len(list(root.glob("*/table.arrow"))) if root.exists() else 0


def test_upload_domain_map_and_visibility(
    tenant: Tenant, adult_csv: bytes, adult_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, adult_csv, adult_schema, budget_rho="2.5", name="adult")
    assert dataset["name"] == "adult"
    assert [c["name"] for c in dataset["columns"]] == list(json.loads(adult_schema))
    assert dataset["columns"][0] == {
        "name": "age",
        "type": "codes",
        "size": 85,
        "categories": None,
        "bins": None,
        **UNSET_OPTIONS,
    }
    assert dataset["n_rows"] == 1000
    assert dataset["budget"] == untouched_budget("2.5")
    as_analyst = tenant.analyst.get(f"/v1/datasets/{dataset['id']}").json()
    assert as_analyst["n_rows"] is None, "analysts never see the exact row count"
    assert as_analyst["budget"] == dataset["budget"]
    listed = tenant.analyst.get("/v1/datasets").json()
    assert [d["id"] for d in listed["items"]] == [dataset["id"]]
    assert listed["items"][0]["n_rows"] is None


def test_upload_declared_columns(tenant: Tenant, people_csv: bytes, people_schema: str) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    columns = {c["name"]: c for c in dataset["columns"]}
    assert columns["city"]["type"] == "categorical" and columns["city"]["size"] == 7
    assert columns["age"]["bins"] == [float(x) for x in range(0, 101, 10)]
    assert columns["income"]["size"] == 5
    assert columns["tier"] == {
        "name": "tier",
        "type": "codes",
        "size": 4,
        "categories": None,
        "bins": None,
        **UNSET_OPTIONS,
    }
    assert dataset["n_rows"] == 400


def test_parquet_upload_matches_csv(tenant: Tenant, people_csv: bytes, people_schema: str) -> None:
    import pandas as pd

    frame = pd.read_csv(io.BytesIO(people_csv))
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), buffer)
    dataset = create_dataset(
        tenant.owner, buffer.getvalue(), people_schema, filename="people.parquet"
    )
    assert dataset["n_rows"] == 400


def test_auth_and_roles(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    with api_stack.client() as anonymous:
        assert anonymous.get("/v1/datasets").status_code == 401
        assert anonymous.get("/healthz").status_code == 200
        assert anonymous.get("/openapi.json").status_code == 200
    with api_stack.client("rhs_not-a-real-key") as forged:
        response = forged.get("/v1/datasets")
        assert response.status_code == 401
        assert response.headers["www-authenticate"] == "Bearer"
    assert upload(tenant.analyst, people_csv, people_schema).status_code == 403
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    assert tenant.analyst.get(f"/v1/datasets/{dataset['id']}/ledger").status_code == 403
    assert (
        tenant.analyst.post(f"/v1/datasets/{dataset['id']}/budget", json={"add_rho": 1}).status_code
        == 403
    )
    assert tenant.analyst.delete(f"/v1/datasets/{dataset['id']}").status_code == 403
    me = tenant.analyst.get("/v1/me").json()
    assert me["role"] == "analyst"


def test_other_tenant_sees_nothing(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    other = make_tenant(api_stack)
    try:
        for client in (other.owner, other.analyst):
            assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 404
            assert client.get(f"/v1/datasets/{dataset['id']}/jobs").status_code == 404
            assert submit(client, dataset["id"]).status_code == 404
            assert client.get("/v1/datasets").json()["items"] == []
        assert other.owner.get(f"/v1/datasets/{dataset['id']}/ledger").status_code == 404
        assert other.owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 404
        job = submit(tenant.analyst, dataset["id"]).json()
        assert other.analyst.get(f"/v1/jobs/{job['id']}").status_code == 404
        assert other.analyst.post(f"/v1/jobs/{job['id']}/cancel").status_code == 404
        assert other.analyst.get(f"/v1/jobs/{job['id']}/output").status_code == 404
    finally:
        other.close()


BAD_UPLOADS = {
    "missing column": (b"city,age,tier\nLyon,3,1\n", "missing columns: 'income'"),
    "extra column": (
        b"city,age,tier,income,zip\nLyon,3,1,5,9\n",
        "columns not in the schema: 'zip'",
    ),
    "outside domain": (
        b"city,age,tier,income\nLyon,3,1,5\nSECRETVILLE,300,9,5\nSECRETVILLE,4,1,5\n",
        "column 'city': 2 values not among the declared categories, declare them or set "
        "\"other\"; column 'age': 1 value outside [0, 100]",
    ),
    "header only": (b"city,age,tier,income\n", "the table has no rows"),
    "empty file": (b"", "the file is empty"),
    "bad utf-8 in body": (b"city,age,tier,income\nLy\xff\xfeon,3,1,5\n", "not valid UTF-8"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "neither Parquet nor UTF-8 CSV"),
    "NUL in cells": (b"city,age,tier,income\nLy\x00on,3,1,5\n", "column 'city': 1 value not among"),
    "ragged rows": (
        b"city,age,tier,income\nLyon,3,1\nLyon,3,1,5\n",
        "1 row does not have 4 fields",
    ),
    "non-integer code": (
        b"city,age,tier,income\nLyon,3,1.5,5\n",
        "column 'tier': not an integer code in 1 row",
    ),
    "duplicate header": (b"city,age,tier,income,city\nLyon,3,1,5,Lyon\n", "duplicate columns"),
}


@pytest.mark.parametrize("case", sorted(BAD_UPLOADS))
def test_bad_uploads_are_refused_without_echoing_values(
    api_stack: Stack, tenant: Tenant, people_schema: str, case: str
) -> None:
    body, expected = BAD_UPLOADS[case]
    before = _stored_tables(api_stack)
    response = upload(tenant.owner, body, people_schema)
    assert 400 <= response.status_code < 500, response.text
    detail = response.json()["detail"]
    assert expected in detail
    assert "SECRETVILLE" not in detail and "300" not in detail
    assert _stored_tables(api_stack) == before
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ("not json", "schema is not valid JSON"),
        ('{"a": "x"}', "integer size"),
        ('{"columns": [{"name": "a", "type": "numeric", "bins": [1, 1]}]}', "strictly increasing"),
        (
            '{"columns": [{"name": "a", "type": "categorical", "categories": []}]}',
            "must not be empty",
        ),
        ('{"columns": [{"name": "a", "type": "weird"}]}', "type must be one of"),
        ('{"a": 0}', "size must be a positive integer"),
        ('{"a": 10000000}', "the limit is"),
    ],
)
def test_bad_schemas(tenant: Tenant, schema: str, expected: str) -> None:
    response = upload(tenant.owner, b"a\n1\n", schema)
    assert response.status_code == 422
    assert expected in response.json()["detail"]


@pytest.mark.parametrize(
    "budget_rho",
    [
        "0",
        "-1",
        "abc",
        "NaN",
        "Infinity",
        "1e400",
        "1e999999999",
        "1e-999999999",
        "0.0000000000001",
        "2000000",
    ],
)
def test_bad_budgets(
    tenant: Tenant, people_csv: bytes, people_schema: str, budget_rho: str
) -> None:
    response = upload(tenant.owner, people_csv, people_schema, budget_rho=budget_rho)
    assert response.status_code == 422, response.text


def test_oversize_upload_with_content_length(
    api_stack: Stack, tenant: Tenant, people_schema: str
) -> None:
    limit = api_stack.settings.max_upload_bytes
    response = upload(tenant.owner, b"x" * (limit + 1), people_schema)
    assert response.status_code == 413


def test_oversize_upload_chunked(api_stack: Stack, tenant: Tenant, people_schema: str) -> None:
    limit = api_stack.settings.max_upload_bytes
    boundary = "rhosynthboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="schema"\r\n\r\n{people_schema}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="budget_rho"\r\n\r\n1\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n\r\n'
    ).encode()

    def body():  # a generator: httpx sends it chunked, without Content-Length
        yield head
        sent = 0
        chunk = b"city,age,tier,income\n" + b"Lyon,3,1,5\n" * 10_000
        while sent <= limit:
            yield chunk
            sent += len(chunk)
        yield f"\r\n--{boundary}--\r\n".encode()

    response = tenant.owner.post(
        "/v1/datasets",
        content=body(),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 413
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


def test_many_columns_and_huge_cells(tenant: Tenant) -> None:
    header = ",".join(f"c{i}" for i in range(100_000))
    schema = json.dumps({"c0": 2})
    response = upload(tenant.owner, (header + "\n").encode(), schema)
    assert response.status_code == 422
    assert "more than" in response.json()["detail"]
    big_cell = b"a,b\n" + b"x" * (2 * 1024 * 1024) + b",1\n"
    response = upload(
        tenant.owner,
        big_cell,
        json.dumps(
            {
                "columns": [
                    {"name": "a", "type": "categorical", "categories": ["x"]},
                    {"name": "b", "type": "codes", "size": 2},
                ]
            }
        ),
    )
    assert response.status_code == 422
    assert "x" * 50 not in response.text


def test_upload_needs_multipart(tenant: Tenant) -> None:
    response = tenant.owner.post("/v1/datasets", json={"file": "a"})
    assert response.status_code == 415
    response = tenant.owner.post(
        "/v1/datasets",
        data={"schema": "{}", "name": "x", "budget_rho": "1"},
        files={"other": ("a", b"a")},
    )
    assert response.status_code == 422


def test_the_common_upload_slips_get_answers_that_say_what_to_do(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    """Issue 26 §7: ``-F schema=@schema.json`` answered "Too many files. Maximum number of files
    is 1.", and the whole draft answer sent as the schema "column 'schema': a domain map gives
    each column an integer size"."""
    as_file = tenant.owner.post(
        "/v1/datasets",
        data={"name": "schema-as-file", "budget_rho": "1"},
        files={
            "file": ("people.csv", people_csv, "text/csv"),
            "schema": ("schema.json", people_schema.encode(), "application/json"),
        },
    )
    assert as_file.status_code == 201, as_file.text
    assert (
        as_file.json()["columns"]
        == create_dataset(tenant.owner, people_csv, people_schema)["columns"]
    )
    too_big = tenant.owner.post(
        "/v1/datasets",
        data={"name": "x", "budget_rho": "1"},
        files={
            "file": ("people.csv", people_csv, "text/csv"),
            "schema": ("schema.json", b" " * 2_000_000 + people_schema.encode(), "text/plain"),
        },
    )
    assert too_big.status_code == 422 and "schema is limited to" in too_big.json()["detail"]
    name_as_file = tenant.owner.post(
        "/v1/datasets",
        data={"schema": people_schema, "budget_rho": "1"},
        files={"file": ("people.csv", people_csv, "text/csv"), "name": ("n.txt", b"x")},
    )
    assert name_as_file.status_code == 422
    assert "name must be text (-F name=value)" in name_as_file.json()["detail"]
    draft = tenant.owner.post(
        "/v1/schema-drafts", files={"file": ("people.csv", people_csv, "text/csv")}
    )
    assert draft.status_code == 200, draft.text
    whole = upload(tenant.owner, people_csv, draft.text)
    assert whole.status_code == 422
    assert "whole answer of POST /v1/schema-drafts" in whole.json()["detail"]
    assert "jq .schema" in whole.json()["detail"]


def test_budget_grants_and_ledger(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="0.5")
    url = f"/v1/datasets/{dataset['id']}"
    response = tenant.owner.post(f"{url}/budget", json={"add_rho": "0.25"})
    assert response.status_code == 200
    assert response.json()["budget"]["total_rho"] == "0.75"
    for bad in (0, -1, "x", "0.0000000000001"):
        assert tenant.owner.post(f"{url}/budget", json={"add_rho": bad}).status_code == 422
    assert tenant.owner.post(f"{url}/budget", json={"add_rho": 1, "extra": 1}).status_code == 422
    ledger = tenant.owner.get(f"{url}/ledger").json()
    assert [(e["kind"], e["rho"], e["job_id"]) for e in ledger["items"]] == [
        ("grant", "0.5", None),
        ("grant", "0.25", None),
    ]
    assert all(e["actor"].startswith("key:") for e in ledger["items"])
    # The key's name beside its id (issue 26 §4); Stack.create_key names every key "test".
    assert [e["actor_name"] for e in ledger["items"]] == ["test", "test"]
    assert ledger["budget"]["remaining_rho"] == "0.75"
    result = assert_reconciled(api_stack, dataset["id"])
    assert result.granted == D("0.75")


def test_ledger_pagination(tenant: Tenant, people_csv: bytes, people_schema: str) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    for _ in range(4):
        assert submit(tenant.analyst, dataset["id"], rho="0.01").status_code == 202
    url = f"/v1/datasets/{dataset['id']}/ledger"
    first = tenant.owner.get(url, params={"limit": 3}).json()
    assert len(first["items"]) == 3 and first["next_after"] is not None
    rest = tenant.owner.get(url, params={"limit": 3, "after": first["next_after"]}).json()
    assert len(rest["items"]) == 2 and rest["next_after"] is None
    ids = [e["id"] for e in first["items"] + rest["items"]]
    assert ids == sorted(ids) and len(set(ids)) == 5


def test_delete_erases_table_keeps_ledger(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    table = api_stack.settings.resolved_storage_dir / "datasets" / dataset["id"] / "table.arrow"
    assert table.is_file()
    # The raw numeric values kept for the owner's report lie beside it, and go with it.
    values = table.with_name("values.arrow")
    assert values.is_file()
    queued = submit(tenant.analyst, dataset["id"], rho="0.2").json()
    response = tenant.owner.delete(f"/v1/datasets/{dataset['id']}")
    assert response.status_code == 200
    assert response.json()["deleted_at"] is not None
    assert not table.exists()
    assert not values.exists()
    assert not table.parent.exists()
    # The queued job never read the data: cancelled and its reservation released.
    job = tenant.analyst.get(f"/v1/jobs/{queued['id']}").json()
    assert job["status"] == "cancelled"
    after = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()
    assert after["budget"]["reserved_rho"] == "0" and after["budget"]["remaining_rho"] == "1"
    kinds = [
        e["kind"] for e in tenant.owner.get(f"/v1/datasets/{dataset['id']}/ledger").json()["items"]
    ]
    assert kinds == ["grant", "reserve", "release"]
    assert submit(tenant.analyst, dataset["id"]).status_code == 409
    assert (
        tenant.owner.post(f"/v1/datasets/{dataset['id']}/budget", json={"add_rho": 1}).status_code
        == 409
    )
    assert tenant.owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 200  # idempotent
    assert_reconciled(api_stack, dataset["id"])


def test_unknown_ids(tenant: Tenant) -> None:
    missing = uuid.uuid4()
    assert tenant.owner.get(f"/v1/datasets/{missing}").status_code == 404
    assert tenant.owner.get(f"/v1/jobs/{missing}").status_code == 404
    assert tenant.owner.get("/v1/datasets/not-a-uuid").status_code == 422


def test_healthz_and_docs(api_stack: Stack) -> None:
    with httpx.Client(base_url=api_stack.base_url) as client:
        assert client.get("/healthz").json() == {
            "status": "ok",
            "database": "ok",
            "storage": "ok",
            "pool": "ok",
        }
        assert client.get("/docs").status_code == 200
        spec = client.get("/openapi.json").json()
        assert "/v1/datasets" in spec["paths"]
        assert (
            "multipart/form-data" in spec["paths"]["/v1/datasets"]["post"]["requestBody"]["content"]
        )


def test_ledger_names_only_the_callers_own_keys(api_stack: Stack, tenant: Tenant) -> None:
    """actor_name comes from the caller's tenant only: another tenant's key id is not named."""
    from app.auth.service import actor_names
    from app.db.session import get_session_factory, read_only_session

    other = make_tenant(api_stack)
    mine = tenant.owner.get("/v1/me").json()
    theirs = other.owner.get("/v1/me").json()
    actors = [f"key:{mine['key_id']}", f"key:{theirs['key_id']}", "worker", "key:not-a-uuid"]
    factory = get_session_factory(api_stack.settings.sqlalchemy_url)
    with read_only_session(factory) as session:
        names = actor_names(session, uuid.UUID(mine["tenant_id"]), actors)
    assert names == {f"key:{mine['key_id']}": mine["name"]}
