"""Registering a source: read it once, as an upload would be read, and record the dataset.
Services flush, never commit."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy.orm import Session

from app.auth.service import Principal
from app.config import Settings
from app.datasets import service as dataset_service
from app.datasets.models import Dataset
from app.sources.reading import (
    SourceChanged,
    SourceRefused,
    SourceSpec,
    check_allowed,
    fetched,
)
from app.sources.schemas import SourceOut
from app.storage import Storage, dataset_prefix
from engine.tables.encoding import SchemaSpec


def register_dataset(
    session: Session,
    settings: Settings,
    storage: Storage,
    principal: Principal,
    *,
    name: str,
    spec: SourceSpec,
    schema: SchemaSpec,
    total_rho: Decimal,
    total_delta: Decimal,
    discovery_rho: Decimal | None,
    keep_copy: bool,
) -> Dataset:
    """Read the source (every row checked against ``schema``, discovery charged as at upload),
    fingerprint it, and record the dataset. Raises :class:`SourceRefused` (an UploadRejected)."""
    if schema.privacy_unit is not None:
        raise SourceRefused(
            422,
            "a privacy unit is not supported on a registered source yet: upload the table, or "
            "register it without privacy_unit",
        )
    check_allowed(spec, settings)
    created: Dataset | None = None
    try:
        with fetched(spec, settings, storage, max_rows=settings.max_rows) as source:
            created = dataset_service.create_dataset(
                session,
                settings,
                storage,
                principal,
                name=name,
                total_rho=total_rho,
                total_delta=total_delta,
                discovery_rho=discovery_rho,
                schema=schema,
                upload=source.files,
                registered=dataset_service.RegisteredSource(
                    spec={**spec.to_json(), "keep_copy": keep_copy},
                    fingerprint=source.fingerprint,
                    engine=settings.source_engine,
                    keep_copy=keep_copy,
                ),
            )
    except SourceChanged:
        # The local files changed while they were read (checked as the block ends, after the
        # copy was stored): the transaction rolls back, and the copy must not stay behind.
        if created is not None:
            storage.delete_tree(dataset_prefix(created.id))
        raise
    assert created is not None  # the block either returns a dataset or raises
    return created


def source_out(dataset: Dataset, *, owner: bool) -> SourceOut | None:
    """The dataset's source for the API: where it lives for owners only."""
    if dataset.source_kind is None or dataset.source is None:
        return None
    keep_copy = bool(dataset.source.get("keep_copy"))
    spec = SourceSpec.from_json(dataset.source)
    return SourceOut(
        kind=spec.kind,
        keep_copy=keep_copy,
        engine=None if keep_copy else dataset.source_engine,
        uri=spec.uri if owner else None,
        format=spec.format if owner else None,
        connection=spec.connection if owner else None,
        table=spec.table if owner else None,
        query=spec.query if owner else None,
        fingerprint=dataset.source_fingerprint if owner else None,
    )
