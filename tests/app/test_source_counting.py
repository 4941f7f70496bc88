"""The worker's path for a registered source (app/sources/counting.py), in process: the source's
files encoded as an upload would be and counted by DuckDB give the same tables as the upload's
stored codes counted in memory; a file changed after registration is refused before counting."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.config import Settings
from app.datasets.ingest import ingest_table, read_encoded_table
from app.datasets.service import parse_schema
from app.sources.counting import ingest_limits, source_engine
from app.sources.reading import SourceChanged, SourceRefused, SourceSpec, fetched
from app.storage.local import LocalStorage
from engine.discovery.schema import provisional
from engine.domain import Dataset
from tests.conftest import FIXTURES

PEOPLE = (FIXTURES / "people.csv").read_bytes()
ROWS = PEOPLE.count(b"\n") - 1


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Settings, LocalStorage, Path]:
    root = tmp_path / "allowed"
    root.mkdir()
    settings = Settings(home=tmp_path / "home", source_local_roots=json.dumps([str(root)]))
    return settings, LocalStorage(tmp_path / "storage"), root


def test_duckdb_counts_of_a_source_equal_the_uploads(
    setup: tuple[Settings, LocalStorage, Path], tmp_path: Path
) -> None:
    settings, storage, root = setup
    lines = PEOPLE.splitlines(keepends=True)
    (root / "part=1").mkdir()
    (root / "part=2").mkdir()
    (root / "part=1" / "a.csv").write_bytes(b"".join(lines[:150]))
    (root / "part=2" / "b.csv").write_bytes(lines[0] + b"".join(lines[150:]))
    schema = provisional(parse_schema((FIXTURES / "people-schema.json").read_text(), settings))
    uploaded = tmp_path / "uploaded.arrow"
    ingest_table(FIXTURES / "people.csv", schema, uploaded, ingest_limits(settings))
    expected = Dataset(schema.domain(), read_encoded_table(uploaded, schema))

    spec = SourceSpec(kind="local", uri=str(root))
    with fetched(spec, settings, storage) as source:
        fingerprint = source.fingerprint
    assert [Path(f["key"]).name for f in fingerprint["files"]] == ["a.csv", "b.csv"]
    with source_engine(settings, storage, spec, fingerprint, schema, "duckdb", ROWS) as engine:
        assert engine.n_rows == expected.n_rows == len(lines) - 1
        pairs = [("city", "age"), ("tier",), ("age", "income", "tier")]
        for got, want in zip(engine.counts(pairs), expected.counts(pairs), strict=True):
            np.testing.assert_array_equal(got, want)
    assert list((storage.root / "tmp").iterdir()) == []  # the scratch codes are gone

    (root / "part=2" / "b.csv").write_bytes(lines[0] + b"".join(lines[151:]))
    with (
        pytest.raises(SourceChanged),
        source_engine(settings, storage, spec, fingerprint, schema, "duckdb", ROWS),
    ):
        pass


def test_only_allowed_roots(setup: tuple[Settings, LocalStorage, Path], tmp_path: Path) -> None:
    settings, storage, root = setup
    outside = tmp_path / "outside.csv"
    outside.write_bytes(PEOPLE)
    (root / "link").symlink_to(tmp_path)
    for uri in (str(outside), str(root / "link" / "outside.csv"), str(root / ".." / "outside.csv")):
        with (
            pytest.raises(SourceRefused) as refused,
            fetched(SourceSpec(kind="local", uri=uri), settings, storage),
        ):
            pass
        assert refused.value.status_code == 403
    # The service's own directories are never a source, even under an allowed root.
    own = Settings(home=root / "home", source_local_roots=json.dumps([str(root)]))
    (root / "home").mkdir()
    (root / "home" / "x.csv").write_bytes(PEOPLE)
    for uri in (str(root), str(root / "home" / "x.csv")):
        with (
            pytest.raises(SourceRefused, match="own files"),
            fetched(SourceSpec(kind="local", uri=uri), own, storage),
        ):
            pass
    nothing = Settings(home=tmp_path / "home")
    with (
        pytest.raises(SourceRefused, match="no local sources"),
        fetched(SourceSpec(kind="local", uri=str(root)), nothing, storage),
    ):
        pass


def test_hive_partition_columns_come_from_directory_names(
    setup: tuple[Settings, LocalStorage, Path], tmp_path: Path
) -> None:
    """city=<value>/ directories (URL-encoded values) give the city column of files that do
    not hold it; the counts equal the upload of the whole table."""
    import io
    from urllib.parse import quote

    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    settings, storage, root = setup
    table = pacsv.read_csv(io.BytesIO(PEOPLE))
    cities = table.column("city").to_pylist()
    for city in sorted(set(cities)):
        rows = [i for i, c in enumerate(cities) if c == city]
        directory = root / f"city={quote(city, safe='')}"
        directory.mkdir()
        pq.write_table(table.take(rows).drop_columns(["city"]), directory / "part-0.parquet")
    schema = provisional(parse_schema((FIXTURES / "people-schema.json").read_text(), settings))
    uploaded = tmp_path / "uploaded.arrow"
    ingest_table(FIXTURES / "people.csv", schema, uploaded, ingest_limits(settings))
    expected = Dataset(schema.domain(), read_encoded_table(uploaded, schema))

    spec = SourceSpec(kind="local", uri=str(root))
    with fetched(spec, settings, storage) as source:
        fingerprint = source.fingerprint
    with source_engine(settings, storage, spec, fingerprint, schema, "duckdb", ROWS) as engine:
        assert engine.n_rows == expected.n_rows
        pairs = [("city",), ("city", "age", "tier")]
        for got, want in zip(engine.counts(pairs), expected.counts(pairs), strict=True):
            np.testing.assert_array_equal(got, want)


def test_a_link_to_the_services_own_files_is_refused(tmp_path: Path) -> None:
    """The service's directories lie under an allowed root; a directory outside them holds a
    link to a stored file of the service (another tenant's table): refused, for the directory
    and for the link named alone."""
    root = tmp_path / "allowed"
    (root / "home").mkdir(parents=True)
    (root / "home" / "stored.csv").write_bytes(PEOPLE)
    (root / "mine").mkdir()
    (root / "mine" / "t.csv").symlink_to(root / "home" / "stored.csv")
    settings = Settings(home=root / "home", source_local_roots=json.dumps([str(root)]))
    storage = LocalStorage(tmp_path / "storage")
    for uri in (str(root / "mine"), str(root / "mine" / "t.csv")):
        with (
            pytest.raises(SourceRefused, match="own files") as refused,
            fetched(SourceSpec(kind="local", uri=uri), settings, storage),
        ):
            pass
        assert refused.value.status_code == 403


def test_a_refused_check_at_submission_does_not_name_the_source(tmp_path: Path) -> None:
    """An analyst's submission on a source the settings no longer allow is refused (409) without
    the bucket or path, which only owner keys see."""
    from app.datasets.models import Dataset as DatasetRecord
    from app.jobs.service import SourceChangedSinceRegistration, check_registered_source
    from engine.mechanisms import get_mechanism

    settings = Settings(home=tmp_path / "home", source_s3_buckets=json.dumps(["elsewhere"]))
    for kind, uri in (("s3", "s3://secret-bucket/visits/"), ("local", "/secret/visits")):
        record = DatasetRecord(
            source_kind=kind,
            source={"kind": kind, "uri": uri},
            source_fingerprint={"files": []},
            source_engine="duckdb",
            storage_key=None,
        )
        independent = get_mechanism("independent")
        params = independent.validate_params({})
        with pytest.raises(SourceChangedSinceRegistration) as refused:
            check_registered_source(settings, independent, params, record)
        assert "secret" not in str(refused.value)
        assert "no longer allow" in str(refused.value)


def test_limits_lowered_after_registration_do_not_fail_the_job(
    setup: tuple[Settings, LocalStorage, Path],
) -> None:
    """A job re-reads the registered rows under the bounds registration measured: an operator's
    lower RHOSYNTH_MAX_ROWS since must not make the job fail according to the private row count
    (it would tell analysts whether the table has more rows than the new limit)."""
    settings, storage, root = setup
    (root / "people.csv").write_bytes(PEOPLE)
    spec = SourceSpec(kind="local", uri=str(root / "people.csv"))
    schema = provisional(parse_schema((FIXTURES / "people-schema.json").read_text(), settings))
    with fetched(spec, settings, storage, max_rows=settings.max_rows) as source:
        fingerprint = source.fingerprint
    lowered = settings.model_copy(update={"max_rows": ROWS // 2})
    with source_engine(lowered, storage, spec, fingerprint, schema, "duckdb", ROWS) as engine:
        assert engine.n_rows == ROWS
    # More rows than registration counted is a changed source, whatever the limit.
    with (
        pytest.raises(SourceChanged),
        source_engine(settings, storage, spec, fingerprint, schema, "duckdb", ROWS - 1),
    ):
        pass


@pytest.mark.usefixtures("_services")
def test_a_local_source_changed_while_registering_is_refused_and_leaves_no_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Local files are read in place: one rewritten while registration reads it is refused
    (409; the recorded fingerprint would describe other rows than those read), and the copy
    stored for keep_copy is removed with the rolled-back record."""
    from fastapi.testclient import TestClient

    import app.datasets.service as dataset_service
    from app.main import create_app
    from tests.app.test_quotas import _keys, bearer
    from tests.support import services

    root = tmp_path / "allowed"
    root.mkdir()
    source = root / "people.csv"
    source.write_bytes(PEOPLE)
    real_ingest = dataset_service.ingest_table

    def ingest_then_change(*args: object, **kwargs: object) -> int:
        rows = real_ingest(*args, **kwargs)  # type: ignore[arg-type]
        source.write_bytes(PEOPLE + PEOPLE.splitlines(keepends=True)[1])
        return rows

    monkeypatch.setattr(dataset_service, "ingest_table", ingest_then_change)
    with services.migrated_settings(
        "sqlite", tmp_path / "home", "srcreg", source_local_roots=json.dumps([str(root)])
    ) as settings:
        keys = _keys(settings, 0)
        body = {
            "name": "changing",
            "source": {"kind": "local", "uri": str(source)},
            "schema": json.loads((FIXTURES / "people-schema.json").read_text()),
            "budget_rho": "1",
            "keep_copy": True,
        }
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            response = client.post(
                "/v1/datasets/sources", json=body, headers=bearer(keys.owner_key)
            )
            assert response.status_code == 409, response.text
            listed = client.get("/v1/datasets", headers=bearer(keys.owner_key)).json()
        assert listed["items"] == []
        datasets = settings.resolved_storage_dir / "datasets"
        assert not datasets.exists() or list(datasets.iterdir()) == []


def test_an_s3_key_with_dot_segments_is_refused() -> None:
    """A key that a normalising proxy would turn into the service's own prefix is refused
    before the allow checks, which compare keys literally."""
    for uri in ("s3://b/pub/../svc/datasets/x.parquet", "s3://b/./svc/", "s3://b/a/./b.csv"):
        with pytest.raises(SourceRefused, match="segment"):
            SourceSpec(kind="s3", uri=uri)
    assert SourceSpec(kind="s3", uri="s3://b/a..b/c.csv").uri == "s3://b/a..b/c.csv"


def test_kernel_file_systems_are_never_a_source(tmp_path: Path) -> None:
    """Even under a root an operator allowed too widely, /proc (the service's own environment,
    with its secrets) is refused, as is a directory holding it."""
    settings = Settings(home=tmp_path / "home", source_local_roots=json.dumps(["/"]))
    storage = LocalStorage(tmp_path / "storage")
    for uri in ("/proc/self/environ", "/proc", "/"):
        with (
            pytest.raises(SourceRefused, match="own files") as refused,
            fetched(SourceSpec(kind="local", uri=uri), settings, storage),
        ):
            pass
        assert refused.value.status_code == 403


def test_duckdb_allowance_is_the_configured_pool_plus_overhead() -> None:
    """A registered source's job adds DuckDB's buffer pool (a setting) to its memory limit, not
    anything of the data's size; the units are DuckDB's (GB = 10⁹, GiB = 2³⁰)."""
    from app.config import Settings
    from app.sources.counting import (
        DUCKDB_OVERHEAD_BYTES,
        SPARK_JVM_OVERHEAD_BYTES,
        duckdb_limit_bytes,
        engine_allowance_bytes,
    )

    assert duckdb_limit_bytes("1GB") == 10**9
    assert duckdb_limit_bytes("1.5GiB") == 3 * 2**29
    assert duckdb_limit_bytes("512 MB") == 512 * 10**6
    settings = Settings(duckdb_memory_limit="2GB")
    assert engine_allowance_bytes(settings, "duckdb") == 2 * 10**9 + DUCKDB_OVERHEAD_BYTES
    assert engine_allowance_bytes(settings, "spark") == 2**30 + SPARK_JVM_OVERHEAD_BYTES


def test_spark_starts_under_a_spark_jobs_memory_limit(tmp_path: Path) -> None:
    """The default job limit (3 GiB) raised by the Spark allowance lets the driver JVM start
    (checked in a child process that sets RLIMIT_AS itself). Without the allowance it failed on
    this machine (the JVM exits or its gateway drops, by load), which is why the allowance exists;
    that half is environment-dependent and is not asserted."""
    import subprocess
    import sys

    from app.config import Settings
    from app.sources.counting import engine_allowance_bytes

    settings = Settings()
    base = settings.job_memory_limit_mb * 2**20
    script = (
        "import resource, sys\n"
        "limit = int(sys.argv[1])\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "from engine.counting.spark import spark_session\n"
        "try:\n"
        "    print('started', spark_session('local[1]').range(10).count())\n"
        "except Exception as error:\n"
        "    print('failed', type(error).__name__)\n"
    )
    limit = base + engine_allowance_bytes(settings, "spark")
    done = subprocess.run(
        [sys.executable, "-c", script, str(limit)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # the JVM's crash logs, if any, land here
        check=False,
    )
    assert done.stdout.strip().splitlines()[-1:] == ["started 10"], done.stdout[-2000:]
