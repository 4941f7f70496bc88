"""Retries, idempotency keys and typed errors of rhosynth.client, against an httpx MockTransport
(no service): what is sent, how often, and how long the client waits between attempts."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import httpx
import pandas as pd
import pytest

from rhosynth import errors
from rhosynth.client import Client

DATASET = str(uuid.uuid4())
JOB = str(uuid.uuid4())


def job_json(status: str = "queued") -> dict[str, Any]:
    return {
        "id": JOB,
        "dataset_id": DATASET,
        "method": "mst",
        "params": {},
        "status": status,
        "rho": "0.5",
        "epsilon": None,
        "delta": None,
        "rows": None,
        "seed": None,
        "progress": {"fraction": 1.0 if status == "succeeded" else 0.0, "stage": "queued"},
        "progress_detail": None,
        "cancel_requested": False,
        "created_at": "2026-01-01T00:00:00Z",
        "started_at": None,
        "finished_at": None,
        "error": None,
        "output_rows": None,
        "artefacts": [],
    }


Handler = Callable[[httpx.Request], httpx.Response]


class Recorder:
    """A mock service answering from a list of responses, recording every request."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.slept: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def client(self, **kwargs: Any) -> Client:
        return Client(
            "http://rhosynth.test",
            "rhs_secret",
            transport=httpx.MockTransport(self),
            sleep=self.slept.append,
            **kwargs,
        )


def unavailable(retry_after: str | None = None) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return httpx.Response(503, json={"detail": "storage unavailable"}, headers=headers)


def test_submit_retries_a_503_with_the_same_idempotency_key_after_retry_after() -> None:
    mock = Recorder(unavailable("7"), unavailable(), httpx.Response(202, json=job_json()))
    with mock.client() as client:
        job = client.submit(DATASET, "mst", rho=Decimal("0.5"))
    assert str(job.id) == JOB
    keys = [request.headers["idempotency-key"] for request in mock.requests]
    assert len(keys) == 3 and len(set(keys)) == 1
    # Retry-After first, then the exponential backoff (0.5 * 2**1).
    assert mock.slept == [7.0, 1.0]
    assert mock.requests[0].headers["authorization"] == "Bearer rhs_secret"
    assert mock.requests[0].read() == mock.requests[2].read()


def test_each_submit_call_has_its_own_key() -> None:
    mock = Recorder(httpx.Response(202, json=job_json()), httpx.Response(202, json=job_json()))
    with mock.client() as client:
        client.submit(DATASET, "mst", rho=1)
        client.submit(DATASET, "mst", rho=1)
    first, second = (request.headers["idempotency-key"] for request in mock.requests)
    assert first != second


def test_a_connection_error_is_retried_with_capped_exponential_backoff() -> None:
    mock = Recorder(
        httpx.ConnectError("refused"),
        httpx.ConnectError("refused"),
        httpx.ConnectError("refused"),
        httpx.Response(202, json=job_json()),
    )
    with mock.client(backoff=1.0, max_backoff=3.0) as client:
        client.submit(DATASET, "mst", rho=1)
    assert mock.slept == [1.0, 2.0, 3.0]
    assert len({request.headers["idempotency-key"] for request in mock.requests}) == 1


def test_retry_after_is_capped() -> None:
    mock = Recorder(unavailable("3600"), httpx.Response(200, json=job_json()))
    with mock.client(max_backoff=20.0) as client:
        client.job(JOB)
    assert mock.slept == [20.0]


def test_retries_give_up_with_the_servers_detail() -> None:
    mock = Recorder(unavailable("1"), unavailable("1"), unavailable("1"))
    with mock.client(retries=2) as client, pytest.raises(errors.Unavailable) as raised:
        client.job(JOB)
    assert raised.value.status == 503
    assert raised.value.detail == "storage unavailable"
    assert len(mock.requests) == 3


