"""All SQL for datasets."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.datasets.models import Dataset


def add(session: Session, dataset: Dataset) -> Dataset:
    session.add(dataset)
    session.flush()
    return dataset


def get_for_tenant(session: Session, dataset_id: uuid.UUID, tenant_id: uuid.UUID) -> Dataset | None:
    return session.scalars(
        select(Dataset).where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id)
    ).one_or_none()


def get(session: Session, dataset_id: uuid.UUID) -> Dataset | None:
    return session.get(Dataset, dataset_id)


def list_for_tenant(
    session: Session, tenant_id: uuid.UUID, *, limit: int, offset: int
) -> list[Dataset]:
    return list(
        session.scalars(
            select(Dataset)
            .where(Dataset.tenant_id == tenant_id)
            .order_by(Dataset.created_at, Dataset.id)
            .limit(limit)
            .offset(offset)
        )
    )


def lock_for_tenant(
    session: Session, dataset_id: uuid.UUID, tenant_id: uuid.UUID, *, exclusive: bool
) -> Dataset | None:
    """Read a dataset row and lock it for the rest of the transaction.

    Submissions take the shared lock (FOR SHARE) and deletion the exclusive one (FOR UPDATE): a
    job must not be reserved on a dataset whose deletion has already cancelled the queued jobs,
    while concurrent submissions still run side by side. (SQLite serialises every writer.)
    """
    return session.scalars(
        select(Dataset)
        .where(Dataset.id == dataset_id, Dataset.tenant_id == tenant_id)
        .with_for_update(read=not exclusive)
    ).one_or_none()
