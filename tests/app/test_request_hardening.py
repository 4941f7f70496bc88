"""Issue 11, section 3: schemas, JSON bodies, redirects and storage failures never give a 500.

Every case here answered 500 (or 400, 307) before the fix; see the commit that added this file.
"""

from __future__ import annotations

import errno
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.storage import LocalStorage
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit, upload
from tests.support.memory import peak_rss
from tests.support.stack import Stack

CSV = b"a\n1\n"


def _numeric(bins: str, columns: int = 1) -> str:
    entries = ",".join(
        f'{{"name": "c{i}", "type": "numeric", "min": 0, "max": 1, "bins": {bins}}}'
        for i in range(columns)
    )
    return f'{{"columns": [{entries}]}}'


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        (_numeric("30000000"), "the limit is 100000"),
        (_numeric("1000000000000"), "the limit is 100000"),
        (_numeric("1e300"), "'bins' must be a list of edges, a count ≥ 1 or"),
        (_numeric("1" + "0" * 300), "integers are limited to 20 digits"),
        (_numeric("100000", columns=200), "values in total; the limit is 1000000"),
        (_numeric("NaN"), "NaN is not a number JSON allows"),
        ("[" * 100_000, "nested deeper than 8 levels"),
        ('{"columns": [{"name": "a", "type": "codes", "size": 1e400}]}', "size must be"),
        ('{"a": 1' + "0" * 5000 + "}", "integers are limited to 20 digits"),
        (json.dumps({f"c{i}": 2 for i in range(40_000)}), "more than 1000 columns"),
    ],
)
def test_oversized_schemas_are_refused_before_they_are_built(
    api_stack: Stack, tenant: Tenant, schema: str, expected: str
) -> None:
    assert api_stack.server is not None
    with peak_rss(api_stack.server.pid) as memory:
        response = upload(tenant.owner, CSV, schema)
    assert response.status_code == 422, response.text
    assert expected in response.json()["detail"]
    # "bins": 30000000 used to build 30 million edges (1.6 GB) before the limit was checked.
    assert memory.growth_mib < 200


def test_duplicate_column_names_are_reported(tenant: Tenant) -> None:
    columns = [{"name": f"c{i}", "type": "codes", "size": 2} for i in range(500)]
    columns += [{"name": "c1", "type": "codes", "size": 2}]
    response = upload(tenant.owner, CSV, json.dumps({"columns": columns}))
    assert response.status_code == 422
    assert "duplicate column names: 'c1'" in response.json()["detail"]


@pytest.fixture
def dataset_id(tenant: Tenant, people_csv: bytes, people_schema: str) -> str:
    dataset: dict[str, str] = create_dataset(tenant.owner, people_csv, people_schema)
    return dataset["id"]


@pytest.mark.parametrize(
    "body",
    [
        '{"method": "independent", "budget": {"rho": NaN}}',
        '{"method": "independent", "budget": {"rho": Infinity}}',
        '{"method": "independent", "budget": {"rho": -Infinity}}',
        '{"method": "independent", "budget": {"rho": 1e400}}',
        '{"method": "independent", "budget": {"rho": 0.1}, "rows": NaN}',
        '{"method": "independent", "budget": {"rho": 0.1}, "seed": Infinity}',
        '{"method": "aim", "budget": {"rho": 0.1}, "params": {"selection_share": NaN}}',
        '{"method": "independent", "budget": {"rho": 0.1}, "rows": 1' + "0" * 5000 + "}",
        '{"method": "independent", "budget": {"epsilon": "1e-300", "delta": 1e-6}}',
        '{"method": "independent", "budget": {"epsilon": 1, "delta": 1e-300}}',
        '{"method": "independent", "budget": {"epsilon": 1, "delta": "1e-300"}}',
        '{"method": "independent", "budget": {"epsilon": 1, "delta": "0.' + "1" * 40 + '"}}',
        # Nested too deep for Python's parser: was FastAPI's 400 "error parsing the body".
        '{"method": "aim", "budget": {"rho": 0.1}, "params": ' + "[" * 100_000 + "}",
    ],
)
def test_unrepresentable_numbers_in_job_bodies_are_422(
    api_stack: Stack, tenant: Tenant, dataset_id: str, body: str
) -> None:
    response = tenant.analyst.post(
        f"/v1/datasets/{dataset_id}/jobs",
        content=body,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], list)
    assert tenant.owner.get(f"/v1/datasets/{dataset_id}").json()["budget"]["reserved_rho"] == "0"


