"""Wire types of a registration (docs/sources.md)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api.types import DeltaIn, RhoIn


class SourceIn(BaseModel):
    """Where the table lives. Never credentials: a PostgreSQL source names a connection the
    operator configured (RHOSYNTH_SOURCE_CONNECTIONS)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["s3", "local", "postgres"]
    uri: str | None = Field(
        default=None,
        max_length=1000,
        description="s3://bucket/key (a file, or a prefix: every *.parquet / *.csv under it) "
        "or an absolute local path under a directory the operator allows",
    )
    format: Literal["parquet", "csv"] | None = Field(
        default=None, description="which files of a directory or prefix to read (default: both)"
    )
    connection: str | None = Field(default=None, max_length=200)
    table: str | None = Field(default=None, max_length=200, description="name or schema.name")
    query: str | None = Field(
        default=None, max_length=100_000, description="one SELECT, run in a read-only transaction"
    )


class RegisterRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(max_length=200)
    source: SourceIn
    schema_: dict[str, Any] = Field(
        alias="schema",
        description="the same schema as an upload's (columns to discover included)",
    )
    budget_rho: RhoIn
    budget_delta: DeltaIn = Decimal(0)
    discovery_rho: RhoIn | None = None
    keep_copy: bool = Field(
        default=False,
        description="store the encoded table as an upload does (jobs then read the copy); by "
        "default nothing is kept and each job reads the source again",
    )


class SourceOut(BaseModel):
    """A registered dataset's source. ``kind`` and ``keep_copy`` are shown to every key; where it
    lives (uri, connection, table, query) to owner keys only."""

    kind: Literal["s3", "local", "postgres"]
    keep_copy: bool
    engine: Literal["duckdb", "spark"] | None = Field(
        description="how its jobs count (null with a copy: as uploads)"
    )
    uri: str | None = None
    format: str | None = None
    connection: str | None = None
    table: str | None = None
    query: str | None = None
    fingerprint: dict[str, Any] | None = Field(
        default=None,
        description="what registration measured: per file key, size, modification time (and "
        "ETag); for PostgreSQL the row count and checksum (owner keys only)",
    )


class SourceDraftRequest(BaseModel):
    """A schema draft for a source: read from its head (the first file, or the first rows)."""

    model_config = ConfigDict(extra="forbid")

    source: SourceIn
    missing_values: list[str] | None = Field(default=None, max_length=100)
    show_values: bool = False
