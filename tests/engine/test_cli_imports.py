"""``rhosynth ... --help`` imports nothing heavy (issue 25): no numpy, pandas, pyarrow, scipy, no
engine internals, no web, database or HTTP client stack. The commands import those when they
run (engine/cli.py, engine/schema_draft/cli.py, rhosynth/cli.py)."""

from __future__ import annotations

import json
import subprocess
import sys

from engine.cli import METHODS
from engine.mechanisms import MECHANISMS

HEAVY = (
    "numpy",
    "pandas",
    "pyarrow",
    "scipy",
    "matplotlib",
    "sqlalchemy",
    "alembic",
    "fastapi",
    "starlette",
    "uvicorn",
    "celery",
    "httpx",
    "engine.domain",
    "engine.mechanisms",
    "engine.models",
    "engine.columns",
    "engine.discovery",
    "engine.tables.local",
    "engine.schema_draft.inference",
    "engine.reports",
    "rhosynth.client",
    "app.config",
    "app.main",
    "workers",
)

# Every command path of the group, then `--help` on each, in one process; prints the paths
# visited and the heavy modules loaded afterwards.
_PROBE = """
import json, sys
import click
from app.cli import main

def paths(group, prefix):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        yield prefix + [name]
        if isinstance(command, click.Group):
            yield from paths(command, prefix + [name])

visited = []
for path in [[], *paths(main, [])]:
    try:
        main([*path, "--help"], prog_name="rhosynth")
    except SystemExit as exit:
        assert exit.code in (0, None), (path, exit.code)
    visited.append(" ".join(path))
heavy = json.loads(sys.argv[1])
loaded = sorted(
    name for name in sys.modules if any(name == h or name.startswith(h + ".") for h in heavy)
)
print(json.dumps({"visited": visited, "loaded": loaded}))
"""


def test_help_of_every_command_imports_nothing_heavy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # The walk reached the engine's lazily listed commands and the nested groups.
    for path in ("synthesize", "sample", "evaluate", "report", "schema draft", "remote upload"):
        assert path in result["visited"], result["visited"]
    assert "keys create" in result["visited"]
    assert result["loaded"] == []
    # The help texts were printed in full, options included.
    assert "--method" in done.stdout
    assert "--show-values" in done.stdout


def test_listed_methods_are_the_registry() -> None:
    assert list(METHODS) == sorted(MECHANISMS)
