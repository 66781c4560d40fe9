"""The examples users copy type-check under `mypy --strict`, with the library's types as
shipped: what the decorators return keeps the function's signature and carries the
documented `.idempotency` (its `stats`, `recent_runs_ms`).

The examples are written as handlers usually are, without annotations of their own: for
them (only) mypy allows unannotated and partly annotated functions and bare generics; every
check of how they use the library stays on (strict checks unannotated bodies too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_docs import CONTINUES, python_examples

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guide.md"]
"""The pages a user starts from (docs/migrating.md shows before and after in one block)."""

DOCUMENTED_USES = '''
"""The documented attributes of a decorated handler, fully annotated, under plain --strict."""
import collections
from typing import Any, assert_type

from lambda_idempotency import DynamoDBStore, idempotent, idempotent_function, idempotent_http
from lambda_idempotency._protocol.run import Idempotency


@idempotent(key="id", store=DynamoDBStore("t"))
def handler(event: dict[str, Any], context: object) -> dict[str, int]:
    return {"id": event["id"]}


@idempotent_function(key="order_id", store=DynamoDBStore("t"))
async def ship(order_id: str, *, express: bool = False) -> str:
    return order_id


@idempotent_http(store=DynamoDBStore("t"))
def api(event: dict[str, Any], context: object) -> dict[str, Any]:
    return {"statusCode": 201}


stats: collections.Counter[str] = handler.idempotency.stats
runs: collections.deque[int] = handler.idempotency.recent_runs_ms
assert_type(handler.idempotency, Idempotency)
assert_type(ship.idempotency.stats, collections.Counter[str])
assert_type(api.idempotency.stats, collections.Counter[str])
assert_type(handler({"id": 1}, None), dict[str, int])
'''

CONFIG = """[mypy]
strict = True
python_version = 3.11
mypy_path = {layer}

[mypy-pages.*]
disallow_untyped_defs = False
disallow_incomplete_defs = False
disallow_any_generics = False
"""


@pytest.mark.timeout_scale(3)  # mypy from cold (no cache) in a subprocess: 45 s beside a loaded run
def test_the_examples_and_the_documented_attributes_pass_mypy_strict(tmp_path: Path) -> None:
    pages = tmp_path / "pages"
    pages.mkdir()
    (pages / "__init__.py").write_text("")
    written = 0
    for page in PAGES:
        before = ""
        for example in python_examples(page):
            code = example.code
            if code.startswith(CONTINUES):  # it starts with the names the one before defined
                code = f"{before}\n{code}"
            before = code
            (pages / f"{page.stem.lower()}_{example.line}.py").write_text(code)
            written += 1
    assert written >= 5
    (tmp_path / "documented_uses.py").write_text(DOCUMENTED_USES)
    (tmp_path / "mypy.ini").write_text(CONFIG.format(layer=ROOT / "layer"))

    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(tmp_path / "mypy.ini"),
            # the lint's cache: the library, boto3's stubs and Powertools are read once
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "pages",
            "documented_uses.py",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
