"""A typed, synchronous Python client for a running rhosynth service.

Five lines from a file to a differentially private synthetic DataFrame::

    from rhosynth.client import Client

    owner = Client("http://127.0.0.1:8000", OWNER_KEY)
    ds = owner.upload("people.csv", "people-schema.json", "people", budget_rho=1)
    analyst = Client("http://127.0.0.1:8000", ANALYST_KEY)
    job = analyst.wait(analyst.submit(ds, "mst", rho=0.5))
    df, report = analyst.download(job), analyst.report(job)

Reliability: each :meth:`Client.submit` sends a fresh ``Idempotency-Key`` and reuses it on its
retries, so a retried submission never reserves ρ twice. A 503 (after its ``Retry-After``) and a
failed connection are retried with capped exponential backoff, but only for requests that are
safe to repeat (reads, dry runs, drafts, and submissions with their key). Every error answer is
raised as a typed :class:`~rhosynth.errors.ApiError` carrying the server's ``detail``.

This module imports nothing of the server or the engine (tests/client/test_imports.py).
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from email.utils import parsedate_to_datetime
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal, Self, TypeVar, overload

import httpx
import pandas as pd
from pydantic import BaseModel

from rhosynth.audit import AuditChainBroken, ChainHead, verify_audit_chain
from rhosynth.errors import ApiError, Unavailable, error_for
from rhosynth.models import (
    ApiKey,
    Approval,
    AuditEntry,
    Budget,
    CreatedKey,
    CreatedWebhook,
    Dataset,
    Job,
    JobPreview,
    KeyPolicy,
    Ledger,
    LedgerEntry,
    Method,
    Quota,
    QuotaPolicy,
    Quotas,
    Sample,
    SchemaDraft,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from rhosynth.webhooks import WebhookVerificationError, verify_webhook

__all__ = [
    "AuditChainBroken",
    "ChainHead",
    "Client",
    "WebhookVerificationError",
    "verify_audit_chain",
    "verify_webhook",
]

TableSource = str | Path | pd.DataFrame
SchemaSource = str | Path | Mapping[str, Any]
Number = Decimal | int | float | str
DatasetRef = Dataset | uuid.UUID | str
JobRef = Job | uuid.UUID | str
KeyRef = ApiKey | uuid.UUID | str
TableFormat = Literal["csv", "parquet"]

_M = TypeVar("_M", bound=BaseModel)

RETRY_STATUSES = frozenset({503})
USER_AGENT = "rhosynth-client/0.1"


def _id(ref: Dataset | Job | Sample | ApiKey | uuid.UUID | str) -> str:
    if isinstance(ref, Dataset | Job | Sample | ApiKey):
        return str(ref.id)
    return str(uuid.UUID(str(ref)))  # refuses a malformed id before any request


def _amount(value: Number) -> str:
    """The exact decimal text of an amount (floats by their shortest repr: 0.1 -> "0.1")."""
    if isinstance(value, bool):
        raise TypeError("an amount must be a number, not a bool")
    return str(value) if isinstance(value, Decimal | int | float) else value.strip()


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), if any."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _schema_text(schema: SchemaSource) -> str:
    """The schema's JSON text, from a mapping, a JSON string or a path to a JSON file."""
    if isinstance(schema, Mapping):
        return json.dumps(schema)
    if isinstance(schema, str) and schema.lstrip().startswith("{"):
        return schema
    return Path(schema).read_text(encoding="utf-8")


def _parquet_bytes(frame: pd.DataFrame) -> bytes:
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


@contextmanager
def _table_file(source: TableSource) -> Iterator[tuple[str, IO[bytes] | bytes]]:
    """(file name, content) of a table: a DataFrame as Parquet bytes, a path as an open file."""
    if isinstance(source, pd.DataFrame):
        yield "table.parquet", _parquet_bytes(source)
        return
    path = Path(source)
    with path.open("rb") as handle:
        yield path.name, handle


def _read_table(content: bytes, format: TableFormat) -> pd.DataFrame:
    if format == "parquet":
        return pd.read_parquet(io.BytesIO(content))
    return pd.read_csv(io.BytesIO(content))


