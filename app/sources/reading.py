"""Reading a registered source (issue 29 §1): files on the object store or an allowed local
directory, or a PostgreSQL table or query through a connection the operator named.

No FastAPI here: the API (registration, app/datasets/service.py) and the worker (jobs,
app/jobs/execution.py) both read through :func:`fetched`, which hands the source over as local
files that :func:`app.datasets.ingest.read_batches` reads exactly as it reads an upload (the same
limits, the same typing, the same refusals):

* a local file or directory is read in place (every ``*.parquet`` / ``*.csv`` file under a
  directory, in sorted order);
* an object on the object store, or every such object under a prefix, is copied into the
  scratch directory (``If-Match`` its listed ETag; all of them before the block starts, their
  total bounded by ``max_upload_bytes`` at registration) and removed afterwards;
* a PostgreSQL table or query is streamed by ``COPY (…) TO STDOUT (FORMAT csv, HEADER)`` into a
  scratch CSV, in a ``REPEATABLE READ, READ ONLY`` transaction with a ``statement_timeout``.

The fingerprint of a source says what was measured: per file, its key, size and modification
time (and ETag on the object store); for PostgreSQL, the row count and an order-independent
checksum computed by the server in the same snapshot as the copy (the sum of the first 64 bits
of each row's md5). :func:`fetched` refuses with :class:`SourceChanged` when the source no longer
matches an expected fingerprint. Messages name paths, keys and limits, never a value of the data.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from app.config import Settings
from app.datasets.ingest import PartitionFile, UploadRejected
from app.storage import Storage
from app.storage.s3 import S3Location

if TYPE_CHECKING:
    from mypy_boto3_s3.client import S3Client

SourceKind = Literal["s3", "local", "postgres"]
KINDS: tuple[SourceKind, ...] = ("s3", "local", "postgres")
FILE_SUFFIXES = {"parquet": (".parquet", ".parq"), "csv": (".csv",)}
MAX_FILES = 10_000
MAX_QUERY_CHARS = 100_000
MAX_LOCATION_CHARS = 1000
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]{0,62}$")
COPY_CHUNK = 1024 * 1024

SOURCE_CHANGED = (
    "the source changed since registration (its files' size or modification time, or its "
    "rows' checksum, differ); register it again as a new dataset"
)


class SourceRefused(UploadRejected):
    """The source cannot be registered or read as described; ``message`` is for the owner."""


class SourceChanged(Exception):
    """The source no longer matches its registered fingerprint. Its text is public."""

    def __init__(self) -> None:
        super().__init__(SOURCE_CHANGED)


@dataclass(frozen=True)
class SourceSpec:
    """Where a registered dataset's table lives (the owner's metadata, never the data)."""

    kind: SourceKind
    uri: str | None = None  # s3://bucket/key-or-prefix, or an absolute local path
    connection: str | None = None  # an operator-named PostgreSQL connection
    table: str | None = None  # "name" or "schema.name"
    query: str | None = None  # one SELECT, run read-only
    format: Literal["parquet", "csv"] | None = None  # which files of a directory; None: both

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SourceRefused(422, f"source.kind must be one of {', '.join(KINDS)}")
        if self.kind == "postgres":
            if self.uri is not None or self.format is not None:
                raise SourceRefused(422, "a postgres source takes connection and table or query")
            if not self.connection:
                raise SourceRefused(422, "a postgres source needs a connection name")
            if (self.table is None) == (self.query is None):
                raise SourceRefused(422, "a postgres source needs either table or query")
            if self.table is not None:
                parts = self.table.split(".")
                if len(parts) > 2 or not all(_IDENTIFIER.match(p) for p in parts):
                    raise SourceRefused(
                        422, "source.table must be an identifier or schema.identifier"
                    )
            if self.query is not None:
                query = self.query.strip().rstrip(";").strip()
                if not query or len(query) > MAX_QUERY_CHARS:
                    raise SourceRefused(422, f"source.query must be 1 to {MAX_QUERY_CHARS} chars")
                if ";" in query:
                    raise SourceRefused(422, "source.query must be a single statement (no ';')")
                object.__setattr__(self, "query", query)
        else:
            if self.connection is not None or self.table is not None or self.query is not None:
                raise SourceRefused(422, f"a {self.kind} source takes uri and format only")
            if not self.uri or len(self.uri) > MAX_LOCATION_CHARS or "\x00" in self.uri:
                raise SourceRefused(422, f"source.uri must be 1 to {MAX_LOCATION_CHARS} chars")
            if self.kind == "s3" and not self.uri.startswith("s3://"):
                raise SourceRefused(422, "an s3 source's uri looks like s3://bucket/key")
            if self.kind == "s3" and any(
                part in (".", "..") for part in self.uri.removeprefix("s3://").split("/")[1:]
            ):
                # S3 keys are literal, but a proxy or an S3-compatible server may normalise the
                # request path: pub/../<the service's prefix>/… must not pass the storage check.
                raise SourceRefused(422, "an s3 source's key has no '.' or '..' segment")
            if self.kind == "local" and not os.path.isabs(self.uri):
                raise SourceRefused(422, "a local source's uri is an absolute path")
            if self.format not in (None, "parquet", "csv"):
                raise SourceRefused(422, "source.format is parquet or csv")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> SourceSpec:
        """From a dataset's ``source`` (which also records ``keep_copy``)."""
        return cls(**{k: v for k, v in value.items() if k != "keep_copy"})

    @property
    def location(self) -> str:
        """One line for the owner: the uri, or connection:table / connection:(query)."""
        if self.kind == "postgres":
            return f"{self.connection}:{self.table if self.table else '(query)'}"
        return str(self.uri)


