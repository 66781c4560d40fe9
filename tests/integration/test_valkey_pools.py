"""ValkeyStore's connections and its replicas' answers, on real servers, effects counted: many
duplicates waiting in one process never starve the holder's completion; a WAIT the server
refuses never leaves a claim locking the key; a client's own socket timeout bounds a block;
forked waiters each wake; a record of no format this library writes is refused; a server
out of memory is a retryable refusal.

Each promise here was broken once (issue 41's round): the tests failed before their fixes.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from lambda_idempotency import (
    StoreError,
    ValkeyStore,
    current_execution,
    idempotent,
)
from lambda_idempotency._base.errors import STORED_RECORD_UNREADABLE
from lambda_idempotency._dev.valkey_local import ValkeyServer
from lambda_idempotency._protocol import waiting

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(4)]

MAX_WAIT = 30.0
WOKEN_WITHIN = 10.0
"""Waiters woken answer this soon; a waiter left to the stretched schedule answers past it."""


@pytest.fixture
def slow_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls a minute apart: only a wake-up answers a waiter before its cap."""
    monkeypatch.setattr(waiting, "WAIT_MIN_POLL_SECONDS", 60.0)
    monkeypatch.setattr(waiting, "WAIT_MAX_POLL_SECONDS", 60.0)


def _prefix() -> str:
    return f"p-{uuid.uuid4().hex[:8]}:"


def _armed(store: ValkeyStore, pk: str) -> int:
    return int(store.client.scard(f"{store.key_of(pk)}:waiters"))


# -- many waiters, one pool ------------------------------------------------------------------------

DUPLICATES = 150
"""More than redis-py's default pool (100 connections) holds: each blocked waiter holds one."""


@pytest.fixture(params=["url", "client"])
def crowded_store(request: pytest.FixtureRequest, valkey_node: ValkeyServer) -> Iterator[Any]:
    """A store built from the URL, and one given a client with redis-py's default pool."""
    if request.param == "url":
        store = ValkeyStore(valkey_node.url, prefix=_prefix(), timeout=60)
        yield store
        store.close()
    else:
        client = redis.Redis.from_url(valkey_node.url)
        yield ValkeyStore(client=client, prefix=_prefix(), timeout=60)
        client.close()


def test_many_duplicates_waiting_in_one_process_never_starve_the_holders_completion(
    crowded_store: ValkeyStore,
) -> None:
    """150 duplicates wait on one key in one process (threads, as a web app runs them) while
    the holder runs: its completion lands, the effect runs once, and every duplicate answers
    the result; none gets a StoreError. (Before: the waiters held all 100 connections, the
    completion failed on each retry, and a waiter ran the effect again at the lease's end.)"""
    store = crowded_store
    effects: list[str] = []
    holding = threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=4, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["id"])
        holding.set()
        pk = current_execution().key_hash or ""
        deadline = time.monotonic() + 20
        while _armed(store, pk) < DUPLICATES // 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # the rest arrive, or poll: either way they wait on this run
        return {"charged": event["id"]}

    def duplicate(_: int) -> Any:
        holding.wait()
        try:
            return charge({"id": "o-1"}, None)
        except Exception as exc:  # counted below: any error is the defect
            return exc

    with ThreadPoolExecutor(DUPLICATES + 1) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        answers = list(pool.map(duplicate, range(DUPLICATES)))

    assert first.result() == {"charged": "o-1"}
    failed = [repr(a) for a in answers if isinstance(a, Exception)]
    assert not failed, f"{len(failed)} duplicates failed, e.g. {failed[:2]}"
    assert answers == [{"charged": "o-1"}] * DUPLICATES
    assert effects == ["o-1"]


