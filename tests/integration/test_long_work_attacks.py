"""Attacks on long work (durable executions, extended leases, completion windows, async
results) that held: each is a regression test, run on DynamoDB Local, counting how many
times the protected body (its effect) ran."""

from __future__ import annotations

import asyncio
import contextlib
import decimal
import fractions
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.exceptions import InvocationError
from aws_durable_execution_sdk_python.execution import InvocationStatus
from aws_durable_execution_sdk_python_testing.runner import DurableFunctionTestRunner
from botocore.exceptions import ReadTimeoutError

from lambda_idempotency import (
    ConfigurationError,
    DeferredResultError,
    DynamoDBStore,
    InProgressError,
    LeaseLostError,
    current_execution,
    idempotent,
)
from lambda_idempotency._protocol.durable import owner_token
from lambda_idempotency._stores.record import Status
from tests.conftest import FakeClock, FakeContext
from tests.integration.test_durable import (
    Handler,
    Ledger,
    error_type,
    finish,
    record_key,
    release_cli,
    ship,
    start,
)
from tests.long_work import HEARTBEAT, one_attempt, record_of, refused

pytestmark = pytest.mark.dynamodb_local


def target(request: Any) -> str:
    return str(request.headers.get("X-Amz-Target", b"").decode().rsplit(".", 1)[-1])


# -- leases you extend ---------------------------------------------------------------------


