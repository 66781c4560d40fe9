"""Waiters that wake on Valkey: a duplicate told to wait blocks until the holder's completion
or release wakes it, on one node and on a cluster, effects counted.

Most tests stretch the polling schedule to a minute (`slow_schedule`) and cap the wait at
`MAX_WAIT`: a waiter the holder's write did not wake polls only at that cap, so it answers
late (at the cap, past `WOKEN_WITHIN`) or not at all (`InProgressError`). The bound is loose
on purpose: it tells a wake-up from a cap, and measures nothing (benchmarks/ does).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    ValkeyStore,
    current_execution,
    idempotent,
)
from lambda_idempotency._protocol import waiting
from lambda_idempotency._stores.contract import WakingStore

pytestmark = pytest.mark.valkey

WAITERS = 6
MAX_WAIT = 20.0
"""The waiters' cap: far below the stretched schedule, far above a wake-up's round trip."""
WOKEN_WITHIN = MAX_WAIT / 2
"""A test's waiters all answer this soon if woken; one left to its cap answers past it."""
TOPOLOGIES = ["valkey_node", "valkey_cluster"]


@pytest.fixture
def slow_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls a minute apart: only a wake-up answers a waiter before its cap."""
    monkeypatch.setattr(waiting, "WAIT_MIN_POLL_SECONDS", 60.0)
    monkeypatch.setattr(waiting, "WAIT_MAX_POLL_SECONDS", 60.0)


@pytest.fixture(params=TOPOLOGIES)
def server(request: pytest.FixtureRequest) -> Iterator[tuple[ValkeyStore, Any]]:
    """A store with a fresh prefix and a raw client of the same server(s)."""
    node = request.getfixturevalue(request.param)
    if request.param == "valkey_cluster":
        client: Any = RedisCluster.from_url(node.url)
    else:
        client = redis.Redis.from_url(node.url)
    # A block is cut at a share of the store's call timeout: keep it past the cap.
    store = ValkeyStore(client=client, prefix=f"w-{uuid.uuid4().hex[:8]}:", timeout=60)
    yield store, client
    client.close()


def armed(store: ValkeyStore, client: Any, pk: str) -> int:
    """How many waiters are armed on the record `pk` now."""
    return int(client.scard(f"{store.key_of(pk)}:waiters"))


def until_armed(store: ValkeyStore, client: Any, pk: str, count: int) -> None:
    """Hold the holder until `count` waiters block on its record (the test's precondition)."""
    for _ in range(2000):
        if armed(store, client, pk) >= count:
            return
        time.sleep(0.005)
    raise AssertionError(f"{count} waiters never armed")


def test_the_valkey_store_wakes_its_waiters_and_the_dynamodb_store_is_polled() -> None:
    assert isinstance(ValkeyStore("redis://127.0.0.1:1"), WakingStore)
    assert not isinstance(DynamoDBStore("t"), WakingStore)


@pytest.mark.usefixtures("slow_schedule")
def test_every_waiter_wakes_on_the_completion_and_replays_it(
    server: tuple[ValkeyStore, Any],
) -> None:
    store, client = server
    effects: list[str] = []
    holding = threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["id"])
        holding.set()
        until_armed(store, client, current_execution().key_hash or "", WAITERS)
        return {"charged": event["id"]}

    def duplicate(_: int) -> Any:
        holding.wait()
        return charge({"id": "o-1"}, None)

    started = time.monotonic()
    with ThreadPoolExecutor(WAITERS + 1) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        answers = list(pool.map(duplicate, range(WAITERS)))

    assert time.monotonic() - started < WOKEN_WITHIN
    assert first.result() == {"charged": "o-1"}
    assert answers == [{"charged": "o-1"}] * WAITERS
    assert effects == ["o-1"]


