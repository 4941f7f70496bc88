"""The ``rhosynth`` command: serve the API, run workers, migrate, manage keys; and run the engine
on local files (``synthesize``, ``evaluate``; see engine/cli.py).

Every command reads the same RHOSYNTH_* settings as the service. Without RHOSYNTH_DATABASE_URL
they use the embedded defaults under RHOSYNTH_HOME (default ./var).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from app.config import Settings
    from rhosynth.audit import ChainHead


def _configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def embedded_api() -> Any:
    """The app of one embedded API process (uvicorn's factory for `rhosynth run` with several
    processes): settings from the environment, logging configured as in the parent."""
    from app.config import get_settings
    from app.main import create_app

    settings = get_settings()
    _configure_logging(settings)
    return create_app(settings)


def _settings() -> Settings:
    # Imported here: pydantic-settings is not needed for `--help` or the engine's commands.
    from app.config import ConfigurationError, get_settings

    try:
        return get_settings()
    except ConfigurationError as error:  # names the variables, never their values
        raise click.ClickException(str(error)) from None


def _check_storage(settings: Settings) -> None:
    """Refuse to start a server or worker whose storage cannot be used (an unreachable bucket,
    wrong credentials, a storage directory that cannot be written), naming it."""
    from app.storage import open_storage

    storage = open_storage(settings)
    try:
        storage.check()
    except OSError as error:
        raise click.ClickException(f"storage unusable ({storage.describe()}): {error}") from None
    click.echo(f"storage: {storage.describe()}", err=True)
    # Scratch files a killed process of this host left (workers also sweep in their loop).
    grace = settings.job_time_limit_seconds + 3600
    with contextlib.suppress(OSError):
        storage.sweep_scratch(grace)


def existing_database(settings: Settings) -> None:
    """For commands that use the service's database but must not create one: in embedded mode,
    refuse when the SQLite file does not exist (a different RHOSYNTH_HOME than the server's would
    otherwise get a new, empty database). Says on stderr which database is used."""
    if settings.embedded:
        path = settings.embedded_database
        if not path.is_file():
            raise click.ClickException(
                f"no rhosynth database at {path} (RHOSYNTH_HOME={settings.resolved_home}); "
                "start the server (`make run` or `rhosynth run`) or run `rhosynth migrate` with "
                "the same RHOSYNTH_HOME first"
            )
        click.echo(f"database: {path}", err=True)
        return
    from sqlalchemy.engine import make_url

    shown = make_url(settings.sqlalchemy_url).render_as_string(hide_password=True)
    click.echo(f"database: {shown}", err=True)


def run_migrations(settings: Settings) -> None:
    """Bring the configured database to the newest schema revision."""
    from alembic import command
    from alembic.config import Config

    import migrations

    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["database_url"] = settings.sqlalchemy_url
    command.upgrade(config, "head")


class _LazyGroup(click.Group):
    """A group that imports the engine's local commands only when one of them is used.

    ``rhosynth --help`` lists them from :data:`ENGINE_COMMANDS` without importing the engine (or
    numpy and pandas), and running them never imports the web, database or queue stack.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *ENGINE_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in ENGINE_COMMANDS:
            module_name, attribute, _help = ENGINE_COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{module_name}.{attribute} is not a click command")
            return command
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: list[tuple[str, str]] = []
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        for name in self.list_commands(ctx):
            if name in ENGINE_COMMANDS:
                rows.append((name, ENGINE_COMMANDS[name][2]))
                continue
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


ENGINE_COMMANDS: dict[str, tuple[str, str, str]] = {
    # name: (module, attribute, the command's short help, repeated so --help need not import it)
    "evaluate": ("engine.cli", "evaluate", "Mean k-way marginal TVD between two tables, as JSON."),
    "report": (
        "engine.cli",
        "report",
        "Quality report of a synthetic table (HTML and JSON).",
    ),
    "remote": (
        "rhosynth.cli",
        "remote",
        "Use a running rhosynth service over HTTP (RHOSYNTH_URL, RHOSYNTH_API_KEY).",
    ),
    "sample": ("engine.cli", "sample", "Draw more rows from a saved model (no privacy cost)."),
    "schema": ("engine.schema_draft.cli", "schema", "Draft a schema for a raw CSV/Parquet table."),
    "synthesize": (
        "engine.cli",
        "synthesize",
        "Synthesise a DP copy of a local CSV/Parquet table.",
    ),
}