@dataclass(frozen=True)
class Fetched:
    files: tuple[Path | PartitionFile, ...]
    fingerprint: dict[str, Any]


HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"


def partition_values(relative: str) -> tuple[tuple[str, str | None], ...]:
    """The ``key=value`` directories of a file's path relative to the source (hive layout),
    values URL-decoded; ``__HIVE_DEFAULT_PARTITION__`` is a missing value."""
    values = []
    for part in PurePosixPath(relative).parts[:-1]:
        key, sep, value = part.partition("=")
        if sep and key:
            decoded = unquote(value)
            values.append((unquote(key), None if decoded == HIVE_NULL else decoded))
    return tuple(values)


def _with_partitions(path: Path, relative: str | None) -> Path | PartitionFile:
    values = partition_values(relative) if relative else ()
    return PartitionFile(path, values) if values else path


def check_allowed(spec: SourceSpec, settings: Settings) -> None:
    """Refuse what the operator did not allow (no I/O): a local path outside every allowed
    root, a bucket not listed, a connection not configured."""
    if spec.kind == "local":
        path = Path(str(spec.uri))
        if not settings.source_local_roots:
            raise SourceRefused(403, "this service allows no local sources")
        resolved = Path(os.path.realpath(path))
        if not any(_inside(resolved, root) for root in settings.source_local_roots):
            raise SourceRefused(403, "the path is outside the directories this service allows")
        if _service_files(resolved, settings):
            raise SourceRefused(403, "the path holds the service's own files")
    elif spec.kind == "s3":
        bucket, key = _s3_parts(str(spec.uri))
        if bucket not in _allowed_buckets(settings):
            raise SourceRefused(403, f"this service may not read the bucket {bucket!r}")
        if _service_objects(bucket, key, settings):
            # Other tenants' datasets, outputs, samples and console drafts live there.
            raise SourceRefused(403, "the uri names or holds the service's own storage")
    elif spec.connection not in settings.source_connections:
        raise SourceRefused(422, f"no connection named {spec.connection!r} is configured")


# Kernel file systems: /proc/<pid>/environ of the service holds its secrets (the secret key,
# the object store's credentials, the connections' passwords), whatever root an operator allows.
_SYSTEM_DIRECTORIES = (Path("/proc"), Path("/sys"), Path("/dev"))


def _service_files(path: Path, settings: Settings) -> bool:
    """Whether a local path is, holds or lies in the service's own directories (or a kernel
    file system such as /proc)."""
    if any(_inside(path, system) or _inside(system, path) for system in _SYSTEM_DIRECTORIES):
        return True
    own = [settings.resolved_home, settings.resolved_storage_dir, settings.resolved_scratch_dir]
    for directory in own:
        mine = Path(os.path.realpath(directory))
        if _inside(path, mine) or _inside(mine, path):
            return True
    return False


