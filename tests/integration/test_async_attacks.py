"""Attacks on idempotent coroutines, written from the promise (docs/guide.md "Async
functions", docs/protocol.md "Coroutine functions" and the failure table), on DynamoDB Local
over HTTP: cancellation at every point and by every means, store faults while tasks are
cancelled, a starved or single-threaded executor, nested calls, several loops, repeated
`asyncio.run`, uvloop, context leakage. Each counts how many times the body ran and looks at
the record a cancelled caller left: never `IN_PROGRESS` once its task is done."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    NoActiveExecutionError,
    Status,
    StoreError,
    current_execution,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeContext, create_table
from tests.integration.test_async import HeldCall, entered

pytestmark = pytest.mark.dynamodb_local


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def pk_of(protected: Any, **arguments: Any) -> str:
    pk, _ = protected.idempotency._identify(arguments)
    return str(pk)


def status_of(store: DynamoDBStore, pk: str) -> Status | None:
    record = store.get(pk)
    return None if record is None else record.status


class Hook:
    """A before-send hook on one DynamoDB operation that answers (or delays) the `nth`..`last`
    requests in the worker thread that sends them: `respond(kwargs)` returns an AWSResponse
    to stand for DynamoDB's, or None to let the request go."""

    def __init__(
        self,
        store: DynamoDBStore,
        operation: str,
        respond: Callable[[dict[str, Any]], AWSResponse | None],
    ) -> None:
        self.store = store
        self.event = f"before-send.dynamodb.{operation}"
        self.respond = respond
        self.seen = 0
        store.client.meta.events.register(self.event, self)

    def __call__(self, **kwargs: Any) -> AWSResponse | None:
        self.seen += 1
        return self.respond(kwargs)

    def remove(self) -> None:
        self.store.client.meta.events.unregister(self.event, self)


def error_response(status: int, code: str) -> AWSResponse:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": code})
    return AWSResponse("https://dynamodb.local", status, {}, _Raw(body.encode()))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **kwargs: Any) -> Any:
        yield self.body

    def read(self) -> bytes:
        return self.body


# -- cancellation at every point --------------------------------------------------------------

DELAYS_MS = [0, 0.1, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 60]


def test_a_cancel_after_any_delay_never_leaves_a_key_locked_and_a_completed_key_ran_once(
    store: DynamoDBStore,
) -> None:
    """One key per delay: a task is cancelled that long after it started (claim in flight,
    body, completion in flight, done). Afterwards its record is never IN_PROGRESS, and a
    completed key replays without running again."""
    runs: dict[str, int] = {}

    @idempotent_function(key="order_id", store=store, cache_size=0)
    async def charge(order_id: str) -> str:
        runs[order_id] = runs.get(order_id, 0) + 1
        await asyncio.sleep(0.003)
        return f"charged {order_id}"

    async def one(order_id: str, delay: float) -> None:
        task = asyncio.create_task(charge(order_id))
        await asyncio.sleep(delay)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def scenario() -> None:
        for index, delay in enumerate(DELAYS_MS):
            await one(f"o-{index}", delay / 1000)

    run(scenario())
    for index in range(len(DELAYS_MS)):
        order_id = f"o-{index}"
        status = status_of(store, pk_of(charge, order_id=order_id))
        assert status is not Status.IN_PROGRESS, (order_id, DELAYS_MS[index])
        before = runs.get(order_id, 0)
        assert run(charge(order_id)) == f"charged {order_id}"
        if status is Status.COMPLETED:
            assert runs[order_id] == before == 1  # replayed, not run again
        assert run(charge(order_id)) == f"charged {order_id}"
        assert runs[order_id] <= 2


