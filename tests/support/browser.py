"""Headless Chromium for the browser tests: Debian's package, installed by the test setup when
it can (as root with apt-get), driven by Playwright with ``executable_path`` (Playwright's own
browser download is not used and not needed)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
HOW = (
    "browser tests need Chromium: install Debian's package (`apt-get install chromium`) or set "
    "RHOSYNTH_CHROMIUM to a Chromium binary"
)


def _find() -> str | None:
    configured = os.environ.get("RHOSYNTH_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


INSTALL_SECONDS = 200
"""The whole install attempt's budget: below pytest's per-test timeout (300 s), so a slow mirror
ends in a skip that says how, not in a timed-out test."""
_attempted: list[bool] = []


def _install() -> None:
    """Install Debian's chromium once per test session, when running as root with apt-get."""
    if _attempted or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    _attempted.append(True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    command = ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]
    deadline = time.monotonic() + INSTALL_SECONDS
    if subprocess.run(command, env=env, capture_output=True, timeout=INSTALL_SECONDS).returncode:
        for step in (["apt-get", "update"], command):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            subprocess.run(step, env=env, capture_output=True, timeout=left)


def chromium_path() -> str:
    """The Chromium binary, installing it first if possible; skips the test with how otherwise."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("browser tests need the playwright package (pip install -e '.[test]')")
    found = _find()
    if found is None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            _install()
        found = _find()
    if found is None:
        pytest.skip(HOW)
    return found
