"""``rhosynth remote``: use a running rhosynth service from the shell, through
:class:`rhosynth.client.Client` (no curl needed).

Configured by ``RHOSYNTH_URL`` and ``RHOSYNTH_API_KEY`` (or ``--url`` and ``--key``). Objects are
printed as JSON on standard output; progress and notes go to standard error. An API error prints
the server's detail and exits with status 1. Imports nothing of the server or the engine.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import click
from pydantic import BaseModel

from rhosynth.errors import ApiError, OverBudget

if TYPE_CHECKING:
    # httpx and pandas come with the client: imported when a command talks to the service, not
    # for `rhosynth remote --help`.
    from rhosynth.client import Client


def _echo_json(value: BaseModel | Sequence[BaseModel] | dict[str, Any]) -> None:
    if isinstance(value, BaseModel):
        text = value.model_dump_json(indent=2, by_alias=True)
    elif isinstance(value, Sequence):
        text = json.dumps([item.model_dump(mode="json", by_alias=True) for item in value], indent=2)
    else:
        text = json.dumps(value, indent=2)
    click.echo(text)


def _value(value: float | str) -> str:
    """A bin edge or category as text: whole numbers without ".0"."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return str(value)


@contextmanager
def _client(ctx: click.Context) -> Iterator[Client]:
    """The context's client; an API error becomes the server's detail and exit status 1."""
    url, key = ctx.obj["url"], ctx.obj["key"]
    if not url:
        raise click.UsageError("set RHOSYNTH_URL or pass --url (e.g. http://127.0.0.1:8000)")
    if not key:
        raise click.UsageError("set RHOSYNTH_API_KEY or pass --key")
    from rhosynth.client import Client

    try:
        with Client(url, key) as client:
            yield client
    except OverBudget as error:
        raise click.ClickException(
            f"{error.detail} (requested ρ {error.requested_rho}, remaining ρ {error.remaining_rho})"
        ) from None
    except ApiError as error:
        raise click.ClickException(str(error)) from None
    except (ValueError, OSError) as error:
        raise click.ClickException(str(error)) from None


@click.group()
@click.option("--url", envvar="RHOSYNTH_URL", help="the service's URL (env RHOSYNTH_URL)")
@click.option("--key", envvar="RHOSYNTH_API_KEY", help="an API key (env RHOSYNTH_API_KEY)")
@click.pass_context
def remote(ctx: click.Context, url: str | None, key: str | None) -> None:
    """Use a running rhosynth service over HTTP (RHOSYNTH_URL, RHOSYNTH_API_KEY)."""
    ctx.ensure_object(dict)
    ctx.obj.update(url=url, key=key)


@remote.command()
@click.argument("table", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--schema", "schema", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--name", required=True)
@click.option("--budget-rho", required=True, help="total ρ budget of the dataset")
@click.option("--budget-delta", default=None, help="total δ, for DP discovery at upload")
@click.option("--discovery-rho", default=None, help="ρ to spend on DP discovery at upload")
@click.pass_context
def upload(
    ctx: click.Context,
    table: Path,
    schema: str,
    name: str,
    budget_rho: str,
    budget_delta: str | None,
    discovery_rho: str | None,
) -> None:
    """Upload a CSV/Parquet TABLE with its schema (owner keys); prints the dataset, and on
    standard error the domains learned with DP and the upload's warnings."""
    with _client(ctx) as client:
        dataset = client.upload(
            table,
            Path(schema),
            name,
            budget_rho,
            budget_delta=budget_delta,
            discovery_rho=discovery_rho,
        )
    for column, domain in dataset.learned_domains.items():
        shown = ", ".join(_value(v) for v in domain[:8]) + (", …" if len(domain) > 8 else "")
        click.echo(f"learned with DP: {column}: [{shown}] ({len(domain)} values)", err=True)
    for warning in dataset.warnings:
        click.echo(f"warning ({warning.code}): {warning.message}", err=True)
    _echo_json(dataset)


