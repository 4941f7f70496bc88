"""``GET /v1/jobs/{id}`` answered below the framework (app/jobs/polled_read.py, issue 24 §4).

The middleware must answer exactly as the FastAPI route does, for every job state, both roles,
every refusal and a database that does not answer, and it must hand every other spelling of the
request to the route. Each test runs the same requests against two apps of the same settings,
one with the middleware (the default) and one without (``polled_job_read=False``), and compares
status, body bytes and headers; a spy on the route counts which requests reached it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy import text

from app.api.deps import pool_options
from app.config import Settings
from app.db.session import get_engine, get_session_factory, transaction
from app.jobs import endpoints
from app.main import create_app
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack

# Headers set by the server, not by the app: every other header must be the same on both paths.
SERVER_HEADERS = {"date", "server"}


class RouteSpy:
    """Counts the requests whose route body ran (``app.jobs.endpoints._job_view``, which the
    FastAPI route calls and the middleware does not), per app: the apps answer one request at a
    time here, so the count since the app's last request is that request's."""

    def __init__(self, counts: list[int]) -> None:
        self._counts = counts
        self.calls = 0

    def track(self, client: TestClient) -> TestClient:
        original = client.request

        def request(*args: Any, **kwargs: Any) -> Response:
            before = len(self._counts)
            response = original(*args, **kwargs)
            self.calls += len(self._counts) - before
            return response

        client.request = request  # type: ignore[method-assign]
        return client


@pytest.fixture
def route_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    counts: list[int] = []
    view = endpoints._job_view

    def counted(*args: Any, **kwargs: Any) -> Any:
        counts.append(1)
        return view(*args, **kwargs)

    monkeypatch.setattr(endpoints, "_job_view", counted)
    return counts


@pytest.fixture(autouse=True)
def _queue_minute(monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued job's place is counted on the queue of a past minute: both paths read that
    minute from one fixed clock, so a comparison cannot straddle two minutes; and each path
    counts on its own (the per-process cache of places would answer the second path with the
    first's count, so the comparison could not see a difference in the counting)."""
    from app.jobs import service

    now = datetime.now(UTC) + timedelta(minutes=3)
    monkeypatch.setattr(service, "queue_clock", lambda: now)
    monkeypatch.setattr(service._places, "get", lambda minute, job_id: (False, None))


@pytest.fixture
def base_settings(api_stack: Stack, tmp_path: Path) -> Settings:
    return api_stack.settings.model_copy(
        update={
            "storage_dir": tmp_path / "storage",
            "auth_failure_burst": 3,
            "auth_failures_per_second": 0.001,  # no refill within the test
        }
    )


@contextlib.contextmanager
def _apps(
    settings: Settings, route_runs: list[int]
) -> Iterator[tuple[TestClient, RouteSpy, TestClient, RouteSpy]]:
    """(with the middleware, its route spy, without it, its route spy)."""
    lean_app = create_app(settings)
    plain_app = create_app(settings.model_copy(update={"polled_job_read": False}))
    lean_spy, plain_spy = RouteSpy(route_runs), RouteSpy(route_runs)
    with (
        TestClient(lean_app, raise_server_exceptions=False) as lean,
        TestClient(plain_app, raise_server_exceptions=False) as plain,
    ):
        yield lean_spy.track(lean), lean_spy, plain_spy.track(plain), plain_spy


def _headers(response: Response) -> list[tuple[str, str]]:
    # Each request has its own X-Request-ID (app/api/request_id.py): only whether one is sent
    # may be compared.
    return [
        (k, "<id>" if k == "x-request-id" else v)
        for k, v in response.headers.multi_items()
        if k not in SERVER_HEADERS
    ]


def _same(lean: Response, plain: Response) -> None:
    assert lean.status_code == plain.status_code, (lean.text, plain.text)
    assert lean.content == plain.content
    assert _headers(lean) == _headers(plain)


def _set_state(settings: Settings, job_id: str, **values: Any) -> None:
    columns = ", ".join(f"{name} = :{name}" for name in values)
    with transaction(get_session_factory(settings.sqlalchemy_url)) as session:
        session.execute(text(f"UPDATE jobs SET {columns} WHERE id = :id"), {**values, "id": job_id})


