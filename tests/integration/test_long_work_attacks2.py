"""Second round of attacks on long work: forced releases of a running holder, results that
cannot be stored holding something still to come, a durable run whose resumed claim fails,
async heartbeats. Each counts the effects (how many times the protected body ran)."""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import io
import itertools
import json
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ReadTimeoutError

from lambda_idempotency import (
    DeferredResultError,
    DynamoDBStore,
    LeaseLostError,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.record import Status
from tests.integration.test_durable import (
    Handler,
    Ledger,
    checkout,
    error_type,
    finish,
    record_key,
    ship,
    start,
)
from tests.integration.test_long_work_attacks import target
from tests.integration.test_long_work_breaks import force_release, release_cli
from tests.long_work import HEARTBEAT, Refusal, one_attempt, record_of

pytestmark = pytest.mark.dynamodb_local

NOTHING_TO_RELEASE = 4


def in_thread(call: Callable[[], Any]) -> Any:
    """Run `call` in another thread (another caller) and return what it returned/raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as exc:  # the caller's outcome, whatever it is
            out.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return out[0]


# -- 1. a running holder whose key an operator releases --------------------------------------


@pytest.mark.parametrize("holding", ["nothing", "heartbeat", "extend_lease"])
def test_a_caller_claiming_after_a_forced_release_owns_the_one_stored_result(
    store: DynamoDBStore, dynamodb_local_endpoint: str, holding: str
) -> None:
    """operations.md: after `--force`, "only a retry that claims the key before the holder
    completes runs alongside it"; "once another caller has claimed the key, the holder's next
    extension raises LeaseLostError and its completion is refused". So B runs (a second,
    documented effect), its result is the one stored, and C replays B's, never A's."""
    effects: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        who = event["who"]
        effects.append(who)
        if who != "a":
            return who
        execution = current_execution()
        beating = holding == "heartbeat"
        with execution.heartbeat(0.05, 30) if beating else contextlib.nullcontext():
            force_release(store, dynamodb_local_endpoint, execution.key_hash or "", "--force")
            assert in_thread(lambda: export({"id": key, "who": "b"}, None)) == "b"
            time.sleep(0.3)  # the next beats meet B's record
            if holding == "extend_lease":
                execution.extend_lease(60)
        return who

    key = f"r-1-{holding}"
    outcome = in_thread(lambda: export({"id": key, "who": "a"}, None))
    if holding == "nothing":
        assert outcome == "a"  # its effect happened; its completion was refused
    else:
        assert isinstance(outcome, LeaseLostError)
    assert export({"id": key, "who": "c"}, None) == "b"
    assert effects == ["a", "b"]


def test_extend_lease_after_a_forced_release_holds_nothing_and_the_holder_completes(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """operations.md: an extension that finds its own tombstone writes nothing (the key stays
    free) and is no lost lease; the holder completes over the tombstone, retries replay it.
    A second forced release in a row finds nothing to release (exit 4)."""
    effects: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        execution = current_execution()
        pk = execution.key_hash or ""
        force_release(store, dynamodb_local_endpoint, pk, "--force")
        before = execution.lease_until_ms
        assert execution.extend_lease(600) == before  # nothing written
        assert release_cli(store, dynamodb_local_endpoint, pk, "--force") == NOTHING_TO_RELEASE
        record = store.get(pk)
        assert record is not None and record.status is Status.RELEASED
        execution.extend_lease(600)
        return "exported"

    assert export({"id": "r-2"}, None) == "exported"
    assert export({"id": "r-2"}, None) == "exported"
    assert effects == ["exported"]


def test_a_holder_released_twice_around_another_callers_claim_never_stores_its_result(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """Two forced releases in a row with a caller in between: A is released, B claims, B is
    released too (its own tombstone), then A completes. A's completion is fenced on its own
    owner, so it must not land over B's tombstone; B completes over its own; C replays B."""
    effects: list[str] = []
    b_claimed, a_done = threading.Event(), threading.Event()

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        who = event["who"]
        effects.append(who)
        pk = current_execution().key_hash or ""
        if who == "a":
            force_release(store, dynamodb_local_endpoint, pk, "--force")
            b = threading.Thread(target=lambda: export({"id": "r-3", "who": "b"}, None))
            b.start()
            assert b_claimed.wait(10)
            force_release(store, dynamodb_local_endpoint, pk, "--force")  # B's claim
            a_done.set()
            outcome[1] = b
        if who == "b":
            b_claimed.set()
            assert a_done.wait(10)
            time.sleep(0.5)  # A completes first
        return who

    outcome: dict[int, Any] = {}
    assert export({"id": "r-3", "who": "a"}, None) == "a"
    record = record_of(store, export, "r-3")
    assert record is not None and record.status is not Status.COMPLETED  # not A's result
    outcome[1].join(10)
    assert export({"id": "r-3", "who": "c"}, None) == "b"
    assert effects == ["a", "b"]