@remote.command()
@click.argument("location")
@click.option("--schema", "schema", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--name", required=True)
@click.option("--budget-rho", required=True, help="total ρ budget of the dataset")
@click.option("--budget-delta", default=None, help="total δ, for DP discovery")
@click.option("--discovery-rho", default=None, help="ρ to spend on DP discovery")
@click.option("--connection", default=None, help="a PostgreSQL connection the operator named")
@click.option("--query", is_flag=True, help="LOCATION is a SELECT, not a table (postgres)")
@click.option("--format", "format_", type=click.Choice(["parquet", "csv"]), default=None)
@click.option("--keep-copy", is_flag=True, help="store the encoded table as an upload does")
@click.pass_context
def register(
    ctx: click.Context,
    location: str,
    schema: str,
    name: str,
    budget_rho: str,
    budget_delta: str | None,
    discovery_rho: str | None,
    connection: str | None,
    query: bool,
    format_: str | None,
    keep_copy: bool,
) -> None:
    """Register a dataset where it lives (owner keys; docs/sources.md): LOCATION is
    s3://bucket/key, an absolute local path, or with --connection a PostgreSQL table (or, with
    --query, a SELECT). Prints the dataset."""
    source: dict[str, Any]
    if connection is not None:
        source = {"kind": "postgres", "connection": connection}
        source["query" if query else "table"] = location
    elif location.startswith("s3://"):
        source = {"kind": "s3", "uri": location}
    else:
        source = {"kind": "local", "uri": location}
    if format_ is not None and connection is None:
        source["format"] = format_
    with _client(ctx) as client:
        dataset = client.register(
            source,
            Path(schema),
            name,
            budget_rho,
            budget_delta=budget_delta,
            discovery_rho=discovery_rho,
            keep_copy=keep_copy,
        )
    for warning in dataset.warnings:
        click.echo(f"warning ({warning.code}): {warning.message}", err=True)
    _echo_json(dataset)


@remote.command()
@click.argument("table", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--show-values", is_flag=True, help="propose the data's own categories and bounds")
@click.pass_context
def draft(ctx: click.Context, table: Path, show_values: bool) -> None:
    """Propose a schema for TABLE (owner keys): the schema on stdout, the reasons on stderr."""
    with _client(ctx) as client:
        proposal = client.draft_schema(table, show_values=show_values)
    for reason in proposal.reasons:
        click.echo(f"{reason.name}: {reason.reason}", err=True)
    if proposal.warning:
        click.echo(f"warning: {proposal.warning}", err=True)
    _echo_json(proposal.schema_)


@remote.command()
@click.pass_context
def datasets(ctx: click.Context) -> None:
    """List the tenant's datasets."""
    with _client(ctx) as client:
        items = client.datasets()
    _echo_json(items)


@remote.command()
@click.argument("dataset")
@click.pass_context
def budget(ctx: click.Context, dataset: str) -> None:
    """Show DATASET's budget (total, spent, reserved, remaining ρ); standard error says what
    ρ protects ("per row", or "per person, at most k rows")."""
    with _client(ctx) as client:
        found = client.dataset(dataset)
    _echo_json(found.budget)
    click.echo(f"ρ and ε hold {found.privacy}", err=True)


@remote.command()
@click.argument("dataset")
@click.pass_context
def ledger(ctx: click.Context, dataset: str) -> None:
    """Show DATASET's privacy ledger."""
    with _client(ctx) as client:
        _echo_json(client.ledger(dataset))


@remote.command()
@click.argument("dataset")
@click.argument("rho")
@click.option("--delta", default=None, help="also raise the total δ")
@click.pass_context
def grant(ctx: click.Context, dataset: str, rho: str, delta: str | None) -> None:
    """Add RHO to DATASET's total budget (owner keys)."""
    with _client(ctx) as client:
        _echo_json(client.grant(dataset, rho, delta=delta))


def _job_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option("--rho", default=None, help="the job's ρ"),
            click.option("--epsilon", default=None, help="the job's ε (with --delta)"),
            click.option("--delta", default=None, help="the job's δ (with --epsilon)"),
            click.option("--rows", type=int, default=None, help="rows to synthesise"),
            click.option("--seed", type=int, default=None, help="seeds post-processing only"),
            click.option("--params", default=None, help="the method's params as JSON"),
        ]
    ):
        command = option(command)
    return command


