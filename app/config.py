"""Service configuration: one pydantic-settings class, read from RHOSYNTH_* environment variables.

Two modes:

* **embedded** (no ``RHOSYNTH_DATABASE_URL``): SQLite and file storage under ``RHOSYNTH_HOME``
  (default ``./var``), the Celery broker on kombu's SQLAlchemy transport over a SQLite file in the
  same directory, and a secret key generated once into ``$RHOSYNTH_HOME/secret_key``. This is what
  ``make run`` uses; nothing but Python is needed.
* **production** (``RHOSYNTH_DATABASE_URL`` set, normally PostgreSQL): every location comes from
  the environment and ``RHOSYNTH_SECRET_KEY`` is required; there is no usable default secret.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

MIN_SECRET_KEY_LENGTH = 32
# Celery's soft and hard time limits, above the job's own deadline (RHOSYNTH_JOB_TIME_LIMIT_SECONDS)
JOB_SOFT_GRACE_SECONDS = 30
JOB_HARD_GRACE_SECONDS = 60


class Settings(BaseSettings):
    """Everything the API, the workers and the CLI need to know about their environment."""

    model_config = SettingsConfigDict(env_prefix="RHOSYNTH_", extra="ignore")

    home: Path = Path("var")
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    database_url: str | None = None
    broker_url: str | None = None
    storage_dir: Path | None = None
    # An S3-compatible object store instead of a local directory (docs/operations.md,
    # "Multi-host deployment"): s3://bucket or s3://bucket/prefix. Credentials come from the
    # standard AWS chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance roles).
    storage_url: str | None = Field(
        default=None, pattern=r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?$"
    )
    s3_endpoint_url: str | None = Field(default=None, pattern=r"^https?://\S+$")
    s3_region: str | None = None
    s3_addressing_style: Literal["auto", "path", "virtual"] = "auto"
    # With an object store: the local directory for files being written before upload,
    # spooled uploads and downloaded copies (default: $RHOSYNTH_STORAGE_DIR/tmp if set, else the
    # system's temporary directory). Each host has its own; it is never shared.
    scratch_dir: Path | None = None
    secret_key: SecretStr | None = None
    queue: str = "rhosynth"
    # The queue of owner-tier builds (app/jobs/owner_tier.py), consumed only by
    # `rhosynth worker --reports` so that they never hold a job worker's slot; default
    # "<queue>-reports".
    reports_queue: str | None = None
    # Webhook deliveries (app/webhooks/delivery.py): their own queue, consumed only by
    # `rhosynth worker --webhooks`, so a slow receiver never holds a job worker's slot; default
    # "<queue>-webhooks".
    webhooks_queue: str | None = None
    # Hosts webhook URLs may point at (exact names or IP literals, comma-separated); empty: any.
    webhook_allowed_hosts: list[str] = Field(default_factory=list)
    # Connect and read timeout of one delivery, each.
    webhook_timeout_seconds: float = Field(default=5.0, gt=0, le=30)

    # Upload limits. The byte cap is enforced while the body streams in, before parsing.
    max_upload_bytes: int = Field(default=1024**3, ge=1024)
    max_columns: int = Field(default=1000, ge=1)
    max_rows: int = Field(default=100_000_000, ge=1)
    max_cell_bytes: int = Field(default=1024, ge=16)
    # Rows of an upload whose schema names a privacy unit: the unit column is held in memory
    # for truncation, about 250 bytes a row at most (app/datasets/units.py; docs/operations.md).
    max_unit_rows: int = Field(default=2_000_000, ge=1)
    max_schema_bytes: int = Field(default=1024 * 1024, ge=1024)
    # The origin browsers use to reach the console (e.g. https://rhosynth.example.org) when a
    # TLS proxy sits in front: console POSTs must come from it, and its scheme decides the
    # session cookie's Secure flag. Unset: the request's own scheme and Host.
    public_origin: str | None = Field(default=None, pattern=r"^https?://[^/\s]+$")
    # Schema drafts read the whole file in the API process (CPU, off the event loop): a smaller
    # cap than uploads. The local `rhosynth schema draft` has none.
    max_draft_bytes: int = Field(default=256 * 1024**2, ge=1024)
    # A draft reads the file's first rows up to this many bytes of decoded values (a bounded
    # sample: a 1.7 MB Parquet file of repeated long values decodes into gigabytes).
    draft_sample_bytes: int = Field(default=64 * 1024**2, ge=1024)
    max_json_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    max_domain_size: int = Field(default=100_000, ge=2)
    # Codes of all columns together: every numeric bin is a stored edge and every category a
    # string, so this bounds the memory of a parsed schema (and of the dataset's description).
    max_total_domain_size: int = Field(default=1_000_000, ge=2)

    # Limits on releases.
    max_output_rows: int = Field(default=100_000_000, ge=1)
    # A release of at least this many requested rows, from a method with a re-samplable model,
    # is drawn in chunks and stored as a partitioned Parquet dataset (part-00000.parquet, …;
    # app/jobs/partitioned_output.py, engine/tables/partitioned.py) instead of in memory.
    partitioned_output_rows: int = Field(default=5_000_000, ge=1)
    # Rows per chunk (and per part), and chunks drawn and written at once (threads).
    output_chunk_rows: int = Field(default=2_000_000, ge=1)
    output_workers: int = Field(default=2, ge=1, le=64)
    # Rows of a partitioned release kept (a uniform subsample) for its reports.
    report_sample_rows: int = Field(default=1_000_000, ge=1)
    # Derived samples (free re-sampling) queued or running per tenant at once.
    tenant_max_live_samples: int = Field(default=20, ge=1)
    # Rows a tenant's samples may hold at once (queued, running or stored): a new sample past it
    # is refused until samples are deleted or expire (issue 24 §5: 26 × 1 M-row samples wrote
    # 438 MB in 16 s, with no bound).
    tenant_sample_rows_quota: int = Field(default=20_000_000, ge=1)
    # A succeeded sample's output is deleted this long after it finished (status `expired`).
    sample_retention_days: float = Field(default=30.0, gt=0)
    # ≤ 9e6: SQLite keeps ρ as int64 counts of 1e-12 (app.db.types.MAX_STORABLE_RHO).
    max_budget_rho: int = Field(default=1_000_000, ge=1, le=9_000_000)

    # Job execution and recovery. A claimed job holds a lease that its worker renews every
    # heartbeat; a lease that runs out means the worker died and the job is recovered.
    job_lease_seconds: float = Field(default=60.0, gt=0)
    job_heartbeat_seconds: float = Field(default=10.0, gt=0)
    job_max_attempts: int = Field(default=3, ge=1)
    # Per-attempt limits, enforced by the worker (app/jobs/execution.py, workers/limits.py). A job
    # that reaches one ends failed with a fixed text, stays charged and is not retried. The time
    # limit is a wall-clock deadline set at each claim; Celery's soft and hard limits sit
    # JOB_SOFT_GRACE_SECONDS and JOB_HARD_GRACE_SECONDS above it as a backstop.
    job_time_limit_seconds: int = Field(default=3600, ge=10)
    # The address space a job may add to its pool process (RLIMIT_AS). `rhosynth worker` refuses
    # to start where its job processes cannot each have this within 0.8 × the machine's physical
    # memory (app/cli.py). At submission, a job whose public
    # resource estimate (engine Mechanism.estimate_resources) exceeds it is refused, and outputs
    # sized by the noisy row count are capped at the rows that fit.
    job_memory_limit_mb: int = Field(default=3072, ge=256)
    queued_job_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    # A job waiting for an owner's approval expires (its reservation released) after this long.
    approval_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    requeue_after_seconds: float = Field(default=300.0, gt=0)
    recovery_interval_seconds: float = Field(default=30.0, gt=0)
    worker_concurrency: int = Field(default=1, ge=1)
    # Fair claiming: at most this many running jobs per tenant (unset: no cap, fair order only).
    tenant_max_running: int | None = Field(default=None, ge=1)
    storage_sweep_interval_seconds: float = Field(default=3600.0, gt=0)

    # Database connections per process. The API never opens more than db_pool_size (a burst of
    # requests queues for a pooled connection for up to db_pool_timeout_seconds, then gets 503),
    # so N API processes need N * db_pool_size of PostgreSQL's max_connections.
    db_pool_size: int = Field(default=10, ge=1, le=1000)
    db_pool_timeout_seconds: float = Field(default=30.0, gt=0)
    # PostgreSQL refusing a connection for want of slots (SQLSTATE 53300) or while starting up
    # (57P03) is retried with backoff for this long before the request fails with 503.
    db_connect_retry_seconds: float = Field(default=5.0, ge=0)

    # Sending a job's message: a broker that does not answer within this many seconds is given
    # up on (the job stays queued; the recovery loop sends the message again later).
    broker_publish_timeout_seconds: float = Field(default=5.0, gt=0, le=300)
    # Threads serving the API's blocking work (sync routes, authentication): AnyIO's default.
    api_threads: int = Field(default=40, ge=2, le=1000)
    # API processes of `rhosynth run` (embedded mode; `rhosynth serve` takes --workers). A
    # request's CPU work runs under one process's GIL, so one process serves a burst on one
    # core: 200 simultaneous job reads on 2 cores, p99 1.35-1.63 s with one process against
    # 1.06-1.32 s with two, side by side (docs/benchmarks.md, "Bursts of simultaneous
    # requests"). Each process has its own upload memory budget and failed-key throttle.
    embedded_api_processes: int = Field(default=2, ge=1, le=64)
    # GET /v1/jobs/{id} answered by app/jobs/polled_read.py below the framework (issue 24 §4);
    # off, the FastAPI route answers it (the same bytes; for before/after benchmarks).
    polled_job_read: bool = True

    # Memory the API process may give to uploads and drafts reading at once: each may add up to
    # 512 MiB (docs/operations.md, "Upload memory"), so the default lets two run; one more is
    # answered 503 with Retry-After.
    upload_memory_budget_mb: int = Field(default=1024, ge=512)
    # Failed key checks per client address (app/auth/throttle.py): a burst, then this many per
    # second; past it, 429 with Retry-After before the key is checked.
    auth_failure_burst: int = Field(default=30, ge=1)
    auth_failures_per_second: float = Field(default=1.0, gt=0)

    # Registered sources (issue 29 §1; docs/sources.md). Directories under which an owner may
    # register a local file or directory (a JSON list); empty: none.
    source_local_roots: list[Path] = Field(default_factory=list)
    # Buckets (a JSON list) an owner may register s3:// sources from, read with the object
    # store's endpoint, region and credentials (RHOSYNTH_S3_*); empty: the service's bucket only.
    source_s3_buckets: list[str] = Field(default_factory=list)
    # Named PostgreSQL connections, a JSON object {"name": "postgresql://..."}: the credentials
    # live here, never in a request. Use a role that may only read what owners may register.
    source_connections: dict[str, SecretStr] = Field(default_factory=dict)
    # statement_timeout of each query on a registered PostgreSQL source.
    source_statement_timeout_seconds: int = Field(default=600, ge=1)
    # How jobs on a registered dataset without a copy count: DuckDB in the worker (out of core,
    # bounded by memory_limit and threads) or Spark (a master URL or sc:// Spark Connect).
    source_engine: Literal["duckdb", "spark"] = "duckdb"
    duckdb_memory_limit: str = Field(default="1GB", pattern=r"^[0-9]+(\.[0-9]+)?\s*[KMGT]i?B$")
    duckdb_threads: int = Field(default=1, ge=1, le=256)
    spark_master: str = "local[2]"
    # The driver JVM's heap (spark.driver.memory; local[…] executors run in it). A Spark-mode job
    # raises its memory limit by this plus SPARK_JVM_OVERHEAD_BYTES while it runs (the JVM is
    # started by the first such job of a worker process and inherits that limit).
    spark_driver_memory: str = Field(default="1g", pattern=r"^[0-9]+[kmgt]$")

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("source_local_roots", "source_s3_buckets", "source_connections", mode="before")
    @classmethod
    def _json_text(cls, value: object) -> object:
        # Environment variables arrive as JSON already parsed; the same text passed to the
        # constructor (tests, the CLI) is parsed here.
        if isinstance(value, str):
            return json.loads(value) if value.strip() else None
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.job_heartbeat_seconds >= self.job_lease_seconds:
            raise ValueError(
                "RHOSYNTH_JOB_HEARTBEAT_SECONDS must be below RHOSYNTH_JOB_LEASE_SECONDS"
            )
        if self.job_time_limit_seconds <= self.job_lease_seconds:
            # A lost attempt counts as having reached its deadline when its last lease ran past
            # it (app/jobs/repository.py); that needs a limit longer than one lease.
            raise ValueError(
                "RHOSYNTH_JOB_TIME_LIMIT_SECONDS must be above RHOSYNTH_JOB_LEASE_SECONDS"
            )
        if not self.embedded:
            if self.secret_key is None:
                raise ValueError(
                    "RHOSYNTH_SECRET_KEY is required when RHOSYNTH_DATABASE_URL is set "
                    "(production mode); generate one with: python -c "
                    "'import secrets; print(secrets.token_urlsafe(48))'"
                )
            if len(self.secret_key.get_secret_value()) < MIN_SECRET_KEY_LENGTH:
                raise ValueError(
                    f"RHOSYNTH_SECRET_KEY must be at least {MIN_SECRET_KEY_LENGTH} characters"
                )
            if self.broker_url is None:
                raise ValueError("RHOSYNTH_BROKER_URL is required in production mode")
            if self.storage_dir is None and self.storage_url is None:
                raise ValueError(
                    "RHOSYNTH_STORAGE_DIR or RHOSYNTH_STORAGE_URL is required in production mode"
                )
        return self

    @model_validator(mode="after")
    def _check_storage_url(self) -> Settings:
        if self.storage_url is not None:
            prefix = self.storage_url.removeprefix("s3://").partition("/")[2].strip("/")
            if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
                raise ValueError("RHOSYNTH_STORAGE_URL: the prefix must be a plain relative path")
        return self

    @property
    def owner_tier_queue(self) -> str:
        """The owner-tier builds' queue: ``RHOSYNTH_REPORTS_QUEUE``, else ``<queue>-reports``."""
        return self.reports_queue or f"{self.queue}-reports"

    @property
    def webhook_queue(self) -> str:
        """The webhook deliveries' queue: ``RHOSYNTH_WEBHOOKS_QUEUE``, else ``<queue>-webhooks``."""
        return self.webhooks_queue or f"{self.queue}-webhooks"

    @property
    def embedded(self) -> bool:
        """True when running on the embedded SQLite defaults (``make run``)."""
        return self.database_url is None

    @property
    def resolved_home(self) -> Path:
        return self.home.expanduser().resolve()

    @property
    def embedded_database(self) -> Path:
        """The embedded mode's SQLite file (unused when ``RHOSYNTH_DATABASE_URL`` is set)."""
        return self.resolved_home / "rhosynth.sqlite"

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url is None:
            return f"sqlite:///{self.embedded_database}"
        return normalize_database_url(self.database_url)

    @property
    def celery_broker_url(self) -> str:
        if self.broker_url is None:
            return f"sqla+sqlite:///{self.resolved_home / 'broker.sqlite'}"
        return self.broker_url

    @property
    def resolved_storage_dir(self) -> Path:
        if self.storage_dir is None:
            return self.resolved_home / "storage"
        return self.storage_dir.expanduser().resolve()

    @property
    def resolved_scratch_dir(self) -> Path:
        """Local scratch space of the object-store backend (the local backend writes its
        temporary files under its root's ``tmp/``, on the same filesystem as its objects)."""
        if self.scratch_dir is not None:
            return self.scratch_dir.expanduser().resolve()
        if self.storage_dir is not None:
            return self.resolved_storage_dir / "tmp"
        return Path(tempfile.gettempdir()) / "rhosynth-scratch"

    def secret_key_bytes(self) -> bytes:
        """The HMAC key for API keys. Embedded mode keeps a generated key in the home folder."""
        if self.secret_key is not None:
            return self.secret_key.get_secret_value().encode()
        path = self.resolved_home / "secret_key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written whole to a file of its own, then linked into place: os.link fails if the
            # key exists, so two processes starting together cannot write two different keys,
            # and no reader ever sees the file half written (an empty key would refuse every
            # API key, and the API keeps the first one it reads: app/api/deps.py ApiResources).
            fd, staged = tempfile.mkstemp(dir=path.parent, prefix=".secret_key.")
            try:
                with os.fdopen(fd, "w") as handle:
                    handle.write(secrets.token_urlsafe(48))
                    handle.flush()
                    os.fsync(handle.fileno())
                with contextlib.suppress(FileExistsError):
                    os.link(staged, path)
            finally:
                os.unlink(staged)
        return path.read_text().strip().encode()


def normalize_database_url(url: str) -> str:
    """Use the psycopg 3 driver for plain ``postgresql://`` URLs."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class ConfigurationError(ValueError):
    """Invalid RHOSYNTH_* settings. The message names variables, never their values (secrets)."""


def describe_validation_error(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False, include_input=False, include_context=False):
        where = "RHOSYNTH_" + "_".join(str(part) for part in item["loc"]).upper()
        message = item["msg"].removeprefix("Value error, ")
        problems.append(message if where == "RHOSYNTH_" else f"{where}: {message}")
    return "; ".join(problems)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    try:
        return Settings()
    except ValidationError as error:
        raise ConfigurationError(
            f"invalid configuration: {describe_validation_error(error)}"
        ) from None