@pytest.mark.parametrize("hops", [0, 1, 2, 3, 4, 6])
def test_a_cancel_a_few_loop_turns_after_the_claims_answer_arrived_releases_the_key(
    store: DynamoDBStore, hops: int
) -> None:
    """The claim's answer is in (its worker thread is past botocore's after-call) and the
    task is cancelled a few turns of the loop later: before, while or after the driver takes
    the answer. The key is never left IN_PROGRESS; the body runs at most once."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0)
        return "charged"

    box: dict[str, Any] = {}
    fired = threading.Event()

    def after_call(**kwargs: Any) -> None:
        if fired.is_set():
            return
        fired.set()
        loop, task = box["loop"], box["task"]

        def hop(left: int) -> None:
            if left == 0:
                task.cancel()
            else:
                loop.call_soon(hop, left - 1)

        loop.call_soon_threadsafe(hop, hops)

    store.client.meta.events.register("after-call.dynamodb.PutItem", after_call)

    async def scenario() -> None:
        box["loop"] = asyncio.get_running_loop()
        box["task"] = asyncio.create_task(charge("o-1"))
        with contextlib.suppress(asyncio.CancelledError):
            await box["task"]

    try:
        run(scenario())
    finally:
        store.client.meta.events.unregister("after-call.dynamodb.PutItem", after_call)
    status = status_of(store, pk_of(charge, order_id="o-1"))
    assert status is not Status.IN_PROGRESS
    assert run(charge("o-1")) == "charged"
    assert len(runs) <= 2
    assert len(runs) == 1 or status is Status.RELEASED


@pytest.mark.parametrize("timeout", [0, 1e-6, 1e-4, 1e-3, 5e-3, 2e-2])
def test_wait_for_with_tiny_timeouts_raises_timeout_and_frees_the_key(
    store: DynamoDBStore, timeout: float
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.05)
        return "charged"

    async def scenario() -> Any:
        try:
            return await asyncio.wait_for(charge("o-1"), timeout)
        except TimeoutError as timed_out:
            return timed_out

    outcome = run(scenario())
    assert isinstance(outcome, TimeoutError)
    assert status_of(store, pk_of(charge, order_id="o-1")) is not Status.IN_PROGRESS
    assert run(charge("o-1")) == "charged"
    assert run(charge("o-1")) == "charged"
    assert len(runs) in (1, 2)


def test_asyncio_timeout_firing_while_the_claim_is_held_raises_timeout_after_the_release(
    store: DynamoDBStore,
) -> None:
    """`asyncio.timeout` fires while the claim is held 0.3 s in its worker thread: the call
    waits for the claim's answer, releases the key, and the timeout surfaces as TimeoutError
    (the held cancellation still counts as the timeout's)."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.3)

    async def scenario() -> float:
        started = time.perf_counter()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await charge("o-1")
        return time.perf_counter() - started

    try:
        took = run(scenario())
    finally:
        held.remove()
    assert took >= 0.25  # it waited for the claim's answer
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.RELEASED
    assert runs == []
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_asyncio_timeout_firing_while_the_result_is_stored_raises_timeout_and_replays(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    assert run(charge("o-warm")) == "charged"  # the client's first use is behind us
    held = HeldCall(store, "PutItem", seconds=0.3, nth=2)

    async def scenario() -> None:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await charge("o-1")

    try:
        run(scenario())
    finally:
        held.remove()
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.COMPLETED
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-warm", "o-1"]


def test_an_outer_timeout_around_an_inner_one_is_reported_by_the_outer(
    store: DynamoDBStore,
) -> None:
    """Nested timeouts while the completion is held: the outer (shorter) one fires; the
    completion runs to its end; the TimeoutError belongs to the outer block, the inner block
    lets it through as a cancellation (its own deadline has not come)."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    assert run(charge("o-warm")) == "charged"  # the client's first use is behind us
    held = HeldCall(store, "PutItem", seconds=0.3, nth=2)
    seen: list[str] = []

    async def scenario() -> None:
        try:
            async with asyncio.timeout(0.1):
                try:
                    async with asyncio.timeout(30):
                        await charge("o-1")
                except TimeoutError:
                    seen.append("inner")
                    raise
        except TimeoutError:
            seen.append("outer")

    try:
        run(scenario())
    finally:
        held.remove()
    assert seen == ["outer"]
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.COMPLETED
    assert runs == ["o-warm", "o-1"]


def test_cancel_twice_while_the_claim_is_in_flight_releases_once_and_cancels(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.3)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        await entered(held)
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
    finally:
        held.remove()
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.RELEASED
    assert charge.idempotency.stats["released"] == 1  # type: ignore[attr-defined]
    assert runs == []


def test_a_task_group_whose_sibling_fails_cancels_every_call_and_leaves_no_key_locked(
    store: DynamoDBStore,
) -> None:
    """Eight calls on eight keys in a TaskGroup, caught at claim, body and completion; a
    sibling raises: the group cancels them all. No key stays IN_PROGRESS; every key either
    replays without running again or runs on its retry."""
    runs: list[str] = []

    @idempotent_function(key="order_id", payload="order_id", store=store, cache_size=0)
    async def charge(order_id: str, pause: float) -> str:
        runs.append(order_id)
        await asyncio.sleep(pause)
        return f"charged {order_id}"

    async def failing_sibling() -> None:
        await asyncio.sleep(0.02)
        raise ValueError("sibling failed")

    async def scenario() -> None:
        with pytest.raises(ExceptionGroup):
            async with asyncio.TaskGroup() as group:
                for index in range(8):
                    group.create_task(charge(f"o-{index}", index * 0.005))
                group.create_task(failing_sibling())

    run(scenario())
    for index in range(8):
        order_id = f"o-{index}"
        status = status_of(store, pk_of(charge, order_id=order_id, pause=0))
        assert status is not Status.IN_PROGRESS, order_id
        before = runs.count(order_id)
        assert run(charge(order_id, 0)) == f"charged {order_id}"
        if status is Status.COMPLETED:
            assert runs.count(order_id) == before == 1


def test_a_waiter_cancelled_while_the_holder_runs_stops_waiting_and_the_holder_completes(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []
    go = asyncio.Event

    @idempotent_function(
        key="order_id", payload="order_id", store=store, on_in_progress="wait", cache_size=0
    )
    async def charge(order_id: str, release: Any) -> str:
        runs.append(order_id)
        await release.wait()
        return "charged"

    async def scenario() -> str:
        release = go()
        holder = asyncio.create_task(charge("o-1", release))
        while not runs:
            await asyncio.sleep(0.005)
        waiter = asyncio.create_task(charge("o-1", release))
        await asyncio.sleep(0.3)  # the waiter polls
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        release.set()
        return await holder

    assert run(scenario()) == "charged"
    assert status_of(store, pk_of(charge, order_id="o-1", release=None)) is Status.COMPLETED
    assert runs == ["o-1"]
    assert charge.idempotency.stats["waiting"] >= 1  # type: ignore[attr-defined]


# -- store faults while tasks are cancelled ---------------------------------------------------


def test_a_claim_throttled_to_the_end_raises_store_error_and_writes_nothing(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    hook = Hook(store, "PutItem", lambda _: error_response(400, "ThrottlingException"))
    try:
        with pytest.raises(StoreError):
            run(charge("o-1"))
    finally:
        hook.remove()
    assert runs == []
    assert status_of(store, pk_of(charge, order_id="o-1")) is None
    assert run(charge("o-1")) == "charged"


def test_a_cancel_while_botocore_retries_a_throttled_claim_leaves_the_key_free(
    store: DynamoDBStore,
) -> None:
    """The claim is throttled twice (botocore sleeps between its attempts, in the worker
    thread), then lands; the task was cancelled meanwhile: the claim it won is released."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    def throttle_twice(_: dict[str, Any]) -> AWSResponse | None:
        return error_response(400, "ThrottlingException") if hook.seen <= 2 else None

    hook = Hook(store, "PutItem", throttle_twice)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        while hook.seen < 1:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
    finally:
        hook.remove()
    assert runs == []
    assert status_of(store, pk_of(charge, order_id="o-1")) in (Status.RELEASED, None)
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_a_claim_that_landed_but_whose_answers_were_lost_while_cancelled_frees_the_key(
    store: DynamoDBStore,
) -> None:
    """Every claim request lands in DynamoDB (sent by a side client) and its answer is lost
    (a 500 stands in); the task is cancelled meanwhile. The claim is released on the way out,
    fenced on our token: the next call runs."""
    runs: list[str] = []
    side = store.client  # thread-safe: sent from within the hook, before the request

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    sending = threading.local()

    def land_then_lose(kwargs: dict[str, Any]) -> AWSResponse | None:
        if getattr(sending, "on", False):
            return None
        request = kwargs["request"]
        body = json.loads(request.body)
        sending.on = True
        try:
            kwargs_put = {k: v for k, v in body.items()}
            with contextlib.suppress(side.exceptions.ConditionalCheckFailedException):
                side.put_item(**kwargs_put)
        finally:
            sending.on = False
        return error_response(500, "InternalServerError")

    hook = Hook(store, "PutItem", land_then_lose)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1"))
        while hook.seen < 1:
            await asyncio.sleep(0.001)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, StoreError):
            await task

    try:
        run(scenario())
    finally:
        hook.remove()
    assert runs == []
    status = status_of(store, pk_of(charge, order_id="o-1"))
    assert status is not Status.IN_PROGRESS
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]


