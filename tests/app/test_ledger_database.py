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


def _delta_units(engine: Engine, amount: str) -> object:
    # SQLite stores δ as integer 1e-18 units; PostgreSQL as NUMERIC.
    return int(Decimal(amount) * 10**18) if engine.dialect.name == "sqlite" else Decimal(amount)


def _amounts(engine: Engine) -> dict[str, object]:
    """Amounts the attacks below bind, in the dialect's units."""
    return {"one_delta": _delta_units(engine, "1"), "tiny_delta": _delta_units(engine, "1e-9")}


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
                "INSERT INTO budget_accounts (dataset_id, total_rho, spent_rho, reserved_rho, "
                "total_delta, updated_at) VALUES (:d, :total, :zero, :reserved, :total_delta, :at)"
            ),
            {
                "d": ids["dataset"],
                "total": _units(engine, "1"),
                "zero": _units(engine, "0"),
                "reserved": _units(engine, "0.5"),
                "total_delta": _delta_units(engine, "0.000001"),
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
                "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
                "VALUES (:d, 'grant', :rho, :delta, NULL, 'test', :at)"
            ),
            {
                "d": ids["dataset"],
                "rho": _units(engine, "1"),
                "delta": _delta_units(engine, "0.000001"),
                "at": now,
            },
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
    # The δ dimension (migration 0004).
    "spend δ past the total": (
        "UPDATE budget_accounts SET spent_delta = total_delta + :tiny_delta WHERE dataset_id = :d",
        ("delta_within_total",),
    ),
    "total δ of 1": (
        "UPDATE budget_accounts SET total_delta = :one_delta WHERE dataset_id = :d",
        ("total_delta_below_one",),
    ),
    "lower the total δ": (
        "UPDATE budget_accounts SET total_delta = spent_delta WHERE dataset_id = :d",
        ("never go down",),
    ),
    "refund spent δ": (
        "UPDATE budget_accounts SET spent_delta = spent_delta - :tiny_delta WHERE dataset_id = :d",
        ("never refunded", "never go down", "spent_delta_nonnegative"),
    ),
    "negative δ in an entry": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
        "SELECT :d, 'grant', rho, -delta, NULL, 'x', at FROM ledger_entries WHERE dataset_id = :d",
        ("delta_nonnegative",),
    ),
    "δ on a job entry": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
        "SELECT :d, 'reserve', rho, delta, (SELECT id FROM jobs WHERE dataset_id = :d), 'x', at "
        "FROM ledger_entries WHERE dataset_id = :d",
        ("delta_kinds",),
    ),
    "discover entry with a job": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
        "SELECT :d, 'discover', rho, delta, (SELECT id FROM jobs WHERE dataset_id = :d), 'x', at "
        "FROM ledger_entries WHERE dataset_id = :d",
        ("discover_without_job",),
    ),
    "discover entry charging nothing": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
        "SELECT :d, 'discover', rho - rho, delta - delta, NULL, 'x', at "
        "FROM ledger_entries WHERE dataset_id = :d",
        ("discover_charges",),
    ),
    "discover entry with negative ρ": (
        "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at) "
        "SELECT :d, 'discover', -rho, delta, NULL, 'x', at FROM ledger_entries WHERE dataset_id = :d",
        ("rho_nonnegative",),
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_database_rejects(engine: Engine, seeded: dict[str, str], attack: str) -> None:
    sql, reasons = ATTACKS[attack]
    with pytest.raises(DBAPIError) as raised, engine.begin() as connection:
        connection.execute(text(sql), {"d": seeded["dataset"], **_amounts(engine)})
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


def test_discover_entries_need_no_job_and_are_append_only(
    engine: Engine, seeded: dict[str, str]
) -> None:
    """A discover entry (ρ and δ spent at upload, no job) is accepted, spending exactly the whole
    δ is allowed, and the entry can then be neither edited nor deleted."""
    amounts = {
        "d": seeded["dataset"],
        "rho": _units(engine, "0.25"),
        "delta": _delta_units(engine, "0.000001"),
        "zero_rho": _units(engine, "0"),
        "at": "2026-01-01 00:00:00+00:00",
    }
    with engine.begin() as connection:
        connection.execute(
            text(
                "UPDATE budget_accounts SET spent_rho = spent_rho + :rho, "
                "spent_delta = spent_delta + :delta WHERE dataset_id = :d"
            ),
            amounts,
        )
        for rho in (":rho", ":zero_rho"):  # ρ and δ, or δ alone
            connection.execute(
                text(
                    "INSERT INTO ledger_entries (dataset_id, kind, rho, delta, job_id, actor, at, "
                    f"detail) VALUES (:d, 'discover', {rho}, :delta, NULL, 'x', :at, "
                    """'{"mechanism": "m"}')"""
                ),
                amounts,
            )
    for change in (
        "UPDATE ledger_entries SET delta = delta + delta WHERE kind = 'discover' AND dataset_id = :d",
        "UPDATE ledger_entries SET detail = NULL WHERE kind = 'discover' AND dataset_id = :d",
        "DELETE FROM ledger_entries WHERE kind = 'discover' AND dataset_id = :d",
    ):
        with pytest.raises(DBAPIError) as raised, engine.begin() as connection:
            connection.execute(text(change), amounts)
        assert "append-only" in str(raised.value.orig)
    with engine.begin() as connection:
        kinds = connection.execute(
            text("SELECT kind FROM ledger_entries WHERE dataset_id = :d ORDER BY id"), amounts
        ).scalars()
        assert list(kinds) == ["grant", "discover", "discover"]


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
