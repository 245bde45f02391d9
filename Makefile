# The few commands people type. Each one sets up what it needs first (idempotent).
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup services test test-fast lint format typecheck demo bench clean

$(BIN)/szbench: pyproject.toml
	./scripts/setup.sh

setup: ## install system packages, the virtual environment and the project
	./scripts/setup.sh

services: setup ## start PostgreSQL, Redis and the Docker engine; build the local base images
	./scripts/test-services.sh

test: ## the whole test suite (what CI runs: scripts/test.sh)
	./scripts/test.sh $(PYTEST_ARGS)

test-fast: ## the fast stage: no Docker engine, no browser, nothing slow
	./scripts/test.sh --fast $(PYTEST_ARGS)

lint: setup ## ruff, mypy, the import contracts, the dead-code check and the docs check (.pre-commit-config.yaml: the same)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/vulture
	$(BIN)/python -m szbench.docs_check

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

demo: setup ## the main job end to end on the embedded default
	./scripts/demo.sh

bench: setup
	for b in benchmarks/*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist var
