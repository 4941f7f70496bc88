"""The owner tier is built after the release is published: whether it is built changes nothing
an analyst sees (privacy rule 6), and a failure leaves the release as it was."""

from __future__ import annotations

import json
import uuid

import numpy as np

from app.db.base import utcnow
from app.db.session import get_session_factory, transaction
from app.jobs import repository
from app.jobs.execution import _owner_tier, _Produced, claim_and_charge
from app.reports import names
from app.reports.artefacts import ArtefactWriter
from app.storage import LocalStorage, dataset_table_key, job_output_key
from engine.encoding import TableSchema
from tests.conftest import Tenant
from tests.support.api import create_dataset, submit
from tests.support.stack import Stack


def test_owner_tier_failure_leaves_the_release_and_success_adds_owner_names(
    api_stack: Stack, tenant: Tenant, people_csv: bytes, people_schema: str
) -> None:
    settings = api_stack.settings
    factory = get_session_factory(settings.sqlalchemy_url)
    storage = LocalStorage(settings.resolved_storage_dir)
    dataset = create_dataset(tenant.owner, people_csv, people_schema)
    job_id = uuid.UUID(submit(tenant.analyst, dataset["id"], rho="0.1").json()["id"])
    claim = claim_and_charge(factory, settings, job_id)
    assert claim is not None
    published = [names.RECORD, names.RELEASE_JSON]
    with transaction(factory) as session:
        assert repository.complete(
            session,
            job_id,
            claim.attempt,
            output_key=job_output_key(job_id, claim.attempt),
            output_rows=10,
            artefacts=published,
            now=utcnow(),
        )
    schema = TableSchema.from_json(json.loads(people_schema))
    synthetic = np.zeros((10, len(schema.names)), dtype=np.int64)

    def run(table_key: str) -> None:
        writer = ArtefactWriter(storage, job_id, claim.attempt)
        writer.written.extend(published)
        produced = _Produced(10, schema, table_key, synthetic, "title")
        _owner_tier(factory, storage, claim, writer, produced)

    before = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    run("datasets/missing/table.parquet")  # the table is gone: logged, nothing raised
    owner = tenant.owner.get(f"/v1/jobs/{job_id}").json()
    assert owner["status"] == "succeeded" and owner["artefacts"] == published

    run(dataset_table_key(uuid.UUID(dataset["id"])))
    owner = tenant.owner.get(f"/v1/jobs/{job_id}").json()
    assert set(owner["artefacts"]) == {*published, names.OWNER_JSON, names.OWNER_HTML}
    after = tenant.analyst.get(f"/v1/jobs/{job_id}").json()
    assert after == before, "analysts see the same job whether or not the owner tier exists"
