"""Dataset rules: upload validation, budgets on creation, erasure. Services flush, never commit."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import uuid
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Any

from sqlalchemy.orm import Session

from app.api.types import MAX_DELTA, check_delta_scale, check_rho_scale, parse_decimal
from app.audit import service as audit
from app.auth.service import Principal
from app.budget import repository as budget_repository
from app.budget import service as budget_service
from app.budget.repository import AccountState
from app.config import Settings
from app.datasets import repository
from app.datasets.discovery import discover_and_resolve
from app.datasets.ingest import IngestLimits, TableFiles, UploadRejected, ingest_table
from app.datasets.models import Dataset
from app.datasets.schemas import (
    BudgetOut,
    ColumnOut,
    DatasetOut,
    DomainWarningOut,
    PrivacyUnitOut,
    TruncationOut,
)
from app.datasets.units import (
    UnitLimits,
    contribution_bound,
    release_truncation,
    truncation_figures,
    truncation_pass,
)
from app.db.base import utcnow
from app.db.session import after_commit
from app.jobs import service as job_service
from app.samples import repository as sample_repository
from app.sources.schemas import SourceOut
from app.storage import (
    Storage,
    dataset_prefix,
    dataset_table_key,
    dataset_values_key,
    sample_prefix,
)
from engine.constraints import rule_to_json
from engine.discovery.plan import DEFAULT_DISCOVERY_SHARE
from engine.discovery.schema import provisional
from engine.discovery.warnings import domain_warnings
from engine.reports.unit import unit_phrase
from engine.tables.encoding import (
    SchemaError,
    SchemaLimits,
    SchemaSpec,
    TableSchema,
    schema_summary,
)
from engine.tables.raw_values import value_columns
from engine.tables.units import without_unit

logger = logging.getLogger(__name__)


class DatasetNotFound(Exception):
    pass


class DatasetDeleted(Exception):
    pass


def parse_budget(raw: str, settings: Settings, field: str = "budget_rho") -> Decimal:
    """A ρ from a form field: a positive decimal within the service's cap.

    Parsed exactly as the JSON API parses ρ (``app.api.types``), so the two cannot disagree.
    """
    try:
        value = check_rho_scale(parse_decimal(raw))
    except ValueError as error:
        raise UploadRejected(422, f"{field}: {error}") from None
    if value <= 0:
        raise UploadRejected(422, f"{field} must be a positive decimal number")
    if value > settings.max_budget_rho:
        raise UploadRejected(422, f"{field} is limited to {settings.max_budget_rho}")
    return value


def parse_budget_delta(raw: str) -> Decimal:
    """A dataset's total δ from the optional form field: 0 ≤ δ ≤ MAX_DELTA (0.001), at most 18
    decimal places.

    δ is spent only by discovery at upload ((ρ, δ)-approximate zCDP); with 0 (the default) a
    discovery that needs δ (open-set categories) does not fit and is refused.
    """
    try:
        value = check_delta_scale(parse_decimal(raw))
    except ValueError as error:
        raise UploadRejected(422, f"budget_delta: {error}") from None
    if not 0 <= value <= MAX_DELTA:
        raise UploadRejected(422, f"budget_delta must be a decimal number with 0 ≤ δ ≤ {MAX_DELTA}")
    return value


# A schema needs four levels ({"columns": [{"categories": [...]}]}); deeper JSON is refused
# before it is parsed, so the parser never recurses far.
MAX_SCHEMA_DEPTH = 8
# Integers in a schema are sizes, counts and bin edges; longer ones are refused while parsing
# (the json module would otherwise build arbitrarily large ints).
MAX_SCHEMA_INT_DIGITS = 20
# A string token (to its closing quote, or to the end of an unterminated text; possessive, so
# it never backtracks) or a bracket: every match advances past what it read, so a scan is linear.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*+(?:"|$)|[\[\]{}]')


class _SchemaNumberRejected(ValueError):
    pass


def _json_too_deep(raw: str, limit: int) -> bool:
    """Whether the JSON text nests arrays/objects deeper than ``limit`` (one linear scan).

    Brackets inside strings do not count. The scan stops at the first level past the limit.
    """
    depth = 0
    for token in _JSON_TOKEN.finditer(raw):
        text = token.group()
        if text in "[{":
            depth += 1
            if depth > limit:
                return True
        elif text in "]}":
            depth -= 1
    return False


def _reject_constant(name: str) -> Any:
    raise _SchemaNumberRejected(f"{name} is not a number JSON allows")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_SCHEMA_INT_DIGITS:
        raise _SchemaNumberRejected(f"integers are limited to {MAX_SCHEMA_INT_DIGITS} digits")
    return int(text)


def schema_limits(settings: Settings) -> SchemaLimits:
    return SchemaLimits(
        max_columns=settings.max_columns,
        max_domain_size=settings.max_domain_size,
        max_total_domain_size=settings.max_total_domain_size,
    )


def parse_schema(raw: str, settings: Settings) -> SchemaSpec:
    """The declared schema from its JSON text, every limit checked before anything is built.

    CPU work in proportion to the text (up to ``RHOSYNTH_MAX_SCHEMA_BYTES``): call it off the
    event loop. Depth, numbers, column count and every declared size are checked on the raw
    text or the raw JSON values, so nothing is allocated in proportion to a declared size.
    """
    if _json_too_deep(raw, MAX_SCHEMA_DEPTH):
        raise UploadRejected(422, f"schema: JSON nested deeper than {MAX_SCHEMA_DEPTH} levels")
    try:
        document = json.loads(raw, parse_constant=_reject_constant, parse_int=_bounded_int)
    except _SchemaNumberRejected as error:
        raise UploadRejected(422, f"schema: {error}") from None
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
        raise UploadRejected(422, "schema is not valid JSON") from None
    if (
        isinstance(document, dict)
        and isinstance(document.get("schema"), dict)
        and ("reasons" in document or "rows" in document)
    ):
        # The whole answer of POST /v1/schema-drafts (issue 26 §7: it was refused as "column
        # 'schema': a domain map gives each column an integer size").
        raise UploadRejected(
            422,
            "schema: this is the whole answer of POST /v1/schema-drafts; send its 'schema' "
            "member (for example: jq .schema draft.json > schema.json)",
        )
    if isinstance(document, dict) and "discovered" in document:
        # Set by the service for columns it learned with DP; an upload cannot claim it.
        raise UploadRejected(422, "invalid schema: 'discovered' is set by the service")
    try:
        schema = SchemaSpec.from_json(document, schema_limits(settings))
    except SchemaError as error:
        raise UploadRejected(422, f"invalid schema: {error}") from None
    for entry in schema.entries:
        if getattr(entry, "size", 1) < 1:
            raise UploadRejected(422, f"column {entry.name!r} has an empty domain")
    return schema


@dataclass(frozen=True)
class UploadForm:
    """The validated text fields of an upload."""

    name: str
    total_rho: Decimal
    schema: SchemaSpec
    total_delta: Decimal = Decimal(0)
    discovery_rho: Decimal | None = None


def parse_upload_form(
    name: str,
    budget_rho: str,
    schema: str,
    settings: Settings,
    budget_delta: str = "0",
    discovery_rho: str | None = None,
) -> UploadForm:
    """Validate the upload's text fields (CPU-bound on the schema: run it in a worker thread)."""
    total_rho = parse_budget(budget_rho, settings)
    pool = None
    if discovery_rho is not None:
        pool = parse_budget(discovery_rho, settings, field="discovery_rho")
        if pool > total_rho:
            raise UploadRejected(422, "discovery_rho must not exceed budget_rho")
    return UploadForm(
        name=parse_name(name),
        total_rho=total_rho,
        schema=parse_schema(schema, settings),
        total_delta=parse_budget_delta(budget_delta),
        discovery_rho=pool,
    )