@pytest.fixture
def jobs(
    base_settings: Settings, tenant: Tenant, people_csv: bytes, people_schema: str
) -> list[str]:
    """Five jobs of one dataset: queued, running (with owner-only detail), succeeded, failed,
    cancelled; times with microseconds, so that analysts' rounding shows."""
    dataset = create_dataset(tenant.owner, people_csv, people_schema, budget_rho="1")
    ids = []
    for rho in ("0.01", "0.02", "0.03", "0.04", "0.05"):
        response = submit(tenant.analyst, dataset["id"], rho=rho)
        assert response.status_code == 202, response.text
        ids.append(str(response.json()["id"]))
    # Floats that JSON writers spell differently (json.dumps: 1e-05; pydantic-core: 0.00001), as
    # a CIPHER job's lam (1e-9 to 10) would be stored.
    _set_state(
        base_settings,
        ids[0],
        params='{"lam": 1e-05, "tiny": 1.5e-300, "sum": 0.30000000000000004, "big": 1e+300}',
    )
    start = datetime(2026, 12, 3, 10, 17, 42, 123456, tzinfo=UTC)
    end = start + timedelta(seconds=97, microseconds=5)
    _set_state(
        base_settings,
        ids[1],
        status="running",
        charged_at=start,
        started_at=start,
        progress_fraction=0.4,
        progress_stage="measure",
        detail_fraction=0.437,
        detail_stage="round 7 of 16",
    )
    _set_state(
        base_settings,
        ids[2],
        status="succeeded",
        charged_at=start,
        started_at=start,
        finished_at=end,
        progress_fraction=1.0,
        progress_stage="done",
        output_key="outputs/x.parquet",
        output_rows=1234,
        artefacts='["synthetic.csv", "report.json", "owner_report.json"]',
    )
    _set_state(
        base_settings,
        ids[3],
        status="failed",
        charged_at=start,
        started_at=start,
        finished_at=end,
        error="the job passed its time limit",
    )
    _set_state(base_settings, ids[4], status="cancelled", finished_at=end, cancel_requested=True)
    return ids


