"""Many callers with one key at once, on DynamoDB Local: the handler runs exactly once."""

from __future__ import annotations

import math
import multiprocessing
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, InProgressError, current_execution, idempotent
from tests.conftest import FakeContext, create_table, local_client

THREADS = 32
PROCESSES = 8
STARTUP_SECONDS = 60
"""How long the spawned containers may take to import and build their clients (about 8 s
on a loaded 2-core machine) before they all call at once."""


def run_together(count: int, call: Callable[[], Any]) -> list[Any]:
    """Start `count` callers at one barrier; collect each one's result or exception."""
    barrier = threading.Barrier(count)
    outcomes: list[Any] = [None] * count

    def caller(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = call()
        except Exception as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=caller, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return outcomes


def test_32_threads_raise_policy_one_run_rest_in_progress(store: DynamoDBStore) -> None:
    runs: list[int] = []
    lease_until_ms: list[int] = []
    # each duplicate's answer, when its call started and when the answer came
    retry_after: list[tuple[int, int, int]] = []
    answered = threading.Semaphore(0)

    @idempotent(store=store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        runs.append(1)
        lease_until_ms.append(current_execution().lease_until_ms or 0)
        for _ in range(THREADS - 1):  # hold the key until every duplicate has its answer
            answered.acquire(timeout=30)
        return {"charge": "ch_1"}

    def call() -> Any:
        called_at_ms = time.time_ns() // 1_000_000
        try:
            return handler({"order_id": "o-1"}, FakeContext(remaining_ms=30_000))
        except InProgressError as exc:
            retry_after.append((exc.retry_after, called_at_ms, time.time_ns() // 1_000_000))
            answered.release()
            raise

    outcomes = run_together(THREADS, call)

    assert len(runs) == 1
    assert outcomes.count({"charge": "ch_1"}) == 1
    in_progress = [outcome for outcome in outcomes if isinstance(outcome, InProgressError)]
    assert len(in_progress) == THREADS - 1
    # Retry-After: until the first millisecond past the holder's remaining lease (~30 s, from
    # the invocation's remaining time) and the clock-skew allowance (only then may another
    # caller take it over), in whole seconds rounded up, as of some moment between the call
    # and its answer.
    skew_ms = handler.idempotency.settings.skew_ms
    assert len(retry_after) == THREADS - 1
    lapses_ms = lease_until_ms[0] + skew_ms + 1
    for seconds, called_at_ms, answered_at_ms in retry_after:
        at_most = math.ceil((lapses_ms - called_at_ms) / 1000)
        at_least = math.ceil((lapses_ms - answered_at_ms) / 1000)
        assert at_least <= seconds <= at_most
        assert at_least > 20


def test_32_threads_wait_policy_all_get_the_one_result(store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent(store=store, key="order_id", on_in_progress="wait", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        runs.append(1)
        time.sleep(0.5)
        return {"charge": f"ch_{len(runs)}"}

    outcomes = run_together(
        THREADS, lambda: handler({"order_id": "o-1"}, FakeContext(remaining_ms=30_000))
    )

    assert len(runs) == 1
    assert outcomes == [{"charge": "ch_1"}] * THREADS


# -- processes: each builds its own client, as separate Lambda containers do -------------


def _count(client: Any, counters: str, name: str) -> int:
    response = client.update_item(
        TableName=counters,
        Key={"id": {"S": name}},
        UpdateExpression="ADD n :one",
        ExpressionAttributeValues={":one": {"N": "1"}},
        ReturnValues="UPDATED_NEW",
    )
    return int(response["Attributes"]["n"]["N"])


def _read(client: Any, counters: str, name: str) -> int:
    item = client.get_item(TableName=counters, Key={"id": {"S": name}}, ConsistentRead=True).get(
        "Item"
    )
    return 0 if item is None else int(item["n"]["N"])


def _process_caller(
    endpoint: str, table: str, counters: str, policy: str, start: Any, queue: Any
) -> None:
    """One container: imports, a client, a decorated handler; then, once every container is
    ready (`start`, a barrier), one call."""
    client = local_client(endpoint)
    store = DynamoDBStore(table, client=client)

    @idempotent(store=store, key="order_id", on_in_progress=policy, namespace="charge")  # type: ignore[arg-type]
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        _count(client, counters, "runs")
        deadline = time.monotonic() + 30
        # With "raise", hold the key until every other process has its answer.
        while policy == "raise" and _read(client, counters, "answered") < PROCESSES - 1:
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if policy == "wait":
            time.sleep(1.0)
        return {"charge": "ch_1"}

    start.wait()  # all at once: no container still importing while the others call
    try:
        queue.put(("result", handler({"order_id": "o-1"}, FakeContext(remaining_ms=30_000))))
    except InProgressError as exc:
        _count(client, counters, "answered")
        queue.put(("in_progress", exc.retry_after))


@pytest.mark.timeout_scale(4)  # its own waits are bounded: startup, then answers
@pytest.mark.parametrize("policy", ["raise", "wait"])
def test_8_processes_one_key_one_run(
    dynamodb_local_endpoint: str, store: DynamoDBStore, policy: str
) -> None:
    counters = create_table(store.client, f"{store.table_name}-counters", key="id")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES, timeout=STARTUP_SECONDS)
    queue = context.Queue()
    processes = [
        context.Process(
            target=_process_caller,
            args=(dynamodb_local_endpoint, store.table_name, counters, policy, start, queue),
        )
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes = [queue.get(timeout=90) for _ in processes]
    for process in processes:
        process.join(30)

    assert _read(store.client, counters, "runs") == 1
    results = [value for kind, value in outcomes if kind == "result"]
    if policy == "raise":
        assert results == [{"charge": "ch_1"}]
        assert sum(kind == "in_progress" for kind, _ in outcomes) == PROCESSES - 1
    else:
        assert results == [{"charge": "ch_1"}] * PROCESSES
