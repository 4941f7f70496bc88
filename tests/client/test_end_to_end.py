"""rhosynth.client and ``rhosynth remote`` end to end: the real API and a real worker."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from app.cli import main
from rhosynth import errors
from rhosynth.client import Client
from tests.client.conftest import PEOPLE_CSV, PEOPLE_SCHEMA, Clients


def test_the_notebook_flow_in_five_lines(worker_clients: Clients) -> None:
    url, owner_key, analyst_key = (
        worker_clients.url,
        worker_clients.owner_key,
        worker_clients.analyst_key,
    )
    # -- the five lines of README.md and docs/client.md --
    owner = Client(url, owner_key)
    ds = owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho=1)
    analyst = Client(url, analyst_key)
    job = analyst.wait(analyst.submit(ds, "mst", rho=0.5, seed=7), progress=False)
    df, report = analyst.download(job), analyst.report(job)
    # --
    assert job.status == "succeeded", job.error
    real = pd.read_csv(PEOPLE_CSV)
    assert list(df.columns) == list(real.columns)
    assert len(df) == job.output_rows
    declared = {c.name: c for c in ds.columns}
    assert set(df["city"].dropna()) <= set(declared["city"].categories or ())
    assert isinstance(report, dict) and report
    assert analyst.budget(ds).spent_rho == Decimal("0.5")
    html = analyst.report(job, format="html")
    assert html.lstrip().lower().startswith("<!doctype html")
    with pytest.raises(errors.Forbidden):
        analyst.report(job, tier="owner")
    # CSV gives the same table (same rows, pandas' own types).
    assert len(analyst.download(job, format="csv")) == len(df)
    assert analyst.measurements(job)
    assert len(analyst.measurements(job, format="parquet")) > 0
    owner.close()
    analyst.close()


def test_samples_and_streamed_downloads(worker_clients: Clients, tmp_path: Path) -> None:
    analyst = worker_clients.analyst
    ds = worker_clients.owner.upload(PEOPLE_CSV, PEOPLE_SCHEMA, "people", budget_rho=1)
    job = analyst.wait(analyst.submit(ds, "mst", rho="0.5", seed=1), progress=False)
    assert job.status == "succeeded", job.error
    spent = analyst.budget(ds)
    sample = analyst.wait(analyst.sample(job, rows=25, seed=3), progress=False)
    assert sample.status == "succeeded", sample.error
    drawn = analyst.download(sample)
    assert len(drawn) == 25
    again = analyst.wait(analyst.sample(job, rows=25, seed=3), progress=False)
    pd.testing.assert_frame_equal(analyst.download(again), drawn)  # the same seed, the same rows
    assert analyst.budget(ds) == spent  # samples cost no ρ
    path = analyst.download_to(job, tmp_path / "out.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(path), analyst.download(job))


def _remote(clients: Clients, key: str, *args: str) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["remote", *args],
        env={"RHOSYNTH_URL": clients.url, "RHOSYNTH_API_KEY": key},
        catch_exceptions=False,
    )
    return result.exit_code, result.stdout, result.stderr


def test_remote_cli_upload_submit_wait_download(worker_clients: Clients, tmp_path: Path) -> None:
    owner, analyst = worker_clients.owner_key, worker_clients.analyst_key
    code, out, err = _remote(
        worker_clients, owner, "upload", str(PEOPLE_CSV), "--schema", str(PEOPLE_SCHEMA),
        "--name", "people", "--budget-rho", "1",
    )  # fmt: skip
    assert code == 0, err
    dataset = json.loads(out)
    code, out, err = _remote(
        worker_clients, analyst, "estimate", dataset["id"], "mst", "--rho", "0.4"
    )
    assert code == 0, err
    assert json.loads(out)["rho"] == "0.4"
    code, out, err = _remote(
        worker_clients, analyst, "submit", dataset["id"], "mst", "--rho", "0.4", "--seed", "2"
    )
    assert code == 0, err
    job = json.loads(out)
    code, out, err = _remote(worker_clients, analyst, "wait", job["id"], "--no-progress")
    assert code == 0, err
    assert json.loads(out)["status"] == "succeeded"
    target = tmp_path / "release.csv"
    code, out, err = _remote(worker_clients, analyst, "download", job["id"], "-o", str(target))
    assert code == 0, err
    table = pd.read_csv(target)
    assert list(table.columns) == ["city", "age", "tier", "income"]
    assert (
        len(table)
        == json.loads(_remote(worker_clients, analyst, "wait", job["id"], "--no-progress")[1])[
            "output_rows"
        ]
    )
    code, out, err = _remote(worker_clients, analyst, "budget", dataset["id"])
    assert json.loads(out)["spent_rho"] == "0.4"
    code, out, err = _remote(worker_clients, owner, "ledger", dataset["id"])
    assert [e["kind"] for e in json.loads(out)["items"]] == ["grant", "reserve", "spend"]
    code, out, err = _remote(worker_clients, analyst, "report", job["id"])
    assert code == 0 and json.loads(out)
    sample_path = tmp_path / "sample.parquet"
    code, out, err = _remote(
        worker_clients, analyst, "sample", job["id"], "--rows", "10", "-o", str(sample_path)
    )
    assert code == 0, err
    assert len(pd.read_parquet(sample_path)) == 10


def test_remote_cli_errors_print_the_detail_and_exit_non_zero(worker_clients: Clients) -> None:
    analyst, owner = worker_clients.analyst_key, worker_clients.owner_key
    code, _out, err = _remote(
        worker_clients, analyst, "upload", str(PEOPLE_CSV), "--schema", str(PEOPLE_SCHEMA),
        "--name", "people", "--budget-rho", "1",
    )  # fmt: skip
    assert code == 1 and "403" in err
    code, out, _err = _remote(
        worker_clients, owner, "upload", str(PEOPLE_CSV), "--schema", str(PEOPLE_SCHEMA),
        "--name", "people", "--budget-rho", "0.1",
    )  # fmt: skip
    dataset = json.loads(out)["id"]
    code, _out, err = _remote(worker_clients, analyst, "submit", dataset, "mst", "--rho", "0.5")
    assert code == 1
    assert "requested ρ 0.5" in err and "remaining ρ 0.1" in err
    code, _out, err = _remote(
        worker_clients, analyst, "wait", "00000000-0000-0000-0000-000000000000"
    )
    assert code == 1 and "job not found" in err
    runner = CliRunner()
    result = runner.invoke(
        main, ["remote", "datasets"], env={"RHOSYNTH_URL": "", "RHOSYNTH_API_KEY": ""}
    )
    assert result.exit_code == 2 and "RHOSYNTH_URL" in result.stderr


def test_remote_cli_draft_grant_and_cancel(worker_clients: Clients, tmp_path: Path) -> None:
    owner, analyst = worker_clients.owner_key, worker_clients.analyst_key
    code, out, err = _remote(worker_clients, owner, "draft", str(PEOPLE_CSV))
    assert code == 0, err
    assert [c["name"] for c in json.loads(out)["columns"]] == ["city", "age", "tier", "income"]
    assert "city:" in err  # the reasons, on stderr
    schema = tmp_path / "schema.json"
    schema.write_text(out)
    code, out, err = _remote(
        worker_clients, owner, "upload", str(PEOPLE_CSV), "--schema", str(schema),
        "--name", "drafted", "--budget-rho", "1", "--budget-delta", "1e-6",
    )  # fmt: skip
    assert code == 0, err
    dataset = json.loads(out)["id"]
    code, out, err = _remote(worker_clients, owner, "grant", dataset, "0.5")
    assert code == 0, err
    assert json.loads(out)["budget"]["total_rho"] == "1.5"
    code, out, err = _remote(worker_clients, owner, "datasets")
    assert dataset in {d["id"] for d in json.loads(out)}
    code, out, err = _remote(worker_clients, analyst, "submit", dataset, "mst", "--rho", "0.1")
    job = json.loads(out)["id"]
    code, out, err = _remote(worker_clients, analyst, "cancel", job)
    # Queued when the cancel arrived: cancelled; running: asked to stop; already finished: a
    # conflict the CLI reports with the server's detail.
    if code == 0:
        cancelled = json.loads(out)
        assert cancelled["status"] == "cancelled" or cancelled["cancel_requested"]
    else:
        assert code == 1 and "409" in err