def _params(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise click.BadParameter(f"not JSON: {error}", param_hint="--params") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--params")
    return cast(dict[str, Any], value)


@remote.command()
@click.argument("dataset")
@click.argument("method")
@_job_options
@click.option("--wait", "wait_", is_flag=True, help="wait until the job has finished")
@click.pass_context
def submit(
    ctx: click.Context,
    dataset: str,
    method: str,
    rho: str | None,
    epsilon: str | None,
    delta: str | None,
    rows: int | None,
    seed: int | None,
    params: str | None,
    wait_: bool,
) -> None:
    """Submit a METHOD job on DATASET (reserves its ρ); prints the job."""
    with _client(ctx) as client:
        job = client.submit(
            dataset,
            method,
            rho=rho,
            epsilon=epsilon,
            delta=delta,
            rows=rows,
            seed=seed,
            params=_params(params),
        )
        if wait_:
            job = client.wait(job, progress=sys.stderr.isatty())
    _echo_json(job)
    if wait_ and job.status != "succeeded":
        raise click.ClickException(f"job {job.id} {job.status}: {job.error or 'no detail'}")


@remote.command()
@click.argument("dataset")
@click.argument("method")
@_job_options
@click.pass_context
def estimate(
    ctx: click.Context,
    dataset: str,
    method: str,
    rho: str | None,
    epsilon: str | None,
    delta: str | None,
    rows: int | None,
    seed: int | None,
    params: str | None,
) -> None:
    """What a METHOD job on DATASET would cost; nothing is reserved."""
    with _client(ctx) as client:
        preview = client.estimate(
            dataset,
            method,
            rho=rho,
            epsilon=epsilon,
            delta=delta,
            rows=rows,
            seed=seed,
            params=_params(params),
        )
    _echo_json(preview)


@remote.command()
@click.argument("job")
@click.option("--timeout", type=float, default=None, help="give up after this many seconds")
@click.option("--progress/--no-progress", default=True, show_default=True)
@click.pass_context
def wait(ctx: click.Context, job: str, timeout: float | None, progress: bool) -> None:
    """Wait until JOB has finished; prints it; exits 1 unless it succeeded."""
    with _client(ctx) as client:
        try:
            finished = client.wait(job, progress=progress, timeout=timeout)
        except TimeoutError as error:
            raise click.ClickException(str(error)) from None
    _echo_json(finished)
    if finished.status != "succeeded":
        raise click.ClickException(
            f"job {finished.id} {finished.status}: {finished.error or 'no detail'}"
        )


_FORMAT = click.Choice(["csv", "parquet"])


def _format_for(output: Path, given: str | None) -> Literal["csv", "parquet"]:
    if given is not None:
        return cast(Literal["csv", "parquet"], given)
    return "parquet" if output.suffix.lower() in (".parquet", ".pq") else "csv"


@remote.command()
@click.argument("job")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--format", "format_", type=_FORMAT, default=None, help="default: by the suffix")
@click.pass_context
def download(ctx: click.Context, job: str, output: Path, format_: str | None) -> None:
    """Write a succeeded JOB's synthetic table to OUTPUT (CSV, or Parquet by its suffix)."""
    with _client(ctx) as client:
        client.download_to(job, output, _format_for(output, format_))
    click.echo(f"wrote {output}", err=True)


@remote.command()
@click.argument("job")
@click.option("--tier", type=click.Choice(["release", "owner"]), default="release")
@click.option("--format", "format_", type=click.Choice(["json", "html"]), default="json")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.pass_context
def report(ctx: click.Context, job: str, tier: str, format_: str, output: Path | None) -> None:
    """Print (or write to OUTPUT) a succeeded JOB's quality report."""
    tier_ = cast(Literal["release", "owner"], tier)
    with _client(ctx) as client:
        text = (
            client.report(job, tier=tier_, format="html")
            if format_ == "html"
            else json.dumps(client.report(job, tier=tier_), indent=2)
        )
    if output is None:
        click.echo(text)
    else:
        output.write_text(text, encoding="utf-8")
        click.echo(f"wrote {output}", err=True)


@remote.command()
@click.argument("job")
@click.option("--rows", type=int, default=None)
@click.option("--seed", type=int, default=None)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="wait for the sample and write its table here",
)
@click.option("--format", "format_", type=_FORMAT, default=None, help="default: by the suffix")
@click.pass_context
def sample(
    ctx: click.Context,
    job: str,
    rows: int | None,
    seed: int | None,
    output: Path | None,
    format_: str | None,
) -> None:
    """Draw more rows from a succeeded JOB's model (no ρ); prints the sample."""
    with _client(ctx) as client:
        drawn = client.sample(job, rows=rows, seed=seed)
        if output is not None:
            drawn = client.wait(drawn, progress=sys.stderr.isatty())
            if drawn.status != "succeeded":
                raise click.ClickException(f"sample {drawn.id} {drawn.status}: {drawn.error}")
            client.download_to(drawn, output, _format_for(output, format_))
            click.echo(f"wrote {output}", err=True)
    _echo_json(drawn)


