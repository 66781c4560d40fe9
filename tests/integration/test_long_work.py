"""Long work, held once, on DynamoDB Local (issue 31): a lease measured when its claim is
sent (however long an async claim queued for a worker, or a cold client took to build), a
heartbeat that can never stop silently, lease extensions that cannot be dishonoured, a
completion window that follows the work, and deferred objects nested in a result. Every
test counts how many times the protected body ran."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pydantic
import pytest
from botocore.exceptions import ReadTimeoutError

from lambda_idempotency import (
    ConfigurationError,
    DeferredResultError,
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    ResultNotSerializableError,
    StoreError,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.dynamodb import client as client_module
from lambda_idempotency._stores.record import Status
from tests.conftest import FakeClock, FakeContext
from tests.long_work import HEARTBEAT, one_attempt, record_of, refused

pytestmark = pytest.mark.dynamodb_local


def test_an_async_claim_queued_behind_the_handlers_blocking_work_leases_its_whole_invocation(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The issue's scenario in small: 12 s of invocation left, the loop's 4 workers held
    4 s by the handler's own blocking work while the claim queues; a second container's
    caller at 10.5 s must find the key held (it lapsed at 8 s + 2 s before the fix)."""
    effects: list[str] = []
    refused: list[InProgressError] = []
    leases: list[tuple[int, int, int]] = []

    @idempotent(store=store, key="id", payload="id", clock=clock, cache_size=0)
    async def charge(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate charged")
            return "duplicate"
        claimed = record_of(store, charge, "c-1")  # the whole invocation: no less, no more
        leases.append((claimed.claimed_at, claimed.lease_until, context.deadline_ms))
        clock.advance(6.5)  # the body runs on: 10.5 s after the invocation began
        try:
            await charge({"id": "c-1", "duplicate": True}, FakeContext(60_000, clock=clock))
        except InProgressError as exc:
            refused.append(exc)
        effects.append("charged")
        return "charged"

    async def main() -> str:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(4))
        gate = threading.Event()
        busy = [loop.run_in_executor(None, gate.wait) for _ in range(4)]
        call = asyncio.ensure_future(charge({"id": "c-1"}, FakeContext(12_000, clock=clock)))
        await asyncio.sleep(0.05)  # the call started, read the clock, and its claim queued
        clock.advance(4)  # the handler's blocking work holds every worker for 4 s
        gate.set()
        await asyncio.gather(*busy)
        result = await call
        return result

    assert asyncio.run(main()) == "charged"
    assert effects == ["charged"]
    assert len(refused) == 1
    ((claimed_at, lease_until, deadline),) = leases
    assert lease_until == deadline and claimed_at == deadline - 8000  # sent 4 s late
    assert record_of(store, charge, "c-1").status is Status.COMPLETED


@pytest.mark.parametrize("with_context", [False, True])
def test_a_claim_sent_after_a_slow_client_build_leases_from_when_it_is_sent(
    store: DynamoDBStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    with_context: bool,
) -> None:
    """The sync path: a cold start's client build (4 s under CPU throttling) comes between
    the call's first clock read and its claim. The lease (12 s, or the invocation's 16 s
    left) still runs from the claim as sent: a caller 10.5 s into the body is refused."""
    effects: list[str] = []
    refused: list[InProgressError] = []
    leases: list[tuple[int, int]] = []

    def slow_client(endpoint_url: Any, region_name: Any) -> Any:
        clock.advance(4)
        return store.client

    monkeypatch.setattr(client_module, "default_client", slow_client)
    cold = DynamoDBStore(store.table_name)
    lease = None if with_context else 12

    @idempotent(store=cold, key="id", payload="id", lease_seconds=lease, clock=clock, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate charged")
            return "duplicate"
        claimed = record_of(cold, charge, "c-1")
        leases.append((claimed.claimed_at, claimed.lease_until))
        clock.advance(10.5)  # within the lease from the claim, plus the 2 s allowance
        try:
            charge({"id": "c-1", "duplicate": True}, FakeContext(60_000, clock=clock))
        except InProgressError as exc:
            refused.append(exc)
        effects.append("charged")
        return "charged"

    context = FakeContext(16_000, clock=clock) if with_context else None
    began = clock.now_ms()
    assert charge({"id": "c-1"}, context) == "charged"
    assert effects == ["charged"]
    assert len(refused) == 1
    # claimed when sent, 4 s in; leased to the invocation's deadline, or 12 s from the claim
    assert leases == [(began + 4000, began + 16_000)]


# -- 4. lease extensions the lease can honour; a heartbeat never stops silently -------------


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 0, -1, 31_622_401, "60", True])
def test_extend_lease_refuses_a_duration_it_cannot_honour_at_the_call(
    store: DynamoDBStore, seconds: Any
) -> None:
    runs: list[str] = []

    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append("ran")
        current_execution().extend_lease(seconds)
        return "done"

    with pytest.raises(ConfigurationError, match=r"extend_lease: seconds .* at most 31622400"):
        export({"id": "x-1"}, None)
    assert runs == ["ran"]
    assert record_of(store, export, "x-1").status is Status.RELEASED  # the retry runs


