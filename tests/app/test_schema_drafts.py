"""POST /v1/schema-drafts: an owner gets the draft the local command would print; nothing is
stored, no budget is spent, and Parquet is checked like an upload before it is decoded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.datasets.ingest import UploadRejected
from app.drafts.service import draft_for_upload
from app.main import create_app
from engine.schema_draft import DEFAULT_MISSING_VALUES, draft_schema
from tests.conftest import Tenant
from tests.support.bombs import dictionary_bomb, distinct_dictionary_bomb
from tests.support.stack import Stack

RAW = (
    "id,city,grams,opened,member,state\n"
    "A-1001,Lisbon,327,Mar-2018,yes,OR\n"
    "A-1002,Oslo,?,Apr-2018,no,WA\n"
    "A-1003,,18823,Mar-2019,,OR\n"
    "A-1004,Quito,1200,Jan-2017,yes,WA\n"
    "A-1005,Oslo,1200,Jan-2017,yes,OR\n"
    "A-1006,Lisbon,1200,Jan-2017,yes,OR\n"
    "A-1007,Quito,1200,Jan-2017,yes,WA\n"
    "A-1008,Oslo,1200,Jan-2017,yes,OR\n"
    "A-1009,Lisbon,1200,Jan-2017,yes,OR\n"
    "A-1010,Quito,1200,Jan-2017,yes,WA\n"
    "A-1011,Oslo,1200,Jan-2017,yes,OR\n"
    "A-1012,Lisbon,1200,Jan-2017,yes,OR\n"
    "A-1013,Quito,1200,Jan-2017,yes,WA\n"
    "A-1014,Oslo,1200,Jan-2017,yes,OR\n"
    "A-1015,Lisbon,1200,Jan-2017,yes,OR\n"
    "A-1016,Quito,1200,Jan-2017,yes,WA\n"
)


def _post(client: object, data: bytes, **fields: str) -> object:
    return client.post(  # type: ignore[attr-defined]
        "/v1/schema-drafts", files={"file": ("raw.csv", data, "text/csv")}, data=fields
    )


def _stored_files(stack: Stack) -> list[Path]:
    root = Path(stack.values["storage_dir"])
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def test_owner_gets_the_local_draft_and_nothing_is_stored(
    api_stack: Stack, tenant: Tenant, tmp_path: Path
) -> None:
    before_files = _stored_files(api_stack)
    before_datasets = tenant.owner.get("/v1/datasets").json()["items"]
    missing = json.dumps([*DEFAULT_MISSING_VALUES, "?"])
    response = _post(tenant.owner, RAW.encode(), missing_values=missing)
    assert response.status_code == 200, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    local = tmp_path / "raw.csv"
    local.write_text(RAW)
    expected = draft_schema(local, missing_values=(*DEFAULT_MISSING_VALUES, "?"))
    assert body["schema"] == expected.to_json()
    entries = {c["name"]: c for c in body["schema"]["columns"]}
    assert entries["id"]["type"] == "ignore"
    # Every column is nullable ("?" was declared a missing spelling; "member" has none).
    assert entries["grams"]["nullable"] is True and entries["member"]["nullable"] is True
    assert entries["opened"]["type"] == "date" and entries["opened"]["format"] == "%b-%Y"
    # A US state column: a public candidate list chosen from the name, found with DP.
    assert entries["state"]["categories"]["candidates"][:3] == ["AK", "AL", "AR"]
    assert body["rows"] == 16 and body["discovers"] is True
    # The warning names what the schema took from the data without DP, and nothing else.
    assert body["warning"] == expected.disclosure()
    assert "the date format of 'opened'" in body["warning"]
    assert "which columns are dropped ('id'" in body["warning"]
    for value in ("A-1001", "Lisbon", "Oslo", "Quito", "18823", "327"):
        assert value not in response.text  # type: ignore[attr-defined]
    assert _stored_files(api_stack) == before_files
    assert tenant.owner.get("/v1/datasets").json()["items"] == before_datasets


def test_show_values_lists_them_with_a_warning(tenant: Tenant) -> None:
    response = _post(tenant.owner, RAW.encode(), show_values="true")
    assert response.status_code == 200, response.text  # type: ignore[attr-defined]
    body = response.json()  # type: ignore[attr-defined]
    city = next(c for c in body["schema"]["columns"] if c["name"] == "city")
    assert sorted(city["categories"]) == ["Lisbon", "Oslo", "Quito"]
    assert "every analyst" in body["warning"]
    assert "Read from the data without DP" in body["warning"]


def test_a_csv_without_a_header_row_is_422_naming_no_value(tenant: Tenant) -> None:
    headless = "".join(RAW.splitlines(keepends=True)[1:])
    response = _post(tenant.owner, headless.encode())
    assert response.status_code == 422, response.text  # type: ignore[attr-defined]
    detail = response.json()["detail"]  # type: ignore[attr-defined]
    assert detail.startswith("the first row looks like data, not column names")
    for value in ("A-1001", "Lisbon", "327", "Mar-2018", "OR"):
        assert value not in response.text  # type: ignore[attr-defined]


def test_analysts_and_bad_forms_are_refused(tenant: Tenant) -> None:
    assert _post(tenant.analyst, RAW.encode()).status_code == 403  # type: ignore[attr-defined]
    bad = _post(tenant.owner, RAW.encode(), missing_values='{"a": 1}')
    assert bad.status_code == 422  # type: ignore[attr-defined]
    bad = _post(tenant.owner, RAW.encode(), show_values="maybe")
    assert bad.status_code == 422  # type: ignore[attr-defined]
    ragged = _post(tenant.owner, b"a,b\nsecret-value,1\nsecret-other\n")
    assert ragged.status_code == 422  # type: ignore[attr-defined]
    assert "secret" not in ragged.text  # type: ignore[attr-defined]


def test_parquet_is_checked_like_an_upload_before_decoding(tenant: Tenant) -> None:
    data, _ = distinct_dictionary_bomb(2_500_000)
    response = tenant.owner.post(
        "/v1/schema-drafts", files={"file": ("bomb.parquet", data, "application/octet-stream")}
    )
    assert response.status_code == 422, response.text
    assert "MiB of pages at once" in response.json()["detail"]


def test_a_file_of_repeated_long_values_is_drafted_from_a_sample(tenant: Tenant) -> None:
    """Issue 24 §7: 16 dictionary columns of one 1,000-byte value over 10⁶ rows (1.7 MB on
    disk, 16 GB decoded) took 116 s to draft. The draft reads its first rows up to
    RHOSYNTH_DRAFT_SAMPLE_BYTES (64 MiB) of decoded values and says so."""
    data, _ = dictionary_bomb(columns=16, rows=1_000_000)
    response = tenant.owner.post(
        "/v1/schema-drafts", files={"file": ("bomb.parquet", data, "application/octet-stream")}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert 0 < body["rows"] < 1_000_000
    assert f"first {body['rows']:,} rows" in body["warning"]


def test_files_over_the_draft_cap_are_413(tmp_path: Path) -> None:
    path = tmp_path / "raw.csv"
    path.write_text(RAW * 400)
    settings = Settings(home=tmp_path, max_draft_bytes=1024)
    with pytest.raises(UploadRejected) as refused:
        draft_for_upload(path, settings, missing_values=DEFAULT_MISSING_VALUES, show_values=False)
    assert refused.value.status_code == 413


def test_a_csv_header_wider_than_max_columns_is_refused_before_reading_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.drafts.service as service

    def no_pass(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the draft read the rows")

    monkeypatch.setattr(service, "draft_schema", no_pass)
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(6)) + "\n" + "1,2,3,4,5,6\n" * 100)
    settings = Settings(home=tmp_path, max_columns=5)
    with pytest.raises(UploadRejected) as refused:
        draft_for_upload(path, settings, missing_values=DEFAULT_MISSING_VALUES, show_values=False)
    assert (refused.value.status_code, refused.value.message) == (
        422,
        "the file has more than 5 columns",
    )


def test_draft_bodies_over_max_draft_bytes_are_413_before_spooling(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, max_draft_bytes=1024)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        # Refused by the body-size middleware, before authentication or spooling.
        response = _post(client, RAW.encode() * 2000)
        assert response.status_code == 413, response.text  # type: ignore[attr-defined]
        small = _post(client, RAW.encode())
        assert small.status_code != 413  # type: ignore[attr-defined]