@remote.command()
@click.argument("job")
@click.pass_context
def cancel(ctx: click.Context, job: str) -> None:
    """Cancel JOB."""
    with _client(ctx) as client:
        _echo_json(client.cancel(job))


@remote.command()
@click.pass_context
def methods(ctx: click.Context) -> None:
    """List the synthesis methods and their params' JSON schemas."""
    with _client(ctx) as client:
        _echo_json(client.methods())


# -- keys, quotas, approvals, webhooks, audit (issue 27) -----------------------------------------


def _instant(text: str | None, name: str) -> datetime | None:
    """An ISO 8601 instant with its time zone (``2026-12-04T18:00:00+00:00``), or None."""
    if text is None:
        return None
    try:
        instant = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO 8601 instant", param_hint=name) from None
    if instant.tzinfo is None:
        raise click.BadParameter("give a time zone (e.g. +00:00)", param_hint=name)
    return instant


@remote.group()
def keys() -> None:
    """The tenant's API keys (admin keys)."""


@keys.command("create")
@click.argument("name")
@click.option(
    "--role", type=click.Choice(["owner", "analyst", "admin"]), default="analyst", show_default=True
)
@click.option("--expires-at", default=None, help="ISO 8601 instant with a time zone")
@click.option("--dataset", "datasets", multiple=True, help="limit the key to this dataset (repeat)")
@click.pass_context
def keys_create(
    ctx: click.Context, name: str, role: str, expires_at: str | None, datasets: tuple[str, ...]
) -> None:
    """Create a key; prints it with its secret (``key``), shown this once."""
    role_ = cast(Literal["owner", "analyst", "admin"], role)
    with _client(ctx) as client:
        _echo_json(
            client.create_key(
                name,
                role_,
                expires_at=_instant(expires_at, "--expires-at"),
                datasets=list(datasets) or None,
            )
        )


@keys.command("list")
@click.pass_context
def keys_list(ctx: click.Context) -> None:
    """Every key of the tenant (no secrets)."""
    with _client(ctx) as client:
        _echo_json(client.list_keys())


@keys.command("rotate")
@click.argument("key")
@click.option("--overlap-seconds", type=int, default=3600, show_default=True)
@click.pass_context
def keys_rotate(ctx: click.Context, key: str, overlap_seconds: int) -> None:
    """A new key in place of KEY; the old secret keeps working for the overlap."""
    with _client(ctx) as client:
        _echo_json(client.rotate_key(key, overlap_seconds=overlap_seconds))