def test_calls_past_a_given_clients_pool_wait_for_a_connection_and_each_runs_once(
    valkey_node: ValkeyServer,
) -> None:
    """A client given with a pool of 2 connections, 24 calls at once on distinct keys: a call
    that finds the pool empty sent nothing, so it waits for a connection and is sent then.
    Every call runs once and answers; none is refused."""
    client = redis.Redis(
        connection_pool=redis.ConnectionPool.from_url(valkey_node.url, max_connections=2)
    )
    store = ValkeyStore(client=client, prefix=_prefix())
    effects: list[int] = []

    @idempotent(key="id", store=store)
    def charge(event: dict[str, Any], context: Any) -> int:
        effects.append(event["id"])
        time.sleep(0.01)
        return int(event["id"])

    with ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda i: charge({"id": i}, None), range(24)))
    client.close()
    assert answers == list(range(24))
    assert sorted(effects) == list(range(24))


def test_an_empty_pool_is_a_refusal_that_sent_nothing(valkey_node: ValkeyServer) -> None:
    """A store whose own pool stays empty past its timeout: the claim's StoreError says it
    may be retried and that nothing was applied, and the key is free for the retry."""
    store = ValkeyStore(valkey_node.url, prefix=_prefix(), timeout=0.3)
    pool = store.client.connection_pool
    held = [pool.get_connection() for _ in range(pool.max_connections)]
    try:
        with pytest.raises(StoreError) as raised:
            store.claim(
                "k-1",
                owner="a",
                payload_hash=None,
                now_ms=1,
                lease_until_ms=10**13,
                expiration_s=10**10,
            )
    finally:
        for connection in held:
            pool.release(connection)
    assert raised.value.retryable and not raised.value.maybe_applied
    assert store.get("k-1") is None
    store.close()


# -- a WAIT the server refuses ---------------------------------------------------------------------


def _user_without_wait(node: ValkeyServer) -> str:
    """An ACL user who may run the store's scripts and blocks but not WAIT."""
    name = f"nowait-{uuid.uuid4().hex[:6]}"
    admin = redis.Redis.from_url(node.url)
    admin.acl_setuser(
        name, enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-wait"]
    )
    admin.close()
    return f"redis://{name}:pw@127.0.0.1:{node.port}"


@pytest.mark.parametrize("refusal", ["waitaof-without-aof", "acl-without-wait"])
def test_a_claim_whose_wait_is_refused_is_released_and_the_key_stays_free(
    valkey_node: ValkeyServer, refusal: str
) -> None:
    """The server refuses the WAIT after the claim script ran (WAITAOF on a server without
    an append-only file, as ElastiCache has; WAIT for an ACL user without it). The claim is
    released before the error reaches the caller, the error says so, nothing ran, and a
    store that waits for nothing then runs the key at once. (Before: the claim held the key,
    the error said nothing had applied, and every retry was refused for the whole lease.)"""
    prefix = _prefix()
    with contextlib.ExitStack() as servers:
        if refusal == "waitaof-without-aof":
            node = servers.enter_context(ValkeyServer("--appendonly", "no"))
            waiting_store = ValkeyStore(node.url, prefix=prefix, aof=True)
        else:
            node = valkey_node
            waiting_store = ValkeyStore(_user_without_wait(node), prefix=prefix, replicas=1)
        plain_store = ValkeyStore(node.url, prefix=prefix)
        _refused_then_free(waiting_store, plain_store)


def _refused_then_free(waiting_store: ValkeyStore, plain_store: ValkeyStore) -> None:
    effects: list[str] = []

    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "charged"

    with pytest.raises(StoreError) as raised:
        idempotent(key="id", store=waiting_store, lease_seconds=600)(charge)({"id": "o-1"}, None)
    assert effects == []
    assert raised.value.step == "claim" and not raised.value.maybe_applied
    assert not raised.value.retryable, "a refused WAIT is configuration: retrying repeats it"
    assert "released" in str(raised.value)

    assert (
        idempotent(key="id", store=plain_store, lease_seconds=600)(charge)({"id": "o-1"}, None)
        == "charged"
    )
    assert effects == ["o-1"]
    waiting_store.close()
    plain_store.close()


