# rhosynth — the two commands of the README's quick start are `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install run test pytest lint typecheck check bench clean

$(BIN)/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "rhosynth needs Python 3.11 or newer (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

## install: create .venv at the repo root and install rhosynth with its test dependencies
install: $(STAMP)

## run: embedded mode (SQLite, files under $$RHOSYNTH_HOME, default ./var): API + worker on 127.0.0.1:$$RHOSYNTH_PORT
run: install
	$(BIN)/rhosynth run

## test: lint, type-check, then the whole suite against PostgreSQL and Redis on loopback
test: install lint typecheck pytest

pytest: install
	$(BIN)/python -m pytest

lint: install
	$(BIN)/ruff check app workers engine rhosynth migrations tests benchmarks
	$(BIN)/ruff format --check app workers engine rhosynth migrations tests benchmarks

typecheck: install
	$(BIN)/mypy

## bench: regenerate docs/benchmarks.md from ../shared/data (not part of `make test`)
bench: install
	$(BIN)/python -m benchmarks.run --data ../shared/data --out docs/benchmarks.md --json docs/benchmarks.json

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
