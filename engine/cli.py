"""``rhosynth synthesize``, ``evaluate``, ``sample`` and ``report``: the engine on local files,
no service needed.

``synthesize`` reads a CSV or Parquet table, checks every value against the declared schema (the
same rules as the service: missing, duplicate or extra columns and values outside the declared
domain are refused, with messages that name columns and count rows but never quote a value),
runs a mechanism from the registry with an exact ρ and writes the synthetic table in the original
value space. ``evaluate`` encodes a real and a synthetic table with the same schema and prints
their mean k-way marginal TVD (engine.evaluation) as JSON. ``synthesize --save-model M`` also
saves the fitted model with the schema; ``sample M`` draws more rows from it (post-processing: no
data read, no budget spent), written the same way. ``report`` writes the quality report of
engine.reports: the owner tier (it reads the real table), and the release tier from a release
record when one is given.

Privacy. DP noise comes from the operating system's CSPRNG inside the mechanism; ``--seed`` seeds
post-processing only (sampling rows, drawing numeric values inside their bins), exactly as in the
service. Running ``synthesize`` twice on the same data spends ρ twice: this command keeps no
ledger, so composition across runs is the caller's responsibility.

Reading and writing the local tables is engine/tables/local.py; these are the commands. They
import nothing from app/ or workers/: ``rhosynth`` loads this module lazily.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import click

from engine.accounting import RHO_QUANTUM, rho_from_epsilon_delta
from engine.tables.files import atomic_path

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pandas as pd
    import pyarrow as pa
    import pydantic

    from engine.constraints.keep import Sampler
    from engine.discovery.plan import Discovered
    from engine.domain import CodeArray
    from engine.mechanisms import Mechanism
    from engine.privacy_unit import Truncation
    from engine.release.record import ReleaseRecord
    from engine.tables.encoding import SchemaSpec, TableSchema

# The commands import numpy, pandas, pyarrow, scipy and the engine's internals in their bodies,
# never here: `rhosynth <command> --help` builds every option from this module alone
# (tests/engine/test_cli_imports.py checks that it imports none of them).

METHODS = ("aim", "cipher", "dpcopula", "independent", "mst", "ppsyn", "privmrf", "privsyn")
"""The registry's method names (engine.mechanisms.MECHANISMS), for ``--method``'s help without
importing every mechanism; tests/engine/test_cli_imports.py checks that they are the same."""

MAX_EPSILON = Decimal(1000)
"""The service's cap on ε (a larger ε gives no meaningful guarantee)."""
MAX_DECIMAL_EXPONENT = 1000
MAX_MESSAGE_LENGTH = 500

_RHO_EXPONENT = RHO_QUANTUM.adjusted()  # -12: the ledger's decimal places


class CommandError(click.ClickException):
    """A refusal printed as one line, ``Error: <message>``, with exit code 2 (no traceback)."""

    exit_code = 2

    def __init__(self, message: str) -> None:
        one_line = " ".join(message.split())
        if len(one_line) > MAX_MESSAGE_LENGTH:
            one_line = one_line[: MAX_MESSAGE_LENGTH - 1] + "…"
        super().__init__(one_line)


# --------------------------------------------------------------------------------------------
# Budgets and parameters
# --------------------------------------------------------------------------------------------