def _service_objects(bucket: str, key: str, settings: Settings) -> bool:
    """Whether s3://bucket/key is, holds or lies in the service's storage prefix."""
    if settings.storage_url is None:
        return False
    storage = S3Location.parse(settings.storage_url)
    if bucket != storage.bucket:
        return False
    mine, named = storage.prefix.strip("/"), key.strip("/")
    if not mine or not named:
        return True  # the service stores at the bucket's root, or the whole bucket is named
    return named == mine or named.startswith(mine + "/") or mine.startswith(named + "/")


def _inside(path: Path, root: Path) -> bool:
    base = Path(os.path.realpath(root))
    return path == base or base in path.parents


def _allowed_buckets(settings: Settings) -> set[str]:
    if settings.source_s3_buckets:
        return set(settings.source_s3_buckets)
    if settings.storage_url is None:
        return set()
    return {S3Location.parse(settings.storage_url).bucket}


def _s3_parts(uri: str) -> tuple[str, str]:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    if not bucket:
        raise SourceRefused(422, "an s3 source's uri names no bucket")
    return bucket, key


def _wanted(name: str, spec: SourceSpec) -> bool:
    if any(part.startswith((".", "_")) for part in PurePosixPath(name).parts):
        return False  # _SUCCESS, .crc, _temporary/ and other writers' markers and work files
    formats = (spec.format,) if spec.format else ("parquet", "csv")
    return name.lower().endswith(tuple(s for f in formats for s in FILE_SUFFIXES[f]))