def test_every_job_state_reads_the_same_for_both_roles(
    base_settings: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    with _apps(base_settings, route_runs) as (lean, lean_spy, plain, plain_spy):
        for job_id in jobs:
            for key in (tenant.owner, tenant.analyst):
                headers = {"Authorization": key.headers["Authorization"]}
                answered = lean.get(f"/v1/jobs/{job_id}", headers=headers)
                assert answered.status_code == 200, answered.text
                _same(answered, plain.get(f"/v1/jobs/{job_id}", headers=headers))
        assert lean_spy.calls == 0  # every read answered by the middleware
        assert plain_spy.calls == 2 * len(jobs)
    # What the comparison covers: owner-only fields differ by role, and analysts' times are
    # rounded, so a middleware that showed the owner's view to analysts would fail above.
    owner = plain.get(f"/v1/jobs/{jobs[1]}", headers=dict(tenant.owner.headers)).json()
    analyst = plain.get(f"/v1/jobs/{jobs[1]}", headers=dict(tenant.analyst.headers)).json()
    assert owner["progress_detail"] == {"fraction": 0.437, "stage": "round 7 of 16"}
    assert analyst["progress_detail"] is None
    assert owner["started_at"] != analyst["started_at"]
    # The queued job's place is part of both answers (queue_place: its counts).
    queued = plain.get(f"/v1/jobs/{jobs[0]}", headers=dict(tenant.analyst.headers)).json()
    assert queued["queue"]["position"] == 1 and queued["queue"]["as_of"].endswith(":00Z")
    assert analyst["queue"] is None


def test_refusals_are_the_same_and_counted_by_the_same_throttle(
    base_settings: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    """Missing and malformed headers (401, not counted), another tenant's job and an unknown
    job (404), bad keys (401, counted), then 429 with Retry-After even for a valid key."""
    other_key = tenant.stack.create_key(tenant.name + "-other", "analyst")
    job = jobs[0]
    requests: list[tuple[str, dict[str, str]]] = [
        (job, {}),
        (job, {"Authorization": "Basic dXNlcjpwYXNz"}),
        (job, {"Authorization": "Bearer"}),
        (job, {"Authorization": "Bearer "}),
        (job, {"Authorization": "bearer " + tenant.analyst.headers["Authorization"][7:]}),
        (job, {"Authorization": f"Bearer {other_key}"}),
        ("00000000-0000-4000-8000-000000000000", dict(tenant.analyst.headers)),
        *[(job, {"Authorization": f"Bearer rhs_bad{i}"}) for i in range(4)],
        (job, dict(tenant.analyst.headers)),
    ]
    with _apps(base_settings, route_runs) as (lean, lean_spy, plain, _plain_spy):
        statuses = []
        for job_id, headers in requests:
            headers = {k: v for k, v in headers.items() if k.lower() == "authorization"}
            answered = lean.get(f"/v1/jobs/{job_id}", headers=headers)
            _same(answered, plain.get(f"/v1/jobs/{job_id}", headers=headers))
            statuses.append(answered.status_code)
        assert lean_spy.calls == 0
    assert statuses == [401, 401, 401, 401, 200, 404, 404, 401, 401, 401, 429, 429]


def test_another_tenants_job_reads_exactly_as_an_unknown_one(
    base_settings: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    other = {"Authorization": f"Bearer {tenant.stack.create_key(tenant.name + '-x', 'owner')}"}
    with _apps(base_settings, route_runs) as (lean, lean_spy, _plain, _plain_spy):
        theirs = lean.get(f"/v1/jobs/{jobs[2]}", headers=other)
        unknown = lean.get("/v1/jobs/00000000-0000-4000-8000-000000000000", headers=other)
        assert lean_spy.calls == 0
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.content == unknown.content
    assert _headers(theirs) == _headers(unknown)


def test_encoded_paths_query_strings_and_a_root_path_are_answered_the_same(
    base_settings: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    """A percent-encoded hyphen decodes to the canonical path on both; a query string is
    ignored by both; behind a root path the router matches without it, and so does the
    middleware."""
    job = jobs[2]
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    with _apps(base_settings, route_runs) as (lean, lean_spy, plain, _plain_spy):
        for url in (f"/v1/jobs/{job.replace('-', '%2D', 1)}", f"/v1/jobs/{job}?fields=x&x=1"):
            answered = lean.get(url, headers=headers)
            assert answered.status_code == 200, (url, answered.text)
            _same(answered, plain.get(url, headers=headers))
        assert lean_spy.calls == 0
    lean_app = create_app(base_settings.model_copy(update={"polled_job_read": True}))
    plain_app = create_app(base_settings.model_copy(update={"polled_job_read": False}))
    spy = RouteSpy(route_runs)
    with (
        spy.track(TestClient(lean_app, root_path="/api")) as lean,
        TestClient(plain_app, root_path="/api") as plain,
    ):
        # As uvicorn's --root-path gives it: the scope's path starts with the root path.
        answered = lean.get(f"/api/v1/jobs/{job}", headers=headers)
        assert answered.status_code == 200, answered.text
        _same(answered, plain.get(f"/api/v1/jobs/{job}", headers=headers))
        assert spy.calls == 0


@pytest.mark.parametrize("failure", ["database", "bug"])
def test_a_failing_read_answers_as_the_route_does(
    base_settings: Settings,
    tenant: Tenant,
    jobs: list[str],
    route_runs: list[int],
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    """The database failing inside the read (OperationalError: 503 with Retry-After) and an
    unexpected error (500, from Starlette's error middleware, which still wraps the layer)."""
    from sqlalchemy import exc

    from app.jobs import service

    def failing(*_args: Any, **_kwargs: Any) -> Any:
        if failure == "database":
            raise exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))
        raise RuntimeError("a bug")

    monkeypatch.setattr(service, "job_out", failing)
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    with _apps(base_settings, route_runs) as (lean, lean_spy, plain, _plain_spy):
        answered = lean.get(f"/v1/jobs/{jobs[0]}", headers=headers)
        _same(answered, plain.get(f"/v1/jobs/{jobs[0]}", headers=headers))
        assert lean_spy.calls == 0
    assert answered.status_code == (503 if failure == "database" else 500)


def test_other_spellings_go_to_the_route(
    base_settings: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    """Upper-case and unhyphenated ids (which FastAPI's UUID parser accepts), a malformed id,
    a trailing slash, HEAD and a GET with a body: the route answers them, as before."""
    job = jobs[0]
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    with _apps(base_settings, route_runs) as (lean, lean_spy, plain, plain_spy):
        for path in (job.upper(), job.replace("-", ""), "not-a-uuid", job + "/"):
            url = f"/v1/jobs/{path}"
            _same(lean.get(url, headers=headers), plain.get(url, headers=headers))
        url = f"/v1/jobs/{job}"
        _same(lean.head(url, headers=headers), plain.head(url, headers=headers))
        with_body = {**headers, "Content-Type": "application/json"}
        _same(
            lean.request("GET", url, headers=with_body, content=b"{}"),
            plain.request("GET", url, headers=with_body, content=b"{}"),
        )
        # The route's body ran for the two other spellings of the id and the GET with a body;
        # the malformed id (422), the trailing slash (404) and HEAD (405) end before it.
        assert lean_spy.calls == plain_spy.calls == 3


@pytest.fixture
def one_connection(base_settings: Settings) -> Iterator[Settings]:
    url = base_settings.sqlalchemy_url + "?application_name=rhosynth-polled-read-test"
    settings = base_settings.model_copy(
        update={"database_url": url, "db_pool_size": 1, "db_pool_timeout_seconds": 0.2}
    )
    yield settings
    get_engine(settings.sqlalchemy_url).dispose()


def test_a_database_without_a_free_connection_answers_503_on_both_paths(
    one_connection: Settings, tenant: Tenant, jobs: list[str], route_runs: list[int]
) -> None:
    headers = {"Authorization": tenant.analyst.headers["Authorization"]}
    engine = get_engine(one_connection.sqlalchemy_url, pool_options(one_connection))
    with _apps(one_connection, route_runs) as (lean, lean_spy, plain, _plain_spy):
        assert lean.get(f"/v1/jobs/{jobs[0]}", headers=headers).status_code == 200
        with engine.connect():  # the pool's only connection, held for both requests
            answered = lean.get(f"/v1/jobs/{jobs[0]}", headers=headers)
            _same(answered, plain.get(f"/v1/jobs/{jobs[0]}", headers=headers))
        assert answered.status_code == 503 and answered.headers["Retry-After"] == "1"
        assert lean_spy.calls == 0