def parse_name(raw: str) -> str:
    name = raw.strip()
    if not name or len(name) > 200 or "\x00" in name:
        raise UploadRejected(422, "name must be 1 to 200 characters")
    return name


@dataclass(frozen=True)
class RegisteredSource:
    """What a registration records beside the dataset (app/sources/reading.py)."""

    spec: dict[str, Any]  # SourceSpec.to_json(): where it lives, never credentials
    fingerprint: dict[str, Any]
    engine: str  # the counting engine of its jobs: duckdb or spark
    keep_copy: bool = False

    @property
    def location(self) -> str:
        """Where it lives, in one line (no query text): for the audit log."""
        if self.spec.get("uri"):
            return f"{self.spec['kind']}:{self.spec['uri']}"
        return f"postgres:{self.spec.get('connection')}:{self.spec.get('table') or '(query)'}"


def create_dataset(
    session: Session,
    settings: Settings,
    storage: Storage,
    principal: Principal,
    *,
    name: str,
    total_rho: Decimal,
    schema: SchemaSpec,
    upload: TableFiles,
    total_delta: Decimal = Decimal(0),
    discovery_rho: Decimal | None = None,
    registered: RegisteredSource | None = None,
) -> Dataset:
    """Validate and store the table, then record the dataset and its budget account.

    A schema with columns to discover is completed first (app/datasets/discovery.py), and the
    discovery is charged to the new account as one ``discover`` entry in this transaction.

    With ``registered`` (a registered source, read into ``upload`` by app/sources/reading.py),
    the same checks run on every row; the codes are stored only with ``keep_copy``, otherwise
    they are discarded and jobs read the source itself (app/sources/counting.py).
    """
    keep_copy = registered is None or registered.keep_copy
    limits = IngestLimits(
        max_columns=settings.max_columns,
        max_rows=settings.max_rows,
        max_cell_bytes=settings.max_cell_bytes,
    )
    unit = schema.privacy_unit
    truncation = None
    if unit is not None:
        # Before discovery or encoding reads anything: which rows of each unit survive
        # (app/datasets/units.py). Everything after reads the kept rows only.
        truncation = truncation_pass(
            upload, provisional(schema), unit, limits, UnitLimits(settings.max_unit_rows)
        )
    outcome = discover_and_resolve(
        upload,
        schema,
        limits,
        budget_rho=total_rho,
        budget_delta=total_delta,
        discovery_rho=discovery_rho,
        keep=None if truncation is None else truncation.keep,
        contribution_bound=contribution_bound(unit),
    )
    # The file's schema (the unit an ignored column of it) and the stored one (no trace of it).
    file_schema = outcome.schema
    table_schema = without_unit(file_schema, unit)
    truncation_charge = None
    if unit is not None and truncation is not None:
        truncation_charge = release_truncation(
            truncation, unit, total_rho=total_rho, discovery_spent=outcome.rho
        )
    # Public information only: the resolved (declared or DP-learned) domain and the budgets.
    warnings = domain_warnings(
        table_schema,
        discovered=outcome.discovered,
        budget_rho=Fraction(total_rho),
        discovery_rho=Fraction(total_rho) * DEFAULT_DISCOVERY_SHARE
        if discovery_rho is None
        else Fraction(discovery_rho),
    )
    dataset_id = uuid.uuid4()
    key = dataset_table_key(dataset_id)
    temp = storage.temp_path(PurePosixPath(key).suffix)
    # The raw numeric and date values, for the owner tier of the report only (docs/privacy.md,
    # "Raw values kept for the owner's report"); none when the schema has no such column.
    values_key = dataset_values_key(dataset_id)
    values_temp = (
        storage.temp_path(PurePosixPath(values_key).suffix)
        if value_columns(table_schema) and keep_copy
        else None
    )
    try:
        rows = ingest_table(
            upload,
            file_schema,
            temp,
            limits,
            values_target=values_temp,
            keep=None if truncation is None else truncation.keep,
        )
        if values_temp is not None:
            storage.put_file(values_temp, values_key)
        if keep_copy:
            storage.put_file(temp, key)
    except BaseException:
        # A refused table, or storage that cannot be written: leave nothing behind.
        with contextlib.suppress(OSError):
            storage.delete_tree(dataset_prefix(dataset_id))
        raise
    finally:
        temp.unlink(missing_ok=True)  # an object store copies it; a local disk moved it
        if values_temp is not None:
            values_temp.unlink(missing_ok=True)
    try:
        dataset = repository.add(
            session,
            Dataset(
                id=dataset_id,
                tenant_id=principal.tenant_id,
                name=name,
                schema=table_schema.to_json(),
                warnings=[warning.to_json() for warning in warnings],
                n_rows=rows,
                n_columns=len(table_schema.columns),
                storage_key=key if keep_copy else None,
                created_by=principal.key_id,
                created_at=utcnow(),
                privacy_unit=None if unit is None else unit.column,
                unit_max_rows=None if unit is None else unit.max_rows,
                truncation=None if truncation is None else truncation_figures(truncation),
                truncation_release=None
                if truncation_charge is None
                else truncation_charge.released,
                source_kind=None if registered is None else registered.spec["kind"],
                source=None if registered is None else registered.spec,
                source_fingerprint=None if registered is None else registered.fingerprint,
                source_engine=None if registered is None else registered.engine,
            ),
        )
        budget_service.open_account(
            session, dataset_id, total_rho, principal.actor, total_delta=total_delta
        )
        if outcome.discovered is not None:
            # Privacy rule 1 for discovery: charged in the transaction that creates the dataset,
            # so no job and no analyst can see the discovered domain without this entry.
            budget_service.spend_discovery(
                session,
                dataset_id,
                outcome.rho,
                outcome.delta,
                outcome.discovered.describe(),
                principal.actor,
            )
        if truncation_charge is not None:
            # The DP count of what truncation removed: its own entry, from a fixed share of the
            # budget taken beside discovery's (docs/privacy.md, "Privacy per person").
            budget_service.spend_discovery(
                session,
                dataset_id,
                truncation_charge.rho,
                Decimal(0),
                truncation_charge.detail,
                principal.actor,
            )
        audit.record(
            session,
            principal,
            "dataset.create",
            "dataset",
            dataset_id,
            {
                "name": name,
                "budget_rho": str(total_rho),
                "budget_delta": str(total_delta),
                "discovery_rho": None if outcome.discovered is None else str(outcome.rho),
                "unit_max_rows": None if unit is None else unit.max_rows,
                **(
                    {}
                    if registered is None
                    else {"source": registered.location, "keep_copy": str(registered.keep_copy)}
                ),
            },
        )
    except BaseException:
        storage.delete_tree(dataset_prefix(dataset_id))
        raise
    return dataset


