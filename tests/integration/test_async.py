"""Idempotent coroutines as async code uses them, on DynamoDB Local over HTTP: many tasks on
one loop, tasks in several processes, cancellation at every step, a store call held while
the loop goes on, failures of the coroutine and of its result. Every test counts how many
times the coroutine's body ran."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from lambda_idempotency import (
    CompletionConflictError,
    DynamoDBStore,
    InProgressError,
    KeyMissingError,
    PayloadMismatchError,
    ResultNotSerializableError,
    Status,
    current_execution,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeContext, create_table, local_client

pytestmark = pytest.mark.dynamodb_local

TASKS = 32
PROCESSES = 4
TASKS_PER_PROCESS = 8
STARTUP_SECONDS = 60
HELD_SECONDS = 0.5
"""How long a planted hook holds one store call."""


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def status_of(store: DynamoDBStore, pk: str) -> Status | None:
    record = store.get(pk)
    return None if record is None else record.status


class HeldCall:
    """A before-send hook that holds the `nth` request of a DynamoDB operation in its (worker)
    thread: `entered` is set when it is held, and it goes on after `seconds` (or on `go`)."""

    def __init__(
        self, store: DynamoDBStore, operation: str, seconds: float = 30.0, nth: int = 1
    ) -> None:
        self.store = store
        self.event = f"before-send.dynamodb.{operation}"
        self.seconds = seconds
        self.nth = nth
        self.seen = 0
        self.entered = threading.Event()
        self.go = threading.Event()
        self.threads: list[int] = []
        store.client.meta.events.register(self.event, self)

    def __call__(self, **kwargs: Any) -> None:
        self.seen += 1
        if self.seen != self.nth:
            return
        self.threads.append(threading.get_ident())
        self.entered.set()
        self.go.wait(self.seconds)

    def remove(self) -> None:
        self.go.set()
        self.store.client.meta.events.unregister(self.event, self)


async def entered(held: HeldCall) -> None:
    """Until the held request is in its hook, without blocking the loop."""
    while not held.entered.is_set():
        await asyncio.sleep(0.005)


# -- many tasks, one key ----------------------------------------------------------------------


def test_32_tasks_on_one_key_one_run_the_rest_refused_in_progress(store: DynamoDBStore) -> None:
    runs: list[str] = []

    async def scenario() -> list[Any]:
        answered = asyncio.Semaphore(0)

        @idempotent_function(key="order_id", store=store)
        async def charge(order_id: str) -> dict[str, str]:
            runs.append(order_id)
            for _ in range(TASKS - 1):  # hold the key until every duplicate has its answer
                await asyncio.wait_for(answered.acquire(), 30)
            return {"charge": "ch_1"}

        async def call() -> Any:
            try:
                return await charge("o-1")
            except InProgressError:
                answered.release()
                raise

        return await asyncio.gather(*(call() for _ in range(TASKS)), return_exceptions=True)

    outcomes = run(scenario())

    assert runs == ["o-1"]
    assert outcomes.count({"charge": "ch_1"}) == 1
    assert sum(isinstance(outcome, InProgressError) for outcome in outcomes) == TASKS - 1


def test_32_tasks_waiting_all_get_the_one_result_and_never_sleep_on_the_loop(
    store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for an in-flight duplicate polls with asyncio.sleep: `time.sleep` is never
    called on the loop's thread (the store's worker threads may, in botocore's retries)."""
    runs: list[str] = []
    sleepers: list[int] = []
    real_sleep = time.sleep

    def watched_sleep(seconds: float) -> None:
        sleepers.append(threading.get_ident())
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", watched_sleep)

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    async def charge(order_id: str, context: Any) -> dict[str, str]:
        runs.append(order_id)
        await asyncio.sleep(0.5)
        return {"charge": f"ch_{len(runs)}"}

    async def scenario() -> list[Any]:
        context = FakeContext(remaining_ms=30_000)
        return await asyncio.gather(*(charge("o-1", context) for _ in range(TASKS)))

    loop_thread = threading.get_ident()
    outcomes = run(scenario())

    assert runs == ["o-1"]
    assert outcomes == [{"charge": "ch_1"}] * TASKS
    assert charge.idempotency.stats["waiting"] >= 1  # type: ignore[attr-defined]
    assert loop_thread not in sleepers


