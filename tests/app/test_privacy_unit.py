"""Privacy per person (issue 28 §1) over HTTP on a real stack: a table with several rows per
person is uploaded with a privacy unit and k = 1 and k = 5, released, and checked for the
ledger's charges (the truncation count as its own entry beside the job's ρ), the noise scale
(σ at k = 5 is 5× σ at k = 1 for the same ρ: sensitivity 5) and the unit's absence from every
artefact (synthetic CSV and Parquet, reports, measurements, model, dataset JSON, ledger,
console page)."""

from __future__ import annotations

import io
import json
import math
import random
import uuid
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests.conftest import Tenant
from tests.console.support import sign_in
from tests.support.api import create_dataset, submit, upload
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack

PEOPLE = 150
UNIT = "person_id"


def _unit(i: int) -> str:
    # Appears nowhere but in the unit column; '~' is in no base64 image nor any number.
    return f"~u{i:04d}~"


def _table(rows_per_person: Any) -> bytes:
    rng = random.Random(28)
    rows = []
    for i in range(PEOPLE):
        for _ in range(rows_per_person(rng)):
            rows.append(
                {
                    UNIT: _unit(i),
                    "age": str(rng.randint(18, 90)),
                    "city": rng.choice(["Lyon", "Paris", "Nantes"]),
                    "tier": rng.choice(["a", "b"]),
                }
            )
    rng.shuffle(rows)
    buffer = io.StringIO()
    pd.DataFrame(rows).to_csv(buffer, index=False)
    return buffer.getvalue().encode()


def _schema(max_rows: int | None) -> str:
    schema: dict[str, Any] = {
        "columns": [
            {"name": UNIT, "type": "categorical", "categories": {"discover": True, "max": 50}},
            {"name": "age", "type": "numeric", "min": 0, "max": 100, "bins": 5},
            {"name": "city", "type": "categorical", "categories": ["Lyon", "Paris", "Nantes"]},
            {"name": "tier", "type": "categorical", "categories": ["a", "b"]},
        ]
    }
    if max_rows is not None:
        schema["privacy_unit"] = {"column": UNIT, "max_rows": max_rows}
    return json.dumps(schema)


def _run(stack: Stack, job_id: str) -> None:
    from app.db.session import get_session_factory
    from app.jobs import execution, owner_tier

    settings = stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    claim = execution.claim_and_charge(factory, settings, uuid.UUID(job_id))
    assert claim is not None
    assert execution._run_attempt(factory, settings, claim).status == "succeeded"
    assert owner_tier.build_owner_tier(settings, uuid.UUID(job_id)) == "built"


def _release(stack: Stack, tenant: Tenant, dataset_id: str) -> str:
    response = submit(tenant.analyst, dataset_id, rho="0.5", method="independent", seed=7)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["id"]
    _run(stack, job_id)
    return job_id


def _artefacts(stack: Stack, tenant: Tenant, dataset_id: str, job_id: str) -> dict[str, str]:
    """Every artefact an analyst or the owner can read, as text."""
    owner, analyst = tenant.owner, tenant.analyst
    out: dict[str, str] = {}
    for who, client in (("analyst", analyst), ("owner", owner)):
        out[f"dataset ({who})"] = client.get(f"/v1/datasets/{dataset_id}").text
        out[f"job ({who})"] = client.get(f"/v1/jobs/{job_id}").text
    out["ledger"] = owner.get(f"/v1/datasets/{dataset_id}/ledger").text
    out["csv"] = analyst.get(f"/v1/jobs/{job_id}/output").text
    parquet = analyst.get(f"/v1/jobs/{job_id}/output", params={"format": "parquet"})
    assert parquet.status_code == 200, parquet.text
    table = pq.read_table(io.BytesIO(parquet.content))
    out["parquet"] = (
        table.to_pandas().to_csv() + json.dumps(table.schema.names) + str(table.schema.metadata)
    )
    out["parquet bytes"] = parquet.content.decode("latin-1")
    for tier, client in (("release", analyst), ("owner", owner)):
        for fmt in ("json", "html"):
            page = client.get(f"/v1/jobs/{job_id}/report", params={"tier": tier, "format": fmt})
            assert page.status_code == 200, (tier, fmt, page.text[:300])
            out[f"report {tier} {fmt}"] = page.text
    out["measurements"] = analyst.get(f"/v1/jobs/{job_id}/measurements").text
    model = analyst.get(f"/v1/jobs/{job_id}/model")
    assert model.status_code == 200
    out["model"] = model.content.decode("latin-1")
    owner_key = tenant.owner.headers["Authorization"].removeprefix("Bearer ")
    console = sign_in(stack, owner_key)
    try:
        for path in (f"/console/datasets/{dataset_id}", f"/console/jobs/{job_id}"):
            page = console.http.get(path)
            assert page.status_code == 200, page.text[:300]
            out[f"console {path}"] = page.text
    finally:
        console.close()
    return out