@click.group(cls=_LazyGroup)
def main() -> None:
    """rhosynth: differentially private synthetic data as a service."""


@main.command()
def migrate() -> None:
    """Apply database migrations (the schema is only ever built this way)."""
    settings = _settings()
    _configure_logging(settings)
    run_migrations(settings)
    click.echo("database is at the newest revision", err=True)


@main.command()
@click.option("--host", default=None, help="bind address (default: RHOSYNTH_HOST)")
@click.option("--port", type=int, default=None, help="port (default: RHOSYNTH_PORT)")
@click.option("--workers", type=int, default=1, show_default=True, help="API processes")
def serve(host: str | None, port: int | None, workers: int) -> None:
    """Serve the HTTP API."""
    import uvicorn

    settings = _settings()
    _configure_logging(settings)
    _check_storage(settings)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host or settings.host,
        port=port or settings.port,
        workers=workers,
        log_level=settings.log_level.lower(),
        proxy_headers=True,
    )


@main.command()
@click.option(
    "--concurrency",
    type=int,
    default=None,
    help="job processes (default: RHOSYNTH_WORKER_CONCURRENCY)",
)
@click.option(
    "--pool",
    type=click.Choice(["prefork", "solo", "threads"]),
    default="prefork",
    show_default=True,
)
@click.option(
    "--reports",
    is_flag=True,
    help="build the owner tier of release reports instead of running jobs (its own queue, "
    "RHOSYNTH_REPORTS_QUEUE: the owner tier reads the real table, so it never holds a job "
    "worker's slot); default concurrency 1",
)
@click.option(
    "--webhooks",
    is_flag=True,
    help="send webhook deliveries instead of running jobs (its own queue, "
    "RHOSYNTH_WEBHOOKS_QUEUE, so a slow receiver never holds a job worker's slot); default "
    "concurrency 4 threads",
)
def worker(concurrency: int | None, pool: str, reports: bool, webhooks: bool) -> None:
    """Run a Celery worker that executes release jobs (and recovers lost ones), with
    ``--reports`` one that builds the owner tier of published releases, or with ``--webhooks``
    one that sends webhook deliveries."""
    settings = _settings()
    _configure_logging(settings)
    # Before pyarrow is imported: Arrow's default allocator (mimalloc) reserves 1 GiB of address
    # space, which the job memory limit (RLIMIT_AS, workers/limits.py) would count.
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    if reports and webhooks:
        raise click.UsageError("--reports and --webhooks are separate workers")
    if webhooks:
        # Deliveries wait on the network, not the CPU: threads, a few at once.
        processes = concurrency or 4
        queue = settings.webhook_queue
        pool = "threads"
    elif reports:
        processes = concurrency or 1
        queue = settings.owner_tier_queue
    else:
        processes = concurrency or settings.worker_concurrency
        queue = settings.queue
    if not webhooks:  # a delivery reads no table and writes no file
        _check_memory_limit(settings, processes)
        _check_storage(settings)
    from workers.tasks import celery_app

    celery_app.worker_main(
        [
            "worker",
            f"--loglevel={settings.log_level}",
            f"--queues={queue}",
            f"--concurrency={processes}",
            f"--pool={pool}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            f"--hostname=rhosynth-{os.getpid()}@%h",
        ]
    )


def _check_memory_limit(settings: Settings, processes: int) -> None:
    """Refuse to start a worker that could not give each job the memory the API promised it.

    The API accepts a job when its public estimate fits ``RHOSYNTH_JOB_MEMORY_LIMIT_MB``; a
    worker whose machine cannot give that much to each of its job processes would fail such a
    job after its charge, for a reason its parameters decided.
    """
    from app.jobs.limits import effective_memory_limit_mb

    fits = effective_memory_limit_mb(settings.job_memory_limit_mb, processes)
    if fits < settings.job_memory_limit_mb:
        raise click.ClickException(
            f"RHOSYNTH_JOB_MEMORY_LIMIT_MB is {settings.job_memory_limit_mb} MB, but "
            f"{processes} job process(es) on this machine can have at most {fits} MB each "
            "(80 % of its memory): lower the setting for the API and every worker, or run "
            "fewer job processes here"
        )


