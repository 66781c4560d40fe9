"""Idempotent coroutines on moto: what decorating an async callable gives back, what stays
refused, the fake clock in a waiting coroutine, and cancellation at random points (a
property: never a locked key, the body at most once per completed key)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import threading
import warnings
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    ConfigurationError,
    DeferredResultError,
    DynamoDBStore,
    NoActiveExecutionError,
    Status,
    StoreError,
    current_execution,
    idempotent,
    idempotent_function,
    idempotent_http,
    idempotent_record,
)
from tests.conftest import FakeClock, FakeContext

# -- what a decorated async callable is -------------------------------------------------------


class Charger:
    def __init__(self) -> None:
        self.runs: list[str] = []

    async def charge(self, order_id: str) -> str:
        self.runs.append(order_id)
        await asyncio.sleep(0)
        return f"charged {order_id}"

    async def __call__(self, order_id: str) -> str:
        return await self.charge(order_id)


async def _charge(prefix: str, order_id: str, runs: list[str]) -> str:
    runs.append(order_id)
    await asyncio.sleep(0)
    return prefix + order_id


def _forms() -> dict[str, Callable[[list[str]], Any]]:
    def method(runs: list[str]) -> Any:
        charger = Charger()
        charger.runs = runs
        return charger.charge

    def instance(runs: list[str]) -> Any:
        charger = Charger()
        charger.runs = runs
        return charger

    return {
        "partial": lambda runs: functools.partial(_charge, "charged ", runs=runs),
        "bound method": method,
        "async __call__": instance,
    }


@pytest.mark.parametrize("form", _forms())
def test_async_callables_become_coroutine_functions_that_run_once(
    moto_store: DynamoDBStore, form: str
) -> None:
    runs: list[str] = []
    protected = idempotent_function(key="order_id", payload=None, store=moto_store)(
        _forms()[form](runs)
    )

    assert inspect.iscoroutinefunction(protected)
    assert protected.idempotency.settings.store() is moto_store  # type: ignore[attr-defined]
    first = asyncio.run(protected(order_id="o-1"))
    assert asyncio.run(protected(order_id="o-1")) == first == "charged o-1"
    assert runs == ["o-1"]


def test_an_async_handler_is_a_coroutine_function_with_its_name_and_engine(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[dict[str, Any]] = []

    @idempotent(key="order_id", store=moto_store)
    async def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        """Charges an order."""
        runs.append(event)
        assert current_execution().key_hash is not None
        return {"status": "charged"}

    assert inspect.iscoroutinefunction(handler)
    assert (handler.__name__, handler.__doc__) == ("handler", "Charges an order.")
    assert handler.idempotency.stats == {}  # type: ignore[attr-defined]
    event = {"order_id": "o-1"}
    assert asyncio.run(handler(event, FakeContext())) == {"status": "charged"}
    assert asyncio.run(handler(event, FakeContext())) == {"status": "charged"}
    assert len(runs) == 1
    with pytest.raises(NoActiveExecutionError):
        current_execution()  # nothing leaks out of the call


def test_a_plain_def_stays_sync(moto_store: DynamoDBStore) -> None:
    @idempotent_function(key="order_id", store=moto_store)
    def charge(order_id: str) -> str:
        return order_id

    assert not inspect.iscoroutinefunction(charge)
    assert charge("o-1") == "o-1"


# -- what stays refused -----------------------------------------------------------------------


async def _async_items(order_id: str) -> Any:
    yield order_id


@pytest.mark.parametrize("front_end", [idempotent, idempotent_function])
def test_an_async_generator_is_refused_with_the_async_def_to_write_instead(
    moto_store: DynamoDBStore, front_end: Any
) -> None:
    with pytest.raises(ConfigurationError, match="async generator function") as refused:
        front_end(key="order_id", store=moto_store)(_async_items)
    assert "decorate an async def that collects the items" in str(refused.value)


@pytest.mark.parametrize("front_end", ["idempotent_http", "idempotent_record"])
def test_front_ends_that_take_plain_functions_refuse_an_async_def_saying_which_do_not(
    moto_store: DynamoDBStore, front_end: str
) -> None:
    async def handler(event: Any, context: Any = None) -> Any:
        return {"statusCode": 200}

    decorate = {
        "idempotent_http": lambda: idempotent_http(store=moto_store)(handler),
        "idempotent_record": lambda: idempotent_record(store=moto_store)(handler),
    }[front_end]
    with pytest.raises(ConfigurationError, match="coroutine function") as refused:
        decorate()
    message = str(refused.value)
    assert "idempotent and idempotent_function take an async def" in message
    assert "asyncio.run" in message


def test_an_async_handler_refuses_a_durable_execution_before_claiming(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[int] = []

    @idempotent(key="order_id", store=moto_store)
    async def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "done"

    durable = SimpleNamespace(
        execution_context=SimpleNamespace(durable_execution_arn="arn:aws:lambda:x:1:exec/1"),
        lambda_context=FakeContext(),
        state=None,
    )
    with pytest.raises(ConfigurationError, match="Durable Execution SDK calls sync handlers"):
        asyncio.run(handler({"order_id": "o-1"}, durable))
    assert runs == []
    assert handler.idempotency.stats == {}  # type: ignore[attr-defined]


def test_a_coroutine_that_returns_a_coroutine_is_refused_and_its_key_released(
    moto_store: DynamoDBStore,
) -> None:
    ran: list[str] = []

    async def inner() -> str:
        ran.append("inner")
        return "charged"

    @idempotent_function(key="order_id", store=moto_store)
    async def charge(order_id: str) -> Any:
        return inner()

    with pytest.raises(DeferredResultError, match="returned a coroutine"):
        asyncio.run(charge("o-1"))
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED
    assert ran == []  # closed, never run


def test_disabled_runs_the_coroutine_every_time_with_one_warning(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    runs: list[str] = []

    @idempotent_function(key="order_id", store=moto_store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        assert current_execution().key_hash is None
        return "charged"

    async def caller() -> list[str]:
        return [await charge("o-1"), await charge("o-1")]

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert asyncio.run(caller()) == ["charged", "charged"]
    assert runs == ["o-1", "o-1"]
    (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    assert "IDEMPOTENCY_DISABLED" in str(warning.message)
    assert warning.filename == __file__  # it points at the caller's `await`


# -- the clock a waiting coroutine sleeps with ------------------------------------------------


def _held_key(store: DynamoDBStore, clock: FakeClock, pk: str, lease_ms: int) -> None:
    now = clock.now_ms()
    won, _ = store.claim(
        pk,
        owner="someone",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + lease_ms,
        expiration_s=now // 1000 + 3600,
        skew_ms=0,
    )
    assert won


class AsyncFakeClock(FakeClock):
    """A fake clock with its own `async_sleep`: the async driver awaits it."""

    def __init__(self) -> None:
        super().__init__()
        self.awaited: list[float] = []

    async def async_sleep(self, seconds: float) -> None:
        self.awaited.append(seconds)
        self.sleep(seconds)


@pytest.mark.parametrize("clock_kind", ["sleep in a worker thread", "async_sleep"])
def test_a_fake_clock_moves_while_a_coroutine_waits_for_the_holder(
    moto_store: DynamoDBStore, clock_kind: str
) -> None:
    """The holder's lease lapses on the fake clock only: the waiter gets there by sleeping on
    it, then claims the key and runs. A clock without `async_sleep` sleeps in the worker
    thread, never on the loop."""
    clock = FakeClock() if clock_kind != "async_sleep" else AsyncFakeClock()
    sleepers: list[int] = []
    real_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        sleepers.append(threading.get_ident())
        real_sleep(seconds)

    clock.sleep = sleep  # type: ignore[method-assign]
    runs: list[str] = []

    @idempotent_function(
        key="order_id",
        store=moto_store,
        clock=clock,
        on_in_progress="wait",
        clock_skew_seconds=0,
        max_wait_seconds=60,
    )
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    _held_key(moto_store, clock, pk, lease_ms=3_000)

    loop_thread = threading.get_ident()
    assert asyncio.run(charge("o-1")) == "charged"
    assert runs == ["o-1"]
    assert sum(clock.slept) >= 3.0  # it waited on the fake clock until the lease lapsed
    if isinstance(clock, AsyncFakeClock):
        assert clock.awaited == clock.slept
        assert set(sleepers) == {loop_thread}  # awaited on the loop: async_sleep's choice
    else:
        assert loop_thread not in sleepers


# -- cancellation at random points: never a locked key ----------------------------------------


class SlowStore:
    """The store's calls, each taking `delay` seconds in its worker thread."""

    def __init__(self, store: DynamoDBStore, delays: dict[str, float]) -> None:
        self.store = store
        self.delays = delays

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        delay = self.delays.get(name)
        if delay is None:
            return attribute

        def slow(*args: Any, **kwargs: Any) -> Any:
            threading.Event().wait(delay)
            return attribute(*args, **kwargs)

        return slow