def test_an_async_holder_with_a_heartbeat_completes_over_a_forced_release(
    store: DynamoDBStore, dynamodb_local_endpoint: str
) -> None:
    """The async form of operations.md's promise: a coroutine holder whose heartbeat meets
    its own tombstone goes on and completes over it; the retry replays, one effect."""
    effects: list[str] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        with current_execution().heartbeat(every=0.05, extend_by=30):
            if len(effects) == 1:
                pk = current_execution().key_hash or ""
                await asyncio.to_thread(
                    force_release, store, dynamodb_local_endpoint, pk, "--force"
                )
                await asyncio.sleep(0.3)  # the next beats meet the tombstone
        return "exported"

    async def scenario() -> tuple[str, str]:
        return await export({"id": "r-4"}, None), await export({"id": "r-4"}, None)

    assert asyncio.run(scenario()) == ("exported", "exported")
    assert effects == ["exported"]


@pytest.mark.parametrize("beating", [True, False], ids=["heartbeat", "no-heartbeat"])
def test_an_async_holder_whose_key_another_caller_claims_after_a_release_stores_nothing(
    store: DynamoDBStore, dynamodb_local_endpoint: str, beating: bool
) -> None:
    """A coroutine holder, force-released; B (another container) claims and completes while
    A runs. With a heartbeat, A's next beat finds B's record: A ends with LeaseLostError;
    without, A's completion is refused and it returns. Either way B's result stands."""
    effects: list[str] = []
    key = f"r-5-{beating}"

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        who = event["who"]
        effects.append(who)
        if who == "a":
            beats = current_execution().heartbeat(0.05, 30) if beating else contextlib.nullcontext()
            with beats:
                pk = current_execution().key_hash or ""
                await asyncio.to_thread(
                    force_release, store, dynamodb_local_endpoint, pk, "--force"
                )
                b = await asyncio.to_thread(
                    in_thread, lambda: asyncio.run(export({"id": key, "who": "b"}, None))
                )
                assert b == "b"
                await asyncio.sleep(0.3)
        return who

    outcome = in_thread(lambda: asyncio.run(export({"id": key, "who": "a"}, None)))
    assert isinstance(outcome, LeaseLostError) if beating else outcome == "a"
    assert asyncio.run(export({"id": key, "who": "c"}, None)) == "b"
    assert effects == ["a", "b"]


# -- 2. results that cannot be stored, holding something still to come ----------------------


class Slotted:
    __slots__ = ("charge", "order")

    def __init__(self, order: str, charge: Any) -> None:
        self.order, self.charge = order, charge


class Frozen(Mapping[str, Any]):
    """A Mapping that is no dict (an immutable config-like view)."""

    def __init__(self, **items: Any) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class Node:
    def __init__(self, value: Any, next: Node | None = None) -> None:
        self.value, self.next = value, next


def cycle(deferred: Any) -> Any:
    a: dict[str, Any] = {"tags": {"unencodable"}}
    b = {"back": a, "charge": deferred}
    a["b"] = b
    return a


def chain(deferred: Any, length: int) -> Node:
    node = Node(deferred)
    for i in range(length):
        node = Node(i, node)
    return node


def chain_with_index(deferred: Any) -> Any:
    """A linked list of 150 nodes also listed by index (nodes[i] is the i-th), the
    coroutine on the 100th: reachable 3 deep through the list, 101 deep along `next`."""
    nodes = [Node(i) for i in range(150)]
    for here, after in itertools.pairwise(nodes):
        here.next = after
    nodes[99].value = deferred
    return {"nodes": nodes, "head": nodes[0], "tags": {"unencodable"}}


