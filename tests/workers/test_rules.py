"""Issue 28 §2 over HTTP: a schema with rules, a job and a derived sample that keep them.

tests/fixtures/spans.csv keeps four declared rules (tests/fixtures/spans-schema.json):
``end >= start``, ``age >= 16 if wrkstat = Full-Time``, a set of allowed (region, tier)
combinations and ``total = a + b``. A real worker releases it with MST; the downloaded table
must keep every rule, and the release report must count what keeping them did.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tests.conftest import Tenant
from tests.support.api import create_dataset, submit, upload, wait_for, wait_for_sample
from tests.support.stack import Stack

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DATA = (FIXTURES / "spans.csv").read_bytes()
SCHEMA = (FIXTURES / "spans-schema.json").read_text()
ALLOWED = {("north", "gold"), ("north", "silver"), ("south", "bronze"), ("east", "silver")}


def _violations(text: str) -> dict[str, int]:
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows
    return {
        "end >= start": sum(int(r["end"]) < int(r["start"]) for r in rows),
        "age": sum(r["wrkstat"] == "Full-Time" and int(r["age"]) < 16 for r in rows),
        "allowed": sum((r["region"], r["tier"]) not in ALLOWED for r in rows),
        "sum": sum(
            abs(float(r["total"]) - float(r["a"]) - float(r["b"])) > 0.05 + 1e-9 for r in rows
        ),
    }


def test_release_and_sample_keep_the_declared_rules(
    worker_stack: Stack, worker_tenant: Tenant
) -> None:
    tenant = worker_tenant
    dataset = create_dataset(tenant.owner, DATA, SCHEMA, budget_rho="2")
    # The rules are public: an analyst sees them with the schema.
    shown = tenant.analyst.get(f"/v1/datasets/{dataset['id']}").json()
    assert shown["rules"] == json.loads(SCHEMA)["rules"]

    response = submit(tenant.analyst, dataset["id"], rho="1", method="mst", rows=3000, seed=5)
    assert response.status_code == 202, response.text
    job = wait_for(tenant.analyst, response.json()["id"], timeout=300)
    assert job["status"] == "succeeded", (job, worker_stack.logs())

    output = tenant.analyst.get(f"/v1/jobs/{job['id']}/output", params={"format": "csv"})
    assert output.status_code == 200
    assert _violations(output.text) == {"end >= start": 0, "age": 0, "allowed": 0, "sum": 0}

    report: dict[str, Any] = tenant.analyst.get(
        f"/v1/jobs/{job['id']}/report", params={"format": "json"}
    ).json()
    rules = report["rules"]
    assert rules["rows"] == 3000 and rules["remaining_rows"] == 0
    assert rules["redraw"] == "model"
    names = [r["rule"] for r in rules["rules"]]
    assert names == [
        "end >= start",
        "age >= 16 if wrkstat in ['Full-Time']",
        "(region, tier) in 4 allowed combinations",
        "total = a + b",
    ]
    for counts in rules["rules"]:
        assert counts["remaining"] == 0
        mended = counts["resampled_in_bins"] + counts["redrawn"] + counts["repaired"]
        assert mended >= counts["violating_before"]
    # Values drawn inside bins break the sum nearly always: it is set by the repair.
    assert rules["rules"][3]["violating_before"] > 1000 and rules["rules"][3]["repaired"] > 1000

    sample = tenant.analyst.post(f"/v1/jobs/{job['id']}/samples", json={"rows": 2000, "seed": 9})
    assert sample.status_code == 202, sample.text
    done = wait_for_sample(tenant.analyst, sample.json()["id"])
    assert done["status"] == "succeeded", (done, worker_stack.logs())
    drawn = tenant.analyst.get(f"/v1/samples/{done['id']}/output", params={"format": "csv"})
    assert _violations(drawn.text) == {"end >= start": 0, "age": 0, "allowed": 0, "sum": 0}


def test_a_rule_naming_an_unknown_column_is_refused(
    worker_stack: Stack, worker_tenant: Tenant
) -> None:
    schema = json.loads(SCHEMA)
    schema["rules"].append({"compare": ["finish", ">=", "start"]})
    response = upload(worker_tenant.owner, DATA, json.dumps(schema))
    assert response.status_code == 422
    assert response.json()["detail"] == (
        "invalid schema: rules[4] (finish >= start): column 'finish' is not in the schema"
    )
