"""An idempotent coroutine closed from outside the task that ran it (its task dropped, the
coroutine collected later, or closed by hand after its loop ended): the key is released in
place and the close itself does not fail (found by test_async_attacks.py's review: it raised
ValueError, "token was created in a different Context", from the contexts it reset)."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

from lambda_idempotency import DynamoDBStore, Status, idempotent, idempotent_function
from tests.conftest import FakeContext


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