class Client:
    """A client of one rhosynth service with one API key (owner, analyst or admin).

    ``retries``: how many times a request that is safe to repeat is retried after a 503 or a
    failed connection; the wait is the server's ``Retry-After`` when it gives one, else
    ``backoff * 2**attempt``, both capped at ``max_backoff`` seconds. ``sleep`` and
    ``transport`` are injectable for tests.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        retries: int = 4,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        poll_interval: float = 0.5,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if retries < 0:
            raise ValueError("retries must be at least 0")
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.poll_interval = poll_interval
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": USER_AGENT},
            timeout=timeout,
            transport=transport,
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.base_url!r})"  # never the key

    # -- transport ---------------------------------------------------------------------------

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        after = _retry_after(response) if response is not None else None
        wait = after if after is not None else self.backoff * 2**attempt
        return min(wait, self.max_backoff)

    def _send(
        self,
        method: str,
        path: str,
        *,
        retry: bool,
        stream: bool = False,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send a request; retry a 503 or a failed connection when ``retry``; raise the typed
        error of an error answer. With ``stream``, the caller must close the response."""
        attempt = 0
        while True:
            request = self._http.build_request(method, path, **kwargs)
            try:
                response = self._http.send(request, stream=stream)
            except httpx.TransportError as error:
                if retry and attempt < self.retries:
                    self._sleep(self._delay(attempt, None))
                    attempt += 1
                    continue
                raise Unavailable(None, f"could not reach {self.base_url}: {error}") from error
            if response.status_code < 400:
                return response
            if stream:
                response.read()
                response.close()
            if response.status_code in RETRY_STATUSES and retry and attempt < self.retries:
                self._sleep(self._delay(attempt, response))
                attempt += 1
                continue
            raise self._error(response)

    @staticmethod
    def _error(response: httpx.Response) -> ApiError:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        return error_for(response.status_code, body, _retry_after(response))

    def _get(self, path: str, model: type[_M], **params: Any) -> _M:
        response = self._send("GET", path, retry=True, params=params or None)
        return model.model_validate(response.json())

    # -- datasets (owner keys write; every key reads) ----------------------------------------

    def upload(
        self,
        table: TableSource,
        schema: SchemaSource,
        name: str,
        budget_rho: Number,
        *,
        budget_delta: Number | None = None,
        discovery_rho: Number | None = None,
    ) -> Dataset:
        """Upload a table (a CSV/Parquet path, or a DataFrame sent as Parquet) with its schema
        (a mapping, JSON text or a JSON file) and total ρ budget (owner keys). Not retried: a
        repeated upload would create a second dataset."""
        fields = {"schema": _schema_text(schema), "name": name, "budget_rho": _amount(budget_rho)}
        if budget_delta is not None:
            fields["budget_delta"] = _amount(budget_delta)
        if discovery_rho is not None:
            fields["discovery_rho"] = _amount(discovery_rho)
        with _table_file(table) as (filename, content):
            response = self._send(
                "POST",
                "/v1/datasets",
                retry=False,
                data=fields,
                files={"file": (filename, content, "application/octet-stream")},
            )
        return Dataset.model_validate(response.json())

    def register(
        self,
        source: dict[str, Any],
        schema: SchemaSource,
        name: str,
        budget_rho: Number,
        *,
        budget_delta: Number | None = None,
        discovery_rho: Number | None = None,
        keep_copy: bool = False,
    ) -> Dataset:
        """Register a dataset where it lives instead of uploading it (owner keys; docs/sources.md):
        ``source`` is ``{"kind": "s3", "uri": "s3://bucket/key"}``, ``{"kind": "local", "uri":
        "/path"}`` or ``{"kind": "postgres", "connection": name, "table": ...}`` (or ``"query"``).
        Not retried: a repeated registration would create a second dataset."""
        body: dict[str, Any] = {
            "name": name,
            "source": source,
            "schema": json.loads(_schema_text(schema)),
            "budget_rho": _amount(budget_rho),
            "keep_copy": keep_copy,
        }
        if budget_delta is not None:
            body["budget_delta"] = _amount(budget_delta)
        if discovery_rho is not None:
            body["discovery_rho"] = _amount(discovery_rho)
        response = self._send("POST", "/v1/datasets/sources", retry=False, json=body)
        return Dataset.model_validate(response.json())

    def draft_schema(
        self,
        table: TableSource,
        *,
        show_values: bool = False,
        missing_values: list[str] | None = None,
    ) -> SchemaDraft:
        """Propose a schema for a table (owner keys); nothing is stored and no ρ is spent.
        ``draft.schema_`` is ready to pass to :meth:`upload`."""
        fields = {"show_values": "true" if show_values else "false"}
        if missing_values is not None:
            fields["missing_values"] = json.dumps(missing_values)
        with _table_file(table) as (filename, content):
            # Read into memory: a draft is safe to repeat, and a retry must resend the file.
            data = content if isinstance(content, bytes) else content.read()
        response = self._send(
            "POST",
            "/v1/schema-drafts",
            retry=True,
            data=fields,
            files={"file": (filename, data, "application/octet-stream")},
        )
        return SchemaDraft.model_validate(response.json())

    def datasets(self) -> list[Dataset]:
        """Every dataset of the key's tenant (all pages)."""
        items: list[Dataset] = []
        offset: int | None = 0
        while offset is not None:
            page = self._send("GET", "/v1/datasets", retry=True, params={"offset": offset}).json()
            items.extend(Dataset.model_validate(item) for item in page["items"])
            offset = page["next_offset"]
        return items

    def dataset(self, dataset: DatasetRef) -> Dataset:
        return self._get(f"/v1/datasets/{_id(dataset)}", Dataset)

    def budget(self, dataset: DatasetRef) -> Budget:
        """The dataset's budget now: total, spent, reserved and remaining ρ (and δ)."""
        return self.dataset(dataset).budget

    def ledger(self, dataset: DatasetRef) -> Ledger:
        """The dataset's whole privacy ledger, oldest first (every page)."""
        path = f"/v1/datasets/{_id(dataset)}/ledger"
        first = self._get(path, Ledger)
        entries: list[LedgerEntry] = list(first.items)
        page = first
        while page.next_after is not None:
            page = self._get(path, Ledger, after=page.next_after)
            entries.extend(page.items)
        return Ledger(
            dataset_id=first.dataset_id, budget=page.budget, items=entries, next_after=None
        )

    def grant(self, dataset: DatasetRef, rho: Number, *, delta: Number | None = None) -> Dataset:
        """Raise the dataset's total ρ (and optionally δ) (owner keys). Not retried."""
        body: dict[str, str] = {"add_rho": _amount(rho)}
        if delta is not None:
            body["add_delta"] = _amount(delta)
        response = self._send("POST", f"/v1/datasets/{_id(dataset)}/budget", retry=False, json=body)
        return Dataset.model_validate(response.json())

    def delete(self, dataset: DatasetRef) -> Dataset:
        """Erase the stored table and every output (owner keys); the ledger stays."""
        response = self._send("DELETE", f"/v1/datasets/{_id(dataset)}", retry=True)
        return Dataset.model_validate(response.json())

    # -- keys (admin keys) -------------------------------------------------------------------

    def create_key(
        self,
        name: str,
        role: Literal["owner", "analyst", "admin"],
        *,
        expires_at: datetime | None = None,
        datasets: list[DatasetRef] | None = None,
    ) -> CreatedKey:
        """Create a key of the tenant (admin keys); ``created.key`` is its secret, which the
        service shows this once. ``datasets`` limits it to those datasets. Not retried: a
        repeated request would create a second key."""
        body: dict[str, Any] = {"name": name, "role": role}
        if expires_at is not None:
            body["expires_at"] = expires_at.isoformat()
        if datasets:
            body["datasets"] = [_id(d) for d in datasets]
        response = self._send("POST", "/v1/keys", retry=False, json=body)
        return CreatedKey.model_validate(response.json())

    def list_keys(self) -> list[ApiKey]:
        """Every key of the tenant, revoked and expired ones too (admin keys)."""
        page = self._send("GET", "/v1/keys", retry=True).json()
        return [ApiKey.model_validate(item) for item in page["items"]]

    def get_key(self, key: KeyRef) -> ApiKey:
        return self._get(f"/v1/keys/{_id(key)}", ApiKey)

    def rotate_key(self, key: KeyRef, *, overlap_seconds: int = 3600) -> CreatedKey:
        """A new key in place of ``key`` (admin keys); the old secret keeps working for
        ``overlap_seconds`` (at most 7 days). Not retried: a retry would answer 409."""
        response = self._send(
            "POST",
            f"/v1/keys/{_id(key)}/rotate",
            retry=False,
            json={"overlap_seconds": overlap_seconds},
        )
        return CreatedKey.model_validate(response.json())

    def revoke_key(self, key: KeyRef) -> ApiKey:
        """Revoke a key at once (admin keys; revoking again changes nothing)."""
        response = self._send("POST", f"/v1/keys/{_id(key)}/revoke", retry=True)
        return ApiKey.model_validate(response.json())

    def set_key_expiry(self, key: KeyRef, expires_at: datetime | None) -> ApiKey:
        """Set (a future, time-zone-aware instant) or clear (None) a key's expiry (admin keys)."""
        body = {"expires_at": expires_at.isoformat() if expires_at is not None else None}
        response = self._send("PATCH", f"/v1/keys/{_id(key)}", retry=True, json=body)
        return ApiKey.model_validate(response.json())

    def get_key_policy(self) -> KeyPolicy:
        """The tenant's key policy (admin keys)."""
        return self._get("/v1/keys/policy", KeyPolicy)

    def set_key_policy(self, *, owners_create_analyst_keys: bool) -> KeyPolicy:
        """Set the tenant's key policy (admin keys): with ``owners_create_analyst_keys``, owner
        keys create analyst keys limited to datasets they see (``create_key`` with
        ``datasets``) and list, rotate and revoke the keys they created."""
        body = {"owners_create_analyst_keys": owners_create_analyst_keys}
        response = self._send("PUT", "/v1/keys/policy", retry=True, json=body)
        return KeyPolicy.model_validate(response.json())

    # -- jobs --------------------------------------------------------------------------------

    @staticmethod
    def _job_body(
        method: str,
        rho: Number | None,
        epsilon: Number | None,
        delta: Number | None,
        rows: int | None,
        seed: int | None,
        params: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        if (rho is None) == (epsilon is None):
            raise ValueError("give the budget as rho=, or as epsilon= with delta=")
        if epsilon is not None and delta is None:
            raise ValueError("epsilon= needs delta=")
        if rho is not None and delta is not None:
            raise ValueError("delta= goes with epsilon=, not with rho=")
        budget = (
            {"rho": _amount(rho)}
            if rho is not None
            else {"epsilon": _amount(epsilon), "delta": _amount(delta)}  # type: ignore[arg-type]
        )
        body: dict[str, Any] = {"method": method, "budget": budget, "params": dict(params or {})}
        if rows is not None:
            body["rows"] = rows
        if seed is not None:
            body["seed"] = seed
        return body

    def submit(
        self,
        dataset: DatasetRef,
        method: str,
        *,
        rho: Number | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rows: int | None = None,
        seed: int | None = None,
        params: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Job:
        """Ask for a synthetic release; reserves the job's ρ (given as ``rho``, or as
        ``epsilon`` and ``delta``). One Idempotency-Key per call (``idempotency_key`` or a
        fresh one), reused on retries: a retried call gets the same job, never a second one."""
        body = self._job_body(method, rho, epsilon, delta, rows, seed, params)
        key = idempotency_key or f"rhosynth-client-{uuid.uuid4().hex}"
        response = self._send(
            "POST",
            f"/v1/datasets/{_id(dataset)}/jobs",
            retry=True,
            json=body,
            headers={"Idempotency-Key": key},
        )
        return Job.model_validate(response.json())

    def estimate(
        self,
        dataset: DatasetRef,
        method: str,
        *,
        rho: Number | None = None,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rows: int | None = None,
        seed: int | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> JobPreview:
        """What :meth:`submit` with the same arguments would cost (ρ, (ε, δ), remaining budget,
        first noise, predicted time and memory); validated as a submission, nothing reserved."""
        body = self._job_body(method, rho, epsilon, delta, rows, seed, params)
        response = self._send(
            "POST",
            f"/v1/datasets/{_id(dataset)}/jobs",
            retry=True,
            json=body,
            params={"dry_run": "true"},
        )
        return JobPreview.model_validate(response.json())

    def job(self, job: JobRef) -> Job:
        return self._get(f"/v1/jobs/{_id(job)}", Job)

    def jobs(self, dataset: DatasetRef) -> list[Job]:
        """The dataset's jobs, oldest first (all pages)."""
        items: list[Job] = []
        offset: int | None = 0
        path = f"/v1/datasets/{_id(dataset)}/jobs"
        while offset is not None:
            page = self._send("GET", path, retry=True, params={"offset": offset}).json()
            items.extend(Job.model_validate(item) for item in page["items"])
            offset = page["next_offset"]
        return items

    def cancel(self, job: JobRef) -> Job:
        """Cancel a job: a queued one's reservation is released; a running one stops at its
        next stage, its ρ stays spent and nothing is released. Not retried."""
        response = self._send("POST", f"/v1/jobs/{_id(job)}/cancel", retry=False)
        return Job.model_validate(response.json())

    # -- quotas and approvals (owner keys; issue 27 §2, §3) ---------------------------------

    def quotas(self, dataset: DatasetRef) -> Quotas:
        """The dataset's quota policy and live quotas (reserved, spent, remaining ρ)."""
        return self._get(f"/v1/datasets/{_id(dataset)}/quotas", Quotas)

    def set_quota(self, dataset: DatasetRef, key_id: uuid.UUID | str, rho: Number) -> Quota:
        """Give an analyst key a quota of ``rho`` on the dataset, or change it (idempotent)."""
        response = self._send(
            "PUT",
            f"/v1/datasets/{_id(dataset)}/quotas/{key_id}",
            retry=True,
            json={"rho": _amount(rho)},
        )
        return Quota.model_validate(response.json())

    def set_group_quota(
        self, dataset: DatasetRef, name: str, rho: Number, keys: Sequence[uuid.UUID | str]
    ) -> Quota:
        """Give a named group of analyst keys one shared quota (idempotent: PUT)."""
        response = self._send(
            "PUT",
            f"/v1/datasets/{_id(dataset)}/quota-groups/{name}",
            retry=True,
            json={"rho": _amount(rho), "keys": [str(k) for k in keys]},
        )
        return Quota.model_validate(response.json())

    def delete_quota(self, dataset: DatasetRef, key_id: uuid.UUID | str) -> None:
        """Remove a key's quota; its queued jobs still settle on it. Not retried."""
        self._send("DELETE", f"/v1/datasets/{_id(dataset)}/quotas/{key_id}", retry=False)

    def delete_group_quota(self, dataset: DatasetRef, name: str) -> None:
        """Remove a group's quota. Not retried."""
        self._send("DELETE", f"/v1/datasets/{_id(dataset)}/quota-groups/{name}", retry=False)

    def set_quota_policy(
        self,
        dataset: DatasetRef,
        mode: Literal["shared", "reserved"],
        *,
        quota_required: bool = False,
        approval_required: bool = False,
    ) -> QuotaPolicy:
        """Set the dataset's policy: shared or reserved quotas, whether analyst keys need one,
        and whether their jobs wait for an owner's approval (idempotent: PUT)."""
        response = self._send(
            "PUT",
            f"/v1/datasets/{_id(dataset)}/quota-policy",
            retry=True,
            json={
                "mode": mode,
                "quota_required": quota_required,
                "approval_required": approval_required,
            },
        )
        return QuotaPolicy.model_validate(response.json())

    def approvals(self, dataset: DatasetRef) -> list[Approval]:
        """Jobs waiting for an owner's approval, oldest first, with their cost preview."""
        body = self._send("GET", f"/v1/datasets/{_id(dataset)}/approvals", retry=True).json()
        return [Approval.model_validate(item) for item in body["items"]]

    def approve(self, job: JobRef) -> Job:
        """Approve a pending job: it is queued (its budget is already reserved). Not retried."""
        response = self._send("POST", f"/v1/jobs/{_id(job)}/approve", retry=False)
        return Job.model_validate(response.json())

    def reject(self, job: JobRef, reason: str) -> Job:
        """Reject a pending job with a reason the analyst sees; its reservation is released.
        Not retried."""
        response = self._send(
            "POST", f"/v1/jobs/{_id(job)}/reject", retry=False, json={"reason": reason}
        )
        return Job.model_validate(response.json())

    def methods(self) -> list[Method]:
        """The synthesis methods and the JSON schema of each one's ``params``."""
        body = self._send("GET", "/v1/methods", retry=True).json()
        return [Method.model_validate(item) for item in body["items"]]

    @overload
    def wait(self, job: Job, *, progress: bool = ..., timeout: float | None = ...) -> Job: ...
    @overload
    def wait(self, job: Sample, *, progress: bool = ..., timeout: float | None = ...) -> Sample: ...
    @overload
    def wait(
        self, job: uuid.UUID | str, *, progress: bool = ..., timeout: float | None = ...
    ) -> Job: ...

    def wait(
        self,
        job: Job | Sample | uuid.UUID | str,
        *,
        progress: bool = True,
        timeout: float | None = None,
    ) -> Job | Sample:
        """Poll a job (or a :class:`Sample`) until it has finished and return it, whatever its
        status (check ``.status``). ``progress``: a progress bar (tqdm; a widget in notebooks)
        of the public progress. Raises :class:`TimeoutError` after ``timeout`` seconds."""
        if isinstance(job, Sample):
            return self._wait_sample(job, progress=progress, timeout=timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        current = self.job(job)
        with _ProgressBar(f"job {current.method}", enabled=progress) as bar:
            while True:
                bar.show(current.progress.fraction, _stage(current))
                if current.finished:
                    bar.show(1.0 if current.status == "succeeded" else None, current.status)
                    return current
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"job {current.id} is still {current.status}")
                self._sleep(self.poll_interval)
                current = self.job(current)

    @overload
    def download(self, job: Job | Sample, *, format: TableFormat = ...) -> pd.DataFrame: ...
    @overload
    def download(self, job: uuid.UUID | str, *, format: TableFormat = ...) -> pd.DataFrame: ...

    def download(
        self, job: Job | Sample | uuid.UUID | str, *, format: TableFormat = "parquet"
    ) -> pd.DataFrame:
        """A succeeded job's synthetic table (or a sample's) as a DataFrame. Parquet keeps the
        column types; ``csv`` reads the service's CSV with pandas' inference."""
        response = self._send("GET", self._output_path(job), retry=True, params={"format": format})
        return _read_table(response.content, format)

    def download_to(
        self,
        job: Job | Sample | uuid.UUID | str,
        path: str | Path,
        format: TableFormat = "parquet",
    ) -> Path:
        """Stream a job's (or a sample's) table to ``path``; returns the path."""
        return self._stream_to(self._output_path(job), Path(path), {"format": format})

    def _stream_to(self, url: str, target: Path, params: dict[str, str] | None = None) -> Path:
        """GET ``url`` streamed to the file ``target`` (retried like every read)."""
        response = self._send("GET", url, retry=True, stream=True, params=params)
        try:
            with target.open("wb") as handle:
                for chunk in response.iter_bytes():
                    handle.write(chunk)
        finally:
            response.close()
        return target

    def output_parts(self, job: Job | uuid.UUID | str) -> list[dict[str, Any]]:
        """The parts of a large release stored as a partitioned Parquet dataset (``name``,
        ``rows``, ``bytes``, ``url``), in row order. A release stored as one file raises
        :class:`~rhosynth.errors.Conflict` (409: download it with :meth:`download_to`)."""
        response = self._send("GET", f"/v1/jobs/{_id(job)}/output/parts", retry=True)
        parts: list[dict[str, Any]] = response.json()["parts"]
        return parts

    def download_parts(self, job: Job | uuid.UUID | str, directory: str | Path) -> list[Path]:
        """Stream every part of a partitioned release into ``directory`` (created if needed) as
        ``part-NNNNN.parquet``: a Parquet dataset that ``pandas.read_parquet(directory)`` or
        ``pyarrow.dataset.dataset(directory)`` reads whole. Returns the files in row order."""
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for part in self.output_parts(job):
            name = str(part["name"])
            if Path(name).name != name:  # the service names parts part-NNNNN.parquet
                raise ApiError(None, f"unexpected part name {name!r}")
            written.append(self._stream_to(str(part["url"]), target / name))
        return written

    @staticmethod
    def _output_path(job: Job | Sample | uuid.UUID | str) -> str:
        if isinstance(job, Sample):
            return f"/v1/samples/{job.id}/output"
        return f"/v1/jobs/{_id(job)}/output"

    @overload
    def report(
        self,
        job: JobRef,
        *,
        tier: Literal["release", "owner"] = ...,
        format: Literal["json"] = ...,
        wait: float = ...,
    ) -> dict[str, Any]: ...
    @overload
    def report(
        self,
        job: JobRef,
        *,
        tier: Literal["release", "owner"] = ...,
        format: Literal["html"],
        wait: float = ...,
    ) -> str: ...

    def report(
        self,
        job: JobRef,
        *,
        tier: Literal["release", "owner"] = "release",
        format: Literal["json", "html"] = "json",
        wait: float = 120.0,
    ) -> dict[str, Any] | str:
        """A succeeded job's quality report: ``tier="release"`` (any key, built from the release
        alone) or ``"owner"`` (owner keys: compared with the real table). JSON as a dict, HTML
        as text. The owner tier is built just after the job succeeds: while the service answers
        that it is being built, this waits (its ``Retry-After``) up to ``wait`` seconds in all,
        then raises :class:`TimeoutError`."""
        waited = 0.0
        while True:
            response = self._send(
                "GET",
                f"/v1/jobs/{_id(job)}/report",
                retry=True,
                params={"tier": tier, "format": format},
            )
            if response.status_code != 202:
                break
            pause = self._delay(0, response)
            if waited + pause > wait:
                raise TimeoutError(f"the {tier}-tier report is still being built after {wait} s")
            self._sleep(pause)
            waited += pause
        if format == "html":
            return response.text
        body: dict[str, Any] = response.json()
        return body

    @overload
    def measurements(self, job: JobRef, *, format: Literal["json"] = ...) -> dict[str, Any]: ...
    @overload
    def measurements(self, job: JobRef, *, format: Literal["parquet"]) -> pd.DataFrame: ...

    def measurements(
        self, job: JobRef, *, format: Literal["json", "parquet"] = "json"
    ) -> dict[str, Any] | pd.DataFrame:
        """The job's noisy marginals (the DP measurements themselves): per marginal as a dict,
        or one row per cell as a DataFrame (``format="parquet"``)."""
        response = self._send(
            "GET", f"/v1/jobs/{_id(job)}/measurements", retry=True, params={"format": format}
        )
        if format == "parquet":
            return _read_table(response.content, "parquet")
        body: dict[str, Any] = response.json()
        return body

    # -- samples -----------------------------------------------------------------------------

    def sample(self, job: JobRef, rows: int | None = None, seed: int | None = None) -> Sample:
        """Draw more rows from a succeeded job's fitted model: no ρ, the ledger is untouched;
        the same seed gives the same rows. Wait for it with :meth:`wait`, then :meth:`download`.
        Not retried (a 429 is raised as :class:`~rhosynth.errors.RateLimited`)."""
        body: dict[str, Any] = {}
        if rows is not None:
            body["rows"] = rows
        if seed is not None:
            body["seed"] = seed
        response = self._send("POST", f"/v1/jobs/{_id(job)}/samples", retry=False, json=body)
        return Sample.model_validate(response.json())

    def sample_status(self, sample: Sample | uuid.UUID | str) -> Sample:
        return self._get(f"/v1/samples/{_id(sample)}", Sample)

    def delete_sample(self, sample: Sample | uuid.UUID | str) -> None:
        """Delete a finished sample's output: its rows stop counting against the tenant's
        quota of sample rows. Idempotent; a queued or running sample raises a conflict."""
        self._send("DELETE", f"/v1/samples/{_id(sample)}", retry=True)

    # -- the audit trail (admin keys) --------------------------------------------------------

    @staticmethod
    def _audit_params(
        since: datetime | None, until: datetime | None, limit: int | None, format: str
    ) -> dict[str, str]:
        params = {"format": format}
        for name, instant in (("since", since), ("until", until)):
            if instant is not None:
                if instant.tzinfo is None:
                    raise ValueError(f"{name} must be timezone-aware")
                params[name] = instant.isoformat()
        if limit is not None:
            params["limit"] = str(limit)
        return params

    def audit_lines(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
    ) -> Iterator[str]:
        """The tenant's audit entries in chain order, as the export's JSON Lines (streamed):
        what :func:`verify_audit_chain` checks. Admin keys only."""
        response = self._send(
            "GET",
            "/v1/audit",
            retry=True,
            stream=True,
            params=self._audit_params(since, until, limit, "jsonl"),
        )
        try:
            for line in response.iter_lines():
                if line:
                    yield line
        finally:
            response.close()

    def audit(
        self,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int | None = None,
    ) -> Iterator[AuditEntry]:
        """The tenant's audit entries in chain order, streamed (admin keys only)."""
        for line in self.audit_lines(since=since, until=until, limit=limit):
            yield AuditEntry.model_validate_json(line)

    def download_audit(
        self,
        path: str | Path,
        *,
        format: Literal["jsonl", "csv"] = "jsonl",
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Path:
        """Stream the tenant's audit export to ``path`` (JSON Lines or CSV); returns the path.
        ``rhosynth audit verify --file`` checks a JSON Lines export offline."""
        target = Path(path)
        response = self._send(
            "GET",
            "/v1/audit",
            retry=True,
            stream=True,
            params=self._audit_params(since, until, None, format),
        )
        try:
            with target.open("wb") as handle:
                for chunk in response.iter_bytes():
                    handle.write(chunk)
        finally:
            response.close()
        return target

    def _wait_sample(self, sample: Sample, *, progress: bool, timeout: float | None) -> Sample:
        deadline = None if timeout is None else time.monotonic() + timeout
        current = sample
        with _ProgressBar("sample", enabled=progress) as bar:
            while True:
                bar.show(1.0 if current.finished else 0.0, current.status)
                if current.finished:
                    return current
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"sample {current.id} is still {current.status}")
                self._sleep(self.poll_interval)
                current = self.sample_status(current)

    # -- webhooks (admin keys) ----------------------------------------------------------------

    def create_webhook(
        self,
        url: str,
        events: list[WebhookEvent],
        *,
        description: str = "",
        enabled: bool = True,
        budget_threshold_rho: Number | None = None,
    ) -> CreatedWebhook:
        """Subscribe ``url`` to ``events``; the answer's ``secret`` signs every delivery and is
        shown only here (keep it for :func:`verify_webhook`). Not retried."""
        body: dict[str, Any] = {
            "url": url,
            "events": list(events),
            "description": description,
            "enabled": enabled,
        }
        if budget_threshold_rho is not None:
            body["budget_threshold_rho"] = _amount(budget_threshold_rho)
        response = self._send("POST", "/v1/webhooks", retry=False, json=body)
        return CreatedWebhook.model_validate(response.json())

    def webhooks(self) -> list[Webhook]:
        """The tenant's webhook subscriptions."""
        body = self._send("GET", "/v1/webhooks", retry=True).json()
        return [Webhook.model_validate(item) for item in body["items"]]

    def webhook(self, webhook: Webhook | uuid.UUID | str) -> Webhook:
        return self._get(f"/v1/webhooks/{_webhook_id(webhook)}", Webhook)

    def delete_webhook(self, webhook: Webhook | uuid.UUID | str) -> None:
        """Delete a subscription; deliveries still pending are discarded."""
        self._send("DELETE", f"/v1/webhooks/{_webhook_id(webhook)}", retry=True)

    def rotate_webhook_secret(self, webhook: Webhook | uuid.UUID | str) -> CreatedWebhook:
        """A new signing secret (in this answer only); the old one also signs for 24 hours, so
        the receiver can switch to the new one without refusing a delivery. Not retried."""
        response = self._send(
            "POST", f"/v1/webhooks/{_webhook_id(webhook)}/rotate-secret", retry=False
        )
        return CreatedWebhook.model_validate(response.json())

    def webhook_deliveries(
        self, webhook: Webhook | uuid.UUID | str, *, limit: int = 50, offset: int = 0
    ) -> list[WebhookDelivery]:
        """A page of the subscription's delivery log, newest event first."""
        body = self._send(
            "GET",
            f"/v1/webhooks/{_webhook_id(webhook)}/deliveries",
            retry=True,
            params={"limit": limit, "offset": offset},
        ).json()
        return [WebhookDelivery.model_validate(item) for item in body["items"]]

    def replay_delivery(self, delivery: WebhookDelivery | uuid.UUID | str) -> WebhookDelivery:
        """Send a delivery again (pending and due now, with a fresh backoff)."""
        ref = delivery.id if isinstance(delivery, WebhookDelivery) else delivery
        response = self._send("POST", f"/v1/webhooks/deliveries/{ref}/replay", retry=True)
        return WebhookDelivery.model_validate(response.json())


def _webhook_id(webhook: Webhook | uuid.UUID | str) -> str:
    return str(webhook.id if isinstance(webhook, Webhook) else webhook)


def _stage(job: Job) -> str:
    """The bar's label: the public stage, and while queued where the job stands (as of the
    minute before the last, as the service counts it)."""
    stage = job.progress.stage or job.status
    if job.queue is None:
        return stage
    place = job.queue
    return f"{stage}: {place.jobs_ahead} ahead as of {place.as_of:%H:%M} UTC"


class _ProgressBar:
    """A tqdm bar over [0, 100] % (tqdm.auto: a widget in notebooks), or nothing."""

    def __init__(self, description: str, *, enabled: bool) -> None:
        self._bar: Any = None
        if enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=100, desc=description, unit="%", leave=True)

    def show(self, fraction: float | None, stage: str) -> None:
        if self._bar is None:
            return
        if fraction is not None:
            target = round(min(max(fraction, 0.0), 1.0) * 100)
            if target > self._bar.n:
                self._bar.update(target - self._bar.n)
        self._bar.set_postfix_str(stage, refresh=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