def test_a_completion_failing_with_500s_while_cancelled_keeps_the_loop_ticking(
    store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion gets 500s for a while (its own backoff retries, sleeping with
    asyncio.sleep); the task is cancelled meanwhile; the loop never blocks (no request sent
    and no `time.sleep` on its thread, and a ticker on it never stalls long); the completion
    lands, then the cancel propagates; a retry replays. Which thread sends and sleeps is the
    assertion that holds on a loaded machine; the ticker's gaps only back it up."""
    runs: list[str] = []
    senders: list[int] = []
    sleepers: list[int] = []
    real_sleep = time.sleep

    def recorded_sleep(seconds: float) -> None:
        sleepers.append(threading.get_ident())
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", recorded_sleep)

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    deadline = {"until": 0.0}

    def fail_completion(kwargs: dict[str, Any]) -> AWSResponse | None:
        senders.append(threading.get_ident())
        if hook.seen == 1:
            deadline["until"] = time.monotonic() + 0.6
            return None  # the claim
        if time.monotonic() < deadline["until"]:
            return error_response(500, "InternalServerError")
        return None

    hook = Hook(store, "PutItem", fail_completion)
    gaps: list[float] = []

    async def ticker(stop: asyncio.Event) -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    loop_thread: list[int] = []

    async def scenario() -> None:
        loop_thread.append(threading.get_ident())
        stop = asyncio.Event()
        ticking = asyncio.create_task(ticker(stop))
        task = asyncio.create_task(charge("o-1"))
        while hook.seen < 2:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stop.set()
        await ticking

    try:
        run(scenario())
    finally:
        hook.remove()
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.COMPLETED
    assert run(charge("o-1")) == "charged"
    assert runs == ["o-1"]
    assert len(senders) > 2 and loop_thread[0] not in senders
    assert loop_thread[0] not in sleepers
    assert max(gaps) < 0.5  # 0.6 s of 500s: a loop blocked by the backoff stalls longer


# -- executors: saturated, single-threaded, entered from a worker ----------------------------


def test_a_default_executor_of_one_thread_serves_64_tasks_on_64_keys(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.001)
        return f"charged {order_id}"

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        calls = [charge(f"o-{index}") for index in range(64)]
        return await asyncio.wait_for(asyncio.gather(*calls), 60)

    assert run(scenario()) == [f"charged o-{index}" for index in range(64)]
    assert sorted(runs) == sorted(f"o-{index}" for index in range(64))


def test_a_single_worker_executor_with_a_cancel_in_flight_and_a_waiter_does_not_deadlock(
    store: DynamoDBStore,
) -> None:
    """One executor thread; a holder, a waiter polling it, and a third call cancelled while
    its claim is held: every store call queues on the one thread, nothing deadlocks."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.2)
        return f"charged {order_id}"

    async def scenario() -> list[Any]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        holder = asyncio.create_task(charge("o-1"))
        while not runs:
            await asyncio.sleep(0.005)
        waiter = asyncio.create_task(charge("o-1"))
        cancelled = asyncio.create_task(charge("o-2"))
        await asyncio.sleep(0)
        cancelled.cancel()
        outcomes = await asyncio.wait_for(
            asyncio.gather(holder, waiter, cancelled, return_exceptions=True), 30
        )
        return [type(o).__name__ if isinstance(o, BaseException) else o for o in outcomes]

    assert run(scenario()) == ["charged o-1", "charged o-1", "CancelledError"]
    assert status_of(store, pk_of(charge, order_id="o-2")) is not Status.IN_PROGRESS
    assert runs.count("o-1") == 1


def test_an_idempotent_coroutine_run_from_executor_work_in_its_own_loop(
    store: DynamoDBStore,
) -> None:
    """Work in the loop's executor runs `asyncio.run(charge(...))` (a loop of its own in the
    worker thread) while the outer loop's executor has a single thread that this work holds."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0)
        return f"charged {order_id}"

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
        work = [loop.run_in_executor(None, asyncio.run, charge("o-1")) for _ in range(3)]
        return list(await asyncio.wait_for(asyncio.gather(*work), 30))

    assert run(scenario()) == ["charged o-1"] * 3
    assert runs == ["o-1"]