def test_no_connection_at_all_is_unavailable_without_status() -> None:
    mock = Recorder(*(httpx.ConnectError("refused") for _ in range(3)))
    with mock.client(retries=2) as client, pytest.raises(errors.Unavailable) as raised:
        client.datasets()
    assert raised.value.status is None
    assert "rhosynth.test" in str(raised.value)


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(
            lambda c: c.upload(pd.DataFrame({"a": [1]}), {"columns": []}, "t", 1), id="upload"
        ),
        pytest.param(lambda c: c.grant(DATASET, "0.5"), id="grant"),
        pytest.param(lambda c: c.cancel(JOB), id="cancel"),
        pytest.param(lambda c: c.sample(JOB, rows=10), id="sample"),
    ],
)
def test_requests_unsafe_to_repeat_are_not_retried(call: Callable[[Client], Any]) -> None:
    mock = Recorder(unavailable("1"), httpx.ConnectError("refused"))
    with mock.client() as client, pytest.raises(errors.Unavailable):
        call(client)
    assert len(mock.requests) == 1 and mock.slept == []
    mock = Recorder(httpx.ConnectError("reset"))
    with mock.client() as client, pytest.raises(errors.Unavailable):
        call(client)
    assert len(mock.requests) == 1 and mock.slept == []


def test_estimate_is_retried_and_sends_dry_run() -> None:
    mock = Recorder(unavailable(), httpx.Response(404, json={"detail": "dataset not found"}))
    with mock.client() as client, pytest.raises(errors.NotFound):
        client.estimate(DATASET, "mst", epsilon=1, delta="1e-6")
    assert all(request.url.params["dry_run"] == "true" for request in mock.requests)
    assert "idempotency-key" not in mock.requests[0].headers
    assert (
        mock.requests[0].read()
        == b'{"method":"mst","budget":{"epsilon":"1","delta":"1e-6"},"params":{}}'
    )


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, {"detail": "bad"}, errors.BadRequest),
        (401, {"detail": "invalid API key"}, errors.Unauthorized),
        (403, {"detail": "this needs an owner key"}, errors.Forbidden),
        (404, {"detail": "job not found"}, errors.NotFound),
        (409, {"detail": "the job has not succeeded"}, errors.Conflict),
        (410, {"detail": "the output was erased with its dataset"}, errors.Gone),
        (422, {"detail": [{"loc": ["body", "rows"], "msg": "too small"}]}, errors.Invalid),
        (500, "Internal Server Error", errors.ApiError),
    ],
)
def test_error_answers_are_typed_and_carry_the_detail(
    status: int, body: Any, kind: type[errors.ApiError]
) -> None:
    answer = (
        httpx.Response(status, json=body)
        if isinstance(body, dict)
        else httpx.Response(status, text=body)
    )
    mock = Recorder(answer)
    with mock.client() as client, pytest.raises(kind) as raised:
        client.job(JOB)
    assert type(raised.value) is kind
    assert raised.value.status == status
    assert raised.value.detail == (body["detail"] if isinstance(body, dict) else body)
    if status == 422:
        assert "body.rows: too small" in str(raised.value)


def test_over_budget_carries_requested_and_remaining_rho() -> None:
    body = {"detail": "over budget", "requested_rho": "0.75", "remaining_rho": "0.25"}
    mock = Recorder(httpx.Response(409, json=body))
    with mock.client() as client, pytest.raises(errors.OverBudget) as raised:
        client.submit(DATASET, "mst", rho="0.75")
    assert isinstance(raised.value, errors.Conflict)
    assert raised.value.requested_rho == Decimal("0.75")
    assert raised.value.remaining_rho == Decimal("0.25")
    assert raised.value.remaining_epsilon is None  # a ρ request
    assert len(mock.requests) == 1  # a 409 is an answer, not retried


