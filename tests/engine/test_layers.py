"""The engine's layers, read from the source: who may import whom.

Every import is counted, at module level or inside a function (a lazy import is still a
dependency), relative ones resolved, and followed through the engine's other modules: a layer
must not reach a higher one by way of, say, engine.costs. The layers, lowest first: estimation
(Private-PGM), models (what a release samples from), mechanisms (what fits the models), release
(what a run leaves behind). A lower layer never imports a higher one, and nothing in engine/
imports the web, database or queue stack.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parents[2] / "engine"

SERVICE_STACK = (
    "app",
    "workers",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "celery",
    "kombu",
    "redis",
)

# package -> packages it must not import
BELOW = {
    "engine.estimation": ("engine.models", "engine.mechanisms", "engine.release"),
    "engine.models": ("engine.mechanisms", "engine.release"),
    "engine.mechanisms": ("engine.release",),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str = "") -> set[str]:
    """The modules (and ``module.name`` for each name taken from one) that ``path`` imports;
    relative imports are resolved against ``package``, the importing module's package."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


SOURCES = sorted(ENGINE.rglob("*.py"))
MODULES = {_module_name(path): path for path in SOURCES}


def _package(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


DIRECT = {name: _imports(path, _package(path)) for name, path in MODULES.items()}


def _engine_modules(imports: set[str]) -> set[str]:
    """The engine modules ``imports`` loads: each named module and every package above it."""
    loaded: set[str] = set()
    for name in imports:
        parts = name.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in MODULES:
                loaded.add(prefix)
    return loaded


def _reach(module: str) -> set[str]:
    """Everything ``module`` imports, directly or through other engine modules."""
    seen = {module}
    todo = [module]
    reached: set[str] = set()
    while todo:
        imports = DIRECT[todo.pop()]
        reached |= imports
        for name in _engine_modules(imports) - seen:
            seen.add(name)
            todo.append(name)
    return reached


def test_the_engine_is_read() -> None:
    names = {_module_name(path) for path in SOURCES}
    assert {"engine.models.kinds", "engine.mechanisms.aim.mechanism"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ENGINE.parent)))
def test_no_layer_imports_upwards(path: Path) -> None:
    module = _module_name(path)
    imports = _reach(module)
    stack = sorted(i for i in imports if any(_within(i, s) for s in SERVICE_STACK))
    assert not stack, f"{module} imports the service stack: {stack}"
    for package, forbidden in BELOW.items():
        if _within(module, package):
            upward = sorted(i for i in imports if any(_within(i, f) for f in forbidden))
            assert not upward, f"{module} ({package}) reaches a higher layer: {upward}"


def test_the_reading_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    source = tmp_path / "lazy.py"
    source.write_text("def f():\n    from engine.mechanisms.aim import mechanism\n")
    assert "engine.mechanisms.aim" in _imports(source)
    source.write_text("from ..mechanisms import base\nfrom . import kinds\n")
    found = _imports(source, "engine.models")
    assert {"engine.mechanisms.base", "engine.models.kinds"} <= found


def test_the_reading_follows_imports_through_other_modules() -> None:
    # models/kinds.py imports the estimation package, whose __init__ imports junction_tree.
    through = "engine.estimation.junction_tree"
    assert not any(name.startswith(through) for name in DIRECT["engine.models.kinds"])
    assert any(name.startswith(through) for name in _reach("engine.models.kinds"))
