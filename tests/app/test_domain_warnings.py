"""Domain warnings over HTTP: an upload with a suspicious declared or DP-learned domain answers 201
with ``warnings``, GET and the list return them to owner and analyst keys alike, a sensible upload
has none; and the migration that stores them upgrades a database holding datasets (PostgreSQL and
SQLite), which then show ``[]``.

False-failure rate below 1e-5: the all-"other" column is 2,000 distinct values, each released
with probability at most its δ = 1e-9 (2e-6 in all); the small-budget column's two values have
1,000 rows each against a threshold of about 340 with σ ≈ 71 (a miss is a 9σ event).
"""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from app.config import Settings
from app.datasets.models import Dataset
from tests.conftest import Tenant
from tests.support import services
from tests.support.api import create_dataset

ROWS = 2_000


def _table() -> bytes:
    frame = pd.DataFrame(
        {
            "code": [f"C-{i:05d}" for i in range(ROWS)],  # every value distinct
            "city": ["Lyon", "Paris"] * (ROWS // 2),
            "income": [i % 30 for i in range(ROWS)],
            "score": [i % 100 for i in range(ROWS)],
        }
    )
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode()


SUSPICIOUS: dict[str, Any] = {
    "columns": [
        {"name": "code", "type": "categorical", "other": "Other",
         "categories": {"discover": True, "max": 50, "delta": 1e-9}},
        {"name": "city", "type": "categorical", "other": "Other",
         "categories": {"discover": True, "max": 5, "rho": 0.0001}},
        {"name": "income", "type": "numeric", "bins": [0, 10, 20, 30, 1000000000]},
        {"name": "score", "type": "numeric", "bins": [0, 100]},
    ]
}  # fmt: skip


def _by_code(body: dict[str, Any]) -> dict[tuple[str, str | None], str]:
    return {(w["code"], w["column"]): w["message"] for w in body["warnings"]}


def test_suspicious_domains_answer_201_with_warnings_for_both_roles(tenant: Tenant) -> None:
    created = create_dataset(
        tenant.owner, _table(), json.dumps(SUSPICIOUS), budget_rho="1", budget_delta="0.000001"
    )
    found = _by_code(created)
    assert list(found) == [
        ("all_other", "code"),
        ("small_discovery_budget", "city"),
        ("wide_end_bin", "income"),
        ("one_bin", "score"),
    ]
    assert found[("all_other", "code")].startswith(
        "column 'code' has no category: every value becomes 'Other'"
    )
    assert "a category needs a noisy count of about" in found[("small_discovery_budget", "city")]
    assert found[("wide_end_bin", "income")] == (
        "column 'income': its last bin [30, 1e9] is 1e8× wider than the median bin: "
        "declare a tighter max or more bins"
    )
    # No raw value in any message (the codes are the data; none was released).
    assert "C-0" not in json.dumps(created["warnings"])
    by_column = {c["name"]: c for c in created["columns"]}
    assert by_column["code"]["categories"] == [] and by_column["code"]["discovered"]

    for client in (tenant.owner, tenant.analyst):
        shown = client.get(f"/v1/datasets/{created['id']}")
        assert shown.status_code == 200
        assert shown.json()["warnings"] == created["warnings"]
        listed = client.get("/v1/datasets").json()["items"]
        (item,) = [d for d in listed if d["id"] == created["id"]]
        assert item["warnings"] == created["warnings"]


def test_a_small_budget_is_warned_and_a_sensible_upload_is_not(
    tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    small = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="0.001")
    (warning,) = small["warnings"]
    assert (warning["code"], warning["column"]) == ("small_budget", None)
    assert warning["message"].startswith("the dataset's budget ρ = 0.001 is only ε ≈ 0.18")
    sensible = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    assert sensible["warnings"] == []
    assert tenant.analyst.get(f"/v1/datasets/{sensible['id']}").json()["warnings"] == []


# ------------------------------------------------------------------ the migration


def _alembic(url: str) -> Any:
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = url
    return config


@pytest.mark.usefixtures("_services")
@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_upgrade_from_the_previous_head_gives_existing_datasets_no_warnings(
    dialect: str, tmp_path: Path
) -> None:
    from alembic import command

    from app.db.session import dispose_engines

    name = f"rhosynth_test_warnings_{uuid.uuid4().hex[:8]}"
    if dialect == "postgresql":
        url = services.create_database(name).replace("postgresql://", "postgresql+psycopg://")
    else:
        url = Settings(home=tmp_path).sqlalchemy_url
    config = _alembic(url)
    engine = create_engine(url)
    try:
        command.upgrade(config, "0006_console_sessions")
        ids = {key: uuid.uuid4() for key in ("tenant", "key", "dataset")}

        def bind(value: uuid.UUID) -> str:
            return str(value) if dialect == "postgresql" else value.hex

        now = "2026-01-01 00:00:00+00:00"
        with engine.begin() as c:
            c.execute(
                text("INSERT INTO tenants (id, name, created_at) VALUES (:id, 't', :at)"),
                {"id": bind(ids["tenant"]), "at": now},
            )
            c.execute(
                text(
                    "INSERT INTO api_keys (id, tenant_id, name, role, key_hash, prefix, "
                    "created_at) VALUES (:id, :t, 'k', 'owner', :h, 'rhs_', :at)"
                ),
                {"id": bind(ids["key"]), "t": bind(ids["tenant"]), "h": "0" * 64, "at": now},
            )
            c.execute(
                text(
                    "INSERT INTO datasets (id, tenant_id, name, schema, n_rows, n_columns, "
                    "created_by, created_at) VALUES (:id, :t, 'd', '{}', 1, 1, :k, :at)"
                ),
                {
                    "id": bind(ids["dataset"]),
                    "t": bind(ids["tenant"]),
                    "k": bind(ids["key"]),
                    "at": now,
                },
            )
        command.upgrade(config, "head")
        with Session(engine) as session:
            dataset = session.get(Dataset, ids["dataset"])
            assert dataset is not None and dataset.warnings == []
            # New rows store what they are given.
            dataset.warnings = [{"code": "one_bin", "column": "x", "message": "m"}]
            session.commit()
        with Session(engine) as session:
            stored = session.get(Dataset, ids["dataset"])
            assert stored is not None and stored.warnings[0]["code"] == "one_bin"
        command.downgrade(config, "0006_console_sessions")
        with engine.connect() as c:
            columns = c.execute(text("SELECT * FROM datasets")).keys()
            assert "warnings" not in columns
    finally:
        engine.dispose()
        dispose_engines()
        if dialect == "postgresql":
            services.drop_database(name)