@keys.command("revoke")
@click.argument("key")
@click.pass_context
def keys_revoke(ctx: click.Context, key: str) -> None:
    """Revoke KEY at once."""
    with _client(ctx) as client:
        _echo_json(client.revoke_key(key))


@keys.command("expire")
@click.argument("key")
@click.argument("at", required=False)
@click.pass_context
def keys_expire(ctx: click.Context, key: str, at: str | None) -> None:
    """Set KEY's expiry to AT (ISO 8601 with a time zone), or clear it (no AT)."""
    with _client(ctx) as client:
        _echo_json(client.set_key_expiry(key, _instant(at, "AT")))


@remote.group()
def quotas() -> None:
    """Quotas of analyst keys on a dataset, and its quota policy (owner keys)."""


@quotas.command("list")
@click.argument("dataset")
@click.pass_context
def quotas_list(ctx: click.Context, dataset: str) -> None:
    """The dataset's policy and live quotas."""
    with _client(ctx) as client:
        _echo_json(client.quotas(dataset))


@quotas.command("set")
@click.argument("dataset")
@click.argument("rho")
@click.option("--key", "key_id", default=None, help="the analyst key's id")
@click.option("--group", default=None, help="a group's name (with --member)")
@click.option("--member", "members", multiple=True, help="a key id of the group (repeat)")
@click.pass_context
def quotas_set(
    ctx: click.Context,
    dataset: str,
    rho: str,
    key_id: str | None,
    group: str | None,
    members: tuple[str, ...],
) -> None:
    """Give a key (--key) or a group of keys (--group, --member …) a quota of RHO."""
    if (key_id is None) == (group is None):
        raise click.UsageError("give --key or --group")
    with _client(ctx) as client:
        if key_id is not None:
            _echo_json(client.set_quota(dataset, key_id, rho))
        else:
            assert group is not None
            _echo_json(client.set_group_quota(dataset, group, rho, list(members)))


@quotas.command("delete")
@click.argument("dataset")
@click.option("--key", "key_id", default=None, help="the analyst key's id")
@click.option("--group", default=None, help="a group's name")
@click.pass_context
def quotas_delete(ctx: click.Context, dataset: str, key_id: str | None, group: str | None) -> None:
    """Remove a key's (--key) or a group's (--group) quota."""
    if (key_id is None) == (group is None):
        raise click.UsageError("give --key or --group")
    with _client(ctx) as client:
        if key_id is not None:
            client.delete_quota(dataset, key_id)
        else:
            assert group is not None
            client.delete_group_quota(dataset, group)
    click.echo("removed", err=True)


@quotas.command("policy")
@click.argument("dataset")
@click.option("--mode", type=click.Choice(["shared", "reserved"]), default=None)
@click.option("--quota-required/--no-quota-required", default=None)
@click.option("--approval-required/--no-approval-required", default=None)
@click.pass_context
def quotas_policy(
    ctx: click.Context,
    dataset: str,
    mode: str | None,
    quota_required: bool | None,
    approval_required: bool | None,
) -> None:
    """Show the dataset's quota policy, or change the parts given (the rest stay)."""
    with _client(ctx) as client:
        current = client.quotas(dataset).policy
        if mode is None and quota_required is None and approval_required is None:
            _echo_json(current)
            return
        _echo_json(
            client.set_quota_policy(
                dataset,
                cast(Literal["shared", "reserved"], mode or current.mode),
                quota_required=(
                    current.quota_required if quota_required is None else quota_required
                ),
                approval_required=(
                    current.approval_required if approval_required is None else approval_required
                ),
            )
        )


@remote.group()
def approvals() -> None:
    """Jobs waiting for an owner's approval (owner keys)."""


@approvals.command("list")
@click.argument("dataset")
@click.pass_context
def approvals_list(ctx: click.Context, dataset: str) -> None:
    """The dataset's pending jobs, oldest first, each with its dry-run preview."""
    with _client(ctx) as client:
        _echo_json(client.approvals(dataset))


