"""The owner tier is built after the release is published, by a reports worker
(app/jobs/owner_tier.py): whether it is built changes nothing an analyst sees (privacy rule 6),
and a failure leaves the release as it was."""

from __future__ import annotations

import contextlib
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import execution, owner_tier, repository
from app.jobs.execution import claim_and_charge
from app.jobs.repository import Claim
from app.reports import names
from app.reports.artefacts import VALUES_NOT_KEPT, ArtefactWriter
from app.storage import LocalStorage, dataset_table_key, dataset_values_key, job_output_key
from engine.tables.encoding import TableSchema
from engine.tables.local import load_numeric_values
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _claimed(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> tuple[Settings, sessionmaker[Session], dict[str, Any], uuid.UUID, Claim]:
    """A new dataset and one job of it, claimed and charged in this process (no worker)."""
    settings = api_stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = uuid.UUID(submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"])
    claim = claim_and_charge(factory, settings, job_id)
    assert claim is not None
    return settings, factory, dataset, job_id, claim


def _publish(
    factory: sessionmaker[Session], job_id: uuid.UUID, claim: Claim, artefacts: list[str]
) -> None:
    """Publish the claimed attempt as the job worker does (its owner tier left pending)."""
    with transaction(factory) as session:
        assert repository.complete(
            session,
            job_id,
            claim.attempt,
            output_key=job_output_key(job_id, claim.attempt),
            output_rows=10,
            artefacts=artefacts,
            now=utcnow(),
        )


def test_owner_tier_failure_leaves_the_release_and_success_adds_owner_names(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings, factory, dataset, job_id, claim = _claimed(
        api_stack, tenant, people_csv, people_schema
    )
    storage = LocalStorage(settings.resolved_storage_dir)
    published = [names.RECORD, names.RELEASE_JSON]
    schema = TableSchema.from_json(json.loads(people_schema))
    owner_tier.save_owner_input(
        storage, job_id, claim.attempt, np.zeros((10, len(schema.names)), dtype=np.int64)
    )
    _publish(factory, job_id, claim, published)
    # No output file was written here: compare codes only (as for a dataset stored before raw
    # values were kept), so the owner tier reads the table and the codes left for it.
    (storage.root / dataset_values_key(uuid.UUID(dataset["id"]))).unlink()
    before = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    table = storage.root / dataset_table_key(uuid.UUID(dataset["id"]))
    hidden = table.with_name("hidden")
    table.rename(hidden)  # the table is unreadable: each build fails, is logged, raises nothing
    outcomes = [owner_tier.build_owner_tier(settings, job_id) for _ in range(2)]
    assert outcomes == ["retry", "retry"]
    owner = tenant.owner.get(f"/v1/jobs/{job_id}").json()
    assert owner["status"] == "succeeded" and owner["artefacts"] == published

    hidden.rename(table)
    assert owner_tier.build_owner_tier(settings, job_id) == "built"
    owner = tenant.owner.get(f"/v1/jobs/{job_id}").json()
    assert set(owner["artefacts"]) == {*published, names.OWNER_JSON, names.OWNER_HTML}
    after = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert after == before, "analysts see the same job whether or not the owner tier exists"
    # Built once: a second delivery does nothing, and the codes left for it are gone.
    assert owner_tier.build_owner_tier(settings, job_id) == "skipped"
    assert not storage.exists(names.owner_input_key(job_id, claim.attempt))


def test_an_owner_tier_that_keeps_failing_is_given_up(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings, factory, _dataset, job_id, claim = _claimed(
        api_stack, tenant, people_csv, people_schema
    )
    # published without the codes the owner tier reads
    _publish(factory, job_id, claim, [names.RECORD])
    report = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
    assert report.status_code == 202 and report.json()["status"] == "building"
    assert report.headers["Retry-After"] == "5"
    tries = owner_tier.MAX_OWNER_TIER_TRIES
    outcomes = [owner_tier.build_owner_tier(settings, job_id) for _ in range(tries + 1)]
    assert outcomes == ["retry"] * (tries - 1) + ["failed", "skipped"]
    with transaction(factory) as session:
        job = repository.get(session, job_id)
        assert job is not None and job.owner_tier == "failed"
        assert job.owner_tier_tries == tries
    assert tenant.analyst.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
    gone = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"})
    assert gone.status_code == 404, "given up: no longer being built"


class _Recording(LocalStorage):
    """Local storage that notes every key a job opens, and when the job published."""

    def __init__(self, root: Path, events: list[tuple[str, str]]) -> None:
        super().__init__(root)
        self.events = events

    def local_copy(self, key: str) -> contextlib.AbstractContextManager[Path]:
        self.events.append(("read", key))
        return super().local_copy(key)


def _run_job(
    api_stack: Stack, tenant: Tenant, dataset_id: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[uuid.UUID, list[tuple[str, str]]]:
    """One attempt of an `independent` job run in this process, with the keys it opened."""
    settings = api_stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    job_id = uuid.UUID(submit(tenant.analyst, dataset_id, rho="0.5").json()["id"])
    claim = claim_and_charge(factory, settings, job_id)
    assert claim is not None
    events: list[tuple[str, str]] = []
    storage = _Recording(settings.resolved_storage_dir, events)
    monkeypatch.setattr(execution, "open_storage", lambda _settings: storage)
    complete = execution.repository.complete

    def publishing(*args: Any, **kwargs: Any) -> bool:
        events.append(("publish", ""))
        return bool(complete(*args, **kwargs))

    monkeypatch.setattr(execution.repository, "complete", publishing)
    assert execution._run_attempt(factory, settings, claim).status == "succeeded"
    # What a reports worker does with the message the attempt sent.
    monkeypatch.setattr(owner_tier, "open_storage", lambda _settings: storage)
    assert owner_tier.build_owner_tier(settings, job_id) == "built"
    return job_id, events


def _column_of(path: Path, name: str) -> np.ndarray:
    column = pq.read_table(path, columns=[name]).column(name)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.float64)


def test_an_upload_and_a_job_give_an_owner_report_on_values_read_after_publication(
    api_stack: Stack,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    dataset_id = uuid.UUID(dataset["id"])
    values_key = dataset_values_key(dataset_id)
    root = api_stack.settings.resolved_storage_dir
    assert (root / values_key).is_file(), "the upload kept the raw values beside the table"
    job_id, events = _run_job(api_stack, tenant, dataset["id"], monkeypatch)

    # Privacy: the synthesis read the codes only; the raw values were read after publication,
    # by the owner tier.
    published = events.index(("publish", ""))
    before = [key for kind, key in events[:published] if kind == "read"]
    after = [key for kind, key in events[published:] if kind == "read"]
    assert dataset_table_key(dataset_id) in before
    assert values_key not in before
    assert values_key in after

    report = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"}).json()
    assert report["values"]["available"] is True
    columns = {c["column"]: c for c in report["values"]["columns"]}
    assert set(columns) == {"age", "income"}
    real = load_numeric_values(
        FIXTURES / "people.csv", TableSchema.from_json(json.loads(people_schema))
    )
    output = root / job_output_key(job_id, 1)
    for name, column in columns.items():
        real_values = real.column(name).to_numpy(zero_copy_only=False)
        assert column["real"]["min"] == pytest.approx(np.nanmin(real_values))
        assert column["real"]["max"] == pytest.approx(np.nanmax(real_values))
        # The synthetic side is the published output, the rows analysts download.
        published_values = _column_of(output, name)
        assert column["synthetic"]["min"] == pytest.approx(np.nanmin(published_values))
        assert column["synthetic"]["max"] == pytest.approx(np.nanmax(published_values))
        assert column["ks"] is not None
    assert report["verdict"]["status"] in ("values_off", "values_close")
    assert report["correlations"]["source"]["age"] == "values"
    page = tenant.owner.get(
        f"/v1/jobs/{job_id}/report", params={"tier": "owner", "format": "html"}
    ).text
    assert "Verdict" in page and report["verdict"]["headline"].split(" (")[0] in page

    # Analysts read neither the owner tier nor the values: no route serves either, and nothing
    # they can list names them.
    for fmt in ("json", "html"):
        refused = tenant.analyst.get(
            f"/v1/jobs/{job_id}/report", params={"tier": "owner", "format": fmt}
        )
        assert refused.status_code == 403
    seen = [
        tenant.analyst.get(f"/v1/jobs/{job_id}").text,
        tenant.analyst.get(f"/v1/datasets/{dataset_id}").text,
        tenant.analyst.get(f"/v1/jobs/{job_id}/report").text,
    ]
    assert not any("values.arrow" in text or "report-owner" in text for text in seen)
    assert tenant.analyst.get(f"/v1/datasets/{dataset_id}/values").status_code == 404


def test_a_dataset_stored_before_raw_values_were_kept_falls_back_to_bins(
    api_stack: Stack,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    values = api_stack.settings.resolved_storage_dir / dataset_values_key(uuid.UUID(dataset["id"]))
    values.unlink()  # as a dataset uploaded before this change
    job_id, _ = _run_job(api_stack, tenant, dataset["id"], monkeypatch)
    report = tenant.owner.get(f"/v1/jobs/{job_id}/report", params={"tier": "owner"}).json()
    assert report["values"] == {"available": False, "reason": VALUES_NOT_KEPT, "columns": []}
    assert report["verdict"]["status"] == "bins_only"
    assert report["verdict"]["headline"].startswith("Values not compared.")
    assert set(report["correlations"]["source"].values()) == {"codes"}
    assert report["marginals"]["k_marginal_score"] is not None, "the rest is as before"


@pytest.mark.parametrize("report_raises", [True, False])
def test_a_run_past_its_deadline_is_failed_not_published(
    api_stack: Stack,
    tenant: Tenant,
    people_csv: bytes,
    people_schema: str,
    monkeypatch: pytest.MonkeyPatch,
    report_raises: bool,
) -> None:
    """Issue 24 §9: a run that passes its deadline while its report is built (Celery's soft time
    limit fires inside the builder, which caught it as an ordinary error) or just before it
    publishes (no progress report in between) ends failed with the time limit's text; it was
    published `succeeded` past its deadline, without its release report."""
    from billiard.exceptions import SoftTimeLimitExceeded
    from sqlalchemy import update

    from app.jobs.limits import time_limit_error
    from app.jobs.models import Job

    settings, factory, _dataset, job_id, claim = _claimed(
        api_stack, tenant, people_csv, people_schema
    )
    late = {"now": False}
    monkeypatch.setattr(execution._Lease, "past_deadline", lambda _self: late["now"])
    write = execution.write_release_artefacts

    def overrunning(writer: ArtefactWriter, *args: Any, **kwargs: Any) -> None:
        with transaction(factory) as session:
            session.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(deadline_at=utcnow() - timedelta(seconds=1))
            )
        late["now"] = True
        if report_raises:
            writer.attempt("release report", _raise(SoftTimeLimitExceeded()))
        else:
            write(writer, *args, **kwargs)

    monkeypatch.setattr(execution, "write_release_artefacts", overrunning)
    outcome = execution._run_attempt(factory, settings, claim)
    assert outcome.status == "failed"
    job = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert job["status"] == "failed", job
    assert job["error"] == time_limit_error(settings.job_time_limit_seconds)
    assert tenant.analyst.get(f"/v1/jobs/{job_id}/download").status_code in (404, 409)


def _raise(error: BaseException) -> Any:
    def build() -> None:
        raise error

    return build


def test_an_erased_dataset_leaves_nothing_to_build_and_nothing_to_resend(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings, factory, dataset, job_id, claim = _claimed(
        api_stack, tenant, people_csv, people_schema
    )
    _publish(factory, job_id, claim, [names.RECORD])
    assert tenant.owner.delete(f"/v1/datasets/{dataset['id']}").status_code == 200
    assert owner_tier.build_owner_tier(settings, job_id) == "skipped"
    with transaction(factory) as session:
        job = repository.get(session, job_id)
        assert job is not None and job.owner_tier is None
        later = utcnow() + timedelta(days=1)
        assert job_id not in repository.stale_owner_tiers(session, later, 1000)