def test_an_extension_whose_wait_is_refused_is_a_store_error_that_may_have_applied(
    valkey_node: ValkeyServer,
) -> None:
    """An extension that ran but whose WAIT was refused may have landed: the error says so."""
    prefix = _prefix()
    plain = ValkeyStore(valkey_node.url, prefix=prefix)
    won, _ = plain.claim(
        "k-1",
        owner="a",
        payload_hash=None,
        now_ms=int(time.time() * 1000),
        lease_until_ms=int(time.time() * 1000) + 60_000,
        expiration_s=int(time.time()) + 600,
    )
    assert won
    store = ValkeyStore(_user_without_wait(valkey_node), prefix=prefix, replicas=1)
    with pytest.raises(StoreError) as raised:
        store.extend_lease(
            "k-1",
            owner="a",
            payload_hash=None,
            claimed_at_ms=None,
            lease_until_ms=int(time.time() * 1000) + 120_000,
            expiration_s=int(time.time()) + 600,
        )
    assert raised.value.maybe_applied and raised.value.step == "extend"
    store.close()
    plain.close()


# -- a client's own socket timeout -----------------------------------------------------------------


def _connections_received(node: ValkeyServer) -> int:
    admin = redis.Redis.from_url(node.url)
    try:
        return int(admin.info("stats")["total_connections_received"])
    finally:
        admin.close()


@pytest.mark.usefixtures("slow_schedule")
def test_a_waiter_on_a_client_with_a_short_socket_timeout_keeps_its_connection_and_wakes(
    valkey_node: ValkeyServer,
) -> None:
    """A client given with a 0.5 s socket timeout, a store timeout of 60 s: a waiter's blocks
    are cut within the client's timeout, so none drops its connection, and the completion
    wakes it. (Before: each block outlived the socket's timeout, the client dropped the
    connection and the wake-up on it, and reconnected each time.)"""
    client = redis.Redis.from_url(valkey_node.url, socket_timeout=0.5)
    store = ValkeyStore(client=client, prefix=_prefix(), timeout=60)
    effects: list[str] = []
    holding, release = threading.Event(), threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        holding.set()
        release.wait(20)
        return "charged"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        holding.wait()
        before = _connections_received(valkey_node)
        waiter = pool.submit(charge, {"id": "o-1"}, None)
        time.sleep(3)  # six socket timeouts' worth of blocking
        during = _connections_received(valkey_node) - before
        release.set()
        woken = time.monotonic()
        assert waiter.result() == "charged"
        assert time.monotonic() - woken < WOKEN_WITHIN
        assert first.result() == "charged"
    client.close()
    assert effects == ["o-1"]
    assert during <= 3, f"the waiter reconnected {during} times in 3 s"


# -- forked waiters --------------------------------------------------------------------------------


@pytest.mark.usefixtures("slow_schedule")
@pytest.mark.parametrize("used_before_fork", [False, True])
def test_forked_waiters_each_wake_on_the_completion(
    valkey_node: ValkeyServer, used_before_fork: bool
) -> None:
    """A store built before a fork (gunicorn --preload, a multiprocessing pool): four forked
    children wait on the key the parent holds; the parent's completion wakes each of them
    (each with a waiter id of its own), and none runs the effect."""
    store = ValkeyStore(valkey_node.url, prefix=_prefix(), timeout=60)
    if used_before_fork:
        store.get("warm-up")
    effects: list[str] = []
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    parent = os.getpid()
    holding, release = threading.Event(), threading.Event()

    @idempotent(
        key="id", store=store, lease_seconds=30, on_in_progress="wait", max_wait_seconds=MAX_WAIT
    )
    def charge(event: dict[str, Any], context: Any) -> str:
        if os.getpid() != parent:
            answers.put(("ran", os.getpid(), 0.0))
            return "child"
        effects.append(event["id"])
        holding.set()
        pk = current_execution().key_hash or ""
        deadline = time.monotonic() + 20
        while _armed(store, pk) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        release.wait(20)
        return "parent"

    def waiter() -> None:  # in a forked child: the parent's decorated function, same key
        answer = charge({"id": "o-1"}, None)
        answers.put((answer, os.getpid(), time.monotonic()))

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(charge, {"id": "o-1"}, None)
        holding.wait()
        children = [context.Process(target=waiter) for _ in range(4)]
        for child in children:
            child.start()
        release.set()
        assert first.result() == "parent"
        completed = time.monotonic()
        got = [answers.get(timeout=MAX_WAIT + 10) for _ in children]
    for child in children:
        child.join(10)
    assert effects == ["o-1"]
    assert [a for a, _, _ in got] == ["parent"] * 4
    late = [round(at - completed, 3) for _, _, at in got if at - completed > WOKEN_WITHIN]
    assert not late, f"forked waiters answered late by {late} s"
    store.close()