_keys = iter(range(10**9))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    claim_ms=st.integers(0, 30),
    body_ms=st.integers(0, 30),
    complete_ms=st.integers(0, 30),
    release_ms=st.integers(0, 30),
    cancel_ms=st.integers(0, 100),
)
def test_a_cancel_at_any_point_never_leaves_a_key_locked_and_runs_once_per_completed_key(
    idempotency_store_moto: DynamoDBStore,
    claim_ms: int,
    body_ms: int,
    complete_ms: int,
    release_ms: int,
    cancel_ms: int,
) -> None:
    delays = {"claim": claim_ms, "write_completion": complete_ms, "release": release_ms}
    store = SlowStore(idempotency_store_moto, {name: ms / 1000 for name, ms in delays.items()})
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)  # type: ignore[arg-type]
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.sleep(body_ms / 1000)
        return "charged"

    order_id = f"o-{next(_keys)}"

    async def cancelled_call() -> None:
        task = asyncio.create_task(charge(order_id))
        await asyncio.sleep(cancel_ms / 1000)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_call())
    pk, _ = charge.idempotency._identify({"order_id": order_id})  # type: ignore[attr-defined]
    record = idempotency_store_moto.get(pk)
    assert record is None or record.status in (Status.RELEASED, Status.COMPLETED)
    completed = record is not None and record.status is Status.COMPLETED
    ran = len(runs)
    assert ran == 1 if completed else ran <= 1

    assert asyncio.run(charge(order_id)) == "charged"  # the key answers: replay or a run
    assert len(runs) == ran + (0 if completed else 1)  # completed: replayed; else ran now


