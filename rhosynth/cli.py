"""``rhosynth remote``: use a running rhosynth service from the shell, through
:class:`rhosynth.client.Client` (no curl needed).

Configured by ``RHOSYNTH_URL`` and ``RHOSYNTH_API_KEY`` (or ``--url`` and ``--key``). Objects are
printed as JSON on standard output; progress and notes go to standard error. An API error prints
the server's detail and exits with status 1. Imports nothing of the server or the engine.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, cast

import click
from pydantic import BaseModel

from rhosynth.client import Client
from rhosynth.errors import ApiError, OverBudget


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
    """Show DATASET's budget (total, spent, reserved, remaining ρ)."""
    with _client(ctx) as client:
        _echo_json(client.budget(dataset))


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


if __name__ == "__main__":
    remote()