def test_over_budget_in_epsilon_carries_the_epsilons() -> None:
    body = {
        "detail": "over budget",
        "requested_rho": "0.75",
        "remaining_rho": "0.25",
        "delta": "0.000001",
        "requested_epsilon": "10",
        "remaining_epsilon": "4.25",
    }
    mock = Recorder(httpx.Response(409, json=body))
    with mock.client() as client, pytest.raises(errors.OverBudget) as raised:
        client.submit(DATASET, "mst", epsilon="10", delta="0.000001")
    assert raised.value.delta == Decimal("0.000001")
    assert raised.value.requested_epsilon == Decimal("10")
    assert raised.value.remaining_epsilon == Decimal("4.25")


def test_rate_limited_is_raised_with_retry_after() -> None:
    mock = Recorder(
        httpx.Response(429, json={"detail": "retry later"}, headers={"Retry-After": "5"})
    )
    with mock.client() as client, pytest.raises(errors.RateLimited) as raised:
        client.sample(JOB)
    assert raised.value.retry_after == 5.0


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"rho": 1, "epsilon": 1, "delta": "1e-6"}, {"epsilon": 1}, {"rho": 1, "delta": "1e-6"}],
)
def test_a_budget_must_be_rho_or_epsilon_and_delta(kwargs: dict[str, Any]) -> None:
    mock = Recorder()
    with mock.client() as client, pytest.raises(ValueError, match=r"rho|epsilon|delta"):
        client.submit(DATASET, "mst", **kwargs)
    assert mock.requests == []


def test_wait_polls_until_finished_without_a_bar() -> None:
    mock = Recorder(
        httpx.Response(200, json=job_json("queued")),
        httpx.Response(200, json=job_json("running")),
        httpx.Response(200, json=job_json("succeeded")),
    )
    with mock.client(poll_interval=0.25) as client:
        job = client.wait(JOB, progress=False)
    assert job.status == "succeeded"
    assert mock.slept == [0.25, 0.25]


def test_wait_shows_a_progress_bar(capsys: pytest.CaptureFixture[str]) -> None:
    mock = Recorder(
        httpx.Response(200, json=job_json("queued")),
        httpx.Response(200, json=job_json("succeeded")),
    )
    with mock.client() as client:
        client.wait(JOB, progress=True)
    assert "100%" in capsys.readouterr().err


def test_a_queued_jobs_place_is_read_and_shown_while_waiting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    place = {"as_of": "2026-12-03T16:41:00Z", "position": 2, "jobs_ahead": 5}
    mock = Recorder(
        httpx.Response(200, json=job_json("queued") | {"queue": place}),
        httpx.Response(200, json=job_json("queued") | {"queue": place}),
        httpx.Response(200, json=job_json("succeeded")),
    )
    with mock.client() as client:
        queued = client.job(JOB)
        assert queued.queue is not None
        assert (queued.queue.position, queued.queue.jobs_ahead) == (2, 5)
        assert queued.queue.as_of.isoformat() == "2026-12-03T16:41:00+00:00"
        assert client.wait(JOB, progress=True).queue is None
    assert "queued: 5 ahead as of 16:41 UTC" in capsys.readouterr().err


def test_the_key_is_not_in_the_clients_repr() -> None:
    with Recorder().client() as client:
        assert "rhs_secret" not in repr(client)


def building() -> httpx.Response:
    return httpx.Response(
        202, json={"status": "building", "detail": "being built"}, headers={"Retry-After": "5"}
    )


def test_the_owner_report_is_waited_for_while_it_is_being_built() -> None:
    mock = Recorder(building(), building(), httpx.Response(200, json={"verdict": {"ok": 1}}))
    with mock.client() as client:
        report = client.report(JOB, tier="owner")
    assert report == {"verdict": {"ok": 1}}
    assert mock.slept == [5.0, 5.0] and len(mock.requests) == 3


def test_waiting_for_the_owner_report_gives_up_after_wait_seconds() -> None:
    mock = Recorder(building(), building())
    with mock.client() as client, pytest.raises(TimeoutError, match="still being built"):
        client.report(JOB, tier="owner", wait=7)
    assert len(mock.requests) == 2  # 5 s wait fits in 7, a second one would not
