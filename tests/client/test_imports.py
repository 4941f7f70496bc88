"""The client side ships no server: rhosynth/ imports nothing of app/, workers/ or engine/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import ENGINE_COMMANDS, main
from rhosynth.cli import remote

SERVER_SIDE = ("app", "workers", "engine")
CHECK = (
    "import sys\n"
    "import {module}\n"
    "loaded = sorted(m for m in sys.modules if m.split('.')[0] in {server!r})\n"
    "assert not loaded, loaded\n"
)


@pytest.mark.parametrize("module", ["rhosynth.client", "rhosynth.cli", "rhosynth.models"])
def test_the_client_imports_no_server_code(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(module=module, server=SERVER_SIDE)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode == 0, result.stderr


def test_the_check_would_notice_a_server_import() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CHECK.format(module="app.config", server=SERVER_SIDE)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).parents[2],
    )
    assert result.returncode != 0


def test_remote_is_listed_and_lazily_loaded_by_the_rhosynth_command() -> None:
    assert ENGINE_COMMANDS["remote"][2] == remote.get_short_help_str(limit=200)
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0 and "remote" in result.stdout
    result = CliRunner().invoke(main, ["remote", "--help"])
    assert result.exit_code == 0
    for command in ("upload", "draft", "datasets", "budget", "ledger", "grant", "submit",
                    "estimate", "wait", "download", "report", "sample", "cancel"):  # fmt: skip
        assert command in result.stdout
