"""Attacks on ValkeyStore from its promise (docs/valkey.md, docs/protocol.md), on real servers.

Each test states the promise it attacks. A test marked xfail(strict) shows a defect found:
it fails on the code as it is and turns red (XPASS) the day the defect is fixed. The rest
guard promises the attacks could not break."""

from __future__ import annotations

import logging
import secrets
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lambda_idempotency import (
    ConfigurationError,
    InProgressError,
    Status,
    StoreError,
    ValkeyStore,
    idempotent,
)
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyServer

pytestmark = pytest.mark.valkey

OPENED: list[Any] = []


@pytest.fixture(autouse=True)
def _close_what_the_test_opened() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def fresh(url: str, **options: Any) -> ValkeyStore:
    store = ValkeyStore(url, prefix=f"atk-{uuid.uuid4().hex[:8]}:", **options)
    OPENED.append(store)
    return store


def owner() -> str:
    return secrets.token_hex(12)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class SkewedClock:
    """The real clock, off by a fixed amount (a caller whose NTP is broken)."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return now_ms() + self.offset_ms

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def claim(store: ValkeyStore, pk: str, who: str, *, lease_ms: int = 30_000, **given: Any) -> Any:
    now = given.pop("now_ms", now_ms())
    arguments: dict[str, Any] = {
        "payload_hash": None,
        "now_ms": now,
        "lease_until_ms": now + lease_ms,
        "expiration_s": now // 1000 + 3600,
        "skew_ms": 0,
        **given,
    }
    return store.claim(pk, owner=who, **arguments)


# -- clocks -----------------------------------------------------------------------------------

HOUR = 3_600_000


@pytest.mark.parametrize("offset_ms", [HOUR, -HOUR], ids=["ahead", "behind"])
def test_a_duplicate_whose_clock_is_an_hour_off_is_refused_while_the_holder_runs(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a caller whose clock is wrong cannot take over a live claim: the duplicate
    is an InProgressError and the effect runs once; the holder's result then replays to it."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    running, finish = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        running.set()
        finish.wait(10)
        return "charged"

    holder = idempotent(key="id", store=store, lease_seconds=30, cache_size=0)(body)
    skewed = idempotent(
        key="id", store=store, lease_seconds=30, cache_size=0, clock=SkewedClock(offset_ms)
    )(body)
    answers: list[str] = []
    thread = threading.Thread(target=lambda: answers.append(holder({"id": "c-1"}, None)))
    thread.start()
    assert running.wait(10)
    with pytest.raises(InProgressError) as caught:
        skewed({"id": "c-1"}, None)
    assert caught.value.retry_after is not None and caught.value.retry_after >= 1
    finish.set()
    thread.join(10)
    assert answers == ["charged"]
    assert skewed({"id": "c-1"}, None) == "charged"
    assert effects == ["c-1"]


@pytest.mark.xfail(
    strict=True,
    reason="a waiter whose clock runs ahead sees the holder's lease lapsed on its own clock, "
    "claims, is refused by the server, and polls again at once: over a thousand refused "
    "claim scripts a second against the holder's node until the holder completes",
)
def test_a_waiter_whose_clock_runs_ahead_waits_for_the_result_without_running_it(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: with on_in_progress="wait", a duplicate waits for the holder's answer, even
    when its own clock says the holder's lease lapsed long ago (the server says it did not);
    and it polls at a measured pace, not in a tight loop of refused claims."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    running, finish = threading.Event(), threading.Event()
    calls = {"evalsha": 0}

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        running.set()
        finish.wait(10)
        return "charged"

    holder = idempotent(key="id", store=store, lease_seconds=30, cache_size=0)(body)
    waiter_store = fresh(valkey_node.url)
    waiter_store.prefix = store.prefix
    counted = waiter_store.client
    original = counted.evalsha

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["evalsha"] += 1
        return original(*args, **kwargs)

    counted.evalsha = counting
    waiter = idempotent(
        key="id",
        store=waiter_store,
        lease_seconds=30,
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=20,
        clock=SkewedClock(HOUR),
    )(body)
    thread = threading.Thread(target=lambda: holder({"id": "w-1"}, None))
    thread.start()
    assert running.wait(10)
    timer = threading.Timer(1.0, finish.set)
    timer.start()
    try:
        assert waiter({"id": "w-1"}, None) == "charged"
    finally:
        finish.set()
        thread.join(10)
    assert effects == ["w-1"]
    assert calls["evalsha"] <= 20, f"{calls['evalsha']} claims sent in about one second"


def test_a_completed_result_replays_to_a_caller_whose_clock_runs_ten_minutes_ahead(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: expiry runs on the server's clock: a record the server still keeps replays
    to a caller whose clock says its TTL ran out; nothing runs again."""
    store = fresh(valkey_node.url)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return f"answer-{len(effects)}"

    writer = idempotent(key="id", store=store, ttl_seconds=60, cache_size=0)(body)
    ahead = idempotent(
        key="id", store=store, ttl_seconds=60, cache_size=0, clock=SkewedClock(600_000)
    )(body)
    assert writer({"id": "r-1"}, None) == "answer-1"
    assert ahead({"id": "r-1"}, None) == "answer-1"
    assert effects == ["r-1"]


def test_a_holder_whose_clock_runs_behind_cannot_keep_a_lapsed_lease(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a holder whose clock is ten minutes behind holds its lease only as long as
    its lease lasts on the server's clock, not ten minutes more."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("behind", None, "k")
    behind = now_ms() - 600_000
    assert claim(store, pk, owner(), now_ms=behind, lease_ms=300)[0]
    assert not claim(store, pk, owner())[0]
    time.sleep(0.5)
    won, replaced = claim(store, pk, owner())
    assert won
    assert replaced is not None and replaced.status is Status.IN_PROGRESS


# -- TTL --------------------------------------------------------------------------------------


@pytest.mark.xfail(
    strict=True,
    reason="a huge ttl_seconds makes the claim script's PEXPIREAT fail after its HSET: the "
    "claim lands without an expiry, the caller gets a non-retryable StoreError saying "
    "maybe_applied=False, and every later call fails the same way",
)
def test_a_huge_ttl_is_refused_up_front_or_works(valkey_node: ValkeyServer) -> None:
    """Promise: a TTL the decorator accepts works on this store (as on DynamoDB), or is a
    ConfigurationError at decoration; never a claim landed while the error says it did not."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    try:
        handle = idempotent(key="id", store=store, ttl_seconds=10**16, cache_size=0)(
            lambda event, context: effects.append(event["id"]) or "done"
        )
    except ConfigurationError:
        return
    pk = store.layout.record_key(handle.__wrapped__.__qualname__, None, "h-1")  # type: ignore[attr-defined]
    try:
        assert handle({"id": "h-1"}, None) == "done"
        assert handle({"id": "h-1"}, None) == "done"
        assert effects == ["h-1"]
    except StoreError as exc:
        landed = store.client.exists(store.key_of(pk)) if pk else 0
        raise AssertionError(
            f"StoreError {exc.code} maybe_applied={exc.maybe_applied}; "
            f"record landed: {bool(landed)}"
        ) from exc
