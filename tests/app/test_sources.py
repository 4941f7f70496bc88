"""Registered sources over HTTP (issue 29 §1-2): a dataset registered from the object store, an
allowed local path or PostgreSQL, its jobs counted by DuckDB (or Spark) in the worker, and a
source that changed after registration refused (files: at submission) or failed (PostgreSQL: by
the worker, charged).

The stack stores on moto's S3 server (tests/support/s3.py); the sources are objects in the same
bucket under another prefix, files under a temporary directory, and a table in a scratch database
of the local PostgreSQL server.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from tests.conftest import FIXTURES, Tenant, make_tenant
from tests.support import services
from tests.support.api import create_dataset, submit, upload, wait_for
from tests.support.s3 import S3Server
from tests.support.stack import Stack

SCHEMA = json.loads((FIXTURES / "people-schema.json").read_text())
PEOPLE = (FIXTURES / "people.csv").read_bytes()
ROWS = PEOPLE.count(b"\n") - 1


def _parquet(data: bytes = PEOPLE) -> bytes:
    table = pacsv.read_csv(io.BytesIO(data))
    sink = io.BytesIO()
    pq.write_table(table, sink)
    return sink.getvalue()


@pytest.fixture(scope="module")
def warehouse_admin() -> Iterator[str]:
    """A scratch PostgreSQL database holding the people table: the superuser's DSN (which the
    service refuses as a source connection), to change the table."""
    name = f"rhosynth_src_{uuid.uuid4().hex[:8]}"
    url = services.create_database(name)
    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE people (city text, age double precision, tier integer, income numeric)"
        )
        with (
            conn.cursor() as cursor,
            cursor.copy("COPY people FROM STDIN (FORMAT csv, HEADER)") as copy,
        ):
            copy.write(PEOPLE)
    try:
        yield dsn
    finally:
        services.drop_database(name)


@pytest.fixture(scope="module")
def warehouse(warehouse_admin: str) -> Iterator[str]:
    """The DSN of a role that may only read the people table (what operators configure)."""
    role = f"rhosynth_reader_{uuid.uuid4().hex[:8]}"
    server = warehouse_admin.rsplit("/", 1)[0]
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
    try:
        with psycopg.connect(warehouse_admin) as conn:
            conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
            conn.execute(f"GRANT SELECT ON people TO {role}")
        yield warehouse_admin.replace("postgresql://postgres@", f"postgresql://{role}@", 1)
        with psycopg.connect(warehouse_admin) as conn:
            conn.execute(f"REVOKE ALL ON people FROM {role}")
            conn.execute(f"REVOKE ALL ON SCHEMA public FROM {role}")
    finally:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {role}")


@pytest.fixture(scope="module")
def local_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("allowed-sources")


def _stack(
    name: str,
    tmp_path_factory: pytest.TempPathFactory,
    s3_server: S3Server,
    warehouse: str,
    local_root: Path,
    **extra: Any,
) -> Stack:
    workdir = tmp_path_factory.mktemp(name)
    return Stack.create(
        name,
        workdir,
        workers=1,
        reports_worker=False,
        source_local_roots=json.dumps([str(local_root)]),
        source_connections=json.dumps({"warehouse": warehouse}),
        **s3_server.settings(f"service-{uuid.uuid4().hex[:8]}"),
        **extra,
    )


@pytest.fixture(scope="module")
def stack(
    _services: None,
    s3_server: S3Server,
    warehouse: str,
    local_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    stack = _stack("sources", tmp_path_factory, s3_server, warehouse, local_root)
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture
def tenant(stack: Stack) -> Iterator[Tenant]:
    t = make_tenant(stack)
    yield t
    t.close()


def _put(s3: S3Server, key: str, body: bytes) -> str:
    s3.client().put_object(Bucket=s3.bucket, Key=key, Body=body)
    return f"s3://{s3.bucket}/{key}"


def _register(owner: Any, source: dict[str, Any], **extra: Any) -> Any:
    body = {"name": "registered", "source": source, "schema": SCHEMA, "budget_rho": "2", **extra}
    return owner.post("/v1/datasets/sources", json=body)


def _service_keys(stack: Stack, s3: S3Server, dataset_id: str) -> list[str]:
    prefix = str(stack.values["storage_url"]).removeprefix("s3://").partition("/")[2]
    return s3.keys(f"{prefix}/datasets/{dataset_id}/")


def _run(tenant: Tenant, dataset_id: str, method: str = "independent") -> dict[str, Any]:
    response = submit(tenant.analyst, dataset_id, rho="0.5", method=method, seed=3)
    assert response.status_code == 202, response.text
    return wait_for(tenant.analyst, response.json()["id"], timeout=180)


def _output_rows(tenant: Tenant, job: dict[str, Any]) -> list[list[str]]:
    out = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "csv"})
    assert out.status_code == 200
    return list(csv.reader(io.StringIO(out.text)))


def test_s3_parquet_end_to_end_and_change_refused(
    stack: Stack, s3_server: S3Server, tenant: Tenant
) -> None:
    uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.parquet", _parquet())
    created = _register(tenant.owner, {"kind": "s3", "uri": uri})
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert dataset["origin"] == "source" and dataset["n_rows"] == ROWS
    assert dataset["source"]["uri"] == uri and dataset["source"]["engine"] == "duckdb"
    assert dataset["source"]["keep_copy"] is False
    [entry] = dataset["source"]["fingerprint"]["files"]
    assert entry["size"] == len(_parquet()) and entry["etag"]
    # No copy kept in the service's storage.
    assert _service_keys(stack, s3_server, dataset["id"]) == []
    # An analyst sees that it is registered, never where it lives.
    seen = tenant.analyst.get(f"/v1/datasets/{dataset['id']}").json()
    assert seen["origin"] == "source" and seen["source"]["kind"] == "s3"
    assert seen["source"]["uri"] is None and seen["source"]["fingerprint"] is None
    assert uri not in json.dumps(seen)

    job = _run(tenant, dataset["id"])
    assert job["status"] == "succeeded", (job, stack.logs())
    rows = _output_rows(tenant, job)
    assert rows[0] == ["city", "age", "tier", "income"] and len(rows) > 1
    assert "counting a registered source with duckdb" in stack.logs()

    # A graphical method counts through the engine too (compressed codes pushed into DuckDB).
    graphical = _run(tenant, dataset["id"], method="mst")
    assert graphical["status"] == "succeeded", (graphical, stack.logs())
    assert len(_output_rows(tenant, graphical)) > 1

    # A method whose params need every row in memory: refused at submission, nothing reserved.
    before = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    refused = submit(
        tenant.analyst,
        dataset["id"],
        rho="0.1",
        method="dpcopula",
        params={"correlation": "mle"},
    )
    assert refused.status_code == 422 and "registered source" in refused.text
    assert "'mle'" in refused.text

    # The object is replaced: the next submission is refused before anything is reserved.
    _put(
        s3_server,
        uri.removeprefix(f"s3://{s3_server.bucket}/"),
        _parquet(PEOPLE + PEOPLE.splitlines(keepends=True)[-1]),
    )
    changed = submit(tenant.analyst, dataset["id"], rho="0.1")
    assert changed.status_code == 409, changed.text
    assert "changed since registration" in changed.json()["detail"]
    after = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    assert after == before


def test_partitioned_prefix_csv_and_cipher(
    stack: Stack, s3_server: S3Server, tenant: Tenant
) -> None:
    prefix = f"sources-{uuid.uuid4().hex[:8]}/people"
    lines = PEOPLE.splitlines(keepends=True)
    header, body = lines[0], lines[1:]
    half = len(body) // 2
    _put(s3_server, f"{prefix}/part=1/a.parquet", _parquet(header + b"".join(body[:half])))
    _put(s3_server, f"{prefix}/part=2/b.parquet", _parquet(header + b"".join(body[half:])))
    _put(s3_server, f"{prefix}/_SUCCESS", b"")
    _put(s3_server, f"{prefix}/_temporary/0/c.parquet", b"half-written")
    created = _register(tenant.owner, {"kind": "s3", "uri": f"s3://{s3_server.bucket}/{prefix}"})
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert dataset["n_rows"] == ROWS
    assert [f["key"] for f in dataset["source"]["fingerprint"]["files"]] == [
        f"{prefix}/part=1/a.parquet",
        f"{prefix}/part=2/b.parquet",
    ]
    job = _run(tenant, dataset["id"], method="cipher")
    assert job["status"] == "succeeded", (job, stack.logs())

    # A hive layout: the city column comes from the city=<value>/ prefixes (URL-encoded).
    hive = f"sources-{uuid.uuid4().hex[:8]}/hive"
    table = pacsv.read_csv(io.BytesIO(PEOPLE))
    cities = table.column("city").to_pylist()
    for city in sorted(set(cities)):
        part = table.take([i for i, c in enumerate(cities) if c == city]).drop_columns(["city"])
        sink = io.BytesIO()
        pq.write_table(part, sink)
        _put(s3_server, f"{hive}/city={quote(city, safe='')}/part-0.parquet", sink.getvalue())
    created = _register(tenant.owner, {"kind": "s3", "uri": f"s3://{s3_server.bucket}/{hive}"})
    assert created.status_code == 201, created.text
    assert created.json()["n_rows"] == ROWS

    csv_uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.csv", PEOPLE)
    created = _register(tenant.owner, {"kind": "s3", "uri": csv_uri, "format": "csv"})
    assert created.status_code == 201, created.text
    assert created.json()["n_rows"] == ROWS
    job = _run(tenant, created.json()["id"])
    assert job["status"] == "succeeded", (job, stack.logs())


def test_keep_copy_stores_the_codes_and_jobs_read_them(
    stack: Stack, s3_server: S3Server, tenant: Tenant
) -> None:
    key = f"sources-{uuid.uuid4().hex[:8]}/people.parquet"
    uri = _put(s3_server, key, _parquet())
    created = _register(tenant.owner, {"kind": "s3", "uri": uri}, keep_copy=True)
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert dataset["source"]["keep_copy"] is True and dataset["source"]["engine"] is None
    assert _service_keys(stack, s3_server, dataset["id"]) != []
    # The copy is what jobs read: the source may change or go, and any method runs.
    s3_server.client().delete_object(Bucket=s3_server.bucket, Key=key)
    job = _run(tenant, dataset["id"], method="mst")
    assert job["status"] == "succeeded", (job, stack.logs())
    # Deleting erases the copy; the record keeps its source description.
    deleted = tenant.owner.delete(f"/v1/datasets/{dataset['id']}")
    assert deleted.status_code == 200 and deleted.json()["source"]["uri"] == uri
    assert _service_keys(stack, s3_server, dataset["id"]) == []


def test_the_services_own_storage_is_not_a_source(
    stack: Stack, s3_server: S3Server, tenant: Tenant
) -> None:
    prefix = str(stack.values["storage_url"]).removeprefix("s3://").partition("/")[2]
    for uri in (
        f"s3://{s3_server.bucket}",
        f"s3://{s3_server.bucket}/",
        f"s3://{s3_server.bucket}/{prefix}",
        f"s3://{s3_server.bucket}/{prefix}/datasets/x/values.arrow",
    ):
        refused = _register(tenant.owner, {"kind": "s3", "uri": uri})
        assert refused.status_code == 403 and "own storage" in refused.text, uri
    # Another bucket than the service's is refused unless the operator lists it.
    other = _register(tenant.owner, {"kind": "s3", "uri": "s3://another-bucket/people.csv"})
    assert other.status_code == 403 and "another-bucket" in other.text


def test_a_row_outside_the_schema_is_refused_without_its_value(
    s3_server: S3Server, tenant: Tenant
) -> None:
    bad = PEOPLE + b"Atlantis,30,1,100\n"
    uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/bad.csv", bad)
    refused = _register(tenant.owner, {"kind": "s3", "uri": uri})
    assert refused.status_code == 422 and "city" in refused.text
    assert "Atlantis" not in refused.text


def test_local_paths_inside_and_outside_the_allowed_root(
    stack: Stack, tenant: Tenant, local_root: Path, tmp_path: Path
) -> None:
    inside = local_root / f"{uuid.uuid4().hex[:8]}.csv"
    inside.write_bytes(PEOPLE)
    created = _register(tenant.owner, {"kind": "local", "uri": str(inside)})
    assert created.status_code == 201, created.text
    dataset = created.json()
    job = _run(tenant, dataset["id"])
    assert job["status"] == "succeeded", (job, stack.logs())

    outside = tmp_path / "people.csv"
    outside.write_bytes(PEOPLE)
    refused = _register(tenant.owner, {"kind": "local", "uri": str(outside)})
    assert refused.status_code == 403, refused.text
    # A symbolic link inside the root that points outside it is outside.
    link = local_root / f"{uuid.uuid4().hex[:8]}.csv"
    link.symlink_to(outside)
    assert _register(tenant.owner, {"kind": "local", "uri": str(link)}).status_code == 403
    # A relative path, or one that climbs out: refused.
    climbing = str(local_root / ".." / outside.parent.name / "people.csv")
    assert _register(tenant.owner, {"kind": "local", "uri": climbing}).status_code == 403

    # The file is rewritten after registration: the next submission is refused.
    inside.write_bytes(PEOPLE + PEOPLE.splitlines(keepends=True)[1])
    changed = submit(tenant.analyst, dataset["id"], rho="0.1")
    assert changed.status_code == 409 and "changed since registration" in changed.text


def test_postgres_table_and_query(stack: Stack, tenant: Tenant, warehouse_admin: str) -> None:
    created = _register(
        tenant.owner, {"kind": "postgres", "connection": "warehouse", "table": "people"}
    )
    assert created.status_code == 201, created.text
    dataset = created.json()
    assert dataset["n_rows"] == ROWS
    assert dataset["source"]["fingerprint"]["rows"] == ROWS
    assert tenant.analyst.get(f"/v1/datasets/{dataset['id']}").json()["source"]["table"] is None
    job = _run(tenant, dataset["id"])
    assert job["status"] == "succeeded", (job, stack.logs())
    assert len(_output_rows(tenant, job)) > 1

    query = _register(
        tenant.owner,
        {
            "kind": "postgres",
            "connection": "warehouse",
            "query": "SELECT city, age, tier, income FROM people WHERE tier < 4",
        },
    )
    assert query.status_code == 201, query.text

    # Credentials are never in a request; unknown connections and writes are refused.
    unknown = _register(
        tenant.owner, {"kind": "postgres", "connection": "other", "table": "people"}
    )
    assert unknown.status_code == 422
    writing = _register(
        tenant.owner,
        {"kind": "postgres", "connection": "warehouse", "query": "SELECT 1; DROP TABLE people"},
    )
    assert writing.status_code == 422
    # A query that would close COPY's parentheses and add its own options is not one statement.
    for escape in (
        "SELECT * FROM people) TO STDOUT --",
        "SELECT * FROM people) TO PROGRAM 'true' --",
    ):
        refused = _register(
            tenant.owner, {"kind": "postgres", "connection": "warehouse", "query": escape}
        )
        assert refused.status_code == 422 and "not valid SQL" in refused.text, escape
    deleting = _register(
        tenant.owner,
        {"kind": "postgres", "connection": "warehouse", "query": "DELETE FROM people RETURNING *"},
    )
    assert deleting.status_code == 422, deleting.text

    # The table changes after registration: the job is accepted (its check needs the rows),
    # then fails with the public message; its ρ stays spent.
    with psycopg.connect(warehouse_admin) as conn:
        conn.execute("UPDATE people SET tier = (tier + 1) % 4 WHERE city = 'Lyon'")
    response = submit(tenant.analyst, dataset["id"], rho="0.5")
    assert response.status_code == 202, response.text
    failed = wait_for(tenant.analyst, response.json()["id"], timeout=180)
    assert failed["status"] == "failed"
    assert "changed since registration" in failed["error"]
    budget = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()["budget"]
    assert float(budget["spent_rho"]) == pytest.approx(1.0)


def test_discovery_on_a_source_is_charged(s3_server: S3Server, tenant: Tenant) -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["columns"][0] = {
        "name": "city",
        "type": "categorical",
        "other": "Other",
        "categories": {"discover": True, "max": 10},
    }
    uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.parquet", _parquet())
    created = _register(
        tenant.owner, {"kind": "s3", "uri": uri}, schema=schema, budget_delta="0.000001"
    )
    assert created.status_code == 201, created.text
    ledger = tenant.owner.get(f"/v1/datasets/{created.json()['id']}/ledger").json()
    kinds = [entry["kind"] for entry in ledger["items"]]
    assert kinds == ["grant", "discover"], kinds
    assert float(created.json()["budget"]["spent_rho"]) > 0
    # Charged exactly as an upload of the same table with the same schema is.
    uploaded = upload(
        tenant.owner, PEOPLE, json.dumps(schema), budget_rho="2", budget_delta="0.000001"
    )
    assert uploaded.status_code == 201, uploaded.text
    assert uploaded.json()["budget"] == created.json()["budget"]
    upload_ledger = tenant.owner.get(f"/v1/datasets/{uploaded.json()['id']}/ledger").json()

    def charges(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return [(e["kind"], e.get("rho"), e.get("delta")) for e in items]

    assert charges(upload_ledger["items"]) == charges(ledger["items"])


def test_privacy_unit_is_refused(s3_server: S3Server, tenant: Tenant) -> None:
    schema = json.loads(json.dumps(SCHEMA))
    schema["privacy_unit"] = {"column": "tier", "max_rows": 2}
    uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.parquet", _parquet())
    refused = _register(tenant.owner, {"kind": "s3", "uri": uri}, schema=schema)
    assert refused.status_code == 422 and "privacy unit" in refused.text


@pytest.fixture(scope="module")
def spark_stack(
    _services: None,
    s3_server: S3Server,
    warehouse: str,
    local_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    pytest.importorskip("pyspark")
    stack = _stack(
        "sources-spark",
        tmp_path_factory,
        s3_server,
        warehouse,
        local_root,
        source_engine="spark",
        spark_master="local[2]",
    )
    try:
        yield stack
    finally:
        stack.destroy()


def test_spark_mode(spark_stack: Stack, s3_server: S3Server, warehouse: str) -> None:
    tenant = make_tenant(spark_stack)
    try:
        uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.parquet", _parquet())
        created = _register(tenant.owner, {"kind": "s3", "uri": uri})
        assert created.status_code == 201, created.text
        assert created.json()["source"]["engine"] == "spark"
        job = _run(tenant, created.json()["id"])
        assert job["status"] == "succeeded", (job, spark_stack.logs())
        assert "counting a registered source with spark" in spark_stack.logs()
        assert len(_output_rows(tenant, job)) > 1

        table = _register(
            tenant.owner, {"kind": "postgres", "connection": "warehouse", "table": "people"}
        )
        assert table.status_code == 201, table.text
        job = _run(tenant, table.json()["id"], method="cipher")
        assert job["status"] == "succeeded", (job, spark_stack.logs())
    finally:
        tenant.close()


@pytest.mark.usefixtures("_services")
def test_migration_0017_constraints_and_downgrade(tmp_path: Path) -> None:
    """A source is described whole (kind, location, fingerprint, engine, or none of them); the
    downgrade refuses while a registered dataset without a copy exists."""
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    import migrations

    with services.migrated_settings("postgresql", tmp_path, "sources-migration") as settings:
        engine = sa.create_engine(settings.sqlalchemy_url)
        config = Config()
        config.set_main_option("script_location", str(Path(migrations.__file__).parent))
        config.attributes["database_url"] = settings.sqlalchemy_url
        try:
            from app.auth.service import create_key
            from app.db.session import get_session_factory, transaction

            with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
                created = create_key(session, settings.secret_key_bytes(), "t", "owner", "o")
            tenant, key = created.tenant_id, created.key_id
            insert = sa.text(
                "INSERT INTO datasets (id, tenant_id, name, schema, warnings, n_rows, n_columns, "
                "storage_key, created_by, created_at, source_kind, source, source_fingerprint, "
                "source_engine) VALUES (gen_random_uuid(), :t, 'd', '{}', '[]', 1, 1, NULL, :k, "
                "now(), :kind, :source, :fp, :engine)"
            )
            with (
                pytest.raises(sa.exc.IntegrityError, match="source_described"),
                engine.begin() as conn,
            ):
                conn.execute(
                    insert,
                    {
                        "t": tenant,
                        "k": key,
                        "kind": "s3",
                        "source": '{"kind": "s3"}',
                        "fp": None,
                        "engine": "duckdb",
                    },
                )
            with engine.begin() as conn:
                conn.execute(
                    insert,
                    {
                        "t": tenant,
                        "k": key,
                        "kind": "s3",
                        "source": '{"kind": "s3"}',
                        "fp": '{"files": []}',
                        "engine": "duckdb",
                    },
                )
            with pytest.raises(RuntimeError, match="registered dataset"):
                command.downgrade(config, "0016_privacy_unit")
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM datasets"))
            command.downgrade(config, "0016_privacy_unit")
            command.upgrade(config, "head")
        finally:
            engine.dispose()


def test_client_and_cli_register(stack: Stack, local_root: Path) -> None:
    from click.testing import CliRunner

    from app.cli import main
    from rhosynth.client import Client

    name = f"tenant-{uuid.uuid4().hex[:10]}"
    owner_key = stack.create_key(name, "owner")
    path = local_root / f"{uuid.uuid4().hex[:8]}.csv"
    path.write_bytes(PEOPLE)
    schema_file = FIXTURES / "people-schema.json"
    with Client(stack.base_url, owner_key) as client:
        dataset = client.register(
            {"kind": "local", "uri": str(path)}, schema_file, "from-client", 1
        )
    assert dataset.origin == "source" and dataset.source is not None
    assert dataset.source.uri == str(path) and dataset.n_rows == ROWS

    result = CliRunner().invoke(
        main,
        ["remote", "register", str(path), "--schema", str(schema_file), "--name", "cli",
         "--budget-rho", "1"],
        env={"RHOSYNTH_URL": stack.base_url, "RHOSYNTH_API_KEY": owner_key},
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["origin"] == "source" and out["source"]["kind"] == "local"
    refused = CliRunner().invoke(
        main,
        ["remote", "register", "/etc/passwd", "--schema", str(schema_file), "--name", "x",
         "--budget-rho", "1"],
        env={"RHOSYNTH_URL": stack.base_url, "RHOSYNTH_API_KEY": owner_key},
        catch_exceptions=False,
    )  # fmt: skip
    assert refused.exit_code == 1 and "outside the directories" in refused.stderr


def test_schema_drafts_on_sources(s3_server: S3Server, tenant: Tenant) -> None:
    uri = _put(s3_server, f"sources-{uuid.uuid4().hex[:8]}/people.parquet", _parquet())
    for source in (
        {"kind": "s3", "uri": uri},
        {"kind": "postgres", "connection": "warehouse", "table": "people"},
    ):
        draft = tenant.owner.post("/v1/schema-drafts/sources", json={"source": source})
        assert draft.status_code == 200, draft.text
        names = [column["name"] for column in draft.json()["schema"]["columns"]]
        assert names == ["city", "age", "tier", "income"], source
    # The draft is the owner's: analysts may not ask, and allowed roots still hold.
    assert (
        tenant.analyst.post(
            "/v1/schema-drafts/sources", json={"source": {"kind": "s3", "uri": uri}}
        ).status_code
        == 403
    )
    outside = tenant.owner.post(
        "/v1/schema-drafts/sources", json={"source": {"kind": "local", "uri": "/etc/passwd"}}
    )
    assert outside.status_code == 403
    # An owner key limited to some datasets may neither register nor draft (a draft with
    # show_values shows the source's raw values, data the key was not given).
    mine = create_dataset(tenant.owner, PEOPLE, json.dumps(SCHEMA))["id"]
    admin = tenant.stack.client(tenant.stack.create_key(tenant.name, "admin"))
    made = admin.post("/v1/keys", json={"name": "l", "role": "owner", "datasets": [mine]})
    assert made.status_code == 201, made.text
    with tenant.stack.client(made.json()["key"]) as limited:
        body = {"source": {"kind": "s3", "uri": uri}, "show_values": True}
        drafted = limited.post("/v1/schema-drafts/sources", json=body)
        assert drafted.status_code == 403, drafted.text
        assert "Lyon" not in drafted.text
        assert _register(limited, {"kind": "s3", "uri": uri}).status_code == 403
    admin.close()


def test_copies_into_scratch_are_bounded_before_they_fill_it(
    s3_server: S3Server, warehouse: str, tmp_path: Path
) -> None:
    """Objects and PostgreSQL rows are copied whole into the scratch space: over
    RHOSYNTH_MAX_UPLOAD_BYTES they are refused (413), objects before any byte is copied, and
    nothing stays in scratch."""
    from app.config import Settings
    from app.sources.reading import SourceRefused, SourceSpec, fetched
    from app.storage.local import LocalStorage

    prefix = f"bounded-{uuid.uuid4().hex[:8]}"
    _put(s3_server, f"{prefix}/a.csv", PEOPLE)
    _put(s3_server, f"{prefix}/b.csv", PEOPLE)
    storage = LocalStorage(tmp_path / "storage")
    for spec, bound in (
        # one object fits, the two do not
        (SourceSpec(kind="s3", uri=f"s3://{s3_server.bucket}/{prefix}/"), len(PEOPLE) + 1024),
        # the table's CSV (about the fixture's size) does not fit half of it
        (SourceSpec(kind="postgres", connection="warehouse", table="people"), len(PEOPLE) // 2),
    ):
        settings = Settings(
            home=tmp_path / "home",
            max_upload_bytes=bound,
            source_connections=json.dumps({"warehouse": warehouse}),
            **s3_server.settings("service"),
        )
        with pytest.raises(SourceRefused) as refused, fetched(spec, settings, storage):
            pass
        assert refused.value.status_code == 413, spec
        assert "RHOSYNTH_MAX_UPLOAD_BYTES" in refused.value.message
        scratch = storage.root / "tmp"
        assert not scratch.exists() or list(scratch.iterdir()) == []
    # Under the bound an object is read.
    roomy = Settings(
        home=tmp_path / "home",
        source_connections=json.dumps({"warehouse": warehouse}),
        **s3_server.settings("service"),
    )
    with fetched(
        SourceSpec(kind="s3", uri=f"s3://{s3_server.bucket}/{prefix}/a.csv"), roomy, storage
    ) as one:
        assert one.files[0].stat().st_size == len(PEOPLE)  # type: ignore[union-attr]


def test_a_role_that_may_touch_the_servers_files_is_refused(
    warehouse: str, warehouse_admin: str, tmp_path: Path
) -> None:
    """A read-only transaction does not stop a superuser's query reading the database server's
    files (pg_read_file): a connection with such a role is refused before any query runs; the
    reading role the operator should configure may not call it."""
    from app.config import Settings
    from app.sources.reading import SourceRefused, SourceSpec, fetched
    from app.storage.local import LocalStorage

    settings = Settings(
        home=tmp_path / "home",
        source_connections=json.dumps({"admin": warehouse_admin, "reader": warehouse}),
    )
    storage = LocalStorage(tmp_path / "storage")
    reading = "SELECT pg_read_file('/etc/hostname') AS city, 1 AS age, 1 AS tier, 1 AS income"
    for spec in (
        SourceSpec(kind="postgres", connection="admin", table="people"),
        SourceSpec(kind="postgres", connection="admin", query=reading),
    ):
        with (
            pytest.raises(SourceRefused, match="server's files") as refused,
            fetched(spec, settings, storage),
        ):
            pass
        assert refused.value.status_code == 422
    reader = SourceSpec(kind="postgres", connection="reader", query=reading)
    with pytest.raises(SourceRefused, match="may not read"), fetched(reader, settings, storage):
        pass
    with fetched(
        SourceSpec(kind="postgres", connection="reader", table="people"), settings, storage
    ) as read:
        assert read.fingerprint["rows"] == ROWS


def test_the_owners_query_cannot_lift_the_timeout_or_the_text_forms(
    warehouse: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query runs twice (checksum, then copy). One that sets statement_timeout to 0 on its
    first run (set_config, transaction-local) and sleeps on its second is still cut at the
    timeout; and the fingerprint does not depend on the process's time zone (PGTZ)."""
    from app.config import Settings
    from app.sources.reading import SourceRefused, SourceSpec, fetched
    from app.storage.local import LocalStorage

    settings = Settings(
        home=tmp_path / "home",
        source_connections=json.dumps({"warehouse": warehouse}),
        source_statement_timeout_seconds=1,
    )
    storage = LocalStorage(tmp_path / "storage")
    second_run_sleeps = (
        "WITH s AS MATERIALIZED (SELECT set_config('statement_timeout', '0', true) AS unset, "
        "pg_sleep(CASE WHEN current_setting('rhosynth_test.pass', true) = '1' THEN 3 ELSE 0 "
        "END) AS slept, set_config('rhosynth_test.pass', '1', true) AS marked) "
        "SELECT p.* FROM people p, s"
    )
    spec = SourceSpec(kind="postgres", connection="warehouse", query=second_run_sleeps)
    with pytest.raises(SourceRefused, match="statement timeout"), fetched(spec, settings, storage):
        pass

    stamped = SourceSpec(
        kind="postgres",
        connection="warehouse",
        query="SELECT p.*, TIMESTAMPTZ '2026-01-01 00:00:00+00' AS at FROM people p",
    )
    with fetched(stamped, settings, storage) as first:
        fingerprint = first.fingerprint
    monkeypatch.setenv("PGTZ", "Asia/Tokyo")
    with fetched(stamped, settings, storage, expected=fingerprint) as again:
        assert again.fingerprint == fingerprint
        assert b"2026-01-01 00:00:00+00" in again.files[0].read_bytes()  # type: ignore[union-attr]