DEEP_HOLDERS: dict[str, Callable[[Any], Any]] = {
    "__slots__ beside a set": lambda d: {"tags": {1}, "receipt": Slotted("o-1", d)},
    "a Mapping subclass": lambda d: Frozen(tags={1}, charge=d),
    "a deque in an object": lambda d: Node({1}, Node(collections.deque([d]))),
    "a cycle": cycle,
    "a chain of 50 objects": lambda d: [{1}, chain(d, 50)],
}


def deferreds() -> dict[str, Callable[[], Any]]:
    async def charge() -> str:
        return "charged"

    def lines() -> Iterator[str]:
        yield "charged"

    return {
        "coroutine": charge,
        "generator": lines,
        "future": concurrent.futures.Future,
    }


@pytest.mark.parametrize("kind", ["coroutine", "generator", "future"])
@pytest.mark.parametrize("holder", list(DEEP_HOLDERS))
def test_an_unstorable_result_holding_something_still_to_come_deep_frees_the_key(
    store: DynamoDBStore, holder: str, kind: str
) -> None:
    """results.md: anything still to come anywhere in the result (an object's attributes,
    `__slots__`, any mapping or collection) is closed or cancelled, the key released and
    DeferredResultError raised; never a "not stored" marker. Here the result cannot be
    stored anyway (a set): the deferred must still be found."""
    runs: list[str] = []
    fixed = threading.Event()

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append("ran")
        return "fixed" if fixed.is_set() else DEEP_HOLDERS[holder](deferreds()[kind]())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(DeferredResultError):
            handler({"id": "d-1"}, None)
    record = record_of(store, handler, "d-1")
    assert record is None or record.status is Status.RELEASED
    fixed.set()
    assert handler({"id": "d-1"}, None) == "fixed"
    assert runs == ["ran", "ran"]


def forgotten_await(store: DynamoDBStore, shape: Callable[[Any], Any]) -> list[str]:
    """A sync handler returns `shape(charge())`, a result that cannot be stored holding a
    coroutine never awaited; once fixed it awaits it. The charges that happened."""
    charged: list[str] = []
    fixed = threading.Event()

    async def charge() -> str:
        charged.append("o-1")
        return "charged"

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return asyncio.run(charge()) if fixed.is_set() else shape(charge())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with contextlib.suppress(DeferredResultError):  # no error at all: the marker
            handler({"id": "d-2"}, None)
    fixed.set()
    assert handler({"id": "d-2"}, None) == "charged"  # fails: ResultNotSerializableError
    return charged


def test_a_forgotten_await_at_the_end_of_a_long_linked_list_frees_the_key(
    store: DynamoDBStore,
) -> None:
    """A result that cannot be stored (a set) holding, at the end of a 150-node linked list
    (a chain of pages, a parsed tree), a coroutine never awaited. results.md: the key never
    holds a "not stored" marker for an effect that did not happen. It does: deferred_in
    stops at depth 100, the coroutine is not found, the call returns as if stored, and the
    fixed retry is refused (ResultNotSerializableError) for the TTL: the charge never runs."""
    assert forgotten_await(store, lambda d: {"tags": {1}, "pages": chain(d, 150)}) == ["o-1"]


def test_a_forgotten_await_three_deep_in_an_indexed_linked_list_frees_the_key(
    store: DynamoDBStore,
) -> None:
    """The coroutine is 3 deep (result["nodes"][99].value), but node 99 is also reached
    101 deep along `next` from `head`. deferred_in walks depth first, marks node 99 seen at
    the depth bound without walking it, then skips it when the list reaches it 3 deep: the
    coroutine is not found and the key completes with a "not stored" marker, as above."""
    assert forgotten_await(store, chain_with_index) == ["o-1"]


class Report:
    """An unstorable result referring to the runtime it was built with."""

    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)