def _parse_decimal(text: str, option: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise CommandError(f"{option} must be a decimal number") from None
    if not value.is_finite():
        raise CommandError(f"{option} must be a finite number")
    if value and not -MAX_DECIMAL_EXPONENT <= value.adjusted() <= MAX_DECIMAL_EXPONENT:
        # e.g. "1e999999999": arithmetic on it would overflow the decimal context.
        raise CommandError(f"{option} is out of range")
    return value


def parse_rho(text: str) -> Fraction:
    """``--rho``: a positive decimal with at most 12 decimal places (the ledger's resolution)."""
    value = _parse_decimal(text, "--rho")
    if value <= 0:
        raise CommandError("--rho must be positive")
    # _parse_decimal bounded the exponent, so normalize() cannot over- or underflow here.
    exponent = value.normalize().as_tuple().exponent
    if isinstance(exponent, int) and exponent < _RHO_EXPONENT:
        raise CommandError("--rho has at most 12 decimal places")
    return Fraction(value)


def rho_for_epsilon_delta(epsilon_text: str, delta_text: str) -> tuple[Fraction, Decimal, Decimal]:
    """``--epsilon``/``--delta``: the largest ρ whose CKS 2020 conversion gives (ε, δ)-DP."""
    epsilon = _parse_decimal(epsilon_text, "--epsilon")
    delta = _parse_decimal(delta_text, "--delta")
    if not 0 < epsilon <= MAX_EPSILON:
        raise CommandError(f"--epsilon must be in (0, {MAX_EPSILON}]")
    if not 0 < delta < 1:
        raise CommandError("--delta must be strictly between 0 and 1")
    try:
        rho = rho_from_epsilon_delta(epsilon, delta)
    except ValueError as error:
        raise CommandError(str(error)) from None
    return Fraction(rho), epsilon, delta


def _json_or_text(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError:
        return text


def parse_params(pairs: Sequence[str]) -> dict[str, Any]:
    """``--param key=value`` pairs; a value is JSON when it parses as JSON, else a string."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CommandError("--param takes key=value")
        if key in params:
            raise CommandError(f"--param {key!r} is given twice")
        params[key] = _json_or_text(value)
    return params


def _mechanism(name: str) -> Mechanism:
    from engine.mechanisms import MECHANISMS, get_mechanism

    try:
        return get_mechanism(name)
    except KeyError:
        available = ", ".join(sorted(MECHANISMS))
        raise CommandError(f"unknown method {name!r}; available: {available}") from None


def _validated_params(mechanism: Mechanism, raw: Mapping[str, Any]) -> pydantic.BaseModel:
    import pydantic

    try:
        return mechanism.validate_params(raw)
    except pydantic.ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'params'!r}: {item['msg']}"
            for item in error.errors(include_url=False)
        )
        raise CommandError(f"invalid --param for method {mechanism.name!r}: {problems}") from None


# --------------------------------------------------------------------------------------------
# Discovery on a local file
# --------------------------------------------------------------------------------------------


def discover_schema(
    path: Path,
    spec: SchemaSpec,
    *,
    budget_rho: Fraction,
    discovery_rho: Fraction | None,
    discovery_delta: Fraction,
    keep: np.ndarray | None = None,
) -> tuple[TableSchema, Discovered | None]:
    """Complete ``spec`` by DP discovery on the file at ``path`` (the service's mechanisms and
    budget rules, engine/discovery): one counting pass, then the release. With a privacy unit,
    ``keep`` marks the rows truncation kept (:func:`truncate_file`) and the releases are
    calibrated to its k. :class:`TableError` (naming columns, never values) if it cannot run."""
    import pyarrow as pa

    from engine.columns.spec import DELTA_QUANTUM
    from engine.columns.spec import RHO_QUANTUM as RHO_GRID
    from engine.discovery.plan import DiscoveryRefused, QuantileRequest, RangeRequest, allocate
    from engine.discovery.schema import discover, provisional, requests_for, resolve
    from engine.tables.encoding import SchemaError
    from engine.tables.local import PARQUET_MAGIC, TableError, csv_batches, parquet_batches
    from engine.tables.units import kept_batches

    try:
        requests = requests_for(spec)
        if not requests:
            return resolve(spec, None), None
        budget = allocate(
            requests,
            budget_rho=budget_rho,
            budget_delta=discovery_delta,
            discovery_rho=discovery_rho,
            rho_quantum=RHO_GRID,
            delta_quantum=DELTA_QUANTUM,
        )
        reading = provisional(spec)
        with open(path, "rb") as handle:
            magic = handle.read(4)

        def batches() -> Iterator[dict[str, pd.Series | pa.Array]]:
            # One pass over the file (discovery makes two when it learns a range); numbers are
            # read in Arrow, categories in pandas.
            read = parquet_batches if magic == PARQUET_MAGIC else csv_batches
            rows = read(path, reading, False)
            for batch in rows if keep is None else kept_batches(rows, keep):
                out: dict[str, pd.Series | pa.Array] = {}
                for request in requests:
                    values = batch.column(request.column)
                    if isinstance(values, pa.DictionaryArray):
                        values = values.dictionary_decode()
                    numbers = isinstance(request, QuantileRequest | RangeRequest)
                    out[request.column] = values if numbers else values.to_pandas()
                yield out

        unit = spec.privacy_unit
        found = discover(
            spec, budget, batches, contribution_bound=1 if unit is None else unit.max_rows
        )
        return resolve(spec, found), found
    except OSError:
        raise TableError("the file cannot be read") from None
    except (DiscoveryRefused, SchemaError, ValueError) as error:
        raise TableError(f"discovery: {error}") from None


def truncate_file(path: Path, spec: SchemaSpec) -> Truncation | None:
    """With a privacy unit in ``spec``: which rows of the file at ``path`` to keep, at most k
    per unit chosen by a keyed hash under a fresh key (engine/tables/units.py, as the service
    does at upload); None without one. :class:`TableError` (naming no value) if it cannot."""
    from engine.discovery.schema import provisional
    from engine.tables.encoding import SchemaError
    from engine.tables.local import PARQUET_MAGIC, TableError, csv_batches, parquet_batches
    from engine.tables.units import UnitCollector, reading_schema

    unit = spec.privacy_unit
    if unit is None:
        return None
    try:
        schema = provisional(spec)
        reading = reading_schema(schema)
        with open(path, "rb") as handle:
            magic = handle.read(4)
        read = parquet_batches if magic == PARQUET_MAGIC else csv_batches
        collector = UnitCollector(unit, reading.names, schema.missing_values)
        for batch in read(path, reading, False):
            collector.add(batch)
        return collector.truncate()
    except OSError:
        raise TableError("the file cannot be read") from None
    except (SchemaError, ValueError) as error:
        raise TableError(f"privacy unit: {error}") from None


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------


@dataclass
class ProgressBar:
    """A one-line text progress bar on stderr, redrawn in place with carriage returns.

    Driven by a mechanism's progress callback ``(fraction, stage)``; redraws only when the whole
    percentage or the stage changes.
    """

    enabled: bool = True
    width: int = 30
    _last: tuple[int, str] | None = None
    _drawn_length: int = 0

    def __call__(self, fraction: float, stage: str) -> None:
        if not self.enabled:
            return
        percent = math.floor(100 * min(max(fraction, 0.0), 1.0))
        if self._last == (percent, stage):
            return
        self._last = (percent, stage)
        filled = round(self.width * percent / 100)
        line = f"[{'#' * filled}{'.' * (self.width - filled)}] {percent:3d}% {stage}"
        padding = " " * max(0, self._drawn_length - len(line))
        self._drawn_length = len(line)
        click.echo("\r" + line + padding, err=True, nl=False)

    def close(self) -> None:
        """End the bar's line so the next message starts on its own."""
        if self._drawn_length:
            click.echo("", err=True)
            self._drawn_length = 0


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def _format_decimal(value: Decimal) -> str:
    return "0" if value == 0 else format(value.normalize(), "f")


def _format_rho(rho: Fraction) -> str:
    # ρ is a multiple of 1e-12 in both input forms, so this is exact.
    return _format_decimal(Decimal(rho.numerator) / Decimal(rho.denominator))


def _parse_delta(text: str) -> Fraction:
    try:
        value = Decimal(text)
    except ArithmeticError:
        raise CommandError("--discovery-delta must be a decimal in (0, 1)") from None
    if not value.is_finite() or not 0 < value < 1:
        raise CommandError("--discovery-delta must be a decimal in (0, 1)")
    return Fraction(value)


def _load_schema_or_fail(path: Path) -> TableSchema:
    from engine.tables.local import TableError, load_schema

    try:
        return load_schema(path)
    except TableError as error:
        raise CommandError(str(error)) from None


def _load_table_or_fail(
    label: str, path: Path, schema: TableSchema, *, allow_extra_columns: bool, narrow: bool = False
) -> CodeArray:
    from engine.tables.local import TableError, load_table

    try:
        return load_table(path, schema, allow_extra_columns=allow_extra_columns, narrow=narrow)
    except TableError as error:
        raise CommandError(f"{label} ({path}): {error}") from None


def _check_output(out: Path, inputs: Sequence[Path], option: str = "--out") -> None:
    if out.is_dir():
        raise CommandError(f"{option} {str(out)!r} is a directory")
    if not out.parent.is_dir():
        raise CommandError(f"{option}: the directory {str(out.parent)!r} does not exist")
    for source in inputs:
        if out.exists() and source.exists() and out.samefile(source):
            raise CommandError(f"{option} must not overwrite an input file")


def _write_rows(
    codes: npt.NDArray[np.integer[Any]],
    schema: TableSchema,
    rng: np.random.Generator,
    out: Path,
    file_format: Literal["csv", "parquet"] | None = None,
    *,
    sampler: Sampler | None = None,
) -> None:
    """Decode synthetic ``codes`` with ``schema`` (``rng``: values inside bins) and write them,
    in row batches, atomically (as :func:`write_table`, whose formats it keeps): the one path
    from codes to a file, shared by ``synthesize`` and ``sample``. The schema's rules are kept
    (rows that break one redrawn from ``sampler``, the fitted model, then repaired; no ρ) and
    what that did is printed to stderr."""
    from engine.tables.local import is_parquet_name
    from engine.tables.synthetic_output import write_synthetic

    parquet = file_format == "parquet" if file_format is not None else is_parquet_name(out)
    try:
        with atomic_path(out) as temporary:
            kept = write_synthetic(
                schema, codes, rng, temporary, "parquet" if parquet else "csv", sampler=sampler
            )
    except OSError as error:
        raise CommandError(f"--out: cannot write {str(out)!r} ({error.strerror})") from None
    if kept is not None:
        report = kept.report
        click.echo(
            f"rules: {report.violating_rows_before} of {report.rows} rows broke a rule; "
            f"{report.redrawn_rows} redrawn from the model, {report.repaired_rows} repaired, "
            f"{report.remaining_rows} still breaking",
            err=True,
        )


PathArgument = click.Path(path_type=Path, dir_okay=False)


@click.command("synthesize", short_help="Synthesise a DP copy of a local CSV/Parquet table.")
@click.argument("data", type=PathArgument)
@click.option(
    "--schema", "schema_path", required=True, type=PathArgument, help="the declared schema (JSON)"
)
@click.option("--method", required=True, help=f"one of: {', '.join(METHODS)}")
@click.option("--rho", "rho_text", default=None, help="budget as ρ (zCDP), ≤ 12 decimal places")
@click.option("--epsilon", "epsilon_text", default=None, help="budget as (ε, δ): ε, with --delta")
@click.option("--delta", "delta_text", default=None, help="budget as (ε, δ): δ in (0, 1)")
@click.option(
    "--rows",
    type=click.IntRange(min=1),
    default=None,
    help="rows to synthesise (default: the mechanism's noisy estimate of the row count)",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=None,
    help="seeds post-processing only (sampling), never DP noise",
)
@click.option(
    "--param",
    "param_pairs",
    multiple=True,
    metavar="KEY=VALUE",
    help="a mechanism parameter (value parsed as JSON when possible); repeatable",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="output file: CSV, or Parquet if it ends with .parquet",
)
@click.option(
    "--discovery-rho",
    "discovery_rho_text",
    default=None,
    help="of the budget, the ρ shared by the schema's discovery clauses without their own "
    "(default: a fifth, less on large tables: docs/discovery.md)",
)
@click.option(
    "--discovery-delta",
    "discovery_delta_text",
    default=None,
    help="δ for discovering categories without a candidate list ((ρ, δ)-DP; required for them)",
)
@click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="draw a progress bar on stderr (default: when stderr is a terminal)",
)
@click.option(
    "--save-model",
    "save_model",
    default=None,
    type=click.Path(path_type=Path),
    help="also save the fitted model (with the schema) here; `rhosynth sample` draws more rows "
    "from it at no privacy cost",
)
@click.option(
    "--save-record",
    "save_record",
    default=None,
    type=click.Path(path_type=Path),
    help="also save the release record (the noisy measurements and charges) here, for "
    "`rhosynth report --record`",
)
def synthesize(
    data: Path,
    schema_path: Path,
    method: str,
    rho_text: str | None,
    epsilon_text: str | None,
    delta_text: str | None,
    rows: int | None,
    seed: int | None,
    param_pairs: tuple[str, ...],
    out: Path,
    discovery_rho_text: str | None,
    discovery_delta_text: str | None,
    show_progress: bool | None,
    save_model: Path | None,
    save_record: Path | None,
) -> None:
    """Synthesise a differentially private copy of DATA (CSV or Parquet) into --out.

    A schema that leaves bins or categories to DP discovery (e.g. one from `rhosynth schema
    draft`) has them learned first, from the same budget (docs/discovery.md).

    The budget is --rho R, or --epsilon E with --delta D (converted to the largest ρ whose
    ρ-zCDP guarantee gives (E, D)-DP). Values outside the declared schema are refused. Every run
    spends its budget again: there is no ledger here.

    --save-model M also writes the fitted model and the schema to M, for `rhosynth sample`;
    --save-record R writes the release record (its noisy measurements), for `rhosynth report`.
    """
    import numpy as np

    from engine.domain import Dataset
    from engine.release.from_result import record_from_result
    from engine.release.model_file import write_model_file
    from engine.tables.local import TableError, load_spec
    from engine.tables.units import without_unit

    started = time.perf_counter()
    epsilon: Decimal | None = None
    delta: Decimal | None = None
    if rho_text is not None:
        if epsilon_text is not None or delta_text is not None:
            raise CommandError("give the budget as --rho or as --epsilon with --delta, not both")
        rho = parse_rho(rho_text)
    elif epsilon_text is not None and delta_text is not None:
        rho, epsilon, delta = rho_for_epsilon_delta(epsilon_text, delta_text)
    elif epsilon_text is not None or delta_text is not None:
        raise CommandError("--epsilon and --delta must be given together")
    else:
        raise CommandError("a budget is required: --rho, or --epsilon with --delta")

    mechanism = _mechanism(method)
    params = _validated_params(mechanism, parse_params(param_pairs))
    if save_model is not None and not mechanism.resamplable:
        raise CommandError(
            f"--save-model: method {method!r} keeps no re-samplable model (docs/methods.md)"
        )
    try:
        spec = load_spec(schema_path)
    except TableError as error:
        raise CommandError(str(error)) from None
    _check_output(out, [data, schema_path])
    if save_model is not None:
        _check_output(save_model, [data, schema_path], option="--save-model")
    if save_model is not None and save_model.resolve() == out.resolve():
        raise CommandError("--save-model and --out must be different files")
    if save_record is not None:
        _check_output(save_record, [data, schema_path], option="--save-record")
        if save_record.resolve() in {
            out.resolve(),
            *([save_model.resolve()] if save_model else []),
        }:
            raise CommandError("--save-record must be a file of its own")
    pool = None if discovery_rho_text is None else parse_rho(discovery_rho_text)
    discovery_delta = (
        Fraction(0) if discovery_delta_text is None else _parse_delta(discovery_delta_text)
    )
    unit = spec.privacy_unit
    try:
        truncation = truncate_file(data, spec)
        keep = None if truncation is None else truncation.keep
        file_schema, found = discover_schema(
            data,
            spec,
            budget_rho=rho,
            discovery_rho=pool,
            discovery_delta=discovery_delta,
            keep=keep,
        )
    except TableError as error:
        raise CommandError(f"DATA ({data}): {error}") from None
    # The unit's column is read for truncation only: no output, model or record names it.
    schema = without_unit(file_schema, unit)
    if truncation is not None and unit is not None:
        click.echo(
            f"privacy unit: at most {unit.max_rows} rows per person kept; truncation removed "
            f"{truncation.rows_removed} of {truncation.rows_in} rows ({truncation.units_truncated} "
            f"of {truncation.units} units; {truncation.rows_without_unit} rows without a unit) "
            "(exact, for you only: not DP)",
            err=True,
        )
    if found is not None:
        rho -= found.rho  # the method spends what discovery left of the budget
        click.echo(
            f"discovery: rho={_format_rho(found.rho)}, delta={float(found.delta):g} "
            f"({', '.join(sorted(found.costs()))})",
            err=True,
        )
        if rho <= 0:
            raise CommandError("discovery used the whole budget: lower --discovery-rho")

    # In the narrowest type, as the worker hands the codes over (10 M rows × 14 columns: 140 MB
    # instead of 1.1 GB; every method gives the same release either way).
    codes = _load_table_or_fail("DATA", data, file_schema, allow_extra_columns=False, narrow=True)
    if keep is not None:
        codes = np.asfortranarray(codes[keep])
        if not codes.shape[0]:
            raise CommandError("DATA: no row has a privacy unit: every row was dropped")
    codes.flags.writeable = False  # Dataset keeps a read-only array without copying it
    dataset = Dataset(schema.domain(), codes)
    # Post-processing randomness only; the mechanism draws DP noise from the OS CSPRNG.
    rng = np.random.default_rng(seed)
    bar = ProgressBar(enabled=_stderr_is_terminal() if show_progress is None else show_progress)
    try:
        result = mechanism.run(
            dataset,
            rho,
            params,
            rng=rng,
            rows=rows,
            progress=bar,
            contribution_bound=1 if unit is None else unit.max_rows,
        )
    except Exception as error:
        bar.close()
        raise CommandError(f"method {method!r} failed: {type(error).__name__}: {error}") from None
    bar.close()

    model = result.model
    _write_rows(result.codes, schema, rng, out, sampler=model.sample if model is not None else None)
    if save_model is not None:
        if result.model is None:  # run() checks this against resamplable; never reached
            raise CommandError(f"method {method!r} returned no model")
        try:
            write_model_file(save_model, result.model, schema)
        except OSError as error:
            raise CommandError(
                f"--save-model: cannot write {str(save_model)!r} ({error.strerror})"
            ) from None
    if save_record is not None:
        record = record_from_result(result, schema.domain(), mechanism.name, params, rho)
        _write_bytes(save_record, record.to_bytes(), "--save-record")
    budget = f"rho={_format_rho(rho)}"
    if unit is not None:
        budget += f" per person, at most {unit.max_rows} row{'s' if unit.max_rows > 1 else ''}"
    if epsilon is not None and delta is not None:
        if found is None:
            budget += f" (epsilon={epsilon.normalize():g}, delta={delta.normalize():g})"
        else:  # discovery's δ adds to the conversion's (docs/privacy.md, "The δ dimension")
            total = delta + Decimal(found.delta.numerator) / Decimal(found.delta.denominator)
            budget += f" (with discovery: epsilon={epsilon.normalize():g}, delta={total:g})"
    click.echo(
        f"{mechanism.name}: {budget}, {result.codes.shape[0]} rows, "
        f"{time.perf_counter() - started:.2f} s -> {out}",
        err=True,
    )


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: no bar
        return False


@click.command("evaluate", short_help="Mean k-way marginal TVD between two tables, as JSON.")
@click.argument("real", type=PathArgument)
@click.argument("synth", type=PathArgument)
@click.option(
    "--schema", "schema_path", required=True, type=PathArgument, help="the declared schema (JSON)"
)
@click.option(
    "--max-way", type=click.IntRange(min=1), default=3, show_default=True, help="largest k"
)
@click.option(
    "--max-marginals",
    type=click.IntRange(min=1),
    default=None,
    help="average each k over at most this many uniformly sampled column sets (default: all)",
)
@click.option(
    "--seed", type=click.IntRange(min=0), default=0, show_default=True, help="seeds that sample"
)
def evaluate(
    real: Path,
    synth: Path,
    schema_path: Path,
    max_way: int,
    max_marginals: int | None,
    seed: int,
) -> None:
    """Print the mean TVD of the k-way marginals of REAL and SYNTH (k = 1..--max-way) as JSON.

    Both tables are encoded with the schema (categories as text, numeric values into their bins,
    codes as codes); columns the schema does not declare are ignored. TVD is ½·Σ|p − q| between
    normalised histograms, averaged over every set of k columns.

    Example: rhosynth evaluate tests/fixtures/adult-sample.csv synth.csv --schema
    tests/fixtures/adult-domain.json
    """
    import numpy as np

    from engine.evaluation import mean_tvd

    schema = _load_schema_or_fail(schema_path)
    real_codes = _load_table_or_fail("REAL", real, schema, allow_extra_columns=True)
    synth_codes = _load_table_or_fail("SYNTH", synth, schema, allow_extra_columns=True)
    scores = mean_tvd(
        real_codes,
        synth_codes,
        schema.domain(),
        max_way=max_way,
        max_marginals=max_marginals,
        rng=np.random.default_rng(seed),
    )
    report: dict[str, Any] = {str(k): value for k, value in scores.items()}
    report["n_real"] = int(real_codes.shape[0])
    report["n_synth"] = int(synth_codes.shape[0])
    if max_marginals is not None:
        report["max_marginals"] = max_marginals
    click.echo(json.dumps(report))


@click.command("sample", short_help="Draw more rows from a saved model (no privacy cost).")
@click.argument("model_path", metavar="MODEL", type=PathArgument)
@click.option(
    "--rows",
    type=click.IntRange(min=0),
    default=None,
    help="rows to draw (default: the model's noisy estimate of the row count)",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=None,
    help="seeds the draw; the same model, rows and seed give the same file",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="output file",
)
@click.option(
    "--format",
    "file_format",
    type=click.Choice(["csv", "parquet"]),
    default=None,
    help="output format (default: Parquet if --out ends with .parquet, else CSV)",
)
def sample(
    model_path: Path, rows: int | None, seed: int | None, out: Path, file_format: str | None
) -> None:
    """Draw rows from MODEL (written by `synthesize --save-model`) into --out.

    Post-processing of an earlier release: no data is read and no budget is spent. Rows are
    decoded and written exactly as `synthesize` writes them. The same MODEL, --rows and --seed
    give the same file; they need not reproduce the `synthesize` run's own output.
    """
    import numpy as np

    from engine.models.fitted import ModelError, resolve_rows
    from engine.release.model_file import load_model_file

    started = time.perf_counter()
    _check_output(out, [model_path])
    try:
        model, schema = load_model_file(model_path)
    except FileNotFoundError:
        raise CommandError(f"MODEL {str(model_path)!r} does not exist") from None
    except OSError as error:
        raise CommandError(f"MODEL: cannot read {str(model_path)!r} ({error.strerror})") from None
    except ModelError as error:
        raise CommandError(f"MODEL ({model_path}): {error}") from None
    count = resolve_rows(rows, model.estimated_total)
    rng = np.random.default_rng(seed)
    codes = model.sample(count, rng)
    fmt: Literal["csv", "parquet"] | None = (
        "parquet" if file_format == "parquet" else "csv" if file_format == "csv" else None
    )
    _write_rows(codes, schema, rng, out, fmt, sampler=model.sample)
    click.echo(
        f"{model.method} model: {count} rows, {time.perf_counter() - started:.2f} s -> {out}",
        err=True,
    )


def _write_text(out: Path, text: str, option: str) -> None:
    _write_bytes(out, text.encode("utf-8"), option)


def _write_bytes(out: Path, data: bytes, option: str) -> None:
    try:
        with atomic_path(out) as temporary:
            temporary.write_bytes(data)
    except OSError as error:
        raise CommandError(f"{option}: cannot write {str(out)!r} ({error.strerror})") from None


def _load_record(path: Path, schema: TableSchema) -> ReleaseRecord:
    from engine.release.record import RecordError, ReleaseRecord

    try:
        record = ReleaseRecord.from_bytes(path.read_bytes())
    except OSError:
        raise CommandError(f"--record ({path}): the file cannot be read") from None
    except RecordError as error:
        raise CommandError(f"--record ({path}): {error}") from None
    if record.domain != schema.domain():
        raise CommandError(f"--record ({path}): it was made for another domain than the schema's")
    return record


@click.command("report", short_help="Quality report of a synthetic table (HTML and JSON).")
@click.argument("real", type=PathArgument)
@click.argument("synth", type=PathArgument)
@click.option(
    "--schema", "schema_path", required=True, type=PathArgument, help="the declared schema (JSON)"
)
@click.option(
    "--html", "html_out", required=True, type=PathArgument, help="the owner-tier report (HTML)"
)
@click.option("--json", "json_out", type=PathArgument, default=None, help="its numbers (JSON)")
@click.option(
    "--record",
    "record_path",
    type=PathArgument,
    default=None,
    help="the release record (ReleaseRecord file): also write the release tier",
)
@click.option(
    "--release-html",
    "release_html_out",
    type=PathArgument,
    default=None,
    help="the release-tier report (HTML); required with --record",
)
@click.option(
    "--release-json",
    "release_json_out",
    type=PathArgument,
    default=None,
    help="the release tier's numbers (JSON)",
)
@click.option(
    "--max-rows-compared",
    type=click.IntRange(min=2),
    default=20_000,
    show_default=True,
    help="real rows used for correlations and the holdout split",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="seeds subsampling and the holdout split",
)
def report(
    real: Path,
    synth: Path,
    schema_path: Path,
    html_out: Path,
    json_out: Path | None,
    record_path: Path | None,
    release_html_out: Path | None,
    release_json_out: Path | None,
    max_rows_compared: int,
    seed: int,
) -> None:
    """Write the owner-tier quality report of SYNTH against REAL to --html (docs/reports.md).

    The owner tier reads REAL: keep it with the data owner. With --record (the release's
    record), the release tier is written too, to its own files (--release-html, --release-json):
    it is built from the record and SYNTH only, so it may be shared with analysts.
    """
    if record_path is not None and release_html_out is None:
        raise CommandError("--record needs --release-html: the release tier is its own file")
    if record_path is None and (release_html_out or release_json_out):
        raise CommandError("--release-html and --release-json need --record")
    import numpy as np

    from engine.reports import build_owner_report, build_release_report, render_html
    from engine.tables.local import load_numeric_values

    inputs = [real, synth, schema_path, *([record_path] if record_path else [])]
    outputs = [
        (path, option)
        for path, option in (
            (html_out, "--html"),
            (json_out, "--json"),
            (release_html_out, "--release-html"),
            (release_json_out, "--release-json"),
        )
        if path is not None
    ]
    for path, option in outputs:
        _check_output(path, inputs, option)
    schema = _load_schema_or_fail(schema_path)
    record = None if record_path is None else _load_record(record_path, schema)
    real_codes = _load_table_or_fail("REAL", real, schema, allow_extra_columns=True)
    # A synthetic table has no ignored columns (synthesize writes the stored ones only).
    synth_schema = dataclasses.replace(schema, ignored=())
    synth_codes = _load_table_or_fail("SYNTH", synth, synth_schema, allow_extra_columns=True)
    owner = build_owner_report(
        schema,
        real_codes,
        synth_codes,
        real_values=load_numeric_values(real, schema),
        synthetic_values=load_numeric_values(synth, synth_schema),
        rng=np.random.default_rng(seed),
        max_rows_compared=max_rows_compared,
    )
    _write_text(
        html_out, render_html(owner, title=f"Quality report (owner): {synth.name}"), "--html"
    )
    if json_out is not None:
        _write_text(json_out, json.dumps(owner, indent=1), "--json")
    if record is not None and release_html_out is not None:
        release_tier = build_release_report(schema, record, synth_codes)
        title = f"Quality report (release): {synth.name}"
        _write_text(release_html_out, render_html(release_tier, title=title), "--release-html")
        if release_json_out is not None:
            _write_text(release_json_out, json.dumps(release_tier, indent=1), "--release-json")
    click.echo(f"report: {owner['verdict']['headline']} -> {html_out}", err=True)


COMMANDS: tuple[click.Command, ...] = (synthesize, evaluate, sample, report)

__all__ = [
    "COMMANDS",
    "CommandError",
    "ProgressBar",
    "evaluate",
    "parse_params",
    "parse_rho",
    "report",
    "rho_for_epsilon_delta",
    "sample",
    "synthesize",
]
