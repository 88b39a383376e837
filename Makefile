# The README names these targets; CI runs `make test` on a clean clone.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck pytest bench load ha reference clean engine images test-docker sql sql-reference

$(STAMP): pyproject.toml constraints.txt
	@echo "setting up $(VENV): Stint and what it needs (about a minute the first time)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	@# One line per package as pip goes (not silent for a minute), the whole log kept.
	$(BIN)/pip install --progress-bar off -c constraints.txt -e ".[dev,load,api,agents,openai-agents,pydantic-ai,mcp,containers,otlp]" 2>&1 \
		| tee $(VENV)/install.log | grep --line-buffered -E '^(Processing|Collecting|Installing)' || true
	@test -x $(BIN)/stint || { tail -25 $(VENV)/install.log >&2; echo "setup failed (log: $(VENV)/install.log)" >&2; exit 1; }
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/stint-lab demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/hadolint deploy/Dockerfile deploy/postgres.Dockerfile

typecheck: $(STAMP)
	$(BIN)/mypy

# The suite in TEST_PROCESSES processes (pytest-xdist), a test file to a process: most of
# a test's time is waiting on the workers and servers it starts, so more processes than
# cores fill them. Each process has its own throwaway PostgreSQL. TEST_PROCESSES=0: one.
TEST_PROCESSES ?= 3
pytest: $(STAMP)
	$(BIN)/pytest -q --durations=25 -n $(TEST_PROCESSES) --dist loadfile

test: lint typecheck pytest

# The SQL PostgreSQL receives for one statement, fragments expanded: make sql NAME=turns_finish
sql: $(STAMP)
	@$(BIN)/python -m stint.store.queries $(NAME)

# Every statement's expanded text, committed so a review shows the real SQL (a test checks it).
sql-reference: $(STAMP)
	$(BIN)/python -m stint.store.queries --write docs/reference/sql

bench: $(STAMP)
	$(BIN)/python -m stint.lab.bench

# The matrix and its sizing summary (minutes); the long runs are selected by name:
# pytest loadtest --run-load -k sizing|ladder|scale|quota|soak|api
load: $(STAMP)
	$(BIN)/pytest loadtest --run-load

# The HA figures of docs/reliability.md: each failover 5 times on a durable Patroni
# cluster, the partitions and the asynchronous RPO, one `ha-figure` (or `hosts-figure`) line each
# (`make test` runs every one once, on a cluster without fsync).
HA_ROUNDS ?= 5
ha: $(STAMP)
	STINT_HA_ROUNDS=$(HA_ROUNDS) STINT_HA_DURABLE=1 $(BIN)/pytest -q -s -p no:cacheprovider tests/ha

# docs/reference/ from the code (tests/unit/test_reference.py fails while it is stale)
reference: $(STAMP)
	$(BIN)/python -m stint.lab.reference

# Containers: a Docker engine of our own (deploy/dockerd.sh), the images built on it,
# and the tests that need both (skipped by `make test` when no engine answers).
ENGINE_HOST := $${DOCKER_HOST:-unix:///run/stint-docker.sock}

engine:
	@deploy/dockerd.sh tools
	@docker -H $(ENGINE_HOST) version >/dev/null 2>&1 || deploy/dockerd.sh start

images: engine
	DOCKER_HOST=$(ENGINE_HOST) deploy/build-images.sh

test-docker: $(STAMP) images
	DOCKER_HOST=$(ENGINE_HOST) STINT_REQUIRE_DOCKER=1 $(BIN)/pytest -q -m docker \
		tests/deploy tests/integration/test_load_backends.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
