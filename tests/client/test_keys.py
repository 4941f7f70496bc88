"""rhosynth.client's key methods (issue 27 §1) against the real API of the test stack."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rhosynth import errors
from rhosynth.client import Client
from tests.client.conftest import PEOPLE_CSV, PEOPLE_SCHEMA, Clients
from tests.conftest import Tenant


def test_an_admin_client_manages_the_tenants_keys(clients: Clients, tenant: Tenant) -> None:
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    other = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "other", budget_rho="1")
    with Client(clients.url, tenant.stack.create_key(tenant.name, "admin")) as admin:
        created = admin.create_key("portal analyst", "analyst", datasets=[dataset])
        assert created.key not in repr(created)
        assert created.datasets == [dataset.id] and created.role == "analyst"
        listed = {k.id: k for k in admin.list_keys()}
        assert created.id in listed and not hasattr(listed[created.id], "key")
        assert admin.get_key(created) == listed[created.id]

        with Client(clients.url, created.key) as analyst:
            assert [d.id for d in analyst.datasets()] == [dataset.id]
            with pytest.raises(errors.NotFound):
                analyst.dataset(other)

        expiry = datetime.now(UTC) + timedelta(days=1)
        expiring = admin.set_key_expiry(created, expiry)
        assert expiring.expires_at == expiry
        assert admin.set_key_expiry(created, None).expires_at is None

        successor = admin.rotate_key(created, overlap_seconds=0)
        assert successor.id != created.id and successor.datasets == [dataset.id]
        with Client(clients.url, created.key) as retired, pytest.raises(errors.Unauthorized):
            retired.datasets()
        revoked = admin.revoke_key(successor)
        assert revoked.revoked_at is not None
        assert admin.revoke_key(successor) == revoked  # revoking again changes nothing
        with Client(clients.url, successor.key) as gone, pytest.raises(errors.Unauthorized):
            gone.datasets()
    with pytest.raises(errors.Forbidden, match="admin key"):
        clients.owner.list_keys()


def test_an_admin_client_lets_owners_create_analyst_keys(clients: Clients, tenant: Tenant) -> None:
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    with Client(clients.url, tenant.stack.create_key(tenant.name, "admin")) as admin:
        assert admin.get_key_policy().owners_create_analyst_keys is False
        with pytest.raises(errors.Forbidden, match="owners_create_analyst_keys"):
            clients.owner.create_key("partner", "analyst", datasets=[dataset])
        policy = admin.set_key_policy(owners_create_analyst_keys=True)
        assert policy.owners_create_analyst_keys is True
        assert admin.get_key_policy() == policy
        created = clients.owner.create_key("partner", "analyst", datasets=[dataset])
        assert created.datasets == [dataset.id]
        assert [k.id for k in clients.owner.list_keys()] == [created.id]
        with pytest.raises(errors.Forbidden):
            clients.owner.create_key("boss", "owner", datasets=[dataset])
        with pytest.raises(errors.Forbidden):
            clients.owner.set_key_policy(owners_create_analyst_keys=False)
        assert clients.owner.revoke_key(created).revoked_at is not None
        admin.set_key_policy(owners_create_analyst_keys=False)
        assert admin.get_key_policy().owners_create_analyst_keys is False