def test_an_unstorable_result_holding_the_runtime_neither_hangs_nor_cancels_it(
    store: DynamoDBStore,
) -> None:
    """A coroutine's result refers to the running loop, a live thread, a logger and a
    200 000-object graph with a cycle. The call answers (about 3 s on an idle machine, the
    look itself; a look that never ends is failed by the suite's per-test limit, not by a
    wall-clock assertion a busy machine trips), the background task (not the result's) runs
    on, the thread lives, and the result is treated as unstorable (one run: retries
    refused), never as still to come."""
    runs: list[str] = []
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()

    @idempotent(store=store, key="id", cache_size=0)
    async def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append("ran")
        graph: list[Any] = [Report(i=i, tags={i}) for i in range(200_000)]
        graph.append(graph)
        return Report(
            loop=asyncio.get_running_loop(),
            thread=worker,
            logger=logging.getLogger("app"),
            graph=graph,
        )

    async def scenario() -> None:
        async def background() -> None:
            while True:
                await asyncio.sleep(0.01)

        task = asyncio.create_task(background())
        await handler({"id": "u-1"}, None)
        await asyncio.sleep(0.05)
        assert not task.cancelled() and not task.done() and worker.is_alive()
        task.cancel()
        with contextlib.suppress(Exception):
            await handler({"id": "u-1"}, None)

    try:
        asyncio.run(scenario())
    finally:
        stop.set()
    assert runs == ["ran"]


class Pool:
    """An application's connection pool, built once per container, with a keep-alive task."""

    def __init__(self) -> None:
        self.keepalive = asyncio.ensure_future(self._beat())

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(0.01)


def effects_of_returning(store: DynamoDBStore, part: Callable[[], Any]) -> list[str]:
    """A sync handler sends (the effect) and returns an unstorable Report holding `part()`;
    it is called twice with the same key. The sends that happened."""
    sent: list[str] = []

    @idempotent(store=store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        sent.append("sent")
        return Report(sent=True, tags={1}, part=part())

    for _ in range(2):
        with contextlib.suppress(Exception):
            handler({"id": "u-2"}, None)
    return sent


NOT_TO_COME: dict[str, Callable[[DynamoDBStore], Any]] = {
    "a boto3 client": lambda store: store.client,  # a weakref.proxy in its attributes
    "a log handler": lambda store: logging.StreamHandler(),  # sys.stderr
    "a BytesIO buffer": lambda store: io.BytesIO(b"%PDF-1.7"),  # a report, built in memory
}


@pytest.mark.parametrize("part", list(NOT_TO_COME))
def test_an_unstorable_result_holding_a_live_object_runs_once(
    store: DynamoDBStore, part: str
) -> None:
    """A handler sends (the effect) and returns a report that cannot be stored, referring
    to the boto3 client it used, a log handler, or the PDF it built in a BytesIO. The effect
    happened: the key must complete as unstorable (retries refused), one send. The look
    takes them for iterators still to come (a file object, and a weakref.proxy deep in the
    client, have `__next__`): DeferredResultError says "nothing was stored", the key is
    released, and the retry sends again."""
    assert effects_of_returning(store, lambda: NOT_TO_COME[part](store)) == ["sent"]


def test_an_unstorable_result_holding_an_app_pool_leaves_its_task_alone(
    store: DynamoDBStore,
) -> None:
    """A coroutine returns a report that refers to the container's connection pool (built
    once, reused by every invocation), whose keep-alive task runs in the background. The
    task is not the result's: it must run on, and the send happen once. The look finds it
    through the pool's attributes, cancels it (the pool is dead for every later
    invocation in the container) and releases the key: the retry sends again."""
    sent: list[str] = []

    async def scenario() -> bool:
        pool = Pool()

        @idempotent(store=store, key="id", cache_size=0)
        async def handler(event: dict[str, Any], context: Any) -> Any:
            sent.append("sent")
            return Report(sent=True, tags={1}, pool=pool)

        for _ in range(2):
            with contextlib.suppress(Exception):
                await handler({"id": "u-3"}, None)
        await asyncio.sleep(0.05)
        alive = not pool.keepalive.done()
        pool.keepalive.cancel()
        return alive

    alive = asyncio.run(scenario())
    assert sent == ["sent"]  # fails: ["sent", "sent"]
    assert alive  # fails too: the pool's keep-alive task was cancelled


# -- 3. a durable execution whose resumed claim fails ------------------------------------------


WRITES = ("PutItem", "UpdateItem", "TransactWriteItems")


@pytest.mark.parametrize("released_first", [False, True], ids=["held", "force-durable"])
@pytest.mark.parametrize("fault", ["500", "lost answer"])
def test_a_resumed_claim_that_fails_ends_the_execution_failed_and_frees_its_key(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    dynamodb_local_endpoint: str,
    fault: str,
    released_first: bool,
) -> None:
    """A charges and suspends on its shipping callback (an operator may have released its
    key with --force-durable meanwhile: A's resumed claim is then a retake). When A
    resumes, its claim's first write gets a 500, or lands with its answer lost (botocore's
    retries off). A 500: StoreError out of the handler, which the SDK ends as FAILED; the
    guide: what ends the execution as FAILED releases the key, so C, the next execution,
    charges (A's charge is the user's to refund). A lost answer: the claim landed, the
    library finds it its own and A completes; C replays it, one charge."""
    store = one_attempt(store)
    ledger = Ledger()
    armed = threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        if armed.is_set() and target(request) in WRITES:
            armed.clear()
            if fault == "500":
                return AWSResponse(request.url, 500, {}, Refusal("InternalServerError", 500))
            sender = one_attempt(store).client
            operation = {"PutItem": sender.put_item, "UpdateItem": sender.update_item}
            operation[target(request)](**json.loads(request.body))  # it lands...
            raise ReadTimeoutError(endpoint_url=request.url)  # ...its answer is lost
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)
    runner = runner_for(checkout(store, ledger))
    key = f"b-{fault}-{released_first}"
    a = start(runner, "a", {"order_id": key, "amount": 30})
    callback_id = runner.wait_for_callback(a, name="shipping", timeout=20)
    pk = record_key(runner, key)
    if released_first:
        assert release_cli(store, dynamodb_local_endpoint, pk, "--force-durable") == 0
    armed.set()
    runner.send_callback_success(callback_id, result=b"shipped")
    a_done = finish(runner, a)
    assert not armed.is_set()  # the fault was met
    record = store.get(pk)
    c = {"order_id": key, "amount": 30}
    if fault == "lost answer":  # the claim landed: it is found ours, and A goes on
        assert a_done.status is InvocationStatus.SUCCEEDED, a_done.error
        assert record is not None and record.status is Status.COMPLETED
        assert finish(runner, start(runner, "c", c)).result == a_done.result
        assert ledger.charges == [key]
        return
    assert a_done.status is InvocationStatus.FAILED
    assert error_type(a_done) == "StoreError"
    assert record is not None and record.status is Status.RELEASED
    done = ship(runner, start(runner, "c", c))
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert ledger.charges == [key, key]


