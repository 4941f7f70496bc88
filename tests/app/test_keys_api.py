"""Issue 27 §1: keys over the API. Admin keys create, list, rotate, revoke and expire the keys of
their tenant over ``/v1/keys``; a key can be limited to some datasets of its tenant.

Over HTTP against the app in this process (so the tests can move the clock that authentication
reads, ``app.auth.service.utcnow``), on PostgreSQL and on SQLite, each on a database of its own
built by the migrations."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlalchemy import text, update

from app.auth import service as auth_service
from app.auth.models import ApiKey, ApiKeyDataset
from app.auth.service import Principal, authenticate, create_key
from app.cli import main
from app.config import Settings, get_settings
from app.db.session import dispose_engines, get_session_factory, transaction
from app.main import create_app
from app.samples.models import Sample
from tests.support import services
from tests.support.clock import Clock
from tests.support.ledger import add_tableless_dataset

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    # Many deliberate 401s from one address: the throttle is tested elsewhere.
    with services.migrated_settings(
        request.param, tmp_path, "keys", auth_failure_burst=100_000
    ) as settings:
        yield settings


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(auth_service, "utcnow", clock)
    return clock


@dataclass
class Tenant:
    name: str
    admin: str
    owner: str
    owner_principal: Principal


def _cli_key(settings: Settings, tenant: str, role: str, name: str = "root") -> str:
    """A key made as ``rhosynth keys create`` makes it (the first admin comes from the CLI)."""
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return create_key(session, settings.secret_key_bytes(), tenant, role, name).key


def _tenant(settings: Settings) -> Tenant:
    name = f"tenant-{uuid.uuid4().hex[:8]}"
    admin = _cli_key(settings, name, "admin")
    owner = _cli_key(settings, name, "owner")
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        principal = authenticate(session, settings.secret_key_bytes(), owner)
    assert principal is not None
    return Tenant(name, admin, owner, principal)


@pytest.fixture
def tenant(settings: Settings) -> Tenant:
    return _tenant(settings)


def _dataset(settings: Settings, tenant: Tenant) -> str:
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        return str(add_tableless_dataset(session, tenant.owner_principal, Decimal(1)))


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _new_key(client: TestClient, admin: str, **body: Any) -> dict[str, Any]:
    response = client.post(
        "/v1/keys", json={"name": "k", "role": "analyst", **body}, headers=bearer(admin)
    )
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def _whoami(client: TestClient, key: str) -> int:
    return client.get("/v1/me", headers=bearer(key)).status_code


def test_only_admin_keys_manage_keys_and_admin_keys_do_nothing_else(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    target = _new_key(client, tenant.admin)["id"]
    analyst = _cli_key(settings, tenant.name, "analyst")
    calls: list[tuple[str, str, dict[str, Any] | None]] = [
        ("POST", "/v1/keys", {"name": "x", "role": "owner"}),
        ("GET", "/v1/keys", None),
        ("GET", f"/v1/keys/{target}", None),
        ("POST", f"/v1/keys/{target}/rotate", {}),
        ("POST", f"/v1/keys/{target}/revoke", None),
        ("PATCH", f"/v1/keys/{target}", {"expires_at": None}),
    ]
    for key in (tenant.owner, analyst):
        for method, path, body in calls:
            response = client.request(method, path, json=body, headers=bearer(key))
            assert response.status_code == 403, (method, path, response.text)
            detail = response.json()["detail"]
            if key == tenant.owner and method != "PATCH":
                # The owner is told of the switch that would let it manage its own keys.
                assert "owners_create_analyst_keys" in detail, (method, path, detail)
            else:
                assert detail == "this action needs an admin key"
    # Nothing changed: the target key still works, and no key was made.
    keys = client.get("/v1/keys", headers=bearer(tenant.admin)).json()["items"]
    assert [k["revoked_at"] for k in keys if k["id"] == target] == [None]
    assert len(keys) == 4  # the admin, the owner, the target and the analyst

    # An admin key manages keys and nothing else: no data, no budgets.
    dataset = _dataset(settings, tenant)
    assert client.get("/v1/datasets", headers=bearer(tenant.admin)).status_code == 403
    assert client.get(f"/v1/datasets/{dataset}", headers=bearer(tenant.admin)).status_code == 403
    owner_route = client.get(f"/v1/datasets/{dataset}/ledger", headers=bearer(tenant.admin))
    assert owner_route.status_code == 403
    job = client.post(
        f"/v1/datasets/{dataset}/jobs",
        json={"method": "independent", "budget": {"rho": "0.1"}},
        headers=bearer(tenant.owner),
    )
    assert job.status_code == 202, job.text
    # The polled job read (app/jobs/polled_read.py) refuses it as the route does.
    refused = client.get(f"/v1/jobs/{job.json()['id']}", headers=bearer(tenant.admin))
    assert refused.status_code == 403, refused.text


def test_the_secret_is_shown_once_and_the_new_key_works(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    created = _new_key(client, tenant.admin, name="portal analyst")
    secret = created["key"]
    assert secret.startswith("rhs_") and created["prefix"] == secret[:12]
    assert created["role"] == "analyst" and created["name"] == "portal analyst"
    assert created["revoked_at"] is None and created["retires_at"] is None
    assert created["expires_at"] is None and created["datasets"] == []

    listed = client.get("/v1/keys", headers=bearer(tenant.admin))
    one = client.get(f"/v1/keys/{created['id']}", headers=bearer(tenant.admin))
    assert listed.status_code == one.status_code == 200
    for response in (listed, one):
        assert secret not in response.text
        assert secret[12:20] not in response.text  # not even a piece beyond the prefix
        assert '"key"' not in response.text and "hash" not in response.text
    public = {k: v for k, v in created.items() if k != "key"}
    assert one.json() == public
    assert public in listed.json()["items"]

    me = client.get("/v1/me", headers=bearer(secret))
    assert me.status_code == 200
    assert me.json()["role"] == "analyst" and me.json()["key_id"] == created["id"]
    dataset = _dataset(settings, tenant)
    datasets = client.get("/v1/datasets", headers=bearer(secret)).json()["items"]
    assert [d["id"] for d in datasets] == [dataset]


def test_a_revoked_key_answers_401_at_once(client: TestClient, tenant: Tenant) -> None:
    created = _new_key(client, tenant.admin)
    assert _whoami(client, created["key"]) == 200
    revoked = client.post(f"/v1/keys/{created['id']}/revoke", headers=bearer(tenant.admin))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    assert _whoami(client, created["key"]) == 401
    again = client.post(f"/v1/keys/{created['id']}/revoke", headers=bearer(tenant.admin))
    assert again.status_code == 200 and again.json() == revoked.json()  # idempotent
    rotate = client.post(f"/v1/keys/{created['id']}/rotate", headers=bearer(tenant.admin))
    assert rotate.status_code == 409


def test_a_key_stops_at_its_expiry_and_the_expiry_can_be_cleared(
    client: TestClient, tenant: Tenant, clock: Clock
) -> None:
    expires = clock.now + timedelta(hours=1)
    created = _new_key(client, tenant.admin, expires_at=expires.isoformat())
    assert datetime.fromisoformat(created["expires_at"]) == expires
    assert _whoami(client, created["key"]) == 200
    clock.advance(3599)
    assert _whoami(client, created["key"]) == 200
    clock.advance(1)
    assert _whoami(client, created["key"]) == 401

    cleared = client.patch(
        f"/v1/keys/{created['id']}", json={"expires_at": None}, headers=bearer(tenant.admin)
    )
    assert cleared.status_code == 200 and cleared.json()["expires_at"] is None
    assert _whoami(client, created["key"]) == 200
    later = clock.now + timedelta(minutes=5)
    set_again = client.patch(
        f"/v1/keys/{created['id']}",
        json={"expires_at": later.isoformat()},
        headers=bearer(tenant.admin),
    )
    assert set_again.status_code == 200
    clock.advance(301)
    assert _whoami(client, created["key"]) == 401

    # An expiry that has passed, or without a time zone, is refused and changes nothing.
    for value in [(clock.now - timedelta(seconds=1)).isoformat(), "2030-01-01T00:00:00"]:
        refused = client.post(
            "/v1/keys",
            json={"name": "x", "role": "analyst", "expires_at": value},
            headers=bearer(tenant.admin),
        )
        assert refused.status_code == 422, refused.text
    assert len(client.get("/v1/keys", headers=bearer(tenant.admin)).json()["items"]) == 3


def test_rotation_keeps_the_old_secret_until_the_overlap_ends(
    client: TestClient, settings: Settings, tenant: Tenant, clock: Clock
) -> None:
    dataset = _dataset(settings, tenant)
    expires = clock.now + timedelta(days=30)
    old = _new_key(
        client, tenant.admin, name="etl", datasets=[dataset], expires_at=expires.isoformat()
    )
    rotated = client.post(
        f"/v1/keys/{old['id']}/rotate", json={"overlap_seconds": 600}, headers=bearer(tenant.admin)
    )
    assert rotated.status_code == 201, rotated.text
    new = rotated.json()
    assert new["id"] != old["id"] and new["key"] != old["key"]
    for field in ("name", "role", "datasets", "expires_at"):
        assert new[field] == old[field], field
    assert new["retires_at"] is None
    old_now = client.get(f"/v1/keys/{old['id']}", headers=bearer(tenant.admin)).json()
    assert datetime.fromisoformat(old_now["retires_at"]) == clock.now + timedelta(seconds=600)

    assert _whoami(client, old["key"]) == _whoami(client, new["key"]) == 200
    clock.advance(599)
    assert _whoami(client, old["key"]) == 200
    clock.advance(1)
    assert _whoami(client, old["key"]) == 401
    assert _whoami(client, new["key"]) == 200
    # The successor keeps the dataset limit.
    seen = client.get("/v1/datasets", headers=bearer(new["key"])).json()["items"]
    assert [d["id"] for d in seen] == [dataset]

    # A rotated key is not rotated twice; the overlap is at most 7 days.
    again = client.post(f"/v1/keys/{old['id']}/rotate", headers=bearer(tenant.admin))
    assert again.status_code == 409
    too_long = client.post(
        f"/v1/keys/{new['id']}/rotate",
        json={"overlap_seconds": 7 * 86400 + 1},
        headers=bearer(tenant.admin),
    )
    assert too_long.status_code == 422
    # Without a body: an hour.
    default = client.post(f"/v1/keys/{new['id']}/rotate", headers=bearer(tenant.admin))
    assert default.status_code == 201
    retiring = client.get(f"/v1/keys/{new['id']}", headers=bearer(tenant.admin)).json()
    assert datetime.fromisoformat(retiring["retires_at"]) == clock.now + timedelta(hours=1)


def test_the_last_active_admin_key_is_not_revoked(client: TestClient, tenant: Tenant) -> None:
    me = client.get("/v1/me", headers=bearer(tenant.admin)).json()["key_id"]
    refused = client.post(f"/v1/keys/{me}/revoke", headers=bearer(tenant.admin))
    assert refused.status_code == 409, refused.text
    assert "last active admin key" in refused.json()["detail"]
    assert _whoami(client, tenant.admin) == 200

    second = _new_key(client, tenant.admin, role="admin", name="second admin")
    assert client.get("/v1/keys", headers=bearer(second["key"])).status_code == 200
    # With another admin key, an admin key may revoke itself; it stops at once.
    own = client.post(f"/v1/keys/{me}/revoke", headers=bearer(tenant.admin))
    assert own.status_code == 200, own.text
    assert _whoami(client, tenant.admin) == 401
    last = client.post(f"/v1/keys/{second['id']}/revoke", headers=bearer(second["key"]))
    assert last.status_code == 409
    # A key being retired by a rotation does not count: its successor is the last one.
    third = client.post(f"/v1/keys/{second['id']}/rotate", headers=bearer(second["key"])).json()
    successor = client.post(f"/v1/keys/{third['id']}/revoke", headers=bearer(second["key"]))
    assert successor.status_code == 409, successor.text
    retiring = client.post(f"/v1/keys/{second['id']}/revoke", headers=bearer(third["key"]))
    assert retiring.status_code == 200, retiring.text
    assert _whoami(client, second["key"]) == 401 and _whoami(client, third["key"]) == 200
    # Admin keys see no dataset, so they cannot be limited to some.
    limited = client.post(
        "/v1/keys",
        json={"name": "x", "role": "admin", "datasets": [str(uuid.uuid4())]},
        headers=bearer(third["key"]),
    )
    assert limited.status_code == 422


def test_a_dataset_limited_key_sees_only_its_datasets_on_every_route(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    mine, other = _dataset(settings, tenant), _dataset(settings, tenant)
    owner = bearer(tenant.owner)
    job_body = {"method": "independent", "budget": {"rho": "0.1"}}
    other_job = client.post(f"/v1/datasets/{other}/jobs", json=job_body, headers=owner)
    assert other_job.status_code == 202, other_job.text
    other_job_id = other_job.json()["id"]
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        # A sample row of that job (failed: no output), to read by its own id.
        other_sample = uuid.uuid4()
        session.add(
            Sample(
                id=other_sample,
                tenant_id=tenant.owner_principal.tenant_id,
                dataset_id=uuid.UUID(other),
                job_id=uuid.UUID(other_job_id),
                rows=10,
                seed=1,
                status="failed",
                requested_by=tenant.owner_principal.key_id,
            )
        )

    analyst = bearer(_new_key(client, tenant.admin, datasets=[mine])["key"])
    listed = client.get("/v1/datasets", headers=analyst)
    assert [d["id"] for d in listed.json()["items"]] == [mine]
    assert client.get(f"/v1/datasets/{mine}", headers=analyst).status_code == 200
    my_job = client.post(f"/v1/datasets/{mine}/jobs", json=job_body, headers=analyst)
    assert my_job.status_code == 202, my_job.text
    assert client.get(f"/v1/jobs/{my_job.json()['id']}", headers=analyst).status_code == 200
    assert client.get(f"/v1/datasets/{mine}/jobs", headers=analyst).status_code == 200

    hidden = [
        ("GET", f"/v1/datasets/{other}", None),
        ("GET", f"/v1/datasets/{other}/jobs", None),
        ("POST", f"/v1/datasets/{other}/jobs", job_body),
        ("GET", f"/v1/jobs/{other_job_id}", None),  # the polled read (middleware)
        ("GET", f"/v1/jobs/{other_job_id.upper()}", None),  # the same job through the route
        ("POST", f"/v1/jobs/{other_job_id}/cancel", None),
        ("GET", f"/v1/jobs/{other_job_id}/output", None),
        ("GET", f"/v1/jobs/{other_job_id}/report", None),
        ("GET", f"/v1/jobs/{other_job_id}/samples", None),
        ("POST", f"/v1/jobs/{other_job_id}/samples", {"rows": 10}),
        ("GET", f"/v1/samples/{other_sample}", None),
        ("GET", f"/v1/samples/{other_sample}/output", None),
        ("DELETE", f"/v1/samples/{other_sample}", None),
    ]
    for method, path, body in hidden:
        response = client.request(method, path, json=body, headers=analyst)
        assert response.status_code == 404, (method, path, response.text)
    # The owner (not limited) still sees the job, which the limited key could not cancel, and
    # the sample it could not delete.
    assert client.get(f"/v1/jobs/{other_job_id}", headers=owner).json()["status"] == "queued"
    assert client.get(f"/v1/samples/{other_sample}", headers=owner).json()["status"] == "failed"

    # A dataset-limited owner key: the ledger and budget of other datasets are hidden too,
    # and it cannot create datasets (they would be outside its limits).
    limited_owner = bearer(_new_key(client, tenant.admin, role="owner", datasets=[mine])["key"])
    assert client.get(f"/v1/datasets/{mine}/ledger", headers=limited_owner).status_code == 200
    assert client.get(f"/v1/datasets/{other}/ledger", headers=limited_owner).status_code == 404
    grant = client.post(
        f"/v1/datasets/{other}/budget", json={"add_rho": "0.5"}, headers=limited_owner
    )
    assert grant.status_code == 404, grant.text
    assert client.delete(f"/v1/datasets/{other}", headers=limited_owner).status_code == 404
    upload = client.post(
        "/v1/datasets",
        files={"file": ("t.csv", b"a\n1\n", "text/csv")},
        data={"schema": '{"a": 2}', "name": "t", "budget_rho": "1"},
        headers=limited_owner,
    )
    assert upload.status_code == 403, upload.text
    # Nothing of the other dataset changed.
    ledger = client.get(f"/v1/datasets/{other}/ledger", headers=owner).json()
    assert ledger["budget"]["total_rho"] == "1"
    assert client.get(f"/v1/datasets/{other}", headers=owner).json()["deleted_at"] is None


def test_another_tenants_keys_and_datasets_are_not_found(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    theirs = _tenant(settings)
    their_key = _new_key(client, theirs.admin)
    their_dataset = _dataset(settings, theirs)
    admin = bearer(tenant.admin)
    for method, path, body in [
        ("GET", f"/v1/keys/{their_key['id']}", None),
        ("POST", f"/v1/keys/{their_key['id']}/rotate", {}),
        ("POST", f"/v1/keys/{their_key['id']}/revoke", None),
        ("PATCH", f"/v1/keys/{their_key['id']}", {"expires_at": None}),
        ("GET", f"/v1/keys/{uuid.uuid4()}", None),
    ]:
        response = client.request(method, path, json=body, headers=admin)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json() == {"detail": "key not found"}
    assert _whoami(client, their_key["key"]) == 200
    ids = {k["id"] for k in client.get("/v1/keys", headers=admin).json()["items"]}
    assert their_key["id"] not in ids and len(ids) == 2
    # Another tenant's dataset cannot be given to a key (the same answer as no dataset at all).
    for dataset in (their_dataset, str(uuid.uuid4())):
        response = client.post(
            "/v1/keys",
            json={"name": "x", "role": "analyst", "datasets": [dataset]},
            headers=admin,
        )
        assert response.status_code == 422
        assert response.json() == {"detail": f"no such dataset: {dataset}"}


def test_the_cli_creates_the_first_admin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("RHOSYNTH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RHOSYNTH_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        assert runner.invoke(main, ["migrate"]).exit_code == 0
        args = ["keys", "create", "--tenant", "acme", "--role", "admin", "--name", "root"]
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
        assert "admin key" in result.stderr
        key = result.stdout.strip()
        with TestClient(create_app(get_settings())) as client:
            listed = client.get("/v1/keys", headers=bearer(key))
            assert listed.status_code == 200, listed.text
            assert [(k["name"], k["role"]) for k in listed.json()["items"]] == [("root", "admin")]
    finally:
        get_settings.cache_clear()


def test_the_migration_downgrades_and_upgrades(settings: Settings) -> None:
    from alembic import command
    from alembic.config import Config

    import migrations

    tenant = _tenant(settings)
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = settings.sqlalchemy_url
    factory = get_session_factory(settings.sqlalchemy_url)
    analyst_key = _cli_key(settings, tenant.name, "analyst")
    with transaction(factory) as session:
        admin = authenticate(session, settings.secret_key_bytes(), tenant.admin)
        analyst = authenticate(session, settings.secret_key_bytes(), analyst_key)
        assert admin is not None and analyst is not None
    # Keys whose limits the old schema cannot hold: an expired one, one retired by a rotation
    # and one that expires later. Kept, they would work again, without their end.
    ending = [
        ("expires_at", datetime.now(UTC) - timedelta(days=1)),
        ("retires_at", datetime.now(UTC) - timedelta(hours=1)),
        ("expires_at", datetime.now(UTC) + timedelta(days=1)),
    ]
    ending_ids: list[uuid.UUID] = []
    for column, at in ending:
        key = _cli_key(settings, tenant.name, "owner", f"ends {column}")
        with transaction(factory) as session:
            found = authenticate(session, settings.secret_key_bytes(), key)
            assert found is not None
            ending_ids.append(found.key_id)
            session.execute(update(ApiKey).where(ApiKey.id == found.key_id).values({column: at}))
    with transaction(factory) as session:
        dataset = add_tableless_dataset(session, tenant.owner_principal, Decimal(1))
        session.add(ApiKeyDataset(key_id=analyst.key_id, dataset_id=dataset))
    # Down to 0014 first: the owner keys' columns go, the keys stay.
    client_app = TestClient(create_app(settings))
    with client_app as client:
        _allow_owners(client, tenant.admin, on=True)
        made = _new_key(client, tenant.owner, datasets=[str(dataset)])
    command.downgrade(config, "0014_quotas_approvals")
    dispose_engines()
    with transaction(factory) as session:
        columns = {
            "tenants": "owners_create_analyst_keys",
            "api_keys": "created_by",
        }
        for table, column in columns.items():
            with (
                pytest.raises(Exception, match=r"(?i)column|no such"),
                session.begin_nested(),
            ):
                session.execute(text(f"SELECT {column} FROM {table}"))
        rows = session.execute(text("SELECT id, revoked_at FROM api_keys")).all()
        kept = [row for row in rows if uuid.UUID(str(row.id)) == uuid.UUID(made["id"])]
        assert len(kept) == 1 and kept[0].revoked_at is None
    command.upgrade(config, "head")
    dispose_engines()
    with transaction(factory) as session:
        switch = session.execute(text("SELECT owners_create_analyst_keys FROM tenants")).scalars()
        assert not any(switch)  # back off: the server default
        assert (
            session.execute(
                text("SELECT count(*) FROM api_keys WHERE created_by IS NOT NULL")
            ).scalar_one()
            == 0
        )
    command.downgrade(config, "0010_job_queue_times")
    dispose_engines()
    with transaction(factory) as session:
        rows = session.execute(
            text("SELECT id, role, revoked_at IS NOT NULL AS revoked FROM api_keys")
        ).all()
        found = {uuid.UUID(str(row.id)): (row.role, bool(row.revoked)) for row in rows}
        # The admin key is kept (ledgers may name it) as a revoked analyst key; a dataset-limited
        # key, which would see every dataset of its tenant, and keys with an end (expiry,
        # retirement), which would work for ever, are revoked too.
        assert found == {
            admin.key_id: ("analyst", True),
            tenant.owner_principal.key_id: ("owner", False),
            analyst.key_id: ("analyst", True),
            uuid.UUID(made["id"]): ("analyst", True),
            **{key_id: ("owner", True) for key_id in ending_ids},
        }
    # The old CHECK constraint is back.
    with pytest.raises(Exception, match=r"(?i)check"), transaction(factory) as session:
        session.execute(text("UPDATE api_keys SET role = 'admin'"))
    command.upgrade(config, "head")
    dispose_engines()
    # At head again: admin keys can be made, and the columns and the table are back (empty).
    new_admin = _cli_key(settings, tenant.name, "admin", "after")
    with transaction(factory) as session:
        assert session.execute(text("SELECT count(*) FROM api_key_datasets")).scalar_one() == 0
        assert (
            session.execute(
                text(
                    "SELECT count(*) FROM api_keys WHERE expires_at IS NULL AND retires_at IS NULL"
                )
            ).scalar_one()
            == 8
        )
        assert authenticate(session, settings.secret_key_bytes(), new_admin) is not None
        assert authenticate(session, settings.secret_key_bytes(), tenant.admin) is None


def _allow_owners(client: TestClient, admin: str, *, on: bool) -> None:
    response = client.put(
        "/v1/keys/policy", json={"owners_create_analyst_keys": on}, headers=bearer(admin)
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"owners_create_analyst_keys": on}


def test_owners_create_analyst_keys_for_their_datasets_if_the_admin_allows_it(
    client: TestClient, settings: Settings, tenant: Tenant
) -> None:
    mine, other = _dataset(settings, tenant), _dataset(settings, tenant)
    owner, admin = bearer(tenant.owner), bearer(tenant.admin)
    analyst = _cli_key(settings, tenant.name, "analyst")
    wanted = {"name": "partner", "role": "analyst", "datasets": [mine]}

    # Off by default: the owner is refused, naming the switch; only admins read or set it.
    assert client.get("/v1/keys/policy", headers=admin).json() == {
        "owners_create_analyst_keys": False
    }
    refused = client.post("/v1/keys", json=wanted, headers=owner)
    assert refused.status_code == 403
    assert "owners_create_analyst_keys" in refused.json()["detail"]
    for key in (tenant.owner, analyst):
        assert client.get("/v1/keys/policy", headers=bearer(key)).status_code == 403
        put = client.put(
            "/v1/keys/policy", json={"owners_create_analyst_keys": True}, headers=bearer(key)
        )
        assert put.status_code == 403
    assert (
        client.get("/v1/keys/policy", headers=admin).json()["owners_create_analyst_keys"] is False
    )

    _allow_owners(client, tenant.admin, on=True)
    # Analyst keys still manage nothing.
    response = client.post("/v1/keys", json=wanted, headers=bearer(analyst))
    assert response.status_code == 403
    assert response.json() == {"detail": "this action needs an admin key"}

    made = _new_key(client, tenant.owner, **wanted)
    assert made["role"] == "analyst" and made["datasets"] == [mine] and made["key"]
    partner = bearer(made["key"])
    assert client.get(f"/v1/datasets/{mine}", headers=partner).status_code == 200
    assert client.get(f"/v1/datasets/{other}", headers=partner).status_code == 404
    listed = client.get("/v1/datasets", headers=partner).json()["items"]
    assert [d["id"] for d in listed] == [mine]
    # The secret is shown once: the key's read never carries it.
    read = client.get(f"/v1/keys/{made['id']}", headers=owner)
    assert read.status_code == 200 and "key" not in read.json()

    # Not an owner or admin key, not an unlimited key, not a dataset it cannot see.
    for role in ("owner", "admin"):
        response = client.post("/v1/keys", json={**wanted, "role": role}, headers=owner)
        assert response.status_code == 403, response.text
        assert response.json() == {"detail": "owner keys create analyst keys only"}
    unlimited = client.post("/v1/keys", json={**wanted, "datasets": []}, headers=owner)
    assert unlimited.status_code == 422, unlimited.text
    theirs = _tenant(settings)
    their_dataset = _dataset(settings, theirs)
    for dataset in (their_dataset, str(uuid.uuid4())):
        response = client.post("/v1/keys", json={**wanted, "datasets": [dataset]}, headers=owner)
        assert response.status_code == 422
        assert response.json() == {"detail": f"no such dataset: {dataset}"}
    # A dataset-limited owner key gives only the datasets it sees.
    limited_owner = bearer(_new_key(client, tenant.admin, role="owner", datasets=[mine])["key"])
    response = client.post("/v1/keys", json={**wanted, "datasets": [other]}, headers=limited_owner)
    assert response.status_code == 422
    assert response.json() == {"detail": f"no such dataset: {other}"}

    # The owner sees, rotates and revokes only the keys it created.
    admins_key = _new_key(client, tenant.admin, datasets=[mine])
    assert [k["id"] for k in client.get("/v1/keys", headers=owner).json()["items"]] == [made["id"]]
    for method, path in [
        ("GET", f"/v1/keys/{admins_key['id']}"),
        ("POST", f"/v1/keys/{admins_key['id']}/rotate"),
        ("POST", f"/v1/keys/{admins_key['id']}/revoke"),
        ("GET", f"/v1/keys/{tenant.owner_principal.key_id}"),
        ("POST", f"/v1/keys/{tenant.owner_principal.key_id}/revoke"),
    ]:
        response = client.request(method, path, headers=owner)
        assert response.status_code == 404, (method, path, response.text)
    assert _whoami(client, admins_key["key"]) == 200
    assert _whoami(client, tenant.owner) == 200
    # The expiry stays an admin's.
    patch = client.patch(f"/v1/keys/{made['id']}", json={"expires_at": None}, headers=owner)
    assert patch.status_code == 403
    rotated = client.post(f"/v1/keys/{made['id']}/rotate", json={}, headers=owner)
    assert rotated.status_code == 201, rotated.text
    successor = rotated.json()
    assert successor["datasets"] == [mine]
    ids = [k["id"] for k in client.get("/v1/keys", headers=owner).json()["items"]]
    assert ids == [made["id"], successor["id"]]
    revoked = client.post(f"/v1/keys/{successor['id']}/revoke", headers=owner)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert _whoami(client, successor["key"]) == 401

    # The admin still sees and manages every key, the owner's too.
    all_ids = {k["id"] for k in client.get("/v1/keys", headers=admin).json()["items"]}
    assert {made["id"], successor["id"], admins_key["id"]} <= all_ids

    # Audited: the policy change (the admin's) and the owner's key actions as the owner's.
    entries = [
        json.loads(line)
        for line in client.get("/v1/audit", headers=admin).text.splitlines()
        if line.strip()
    ]
    owner_actor = f"key:{tenant.owner_principal.key_id}"
    policy = [e for e in entries if e["action"] == "key.policy"]
    assert [(e["actor"], e["details"]) for e in policy] == [
        (f"key:{_key_id(client, tenant.admin)}", {"owners_create_analyst_keys": True})
    ]
    by_owner = [(e["action"], e["object_id"]) for e in entries if e["actor"] == owner_actor]
    assert by_owner[-3:] == [
        ("key.create", made["id"]),
        ("key.rotate", made["id"]),
        ("key.revoke", successor["id"]),
    ]

    # Switched off again: the owner's key routes answer 403, and its keys keep working.
    _allow_owners(client, tenant.admin, on=False)
    assert client.get("/v1/keys", headers=owner).status_code == 403
    assert client.post(f"/v1/keys/{made['id']}/revoke", headers=owner).status_code == 403
    assert _whoami(client, made["key"]) == 200


def _key_id(client: TestClient, key: str) -> str:
    key_id: str = client.get("/v1/me", headers=bearer(key)).json()["key_id"]
    return key_id


def test_the_console_keeps_admin_keys_to_admin_pages_and_ends_sessions_of_expired_keys(
    client: TestClient, tenant: Tenant, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.console import service as console_service
    from tests.console.support import post_login

    monkeypatch.setattr(console_service, "utcnow", clock)
    client.follow_redirects = False
    # Issue 27 §6: admin keys sign in, to the key, webhook and audit pages only.
    admin = post_login(client, tenant.admin)
    assert admin.status_code == 303, admin.text
    assert admin.headers["location"] == "/console/keys"
    assert client.get("/console/keys").status_code == 200
    refused = client.get("/console/datasets")
    assert refused.status_code == 403
    assert "admin keys manage keys only" in refused.text

    expiring = _new_key(
        client, tenant.admin, expires_at=(clock.now + timedelta(minutes=10)).isoformat()
    )
    signed_in = post_login(client, expiring["key"])
    assert signed_in.status_code == 303, signed_in.text
    assert client.get("/console/datasets").status_code == 200
    clock.advance(600)
    ended = client.get("/console/datasets")
    assert ended.status_code == 303 and ended.headers["location"].endswith("/console/login")


def test_a_key_change_and_another_audited_action_of_the_tenant_do_not_deadlock(
    settings: Settings, tenant: Tenant
) -> None:
    """A key change locks the tenant's row (lock_tenant_keys) and then the audit chain; an
    action that takes the chain's lock first then inserts its entry, whose foreign key to the
    tenant takes FOR KEY SHARE on that row. Under FOR UPDATE the insert waited for the key
    change, which waited for the chain's lock: a deadlock PostgreSQL broke by failing one."""
    if settings.embedded:
        pytest.skip("SQLite serialises writers")
    from app.audit import service as audit_service
    from app.auth import repository as auth_repository

    factory = get_session_factory(settings.sqlalchemy_url)
    key_change = factory()
    other_done = threading.Event()
    errors: list[BaseException] = []

    def other_action() -> None:
        try:
            with transaction(factory) as session:
                audit_service.record(
                    session, tenant.owner_principal, "job.cancel", "job", uuid.uuid4()
                )
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            other_done.set()

    try:
        auth_repository.lock_tenant_keys(key_change, tenant.owner_principal.tenant_id)
        thread = threading.Thread(target=other_action)
        thread.start()
        # The other action must not wait for the key change's tenant lock: only the key
        # change's own audit entry (below) would make it wait, on the chain's lock.
        finished = other_done.wait(timeout=30)
        audit_service.record(key_change, tenant.owner_principal, "key.revoke", "key", uuid.uuid4())
        key_change.commit()
    finally:
        key_change.close()
        thread.join()
    assert finished and not errors, errors