def _measurements(client: httpx.Client, job_id: str) -> dict[str, dict[str, Any]]:
    body = client.get(f"/v1/jobs/{job_id}/measurements").json()
    return {"/".join(m["attributes"]): m for m in body["measurements"]}


def test_per_person_release_charges_scales_noise_and_leaks_no_unit(
    api_stack: Stack, tenant: Tenant
) -> None:
    data = _table(lambda rng: rng.randint(1, 12))
    assert data.count(b"\n") - 1 > 5 * PEOPLE  # several rows per person
    runs: dict[int, tuple[str, str]] = {}
    for k in (1, 5):
        dataset = create_dataset(
            tenant.owner, data, _schema(k), budget_rho="10", name=f"per person k={k}"
        )
        # No preview leaks the unit either; it states k and the noise the run will draw.
        preview = tenant.analyst.post(
            f"/v1/datasets/{dataset['id']}/jobs",
            params={"dry_run": "true"},
            json={"method": "independent", "budget": {"rho": "0.5"}},
        )
        assert preview.status_code == 200, preview.text
        assert preview.json()["privacy_unit"] == f"per person, at most {k} row" + (
            "s" if k > 1 else ""
        )
        assert {n["sensitivity"] for n in preview.json()["first_noise"]} == {float(k)}
        runs[k] = dataset["id"], _release(api_stack, tenant, dataset["id"])

    sigmas = {k: _measurements(tenant.analyst, job)["age"]["sigma"] for k, (_, job) in runs.items()}
    for k, (dataset_id, job_id) in runs.items():
        # The ledger: grant, the truncation count (a hundredth of ρ, its own entry, no job),
        # then the job's reserve and spend of exactly the ρ asked for.
        ledger = tenant.owner.get(f"/v1/datasets/{dataset_id}/ledger").json()
        assert ledger["privacy"] == f"per person, at most {k} row" + ("s" if k > 1 else "")
        kinds = [e["kind"] for e in ledger["items"]]
        assert kinds == ["grant", "discover", "reserve", "spend"], kinds
        truncation = ledger["items"][1]
        assert (Fraction(truncation["rho"]), truncation["job_id"]) == (Fraction(1, 10), None)
        assert truncation["detail"]["mechanism"] == "dp_truncation_count"
        assert truncation["detail"]["max_rows"] == k
        assert Fraction(ledger["items"][3]["rho"]) == Fraction(1, 2)
        assert_reconciled(api_stack, dataset_id)
        budget = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()["budget"]
        assert Fraction(budget["spent_rho"]) == Fraction(6, 10)

        # The noise: every measurement is charged its unit-level ρ, and σ² = k²/(2ρ_i).
        for m in _measurements(tenant.analyst, job_id).values():
            sensitivity2 = 2 * float(Fraction(m["rho"])) * m["sigma"] ** 2
            assert math.isclose(sensitivity2, k * k, rel_tol=1e-9), (k, m)
        job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
        assert (job["privacy_unit"], job["unit_max_rows"]) == (
            f"per person, at most {k} row" + ("s" if k > 1 else ""),
            k,
        )

        # The unit appears in no artefact; its column's name only where the owner reads it.
        texts = _artefacts(api_stack, tenant, dataset_id, job_id)
        for name, text in texts.items():
            assert "~u0" not in text, name
            if name not in ("dataset (owner)", f"console /console/datasets/{dataset_id}"):
                assert UNIT not in text, name
        owner_view = json.loads(texts["dataset (owner)"])
        assert owner_view["privacy_unit"]["column"] == UNIT
        del owner_view["privacy_unit"]["column"]
        assert UNIT not in json.dumps(owner_view)
        analyst_view = json.loads(texts["dataset (analyst)"])
        assert analyst_view["privacy_unit"]["column"] is None
        assert analyst_view["dropped_columns"] == []
        assert [c["name"] for c in analyst_view["columns"]] == ["age", "city", "tier"]
        # Truncation: exact figures for the owner, the DP count for everyone.
        exact = owner_view["privacy_unit"]["truncation"]
        assert exact["exact_units"] == PEOPLE
        assert analyst_view["privacy_unit"]["truncation"]["exact_rows_removed"] is None
        assert owner_view["n_rows"] == data.count(b"\n") - 1 - exact["exact_rows_removed"]
        assert (exact["exact_rows_removed"] > 0) == (k < 12)
        assert f"at most {k} row" in texts["report release html"]
        assert "rows removed by truncation (exact, owner only)" in texts["report owner html"]
        assert "exact, owner only" not in texts["report release html"]

    # Same ρ, sensitivity 5 instead of 1: σ five times larger (exactly, up to float rounding).
    assert math.isclose(sigmas[5], 5 * sigmas[1], rel_tol=1e-9)


