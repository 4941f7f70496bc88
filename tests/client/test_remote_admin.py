"""``rhosynth remote`` for keys, quotas, approvals, webhooks and the audit trail (issue 27),
against the real API of the test stack (no worker: approved jobs stay queued)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from app.cli import main
from rhosynth.audit import verify_audit_chain
from tests.client.conftest import PEOPLE_CSV, PEOPLE_SCHEMA
from tests.conftest import Tenant


def _run(tenant: Tenant, key: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(
        main,
        ["remote", *args],
        env={"RHOSYNTH_URL": tenant.stack.base_url, "RHOSYNTH_API_KEY": key},
        catch_exceptions=False,
    )
    return result.exit_code, result.stdout, result.stderr


def _ok(tenant: Tenant, key: str, *args: str) -> Any:
    code, out, err = _run(tenant, key, *args)
    assert code == 0, err
    return json.loads(out) if out.strip() else None


def test_remote_keys_quotas_approvals_webhooks_and_audit(tenant: Tenant, tmp_path: Path) -> None:
    admin = tenant.stack.create_key(tenant.name, "admin", "root")

    # Keys: create an owner and an analyst, list, set and clear an expiry, rotate, revoke.
    owner = _ok(tenant, admin, "keys", "create", "olive", "--role", "owner")
    analyst = _ok(tenant, admin, "keys", "create", "ann")
    assert (owner["role"], analyst["role"]) == ("owner", "analyst")
    assert owner["key"] and analyst["key"]
    names = {k["name"] for k in _ok(tenant, admin, "keys", "list")}
    assert {"olive", "ann", "root"} <= names
    at = "2099-01-01T00:00:00+00:00"
    assert _ok(tenant, admin, "keys", "expire", analyst["id"], at)["expires_at"].startswith("2099")
    assert _ok(tenant, admin, "keys", "expire", analyst["id"])["expires_at"] is None
    code, _out, err = _run(tenant, admin, "keys", "expire", analyst["id"], "tomorrow")
    assert code == 2 and "ISO 8601" in err
    rotated = _ok(tenant, admin, "keys", "rotate", analyst["id"], "--overlap-seconds", "60")
    assert rotated["key"] != analyst["key"]
    spare = _ok(tenant, admin, "keys", "create", "spare")
    assert _ok(tenant, admin, "keys", "revoke", spare["id"])["revoked_at"] is not None
    # An owner key may not manage keys: the server's detail, exit status 1.
    code, _out, err = _run(tenant, owner["key"], "keys", "list")
    assert code == 1 and err

    # Webhooks: subscribe, list.
    hook = _ok(
        tenant,
        admin,
        "webhooks",
        "create",
        "http://127.0.0.1:9/hook",
        "--event",
        "approval.requested",
        "--event",
        "approval.decided",
    )
    assert hook["secret"]
    assert [h["id"] for h in _ok(tenant, admin, "webhooks", "list")] == [hook["id"]]

    # Quotas and the policy on an uploaded dataset.
    dataset = _ok(
        tenant,
        owner["key"],
        "upload",
        str(PEOPLE_CSV),
        "--schema",
        str(PEOPLE_SCHEMA),
        "--name",
        "people",
        "--budget-rho",
        "1",
    )
    ds = dataset["id"]
    analyst_key, analyst_id = rotated["key"], rotated["id"]
    quota = _ok(tenant, owner["key"], "quotas", "set", ds, "0.5", "--key", analyst_id)
    assert quota["granted_rho"] == "0.5"
    policy = _ok(tenant, owner["key"], "quotas", "policy", ds, "--approval-required")
    assert (policy["mode"], policy["approval_required"]) == ("shared", True)
    assert _ok(tenant, owner["key"], "quotas", "policy", ds)["approval_required"] is True
    bob = _ok(tenant, admin, "keys", "create", "bob")
    group = _ok(
        tenant, owner["key"], "quotas", "set", ds, "0.25", "--group", "team", "--member", bob["id"]
    )
    assert (group["group"], group["keys"]) == ("team", [bob["id"]])
    listed = _ok(tenant, owner["key"], "quotas", "list", ds)
    assert len(listed["items"]) == 2
    _ok(tenant, owner["key"], "quotas", "delete", ds, "--group", "team")
    assert len(_ok(tenant, owner["key"], "quotas", "list", ds)["items"]) == 1
    code, _out, err = _run(tenant, owner["key"], "quotas", "delete", ds)
    assert code == 2 and "--key or --group" in err

    # Approvals: two pending jobs; approve one, reject one.
    jobs = [
        _ok(tenant, analyst_key, "submit", ds, "independent", "--rho", "0.125") for _ in range(2)
    ]
    assert [j["status"] for j in jobs] == ["pending_approval"] * 2
    pending = _ok(tenant, owner["key"], "approvals", "list", ds)
    assert [p["job"]["id"] for p in pending] == [j["id"] for j in jobs]
    assert pending[0]["preview"]["rho"] == "0.125"
    assert _ok(tenant, owner["key"], "approvals", "approve", jobs[0]["id"])["status"] == "queued"
    rejected = _ok(
        tenant, owner["key"], "approvals", "reject", jobs[1]["id"], "--reason", "too wide"
    )
    assert (rejected["status"], rejected["decision_reason"]) == ("rejected", "too wide")
    assert _ok(tenant, owner["key"], "approvals", "list", ds) == []

    # Deliveries were written for the four approval events (the receiver is not there).
    deliveries = _ok(tenant, admin, "webhooks", "deliveries", hook["id"])
    assert (
        sorted(d["event_type"] for d in deliveries)
        == ["approval.decided"] * 2 + ["approval.requested"] * 2
    )
    replayed = _ok(tenant, admin, "webhooks", "replay", deliveries[0]["id"])
    assert replayed["id"] == deliveries[0]["id"] and replayed["status"] == "pending"
    _ok(tenant, admin, "webhooks", "delete", hook["id"])
    assert _ok(tenant, admin, "webhooks", "list") == []

    # The audit trail: JSON Lines verifies and holds the day's actions; CSV to a file.
    code, out, err = _run(tenant, admin, "audit", "export")
    assert code == 0, err
    entries = [json.loads(line) for line in out.splitlines()]
    verify_audit_chain(entries)
    actions = {e["action"] for e in entries}
    assert {
        "key.create",
        "key.rotate",
        "key.revoke",
        "key.expiry",
        "dataset.create",
        "quota.set",
        "quota.remove",
        "quota.policy",
        "job.submit",
        "job.approve",
        "job.reject",
    } <= actions
    since = entries[-1]["at"]
    later = _ok(tenant, admin, "audit", "export", "--since", since)
    assert later["seq"] == entries[-1]["seq"]
    target = tmp_path / "audit.csv"
    code, _out, err = _run(tenant, admin, "audit", "export", "--format", "csv", "-o", str(target))
    assert code == 0, err
    assert len(target.read_text().splitlines()) == len(entries) + 1
    code, out, _err = _run(tenant, admin, "audit", "export", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("tenant_id")
