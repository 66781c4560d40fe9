"""The store contract as a type: `DynamoDBStore` is an `IdempotencyStore` and an
`OperatorStore` for mypy and at run time, a class missing a method is not, the contract
stays off the cold import path, and a store that is not a `DynamoDBStore` runs the
conformance suite through IDEMPOTENCY_STORE_FACTORY as docs/testing.md says."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.contract import IdempotencyStore, OperatorStore

ROOT = Path(__file__).resolve().parents[2]

SATISFIES = '''
"""Checked by mypy --strict: assignments are the static proof."""
from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.contract import IdempotencyStore, OperatorStore

native: IdempotencyStore = DynamoDBStore("t")
operators: OperatorStore = DynamoDBStore("t", layout="powertools")


class NoRelease:
    """Every method of the contract but `release`."""

    def __init__(self, inner: DynamoDBStore) -> None:
        self.layout = inner.layout
        self.check_decoration = inner.check_decoration
        self.ready = inner.ready
        self.claim = inner.claim
        self.retake = inner.retake
        self.extend_lease = inner.extend_lease
        self.get = inner.get
        self.load_result = inner.load_result
        self.stored_form = inner.stored_form
        self.put_chunks = inner.put_chunks
        self.write_completion = inner.write_completion
        self.complete = inner.complete
        self.commit_writes = inner.commit_writes


missing: IdempotencyStore = NoRelease(DynamoDBStore("t"))  # the one error expected
'''


def test_dynamodb_store_satisfies_the_contract_for_mypy_and_a_partial_store_does_not(
    tmp_path: Path,
) -> None:
    (tmp_path / "satisfies.py").write_text(SATISFIES)
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "satisfies.py",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT / "layer")},
        timeout=300,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1, checked.stdout + checked.stderr
    lines = SATISFIES.splitlines()
    expected = next(n for n, line in enumerate(lines, 1) if "the one error expected" in line)
    assert f"satisfies.py:{expected}:" in errors[0]
    assert f"satisfies.py:{expected}: note:     release" in checked.stdout  # what it lacks


def test_dynamodb_store_satisfies_the_contract_at_run_time() -> None:
    for layout in ("native", "powertools"):
        store = DynamoDBStore("t", layout=layout)
        assert isinstance(store, IdempotencyStore)
        assert isinstance(store, OperatorStore)
    assert not isinstance(object(), IdempotencyStore)


def test_the_contract_is_not_on_the_cold_import_path() -> None:
    code = (
        "import sys\n"
        "from lambda_idempotency import idempotent, DynamoDBStore\n"
        "idempotent(key='id', store=DynamoDBStore('t'))(lambda event, context: None)\n"
        "print('lambda_idempotency._stores.contract' in sys.modules)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert ran.stdout.strip() == "False"


OWN_STORE = '''
"""A store of one's own: only the contract's methods (over a DynamoDBStore on moto)."""
import itertools

import boto3
from moto import mock_aws

from lambda_idempotency import DynamoDBStore
from lambda_idempotency.testing import create_idempotency_table
from tests.conformance.conftest import OPERATORS, SCOPE, TOMBSTONE, StoreFactory

METHODS = (
    "check_decoration", "ready", "claim", "retake", "extend_lease", "get", "load_result",
    "stored_form", "put_chunks", "write_completion", "complete", "release", "commit_writes",
    "scan_stuck", "release_version",
)
_names = (f"own-{n}" for n in itertools.count())
mock_aws().start()


class OwnStore:
    def __init__(self, inner):
        self.layout = inner.layout
        for name in METHODS:
            setattr(self, name, getattr(inner, name))


def make():
    client = boto3.client("dynamodb", region_name="us-east-1")
    return OwnStore(DynamoDBStore(create_idempotency_table(client, next(_names)), client=client))


store_factory = StoreFactory("own-store", make, frozenset({TOMBSTONE, SCOPE, OPERATORS}))
'''


def test_a_store_of_ones_own_runs_the_conformance_suite(tmp_path: Path) -> None:
    (tmp_path / "own_store.py").write_text(OWN_STORE)
    paths = os.pathsep.join([str(tmp_path), str(ROOT / "layer"), str(ROOT)])
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests" / "conformance" / "test_store_contract.py"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": paths, "IDEMPOTENCY_STORE_FACTORY": "own_store"},
        timeout=300,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    suite = (ROOT / "tests" / "conformance" / "test_store_contract.py").read_text()
    assert f"{suite.count(chr(10) + 'def test_')} passed" in ran.stdout  # each test, once