@pytest.mark.parametrize(
    ("every", "extend_by", "named"),
    [
        (0.3, float("inf"), "extend_by"),
        (0.3, float("nan"), "extend_by"),
        (0.3, 31_622_401, "extend_by"),
        (float("nan"), 30, "every"),
        (0, 30, "every"),
        (0.001, 30, "every"),
        (-1, 30, "every"),
        ("1", 30, "every"),
        (30, 30, "every < extend_by"),
    ],
)
def test_a_heartbeat_refuses_values_it_cannot_honour_and_nothing_completes(
    store: DynamoDBStore, every: Any, extend_by: Any, named: str
) -> None:
    """`heartbeat(every=0.3, extend_by=inf)` used to start, kill its thread at the first
    beat and let the lease lapse silently: refused at the `with`, the key released."""
    runs: list[str] = []

    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append("ran")
        with current_execution().heartbeat(every=every, extend_by=extend_by):
            runs.append("block ran")
        return "done"

    with pytest.raises(ConfigurationError, match=named):
        export({"id": "h-1"}, None)
    assert runs == ["ran"]
    assert record_of(store, export, "h-1").status is Status.RELEASED


def test_extend_lease_never_shortens_a_longer_lease(store: DynamoDBStore, clock: FakeClock) -> None:
    """`extend_lease(1)` under a 10-minute lease: the lease stays, a caller 5 s later (and
    4 minutes later) is refused, and the extension returns the lease as it stands."""
    effects: list[str] = []
    refused_calls: list[InProgressError] = []

    @idempotent(store=store, key="id", payload="id", lease_seconds=600, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate ran")
            return "duplicate"
        execution = current_execution()
        leased = execution.lease_until_ms
        assert execution.extend_lease(1) == leased
        assert execution.lease_until_ms == leased
        assert record_of(store, export, "s-1").lease_until == leased
        for seconds in (5, 240):
            clock.advance(seconds)
            try:
                export({"id": "s-1", "duplicate": True}, None)
            except InProgressError as exc:
                refused_calls.append(exc)
        effects.append("exported")
        return "done"

    assert export({"id": "s-1"}, None) == "done"
    assert effects == ["exported"]
    assert [exc.retry_after for exc in refused_calls] == [600 - 5 + 2 + 1, 600 - 245 + 2 + 1]


def _kill_by_exception(client: Any, hit: threading.Event, gate: threading.Event) -> None:
    def hook(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT:
            hit.set()
            raise RuntimeError("a fault in the heartbeat's thread")

    client.meta.events.register("before-send.dynamodb", hook)


def _kill_by_refused_write(client: Any, hit: threading.Event, gate: threading.Event) -> Any:
    def hook(request: Any, **_: Any) -> Any:
        if threading.current_thread().name == HEARTBEAT:
            hit.set()
            return refused(request, "AccessDeniedException")
        return None

    client.meta.events.register("before-send.dynamodb", hook)


def _kill_by_throttling(client: Any, hit: threading.Event, gate: threading.Event) -> Any:
    def hook(request: Any, **_: Any) -> Any:
        if threading.current_thread().name == HEARTBEAT:
            hit.set()
            return refused(request, "ProvisionedThroughputExceededException")
        return None

    client.meta.events.register("before-send.dynamodb", hook)


def _kill_by_lost_answers(client: Any, hit: threading.Event, gate: threading.Event) -> None:
    """Every beat lands (sent by another client) and its answer is lost."""
    sender = boto3.client(
        "dynamodb",
        endpoint_url=client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )

    def hook(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT:
            sender.put_item(**json.loads(request.body))
            hit.set()
            raise ReadTimeoutError(endpoint_url=request.url)

    client.meta.events.register("before-send.dynamodb", hook)


def _kill_the_thread(client: Any, hit: threading.Event, gate: threading.Event) -> None:
    (beating,) = [thread for thread in threading.enumerate() if thread.name == HEARTBEAT]
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(beating.ident or 0), ctypes.py_object(SystemExit)
    )
    beating.join(10)
    assert not beating.is_alive()
    hit.set()


def _beats_too_far_apart(client: Any, hit: threading.Event, gate: threading.Event) -> None:
    hit.set()  # every=20 s of real time: no beat comes before the block ends


def _taken_over(client: Any, hit: threading.Event, gate: threading.Event) -> None:
    """The beats are held until the takeover claimed: then one is refused."""

    def hook(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT:
            gate.wait(10)

    client.meta.events.register("before-send.dynamodb", hook)
    hit.set()


KILLS: dict[str, tuple[Callable[[Any, threading.Event, threading.Event], Any], type]] = {
    "an exception in its thread": (_kill_by_exception, LeaseLostError),
    "a refused write": (_kill_by_refused_write, StoreError),
    "throttled at every beat": (_kill_by_throttling, LeaseLostError),
    "every answer lost": (_kill_by_lost_answers, LeaseLostError),
    "its thread killed": (_kill_the_thread, LeaseLostError),
    "beats further apart than the lease": (_beats_too_far_apart, LeaseLostError),
    "the key taken over": (_taken_over, LeaseLostError),
}


@pytest.mark.parametrize("kill", list(KILLS))
def test_a_heartbeat_killed_any_way_ends_the_call_with_an_error_and_completes_nothing(
    store: DynamoDBStore, clock: FakeClock, kill: str
) -> None:
    """The beat is killed, the lease (10 s) lapses on the clock, another caller takes the
    key over and runs. The holder's block, and its call, end with LeaseLostError (or the
    StoreError that stopped the beats): its own result is never stored, even if the block
    ends normally or the handler swallows the error; the new holder's result stands."""
    fault, expected = KILLS[kill]
    store = one_attempt(store)
    effects: list[str] = []
    swallowed: list[BaseException] = []
    hit, gate = threading.Event(), threading.Event()
    every = {"beats further apart than the lease": 20.0, "the key taken over": 0.3}.get(kill, 0.05)

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("takeover"):
            effects.append("takeover exported")
            return "theirs"
        if kill != "its thread killed":
            fault(store.client, hit, gate)  # armed before the first beat can land
        try:
            with current_execution().heartbeat(every=every, extend_by=30):
                if kill == "its thread killed":
                    fault(store.client, hit, gate)
                assert hit.wait(10)
                clock.advance(15)  # past the lease and the allowance: held only by beats
                # refused if a beat landed after all (its answer lost): the key was held
                with contextlib.suppress(InProgressError):
                    export({"id": "k-1", "takeover": True}, None)
                gate.set()
                threading.Event().wait(0.2)  # real time for the beats to find out
                effects.append("holder exported")
        except (LeaseLostError, StoreError) as exc:
            swallowed.append(exc)  # a handler that swallows the error still stores nothing
        return "ours"

    with pytest.raises(expected):
        export({"id": "k-1"}, None)
    assert len(swallowed) == 1 and isinstance(swallowed[0], expected)
    # ours was never stored: the key answers the takeover's result, which ran once
    assert export({"id": "k-1", "takeover": True}, None) == "theirs"
    assert effects.count("takeover exported") == 1
    assert export({"id": "k-1", "takeover": True}, None) == "theirs"
    assert effects.count("takeover exported") == 1


def test_a_coroutines_heartbeat_refused_ends_its_call_with_the_error_even_if_caught(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The async path: beats DynamoDB refuses, a coroutine that catches the error and
    returns; the call still ends with the StoreError, and its result is never stored."""
    store = one_attempt(store)
    effects: list[str] = []
    caught: list[BaseException] = []
    hit, gate = threading.Event(), threading.Event()
    _kill_by_refused_write(store.client, hit, gate)

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        try:
            with current_execution().heartbeat(every=0.05, extend_by=30):
                # until the refused beat has stopped the heartbeat (not merely until it is
                # sent: a busy machine may not have handled the refusal yet), 10 s at most
                for _ in range(1000):
                    if hit.is_set() and not any(
                        t.name == HEARTBEAT and t.is_alive() for t in threading.enumerate()
                    ):
                        break
                    await asyncio.sleep(0.01)
        except StoreError as exc:
            caught.append(exc)
        return "ours"

    async def scenario() -> None:
        with pytest.raises(StoreError):
            await export({"id": "a-1"}, None)

    asyncio.run(scenario())
    assert len(caught) == 1
    assert record_of(store, export, "a-1").status is Status.RELEASED
    assert effects == ["exported"]


def test_a_beat_in_flight_when_a_coroutines_block_ends_is_awaited_off_the_loop_and_counts(
    store: DynamoDBStore,
) -> None:
    """A coroutine's heartbeat block ends while a beat is in flight: the loop is not blocked
    waiting for it (the call waits for it in a worker thread before completing), and when
    that beat is refused the call still ends with the StoreError and stores nothing."""
    store = one_attempt(store)
    effects: list[str] = []
    in_flight, block_ended = threading.Event(), threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        if threading.current_thread().name == HEARTBEAT:
            in_flight.set()
            block_ended.wait(5)
            threading.Event().wait(0.5)  # still in flight well after the block ended
            return refused(request, "AccessDeniedException")
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        with current_execution().heartbeat(every=0.05, extend_by=30):
            while not in_flight.is_set():
                await asyncio.sleep(0.01)
            block_ended.set()
        effects.append("after the block")  # the block itself ended without an error
        return "ours"

    async def scenario() -> float:
        gaps: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            last = asyncio.get_running_loop().time()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = asyncio.get_running_loop().time()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        with pytest.raises(StoreError):
            await export({"id": "a-2"}, None)
        done.set()
        await ticker
        return max(gaps)

    assert asyncio.run(scenario()) < 0.3
    assert effects == ["exported", "after the block"]
    assert record_of(store, export, "a-2").status is Status.RELEASED


# -- 5. the completion's retry window follows the work ------------------------------------


@pytest.mark.parametrize("with_context", [False, True])
def test_a_throttled_completion_after_30_s_of_extended_work_is_retried_and_completes(
    store: DynamoDBStore, clock: FakeClock, with_context: bool
) -> None:
    """A 30 s body holds its key with `extend_lease` (10 s lease), then its completion is
    throttled once: retried within the window that runs from the end of the work (10 s
    without a context, as documented), so the key completes and the body ran once."""
    store = one_attempt(store)
    effects: list[str] = []
    throttle_next = threading.Event()

    def throttle(request: Any, **_: Any) -> Any:
        if throttle_next.is_set():
            throttle_next.clear()
            return refused(request, "ProvisionedThroughputExceededException")
        return None

    store.client.meta.events.register("before-send.dynamodb", throttle)

    @idempotent(store=store, key="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        for _ in range(3):
            clock.advance(9)
            current_execution().extend_lease(15)
        clock.advance(3)
        throttle_next.set()  # the completion's first attempt
        return "done"

    context = FakeContext(60_000, clock=clock) if with_context else None
    assert export({"id": "w-1"}, context) == "done"
    assert not throttle_next.is_set()
    assert record_of(store, export, "w-1").status is Status.COMPLETED
    clock.advance(60)  # past every lease: only a completed key keeps the body from running
    assert export({"id": "w-1"}, None) == "done"
    assert effects == ["exported"]


# -- 6. a forgotten `await` inside the result ----------------------------------------------


@dataclasses.dataclass
class Receipt:
    order: str
    charge: Any


class ReceiptModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    order: str
    charge: Any


NESTINGS: dict[str, Callable[[Any], Any]] = {
    "in a dict": lambda deferred: {"charge": deferred},
    "in a list in a dict": lambda deferred: {"charges": [1, deferred]},
    "in a tuple": lambda deferred: ("o-1", deferred),
    "in a set": lambda deferred: {"o-1", deferred},
    "as a dict key": lambda deferred: {deferred: "o-1"},
    "in a dataclass": lambda deferred: Receipt("o-1", deferred),
    "in a pydantic model": lambda deferred: ReceiptModel(order="o-1", charge=deferred),
    "deep down": lambda deferred: {"a": [{"b": ({"c": [deferred]},)}]},
}


async def charge_card(order: str, effects: list[str]) -> str:
    effects.append(f"charged {order}")
    return "charged"


def charged_items(order: str, effects: list[str]) -> Any:
    effects.append(f"charged {order}")
    yield "charged"


@pytest.mark.parametrize("deferring", ["a coroutine", "a generator"])
@pytest.mark.parametrize("nesting", list(NESTINGS))
def test_a_deferred_object_nested_in_a_result_releases_the_key_and_the_fixed_retry_runs(
    store: DynamoDBStore, nesting: str, deferring: str
) -> None:
    """`return {"charge": charge(order)}` with `charge` a coroutine function: the charge never
    happened, so the key must not complete with a "not stored" marker (every retry got
    ResultNotSerializableError for the TTL, even once the code was fixed)."""
    effects: list[str] = []
    made: list[Any] = []
    fixed = threading.Event()

    @idempotent(store=store, key="id", cache_size=0)
    def checkout(event: dict[str, Any], context: Any) -> Any:
        effects.append("checkout ran")
        if fixed.is_set():
            return {"charge": "charged"}
        maker = charge_card if deferring == "a coroutine" else charged_items
        made.append(maker(event["id"], effects))
        return NESTINGS[nesting](made[-1])

    with pytest.raises(DeferredResultError, match=deferring) as caught:
        checkout({"id": "o-1"}, None)
    assert caught.value.key_hash is not None
    (deferred,) = made
    closed = deferred.cr_frame if deferring == "a coroutine" else deferred.gi_frame
    assert closed is None  # closed: it never runs, and never warns it was not awaited
    assert record_of(store, checkout, "o-1").status is Status.RELEASED
    fixed.set()
    assert checkout({"id": "o-1"}, None) == {"charge": "charged"}
    assert checkout({"id": "o-1"}, None) == {"charge": "charged"}  # replayed
    assert effects == ["checkout ran", "checkout ran"]  # never "charged o-1" by a dropped one


def test_a_forgotten_await_inside_an_async_handlers_result_releases_its_key(
    store: DynamoDBStore,
) -> None:
    """The same from a coroutine: a coroutine and a task nested in the result are closed and
    cancelled on the loop, the key is released, the fixed retry runs once."""
    effects: list[str] = []
    made: list[Any] = []
    fixed = threading.Event()

    @idempotent(store=store, key="id", cache_size=0)
    async def checkout(event: dict[str, Any], context: Any) -> Any:
        effects.append("checkout ran")
        if fixed.is_set():
            return {"charge": await charge_card(event["id"], effects)}
        coroutine = charge_card(event["id"], effects)
        task = asyncio.ensure_future(asyncio.sleep(60))
        made.extend([coroutine, task])
        return {"charge": coroutine, "receipt": [task]}

    async def scenario() -> Any:
        with pytest.raises(DeferredResultError, match=r"coroutine|awaitable"):
            await checkout({"id": "o-2"}, None)
        coroutine, task = made
        await asyncio.sleep(0)
        assert coroutine.cr_frame is None and task.cancelled()
        assert record_of(store, checkout, "o-2").status is Status.RELEASED
        fixed.set()
        return [await checkout({"id": "o-2"}, None), await checkout({"id": "o-2"}, None)]

    assert asyncio.run(scenario()) == [{"charge": "charged"}] * 2
    assert effects == ["checkout ran", "checkout ran", "charged o-2"]


def test_a_result_that_cannot_be_stored_without_anything_deferred_still_completes(
    store: DynamoDBStore,
) -> None:
    """The look for deferred objects changes nothing else: an object JSON has no word for
    completes the key "not stored", and retries get ResultNotSerializableError."""
    effects: list[str] = []

    @idempotent(store=store, key="id", cache_size=0)
    def checkout(event: dict[str, Any], context: Any) -> Any:
        effects.append("ran")
        return {"charge": object(), "items": [Receipt("o-3", threading.Lock())]}

    checkout({"id": "o-3"}, None)
    with pytest.raises(ResultNotSerializableError):
        checkout({"id": "o-3"}, None)
    assert effects == ["ran"]