def test_user_code_holding_every_executor_thread_delays_but_never_deadlocks(
    store: DynamoDBStore,
) -> None:
    """The user's own blocking work fills the default executor (6 threads on 2 cores) until
    an asyncio.Event they wait on is set by a task that awaits an idempotent coroutine."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    async def scenario() -> str:
        loop = asyncio.get_running_loop()
        executor = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        loop.set_default_executor(executor)
        done = threading.Event()
        blockers = [loop.run_in_executor(None, done.wait, 2.0) for _ in range(2)]
        result = await asyncio.wait_for(charge("o-1"), 30)
        done.set()
        await asyncio.gather(*blockers)
        return str(result)

    assert run(scenario()) == "charged"
    assert runs == ["o-1"]


# -- loops: several at once, one after another, uvloop ---------------------------------------


def test_one_key_from_two_loops_in_two_threads_runs_once(store: DynamoDBStore) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.3)
        return "charged"

    barrier = threading.Barrier(2)
    outcomes: list[Any] = []

    def thread() -> None:
        barrier.wait()
        outcomes.append(asyncio.run(charge("o-1")))

    threads = [threading.Thread(target=thread) for _ in range(2)]
    for each in threads:
        each.start()
    for each in threads:
        each.join(30)
    assert outcomes == ["charged", "charged"]
    assert runs == ["o-1"]


def test_asyncio_run_again_and_again_as_a_warm_container_does(store: DynamoDBStore) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store, on_in_progress="wait")
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0)
        return f"charged {order_id}"

    for index in range(20):
        assert run(charge(f"o-{index % 5}")) == f"charged o-{index % 5}"
    assert sorted(runs) == [f"o-{index}" for index in range(5)]


def test_under_uvloop_cancel_in_flight_and_a_timeout_free_the_key(store: DynamoDBStore) -> None:
    import uvloop

    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, pause: float) -> str:
        runs.append(order_id)
        await asyncio.sleep(pause)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.2)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1", 0))
        await entered(held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        slow = asyncio.create_task(charge("o-2", 5))
        while "o-2" not in runs:  # the time-out starts in the body, not during a slow claim
            await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(slow, 0.1)
        assert await charge("o-3", 0) == "charged"

    try:
        uvloop.run(scenario())
    finally:
        held.remove()
    assert status_of(store, pk_of(charge, order_id="o-1", pause=0)) is Status.RELEASED
    assert status_of(store, pk_of(charge, order_id="o-2", pause=0)) is Status.RELEASED
    assert uvloop.run(charge("o-1", 0)) == "charged"
    assert runs == ["o-2", "o-3", "o-1"]


def test_a_task_left_running_when_asyncio_run_ends_releases_its_key(
    store: DynamoDBStore,
) -> None:
    """Fire and forget: main returns while the call is in its body; asyncio.run cancels
    what is left before it shuts the executor down, and the key is released."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(10)
        return "charged"

    async def scenario() -> None:
        asyncio.get_running_loop().create_task(charge("o-1"))
        while not runs:
            await asyncio.sleep(0.005)

    run(scenario())
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.RELEASED


# -- nesting and context ----------------------------------------------------------------------


def test_nested_coroutines_each_keyed_enlist_into_their_own_execution(
    store: DynamoDBStore,
) -> None:
    business = create_table(store.client, f"{store.table_name}-nested", key="id")
    runs: list[str] = []

    def enlist(item_id: str) -> None:
        current_execution().add_write(
            {"Put": {"TableName": business, "Item": {"id": {"S": item_id}}}}
        )

    @idempotent_function(key="order_id", store=store)
    async def reserve(order_id: str) -> str:
        runs.append(f"reserve {order_id}")
        enlist(f"{order_id}-reserve")
        return "reserved"

    @idempotent_function(key="order_id", store=store)
    async def checkout(order_id: str) -> str:
        runs.append(f"checkout {order_id}")
        enlist(f"{order_id}-before")
        assert await reserve(f"{order_id}-r") == "reserved"
        enlist(f"{order_id}-after")  # the outer execution again
        return "done"

    assert run(checkout("o-1")) == "done"
    assert run(checkout("o-1")) == "done"
    items = store.client.scan(TableName=business, ConsistentRead=True)["Items"]
    assert sorted(item["id"]["S"] for item in items) == [
        "o-1-after",
        "o-1-before",
        "o-1-r-reserve",
    ]
    assert runs == ["checkout o-1", "reserve o-1-r"]


def test_no_execution_is_visible_in_the_caller_after_the_call_or_its_cancellation(
    store: DynamoDBStore,
) -> None:
    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, hang: bool) -> str:
        if hang:
            await asyncio.sleep(10)
        return "charged"

    async def scenario() -> None:
        await charge("o-1", False)
        with pytest.raises(NoActiveExecutionError):
            current_execution()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(charge("o-2", True), 0.05)
        with pytest.raises(NoActiveExecutionError):
            current_execution()
        try:
            async with asyncio.timeout(0.05):
                await charge("o-3", True)
        except TimeoutError:
            pass
        with pytest.raises(NoActiveExecutionError):
            current_execution()

    run(scenario())


def test_a_write_enlisted_by_a_task_that_outlives_the_call_is_refused_not_lost(
    store: DynamoDBStore,
) -> None:
    """A task the coroutine started but did not await enlists after the call completed. The
    execution is over: the write cannot commit with the result, so add_write must say so
    (an error), not accept a write that is never sent."""
    business = create_table(store.client, f"{store.table_name}-late", key="id")
    late: list[Any] = []
    go = threading.Event()

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        async def straggler() -> None:
            while not go.is_set():
                await asyncio.sleep(0.005)
            try:
                current_execution().add_write(
                    {"Put": {"TableName": business, "Item": {"id": {"S": "late"}}}}
                )
                late.append("accepted")
            except Exception as error:
                late.append(type(error).__name__)

        late.append(asyncio.get_running_loop().create_task(straggler()))
        return "charged"

    async def scenario() -> None:
        assert await charge("o-1") == "charged"
        go.set()
        await late[0]

    run(scenario())
    items = store.client.scan(TableName=business, ConsistentRead=True)["Items"]
    assert late[1] != "accepted" or items, "accepted, and never written: a lost write"
    assert late[1] == "NoActiveExecutionError"
    assert items == []


