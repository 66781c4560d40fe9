"""SnapStart simulated against real stores: a function's INIT (its store built at module
scope, one priming call), the runtime's before-snapshot hooks, then restores, each serving
concurrent calls on one key with `on_in_progress="wait"` (`lifecycle_driver.snapstart`).

A restore is a copy of the snapshotted process made by libc's fork() called directly: no
Python at-fork handler runs in it, as none runs in a restored snapshot, so whatever each copy
draws or opens anew, only the after-restore hooks gave it. The negative control is a runtime
without `snapshot_restore_py`: the same run, no hook registered or run, and the copies share
what the process drew before its snapshot (the Valkey waiter id, `random`'s state), which is
what the renewal changes.
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

pytestmark = pytest.mark.timeout_scale(2)

CHILDREN = 3
"""Restored environments."""
THREADS = 4
"""Concurrent calls each restored environment serves, all on the one shared key."""
WORK_S = 1.5
"""The holder's run: every other call arrives while it runs, and waits."""
WOKEN_WITHIN_S = 1.0
"""A waiter woken by the holder's completion answers this soon after the holder's run ends
(measured: under 20 ms); one left to its block's end (0.8 of the store's 5 s timeout, 4 s
after it blocked: the schedule is stretched to a minute, see
`lifecycle_driver._stretch_waiting_schedule`) answers about 2.5 s after. The lease is 60 s."""
POLLED_WITHIN_S = 5.0
"""A DynamoDB waiter polls (at most 0.5 s apart): it answers this soon after the holder."""

STORES = [
    pytest.param("dynamodb", marks=pytest.mark.dynamodb_local),
    pytest.param("valkey", marks=pytest.mark.valkey),
]


def restore(request: pytest.FixtureRequest, tmp: Path, kind: str, *, hooks: bool) -> Any:
    """The scenario run on a fresh table or prefix: its report."""
    if kind == "valkey":
        values = {"LIFECYCLE_VALKEY_URL": request.getfixturevalue("valkey_node").url}
    else:
        endpoint = request.getfixturevalue("dynamodb_local_endpoint")
        table = create_idempotency_table(local_client(endpoint), f"snap-{uuid.uuid4().hex[:8]}")
        values = {"LIFECYCLE_TABLE": table, "AWS_ENDPOINT_URL_DYNAMODB": endpoint}
    env = driver.environment(tmp, kind, AWS_LAMBDA_INITIALIZATION_TYPE="snap-start", **values)
    reports = tmp / "reports"
    reports.mkdir()
    config = {
        "children": CHILDREN,
        "threads": THREADS,
        "work_s": WORK_S,
        "runtime_hooks": hooks,
        "reports": str(reports),
    }
    report = driver.run("snapstart", config, env, timeout=60)
    for child in report["children"]:
        assert "failed" not in child, child["failed"]
    return report


def shared_calls(report: Any) -> list[dict[str, Any]]:
    return [call for child in report["children"] for call in child["calls"]]


def assert_one_effect_and_one_answer(report: Any, tmp: Path) -> dict[str, Any]:
    """One run of the effect for each key; every call on the shared key answered, with the
    holder's result; no wait near the lease. The holder's result."""
    ran = driver.effects(tmp)
    assert Counter(line["key"] for line in ran) == {
        "prime": 1,
        "shared": 1,
        **{f"own-{index}": 1 for index in range(CHILDREN)},
    }
    calls = shared_calls(report)
    assert len(calls) == CHILDREN * THREADS
    assert [call.get("error") for call in calls] == [None] * len(calls)
    results = {repr(sorted(call["result"].items())) for call in calls}
    assert len(results) == 1, results
    holder: dict[str, Any] = calls[0]["result"]
    assert (holder["key"], holder["input"]) == ("shared", "input-of-shared")
    (effect,) = [line for line in ran if line["key"] == "shared"]
    assert (holder["pid"], holder["owner"]) == (effect["pid"], effect["owner"])
    for call in calls:
        assert call["ended"] - call["started"] < driver.REMAINING_MS / 1000 / 10
    return holder


