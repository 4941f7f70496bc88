"""Commands that use the service's database never create an embedded one implicitly."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import main
from app.config import get_settings

KEY_ARGS = ["keys", "create", "--tenant", "acme", "--role", "owner", "--name", "alice"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An embedded-mode environment whose RHOSYNTH_HOME is a fresh folder."""
    for name in list(os.environ):
        if name.startswith("RHOSYNTH_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("RHOSYNTH_HOME", str(tmp_path / "home"))
    get_settings.cache_clear()
    yield tmp_path / "home"
    get_settings.cache_clear()


@pytest.mark.parametrize("command", [KEY_ARGS, ["recover"]])
def test_refuses_without_a_database(home: Path, command: list[str]) -> None:
    result = CliRunner().invoke(main, command)
    assert result.exit_code == 1
    database = home.resolve() / "rhosynth.sqlite"
    assert f"no rhosynth database at {database}" in result.output
    assert "rhosynth migrate" in result.output
    assert not database.exists(), "nothing was created"


def test_keys_create_names_the_database_it_used(home: Path) -> None:
    runner = CliRunner()
    migrated = runner.invoke(main, ["migrate"])
    assert migrated.exit_code == 0, migrated.output
    database = home.resolve() / "rhosynth.sqlite"
    assert database.is_file()
    result = runner.invoke(main, KEY_ARGS)
    assert result.exit_code == 0, result.output
    assert f"database: {database}" in result.stderr
    key = result.stdout.strip()
    assert len(key.splitlines()) == 1 and len(key) > 20
    assert str(database) not in result.stdout