def test_a_write_enlisted_by_a_thread_after_a_plain_call_returned_is_refused(
    store: DynamoDBStore,
) -> None:
    """The sync path's form of the same hole: a thread given the call's context enlists
    after the call returned."""
    business = create_table(store.client, f"{store.table_name}-late-sync", key="id")
    started: list[threading.Thread] = []
    late: list[str] = []
    go = threading.Event()

    def enlist_late() -> None:
        go.wait(10)
        try:
            current_execution().add_write(
                {"Put": {"TableName": business, "Item": {"id": {"S": "late"}}}}
            )
            late.append("accepted")
        except Exception as error:
            late.append(type(error).__name__)

    @idempotent_function(key="order_id", store=store)
    def charge(order_id: str) -> str:
        thread = threading.Thread(target=contextvars.copy_context().run, args=(enlist_late,))
        thread.start()
        started.append(thread)
        return "charged"

    assert charge("o-1") == "charged"
    go.set()
    started[0].join(10)
    assert late == ["NoActiveExecutionError"]
    assert store.client.scan(TableName=business, ConsistentRead=True)["Items"] == []


def test_an_async_handler_run_by_asyncio_run_inside_a_sync_lambda_handler(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent(key="order_id", store=store)
    async def async_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["order_id"])
        lease = current_execution().lease_until_ms
        await asyncio.sleep(0)
        return {"ok": event["order_id"], "lease": lease is not None}

    def lambda_handler(event: dict[str, Any], context: Any) -> Any:
        return asyncio.run(async_handler(event, context))

    context = FakeContext(remaining_ms=20_000)
    first = lambda_handler({"order_id": "o-1"}, context)
    again = lambda_handler({"order_id": "o-1"}, context)
    assert first == again == {"ok": "o-1", "lease": True}
    assert runs == ["o-1"]


def test_a_sync_idempotent_handler_awaiting_an_idempotent_coroutine_through_asyncio_run(
    store: DynamoDBStore,
) -> None:
    """The coroutine inherits the handler's context (copied by asyncio.run's task): its
    lease follows the invocation; its enlisted write commits with its own result."""
    business = create_table(store.client, f"{store.table_name}-inner", key="id")
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> int | None:
        runs.append(f"charge {order_id}")
        current_execution().add_write(
            {"Put": {"TableName": business, "Item": {"id": {"S": order_id}}}}
        )
        return current_execution().lease_until_ms

    @idempotent(key="order_id", store=store)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(f"handler {event['order_id']}")
        lease = asyncio.run(charge(event["order_id"] + "-c"))
        return {"outer": current_execution().lease_until_ms, "inner": lease}

    context = FakeContext(remaining_ms=20_000)
    answer = handler({"order_id": "o-1"}, context)
    assert answer == handler({"order_id": "o-1"}, context)
    assert answer["inner"] is not None
    assert abs(answer["inner"] - answer["outer"]) < 2_000
    items = store.client.scan(TableName=business, ConsistentRead=True)["Items"]
    assert [item["id"]["S"] for item in items] == ["o-1-c"]
    assert runs == ["handler o-1", "charge o-1-c"]


# -- waiting for a holder that crashed -------------------------------------------------------


