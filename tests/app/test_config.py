"""Settings: embedded defaults work with nothing configured; production refuses unsafe defaults."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings, normalize_database_url

PRODUCTION = {
    "database_url": "postgresql://db/rhosynth",
    "broker_url": "redis://redis:6379/0",
    "storage_dir": "/srv/rhosynth",
}


def test_embedded_defaults(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    assert settings.embedded
    assert settings.sqlalchemy_url == f"sqlite:///{tmp_path.resolve() / 'rhosynth.sqlite'}"
    assert settings.celery_broker_url.startswith("sqla+sqlite:///")
    assert settings.resolved_storage_dir == tmp_path.resolve() / "storage"
    key = settings.secret_key_bytes()
    assert len(key) >= 32
    assert Settings(home=tmp_path).secret_key_bytes() == key, "the generated key is kept"
    mode = stat.S_IMODE(os.stat(tmp_path / "secret_key").st_mode)
    assert mode == 0o600


def test_production_requires_a_real_secret() -> None:
    with pytest.raises(ValidationError, match="RHOSYNTH_SECRET_KEY is required"):
        Settings(**PRODUCTION)
    with pytest.raises(ValidationError, match="at least 32"):
        Settings(**PRODUCTION, secret_key="short")
    settings = Settings(**PRODUCTION, secret_key="k" * 40)
    assert not settings.embedded
    assert settings.sqlalchemy_url == "postgresql+psycopg://db/rhosynth"


@pytest.mark.parametrize("missing", ["broker_url", "storage_dir"])
def test_production_requires_locations(missing: str) -> None:
    values = {k: v for k, v in PRODUCTION.items() if k != missing}
    with pytest.raises(ValidationError, match=f"RHOSYNTH_{missing.upper()}"):
        Settings(**values, secret_key="k" * 40)
    if missing == "storage_dir":  # or the object store's URL
        with pytest.raises(ValidationError, match="or RHOSYNTH_STORAGE_URL is required"):
            Settings(**values, secret_key="k" * 40)


def test_object_store_instead_of_a_storage_directory(tmp_path: Path) -> None:
    values = {k: v for k, v in PRODUCTION.items() if k != "storage_dir"}
    settings = Settings(**values, secret_key="k" * 40, storage_url="s3://bucket/rhosynth/prod")
    assert settings.storage_dir is None
    assert settings.resolved_scratch_dir.name == "rhosynth-scratch"
    with_dir = Settings(**PRODUCTION, secret_key="k" * 40, storage_url="s3://bucket")
    assert with_dir.resolved_scratch_dir == Path("/srv/rhosynth/tmp")
    scratch = Settings(
        **values, secret_key="k" * 40, storage_url="s3://bucket", scratch_dir=tmp_path
    )
    assert scratch.resolved_scratch_dir == tmp_path.resolve()
    for bad in ("bucket/prefix", "s3://", "s3://Bucket", "s3://bucket/../up", "s3://bucket/a//b"):
        with pytest.raises(ValidationError, match=r"(?i)storage_url"):
            Settings(**values, secret_key="k" * 40, storage_url=bad)
    with pytest.raises(ValidationError, match="s3_addressing_style"):
        Settings(**values, secret_key="k" * 40, storage_url="s3://b1", s3_addressing_style="x")


def test_environment_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RHOSYNTH_HOME", str(tmp_path))
    monkeypatch.setenv("RHOSYNTH_PORT", "8123")
    monkeypatch.setenv("RHOSYNTH_MAX_UPLOAD_BYTES", "2048")
    settings = Settings()
    assert (settings.port, settings.max_upload_bytes, settings.resolved_home) == (
        8123,
        2048,
        tmp_path.resolve(),
    )


def test_lease_must_outlast_heartbeat(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="HEARTBEAT"):
        Settings(home=tmp_path, job_lease_seconds=5, job_heartbeat_seconds=5)


def test_database_url_normalisation() -> None:
    assert normalize_database_url("postgres://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_database_url("postgresql+psycopg://u@h/d") == "postgresql+psycopg://u@h/d"
    assert normalize_database_url("sqlite:///x.db") == "sqlite:///x.db"


def test_the_embedded_secret_is_never_read_half_written(tmp_path: Path) -> None:
    """Threads that start together (a barrier) all get the same, non-empty key. The key used to
    be created and then written, so a reader between the two got an empty key; the API keeps
    the first key it reads (ApiResources), so that would have refused every API key."""
    import threading

    for attempt in range(20):
        home = tmp_path / f"home-{attempt}"
        barrier = threading.Barrier(16)
        keys: list[bytes] = []

        def read(
            home: Path = home, barrier: threading.Barrier = barrier, keys: list[bytes] = keys
        ) -> None:
            settings = Settings(home=home)
            barrier.wait()
            keys.append(settings.secret_key_bytes())

        threads = [threading.Thread(target=read) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(keys) == 16 and len(set(keys)) == 1 and keys[0], (attempt, set(keys))
        assert [p.name for p in home.iterdir()] == ["secret_key"]  # no staged file left
        assert (home / "secret_key").stat().st_mode & 0o777 == 0o600