# -- what no version of this library writes --------------------------------------------------------


@pytest.mark.parametrize("fmt", [b"0", b"-1"])
def test_a_record_of_format_zero_or_below_is_unreadable_and_untouched(
    valkey_node: ValkeyServer, fmt: bytes
) -> None:
    """One meaning on both stores: DynamoDB refuses a record of format 0 or below as
    unreadable; so does Valkey, and its claim leaves it as found. (Before: replayed.)"""
    store = ValkeyStore(valkey_node.url, prefix=_prefix())
    key = store.key_of("k-1")
    fields = {
        b"status": b"COMPLETED",
        b"expiration": str(int(time.time()) + 600).encode(),
        b"result": b"\x00",
        b"fmt": fmt,
    }
    store.client.hset(key, mapping=fields)
    effects: list[str] = []

    @idempotent(key="id", store=store)
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "charged"

    for read in (
        lambda: store.get("k-1"),
        lambda: store.claim(
            "k-1",
            owner="a",
            payload_hash=None,
            now_ms=1,
            lease_until_ms=10**13,
            expiration_s=10**10,
        ),
    ):
        with pytest.raises(StoreError) as raised:
            read()
        assert raised.value.code == STORED_RECORD_UNREADABLE
    assert store.client.hgetall(key) == fields
    assert effects == []
    store.close()


# -- a server out of memory ------------------------------------------------------------------------


def test_a_server_out_of_memory_refuses_an_extension_retryably_and_it_lands_later() -> None:
    """A server past `maxmemory` with `noeviction` refuses a write script whose first write
    may grow memory (OOM): a heartbeat's extension is then a retryable StoreError coded OOM
    that applied nothing, and it lands once memory is free. (Before: redis-py strips the
    code, the branch for it never matched, and the error said retrying could not help.)
    A claim is refused there too (its script's first write may grow memory); completions
    and releases are not (their first write deletes, and a script that has begun writing
    may go on: Valkey's rule), so a holder still finishes."""
    with ValkeyServer("--maxmemory-policy", "noeviction") as node:
        admin = redis.Redis.from_url(node.url)
        store = ValkeyStore(node.url, prefix=_prefix())
        now = int(time.time() * 1000)
        expiration_s = now // 1000 + 600
        won, _ = store.claim(
            "k-1",
            owner="a",
            payload_hash=None,
            now_ms=now,
            lease_until_ms=now + 60_000,
            expiration_s=expiration_s,
        )
        assert won
        admin.config_set("maxmemory", 1)
        extend = {"owner": "a", "payload_hash": None, "claimed_at_ms": None}
        extend.update(lease_until_ms=now + 120_000, expiration_s=expiration_s)
        with pytest.raises(StoreError) as raised:
            store.extend_lease("k-1", **extend)
        assert raised.value.code == "OOM"
        assert raised.value.retryable and not raised.value.maybe_applied
        assert store.get("k-1").lease_until == now + 60_000
        admin.config_set("maxmemory", 0)
        assert store.extend_lease("k-1", **extend)[0]
        assert store.get("k-1").lease_until == now + 120_000
        store.close()
        admin.close()
