"""The console's privacy unit (issue 28 §1): the upload form shows the draft's suggestion without
applying it, lets the owner set the unit's column and k, and the dataset, job and ledger pages
say "per person, at most k rows"."""

from __future__ import annotations

import io
import json
import random
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from app.console.schema_form import (
    SchemaFormError,
    apply_unit,
    apply_unit_to_json,
    schema_extra,
    unit_values,
)
from tests.conftest import Tenant
from tests.console.support import Console, form_fields, sign_in
from tests.support.stack import Stack


@pytest.fixture
def owner(api_stack: Stack, tenant: Tenant) -> Iterator[Console]:
    key = tenant.owner.headers["Authorization"].removeprefix("Bearer ")
    console = sign_in(api_stack, key)
    yield console
    console.close()


def _visits() -> bytes:
    rng = random.Random(4)
    rows = [
        {"customer_id": f"~c{rng.randrange(40):03d}~", "shop": rng.choice("abc"),
         "amount": rng.randint(1, 90)}
        for _ in range(300)
    ]  # fmt: skip
    out = io.StringIO()
    pd.DataFrame(rows).to_csv(out, index=False)
    return out.getvalue().encode()


def test_the_form_shows_the_suggestion_sets_the_unit_and_the_pages_state_it(
    tenant: Tenant, owner: Console
) -> None:
    data = _visits()
    draft = owner.http.post(
        "/console/datasets/upload",
        data={"csrf": owner.token(), "name": "visits", "budget_rho": "5", "action": "draft"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert draft.status_code == 200, draft.text
    assert 'id="unit_suggestion">Suggested:' in draft.text
    assert "customer_id (suggested)</option>" in draft.text
    fields = form_fields(draft.text, "/console/datasets/upload")
    # Shown, not applied: the draft uploaded as is stays row-level and keeps every row.
    assert (fields["unit.column"], fields["unit.max_rows"]) == ("", "")
    assert "privacy_unit" not in json.loads(fields["schema"])
    fields.update({"unit.column": "customer_id", "unit.max_rows": "3"})
    uploaded = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset_id = uploaded.headers["location"].rsplit("/", 1)[1]
    shown = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()
    assert shown["privacy"] == "per person, at most 3 rows"
    assert shown["privacy_unit"]["max_rows"] == 3
    page = owner.http.get(f"/console/datasets/{dataset_id}")
    assert page.status_code == 200
    assert "<strong>per person, at most 3 rows</strong>" in page.text
    assert "every ρ per person, at most 3 rows" in page.text  # the ledger's caption
    assert "(owners only)" in page.text and "~c0" not in page.text
    listed = owner.http.get("/console/datasets")
    assert ">per person, at most 3 rows</span>" in listed.text and "~c0" not in listed.text
    # k without a column is refused next to the form, which keeps what was typed.
    fields.update({"unit.column": "", "unit.max_rows": "4"})
    refused = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert refused.status_code == 422
    assert "choose its column" in refused.text
    assert form_fields(refused.text, "/console/datasets/upload")["unit.max_rows"] == "4"


def test_a_unit_chosen_in_the_form_is_not_dropped_by_a_json_schema(
    tenant: Tenant, owner: Console
) -> None:
    # The "Privacy unit" inputs show whichever schema source is chosen: with the JSON source,
    # a unit chosen there must not be silently dropped (a row-level dataset the owner believes
    # per person). It is added to a JSON schema without one; a JSON schema naming another is
    # refused beside the form.
    data = _visits()
    draft = owner.http.post(
        "/console/datasets/upload",
        data={"csrf": owner.token(), "name": "visits", "budget_rho": "5", "action": "draft"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert draft.status_code == 200, draft.text
    fields = form_fields(draft.text, "/console/datasets/upload")
    fields.update({"unit.column": "customer_id", "unit.max_rows": "2", "schema_source": "json"})
    uploaded = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert uploaded.status_code == 303, uploaded.text
    dataset_id = uploaded.headers["location"].rsplit("/", 1)[1]
    shown = tenant.owner.get(f"/v1/datasets/{dataset_id}").json()
    assert shown["privacy"] == "per person, at most 2 rows"

    other = json.loads(fields["schema"])
    other["privacy_unit"] = {"column": "shop", "max_rows": 2}
    fields["schema"] = json.dumps(other)
    refused = owner.http.post(
        "/console/datasets/upload",
        data={**fields, "action": "upload"},
        files={"file": ("visits.csv", data, "text/csv")},
    )
    assert refused.status_code == 422, refused.text[:300]
    assert "names another privacy unit" in refused.text


def test_the_unit_fields_round_trip_a_schema() -> None:
    schema = {"columns": [{"name": "a", "type": "ignore"}], "privacy_unit": {"column": "a"}}
    assert "privacy_unit" not in schema_extra(schema)
    values = unit_values(schema)
    assert values == {"unit.column": "a", "unit.max_rows": ""}
    assert apply_unit({"columns": []}, values)["privacy_unit"] == {"column": "a"}
    assert apply_unit({"columns": [], "privacy_unit": {"column": "a"}}, {"unit.column": ""}) == {
        "columns": []
    }
    with pytest.raises(SchemaFormError, match="must be a whole number"):
        apply_unit({"columns": []}, {"unit.column": "a", "unit.max_rows": "two"})
    # The JSON source: the same unit (k defaulting to 1) needs no change, none is added.
    same = json.dumps({"columns": [], "privacy_unit": {"column": "a", "max_rows": 1}})
    assert apply_unit_to_json(same, {"unit.column": "a"}) is None
    assert apply_unit_to_json(same, {"unit.column": ""}) is None
    added = apply_unit_to_json('{"columns": []}', {"unit.column": "a", "unit.max_rows": "3"})
    assert added is not None and json.loads(added)["privacy_unit"] == {"column": "a", "max_rows": 3}
    assert apply_unit_to_json("not json", {"unit.column": "a"}) is None
    with pytest.raises(SchemaFormError, match="another privacy unit"):
        apply_unit_to_json(same, {"unit.column": "a", "unit.max_rows": "2"})


@pytest.mark.browser
def test_an_owner_sets_the_privacy_unit_in_chromium(
    api_stack: Stack, tenant: Tenant, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    from tests.support.browser import chromium_path

    chromium = chromium_path()
    base = api_stack.base_url
    key = api_stack.create_key(tenant.name, "owner", "browser-unit-owner")
    raw = tmp_path / "visits.csv"
    raw.write_bytes(_visits())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
            page.goto(f"{base}/console")
            page.fill("#api_key", key)
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/console/datasets")
            page.set_input_files("#file", str(raw))
            page.fill("#name", "visits-in-browser")
            page.fill("#budget_rho", "5")
            page.click("button[value=draft]")
            page.wait_for_selector("#unit_column", state="visible")
            assert "Suggested:" in page.inner_text("#unit_suggestion")
            assert page.input_value("#unit_column") == ""  # shown, not applied
            page.select_option("#unit_column", "customer_id")
            page.fill("#unit_max_rows", "2")
            page.click("button[value=upload]")
            page.wait_for_url(f"{base}/console/datasets/*")
            assert "per person, at most 2 rows" in page.inner_text("#privacy_unit")
        finally:
            browser.close()