@pytest.mark.usefixtures("slow_schedule")
def test_a_release_wakes_the_waiters_one_runs_and_the_rest_replay_it(
    server: tuple[ValkeyStore, Any],
) -> None:
    store, client = server
    effects: list[str] = []
    holding = threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            holding.set()
            until_armed(store, client, current_execution().key_hash or "", WAITERS)
            raise RuntimeError("the card network is down")
        until_armed(store, client, current_execution().key_hash or "", WAITERS - 1)
        return "charged"

    def duplicate(_: int) -> Any:
        holding.wait()
        return charge({"id": "o-1"}, None)

    started = time.monotonic()
    with ThreadPoolExecutor(WAITERS + 1) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        answers = list(pool.map(duplicate, range(WAITERS)))

    assert time.monotonic() - started < WOKEN_WITHIN
    with pytest.raises(RuntimeError):
        first.result()
    assert answers == ["charged"] * WAITERS
    assert effects == ["o-1", "o-1"]  # the released attempt, then one waiter's run


@pytest.mark.usefixtures("slow_schedule")
def test_a_completion_between_the_waiters_read_and_its_block_is_not_lost(
    server: tuple[ValkeyStore, Any],
) -> None:
    """The holder completes after the waiter read the record (its refused claim) and before
    it arms: the arm finds the record changed and the waiter re-reads at once."""
    store, _ = server
    effects: list[str] = []
    go, held = threading.Event(), threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        held.set()
        go.wait()
        return "charged"

    real = store.wait_for_change

    def completed_first(pk: str, *, seen: Any, timeout_s: float) -> None:
        go.set()
        holder.result()  # the completion has landed before the waiter arms
        real(pk, seen=seen, timeout_s=timeout_s)

    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(charge, {"id": "o-1"}, None)
        held.wait()
        store.wait_for_change = completed_first  # type: ignore[method-assign]
        started = time.monotonic()
        assert charge({"id": "o-1"}, None) == "charged"
        assert time.monotonic() - started < WOKEN_WITHIN

    assert effects == ["o-1"]


