"""rhosynth.client against the real API (no worker: submitted jobs stay queued)."""

from __future__ import annotations

import json
import uuid
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from rhosynth import errors
from rhosynth.models import DomainWarning
from tests.client.conftest import PEOPLE_CSV, PEOPLE_SCHEMA, Clients


def test_estimate_reserves_nothing(clients: Clients) -> None:
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    ledger_before = clients.owner.ledger(dataset)
    preview = clients.analyst.estimate(dataset, "mst", rho="0.25", rows=100, seed=1)
    assert preview.rho == Decimal("0.25")
    assert preview.remaining_rho == Decimal("1")
    assert preview.remaining_rho_after == Decimal("0.75")
    assert not preview.would_exceed_budget
    assert preview.first_noise
    assert clients.owner.budget(dataset) == ledger_before.budget
    assert clients.owner.budget(dataset).reserved_rho == 0
    assert clients.owner.ledger(dataset).items == ledger_before.items
    assert clients.analyst.jobs(dataset) == []
    # An estimate over the budget says so, and is no error.
    assert clients.analyst.estimate(dataset, "mst", rho="5").would_exceed_budget


def test_submit_reserves_and_over_budget_carries_requested_and_remaining(clients: Clients) -> None:
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    job = clients.analyst.submit(dataset, "independent", rho="0.75", seed=4)
    assert job.status == "queued" and job.rho == Decimal("0.75")
    assert clients.analyst.budget(dataset).reserved_rho == Decimal("0.75")
    with pytest.raises(errors.OverBudget) as raised:
        clients.analyst.submit(dataset, "independent", rho="0.5")
    assert raised.value.status == 409
    assert raised.value.requested_rho == Decimal("0.5")
    assert raised.value.remaining_rho == Decimal("0.25")
    assert "budget" in str(raised.value.detail)
    # Nothing more was reserved; the refused job does not exist.
    assert clients.analyst.budget(dataset).reserved_rho == Decimal("0.75")
    assert [j.id for j in clients.analyst.jobs(dataset)] == [job.id]
    # Cancelling the queued job releases its reservation.
    assert clients.analyst.cancel(job).status == "cancelled"
    assert clients.analyst.budget(dataset).remaining_rho == Decimal("1")
    kinds = [entry.kind for entry in clients.owner.ledger(dataset).items]
    assert kinds == ["grant", "reserve", "release"]


def test_a_repeated_idempotency_key_gets_the_same_job(clients: Clients) -> None:
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    first = clients.analyst.submit(dataset, "independent", rho="0.1", idempotency_key="k-1")
    again = clients.analyst.submit(dataset, "independent", rho="0.1", idempotency_key="k-1")
    assert again.id == first.id
    assert clients.analyst.budget(dataset).reserved_rho == Decimal("0.1")
    with pytest.raises(errors.Conflict):
        clients.analyst.submit(dataset, "independent", rho="0.2", idempotency_key="k-1")


def test_not_found_and_forbidden_are_typed(clients: Clients) -> None:
    with pytest.raises(errors.NotFound) as missing:
        clients.analyst.dataset(uuid.uuid4())
    assert missing.value.status == 404 and missing.value.detail == "dataset not found"
    with pytest.raises(errors.NotFound, match="job not found"):
        clients.analyst.job(uuid.uuid4())
    with pytest.raises(errors.Forbidden) as forbidden:
        clients.analyst.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    assert forbidden.value.status == 403
    dataset = clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho="1")
    with pytest.raises(errors.Forbidden):
        clients.analyst.grant(dataset, "1")
    with pytest.raises(errors.Invalid) as invalid:
        clients.analyst.submit(dataset, "independent", rho="0.1", rows=0)
    assert invalid.value.status == 422 and "rows" in str(invalid.value)
    with pytest.raises(errors.Unauthorized):
        type(clients.owner)(clients.url, "rhs_not_a_key").datasets()


