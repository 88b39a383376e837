# The README names these targets; CI runs `make test` on a clean clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck pytest bench load clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev,load,api,agents]"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/stint demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q

test: lint typecheck pytest

bench: $(STAMP)
	$(BIN)/python -m stint.loadtest.bench

load: $(STAMP)
	$(BIN)/pytest loadtest --run-load

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
