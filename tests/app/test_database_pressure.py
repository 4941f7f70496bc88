"""The API under database pressure: a bounded pool, retried refusals, and 503 instead of 500."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.api.deps import pool_options
from app.config import Settings
from app.db.session import connect_with_retry, get_engine
from app.main import create_app
from tests.conftest import Tenant
from tests.support.api import budget, create_dataset, submit
from tests.support.stack import Stack

REFUSED = "connection failed: FATAL:  sorry, too many clients already"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def _flaky(failures: list[Exception]) -> tuple[list[int], object]:
    calls: list[int] = []

    def connect() -> str:
        calls.append(1)
        if failures:
            raise failures.pop(0)
        return "connection"

    return calls, connect


def test_refused_connections_are_retried_with_backoff() -> None:
    clock = FakeClock()
    calls, connect = _flaky([RuntimeError(REFUSED), RuntimeError(REFUSED)])
    assert connect_with_retry(connect, 5.0, sleep=clock.sleep, clock=clock) == "connection"  # type: ignore[arg-type]
    assert len(calls) == 3 and clock.sleeps == [0.05, 0.1]


@pytest.mark.parametrize(
    "message",
    [
        'connection failed: FATAL:  too many connections for role "rhosynth"',
        'connection failed: FATAL:  too many connections for database "rhosynth"',
        "connection failed: FATAL:  remaining connection slots are reserved for superuser",
        "connection failed: FATAL:  the database system is starting up",
    ],
)
def test_every_kind_of_slot_refusal_is_retried(
    message: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Per-role and per-database connection limits are refusals like "too many clients" (issue
    11: they were not retried), and the log names the cause."""
    clock = FakeClock()
    calls, connect = _flaky([RuntimeError(message)])
    with caplog.at_level(logging.WARNING, logger="app.db.session"):
        assert connect_with_retry(connect, 5.0, sleep=clock.sleep, clock=clock) == "connection"  # type: ignore[arg-type]
    assert len(calls) == 2
    assert message.split("FATAL:")[1].strip() in caplog.text


def test_other_connection_errors_are_not_retried() -> None:
    clock = FakeClock()
    calls, connect = _flaky([RuntimeError('FATAL:  password authentication failed for user "x"')])
    with pytest.raises(RuntimeError, match="password"):
        connect_with_retry(connect, 5.0, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert len(calls) == 1 and clock.sleeps == []


def test_retry_gives_up_after_its_budget() -> None:
    clock = FakeClock()
    calls, connect = _flaky([RuntimeError(REFUSED)] * 100)
    with pytest.raises(RuntimeError, match="too many clients"):
        connect_with_retry(connect, 2.0, sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert sum(clock.sleeps) <= 2.0 and len(calls) == len(clock.sleeps) + 1 < 100


@pytest.fixture
def one_connection_app(api_stack: Stack) -> Iterator[tuple[TestClient, Settings]]:
    """An in-process API whose pool holds a single connection and waits 0.2 s for it.

    The URL differs from the stack's only by application_name, so this process's cached engine for
    the stack's URL (used by other tests) is not the one shrunk here.
    """
    url = api_stack.settings.sqlalchemy_url + "?application_name=rhosynth-pool-test"
    settings = api_stack.settings.model_copy(
        update={"database_url": url, "db_pool_size": 1, "db_pool_timeout_seconds": 0.2}
    )
    with TestClient(create_app(settings)) as client:
        yield client, settings
    get_engine(settings.sqlalchemy_url).dispose()


def test_pool_exhausted_is_503_and_reserves_nothing(
    one_connection_app: tuple[TestClient, Settings],
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, settings = one_connection_app
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    engine = get_engine(settings.sqlalchemy_url, pool_options(settings))
    client.headers["Authorization"] = tenant.analyst.headers["Authorization"]

    with (
        caplog.at_level(logging.WARNING, logger="app.api.errors"),
        engine.connect(),  # the pool's only connection, held for the duration of the request
    ):
        response = submit(client, dataset["id"], rho="0.3")
    assert response.status_code == 503, response.text
    # The operator's log names the cause (issue 11: it read "NoneType: None").
    logged = "\n".join(logging.Formatter().format(r) for r in caplog.records)
    assert "TimeoutError" in logged and "QueuePool limit" in logged, logged
    assert "NoneType: None" not in logged
    assert response.headers["Retry-After"] == "1"
    assert response.json() == {
        "detail": "the service is busy or its database is unreachable; retry shortly"
    }
    assert budget(tenant.analyst, dataset["id"])["reserved_rho"] == "0"

    retried = submit(client, dataset["id"], rho="0.3")
    assert retried.status_code == 202, retried.text
    assert budget(tenant.analyst, dataset["id"])["reserved_rho"] == "0.3"