def test_owner_reads_lists_grants_and_deletes(clients: Clients) -> None:
    frame = pd.read_csv(PEOPLE_CSV)
    dataset = clients.owner.upload(frame, PEOPLE_SCHEMA.read_text(), "from a frame", budget_rho=1)
    assert dataset.n_rows == len(frame)  # the DataFrame arrived whole, as Parquet
    assert [c.name for c in dataset.columns] == list(frame.columns)
    assert dataset.id in {d.id for d in clients.analyst.datasets()}
    assert clients.analyst.dataset(dataset).n_rows is None  # exact counts: owners only
    granted = clients.owner.grant(dataset, "0.5")
    assert granted.budget.total_rho == Decimal("1.5")
    assert [e.kind for e in clients.owner.ledger(dataset).items] == ["grant", "grant"]
    deleted = clients.owner.delete(dataset)
    assert deleted.deleted_at is not None
    with pytest.raises(errors.Conflict, match="deleted"):
        clients.analyst.submit(dataset, "independent", rho="0.1")


def test_draft_schema_and_methods(clients: Clients) -> None:
    draft = clients.owner.draft_schema(PEOPLE_CSV)
    assert [c["name"] for c in draft.schema_["columns"]] == ["city", "age", "tier", "income"]
    assert draft.rows > 0 and not draft.show_values
    # The draft is ready to upload as is (its categories are discovered with DP: (ρ, δ)).
    assert draft.discovers
    dataset = clients.owner.upload(
        PEOPLE_CSV, draft.schema_, "drafted", budget_rho="1", budget_delta="1e-6"
    )
    assert len(dataset.columns) == 4
    assert any(column.discovered for column in dataset.columns)
    assert [e.kind for e in clients.owner.ledger(dataset).items] == ["grant", "discover"]
    names = {method.name for method in clients.analyst.methods()}
    assert {"mst", "independent"} <= names


def test_the_dataset_carries_its_warnings_and_learned_domains(
    clients: Clients, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from app.cli import main
    from tests.console.support import SUSPICIOUS_CODES, SUSPICIOUS_SCHEMA, suspicious_csv

    table = tmp_path / "suspicious.csv"
    table.write_bytes(suspicious_csv())
    dataset = clients.owner.upload(
        table, SUSPICIOUS_SCHEMA, "suspicious", budget_rho="1", budget_delta="0.000001"
    )
    assert [(w.code, w.column) for w in dataset.warnings] == SUSPICIOUS_CODES
    assert all(isinstance(w, DomainWarning) and str(w) == w.message for w in dataset.warnings)
    learned = dataset.learned_domains
    assert set(learned) == {"code", "city", "age", "joined"}  # income is declared
    assert learned["code"] == [] and {"Lyon", "Paris"} <= set(learned["city"])
    assert learned["joined"][0] == "2010-01-01" and learned["age"][-1] == 100
    seen = clients.analyst.dataset(dataset.id)
    assert seen.warnings == dataset.warnings and seen.learned_domains == learned
    assert [d.warnings for d in clients.analyst.datasets() if d.id == dataset.id] == [
        dataset.warnings
    ]

    # `rhosynth remote upload` prints them on standard error; standard output stays the JSON.
    schema = tmp_path / "schema.json"
    schema.write_text(SUSPICIOUS_SCHEMA)
    result = CliRunner().invoke(
        main,
        ["remote", "upload", str(table), "--schema", str(schema), "--name", "cli",
         "--budget-rho", "1", "--budget-delta", "0.000001"],
        env={"RHOSYNTH_URL": clients.url, "RHOSYNTH_API_KEY": clients.owner_key},
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    printed = json.loads(result.stdout)
    for warning in printed["warnings"]:
        assert f"warning ({warning['code']}): {warning['message']}" in result.stderr
    assert "learned with DP: city: [" in result.stderr
    assert "learned with DP: age: [0, " in result.stderr and ", …] (" in result.stderr
