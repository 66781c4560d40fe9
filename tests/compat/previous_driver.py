"""Runs calls under the previous release of lambda-idempotency, in a process of its own.

Started by tests/compat/test_previous_release.py with PYTHONPATH set to the previous
release's `layer/` (extracted from the repository's own history), so this process imports
that release and never this checkout's. Reads one JSON request on stdin:

    {"endpoint": ..., "region": ..., "aws_access_key_id": ..., "aws_secret_access_key": ...,
     "table": ..., "layout": "native" | "powertools",
     "calls": [{"kind": ..., "key": ..., "fail": false}, ...],
     "holds": [{"kind": ..., "key": ...}, ...],
     "keys": [{"case": ..., "event": ...}, ...]}

makes each call through the kind's decorated function (`catalogue.protected`), and each
hold as a live claim of the key (a run that is still going), and each key case's handler
on its event (`key_catalogue`), then prints one JSON answer: the release's version and path,
each call's outcome, each kind's runs and what each key case's call gave.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import uuid

import boto3
import catalogue  # this script's own folder: no import of the repository's test package
import key_catalogue

import lambda_idempotency
from lambda_idempotency import DynamoDBStore

try:
    from lambda_idempotency._version import VERSION
except ImportError:  # a commit before _version.py (2026-11-23): any pair of commits compares
    VERSION = "unknown"


def main() -> None:
    request = json.load(sys.stdin)
    client = boto3.client(
        "dynamodb",
        endpoint_url=request["endpoint"],
        region_name=request["region"],
        aws_access_key_id=request["aws_access_key_id"],
        aws_secret_access_key=request["aws_secret_access_key"],
    )
    layout = {} if request["layout"] == "native" else {"layout": request["layout"]}
    store = DynamoDBStore(request["table"], client=client, **layout)
    runs: list[str] = []
    outcomes = []
    for call in request.get("calls", []):
        run = catalogue.protected(lambda_idempotency, store, call["kind"], runs)
        key, fail = call["key"], call.get("fail", False)
        outcomes.append(catalogue.outcome(functools.partial(run, key, fail=fail)))
    for hold in request.get("holds", []):
        namespace = f"{catalogue.NAMESPACE}.{hold['kind']}"
        now = int(time.time() * 1000)
        won, _ = store.claim(
            store.layout.record_key(namespace, None, hold["key"]),
            owner=uuid.uuid4().hex[:24],
            payload_hash=store.layout.payload_hash(hold["key"]),
            now_ms=now,
            lease_until_ms=now + catalogue.LEASE_SECONDS * 1000,
            expiration_s=now // 1000 + 3600,
        )
        outcomes.append({"held": won})
    keys = key_catalogue.run(lambda_idempotency, store, request.get("keys", []))
    json.dump(
        {
            "version": VERSION,
            "path": lambda_idempotency.__file__,
            "outcomes": outcomes,
            "runs": runs,
            "keys": keys,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
