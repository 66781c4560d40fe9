"""What a plain `@idempotent` handler imports of this package, module by module.

Every module on the cold-start path costs about 0.1 ms before it runs a line (finding,
reading, unmarshalling it), plus what its body builds (classes, enums, protocols). The lists
below are that path, written out: a module added to it fails this test with the difference,
so it is added on purpose (or imported where it is first used). What only the async, durable,
HTTP and batch front ends, the option types, the waits, metrics, the Powertools layout or the
operators' tooling need must never be on it. Times are `benchmarks/cold_start.py`'s, not this
test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lambda_idempotency

PACKAGE = "lambda_idempotency"
SOURCE = Path(lambda_idempotency.__file__).resolve().parents[1]

ON_IMPORT = {
    "_base",
    "_base.canonical",
    "_base.clock",
    "_base.errors",
    "_base.keys",
    "_base.lifecycle",
    "_base.observe",
    "_base.value",
    "_decorators",
    "_protocol",
    "_protocol.callables",
    "_protocol.claiming",
    "_protocol.completing",
    "_protocol.engine",
    "_protocol.execution",
    "_protocol.replaying",
    "_protocol.run",
    "_stores",
    "_stores.dynamodb",
    "_stores.dynamodb.calls",
    "_stores.dynamodb.decoration_check",
    "_stores.dynamodb.layout",
    "_stores.dynamodb.limits",
    "_stores.dynamodb.record_items",
    "_stores.dynamodb.result_placement",
    "_stores.dynamodb.store",
    "_stores.encoding",
    "_stores.record",
    "_version",
}
"""`from lambda_idempotency import DynamoDBStore, idempotent`: the decorator, the store, and the
protocol's steps a first call runs (claim, complete, replay), so that a function's init phase,
not its first invocation, pays for them."""

ON_FIRST_CALL = {
    "_stores.dynamodb.wire",
    "_stores.dynamodb.wire.build",
    "_stores.dynamodb.wire.check",
    "_stores.dynamodb.wire.guard",
    "_stores.dynamodb.wire.tracers",
    "_stores.dynamodb.wire.lean",
    "_stores.dynamodb.wire.parse",
    "_stores.dynamodb.wire.path",
    "_stores.dynamodb.wire.plan",
    "_stores.dynamodb.wire.request",
    "_stores.dynamodb.wire.send",
    "_stores.dynamodb.wire.sigv4",
}
"""The first call builds the store's client and its fast wire path (checked against the
client's own way once): nothing else. (A store that builds its own client loads
`_stores.dynamodb.client` for it too; this probe passes one in.)"""

NEVER = {
    "_stores.dynamodb.claim_rewrites",
    "__main__",
    "_base.metrics",
    "_batch",
    "_batch_processors",
    "_dev",
    "_http",
    "_options",
    "_protocol.coroutines",
    "_protocol.durable",
    "_protocol.waiting",
    "_stores.dynamodb.operator_actions",
    "_stores.dynamodb.powertools_layout",
    "_stores.valkey",
    "_stores.valkey.scripts",
    "_stores.valkey.store",
    "_tenant",
    "testing",
}
"""Loaded when first used, by the handlers and tools that use them."""

_PROBE = """
import json, os, sys
sys.path.insert(0, {source!r})
os.environ.update(AWS_ACCESS_KEY_ID="a", AWS_SECRET_ACCESS_KEY="b", AWS_DEFAULT_REGION="us-east-1")
os.environ.pop("IDEMPOTENCY_FAST_WIRE", None)  # the default path (CI also runs with it off)
import boto3
from botocore.awsrequest import AWSResponse

def ours():
    return {{name.partition(".")[2] for name in sys.modules if name.startswith("{package}.")}}

class Body:
    def stream(self, **kwargs):
        yield b"{{}}"

def answer(request, **kwargs):
    sent.append(request.headers["X-Amz-Target"].decode().rpartition(".")[2])
    headers = {{"x-amzn-requestid": "r", "content-type": "application/x-amz-json-1.0"}}
    return AWSResponse(request.url, 200, headers, Body())

client = boto3.client("dynamodb")
client.meta.events.register("before-send.dynamodb", answer)
runs, sent, stages = [], [], {{}}
from lambda_idempotency import DynamoDBStore, idempotent
stages["import"] = ours()

@idempotent(key="order_id", store=DynamoDBStore("orders", client=client))
def handler(event, context):
    runs.append(event["order_id"])
    return {{"order": event["order_id"]}}

stages["decoration"] = ours()
results = [handler({{"order_id": "o-1"}}, None)]
stages["first call"] = ours()
results.append(handler({{"order_id": "o-1"}}, None))
stages["replay"] = ours()
print(json.dumps({{"stages": {{k: sorted(v) for k, v in stages.items()}}, "runs": runs,
                  "sent": sent, "results": results}}))
"""


def _stages() -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-I", "-B", "-c", _PROBE.format(source=str(SOURCE), package=PACKAGE)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    result: dict[str, object] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def _difference(loaded: set[str], expected: set[str]) -> str:
    return f"added: {sorted(loaded - expected)}, gone: {sorted(expected - loaded)}"


def test_a_plain_handler_imports_only_its_path() -> None:
    result = _stages()
    stages = {name: set(modules) for name, modules in result["stages"].items()}  # type: ignore[attr-defined]

    # the handler ran once; its retry replayed from the warm cache, with no round trip
    assert result["runs"] == ["o-1"]
    assert result["sent"] == ["PutItem", "PutItem"]  # the claim, the completion
    assert result["results"] == [{"order": "o-1"}, {"order": "o-1"}]

    assert stages["import"] == ON_IMPORT, _difference(stages["import"], ON_IMPORT)
    assert stages["decoration"] == ON_IMPORT, "decorating imports nothing more"
    first_call = ON_IMPORT | ON_FIRST_CALL
    assert stages["first call"] == first_call, _difference(stages["first call"], first_call)
    assert stages["replay"] == first_call, "a replay imports nothing more"
    assert stages["replay"].isdisjoint(NEVER)


def test_the_lists_name_modules_that_exist() -> None:
    """A module renamed or removed must leave the lists too, or they guard nothing."""
    folder = SOURCE / PACKAGE
    existing = {
        ".".join(path.relative_to(folder).with_suffix("").parts).removesuffix(".__init__")
        for path in folder.rglob("*.py")
    }
    assert (ON_IMPORT | ON_FIRST_CALL | NEVER) - existing == set()
    assert ON_IMPORT.isdisjoint(NEVER) and ON_FIRST_CALL.isdisjoint(NEVER)