@approvals.command("approve")
@click.argument("job")
@click.pass_context
def approvals_approve(ctx: click.Context, job: str) -> None:
    """Approve JOB: it is queued."""
    with _client(ctx) as client:
        _echo_json(client.approve(job))


@approvals.command("reject")
@click.argument("job")
@click.option("--reason", required=True, help="shown to the analyst")
@click.pass_context
def approvals_reject(ctx: click.Context, job: str, reason: str) -> None:
    """Reject JOB with a reason; its reservation is released."""
    with _client(ctx) as client:
        _echo_json(client.reject(job, reason))


@remote.group()
def webhooks() -> None:
    """Webhook subscriptions and their deliveries (admin keys)."""


@webhooks.command("create")
@click.argument("url")
@click.option("--event", "events", multiple=True, required=True, help="an event name (repeat)")
@click.option("--description", default="")
@click.option("--disabled", is_flag=True)
@click.option("--budget-threshold-rho", default=None, help="for budget.below_threshold")
@click.pass_context
def webhooks_create(
    ctx: click.Context,
    url: str,
    events: tuple[str, ...],
    description: str,
    disabled: bool,
    budget_threshold_rho: str | None,
) -> None:
    """Subscribe URL; prints the subscription with its signing secret, shown this once."""
    with _client(ctx) as client:
        _echo_json(
            client.create_webhook(
                url,
                cast(Any, list(events)),
                description=description,
                enabled=not disabled,
                budget_threshold_rho=budget_threshold_rho,
            )
        )


@webhooks.command("list")
@click.pass_context
def webhooks_list(ctx: click.Context) -> None:
    """The tenant's subscriptions."""
    with _client(ctx) as client:
        _echo_json(client.webhooks())


@webhooks.command("delete")
@click.argument("webhook")
@click.pass_context
def webhooks_delete(ctx: click.Context, webhook: str) -> None:
    """Delete WEBHOOK; its pending deliveries are discarded."""
    with _client(ctx) as client:
        client.delete_webhook(webhook)
    click.echo("deleted", err=True)


@webhooks.command("deliveries")
@click.argument("webhook")
@click.option("--limit", type=int, default=50, show_default=True)
@click.option("--offset", type=int, default=0)
@click.pass_context
def webhooks_deliveries(ctx: click.Context, webhook: str, limit: int, offset: int) -> None:
    """A page of WEBHOOK's delivery log, newest event first."""
    with _client(ctx) as client:
        _echo_json(client.webhook_deliveries(webhook, limit=limit, offset=offset))


@webhooks.command("replay")
@click.argument("delivery")
@click.pass_context
def webhooks_replay(ctx: click.Context, delivery: str) -> None:
    """Send DELIVERY again."""
    with _client(ctx) as client:
        _echo_json(client.replay_delivery(delivery))


@remote.group()
def audit() -> None:
    """The tenant's audit trail (admin keys)."""


@audit.command("export")
@click.option("--format", "format_", type=click.Choice(["jsonl", "csv"]), default="jsonl")
@click.option("--since", default=None, help="ISO 8601 instant with a time zone")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None)
@click.pass_context
def audit_export(ctx: click.Context, format_: str, since: str | None, output: Path | None) -> None:
    """Export the trail (to standard output, or to --output); ``rhosynth audit verify --file``
    checks a JSON Lines export offline."""
    start = _instant(since, "--since")
    fmt = cast(Literal["jsonl", "csv"], format_)
    with _client(ctx) as client:
        if output is not None:
            client.download_audit(output, format=fmt, since=start)
            click.echo(f"wrote {output}", err=True)
        elif fmt == "jsonl":
            for line in client.audit_lines(since=start):
                click.echo(line)
        else:
            with tempfile.TemporaryDirectory() as folder:
                path = client.download_audit(Path(folder) / "audit.csv", format="csv", since=start)
                click.echo(path.read_text(encoding="utf-8"), nl=False)


if __name__ == "__main__":
    remote()