def _check_count(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if not files:
        raise SourceRefused(422, "the source holds no Parquet or CSV file")
    if len(files) > MAX_FILES:
        raise SourceRefused(422, f"a source may hold at most {MAX_FILES} files")
    return files


# Files ----------------------------------------------------------------------------------------


def local_listing(spec: SourceSpec, settings: Settings) -> list[dict[str, Any]]:
    """Every file of a local source with its size and modification time (ns), sorted."""
    check_allowed(spec, settings)
    root = Path(os.path.realpath(str(spec.uri)))
    if root.is_file():
        candidates = [root]
    elif root.is_dir():
        candidates = sorted(
            p for p in root.rglob("*") if p.is_file() and _wanted(str(p.relative_to(root)), spec)
        )
    else:
        raise SourceRefused(404, "the path does not exist or is not readable")
    files = []
    for path in candidates:
        stat = _local_file(path, settings).stat()
        files.append({"key": str(path), "size": stat.st_size, "modified": stat.st_mtime_ns})
        if path != root:
            files[-1]["relative"] = str(path.relative_to(root))
    return _check_count(files)


def _local_file(path: Path, settings: Settings) -> Path:
    """``path`` with its symbolic links resolved, refused unless it lies in an allowed root and
    outside the service's own directories (a link under an allowed directory may point at the
    service's storage: other tenants' tables)."""
    resolved = Path(os.path.realpath(path))
    if not any(_inside(resolved, r) for r in settings.source_local_roots):
        raise SourceRefused(403, "a file of the source lies outside the allowed directories")
    if _service_files(resolved, settings):
        raise SourceRefused(403, "a file of the source is one of the service's own files")
    return resolved


def s3_client(settings: Settings) -> S3Client:
    import boto3
    from botocore.config import Config

    config = Config(
        region_name=settings.s3_region,
        s3={"addressing_style": settings.s3_addressing_style},
        retries={"mode": "standard", "max_attempts": 5},
        connect_timeout=5,
        read_timeout=60,
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
    )
    client: S3Client = boto3.session.Session().client(
        "s3", endpoint_url=settings.s3_endpoint_url, config=config
    )
    return client


def s3_listing(spec: SourceSpec, settings: Settings) -> list[dict[str, Any]]:
    """The object the uri names, or every wanted object under it as a prefix, sorted by key,
    with size, ETag and LastModified."""
    import botocore.exceptions

    check_allowed(spec, settings)
    bucket, key = _s3_parts(str(spec.uri))
    client = s3_client(settings)
    try:
        if key and not key.endswith("/"):
            try:
                head = client.head_object(Bucket=bucket, Key=key)
            except botocore.exceptions.ClientError as error:
                if error.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                    raise
            else:
                return [_object(key, head["ContentLength"], head["ETag"], head["LastModified"])]
        prefix = key if not key or key.endswith("/") else key + "/"
        files = []
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if _wanted(item["Key"][len(prefix) :], spec):
                    files.append(
                        _object(item["Key"], item["Size"], item["ETag"], item["LastModified"])
                    )
                    files[-1]["relative"] = item["Key"][len(prefix) :]
                    if len(files) > MAX_FILES:
                        return _check_count(files)
    except botocore.exceptions.ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        raise SourceRefused(422, f"the object store refused to list the source ({code})") from None
    except botocore.exceptions.BotoCoreError:
        raise SourceRefused(503, "the object store could not be reached") from None
    return _check_count(sorted(files, key=lambda f: f["key"]))


def _object(key: str, size: int, etag: str, modified: Any) -> dict[str, Any]:
    return {"key": key, "size": int(size), "etag": etag, "modified": modified.isoformat()}


def current_fingerprint(spec: SourceSpec, settings: Settings) -> dict[str, Any] | None:
    """The files' fingerprint as they are now (metadata only: cheap), or None for PostgreSQL,
    whose checksum needs a pass over the rows."""
    if spec.kind == "local":
        return {"files": local_listing(spec, settings)}
    if spec.kind == "s3":
        return {"files": s3_listing(spec, settings)}
    return None


def check_unchanged(spec: SourceSpec, settings: Settings, expected: dict[str, Any]) -> None:
    """Raise :class:`SourceChanged` if the files differ from ``expected`` (or are gone)."""
    try:
        now = current_fingerprint(spec, settings)
    except SourceRefused as refused:
        if refused.status_code in (404, 422):
            raise SourceChanged() from None
        raise
    if now is not None and now != expected:
        raise SourceChanged()


@contextlib.contextmanager
def fetched(
    spec: SourceSpec,
    settings: Settings,
    storage: Storage,
    *,
    expected: dict[str, Any] | None = None,
    max_rows: int | None = None,
) -> Iterator[Fetched]:
    """The source as local files for the length of the block, and its fingerprint.

    With ``expected`` (a registered fingerprint), a source that no longer matches raises
    :class:`SourceChanged` before anything is read. Local files (read in place) are checked
    again at the end of the block, with or without ``expected``. Scratch copies are removed when
    the block ends.
    """
    if spec.kind == "postgres":
        with _postgres_copy(spec, settings, storage, expected, max_rows) as result:
            yield result
        return
    fingerprint = current_fingerprint(spec, settings)
    assert fingerprint is not None
    if expected is not None and fingerprint != expected:
        raise SourceChanged()
    if spec.kind == "local":
        # Read where the links pointed when they were checked, not through the links again.
        yield Fetched(
            tuple(
                _with_partitions(_local_file(Path(f["key"]), settings), f.get("relative"))
                for f in fingerprint["files"]
            ),
            fingerprint,
        )
        # Files read in place may change while they are read (at registration too: then what
        # was read is not what the fingerprint describes).
        check_unchanged(spec, settings, fingerprint)
        return
    # The objects are copied whole into the scratch space: bounded as an upload is, before
    # anything is copied (their sizes are the listing's metadata). Checked at registration only:
    # a job's objects are the registered ones (same ETags and sizes), and a bound lowered since
    # would make its failure depend on the sizes of compressed private data.
    total = sum(int(item["size"]) for item in fingerprint["files"])
    if expected is None and total > settings.max_upload_bytes:
        raise SourceRefused(413, _too_large(settings, "the source's objects add up to"))
    paths: list[Path] = []
    try:
        bucket = _s3_parts(str(spec.uri))[0]
        client = s3_client(settings)
        for item in fingerprint["files"]:
            path = storage.temp_path(".source")
            paths.append(path)
            _download(client, bucket, item, path)
        yield Fetched(
            tuple(
                _with_partitions(path, item.get("relative"))
                for path, item in zip(paths, fingerprint["files"], strict=True)
            ),
            fingerprint,
        )
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


def _too_large(settings: Settings, what: str) -> str:
    return (
        f"{what} more than {settings.max_upload_bytes} bytes (RHOSYNTH_MAX_UPLOAD_BYTES), the "
        "scratch space a copy of a source may take"
    )


def _download(client: S3Client, bucket: str, item: dict[str, Any], path: Path) -> None:
    import botocore.exceptions

    try:
        response = client.get_object(Bucket=bucket, Key=item["key"], IfMatch=item["etag"])
        with open(path, "wb") as handle:
            for chunk in response["Body"].iter_chunks(COPY_CHUNK):
                handle.write(chunk)
    except botocore.exceptions.ClientError as error:
        code = error.response.get("Error", {}).get("Code", "error")
        if code in ("PreconditionFailed", "412", "NoSuchKey", "404"):
            raise SourceChanged() from None
        raise SourceRefused(422, f"the object store refused to read the source ({code})") from None
    except botocore.exceptions.BotoCoreError:
        raise SourceRefused(503, "the object store could not be reached") from None
    if path.stat().st_size != item["size"]:
        raise SourceChanged()


@contextlib.contextmanager
def head(
    spec: SourceSpec, settings: Settings, storage: Storage, *, max_bytes: int, rows: int
) -> Iterator[Path]:
    """A bounded head of the source as one local file, for a schema draft: the first file of a
    directory or prefix (refused over ``max_bytes`` before it is copied), or the first ``rows``
    rows of a PostgreSQL source (no checksum)."""
    if spec.kind == "postgres":
        with _postgres_copy(spec, settings, storage, None, None, head_rows=rows) as result:
            first_file = result.files[0]
            yield first_file.path if isinstance(first_file, PartitionFile) else first_file
        return
    fingerprint = current_fingerprint(spec, settings)
    assert fingerprint is not None
    first = fingerprint["files"][0]
    if first["size"] > max_bytes:
        raise SourceRefused(
            413, f"drafts read at most {max_bytes} bytes; the source's first file is larger"
        )
    if spec.kind == "local":
        yield _local_file(Path(first["key"]), settings)
        return
    path = storage.temp_path(".source")
    try:
        _download(s3_client(settings), _s3_parts(str(spec.uri))[0], first, path)
        yield path
    finally:
        path.unlink(missing_ok=True)


# PostgreSQL -----------------------------------------------------------------------------------


def _dsn(settings: Settings, name: str) -> str:
    secret = settings.source_connections.get(name)
    if secret is None:
        raise SourceRefused(422, f"no connection named {name!r} is configured")
    dsn = secret.get_secret_value()
    return re.sub(r"^postgresql\+\w+://", "postgresql://", dsn)


@contextlib.contextmanager
def _postgres_copy(
    spec: SourceSpec,
    settings: Settings,
    storage: Storage,
    expected: dict[str, Any] | None,
    max_rows: int | None,
    *,
    head_rows: int | None = None,
) -> Iterator[Fetched]:
    import psycopg
    from psycopg import sql

    check_allowed(spec, settings)
    if spec.table is not None:
        relation: sql.Composable = sql.SQL("SELECT * FROM {}").format(
            sql.Identifier(*spec.table.split("."))
        )
    else:
        # The owner's own query, run read-only. PostgreSQL first parses it on its own (PREPARE,
        # below): one complete statement cannot close the parentheses it is embedded in, and
        # the line break after it ends a trailing comment, so it cannot add options to COPY
        # (TO PROGRAM, TO a file).
        relation = sql.SQL(str(spec.query) + "\n")
    checksum = sql.SQL(
        "SELECT count(*), coalesce(sum(('x' || left(md5(t::text), 16))::bit(64)::bigint), 0)"
        "::text FROM ({}) AS t"
    ).format(relation)
    if head_rows is not None:
        relation = sql.SQL("SELECT * FROM ({}) AS head LIMIT {}").format(
            relation, sql.Literal(head_rows)
        )
    copy = sql.SQL("COPY ({}) TO STDOUT WITH (FORMAT csv, HEADER true)").format(relation)
    path = storage.temp_path(".csv")
    try:
        try:
            with psycopg.connect(_dsn(settings, str(spec.connection)), connect_timeout=10) as conn:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                session_settings(conn, settings)
                # A read-only transaction does not stop a superuser (or a member of the server
                # file roles) reading or writing the server's files from a query
                # (pg_read_file, lo_export, COPY … TO PROGRAM elsewhere): such a role is refused
                # before anything runs. A public fact of the operator's settings.
                privileged = conn.execute(_PRIVILEGED_ROLE).fetchone()
                if privileged is None or privileged[0]:
                    raise SourceRefused(
                        422,
                        f"the connection {spec.connection!r} logs in with a role that may read "
                        "or write the database server's files (a superuser, or a member of "
                        "pg_read_server_files, pg_write_server_files or "
                        "pg_execute_server_program); the operator must give it a role that "
                        "only reads tables",
                    )
                if spec.query is not None:
                    conn.execute(
                        sql.SQL("PREPARE rhosynth_source AS {}").format(sql.SQL(spec.query))
                    )
                    conn.execute("DEALLOCATE rhosynth_source")
                row = conn.execute(checksum).fetchone() if head_rows is None else (1, "")
                assert row is not None
                rows = int(row[0])
                fingerprint: dict[str, Any] = {"rows": rows, "checksum": str(row[1])}
                if expected is not None and fingerprint != expected:
                    raise SourceChanged()
                if max_rows is not None and rows > max_rows:
                    raise SourceRefused(422, f"the table has more than {max_rows} rows")
                if rows == 0:
                    raise SourceRefused(422, "the table has no rows")
                # Again: the checksum ran the owner's query, which may have changed them
                # (set_config(..., true) lasts to the end of the transaction; a statement_timeout
                # of 0 would leave the copy unbounded).
                session_settings(conn, settings)
                with (
                    conn.cursor() as cursor,
                    open(path, "wb") as handle,
                    cursor.copy(copy) as stream,
                ):
                    written = 0
                    for chunk in stream:
                        written += len(chunk)
                        # At registration only (a job's rows are the registered ones:
                        # same count and checksum), as for objects above.
                        if expected is None and written > settings.max_upload_bytes:
                            raise SourceRefused(413, _too_large(settings, "the rows' CSV takes"))
                        handle.write(chunk)
        except psycopg.Error as error:
            raise _postgres_refusal(error, str(spec.connection)) from None
        yield Fetched((path,), fingerprint)
    finally:
        path.unlink(missing_ok=True)


def session_settings(conn: Any, settings: Settings) -> None:
    """The settings of each statement on a source: its time bound, and the text forms of
    values (time zone, date and interval styles, float digits), so that the checksum and the
    copied CSV do not depend on the server's or the process's defaults (``PGTZ``)."""
    from psycopg import sql

    timeout = sql.Literal(f"{settings.source_statement_timeout_seconds}s")
    conn.execute(sql.SQL("SET LOCAL statement_timeout = {}").format(timeout))
    conn.execute("SET LOCAL TimeZone = 'UTC'")
    conn.execute("SET LOCAL DateStyle = 'ISO, YMD'")
    conn.execute("SET LOCAL IntervalStyle = 'postgres'")
    conn.execute("SET LOCAL extra_float_digits = 1")
    conn.execute("SET LOCAL bytea_output = 'hex'")


_PRIVILEGED_ROLE = (
    "SELECT current_setting('is_superuser') = 'on'"
    " OR pg_has_role('pg_read_server_files', 'USAGE')"
    " OR pg_has_role('pg_write_server_files', 'USAGE')"
    " OR pg_has_role('pg_execute_server_program', 'USAGE')"
)


def _postgres_refusal(error: Exception, connection: str) -> SourceRefused:
    """PostgreSQL's messages can quote values (``invalid input syntax … "…"``): classified by
    SQLSTATE, never forwarded."""
    import psycopg.errors as e

    if isinstance(error, e.UndefinedTable):
        return SourceRefused(422, "the table or a relation of the query does not exist")
    if isinstance(error, e.UndefinedColumn):
        return SourceRefused(422, "the query names a column that does not exist")
    if isinstance(error, e.InsufficientPrivilege):
        return SourceRefused(422, f"the connection {connection!r} may not read the source")
    if isinstance(error, e.SyntaxError):
        return SourceRefused(422, "the query is not valid SQL")
    if isinstance(error, e.ReadOnlySqlTransaction):
        return SourceRefused(422, "the query must only read (it runs in a read-only transaction)")
    if isinstance(error, e.QueryCanceled):
        return SourceRefused(422, "the source took longer than the statement timeout")
    if isinstance(error, e.OperationalError) and getattr(error, "sqlstate", None) is None:
        return SourceRefused(503, f"the connection {connection!r} could not be opened")
    state = getattr(error, "sqlstate", None) or "unknown"
    return SourceRefused(422, f"PostgreSQL refused the source (SQLSTATE {state})")
