"""Misuse at run time on DynamoDB Local: a call that returns a result still to come releases
its key, fenced, so a duplicate waiting for it runs the fixed function once."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from lambda_idempotency import DeferredResultError, DynamoDBStore, Status, idempotent_function


def test_a_deferred_result_frees_the_key_for_a_waiting_duplicate(store: DynamoDBStore) -> None:
    holding, let_go = threading.Event(), threading.Event()
    deferred_ran: list[str] = []
    runs: list[str] = []

    async def charge_later(order_id: str) -> None:
        deferred_ran.append(order_id)

    @idempotent_function(
        key="order_id",
        payload="order_id",
        store=store,
        on_in_progress="wait",
        max_wait_seconds=20,
        cache_size=0,
    )
    def charge(order_id: str, broken: bool) -> Any:
        if broken:  # a plain def that hands back its coroutine instead of running it
            holding.set()
            let_go.wait(10)
            return charge_later(order_id)
        runs.append(order_id)
        return {"charged": order_id}

    raised: list[BaseException] = []

    def broken_call() -> None:
        try:
            charge("o-1", broken=True)
        except DeferredResultError as exc:
            raised.append(exc)

    first = threading.Thread(target=broken_call)
    first.start()
    assert holding.wait(10)
    answers: list[Any] = []
    duplicate = threading.Thread(target=lambda: answers.append(charge("o-1", broken=False)))
    duplicate.start()  # refused while the key is held: it waits
    let_go.set()
    first.join(20)
    duplicate.join(30)

    assert len(raised) == 1
    assert answers == [{"charged": "o-1"}]
    assert charge("o-1", broken=False) == {"charged": "o-1"}  # a replay
    assert runs == ["o-1"]
    assert deferred_ran == []
    pk = raised[0].key_hash
    assert pk is not None
    record = store.get(pk)
    assert record is not None
    assert record.status is Status.COMPLETED


def test_a_deferred_result_leaves_a_tombstone_owned_by_its_claim(store: DynamoDBStore) -> None:
    """The release is the protocol's own, fenced on the claim's owner token: a RELEASED
    tombstone, which a later claim takes."""

    @idempotent_function(key="order_id", store=store)
    def charge(order_id: str) -> Any:
        return iter([order_id])

    with pytest.raises(DeferredResultError) as raised:
        charge("o-2")
    pk = raised.value.key_hash
    assert pk is not None
    record = store.get(pk)
    assert record is not None
    assert record.status is Status.RELEASED
    assert record.owner is not None