@pytest.mark.parametrize("kind", STORES)
def test_restored_environments_renew_what_the_snapshot_drew(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    report = restore(request, tmp_path, kind, hooks=True)
    # the library registered its two hooks once, with the runtime's module, and had no
    # complaint; a DynamoDB store built without a client sends the direct path in Lambda
    assert report["registered"] == {"before_snapshot": 1, "after_restore": 1}
    assert report["warnings"] == []
    assert report["path"] == ("DirectWire" if kind == "dynamodb" else "")
    children = report["children"]
    assert len({child["pid"] for child in children}) == CHILDREN

    holder = assert_one_effect_and_one_answer(report, tmp_path)
    # owner tokens: one per run of the effect, none shared between environments
    owners = [line["owner"] for line in driver.effects(tmp_path)]
    assert len(set(owners)) == len(owners) == CHILDREN + 2
    assert {child["own"]["result"]["owner"] for child in children} <= set(owners)
    # `random` (retry and wait jitter) reseeded in each environment
    assert len({child["random"] for child in children}) == CHILDREN

    late = [call["ended"] - holder["ended"] for call in shared_calls(report)]
    if kind == "dynamodb":
        assert max(late) < POLLED_WITHIN_S, late
        return
    # Valkey: each environment waits under a waiter id of its own, never the snapshot's, and
    # every waiter's block was answered by the holder's wake-up, soon after its run
    parent = report["parent"]["waiter"]
    ids = []
    for child in children:
        seen = {block["token"].partition(".")[0] for block in child["blocks"]}
        assert seen == {child["waiter"]}, (seen, child["waiter"])
        ids.append(child["waiter"])
    assert len(set(ids)) == CHILDREN
    assert parent not in ids
    blocks = [block for child in children for block in child["blocks"]]
    assert len(blocks) >= CHILDREN * THREADS - 1  # every call but the holder's waited
    assert all(block["woken"] for block in blocks), blocks
    assert max(late) < WOKEN_WITHIN_S, late


@pytest.mark.valkey
def test_without_the_runtime_hooks_restored_environments_share_the_snapshots_draws(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The control: a runtime without `snapshot_restore_py`. The library says it cannot hook
    the restore, and the copies keep what the snapshot drew: every environment's waiters wait
    under the INIT's waiter id, and `random` draws the same number in each. Their threads
    have the same ids too (the same memory), so waiters of two environments share a whole
    token: the holder's one wake-up for it is taken by one of them, and the other waits to
    its block's end. What it keeps regardless: one effect, one answer, owner tokens of their
    own (drawn per call from the kernel, never before a snapshot)."""
    report = restore(request, tmp_path, "valkey", hooks=False)
    assert report["registered"] == {"before_snapshot": 0, "after_restore": 0}
    assert any("no snapshot_restore_py" in message for message in report["warnings"])
    children = report["children"]

    parent = report["parent"]["waiter"]
    assert [child["waiter"] for child in children] == [parent] * CHILDREN
    seen = {block["token"].partition(".")[0] for child in children for block in child["blocks"]}
    assert seen == {parent}  # the shared id, as the server saw it
    assert len({child["random"] for child in children}) == 1

    holder = assert_one_effect_and_one_answer(report, tmp_path)
    tokens = Counter(
        token for child in children for token in {block["token"] for block in child["blocks"]}
    )
    assert max(tokens.values()) > 1, tokens  # one token armed from two environments
    blocks = [block for child in children for block in child["blocks"]]
    assert not all(block["woken"] for block in blocks)
    late = [call["ended"] - holder["ended"] for call in shared_calls(report)]
    assert max(late) > WOKEN_WITHIN_S, late
    owners = [line["owner"] for line in driver.effects(tmp_path)]
    assert len(set(owners)) == len(owners) == CHILDREN + 2