@main.command()
def recover() -> None:
    """Run one recovery pass: requeue jobs of dead workers, resend lost messages, expire."""
    settings = _settings()
    _configure_logging(settings)
    existing_database(settings)
    from app.jobs.recovery import recover_jobs

    report = recover_jobs(settings)
    click.echo(
        f"requeued={len(report.requeued)} failed={len(report.failed)} "
        f"timed_out={len(report.timed_out)} "
        f"cancelled={len(report.cancelled)} resent={len(report.resent)} "
        f"expired={len(report.expired)}"
    )


@main.command()
@click.option(
    "--api-processes",
    type=click.IntRange(1, 64),
    default=None,
    help="API processes (default: RHOSYNTH_EMBEDDED_API_PROCESSES, 2)",
)
def run(api_processes: int | None) -> None:
    """Embedded mode: migrate, then serve the API, one job worker and one reports worker (what
    `make run` starts)."""
    settings = _settings()
    _configure_logging(settings)
    if not settings.embedded:
        click.echo("note: RHOSYNTH_DATABASE_URL is set; running against it", err=True)
    settings.resolved_home.mkdir(parents=True, exist_ok=True)
    settings.resolved_storage_dir.mkdir(parents=True, exist_ok=True)
    settings.secret_key_bytes()  # create the embedded key before two processes race for it
    run_migrations(settings)
    # API and worker share this machine: on a small one, both use the job memory limit that fits
    # (a worker refuses a limit its job processes cannot have).
    from app.jobs.limits import effective_memory_limit_mb

    # The job processes and the reports worker's one process.
    fits = effective_memory_limit_mb(settings.job_memory_limit_mb, settings.worker_concurrency + 1)
    if fits < settings.job_memory_limit_mb:
        click.echo(
            f"note: job memory limit {fits} MB (what fits this machine) instead of "
            f"{settings.job_memory_limit_mb} MB",
            err=True,
        )
        settings = settings.model_copy(update={"job_memory_limit_mb": fits})
        os.environ["RHOSYNTH_JOB_MEMORY_LIMIT_MB"] = str(fits)
    worker_process = subprocess.Popen([sys.executable, "-m", "app.cli", "worker"])
    # Webhook deliveries wait on receivers: their own worker, never a job's slot.
    webhooks_process = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--webhooks"])
    # The owner tier of reports is built by its own worker, so it never delays the next job.
    reports_process = subprocess.Popen([sys.executable, "-m", "app.cli", "worker", "--reports"])
    click.echo(
        f"rhosynth: API on http://{settings.host}:{settings.port} (docs at /docs), "
        f"worker pid {worker_process.pid}, reports worker pid {reports_process.pid}, "
        f"webhooks worker pid {webhooks_process.pid}, "
        f"data in {settings.resolved_home}",
        err=True,
    )
    click.echo(
        "create a key with: .venv/bin/rhosynth keys create --tenant demo --role owner --name me",
        err=True,
    )

    def stop_worker(*_args: object) -> None:
        for process in (worker_process, reports_process, webhooks_process):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in (worker_process, reports_process, webhooks_process):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop_worker()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        import uvicorn

        processes = api_processes or settings.embedded_api_processes
        if processes == 1:
            from app.main import create_app

            uvicorn.run(
                create_app(settings),
                host=settings.host,
                port=settings.port,
                log_level=settings.log_level.lower(),
            )
        else:
            status = _serve_api_processes(settings, processes)
            if status:
                raise SystemExit(status)  # the workers are stopped below
    finally:
        stop_worker()


def _serve_api_processes(settings: Settings, processes: int) -> int:
    """Serve the API from ``processes`` processes under uvicorn's supervisor, each building the
    app from the environment (:func:`embedded_api`), which holds every setting `run` changed.
    The supervisor takes over SIGINT and SIGTERM: returns the exit status `run` had with one
    process, 128 + the signal that stopped it, or uvicorn's start-up failure status (3) when an
    API process could not start; 0 otherwise."""
    from uvicorn import Config
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors import Multiprocess

    config = Config(
        "app.cli:embedded_api",
        factory=True,
        workers=processes,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
    )
    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    received: list[int] = []
    for name, signum in (("handle_int", signal.SIGINT), ("handle_term", signal.SIGTERM)):
        handler = getattr(supervisor, name)

        def recording(handler: Any = handler, signum: int = signum) -> None:
            received.append(signum)
            handler()

        setattr(supervisor, name, recording)
    supervisor.run()
    if any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes):
        return STARTUP_FAILURE
    return 128 + received[0] if received else 0