def get_dataset(session: Session, principal: Principal, dataset_id: uuid.UUID) -> Dataset:
    """The dataset if it belongs to the caller's tenant (another tenant's is 'not found')."""
    dataset = repository.get_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets
    )
    if dataset is None:
        raise DatasetNotFound(dataset_id)
    return dataset


def list_datasets(
    session: Session, principal: Principal, *, limit: int, offset: int
) -> list[Dataset]:
    return repository.list_for_tenant(
        session, principal.tenant_id, datasets=principal.datasets, limit=limit, offset=offset
    )


def grant_budget(
    session: Session,
    settings: Settings,
    principal: Principal,
    dataset_id: uuid.UUID,
    add_rho: Decimal,
    add_delta: Decimal = Decimal(0),
) -> Dataset:
    dataset = get_dataset(session, principal, dataset_id)
    if dataset.deleted_at is not None:
        raise DatasetDeleted(dataset_id)
    if add_rho > settings.max_budget_rho:
        raise budget_service.BudgetLimitExceeded(
            f"the total budget of a dataset is limited to ρ = {settings.max_budget_rho}"
        )
    budget_service.grant_budget(
        session,
        dataset_id,
        add_rho,
        Decimal(settings.max_budget_rho),
        principal.actor,
        add_delta=add_delta,
    )
    audit.record(
        session,
        principal,
        "budget.grant",
        "dataset",
        dataset_id,
        {"add_rho": str(add_rho), "add_delta": str(add_delta)},
    )
    return dataset


