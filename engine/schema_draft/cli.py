"""``rhosynth schema draft DATA``: print a draft schema for a local table (no server involved)."""

from __future__ import annotations

import json
from pathlib import Path

import click

# engine.schema_draft.inference (numpy, pandas, pyarrow) is imported when `draft` runs, not for
# `rhosynth schema draft --help`.


@click.group("schema", short_help="Draft a schema for a raw CSV/Parquet table.")
def schema() -> None:
    """Schemas for raw tables."""


@schema.command("draft")
@click.argument("data", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--missing",
    "missing",
    multiple=True,
    help="a spelling of a missing cell (repeat; default: the upload's default set, docs/api.md)",
)
@click.option(
    "--show-values",
    is_flag=True,
    help="propose the data's own categories and bounds (visible to every analyst once uploaded) "
    "instead of DP discovery and rounded bounds",
)
def draft(data: Path, missing: tuple[str, ...], show_values: bool) -> None:
    """Read DATA once and print a schema for it as JSON; the reasons go to standard error.

    A draft accepted as is publishes no value from DATA: categories and quantile bins are
    learned with DP at upload (charged to the dataset's budget), ranges too (inside public windows),
    identifiers and free text are ignored.
    """
    from engine.schema_draft.inference import DEFAULT_MISSING_VALUES, DraftError, draft_schema

    try:
        result = draft_schema(
            data, missing_values=missing or DEFAULT_MISSING_VALUES, show_values=show_values
        )
    except DraftError as error:
        raise click.ClickException(str(error)) from None
    click.echo(json.dumps(result.to_json(), indent=2))
    width = max(len(column.entry["name"]) for column in result.columns)
    for column in result.columns:
        click.echo(f"{column.entry['name']:<{width}}  {column.reason}", err=True)
    if show_values:
        click.echo(
            "warning: the categories and bounds above are the data's own values; every analyst "
            "of the dataset will see whatever the schema declares",
            err=True,
        )
    elif result.discovers:
        click.echo(
            "note: the discovery clauses are charged to the dataset's budget at upload",
            err=True,
        )
    click.echo(f"warning: {result.disclosure()}", err=True)
    unit = result.privacy_unit
    if unit is not None:
        click.echo(f"suggestion (privacy unit): {unit.reason}", err=True)
