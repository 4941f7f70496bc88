"""Alembic environment: runs revisions against the URL rhosynth's settings resolve to."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from app.config import get_settings
from app.db.registry import Base
from app.db.session import get_engine

target_metadata = Base.metadata


def _url() -> str:
    configured = context.config.attributes.get("database_url")
    if configured:
        return str(configured)
    return get_settings().sqlalchemy_url


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = get_engine(_url())
    with engine.connect() as connection:
        _run(connection)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