def delete_dataset(
    session: Session, storage: Storage, principal: Principal, dataset_id: uuid.UUID
) -> Dataset:
    """Erase the stored table (with the raw values kept beside it for the owner's report: the
    whole dataset prefix) and every output; keep the record, its jobs and its ledger.

    Queued jobs are cancelled and their reservations released (they never read the data);
    running jobs are asked to stop and stay charged.
    """
    dataset = repository.lock_for_tenant(
        session, dataset_id, principal.tenant_id, datasets=principal.datasets, exclusive=True
    )
    if dataset is None:
        raise DatasetNotFound(dataset_id)
    if dataset.deleted_at is not None:
        return dataset
    dataset.deleted_at = utcnow()
    dataset.deleted_by = principal.key_id
    dataset.storage_key = None
    job_ids = job_service.stop_jobs_for_deleted_dataset(session, dataset_id, principal.actor)
    session.flush()
    audit.record(
        session, principal, "dataset.delete", "dataset", dataset_id, {"name": dataset.name}
    )

    sample_ids = sample_repository.ids_for_dataset(session, dataset_id)

    def erase() -> None:
        try:
            storage.delete_tree(dataset_prefix(dataset_id))
            for job_id in job_ids:
                job_service.erase_outputs(storage, job_id)
            for sample_id in sample_ids:
                storage.delete_tree(sample_prefix(sample_id))
        except OSError:
            # The deletion is committed: answering an error would make the caller retry a
            # DELETE that has nothing left to do. The storage sweep erases what remains of a
            # deleted dataset (app/jobs/sweep.py).
            logger.exception("dataset %s: erasing its stored files failed", dataset_id)

    after_commit(session, erase)
    return dataset


