"""Alembic revisions: the schema is built by these, never by ``create_all``."""
