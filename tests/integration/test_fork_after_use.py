"""A plain `os.fork()` after the store was used, as gunicorn `--preload` or a multiprocessing
pool makes one, on DynamoDB Local (`lifecycle_driver.fork`).

The parent's calls leave pooled keep-alive connections; a child that sent on a copy of one
would share the socket with its parent and its siblings, and read whichever answer came
first: another process's, or half of one. Here four children and the parent call at once,
each child on keys of its own and on keys every process shares, with the store as a Lambda
function builds it (`DynamoDBStore(table)`: the direct path) and with a boto3 client given.
"""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev.local_tables import local_client
from lambda_idempotency.testing import create_idempotency_table
from tests.integration import lifecycle_driver as driver

pytestmark = [pytest.mark.dynamodb_local, pytest.mark.timeout_scale(2)]

CHILDREN = 4
CALLS = 60
"""Each child's calls: every third on a shared key, the others on keys of its own."""
SHARED_KEYS = 10
PARENT_CALLS = 40
"""The parent's calls while its children make theirs: every fourth on a shared key."""
THREADS = 4
"""Each process calls from this many threads at once; the parent's first calls (before the
fork) too, so that its pool holds as many connections for the children to copy. With the
renewal taken out (the library before it), 4 of 5 runs failed: PayloadMismatchError (a
claim read another key's record), StoreError, InProgressError, and keys whose effect ran
twice; with one thread, 2 of 4 runs failed, by one StoreError each."""


@pytest.mark.parametrize("kind", ["dynamodb", "dynamodb-client"])
def test_forked_children_read_only_their_own_answers(
    dynamodb_local_endpoint: str, tmp_path: Path, kind: str
) -> None:
    table = create_idempotency_table(
        local_client(dynamodb_local_endpoint), f"fork-{uuid.uuid4().hex[:8]}"
    )
    env = driver.environment(
        tmp_path,
        kind,
        AWS_LAMBDA_INITIALIZATION_TYPE="on-demand",
        LIFECYCLE_TABLE=table,
        AWS_ENDPOINT_URL_DYNAMODB=dynamodb_local_endpoint,
    )
    reports = tmp_path / "reports"
    reports.mkdir()
    config = {
        "children": CHILDREN,
        "calls": CALLS,
        "shared_keys": SHARED_KEYS,
        "parent_calls": PARENT_CALLS,
        "threads": THREADS,
        "reports": str(reports),
    }
    report = driver.run("fork", config, env, timeout=60)
    children = report["children"]
    for child in children:
        assert "failed" not in child, child["failed"]
    paths = {report["path"], *(child["path"] for child in children)}
    assert (paths == {"DirectWire"}) is (kind == "dynamodb"), paths

    parent = report["parent"]
    calls: list[tuple[int, dict[str, Any]]] = [
        (parent["pid"], call) for call in parent["used"] + parent["calls"]
    ] + [(child["pid"], call) for child in children for call in child["calls"]]
    assert len(calls) == THREADS + PARENT_CALLS + CHILDREN * CALLS
    # no garbled exchange: every call answered, none with a StoreError or a parse failure
    assert [call["key"] for _, call in calls if "error" in call] == [], [
        call["error"] for _, call in calls if "error" in call
    ][:5]
    # no process read another call's answer: each result is its own key's
    for pid, call in calls:
        result = call["result"]
        assert (result["key"], result["input"]) == (call["key"], f"input-of-{call['key']}")
        if not call["key"].startswith("shared-"):
            assert result["pid"] == pid  # a key of its own: it ran the effect itself
    # one effect per key, whoever called it; every caller of a shared key got its result
    ran = driver.effects(tmp_path)
    called = {call["key"] for _, call in calls}
    assert Counter(line["key"] for line in ran) == dict.fromkeys(called, 1)
    assert len([key for key in called if key.startswith("shared-")]) == SHARED_KEYS
    effect_owner = {line["key"]: line["owner"] for line in ran}
    for _, call in calls:
        assert call["result"]["owner"] == effect_owner[call["key"]]


@pytest.mark.parametrize(
    "kind",
    # with a client, the renewal once closed its pools, taking their lock, copied as held:
    # the child hung before it started (the store's pools are now replaced, not closed)
    ["dynamodb", "dynamodb-client"],
)
def test_a_fork_while_another_thread_is_inside_the_http_pool_starts_the_child(
    dynamodb_local_endpoint: str, tmp_path: Path, kind: str
) -> None:
    """A multiprocessing pool started while a thread makes calls: the fork may land while
    that thread is inside the HTTP pool (here it holds the pool manager's lock across the
    fork, to land there every time). A child that never uses the store must still start."""
    table = create_idempotency_table(
        local_client(dynamodb_local_endpoint), f"fork-{uuid.uuid4().hex[:8]}"
    )
    env = driver.environment(
        tmp_path, kind, LIFECYCLE_TABLE=table, AWS_ENDPOINT_URL_DYNAMODB=dynamodb_local_endpoint
    )
    report = driver.run("fork_in_flight", {"wait_s": 3.0}, env, timeout=60)
    assert (report["path"] == "DirectWire") is (kind == "dynamodb")
    assert report["child"] == "ended"
    assert report["status"] == 0
