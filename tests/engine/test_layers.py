"""The engine's layers, read from the source: who may import whom.

Every import is counted, at module level or inside a function, since a lazy import is still a
dependency. The layers, lowest first: estimation (Private-PGM), models (what a release samples
from), mechanisms (what fits the models), release (what a run leaves behind). A lower layer never
imports a higher one, and nothing in engine/ imports the web, database or queue stack.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"

SERVICE_STACK = ("app", "workers", "fastapi", "starlette", "sqlalchemy", "celery", "alembic")

# package -> packages it must not import
BELOW = {
    "engine.estimation": ("engine.models", "engine.mechanisms", "engine.release"),
    "engine.models": ("engine.mechanisms", "engine.release"),
    "engine.mechanisms": ("engine.release",),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


SOURCES = sorted(ENGINE.rglob("*.py"))


def test_the_engine_is_read() -> None:
    names = {_module_name(path) for path in SOURCES}
    assert {"engine.models.kinds", "engine.mechanisms.aim.mechanism"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ENGINE.parent)))
def test_no_layer_imports_upwards(path: Path) -> None:
    module = _module_name(path)
    imports = _imports(path)
    stack = sorted(i for i in imports if any(_within(i, s) for s in SERVICE_STACK))
    assert not stack, f"{module} imports the service stack: {stack}"
    for package, forbidden in BELOW.items():
        if _within(module, package):
            upward = sorted(i for i in imports if any(_within(i, f) for f in forbidden))
            assert not upward, f"{module} ({package}) imports a higher layer: {upward}"


def test_the_reading_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from engine.mechanisms.aim import mechanism\n")
    assert "engine.mechanisms.aim" in _imports(source)