@pytest.mark.usefixtures("slow_schedule")
def test_a_completion_between_the_waiters_arm_and_its_block_is_not_lost(
    server: tuple[ValkeyStore, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder completes after the waiter armed and before its BLPOP reaches the server:
    the wake-up waits on the waiter's list until it blocks."""
    store, client = server
    effects: list[str] = []
    go, held = threading.Event(), threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        held.set()
        go.wait()
        return "charged"

    blpop = client.blpop

    def completed_first(*args: Any, **kwargs: Any) -> Any:
        go.set()
        holder.result()
        return blpop(*args, **kwargs)

    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(charge, {"id": "o-1"}, None)
        held.wait()
        monkeypatch.setattr(client, "blpop", completed_first)
        started = time.monotonic()
        assert charge({"id": "o-1"}, None) == "charged"
        assert time.monotonic() - started < WOKEN_WITHIN

    assert effects == ["o-1"]


def test_a_holder_that_dies_is_taken_over_by_the_schedule_at_its_lease(
    server: tuple[ValkeyStore, Any],
) -> None:
    """No write wakes the waiter: it polls on the regular schedule, which lands when the
    holder's lease lapses, claims the key and runs."""
    store, _ = server
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=1, on_in_progress="wait", max_wait_seconds=10)
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "charged"

    # A holder that vanished leaves its claim behind: claim it and never write again.
    pk = _record_key(store, charge, {"id": "o-1"})
    now = time.time_ns() // 1_000_000
    won, _ = store.claim(
        pk,
        owner="gone",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 1000,
        expiration_s=now // 1000 + 3600,
    )
    assert won

    assert charge({"id": "o-1"}, None) == "charged"
    assert effects == ["o-1"]


@pytest.mark.usefixtures("slow_schedule")
def test_async_waiters_wake_without_blocking_the_loop(
    server: tuple[ValkeyStore, Any],
) -> None:
    """The holder runs on the same loop as its waiters: a waiter blocking the loop would
    stall it, and every waiter would reach its cap."""
    store, client = server
    effects: list[str] = []

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    async def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        pk = current_execution().key_hash or ""
        while armed(store, client, pk) < WAITERS:
            await asyncio.sleep(0.005)
        return "charged"

    async def main() -> list[str]:
        first = asyncio.ensure_future(charge({"id": "a-1"}, None))
        while not effects:
            await asyncio.sleep(0.005)
        rest = await asyncio.gather(*(charge({"id": "a-1"}, None) for _ in range(WAITERS)))
        return [await first, *rest]

    started = time.monotonic()
    assert asyncio.run(main()) == ["charged"] * (WAITERS + 1)
    assert time.monotonic() - started < WOKEN_WITHIN
    assert effects == ["a-1"]


@pytest.mark.usefixtures("slow_schedule")
def test_a_waiter_gives_up_at_its_cap_when_nothing_wakes_it(
    server: tuple[ValkeyStore, Any],
) -> None:
    store, _ = server

    @idempotent(key="id", store=store, lease_seconds=60, on_in_progress="wait", max_wait_seconds=1)
    def charge(event: dict[str, Any], context: Any) -> str:
        raise AssertionError("the key is held")

    pk = _record_key(store, charge, {"id": "o-1"})
    now = time.time_ns() // 1_000_000
    store.claim(
        pk,
        owner="holder",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 60_000,
        expiration_s=now // 1000 + 3600,
    )
    started = time.monotonic()
    with pytest.raises(InProgressError):
        charge({"id": "o-1"}, None)
    assert time.monotonic() - started < 1 + 3  # the cap, not the minute-long schedule


def test_a_wake_up_lost_with_its_connection_costs_a_poll_not_the_answer(
    server: tuple[ValkeyStore, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every block fails (the connection drops): the waiter sleeps out the interval and polls,
    and answers the holder's result on the regular schedule."""
    store, client = server
    effects: list[str] = []
    holding = threading.Event()

    def dropped(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(client, "blpop", dropped)

    @idempotent(key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=10)
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        holding.set()
        until_armed(store, client, current_execution().key_hash or "", 1)
        return "charged"

    def duplicate() -> Any:
        holding.wait()
        return charge({"id": "o-1"}, None)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        assert pool.submit(duplicate).result() == "charged"
    assert first.result() == "charged"
    assert effects == ["o-1"]


@pytest.mark.parametrize("namespace", ["}", "}{", "a}b"])
def test_a_waiter_on_a_key_with_braces_in_its_namespace_answers_and_the_holder_completes(
    server: tuple[ValkeyStore, Any], namespace: str
) -> None:
    """A namespace starting with `}` leaves the record's hash tag empty: the keys a wake-up
    needs would hash to another slot (a cluster refuses the completion's script), so such a
    key's waiters poll; others keep theirs beside the record."""
    store, _ = server
    effects: list[str] = []
    holding = threading.Event()

    @idempotent(
        key="id",
        store=store,
        namespace=namespace,
        lease_seconds=30,
        on_in_progress="wait",
        max_wait_seconds=10,
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        holding.set()
        time.sleep(0.2)
        return "charged"

    def duplicate() -> Any:
        holding.wait()
        return charge({"id": "o-1"}, None)

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        assert pool.submit(duplicate).result() == "charged"
    assert first.result() == "charged"
    assert effects == ["o-1"]


def _record_key(store: ValkeyStore, handler: Any, event: dict[str, Any]) -> str:
    """The `pk` the decorated `handler` claims for `event`, caught at its claim (which is
    then not sent)."""
    seen: list[str] = []
    original = store.claim

    def spy(pk: str, **kwargs: Any) -> Any:
        seen.append(pk)
        raise _SeenError

    store.claim = spy  # type: ignore[method-assign]
    try:
        with pytest.raises(Exception):  # noqa: B017 - the spy stops the call
            handler(event, None)
    finally:
        store.claim = original  # type: ignore[method-assign]
    return seen[0]


class _SeenError(Exception):
    pass
