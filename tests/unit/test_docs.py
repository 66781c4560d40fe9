"""The examples in the docs run: docs/testing.md's examples are tests for the plugin."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore
from tests.conftest import FakeContext
from tests.unit.test_metrics import counts, emf_lines

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(encoding="utf-8"), re.DOTALL)


def test_testing_md_examples_pass_with_the_installed_plugin(tmp_path: Path) -> None:
    examples = [
        block for block in python_blocks(ROOT / "docs" / "testing.md") if "def test_" in block
    ]
    assert examples
    test_file = tmp_path / "test_examples.py"
    test_file.write_text("\n\n".join(examples), encoding="utf-8")

    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 passed" in completed.stdout


def test_the_operations_guide_examples_write_what_it_shows(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The metrics examples print the EMF lines the guide describes; the Logger set-up runs."""
    blocks = python_blocks(ROOT / "docs" / "operations.md")
    monkeypatch.setenv("IDEMPOTENCY_TABLE", moto_store.table_name)
    namespace: dict[str, Any] = {}
    ours = logging.getLogger("lambda_idempotency")
    saved = ours.handlers[:], ours.level, ours.propagate
    try:
        exec(blocks[0], namespace)
        namespace["charge"]({"order_id": "order-1", "amount": 3}, FakeContext())
        namespace["refund"]({"refund_id": "order-1", "amount": 3}, FakeContext())
        namespace["ship"]({"order_id": "order-1"}, FakeContext())
        exec(blocks[1], namespace)  # the Logger set-up
    finally:
        namespace["metrics"].clear_metrics()
        ours.handlers, ours.propagate = saved[0], saved[2]
        ours.setLevel(saved[1])
        powertools_logger = logging.getLogger("checkout")  # bound to this test's stdout
        powertools_logger.handlers.clear()
        vars(powertools_logger).pop("init", None)

    documents = emf_lines(capsys.readouterr().out)
    namespaces = [d["_aws"]["CloudWatchMetrics"][0]["Namespace"] for d in documents]
    assert namespaces == ["LambdaIdempotency", "Payments", "Orders"]
    assert counts(documents) == {"executed": 3, "OrderShipped": 1}