def test_a_second_cancel_while_the_key_is_released_waits_for_the_release(
    moto_store: DynamoDBStore,
) -> None:
    store = SlowStore(moto_store, {"release": 0.3})
    runs: list[str] = []

    @idempotent_function(key="order_id", store=store)  # type: ignore[arg-type]
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        await asyncio.Event().wait()
        return "charged"

    async def cancel_twice() -> None:
        task = asyncio.create_task(charge("o-1"))
        while not runs:
            await asyncio.sleep(0.005)
        task.cancel()  # the coroutine stops; the release starts, held 300 ms
        await asyncio.sleep(0.1)
        task.cancel()  # a second cancel during the release
        await asyncio.sleep(0.05)
        assert not task.done()  # the release is not abandoned
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_twice())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED
    assert charge.idempotency.stats["released"] == 1  # type: ignore[attr-defined]


def test_a_coroutine_closed_while_it_runs_still_releases_its_key(
    moto_store: DynamoDBStore,
) -> None:
    """A pending coroutine that is closed rather than awaited to its end (its task dropped)
    can await nothing more: the key is released all the same, then it closes."""
    runs: list[str] = []
    hang: asyncio.Future[None] | None = None

    @idempotent_function(key="order_id", store=moto_store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        assert hang is not None
        await hang
        return "charged"

    async def start_then_close() -> None:
        nonlocal hang
        hang = asyncio.get_running_loop().create_future()
        coroutine = charge("o-1")
        step = coroutine.send(None)  # runs up to the claim's worker-thread step
        while runs == []:
            await asyncio.wait({step})  # the claim ends in its worker thread
            step = coroutine.send(None)
        coroutine.close()  # suspended in the body, on `hang`

    asyncio.run(start_then_close())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED
    assert runs == ["o-1"]


def test_a_cancel_while_a_failing_claim_is_in_flight_raises_the_cancellation(
    moto_store: DynamoDBStore,
) -> None:
    """The task is cancelled while its claim is held in the worker thread, and the claim then
    fails: the caller asked to cancel, so it gets CancelledError (a timeout around the call
    its TimeoutError), not the claim's StoreError; nothing ran and the key is not held."""
    entered = threading.Event()

    class FailingClaim:
        def __getattr__(self, name: str) -> Any:
            return getattr(moto_store, name)

        def claim(self, *args: Any, **kwargs: Any) -> Any:
            entered.set()
            threading.Event().wait(0.2)
            raise StoreError("throttled", code="ThrottlingException", retryable=True)

    runs: list[str] = []

    @idempotent_function(key="order_id", store=FailingClaim())  # type: ignore[arg-type]
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    async def cancel_in_flight() -> None:
        task = asyncio.create_task(charge("o-1"))
        while not entered.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_in_flight())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    assert moto_store.get(pk) is None
    assert runs == []


def test_an_async_handlers_lease_follows_its_context_and_extends_from_the_body(
    moto_store: DynamoDBStore,
) -> None:
    """The claim's lease is the invocation's remaining time (as on the sync path), and
    `current_execution().extend_lease` works from inside the coroutine."""
    clock = FakeClock()
    seen: list[tuple[int | None, int]] = []

    @idempotent(key="order_id", store=moto_store, clock=clock)
    async def handler(event: dict[str, Any], context: Any) -> str:
        execution = current_execution()
        leased = execution.lease_until_ms
        seen.append((leased, execution.extend_lease(600)))
        return "charged"

    start = clock.now_ms()
    assert asyncio.run(handler({"order_id": "o-1"}, FakeContext(7_000, clock=clock))) == "charged"
    assert seen == [(start + 7_000, start + 600_000)]


def test_disabled_async_calls_run_the_coroutine_each_time(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    runs: list[str] = []

    @idempotent_function(key="order_id", store=moto_store)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    with pytest.warns(RuntimeWarning, match="runs without protection"):
        assert asyncio.run(charge("o-1")) == "charged"
    assert asyncio.run(charge("o-1")) == "charged"
    assert runs == ["o-1", "o-1"]
