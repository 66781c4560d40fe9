"""A Lambda function's module, as the process-lifecycle tests deploy it: its store built at
module scope (in INIT, where the runtime imports it), one handler that waits for the holder.

The store is chosen by the environment the driver (`tests/integration/lifecycle_driver.py`)
sets: `LIFECYCLE_STORE` is `dynamodb` (`DynamoDBStore(table)`, as a function builds it: in
Lambda its requests take the direct path), `dynamodb-client` (a store given a boto3 client)
or `valkey` (`ValkeyStore(url)`). Each run of the handler's effect appends one JSON line to
the file `LIFECYCLE_EFFECTS` (opened O_APPEND, so the lines of every process stay whole):
the key, the process and the claim's owner token.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from lambda_idempotency import DynamoDBStore, current_execution, idempotent

KIND = os.environ["LIFECYCLE_STORE"]
EFFECTS = os.environ["LIFECYCLE_EFFECTS"]


def _store() -> Any:
    if KIND == "valkey":
        from lambda_idempotency import ValkeyStore

        return ValkeyStore(os.environ["LIFECYCLE_VALKEY_URL"])
    table = os.environ["LIFECYCLE_TABLE"]
    if KIND == "dynamodb-client":
        import boto3

        return DynamoDBStore(table, client=boto3.client("dynamodb"))  # the environment's endpoint
    assert KIND == "dynamodb", KIND
    return DynamoDBStore(table)


store = _store()


@idempotent(store=store, key="key", on_in_progress="wait")
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    owner = current_execution().owner
    line = json.dumps({"key": event["key"], "pid": os.getpid(), "owner": owner}) + "\n"
    fd = os.open(EFFECTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    time.sleep(event.get("work_s", 0))
    return {
        "key": event["key"],
        "input": event["input"],
        "pid": os.getpid(),
        "owner": owner,
        "ended": time.time(),
    }
