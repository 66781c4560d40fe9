"""An idempotent coroutine closed from outside the task that ran it (its task dropped, the
coroutine collected later, or closed by hand after its loop ended): the key is released in
place and the close itself does not fail (found by test_async_attacks.py's review: it raised
ValueError, "token was created in a different Context", from the contexts it reset)."""

from __future__ import annotations

import asyncio
import threading
import warnings
from typing import Any

from lambda_idempotency import (
    DynamoDBStore,
    Status,
    StoreError,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeClock, FakeContext


def _suspended_in_the_body(protected: Any, *args: Any) -> Any:
    """The decorated coroutine stepped, in a task of its own loop, until its body runs and
    waits forever; returned after that loop has ended."""

    async def start() -> Any:
        coroutine = protected(*args)
        step = coroutine.send(None)
        while not protected.runs:
            await asyncio.wait({step})
            step = coroutine.send(None)
        return coroutine

    return asyncio.run(start())


def test_an_async_handler_closed_outside_its_task_releases_and_closes_cleanly(
    moto_store: DynamoDBStore,
) -> None:
    @idempotent(key="order_id", store=moto_store)
    async def handler(event: dict[str, Any], context: Any) -> int:
        handler.runs.append(1)  # type: ignore[attr-defined]
        await asyncio.get_running_loop().create_future()
        return 1

    handler.runs = []  # type: ignore[attr-defined]
    coroutine = _suspended_in_the_body(handler, {"order_id": "o-1"}, FakeContext())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        coroutine.close()
    pk, _ = handler.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED


def test_an_async_function_closed_outside_its_task_releases_and_closes_cleanly(
    moto_store: DynamoDBStore,
) -> None:
    @idempotent_function(key="order_id", store=moto_store)
    async def charge(order_id: str) -> int:
        charge.runs.append(1)  # type: ignore[attr-defined]
        await asyncio.get_running_loop().create_future()
        return 1

    charge.runs = []  # type: ignore[attr-defined]
    coroutine = _suspended_in_the_body(charge, "o-1")
    coroutine.close()
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED


class _Gated:
    """The store, with `name` held in its worker thread until `gate` opens, or failing
    (retryable) its first `failures` calls."""

    def __init__(self, store: DynamoDBStore, name: str, failures: int = 0) -> None:
        self.store, self.name, self.failures = store, name, failures
        self.gate, self.entered = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.store, name)
        if name != self.name:
            return attribute

        def gated(*args: Any, **kwargs: Any) -> Any:
            self.entered.set()
            if self.failures:
                self.failures -= 1
                raise StoreError("throttled", code="ThrottlingException", retryable=True)
            self.gate.wait(5)
            return attribute(*args, **kwargs)

        return gated


def test_a_coroutine_closed_while_its_claim_is_in_flight_releases_the_claim_it_won(
    moto_store: DynamoDBStore,
) -> None:
    gated = _Gated(moto_store, "claim")
    runs: list[str] = []

    @idempotent_function(key="order_id", store=gated)  # type: ignore[arg-type]
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    async def start_then_close() -> None:
        coroutine = charge("o-1")
        coroutine.send(None)  # the claim is in its worker thread, held at the gate
        while not gated.entered.is_set():
            await asyncio.sleep(0.005)
        threading.Timer(0.1, gated.gate.set).start()
        coroutine.close()  # blocks for the claim's end, then releases what it won

    asyncio.run(start_then_close())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.RELEASED
    assert runs == []


class _StuckSleepClock(FakeClock):
    """A fake clock whose `async_sleep` never ends: a coroutine backing off stays there."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeping = threading.Event()

    async def async_sleep(self, seconds: float) -> None:
        self.sleeping.set()
        await asyncio.get_running_loop().create_future()


def test_a_coroutine_closed_while_its_completion_backs_off_completes_in_place(
    moto_store: DynamoDBStore,
) -> None:
    """The first completion attempt is throttled; the coroutine is closed while it backs
    off: the effect happened, so the completion goes on in place and the key completes."""
    gated = _Gated(moto_store, "write_completion", failures=1)
    gated.gate.set()
    clock = _StuckSleepClock()
    runs: list[str] = []

    @idempotent_function(key="order_id", store=gated, clock=clock)  # type: ignore[arg-type]
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return "charged"

    async def start_then_close() -> None:
        coroutine = charge("o-1")
        step = coroutine.send(None)
        while not clock.sleeping.is_set():
            await asyncio.wait({step}, timeout=0.01)
            if step.done():
                step = coroutine.send(None)
        coroutine.close()

    asyncio.run(start_then_close())
    pk, _ = charge.idempotency._identify({"order_id": "o-1"})  # type: ignore[attr-defined]
    record = moto_store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert runs == ["o-1"]
