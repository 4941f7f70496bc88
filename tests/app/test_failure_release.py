"""A failed attempt releases the engine's memory before it records the failure, and records it
even if the first write fails (review of issue 11): otherwise, after a memory failure, the write
could fail too, the lease thread stop renewing, and the recovery loop re-run the job with fresh
noise for its one charge."""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.jobs import execution
from app.jobs.limits import memory_limit_error
from tests.conftest import Tenant, make_tenant
from tests.support.api import create_dataset, submit
from tests.support.ledger import assert_reconciled
from tests.support.stack import Stack


@pytest.fixture(scope="module")
def quiet_stack(_services: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """API only, used by this module alone: the one queued job is the one a message claims."""
    stack = Stack.create("failure", Path(tmp_path_factory.mktemp("failure-stack")))
    try:
        yield stack
    finally:
        stack.destroy()


@pytest.fixture
def quiet_tenant(quiet_stack: Stack) -> Iterator[Tenant]:
    tenant = make_tenant(quiet_stack)
    yield tenant
    tenant.close()


class _Engine:
    """Stands in for a run that ran out of memory while holding a large array."""

    held: weakref.ReferenceType[Any] | None = None

    @classmethod
    def run(cls, *_args: object, **_kwargs: object) -> int:
        table = np.ones(1_000_000)
        holder = _Big(table)
        cls.held = weakref.ref(holder)
        raise MemoryError  # with ``holder`` alive in this frame, as the engine's arrays are


class _Big:
    def __init__(self, table: np.ndarray) -> None:
        self.table = table


def test_a_memory_failure_is_recorded_after_the_engine_frames_are_released(
    quiet_stack: Stack,
    quiet_tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = quiet_stack.settings
    dataset = create_dataset(quiet_tenant.owner, people_csv, people_schema)
    job_id = submit(quiet_tenant.analyst, dataset["id"], rho="0.1").json()["id"]

    monkeypatch.setattr(execution, "_synthesize", _Engine.run)
    real_finish = execution._finish
    alive_at_write: list[bool] = []

    def finish(*args: Any, **kwargs: Any) -> None:
        assert _Engine.held is not None
        alive_at_write.append(_Engine.held() is not None)
        if len(alive_at_write) == 1:
            raise MemoryError  # the first write fails as well
        real_finish(*args, **kwargs)

    monkeypatch.setattr(execution, "_finish", finish)
    outcome = execution.execute_job(settings, uuid.UUID(job_id))

    assert outcome.status == "failed"
    assert alive_at_write == [False, False], "the engine's objects were still alive"
    job = quiet_tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed"
    assert job["error"] == memory_limit_error(settings.job_memory_limit_mb)
    assert_reconciled(quiet_stack, dataset["id"])