# -- 4. async heartbeats: a beat in flight when the block ends ---------------------------------


@pytest.mark.parametrize("taken", [False, True], ids=["released", "released-and-claimed"])
def test_a_beat_in_flight_when_the_block_ends_decides_the_calls_outcome_off_the_loop(
    store: DynamoDBStore, dynamodb_local_endpoint: str, taken: bool
) -> None:
    """A coroutine's heartbeat block ends while a beat is in flight; before that beat
    reaches DynamoDB an operator force-releases the key, and (in one case) B claims and
    completes it. reference/async.md: the loop is never blocked by DynamoDB, and "if it lost
    the key, the call (not the block) ends with the error". operations.md: a beat that finds
    its own tombstone is no lost lease. So: released only, A completes and the retry replays
    A (one export); taken, A ends with LeaseLostError and the retry replays B. A task
    ticking every 5 ms on the loop goes on ticking while the beat is held (asserted by the
    beat itself, whatever the machine's load: a loop waiting for the beat never ticks)."""
    exports: list[str] = []
    in_flight, block_ended = threading.Event(), threading.Event()
    key, held = f"h-{taken}", list[str]()
    ticks: list[float] = []
    ticked_while_held: list[int] = []

    def beat(request: Any, **_: Any) -> None:
        if threading.current_thread().name != HEARTBEAT or in_flight.is_set():
            return
        in_flight.set()
        assert block_ended.wait(5)
        force_release(store, dynamodb_local_endpoint, held[0], "--force")
        if taken:
            assert in_thread(lambda: asyncio.run(export({"id": key, "who": "b"}, None))) == "b"
        before, deadline = len(ticks), time.monotonic() + 10
        while len(ticks) < before + 3 and time.monotonic() < deadline:
            time.sleep(0.01)  # the beat held until the loop has ticked (10 s at most)
        ticked_while_held.append(len(ticks) - before)

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        exports.append(event["who"])
        if event["who"] == "a":
            held.append(current_execution().key_hash or "")
            with current_execution().heartbeat(every=0.05, extend_by=30):
                while not in_flight.is_set():
                    await asyncio.sleep(0.01)
            block_ended.set()
        return str(event["who"])

    async def scenario() -> Any:
        stop = asyncio.Event()

        async def tick() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.005)
                ticks.append(time.monotonic())

        ticker = asyncio.create_task(tick())
        try:
            outcome: Any = await export({"id": key, "who": "a"}, None)
        except LeaseLostError as exc:
            outcome = exc
        stop.set()
        await ticker
        return outcome

    store.client.meta.events.register("before-send.dynamodb", beat)
    outcome = asyncio.run(scenario())
    assert ticked_while_held and ticked_while_held[0] >= 3, ticked_while_held
    if taken:
        assert isinstance(outcome, LeaseLostError)
        assert asyncio.run(export({"id": key, "who": "c"}, None)) == "b"
        assert exports == ["a", "b"]
    else:
        assert outcome == "a"
        assert asyncio.run(export({"id": key, "who": "c"}, None)) == "a"
        assert exports == ["a"]