@pytest.mark.parametrize("add_rho", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_unrepresentable_grants_are_422(tenant: Tenant, dataset_id: str, add_rho: str) -> None:
    response = tenant.owner.post(
        f"/v1/datasets/{dataset_id}/budget",
        content=f'{{"add_rho": {add_rho}}}',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/datasets/{d}/jobs", '{"method": "\\ud800", "budget": {"rho": "0.1"}}'),
        ("/v1/datasets/{d}/jobs?dry_run=true", '{"method": "\\ud800", "budget": {"rho": "0.1"}}'),
        ("/v1/datasets/{d}/jobs", '{"method": "independent", "budget": {"rho": "\\udfff"}}'),
        ("/v1/datasets/{d}/jobs", '{"method": "independent", "\\ud800": 1}'),
        ("/v1/datasets/{d}/budget", '{"add_rho": "\\ud800"}'),
        ("/v1/jobs/{j}/samples", '{"rows": "\\ud800"}'),
    ],
)
def test_a_lone_surrogate_is_422_not_500(
    api_stack: Stack, tenant: Tenant, dataset_id: str, path: str, body: str
) -> None:
    """Issue 24 §11: a lone UTF-16 surrogate in a JSON string answered 500 (the only 5xx in
    2,190 schemathesis cases): strict JSON text cannot hold it."""
    assert "\\ud" in body or "\\udfff" in body  # the escape itself, not a decoded character
    job = submit(tenant.analyst, dataset_id, rho="0.01")
    assert job.status_code == 202, job.text
    client = tenant.owner if path.endswith("/budget") else tenant.analyst
    response = client.post(
        path.format(d=dataset_id, j=job.json()["id"]),
        content=body.encode(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422, response.text
    assert "surrogate" in response.text
    shown = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()["budget"]
    assert shown["total_rho"] == "1"


def test_smallest_accepted_delta_is_stored_exactly(tenant: Tenant, dataset_id: str) -> None:
    delta = "0." + "0" * 29 + "1"  # 1e-30, the documented floor
    response = submit(
        tenant.analyst,
        dataset_id,
        budget={"epsilon": "1.234567890123456789012345678", "delta": delta},
    )
    assert response.status_code == 202, response.text
    assert response.json()["delta"] == delta
    assert response.json()["epsilon"] == "1.234567890123456789012345678"


def test_chunked_json_body_over_the_cap_is_413(
    api_stack: Stack, tenant: Tenant, dataset_id: str
) -> None:
    limit = api_stack.settings.max_json_body_bytes

    def body() -> Iterator[bytes]:  # a generator: sent chunked, without Content-Length
        yield b'{"method": "independent", "budget": {"rho": 0.1}, "params": {"x": "'
        for _ in range(limit // 8192 + 2):
            yield b"x" * 8192
        yield b'"}}'

    response = tenant.analyst.post(
        f"/v1/datasets/{dataset_id}/jobs",
        content=body(),
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 413, response.text
    assert response.json() == {"detail": f"request body exceeds the limit of {limit} bytes"}


def test_trailing_slash_is_not_redirected_to_the_host_header(tenant: Tenant) -> None:
    for path in ("/v1/datasets/", "/v1/methods/", "/v1/me/"):
        response = tenant.analyst.get(
            path, headers={"Host": "evil.example"}, follow_redirects=False
        )
        assert response.status_code == 404, (path, response.status_code)
        assert "location" not in response.headers


@pytest.fixture
def in_process(api_stack: Stack, tenant: Tenant, tmp_path: Path) -> Iterator[TestClient]:
    """An in-process API on the stack's database, storing into ``tmp_path / "storage"``."""
    settings = api_stack.settings.model_copy(update={"storage_dir": tmp_path / "storage"})
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = tenant.owner.headers["Authorization"]
        yield client


def test_storage_root_that_cannot_be_created_is_503(
    in_process: TestClient,
    tenant: Tenant,
    tmp_path: Path,
    people_csv: bytes,
    people_schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    (tmp_path / "storage").write_bytes(b"a file where the storage directory should be")
    with caplog.at_level(logging.ERROR, logger="app.datasets.endpoints"):
        response = upload(in_process, people_csv, people_schema)  # type: ignore[arg-type]
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"] == "60"
    assert response.json() == {"detail": "the service cannot store uploads right now; retry later"}
    assert any("storage is not writable" in r.getMessage() for r in caplog.records)
    assert "Not a directory" in caplog.text
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


def test_full_disk_while_storing_is_503_and_leaves_nothing(
    in_process: TestClient,
    tenant: Tenant,
    tmp_path: Path,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def full_disk(self: LocalStorage, temp: Path, key: str) -> None:
        self.path(key).parent.mkdir(parents=True, exist_ok=True)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(LocalStorage, "put_file", full_disk)
    with caplog.at_level(logging.ERROR, logger="app.datasets.endpoints"):
        response = upload(in_process, people_csv, people_schema)  # type: ignore[arg-type]
    assert response.status_code == 503, response.text
    assert "No space left on device" in caplog.text
    root = tmp_path / "storage"
    assert [p for p in root.rglob("*") if p.is_file()] == []
    assert list((root / "datasets").iterdir()) == []
    assert tenant.owner.get("/v1/datasets").json()["items"] == []


def test_healthz_reports_an_exhausted_pool(
    api_stack: Stack, tenant: Tenant, tmp_path: Path
) -> None:
    """Issue 24 §11: /healthz said 200 while every pooled connection was taken and every other
    request got 503. With the pool of an in-process API held and a request timed out waiting
    for it, /healthz answers 503 with "pool": "exhausted"; once a connection is back, 200."""
    from app.db.session import get_engine

    settings = api_stack.settings.model_copy(
        update={
            "storage_dir": tmp_path / "storage",
            "db_pool_size": 2,
            "db_pool_timeout_seconds": 0.5,
            # Its own URL, so this process's pool is the one this API builds (pools are per URL).
            "database_url": api_stack.settings.sqlalchemy_url + "?application_name=pooltest",
        }
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        client.headers["Authorization"] = tenant.owner.headers["Authorization"]
        assert client.get("/v1/datasets").status_code == 200
        assert client.get("/healthz").json()["pool"] == "ok"
        engine = get_engine(settings.sqlalchemy_url)
        held = [engine.connect() for _ in range(2)]
        try:
            busy = client.get("/v1/datasets")
            assert busy.status_code == 503, busy.text
            health = client.get("/healthz")
            assert health.status_code == 503
            assert health.json()["pool"] == "exhausted"
        finally:
            for connection in held:
                connection.close()
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["pool"] == "ok"


def test_failed_key_checks_are_throttled_per_address(
    api_stack: Stack, tenant: Tenant, tmp_path: Path
) -> None:
    """Issue 24 §11: 300 bad keys answered 401 in 2.1 s. Past a burst of failures an address is
    answered 429 with Retry-After before its key is checked; requests with no key and valid
    keys from another address are not throttled."""
    settings = api_stack.settings.model_copy(
        update={
            "storage_dir": tmp_path / "storage",
            "auth_failure_burst": 5,
            "auth_failures_per_second": 0.5,
        }
    )
    app = create_app(settings)
    owner = tenant.owner.headers["Authorization"]
    with (
        TestClient(app, raise_server_exceptions=False) as client,
        TestClient(app, raise_server_exceptions=False, client=("10.0.0.9", 5000)) as other,
    ):
        codes = [
            client.get("/v1/datasets", headers={"Authorization": f"Bearer rhs_bad{i}"}).status_code
            for i in range(12)
        ]
        assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}, codes
        refused = client.get("/v1/datasets", headers={"Authorization": "Bearer rhs_bad"})
        assert 1 <= int(refused.headers["Retry-After"]) <= 3
        # The same address with a valid key waits too; another address is unaffected.
        assert client.get("/v1/datasets", headers={"Authorization": owner}).status_code == 429
        assert other.get("/v1/datasets", headers={"Authorization": owner}).status_code == 200
        assert other.get("/v1/datasets").status_code == 401  # no key: not counted