def test_a_row_without_a_unit_is_dropped_and_an_all_missing_unit_is_refused(
    api_stack: Stack, tenant: Tenant
) -> None:
    rows = "person_id,age,city,tier\n,30,Lyon,a\n~u0001~,40,Paris,b\nNA,50,Lyon,a\n"
    dataset = create_dataset(tenant.owner, rows.encode(), _schema(2), budget_rho="1")
    shown = tenant.owner.get(f"/v1/datasets/{dataset['id']}").json()
    assert shown["n_rows"] == 1
    assert shown["privacy_unit"]["truncation"]["exact_rows_without_unit"] == 2
    response = upload(tenant.owner, b"person_id,age,city,tier\n,30,Lyon,a\n", _schema(1))
    assert response.status_code == 422
    assert response.json()["detail"] == "no row has a privacy unit: every row was dropped"


def test_the_draft_suggests_the_unit_beside_a_schema_that_stays_row_level(
    api_stack: Stack, tenant: Tenant
) -> None:
    data = _table(lambda rng: rng.randint(1, 3)).replace(b"person_id", b"customer_id", 1)
    response = tenant.owner.post("/v1/schema-drafts", files={"file": ("raw.csv", data, "text/csv")})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["privacy_unit"]["column"] == "customer_id"
    assert body["privacy_unit"]["max_rows"] == 1
    assert "privacy_unit" not in body["schema"]
    assert "~u0" not in response.text
    # Accepting the suggestion is one key: the schema then uploads per person.
    schema = {**body["schema"], "privacy_unit": {"column": "customer_id", "max_rows": 3}}
    dataset = create_dataset(
        tenant.owner, data, json.dumps(schema), budget_rho="5", budget_delta="0.000001"
    )
    assert dataset["privacy"] == "per person, at most 3 rows"
    assert dataset["privacy_unit"]["truncation"]["exact_rows_removed"] == 0


def test_the_migration_refuses_to_downgrade_past_a_per_person_dataset(tmp_path: Path) -> None:
    """Code before revision 0016 knows no privacy unit and would release a per-person dataset
    per row (a k-fold weaker guarantee): the downgrade refuses while one exists."""
    from alembic import command
    from alembic.config import Config
    from fastapi.testclient import TestClient

    import migrations
    from app.auth.service import create_key
    from app.db.session import get_session_factory, transaction
    from app.main import create_app
    from tests.support import services

    with services.migrated_settings("sqlite", tmp_path, "unit-downgrade") as settings:
        with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
            owner = create_key(session, settings.secret_key_bytes(), "t", "owner", "o").key
        config = Config()
        config.set_main_option("script_location", str(Path(migrations.__file__).parent))
        config.attributes["database_url"] = settings.sqlalchemy_url
        with TestClient(create_app(settings)) as client:
            client.headers["Authorization"] = f"Bearer {owner}"
            row_level = json.loads(_schema(None))
            row_level["columns"][0] = {"name": UNIT, "type": "ignore"}
            create_dataset(client, _table(lambda rng: 1), json.dumps(row_level))
            command.downgrade(config, "0015_owner_keys")  # row-level datasets only: allowed
            command.upgrade(config, "head")
            create_dataset(client, _table(lambda rng: 2), _schema(2))
        with pytest.raises(RuntimeError, match="privacy unit"):
            command.downgrade(config, "0015_owner_keys")