def test_a_beat_racing_an_explicit_extension_never_shortens_the_lease(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """A heartbeat (extend_by=30) beats while the handler calls extend_lease(600) once for
    the long tail of its work; the beat read the lease before the extension and would land
    after it. The stored lease stays the 600 s extend_lease returned, so a second caller
    60 s later is refused and the export runs once (the beat's 30 s lease stood, and the
    second caller ran, before extensions were taken one at a time)."""
    effects: list[str] = []
    beat_sent, extended = threading.Event(), threading.Event()
    leases: list[tuple[int | None, int | None]] = []

    def hook(request: Any, **_: Any) -> None:
        if threading.current_thread().name == HEARTBEAT and not beat_sent.is_set():
            beat_sent.set()
            extended.wait(1)  # the extension lands first, unless it has to wait for the beat

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate exported")
            return "theirs"
        execution = current_execution()
        with execution.heartbeat(every=0.05, extend_by=30):
            assert beat_sent.wait(10)
            promised = execution.extend_lease(600)
            extended.set()
            threading.Event().wait(0.3)  # the raced beat, and a few more, land
        store.client.meta.events.unregister("before-send.dynamodb", hook)
        clock.advance(60)  # well inside the 600 s extend_lease promised
        with contextlib.suppress(InProgressError):
            export({"id": "r-1", "duplicate": True}, None)
        leases.append((record_of(store, export, "r-1").lease_until, promised))
        effects.append("exported")
        return "ours"

    store.client.meta.events.register("before-send.dynamodb", hook)
    assert export({"id": "r-1"}, None) == "ours"
    assert effects == ["exported"]
    [(stored, promised)] = leases
    assert stored == promised


HOSTILE = [
    10**400,
    -(10**400),
    2**1024,
    decimal.Decimal("60"),
    fractions.Fraction(1, 2),
    complex(60, 0),
    None,
    b"60",
    [60],
    -0.0,
    float("-inf"),
]


@pytest.mark.parametrize("seconds", HOSTILE, ids=lambda value: repr(value)[:12])
def test_extend_lease_refuses_hostile_numbers_with_a_typed_error_and_frees_the_key(
    store: DynamoDBStore, seconds: Any
) -> None:
    """An int too large for a float raised OverflowError (no typed error) before the bound
    was checked first; every other non-duration is a ConfigurationError too."""
    runs: list[str] = []

    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        runs.append("ran")
        current_execution().extend_lease(seconds)
        return "done"

    with pytest.raises(ConfigurationError, match="extend_lease: seconds"):
        export({"id": "x-1"}, None)
    assert record_of(store, export, "x-1").status is Status.RELEASED
    assert runs == ["ran"]


@pytest.mark.parametrize(
    ("every", "extend_by"),
    [(10**400, 30), (0.1, 10**400), (0.1, -(10**400))],
    ids=["every", "extend_by", "negative extend_by"],
)
def test_a_heartbeat_refuses_ints_too_large_for_a_float(
    store: DynamoDBStore, every: Any, extend_by: Any
) -> None:
    @idempotent(store=store, key="id", lease_seconds=10, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        with current_execution().heartbeat(every=every, extend_by=extend_by):
            return "done"

    with pytest.raises(ConfigurationError, match="heartbeat"):
        export({"id": "h-1"}, None)
    assert record_of(store, export, "h-1").status is Status.RELEASED


def test_a_float_subclass_duration_is_honoured(store: DynamoDBStore, clock: FakeClock) -> None:
    """A numpy-like float (a float subclass) is a duration like any float."""

    class Seconds(float):
        pass

    @idempotent(store=store, key="id", lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> int | None:
        return current_execution().extend_lease(Seconds(120.5))

    until = export({"id": "f-1"}, None)
    assert until == clock.now_ms() + 120_500


def test_a_handler_that_catches_lease_lost_and_returns_stores_nothing(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The lease lapsed, a second caller took the key over and completed; the first one's
    extend_lease raises LeaseLostError, the handler swallows it and returns: its result
    is never stored over the new holder's, and retries replay the new holder's."""
    effects: list[str] = []
    lost: list[LeaseLostError] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=5, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("second"):
            effects.append("second exported")
            return "second"
        effects.append("first exported")
        clock.advance(10)
        assert export({"id": "l-1", "second": True}, None) == "second"
        try:
            current_execution().extend_lease(60)
        except LeaseLostError as exc:
            lost.append(exc)
        return "first"

    assert export({"id": "l-1"}, None) == "first"
    assert len(lost) == 1
    assert export({"id": "l-1"}, None) == "second"
    assert effects == ["first exported", "second exported"]


def test_nested_heartbeats_hold_the_key_and_the_shorter_never_shortens_the_longer(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """An outer heartbeat (extend_by=600) around an inner one (extend_by=5): while both beat,
    and after the inner ends, a caller 100 s on (fake time) is refused; the body runs once."""
    effects: list[str] = []
    refusals: list[InProgressError] = []

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate exported")
            return "theirs"
        execution = current_execution()
        with execution.heartbeat(every=0.05, extend_by=600):
            with execution.heartbeat(every=0.05, extend_by=5):
                threading.Event().wait(0.3)
                clock.advance(100)
                try:
                    export({"id": "n-1", "duplicate": True}, None)
                except InProgressError as exc:
                    refusals.append(exc)
            threading.Event().wait(0.2)
            clock.advance(100)
            try:
                export({"id": "n-1", "duplicate": True}, None)
            except InProgressError as exc:
                refusals.append(exc)
        effects.append("exported")
        return "ours"

    assert export({"id": "n-1"}, None) == "ours"
    assert effects == ["exported"]
    assert len(refusals) == 2 and all(exc.retry_after > 300 for exc in refusals)
    assert export({"id": "n-1", "duplicate": True}, None) == "ours"


def test_throttled_beats_inside_the_lease_end_normally_and_complete_once(
    store: DynamoDBStore,
) -> None:
    """Half the beats throttled (real time, a 3 s lease, beats every 0.1 s for 1 s): the
    lease never lapses, so the block ends normally and the result is stored once."""
    store = one_attempt(store)
    effects: list[str] = []
    beats = {"sent": 0}

    def hook(request: Any, **_: Any) -> Any:
        if threading.current_thread().name == HEARTBEAT:
            beats["sent"] += 1
            if beats["sent"] % 2:
                return refused(request, "ThrottlingException")
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, lease_seconds=3, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        with current_execution().heartbeat(every=0.1, extend_by=3):
            threading.Event().wait(1.0)
        return "done"

    assert export({"id": "t-1"}, None) == "done"
    assert export({"id": "t-1"}, None) == "done"
    assert effects == ["exported"] and beats["sent"] >= 4
    assert record_of(store, export, "t-1").status is Status.COMPLETED


# -- durable executions --------------------------------------------------------------------


def two_callbacks(store: DynamoDBStore, ledger: Ledger, **options: Any) -> Handler:
    """Charge, wait for packing, then for shipping: two suspensions after the charge."""

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0, **options)
    def handler(event: dict[str, Any], context: DurableContext) -> dict[str, Any]:
        ledger.invocations += 1
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        packed = context.create_callback(name="packing").result()
        shipped = context.create_callback(name="shipping").result()
        return {"charge_id": charge_id, "packed": packed, "shipped": shipped}

    return handler


def test_a_durable_holder_released_at_each_of_two_suspensions_takes_its_key_back_each_time(
    store: DynamoDBStore,
    runner_for: Callable[[Handler], DurableFunctionTestRunner],
    dynamodb_local_endpoint: str,
) -> None:
    """An operator forces a release (`--force-durable`) at each of A's two suspensions (and
    once more: nothing left to release): A resumes, takes the key back from each of its
    own tombstones, completes; B after it replays; one charge."""
    ledger = Ledger()
    runner = runner_for(two_callbacks(store, ledger))
    pk = record_key(runner, "d-1")
    a = start(runner, "a", {"order_id": "d-1"})
    codes = []
    for name in ("packing", "shipping"):
        callback_id = runner.wait_for_callback(a, name=name, timeout=20)
        codes.append(release_cli(store, dynamodb_local_endpoint, pk, "--force-durable"))
        codes.append(release_cli(store, dynamodb_local_endpoint, pk, "--force-durable"))
        runner.send_callback_success(callback_id, result=name.encode())
    done = finish(runner, a)
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert codes == [0, 4, 0, 4]
    replayed = finish(runner, start(runner, "b", {"order_id": "d-1"}))
    assert replayed.result == done.result
    assert ledger.charges == ["d-1"]
    record = store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert record.owner == owner_token(a)


def test_a_durable_handlers_lease_extensions_never_shorten_its_execution_lease(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """extend_lease(60) and a heartbeat (extend_by=1) inside a durable handler keep the
    execution's 7-day lease: B, started while A is suspended, is refused; one charge."""
    ledger = Ledger()
    leases: list[int | None] = []

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0, lease_seconds=7 * 24 * 3600)
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        execution = current_execution()
        before = execution.lease_until_ms
        leases.extend([before, execution.extend_lease(60)])
        with execution.heartbeat(every=0.05, extend_by=1):
            threading.Event().wait(0.2)
        leases.append(execution.lease_until_ms)
        charge_id = context.step(lambda _: ledger.charge(event["order_id"]), name="charge")
        context.create_callback(name="shipping").result()
        return charge_id

    runner = runner_for(handler)
    a = start(runner, "a", {"order_id": "d-2"})
    runner.wait_for_callback(a, name="shipping", timeout=20)
    record = store.get(record_key(runner, "d-2"))
    assert record is not None and record.claimed_at is not None and record.lease_until
    assert record.lease_until - record.claimed_at > 7 * 24 * 3600 * 1000 - 60_000
    assert len(set(leases)) == 1
    assert error_type(finish(runner, start(runner, "b", {"order_id": "d-2"}))) == (
        "InProgressError"
    )
    assert ship(runner, a).status is InvocationStatus.SUCCEEDED
    assert ledger.charges == ["d-2"]


def test_a_durable_result_holding_a_forgotten_coroutine_fails_and_frees_the_key(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """A durable handler returns {"receipt": send_receipt()} with send_receipt a coroutine
    function: DeferredResultError fails the execution and frees the key (the receipt was
    never sent, no "not stored" marker); the fixed code's execution runs and sends once."""
    sent: list[str] = []
    fixed = threading.Event()

    async def send_receipt(order: str) -> str:
        sent.append(order)
        return "sent"

    @durable_execution
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: DurableContext) -> Any:
        if fixed.is_set():
            return {"receipt": asyncio.run(send_receipt(event["order_id"]))}
        return {"receipt": send_receipt(event["order_id"])}

    runner = runner_for(handler)
    failed = finish(runner, start(runner, "a", {"order_id": "d-3"}))
    assert error_type(failed) == "DeferredResultError"
    record = store.get(record_key(runner, "d-3"))
    assert record is not None and record.status is Status.RELEASED
    fixed.set()
    done = finish(runner, start(runner, "b", {"order_id": "d-3"}))
    assert json.loads(done.result or "null") == {"receipt": "sent"}
    assert finish(runner, start(runner, "c", {"order_id": "d-3"})).result == done.result
    assert sent == ["d-3"]


# -- hostile durations at decoration -------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lease_seconds", float("nan")),
        ("lease_seconds", float("inf")),
        ("lease_seconds", "60"),
        ("lease_seconds", True),
        ("lease_seconds", 10**400),
        ("lease_seconds", 31_622_401),
        ("lease_seconds", decimal.Decimal("60")),
        ("max_wait_seconds", float("nan")),
        ("max_wait_seconds", float("inf")),
        ("max_wait_seconds", "5"),
        ("clock_skew_seconds", "1"),
        ("clock_skew_seconds", float("nan")),
    ],
    ids=lambda value: repr(value)[:16],
)
def test_a_duration_no_lease_can_honour_is_refused_at_decoration(
    store: DynamoDBStore, option: str, value: Any
) -> None:
    """lease_seconds=nan or inf decorated, then failed every call with ValueError or
    OverflowError (no typed error); "60" raised TypeError; 10**400 leased past any run."""
    with pytest.raises(ConfigurationError, match=option):

        @idempotent(store=store, key="id", cache_size=0, **{option: value})
        def export(event: dict[str, Any], context: Any) -> str:
            return "done"