@main.group()
def keys() -> None:
    """Manage API keys."""


@keys.command("create")
@click.option("--tenant", required=True, help="tenant name (created on first use)")
@click.option(
    "--role",
    required=True,
    type=click.Choice(["owner", "analyst", "admin"]),
    help="admin: manages the tenant's keys over /v1/keys (and nothing else)",
)
@click.option("--name", required=True, help="a label for the key")
def keys_create(tenant: str, role: str, name: str) -> None:
    """Create an API key; the key is printed alone on the last line (it is not stored)."""
    settings = _settings()
    from app.auth.service import create_key
    from app.db.session import get_session_factory, transaction

    existing_database(settings)
    if settings.embedded:
        run_migrations(settings)  # an existing database from an older version: upgrade it
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        try:
            created = create_key(session, settings.secret_key_bytes(), tenant, role, name)
        except ValueError as error:
            raise click.ClickException(str(error)) from None
    click.echo(f"tenant {created.tenant_id}, {created.role} key {created.key_id}", err=True)
    click.echo("store this key now; only its hash is kept:", err=True)
    sys.stdout.write(created.key + "\n")


@main.group()
def audit() -> None:
    """The audit trail: verify its hash chains."""


@audit.command("verify")
@click.option(
    "--tenant",
    default=None,
    help="one tenant (name or id; default: every tenant with entries in the database)",
)
@click.option(
    "--file",
    "export",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="verify an exported JSON Lines file instead of the database (no server needed)",
)
def audit_verify(tenant: str | None, export: Path | None) -> None:
    """Check that every entry follows from the one before (exit 1 naming the first that does
    not); print each tenant's head (entries, last seq, last hash) to compare with one noted
    earlier."""
    from rhosynth.audit import AuditChainBroken, verify_audit_chain

    heads: list[ChainHead]
    try:
        if export is not None:
            with export.open("rb") as lines:
                # An export made with `since` starts inside the chain: check it from there.
                heads = list(verify_audit_chain(lines, from_start=False).values())
        else:
            heads = _verify_database(tenant)
    except AuditChainBroken as broken:
        click.echo(f"FAILED: {broken}", err=True)
        sys.exit(1)
    except ValueError as error:  # not JSON
        click.echo(f"FAILED: the file is not an audit export: {error}", err=True)
        sys.exit(1)
    for head in heads:
        click.echo(
            f"tenant {head.tenant_id}: {head.entries} entries verified, "
            f"last seq {head.last_seq}, last hash {head.last_hash}"
        )
    click.echo("OK" if heads else "OK (no entries)")


def _verify_database(tenant: str | None) -> list[ChainHead]:
    from app.audit import service as audit_service
    from app.db.session import get_session_factory

    settings = _settings()
    existing_database(settings)
    factory = get_session_factory(settings.sqlalchemy_url)
    if tenant is None:
        tenant_ids = list(audit_service.audited_tenants(factory))
    else:
        found = audit_service.find_tenant(factory, tenant)
        if found is None:
            raise click.ClickException(f"no tenant {tenant!r}")
        tenant_ids = [found]
    heads = [audit_service.verify_tenant(factory, tenant_id) for tenant_id in tenant_ids]
    return [head for head in heads if head is not None]


@main.command()
@click.option("--timeout", type=float, default=30.0, show_default=True)
@click.option("--url", default=None, help="health URL (default: the configured host and port)")
def wait(timeout: float, url: str | None) -> None:
    """Wait until the API answers /healthz (for scripts)."""
    import urllib.error
    import urllib.request

    settings = _settings()
    target = url or f"http://{settings.host}:{settings.port}/healthz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(target, timeout=2) as response:  # noqa: S310 - our own URL
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.25)
    raise click.ClickException(f"{target} did not become healthy within {timeout} s")


if __name__ == "__main__":
    main()