def test_a_call_cancelled_while_its_last_beat_is_settled_completes_and_replays(
    store: DynamoDBStore,
) -> None:
    """The block ends with a slow beat (1 s) in flight, the coroutine returns, and the
    call, waiting for that beat off the loop, is cancelled (a timeout around it).
    reference/async.md: a cancellation once the effect has happened (while the result is
    being stored) lets the completion finish, and a retry replays. Here the coroutine has
    returned, its beat holds the key, yet the cancellation, held until the beat settles,
    goes to the `except BaseException` that releases the key: the retry exports again.
    (No key is left locked: B is never refused InProgressError.)"""
    exports: list[str] = []
    in_flight = threading.Event()

    def slow_beat(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT and not in_flight.is_set():
            in_flight.set()
            time.sleep(1.0)

    store.client.meta.events.register("before-send.dynamodb", slow_beat)

    @idempotent(store=store, key="id", payload=None, lease_seconds=30, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        exports.append(event["who"])
        if event["who"] == "a":
            with current_execution().heartbeat(every=0.05, extend_by=30):
                while not in_flight.is_set():
                    await asyncio.sleep(0.01)
        return str(event["who"])

    async def scenario() -> Any:
        task = asyncio.create_task(export({"id": "k-1", "who": "a"}, None))
        while not in_flight.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # the block has ended; the call waits for the beat
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(1.2)  # the beat has landed (or not) since
        return await export({"id": "k-1", "who": "b"}, None)

    assert asyncio.run(scenario()) == "a"  # fails: "b"
    assert exports == ["a"]  # fails: ["a", "b"]


def test_a_running_durable_holder_released_twice_extends_nothing_and_completes(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    dynamodb_local_endpoint: str,
) -> None:
    """operations.md: a durable execution released with --force-durable while it runs goes
    on and completes over its tombstone; an extension finding its own tombstone writes
    nothing; a second release in a row finds nothing to release (exit 4). C, a later
    execution with the key, replays A's result: one charge."""
    ledger = Ledger()
    seen: list[int | None] = []

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        execution = current_execution()
        if len(ledger.charges) == 1 and not seen:
            pk = execution.key_hash or ""
            before = execution.lease_until_ms
            assert release_cli(store, dynamodb_local_endpoint, pk, "--force-durable") == 0
            seen.append(execution.extend_lease(60))
            seen.append(release_cli(store, dynamodb_local_endpoint, pk, "--force-durable"))
            assert seen == [before, NOTHING_TO_RELEASE]
        return str(charge_id)

    runner = runner_for(handler)
    a = finish(runner, start(runner, "a", {"order_id": "f-9"}))
    c = finish(runner, start(runner, "c", {"order_id": "f-9"}))
    assert a.status is InvocationStatus.SUCCEEDED, a.error
    assert c.status is InvocationStatus.SUCCEEDED, c.error
    assert c.result == a.result
    assert ledger.charges == ["f-9"]
