"""RELIABILITY.md test 3: direct SQL that tries to overspend or edit the ledger is rejected by the
database itself (constraints and triggers from the migration), on PostgreSQL and on SQLite."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError

from app.cli import run_migrations
from app.config import Settings
from tests.support import services
from tests.support.stack import Stack

pytestmark = pytest.mark.usefixtures("_services")


@pytest.fixture(params=["postgresql", "sqlite"])
def engine(request: pytest.FixtureRequest, api_stack: Stack, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "postgresql":
        url = api_stack.settings.sqlalchemy_url
    else:
        settings = Settings(home=tmp_path)
        run_migrations(settings)
        url = settings.sqlalchemy_url
    engine = create_engine(url)
    yield engine
    engine.dispose()


def _uuid(engine: Engine) -> str:
    value = uuid.uuid4()
    return str(value) if engine.dialect.name == "postgresql" else value.hex


def _units(engine: Engine, amount: str) -> object:
    # SQLite stores ρ as integer 1e-12 units; PostgreSQL as NUMERIC.
    return int(Decimal(amount) * 10**12) if engine.dialect.name == "sqlite" else Decimal(amount)


@pytest.fixture
def seeded(engine: Engine) -> dict[str, str]:
    ids = {name: _uuid(engine) for name in ("tenant", "key", "dataset", "job")}
    now = "2026-01-01 00:00:00+00:00"
    with engine.begin() as c:
        c.execute(
            text("INSERT INTO tenants (id, name, created_at) VALUES (:id, :name, :at)"),
            {"id": ids["tenant"], "name": f"t-{ids['tenant']}", "at": now},
        )
        c.execute(
            text(
                "INSERT INTO api_keys (id, tenant_id, name, role, key_hash, prefix, created_at) "
                "VALUES (:id, :t, 'k', 'owner', :h, 'rhs_', :at)"
            ),
            {"id": ids["key"], "t": ids["tenant"], "h": uuid.uuid4().hex * 2, "at": now},
        )
        c.execute(
            text(
                "INSERT INTO datasets (id, tenant_id, name, schema, n_rows, n_columns, created_by, created_at) "
                "VALUES (:id, :t, 'd', '{}', 1, 1, :k, :at)"
            ),
            {"id": ids["dataset"], "t": ids["tenant"], "k": ids["key"], "at": now},
        )
        c.execute(
            text(
                "INSERT INTO budget_accounts (dataset_id, total_rho, spent_rho, reserved_rho, updated_at) "
                "VALUES (:d, :total, :zero, :reserved, :at)"
            ),
            {
                "d": ids["dataset"],
                "total": _units(engine, "1"),
                "zero": _units(engine, "0"),
                "reserved": _units(engine, "0.5"),
                "at": now,
            },
        )
        c.execute(
            text(
                "INSERT INTO jobs (id, tenant_id, dataset_id, method, params, rho, status, attempt, "
                "cancel_requested, progress_fraction, progress_stage, submitted_by, created_at, charged_at, started_at) "
                "VALUES (:id, :t, :d, 'independent', '{}', :rho, 'running', 1, false, 0, 'x', :k, :at, :at, :at)"
            ),
            {
                "id": ids["job"],
                "t": ids["tenant"],
                "d": ids["dataset"],
                "rho": _units(engine, "0.5"),
                "k": ids["key"],
                "at": now,
            },
        )
        c.execute(
            text(
                "INSERT INTO ledger_entries (dataset_id, kind, rho, job_id, actor, at) "
                "VALUES (:d, 'grant', :rho, NULL, 'test', :at)"
            ),
            {"d": ids["dataset"], "rho": _units(engine, "1"), "at": now},
        )
    return ids


# attack -> (SQL, fragments of which one must appear in the database's error message)
ATTACKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "edit a ledger entry": (
        "UPDATE ledger_entries SET rho = rho + rho WHERE dataset_id = :d",
        ("append-only",),
    ),
    "delete a ledger entry": ("DELETE FROM ledger_entries WHERE dataset_id = :d", ("append-only",)),
    "reserve past the total": (
        "UPDATE budget_accounts SET reserved_rho = total_rho + total_rho WHERE dataset_id = :d",
        ("within_total",),
    ),
    "spend past the total": (
        "UPDATE budget_accounts SET spent_rho = total_rho WHERE dataset_id = :d",
        ("within_total",),
    ),
    "negative reservation": (
        "UPDATE budget_accounts SET reserved_rho = reserved_rho - total_rho WHERE dataset_id = :d",
        ("reserved_nonnegative",),
    ),
    "lower the total": (
        "UPDATE budget_accounts SET total_rho = reserved_rho WHERE dataset_id = :d",
        ("never go down",),
    ),
    "refund spent budget": (
        "UPDATE budget_accounts SET spent_rho = spent_rho - spent_rho - reserved_rho WHERE dataset_id = :d",
        ("never refunded", "never go down", "spent_nonnegative"),
    ),
    "delete the account": ("DELETE FROM budget_accounts WHERE dataset_id = :d", ("not allowed",)),
    "uncharge a job": (
        "UPDATE jobs SET charged_at = NULL WHERE dataset_id = :d",
        ("charged once",),
    ),
    "change a job's charge": ("UPDATE jobs SET rho = rho + rho WHERE dataset_id = :d", ("fixed",)),
    "zero-ρ ledger entry": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, job_id, actor, at) "
        "SELECT :d, 'grant', rho - rho, NULL, 'x', at FROM ledger_entries WHERE dataset_id = :d",
        ("rho_positive",),
    ),
    "unknown ledger kind": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, job_id, actor, at) "
        "SELECT :d, 'refund', rho, (SELECT id FROM jobs WHERE dataset_id = :d), 'x', at "
        "FROM ledger_entries WHERE dataset_id = :d",
        ("ck_ledger_entries_kind",),
    ),
    "job entry without a job": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, job_id, actor, at) "
        "SELECT :d, 'spend', rho, NULL, 'x', at FROM ledger_entries WHERE dataset_id = :d",
        ("job_for_job_entries",),
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_database_rejects(engine: Engine, seeded: dict[str, str], attack: str) -> None:
    sql, reasons = ATTACKS[attack]
    with pytest.raises(DBAPIError) as raised, engine.begin() as connection:
        connection.execute(text(sql), {"d": seeded["dataset"]})
    message = str(raised.value.orig)
    assert any(reason in message for reason in reasons), message


def test_truncate_is_rejected_on_postgresql(engine: Engine, seeded: dict[str, str]) -> None:
    if engine.dialect.name != "postgresql":
        pytest.skip("SQLite has no TRUNCATE")
    with pytest.raises(DBAPIError), engine.begin() as connection:
        connection.execute(text("TRUNCATE ledger_entries CASCADE"))


def test_allowed_changes_still_work(engine: Engine, seeded: dict[str, str]) -> None:
    """The guards reject only what breaks the invariants (the tests above could pass vacuously)."""
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE budget_accounts SET reserved_rho = reserved_rho - :r, spent_rho = spent_rho + :r "
                "WHERE dataset_id = :d"
            ),
            {"d": seeded["dataset"], "r": _units(engine, "0.5")},
        )
        connection.execute(
            text("UPDATE budget_accounts SET total_rho = total_rho + :r WHERE dataset_id = :d"),
            {"d": seeded["dataset"], "r": _units(engine, "1")},
        )
        connection.execute(
            text("UPDATE jobs SET status = 'succeeded', output_key = 'k' WHERE dataset_id = :d"),
            {"d": seeded["dataset"]},
        )


def test_alembic_metadata_matches_migrations(api_stack: Stack) -> None:
    """`alembic check`: the ORM models and the migrations describe the same schema."""
    from alembic import command
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = api_stack.settings.sqlalchemy_url
    command.check(config)


def test_downgrade_and_upgrade_roundtrip() -> None:
    from alembic import command
    from alembic.config import Config

    import migrations

    name = f"rhosynth_test_roundtrip_{uuid.uuid4().hex[:8]}"
    url = services.create_database(name)
    try:
        config = Config()
        config.set_main_option("script_location", str(Path(migrations.__file__).parent))
        config.attributes["database_url"] = url.replace("postgresql://", "postgresql+psycopg://")
        command.upgrade(config, "head")
        command.downgrade(config, "base")
        command.upgrade(config, "head")
    finally:
        from app.db.session import dispose_engines

        dispose_engines()
        services.drop_database(name)
