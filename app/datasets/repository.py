"""All SQL for datasets."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import ColumnElement, select, true
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.datasets.models import Dataset


def add(session: Session, dataset: Dataset) -> Dataset:
    session.add(dataset)
    session.flush()
    return dataset


def within(
    dataset_column: InstrumentedAttribute[Any], datasets: frozenset[uuid.UUID] | None
) -> ColumnElement[bool]:
    """The rows whose dataset a key may see: every one (None), or those of its datasets (a
    dataset-limited key; none at all for an admin key's empty set). Principal.datasets is the
    ``datasets`` of every *_for_tenant read of datasets, jobs and samples, so that each
    dataset-scoped route answers 404 for a dataset the key may not see."""
    if datasets is None:
        return true()
    return dataset_column.in_(sorted(datasets))


def get_for_tenant(
    session: Session,
    dataset_id: uuid.UUID,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
) -> Dataset | None:
    return session.scalars(
        select(Dataset).where(
            Dataset.id == dataset_id, Dataset.tenant_id == tenant_id, within(Dataset.id, datasets)
        )
    ).one_or_none()


def get(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    return session.get(Dataset, dataset_id)


def list_for_tenant(
    session: Session,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
    limit: int,
    offset: int,
) -> list[Dataset]:
    return list(
        session.scalars(
            select(Dataset)
            .where(Dataset.tenant_id == tenant_id, within(Dataset.id, datasets))
            .order_by(Dataset.created_at, Dataset.id)
            .limit(limit)
            .offset(offset)
        )
    )


def lock_for_tenant(
    session: Session,
    dataset_id: uuid.UUID,
    tenant_id: uuid.UUID,
    *,
    datasets: frozenset[uuid.UUID] | None,
    exclusive: bool,
) -> Dataset | None:
    """Read a dataset row and lock it for the rest of the transaction.

    Submissions take the shared lock (FOR SHARE) and deletion the exclusive one (FOR UPDATE): a
    job must not be reserved on a dataset whose deletion has already cancelled the queued jobs,
    while concurrent submissions still run side by side. (SQLite serialises every writer.)
    """
    return session.scalars(
        select(Dataset)
        .where(
            Dataset.id == dataset_id, Dataset.tenant_id == tenant_id, within(Dataset.id, datasets)
        )
        .with_for_update(read=not exclusive)
    ).one_or_none()