def budget_out(state: AccountState) -> BudgetOut:
    return BudgetOut(
        total_rho=state.total_rho,
        spent_rho=state.spent_rho,
        reserved_rho=state.reserved_rho,
        remaining_rho=state.remaining_rho,
        total_delta=state.total_delta,
        spent_delta=state.spent_delta,
        remaining_delta=state.remaining_delta,
    )


def account_of(session: Session, dataset_id: uuid.UUID) -> AccountState:
    state = budget_repository.get_account(session, dataset_id)
    if state is None:
        raise DatasetNotFound(dataset_id)
    return state


def dataset_out(dataset: Dataset, state: AccountState, principal: Principal) -> DatasetOut:
    schema = TableSchema.from_json(dataset.schema)
    return DatasetOut(
        id=dataset.id,
        name=dataset.name,
        columns=[
            ColumnOut.model_validate({**entry, "discovered": entry["name"] in schema.discovered})
            for entry in schema_summary(schema.columns)
        ],
        dropped_columns=list(schema.ignored),
        rules=[rule_to_json(rule) for rule in schema.rules],
        warnings=[DomainWarningOut.model_validate(w) for w in dataset.warnings or []],
        created_at=dataset.created_at,
        deleted_at=dataset.deleted_at,
        budget=budget_out(state),
        n_rows=dataset.n_rows if principal.is_owner else None,
        privacy=unit_phrase(dataset.unit_max_rows),
        privacy_unit=privacy_unit_out(dataset, owner=principal.is_owner),
        origin="upload" if dataset.source_kind is None else "source",
        source=source_out(dataset, owner=principal.is_owner),
    )


def source_out(dataset: Dataset, *, owner: bool) -> SourceOut | None:
    from app.sources.service import source_out as described  # the sources package imports this

    return described(dataset, owner=owner)


def privacy_unit_out(dataset: Dataset, *, owner: bool) -> PrivacyUnitOut | None:
    """The dataset's privacy unit: k, the DP truncation count for every key, its exact
    figures for owners only."""
    if dataset.privacy_unit is None or dataset.unit_max_rows is None:
        return None
    truncation = None
    released = dataset.truncation_release
    if released is not None:
        exact = dataset.truncation if owner and dataset.truncation is not None else {}
        truncation = TruncationOut(
            units_truncated=released["units_truncated"],
            rows_removed_at_least=released["rows_removed_at_least"],
            cap=released["cap"],
            sigma=released["sigma"],
            rho=Decimal(released["rho"]),
            exact_rows_removed=exact.get("rows_removed"),
            exact_units_truncated=exact.get("units_truncated"),
            exact_units=exact.get("units"),
            exact_rows_without_unit=exact.get("rows_without_unit"),
        )
    return PrivacyUnitOut(
        column=dataset.privacy_unit if owner else None,
        max_rows=dataset.unit_max_rows,
        guarantee=unit_phrase(dataset.unit_max_rows),
        truncation=truncation,
    )