# -- processes: each its own client and loop, as separate Lambda containers -------------------


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
    item = client.get_item(TableName=counters, Key={"id": {"S": name}}, ConsistentRead=True)
    return 0 if "Item" not in item else int(item["Item"]["n"]["N"])


def _process_tasks(endpoint: str, table: str, counters: str, start: Any, queue: Any) -> None:
    """One container: a client, a decorated coroutine, then (all containers ready) a loop
    with several tasks calling it at once."""
    client = local_client(endpoint)
    store = DynamoDBStore(table, client=client)

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", namespace="charge")
    async def charge(order_id: str) -> dict[str, str]:
        await asyncio.to_thread(_count, client, counters, "runs")
        await asyncio.sleep(1.0)
        return {"charge": "ch_1"}

    async def tasks() -> list[Any]:
        calls = (charge("o-1") for _ in range(TASKS_PER_PROCESS))
        return await asyncio.gather(*calls, return_exceptions=True)

    start.wait()
    queue.put([repr(outcome) for outcome in asyncio.run(tasks())])


@pytest.mark.timeout_scale(4)  # startup (STARTUP_SECONDS), then answers
def test_tasks_in_4_processes_one_key_one_run(
    dynamodb_local_endpoint: str, store: DynamoDBStore
) -> None:
    counters = create_table(store.client, f"{store.table_name}-counters", key="id")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES, timeout=STARTUP_SECONDS)
    queue = context.Queue()
    processes = [
        context.Process(
            target=_process_tasks,
            args=(dynamodb_local_endpoint, store.table_name, counters, start, queue),
        )
        for _ in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    outcomes = [outcome for _ in processes for outcome in queue.get(timeout=90)]
    for process in processes:
        process.join(30)

    assert _read(store.client, counters, "runs") == 1
    assert outcomes == [repr({"charge": "ch_1"})] * PROCESSES * TASKS_PER_PROCESS


# -- cancellation -----------------------------------------------------------------------------


def test_a_task_cancelled_mid_run_releases_its_key_and_the_next_call_runs(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, hang: bool) -> str:
        runs.append("hang" if hang else "run")
        if hang:
            await asyncio.Event().wait()
        return "charged"

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1", True))
        while not runs:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(scenario())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert status_of(store, pk) is Status.RELEASED  # a fenced tombstone: the key is free
    assert charge.idempotency.stats["released"] == 1  # type: ignore[attr-defined]

    assert run(charge("o-1", False)) == "charged"  # the retry runs
    assert run(charge("o-1", False)) == "charged"  # and is replayed after
    assert runs == ["hang", "run"]


def test_a_timeout_around_the_call_releases_the_key_and_raises_timeout(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, seconds: float) -> str:
        runs.append(order_id)
        await asyncio.sleep(seconds)
        return "charged"

    async def too_slow() -> None:
        async with asyncio.timeout(0.2):
            await charge("o-1", 30)

    # the client's first use (its fast wire path's self-check) can take 0.2 s on a loaded
    # machine: the timeout would fire before the body ran
    assert run(charge("o-warm", 0)) == "charged"
    with pytest.raises(TimeoutError):
        run(too_slow())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert status_of(store, pk) is Status.RELEASED

    assert run(asyncio.wait_for(charge("o-1", 0), 30)) == "charged"
    assert runs == ["o-warm", "o-1", "o-1"]


def test_a_cancel_while_the_claim_is_in_flight_releases_the_claim_it_won(
    store: DynamoDBStore,
) -> None:
    """The claim's request is held in its worker thread when the task is cancelled: the
    request lands all the same, so its end is awaited and the key it won is released
    before the CancelledError goes on. Nothing ran; the next call runs once."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=HELD_SECONDS)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        await entered(held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
    finally:
        held.remove()
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert runs == []
    assert status_of(store, pk) is Status.RELEASED  # claimed, then released: never locked
    assert charge.idempotency.stats["claimed"] == 1  # type: ignore[attr-defined]
    assert charge.idempotency.stats["released"] == 1  # type: ignore[attr-defined]

    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_a_cancel_while_the_result_is_stored_completes_first_then_cancels(
    store: DynamoDBStore,
) -> None:
    """The effect has happened: the completion goes on to its end (a second cancel is held
    too), then the task is cancelled. A retry replays; the body ran once."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = HeldCall(store, "PutItem", nth=2)  # the claim passes, the completion is held

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        await entered(held)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # a second cancel while the completion is still held
        await asyncio.sleep(0.05)
        assert not task.done()  # the completion is not abandoned
        held.go.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
    finally:
        held.remove()
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert status_of(store, pk) is Status.COMPLETED
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


# -- the loop is never blocked ----------------------------------------------------------------


async def ticker(stop: asyncio.Event, gaps: list[float]) -> None:
    """Ticks every 5 ms and keeps the gaps between ticks: a blocked loop shows as a gap."""
    last = time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(0.005)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


def test_a_slow_store_call_never_blocks_the_loop(store: DynamoDBStore) -> None:
    """A claim held 500 ms in botocore's before-send, the loop keeps ticking: the largest gap
    between two 5 ms ticks stays far below the 500 ms a blocked loop would show (tens of ms
    at most on a loaded machine: the worker thread takes the GIL to build its request)."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    assert run(charge("o-warm")) == "charged"  # the client's first use is behind us
    held = HeldCall(store, "PutItem", seconds=HELD_SECONDS)
    gaps: list[float] = []

    async def scenario() -> str:
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop, gaps))
        await asyncio.sleep(0.02)
        started = time.perf_counter()
        result = await charge("o-1")
        assert time.perf_counter() - started >= HELD_SECONDS  # the call was held
        stop.set()
        await ticking
        return result

    try:
        assert run(scenario()) == "charged"
    finally:
        held.remove()
    largest = max(gaps)
    print(f"largest gap between 5 ms ticks while a claim was held 500 ms: {largest * 1e3:.1f} ms")
    assert largest < HELD_SECONDS / 2
    assert held.threads and held.threads[0] != threading.main_thread().ident
    assert runs == ["o-warm", "o-1"]


# -- failures of the coroutine and of its result ----------------------------------------------


def test_a_coroutine_that_raises_releases_its_key_and_the_retry_runs(
    store: DynamoDBStore,
) -> None:
    runs: list[bool] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, fail: bool) -> str:
        runs.append(fail)
        await asyncio.sleep(0)
        if fail:
            raise ValueError("declined")
        return "charged"

    with pytest.raises(ValueError, match="declined"):
        run(charge("o-1", True))
    assert run(charge("o-1", False)) == "charged"
    assert run(charge("o-1", False)) == "charged"
    assert runs == [True, False]
    stats = charge.idempotency.stats  # type: ignore[attr-defined]
    assert (stats["released"], stats["executed"], stats["replayed"]) == (1, 1, 1)


def test_a_result_that_cannot_be_stored_completes_the_key_and_retries_get_the_typed_error(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []
    unstorable = object()

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> Any:
        runs.append(order_id)
        return unstorable

    assert run(charge("o-1")) is unstorable  # the caller gets what ran
    with pytest.raises(ResultNotSerializableError) as refused:
        run(charge("o-1"))
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert refused.value.key_hash == pk
    assert status_of(store, pk) is Status.COMPLETED
    assert runs == ["o-1"]


def test_typed_errors_as_on_the_sync_path(store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent_function(key="order.id", payload="order", store=store)
    async def charge(order: dict[str, Any]) -> int:
        runs.append(order["amount"])
        return int(order["amount"])

    assert run(charge({"id": "o-1", "amount": 5})) == 5
    with pytest.raises(PayloadMismatchError):
        run(charge({"id": "o-1", "amount": 6}))
    with pytest.raises(KeyMissingError):
        run(charge({"amount": 5}))
    assert runs == [5]


# -- transactional completion from the coroutine and from the tasks it awaits -----------------


def test_writes_enlisted_in_the_coroutine_and_in_a_task_it_awaits_commit_with_the_result(
    store: DynamoDBStore,
) -> None:
    business = create_table(store.client, f"{store.table_name}-charges", key="id")
    runs: list[str] = []

    def enlist(item_id: str) -> None:
        current_execution().add_write(
            {"Put": {"TableName": business, "Item": {"id": {"S": item_id}}}}
        )

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        enlist(f"{order_id}-direct")

        async def child() -> None:
            await asyncio.sleep(0)
            enlist(f"{order_id}-from-task")  # a task copies the context: the same execution

        await asyncio.create_task(child())
        return "charged"

    assert run(charge("o-1")) == "charged"
    assert run(charge("o-1")) == "charged"
    items = store.client.scan(TableName=business, ConsistentRead=True)["Items"]
    assert sorted(item["id"]["S"] for item in items) == ["o-1-direct", "o-1-from-task"]
    assert runs == ["o-1"]


def test_an_enlisted_write_whose_condition_fails_commits_nothing_and_frees_the_key(
    store: DynamoDBStore,
) -> None:
    business = create_table(store.client, f"{store.table_name}-charges", key="id")
    store.client.put_item(TableName=business, Item={"id": {"S": "taken"}})
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, charge_id: str) -> str:
        runs.append(charge_id)
        current_execution().add_write(
            {
                "Put": {
                    "TableName": business,
                    "Item": {"id": {"S": charge_id}},
                    "ConditionExpression": "attribute_not_exists(id)",
                }
            }
        )
        return "charged"

    with pytest.raises(CompletionConflictError):
        run(charge("o-1", "taken"))
    assert run(charge("o-1", "fresh")) == "charged"  # the key was released: the retry runs
    assert runs == ["taken", "fresh"]


# -- log lines and counters as on the sync path -----------------------------------------------


def _outcomes(caplog: Any) -> list[tuple[int, str]]:
    return [
        (record.levelno, json.loads(record.getMessage())["idempotency"])
        for record in caplog.records
    ]


def _metrics(out: str) -> list[dict[str, Any]]:
    """Each EMF line's metrics and dimensions, without its timestamp."""
    return [
        {name: value for name, value in json.loads(line).items() if name != "_aws"}
        for line in out.splitlines()
        if line.startswith("{") and "_aws" in line
    ]


def test_log_lines_metrics_and_counters_are_those_of_the_sync_path(
    store: DynamoDBStore, caplog: Any, capsys: Any
) -> None:
    def make(body: Callable[..., Any]) -> Any:
        protect = idempotent(
            key="order_id", store=store, cache_size=0, namespace="orders", metrics=True
        )
        return protect(body)

    def sync_handler(event: dict[str, Any], context: Any) -> str:
        if event.get("fail"):
            raise ValueError("declined")
        return "charged"

    async def async_handler(event: dict[str, Any], context: Any) -> str:
        return sync_handler(event, context)

    seen = {}
    for name, handler in (("sync", make(sync_handler)), ("async", make(async_handler))):
        caplog.clear()
        capsys.readouterr()
        order = f"o-{name}"
        events = [{"order_id": order, "fail": True}, {"order_id": order}, {"order_id": order}]
        with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
            for event in events:
                try:
                    outcome = handler(event, None)
                    if asyncio.iscoroutine(outcome):
                        run(outcome)
                except ValueError:
                    pass
        emitted = _metrics(capsys.readouterr().out)
        seen[name] = (_outcomes(caplog), emitted, dict(handler.idempotency.stats))

    assert seen["async"] == seen["sync"]
    assert [outcome for _, outcome in seen["sync"][0]] == [
        "claimed",
        "released",
        "claimed",
        "executed",
        "replayed",
    ]
    assert len(seen["sync"][1]) >= 3  # metric lines were written, the same ones