def test_a_lease_of_366_days_is_still_a_lease(store: DynamoDBStore, clock: FakeClock) -> None:
    """The longest lease a durable execution may need is taken, and honoured."""

    @idempotent(store=store, key="id", lease_seconds=31_622_400, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> int | None:
        return current_execution().lease_until_ms

    assert export({"id": "y-1"}, None) == clock.now_ms() + 31_622_400_000


# -- completion windows --------------------------------------------------------------------


def test_a_completion_throttled_to_the_end_answers_before_the_invocation_dies(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """20 s left, 5 s of work, then every completion throttled: the call still answers its
    result before the invocation's deadline (never an error its client would retry), the
    record stays IN_PROGRESS no longer than its lease (the invocation's deadline), and a
    retry after that runs (the documented cost of a result that could not be stored)."""
    store = one_attempt(store)
    effects: list[str] = []
    throttling = threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        if throttling.is_set():
            return refused(request, "ThrottlingException")
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        clock.advance(5)
        throttling.set()
        return "done"

    context = FakeContext(20_000, clock=clock)
    assert export({"id": "c-1"}, context) == "done"
    throttling.clear()
    assert clock.now_ms() <= context.deadline_ms - 250  # answered with time to spare
    assert export.idempotency.stats["completion_failed"] == 1  # type: ignore[attr-defined]
    assert export.idempotency.stats["completion_retry"] >= 3  # type: ignore[attr-defined]
    record = record_of(store, export, "c-1")
    assert record.status is Status.IN_PROGRESS and record.lease_until == context.deadline_ms
    with pytest.raises(InProgressError):
        export({"id": "c-1"}, FakeContext(20_000, clock=clock))
    clock.advance((context.deadline_ms - clock.now_ms()) / 1000 + 2.1)  # lease + skew
    assert export({"id": "c-1"}, FakeContext(20_000, clock=clock)) == "done"
    assert effects == ["exported", "exported"]


@pytest.mark.parametrize("with_context", [False, True])
def test_a_completion_after_a_lease_of_one_second_extended_for_a_minute_is_retried(
    store: DynamoDBStore, clock: FakeClock, with_context: bool
) -> None:
    """lease_seconds=1, a 60 s body extended every 0.5 s, completion throttled twice:
    the retry window (from the end of the work) still fits both retries; the body ran once."""
    store = one_attempt(store)
    effects: list[str] = []
    throttles = {"left": 0}

    def hook(request: Any, **_: Any) -> Any:
        if throttles["left"] > 0:
            throttles["left"] -= 1
            return refused(request, "ProvisionedThroughputExceededException")
        return None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", lease_seconds=1, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        for _ in range(120):
            clock.advance(0.5)
            current_execution().extend_lease(1)
        throttles["left"] = 2
        return "done"

    context = FakeContext(900_000, clock=clock) if with_context else None
    assert export({"id": "c-2"}, context) == "done"
    assert throttles["left"] == 0
    assert record_of(store, export, "c-2").status is Status.COMPLETED
    clock.advance(60)
    assert export({"id": "c-2"}, None) == "done"
    assert effects == ["exported"]


# -- async ----------------------------------------------------------------------------------


def test_a_coroutine_cancelled_inside_its_heartbeat_frees_the_key_and_stops_beating(
    store: DynamoDBStore,
) -> None:
    """asyncio.wait_for times out a coroutine in the middle of its heartbeat block: the beats
    stop, the key is released (no beat lands after the release to lock it again), and the
    retry runs once and completes."""
    effects: list[str] = []
    beating = asyncio.Event()

    @idempotent(store=store, key="id", payload=None, lease_seconds=5, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        if event.get("slow"):
            with current_execution().heartbeat(every=0.05, extend_by=5):
                beating.set()
                await asyncio.sleep(10)
        return "done"

    async def scenario() -> str:
        # wait_for's time-out starts once the body beats: on a loaded machine the claim alone
        # can outlast a fixed 0.4 s, and the call would then be cancelled before its body ran.
        call = asyncio.ensure_future(export({"id": "a-1", "slow": True}, None))
        await asyncio.wait_for(beating.wait(), 30)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(call, 0.3)
        await asyncio.sleep(0.2)  # a beat in flight would land by now
        assert not [t for t in threading.enumerate() if t.name == HEARTBEAT]
        assert record_of(store, export, "a-1").status is Status.RELEASED
        return await export({"id": "a-1"}, None)

    assert asyncio.run(scenario()) == "done"
    assert effects == ["exported", "exported"]
    assert record_of(store, export, "a-1").status is Status.COMPLETED


@pytest.mark.parametrize(
    "nesting",
    ["a task in a set in a tuple", "a future as a dict key", "an async generator deep down"],
)
def test_an_async_result_holding_something_still_to_come_frees_its_key(
    store: DynamoDBStore, nesting: str
) -> None:
    effects: list[str] = []
    fixed = threading.Event()

    async def items() -> Any:
        effects.append("streamed")
        yield 1

    @idempotent(store=store, key="id", cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> Any:
        effects.append("ran")
        if fixed.is_set():
            return "fixed"
        loop = asyncio.get_running_loop()
        made = {
            "a task in a set in a tuple": lambda: ("x", {loop.create_task(asyncio.sleep(5))}),
            "a future as a dict key": lambda: {loop.create_future(): 1},
            "an async generator deep down": lambda: {"a": [{"b": (items(),)}]},
        }
        return made[nesting]()

    async def scenario() -> Any:
        with pytest.raises(DeferredResultError):
            await export({"id": nesting}, None)
        assert record_of(store, export, nesting).status is Status.RELEASED
        fixed.set()
        return [await export({"id": nesting}, None), await export({"id": nesting}, None)]

    assert asyncio.run(scenario()) == ["fixed", "fixed"]
    assert effects == ["ran", "ran"]


# -- two containers on one key ---------------------------------------------------------------

CONTAINER = """
import json, os, sys, threading, time
import boto3
from lambda_idempotency import DynamoDBStore, current_execution, idempotent

endpoint, table, effects_path, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                      aws_access_key_id="local", aws_secret_access_key="local")
store = DynamoDBStore(table, client=client)

@idempotent(store=store, key="id", namespace="two-containers", lease_seconds=0.5,
            clock_skew_seconds=0.2, on_in_progress="wait", cache_size=0)
def export(event, context):
    with open(effects_path, "a") as effects:
        effects.write(f"{os.getpid()}\\n")
    with current_execution().heartbeat(every=0.1, extend_by=0.5):
        time.sleep(hold)
    return {"exported_by": os.getpid()}

print("ready", flush=True)
sys.stdin.readline()
print(json.dumps(export({"id": "p-1"}, None)), flush=True)
"""


def test_two_containers_one_holding_by_heartbeat_for_six_leases_run_the_export_once(
    store: DynamoDBStore, tmp_path: Any
) -> None:
    """Two processes (two containers) call one key; the first holds a 0.5 s lease by its
    heartbeat for 3 s; the second, waiting, never takes it over and replays its result."""
    effects = tmp_path / "effects"
    effects.touch()
    script = tmp_path / "container.py"
    script.write_text(CONTAINER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    endpoint = store.client.meta.endpoint_url

    def container(hold: str) -> subprocess.Popen[str]:
        args = [sys.executable, str(script), endpoint, store.table_name, str(effects), hold]
        process = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process

    first, second = container("3"), container("0")
    assert first.stdin is not None and second.stdin is not None
    first.stdin.write("go\n")
    first.stdin.flush()
    deadline = time.monotonic() + 10
    while not effects.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(1)  # two leases and the skew allowance past the claim: held only by beats
    second.stdin.write("go\n")
    second.stdin.flush()
    answers = [json.loads(process.communicate(timeout=30)[0]) for process in (first, second)]
    assert answers[0] == answers[1] == {"exported_by": first.pid}
    assert effects.read_text().split() == [str(first.pid)]


def test_a_durable_invocation_that_dies_after_completing_replays_on_its_next_invocation(
    store: DynamoDBStore, runner_for: Callable[[Handler], DurableFunctionTestRunner]
) -> None:
    """The invocation completes the key, then dies before the SDK records its result (Lambda
    invokes the execution again): the next invocation replays the stored result, and the
    body (an effect outside any step) runs once; B after it replays too."""
    effects: list[str] = []
    dies = {"left": 1}

    @idempotent(store=store, key="order_id", cache_size=0)
    def body(event: dict[str, Any], context: DurableContext) -> str:
        effects.append(event["order_id"])  # outside a step: replays re-run it if unprotected
        return f"receipt-{len(effects)}"

    @durable_execution
    def handler(event: dict[str, Any], context: DurableContext) -> str:
        receipt = body(event, context)
        if dies["left"] > 0:
            dies["left"] -= 1
            raise InvocationError("the invocation died after its completion")
        return receipt

    runner = runner_for(handler)
    done = finish(runner, start(runner, "a", {"order_id": "d-4"}))
    assert done.status is InvocationStatus.SUCCEEDED, done.error
    assert json.loads(done.result or "null") == "receipt-1"
    assert finish(runner, start(runner, "b", {"order_id": "d-4"})).result == done.result
    assert effects == ["d-4"]


def test_a_container_killed_while_its_heartbeat_holds_the_key_frees_it_within_one_extension(
    store: DynamoDBStore, tmp_path: Any
) -> None:
    """The first container holds the key by its heartbeat (extend_by=1 s) and is killed
    (SIGKILL: no release): the second, waiting, claims the key once the last extension and
    the skew allowance lapse, about 1.2 s later, never after the lease the beats promised."""
    effects = tmp_path / "effects"
    effects.touch()
    script = tmp_path / "container.py"
    script.write_text(CONTAINER.replace("extend_by=0.5", "extend_by=1.0"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    endpoint = store.client.meta.endpoint_url

    def container(hold: str) -> subprocess.Popen[str]:
        args = [sys.executable, str(script), endpoint, store.table_name, str(effects), hold]
        process = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        return process

    first, second = container("30"), container("0")
    assert first.stdin is not None and second.stdin is not None
    first.stdin.write("go\n")
    first.stdin.flush()
    deadline = time.monotonic() + 10
    while not effects.read_text() and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.8)  # a few beats landed
    first.kill()
    killed = time.monotonic()
    first.communicate(timeout=10)
    second.stdin.write("go\n")
    second.stdin.flush()
    answer = json.loads(second.communicate(timeout=30)[0])
    took = time.monotonic() - killed
    assert answer == {"exported_by": second.pid}
    assert effects.read_text().split() == [str(first.pid), str(second.pid)]
    assert took < 1.0 + 0.2 + 2.0  # the last extension, the skew, and the poll's slack


def test_an_async_completion_throttled_to_the_end_answers_before_the_invocation_dies(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """The async driver: 20 s left, every completion throttled: the coroutine answers its
    result before the deadline, the record's lease ends at the invocation's deadline."""
    store = one_attempt(store)
    effects: list[str] = []
    throttling = threading.Event()

    def hook(request: Any, **_: Any) -> Any:
        return refused(request, "ThrottlingException") if throttling.is_set() else None

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, clock=clock, cache_size=0)
    async def export(event: dict[str, Any], context: Any) -> str:
        effects.append("exported")
        clock.advance(5)
        throttling.set()
        return "done"

    context = FakeContext(20_000, clock=clock)
    assert asyncio.run(export({"id": "c-3"}, context)) == "done"
    throttling.clear()
    assert clock.now_ms() <= context.deadline_ms - 250
    record = record_of(store, export, "c-3")
    assert record.status is Status.IN_PROGRESS and record.lease_until == context.deadline_ms
    assert effects == ["exported"]


def test_an_extension_whose_answer_is_lost_is_sent_again_and_holds(
    store: DynamoDBStore, clock: FakeClock
) -> None:
    """extend_lease's write lands but its answer is lost; botocore sends it again, and the
    repeat (our own claim, still IN_PROGRESS) is granted: the lease is the one returned, a
    caller inside it is refused, and the export runs once."""
    effects: list[str] = []
    sender = boto3.client(
        "dynamodb",
        endpoint_url=store.client.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    lose = threading.Event()

    def hook(request: Any, **_: Any) -> None:
        if lose.is_set():
            lose.clear()
            sender.put_item(**json.loads(request.body))  # it lands...
            raise ReadTimeoutError(endpoint_url=request.url)  # ...and its answer is lost

    store.client.meta.events.register("before-send.dynamodb", hook)

    @idempotent(store=store, key="id", payload=None, lease_seconds=10, clock=clock, cache_size=0)
    def export(event: dict[str, Any], context: Any) -> str:
        if event.get("duplicate"):
            effects.append("duplicate exported")
            return "theirs"
        lose.set()
        until = current_execution().extend_lease(300)
        assert not lose.is_set()
        assert record_of(store, export, "e-1").lease_until == until
        clock.advance(120)
        with contextlib.suppress(InProgressError):
            export({"id": "e-1", "duplicate": True}, None)
        effects.append("exported")
        return "ours"

    assert export({"id": "e-1"}, None) == "ours"
    assert export({"id": "e-1", "duplicate": True}, None) == "ours"
    assert effects == ["exported"]