def test_a_waiter_takes_over_a_crashed_holders_lapsed_lease_and_the_zombie_is_fenced(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []
    zombie_go = threading.Event()

    def decorate(body: Any) -> Any:
        return idempotent_function(
            key="order_id",
            store=store,
            on_in_progress="wait",
            lease_seconds=1,
            clock_skew_seconds=0,
            cache_size=0,
            namespace="crash",
        )(body)

    @decorate
    def zombie(order_id: str) -> str:
        runs.append("zombie")
        zombie_go.wait(20)
        return "zombie's"

    @decorate
    async def waiter(order_id: str) -> str:
        runs.append("waiter")
        return "waiter's"

    zombie_outcome: list[Any] = []

    def run_zombie() -> None:
        try:
            zombie_outcome.append(zombie("o-1"))
        except Exception as error:
            zombie_outcome.append(error)

    thread = threading.Thread(target=run_zombie)
    thread.start()
    while not runs:
        time.sleep(0.005)
    assert run(asyncio.wait_for(waiter("o-1"), 20)) == "waiter's"
    zombie_go.set()
    thread.join(20)
    assert runs == ["zombie", "waiter"]
    assert run(waiter("o-1")) == "waiter's"  # the waiter's result stands
    assert runs == ["zombie", "waiter"]


# -- options: store_result, payload, disabled -------------------------------------------------


def test_store_result_refusing_releases_and_the_retry_runs(store: DynamoDBStore) -> None:
    runs: list[str] = []

    @idempotent_function(
        key="order_id", payload="order_id", store=store, store_result=lambda r: r != "later"
    )
    async def charge(order_id: str, answer: str) -> str:
        runs.append(answer)
        return answer

    assert run(charge("o-1", "later")) == "later"
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.RELEASED
    assert run(charge("o-1", "now")) == "now"
    assert run(charge("o-1", "again")) == "now"
    assert runs == ["later", "now"]


def test_payload_none_replays_a_retry_with_other_arguments(store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent_function(key="order_id", store=store, payload=None)
    async def charge(order_id: str, amount: int) -> int:
        runs.append(amount)
        return amount

    assert run(charge("o-1", 5)) == 5
    assert run(charge("o-1", 6)) == 5
    assert runs == [5]


def test_disabled_runs_each_time_and_enlisted_writes_still_commit(
    store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    business = create_table(store.client, f"{store.table_name}-off", key="id")
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str, item: str) -> str:
        runs.append(item)
        current_execution().add_write({"Put": {"TableName": business, "Item": {"id": {"S": item}}}})
        return item

    with pytest.warns(RuntimeWarning):
        assert run(charge("o-1", "a")) == "a"
    assert run(charge("o-1", "b")) == "b"
    items = store.client.scan(TableName=business, ConsistentRead=True)["Items"]
    assert sorted(item["id"]["S"] for item in items) == ["a", "b"]
    assert runs == ["a", "b"]


# -- logs: never the raw key or payload, on the cancellation paths too ------------------------


def test_cancellation_paths_log_no_raw_key_or_payload(store: DynamoDBStore, caplog: Any) -> None:
    secret_key = "order-7f3a-SECRET-KEY"
    secret_payload = "card-4111-SECRET-PAYLOAD"

    @idempotent_function(
        key="order_id", payload="[order_id, card]", store=store, on_in_progress="wait"
    )
    async def charge(order_id: str, card: str, pause: float) -> str:
        await asyncio.sleep(pause)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.2)

    async def scenario() -> None:
        task = asyncio.create_task(charge(secret_key, secret_payload, 0))
        await entered(held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(charge(secret_key + "2", secret_payload, 5), 0.1)
        holder = asyncio.create_task(charge(secret_key + "3", secret_payload, 0.5))
        await asyncio.sleep(0.1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(charge(secret_key + "3", secret_payload, 0), 0.2)
        await holder

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        try:
            run(scenario())
        finally:
            held.remove()
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert caplog.records
    assert secret_key not in text
    assert secret_payload not in text


# -- the sync path after the restructure ------------------------------------------------------


def test_sync_16_threads_on_one_key_run_once_and_all_get_the_result(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    def charge(order_id: str) -> str:
        runs.append(order_id)
        time.sleep(0.3)
        return "charged"

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(lambda _: charge("o-1"), range(16)))
    assert outcomes == ["charged"] * 16
    assert runs == ["o-1"]


def test_sync_16_threads_raise_policy_one_run(store: DynamoDBStore) -> None:
    runs: list[str] = []
    gate = threading.Event()

    @idempotent_function(key="order_id", store=store)
    def charge(order_id: str) -> str:
        runs.append(order_id)
        gate.wait(10)
        return "charged"

    def call(_: int) -> Any:
        try:
            return charge("o-1")
        except InProgressError as error:
            return type(error).__name__

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(call, index) for index in range(16)]
        while len([f for f in futures if f.done()]) < 15:
            time.sleep(0.01)
        gate.set()
        outcomes = [future.result() for future in futures]
    assert sorted(outcomes) == ["InProgressError"] * 15 + ["charged"]
    assert runs == ["o-1"]


# -- a coroutine closed (not awaited to its end) while its claim is in flight ----------------


def test_a_coroutine_closed_after_its_claim_won_but_before_it_resumed_frees_the_key(
    store: DynamoDBStore,
) -> None:
    """The claim has landed in its worker thread; the coroutine, not yet resumed, is closed
    (its task dropped). The promise: a closed coroutine releases its key in place."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    async def start_then_close() -> None:
        coroutine = charge("o-1")
        step = coroutine.send(None)  # up to the claim's worker-thread step
        await asyncio.wait({step})  # the claim has landed; the coroutine is not resumed
        coroutine.close()

    run(start_then_close())
    assert runs == []
    assert status_of(store, pk_of(charge, order_id="o-1")) is not Status.IN_PROGRESS


def test_a_coroutine_closed_while_its_claim_is_held_in_the_worker_thread_frees_the_key(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.3)
    closing: list[BaseException | None] = []

    async def start_then_close() -> None:
        coroutine = charge("o-1")
        step = coroutine.send(None)
        await entered(held)
        try:
            coroutine.close()
            closing.append(None)
        except BaseException as error:  # what close() raised
            closing.append(error)
        await asyncio.wait({step}, timeout=5)
        await asyncio.sleep(0.1)

    try:
        run(start_then_close())
    finally:
        held.remove()
    assert runs == []
    assert closing == [None]  # close() raised "generator already executing" before the fix
    assert status_of(store, pk_of(charge, order_id="o-1")) is not Status.IN_PROGRESS


# -- replies: what a caller gets must not be what another caller changes ----------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_a_caller_mutating_its_result_does_not_change_the_next_replay(
    store: DynamoDBStore, flavour: str
) -> None:
    runs: list[str] = []

    def body(order_id: str) -> dict[str, Any]:
        runs.append(order_id)
        return {"items": ["a"]}

    async def async_body(order_id: str) -> dict[str, Any]:
        return body(order_id)

    protect = idempotent_function(key="order_id", store=store)
    charge = protect(body if flavour == "sync" else async_body)

    def call() -> Any:
        outcome = charge("o-1")
        return run(outcome) if flavour == "async" else outcome

    first = call()
    first["items"].append("mutated by caller 1")
    second = call()  # from the warm cache
    second["items"].append("mutated by caller 2")
    assert call() == {"items": ["a"]}
    assert runs == ["o-1"]


# -- lease extension and waiting caps from a coroutine ----------------------------------------


def test_extend_lease_through_to_thread_and_a_heartbeat_keep_a_waiter_waiting(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(
        key="order_id",
        store=store,
        lease_seconds=1,
        clock_skew_seconds=0,
        on_in_progress="wait",
        cache_size=0,
    )
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.to_thread(current_execution().extend_lease, 2)
        with current_execution().heartbeat(every=0.3, extend_by=2):
            await asyncio.sleep(2.5)  # past the first lease and past the to_thread extension
        return "charged"

    async def scenario() -> list[str]:
        holder = asyncio.create_task(charge("o-1"))
        while not runs:
            await asyncio.sleep(0.005)
        waiter = asyncio.create_task(charge("o-1"))
        return list(await asyncio.gather(holder, waiter))

    assert run(scenario()) == ["charged", "charged"]
    assert runs == ["o-1"]


def test_max_wait_seconds_caps_an_async_waiter_with_in_progress(store: DynamoDBStore) -> None:
    runs: list[str] = []

    @idempotent_function(
        key="order_id", store=store, on_in_progress="wait", max_wait_seconds=0.3, cache_size=0
    )
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(1.5)
        return "charged"

    async def scenario() -> tuple[Any, float]:
        holder = asyncio.create_task(charge("o-1"))
        while not runs:
            await asyncio.sleep(0.005)
        started = time.perf_counter()
        with pytest.raises(InProgressError):
            await charge("o-1")
        waited = time.perf_counter() - started
        return await holder, waited

    result, waited = run(scenario())
    assert result == "charged"
    assert waited < 1.2
    assert runs == ["o-1"]


# -- a cold container: the first gather builds the store's client from many worker threads -----


def test_a_cold_store_first_used_by_16_tasks_at_once_builds_one_client_and_serves_all(
    store: DynamoDBStore, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module-level DynamoDBStore() in a cold container, first used by a gather of 16
    tasks: each claim runs in its own worker thread, and each asks the store for its client
    at once. boto3 builds clients unsafely from several threads (its default session too),
    so the store must build its client once; every call must be served."""
    import boto3

    real_client = boto3.client
    for trial in range(4):
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
        cold = DynamoDBStore(
            store.table_name, endpoint_url=dynamodb_local_endpoint, region_name="us-east-1"
        )
        built: list[int] = []

        def counting_client(*args: Any, built: list[int] = built, **kwargs: Any) -> Any:
            built.append(threading.get_ident())
            return real_client(*args, **kwargs)

        monkeypatch.setattr(boto3, "client", counting_client)

        @idempotent_function(key="order_id", store=cold, namespace=f"cold-{trial}")
        async def charge(order_id: str) -> str:
            return f"charged {order_id}"

        async def scenario() -> list[Any]:
            calls = (charge(f"o-{index}") for index in range(16))
            return await asyncio.gather(*calls, return_exceptions=True)

        outcomes = run(scenario())
        assert outcomes == [f"charged o-{index}" for index in range(16)], trial
        assert len(built) == 1, (trial, len(built))


# -- more cancellation points: the release, a waiter's poll, a nested call's completion --------


def test_a_cancel_while_the_key_is_released_after_an_error_waits_for_the_release(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(key="order_id", payload="order_id", store=store)
    async def charge(order_id: str, fail: bool) -> str:
        runs.append(order_id)
        if fail:
            raise ValueError("declined")
        return "charged"

    held = HeldCall(store, "PutItem", seconds=0.3, nth=2)  # the release (tombstone)

    async def scenario() -> None:
        task = asyncio.create_task(charge("o-1", True))
        await entered(held)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done()  # the release is not abandoned
        with pytest.raises((asyncio.CancelledError, ValueError)):
            await task

    try:
        run(scenario())
    finally:
        held.remove()
    assert status_of(store, pk_of(charge, order_id="o-1", fail=True)) is Status.RELEASED
    assert charge.idempotency.stats["released"] == 1  # type: ignore[attr-defined]


def test_a_waiter_cancelled_while_its_poll_is_in_flight_leaves_the_holder_alone(
    store: DynamoDBStore,
) -> None:
    runs: list[str] = []

    @idempotent_function(
        key="order_id", payload="order_id", store=store, on_in_progress="wait", cache_size=0
    )
    async def charge(order_id: str, release: Any) -> str:
        runs.append(order_id)
        await release.wait()
        return "charged"

    async def scenario() -> str:
        release = asyncio.Event()
        holder = asyncio.create_task(charge("o-1", release))
        while not runs:
            await asyncio.sleep(0.005)
        held = HeldCall(store, "GetItem", seconds=0.3)
        try:
            waiter = asyncio.create_task(charge("o-1", release))
            await asyncio.wait_for(entered(held), 10)
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
        finally:
            held.remove()
        release.set()
        return await holder

    assert run(scenario()) == "charged"
    assert status_of(store, pk_of(charge, order_id="o-1", release=None)) is Status.COMPLETED
    assert runs == ["o-1"]


def test_an_outer_call_cancelled_while_a_nested_call_stores_its_result(
    store: DynamoDBStore,
) -> None:
    """The inner call's completion is held; the outer task is cancelled: the inner completes
    (its effect happened), the outer releases its key; the retry runs the outer body again
    and the inner replays."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def inner(order_id: str) -> str:
        runs.append(f"inner {order_id}")
        return "reserved"

    @idempotent_function(key="order_id", store=store)
    async def outer(order_id: str) -> str:
        runs.append(f"outer {order_id}")
        return await inner(f"{order_id}-i")

    held = HeldCall(store, "PutItem", seconds=0.3, nth=3)  # outer claim, inner claim, inner done

    async def scenario() -> None:
        task = asyncio.create_task(outer("o-1"))
        await entered(held)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        run(scenario())
    finally:
        held.remove()
    assert status_of(store, pk_of(inner, order_id="o-1-i")) is Status.COMPLETED
    assert status_of(store, pk_of(outer, order_id="o-1")) is Status.RELEASED
    assert run(outer("o-1")) == "reserved"
    assert runs == ["outer o-1", "inner o-1-i", "outer o-1"]


def test_waiters_get_a_chunked_result_read_back_off_the_loop(store: DynamoDBStore) -> None:
    """A 600 KB result goes to chunk items; eight waiters replay it whole (a BatchGetItem
    each, in a worker thread)."""
    runs: list[str] = []
    big = {"rows": ["x" * 1000 for _ in range(600)]}

    @idempotent_function(key="order_id", store=store, on_in_progress="wait", cache_size=0)
    async def export(order_id: str) -> dict[str, Any]:
        runs.append(order_id)
        await asyncio.sleep(0.3)
        return big

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(*(export("o-1") for _ in range(8))))

    assert run(scenario()) == [big] * 8
    assert run(export("o-1")) == big
    assert runs == ["o-1"]


# -- the result after the coroutine returned: encoded off the loop, and closed mid-completion --


def test_the_stored_result_is_what_the_coroutine_returned_though_other_tasks_change_it_later(
    store: DynamoDBStore,
) -> None:
    """asyncio code relies on nothing changing between two awaits. The coroutine returns a
    dict that other tasks on the loop keep changing afterwards (a shared state, a cache).
    The stored result must be the dict as it was returned, not a torn copy read in a worker
    thread while the loop changed it (or a 'dictionary changed size' error)."""
    runs: list[str] = []
    state: dict[str, Any] = {f"k{index}": (index, b"x") for index in range(20_000)}
    returned: list[dict[str, Any]] = []

    @idempotent_function(key="order_id", store=store, cache_size=0)
    async def snapshot(order_id: str) -> dict[str, Any]:
        runs.append(order_id)
        returned.append(dict(state))  # what it returns, as it returns it
        return state

    async def churn(stop: asyncio.Event) -> None:
        tick = 0
        while not stop.is_set():
            tick += 1
            state[f"new{tick}"] = (tick, b"y")
            state.pop(f"k{tick}", None)
            await asyncio.sleep(0)

    async def scenario() -> Any:
        stop = asyncio.Event()
        churning = asyncio.create_task(churn(stop))
        await asyncio.sleep(0)
        try:
            return await snapshot("o-1")
        finally:
            stop.set()
            await churning

    outcome = run(scenario())
    assert outcome is state
    assert run(snapshot("o-1")) == returned[0]
    assert runs == ["o-1"]


def test_a_coroutine_closed_while_its_completion_backs_off_still_completes(
    store: DynamoDBStore,
) -> None:
    """The completion's first attempts get 500s (not applied), so it backs off; the coroutine
    is closed meanwhile. The effect happened: the key must complete (or at least never stay
    IN_PROGRESS), not be abandoned between two attempts."""
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    def refuse_completion(kwargs: dict[str, Any]) -> AWSResponse | None:
        if hook.seen == 1:
            return None  # the claim
        return error_response(500, "InternalServerError") if hook.seen <= 5 else None

    hook = Hook(store, "PutItem", refuse_completion)

    async def start_then_close() -> None:
        coroutine = charge("o-1")
        step = coroutine.send(None)
        while not runs or hook.seen < 2:
            await asyncio.wait({step})
            step = coroutine.send(None)
        await asyncio.sleep(0.5)  # the first completion attempt failed: it is backing off
        coroutine.close()

    try:
        run(start_then_close())
        time.sleep(1)
    finally:
        hook.remove()
    assert runs == ["o-1"]
    assert status_of(store, pk_of(charge, order_id="o-1")) is Status.COMPLETED


# -- a property: a cancel at a random moment, with a random store fault -----------------------

FAULTS = ["none", "claim throttled once", "completion 500 twice", "release 500 once", "slow claim"]


@given(
    delay_ms=st.floats(min_value=0, max_value=40),
    fault=st.sampled_from(FAULTS),
    fail=st.booleans(),
)
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_cancel_at_a_random_moment_with_a_random_fault_never_locks_the_key(
    store: DynamoDBStore, delay_ms: float, fault: str, fail: bool
) -> None:
    """Whatever the moment and the fault: once the cancelled task is done its key is never
    IN_PROGRESS, a completed key replays without running again, and a retry gets the answer."""
    order_id = f"o-{uuid.uuid4().hex}"
    runs: list[str] = []

    @idempotent_function(key="order_id", payload="order_id", store=store, cache_size=0)
    async def charge(order_id: str, fail: bool) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.002)
        if fail:
            raise ValueError("declined")
        return "charged"

    def respond(_: dict[str, Any]) -> AWSResponse | None:
        nth = hook.seen
        if fault == "claim throttled once" and nth == 1:
            return error_response(400, "ThrottlingException")
        if fault == "completion 500 twice" and not fail and nth in (2, 3):
            return error_response(500, "InternalServerError")
        if fault == "release 500 once" and fail and nth == 2:
            return error_response(500, "InternalServerError")
        if fault == "slow claim" and nth == 1:
            time.sleep(0.02)
        return None

    hook = Hook(store, "PutItem", respond)

    async def scenario() -> None:
        task = asyncio.create_task(charge(order_id, fail))
        await asyncio.sleep(delay_ms / 1000)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ValueError, StoreError):
            await task

    try:
        run(scenario())
    finally:
        hook.remove()
    status = status_of(store, pk_of(charge, order_id=order_id, fail=False))
    assert status is not Status.IN_PROGRESS
    ran = len(runs)
    assert run(charge(order_id, False)) == "charged"
    if status is Status.COMPLETED:
        assert len(runs) == ran == 1
    assert run(charge(order_id, False)) == "charged"


# -- the caller's own callbacks run where the caller runs --------------------------------------


def test_on_replay_runs_on_the_loops_thread_for_store_waiter_and_cache_replays(
    store: DynamoDBStore,
) -> None:
    """`on_replay` is the caller's code: under a coroutine it may use the running loop (a
    plain function's runs in the caller's thread). Before the fix, a replay from the store
    (a refused claim, a waiter's poll) ran it in the worker thread of the store step:
    `asyncio.get_running_loop()` there raised RuntimeError('no running event loop')."""
    runs: list[str] = []
    seen: list[tuple[str, bool]] = []

    def on_replay(result: Any, info: Any) -> Any:
        asyncio.get_running_loop()  # raises off the loop
        seen.append((info.source, threading.current_thread() is threading.main_thread()))
        return {"replayed": result}

    def decorate(cache_size: int) -> Any:
        return idempotent_function(
            key="order_id",
            store=store,
            on_in_progress="wait",
            on_replay=on_replay,
            namespace="on-replay",
            cache_size=cache_size,
        )

    async def body(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(0.3)
        return "charged"

    charge, uncached = decorate(256)(body), decorate(0)(body)

    async def scenario() -> list[Any]:
        return list(await asyncio.gather(charge("o-1"), charge("o-1")))  # one waits

    assert sorted(map(str, run(scenario()))) == ["charged", "{'replayed': 'charged'}"]
    assert run(uncached("o-1")) == {"replayed": "charged"}  # from the store
    assert run(charge("o-1")) == {"replayed": "charged"}  # from the warm cache
    assert [source for source, _ in seen] == ["store", "store", "cache"]
    assert all(on_main for _, on_main in seen)
    assert runs == ["o-1"]
