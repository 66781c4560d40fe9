"""The lean path of a ValkeyStore built from a URL (`_stores.valkey.lean`), on real servers,
effects counted: it serves, it steps aside for a tracer wrapping redis-py's
`execute_command` (installed before or after the store's first call) and for redis-py's
own metrics, a kept connection answers only its own call (after a stall, a kill, a fork),
and many threads share a few kept connections without starving the pool."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from lambda_idempotency import StoreError, ValkeyStore, idempotent
from lambda_idempotency._dev.valkey_local import ValkeyServer
from lambda_idempotency._stores.valkey import lean

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(3)]


@pytest.fixture
def store(valkey_node: ValkeyServer) -> Iterator[ValkeyStore]:
    built = ValkeyStore(valkey_node.url, prefix=f"lean-{uuid.uuid4().hex[:8]}:")
    yield built
    built.close()


def charge_on(store: ValkeyStore) -> tuple[Any, list[str]]:
    effects: list[str] = []

    @idempotent(key="order_id", store=store, cache_size=0, on_in_progress="wait")
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        return {"charged": event["order_id"], "amount": event.get("amount", 1)}

    return charge, effects


def now_ms() -> int:
    return int(time.time() * 1000)


def claim(store: ValkeyStore, pk: str, owner: str) -> tuple[bool, Any]:
    now = now_ms()
    return store.claim(
        pk,
        owner=owner,
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 60_000,
        expiration_s=now // 1000 + 600,
    )


def test_a_store_built_from_a_url_sends_through_the_lean_path(store: ValkeyStore) -> None:
    charge, effects = charge_on(store)
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1", "amount": 1}
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1", "amount": 1}
    assert effects == ["o-1"]
    assert store._lean is not None and store._lean._taken == 1


def test_a_store_given_a_client_sends_through_the_client(valkey_node: ValkeyServer) -> None:
    client = redis.Redis.from_url(valkey_node.url)
    given = ValkeyStore(client=client, prefix=f"lean-{uuid.uuid4().hex[:8]}:")
    charge, effects = charge_on(given)
    assert charge({"order_id": "o-1"}, None) == charge({"order_id": "o-1"}, None)
    assert effects == ["o-1"] and given._lean is None
    client.close()


@pytest.mark.parametrize("installed", ["before the first call", "after the first call"])
def test_a_tracer_wrapping_execute_command_sees_every_script(
    valkey_node: ValkeyServer, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    """OpenTelemetry's and Datadog's redis instrumentations wrap `Redis.execute_command`:
    with one installed, each script goes through it, whenever it was installed."""
    seen: list[str] = []
    original = redis.Redis.execute_command

    def traced(self: Any, *args: Any, **options: Any) -> Any:
        seen.append(str(args[0]))
        return original(self, *args, **options)

    traced.__wrapped__ = original  # type: ignore[attr-defined]
    if installed == "before the first call":
        monkeypatch.setattr(redis.Redis, "execute_command", traced)
    built = ValkeyStore(valkey_node.url, prefix=f"lean-{uuid.uuid4().hex[:8]}:")
    charge, effects = charge_on(built)
    charge({"order_id": "o-0"}, None)
    if installed == "after the first call":
        monkeypatch.setattr(redis.Redis, "execute_command", traced)
    seen.clear()
    charge({"order_id": "o-1"}, None)
    charge({"order_id": "o-1"}, None)
    assert seen.count("EVALSHA") == 3  # claim, completion, the replay's claim
    assert effects == ["o-0", "o-1"]
    built.close()


def test_redis_pys_own_metrics_on_send_through_the_client(
    store: ValkeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lean, "_metrics_on", lambda: True)
    charge, effects = charge_on(store)
    charge({"order_id": "o-1"}, None)
    assert store._lean is not None and store._lean._taken == 0
    assert effects == ["o-1"]


def test_a_stalled_answer_is_never_read_as_the_next_calls() -> None:
    """A call times out while the server stands still, its answer still to come on the kept
    connection: the connection is dropped with the call (a StoreError that may have applied),
    and the next call, on a fresh one, gets its own answer, not the stale one."""
    with ValkeyServer() as node:
        store = ValkeyStore(node.url, timeout=0.3, prefix="stall:")
        assert claim(store, "warm", "a")[0]
        node.pause()
        try:
            with pytest.raises(StoreError) as caught:
                claim(store, "k-1", "a")
        finally:
            node.resume()
        assert caught.value.maybe_applied and caught.value.retryable
        for i in range(5):
            won, held = claim(store, f"k-{i + 2}", f"owner-{i}")
            assert won and held is None, (i, won, held)
        won, held = claim(store, "k-1", "b")
        assert not won and held is not None and held.owner == "a"  # the stalled claim landed
        store.close()


def test_a_kept_connection_the_server_closed_is_replaced_before_anything_is_sent(
    valkey_node: ValkeyServer, store: ValkeyStore
) -> None:
    charge, effects = charge_on(store)
    charge({"order_id": "o-1"}, None)
    with redis.Redis.from_url(valkey_node.url) as admin:
        assert admin.client_kill_filter(_type="normal", skip_me=True) >= 1
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1", "amount": 1}
    charge({"order_id": "o-2"}, None)
    assert effects == ["o-1", "o-2"]


def test_scripts_flushed_are_loaded_again_on_the_kept_connection(
    valkey_node: ValkeyServer, store: ValkeyStore
) -> None:
    charge, effects = charge_on(store)
    charge({"order_id": "o-1"}, None)
    with redis.Redis.from_url(valkey_node.url) as admin:
        admin.script_flush()
    assert charge({"order_id": "o-1"}, None) == {"charged": "o-1", "amount": 1}
    charge({"order_id": "o-2"}, None)
    assert effects == ["o-1", "o-2"]


def test_many_threads_share_a_few_kept_connections_and_each_key_runs_once(
    store: ValkeyStore,
) -> None:
    charge, effects = charge_on(store)
    keys = [f"o-{i % 40}" for i in range(400)]
    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(lambda k: charge({"order_id": k}, None)["charged"], keys))
    assert answers == keys
    assert sorted(effects) == sorted(set(keys))
    assert store._lean is not None and store._lean._taken <= lean.KEPT


def test_a_forked_child_never_reads_its_parents_kept_connection(store: ValkeyStore) -> None:
    """The parent used a kept connection; a forked child and the parent then call at once,
    each on many keys: every answer is the caller's own (never the other process's)."""
    charge, _ = charge_on(store)
    charge({"order_id": "warm"}, None)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        ok = True
        try:
            for i in range(200):
                ok &= charge({"order_id": f"child-{i}", "amount": i}, None)["amount"] == i
        except Exception:
            ok = False
        os.write(write, json.dumps(ok).encode())
        os._exit(0)
    os.close(write)
    results = [charge({"order_id": f"parent-{i}", "amount": i}, None)["amount"] for i in range(200)]
    os.waitpid(pid, 0)
    child_ok = json.loads(os.read(read, 100))
    os.close(read)
    assert results == list(range(200))
    assert child_ok is True


def test_a_thread_that_ends_leaves_its_kept_connection_to_the_others(store: ValkeyStore) -> None:
    charge, effects = charge_on(store)
    for i in range(20):
        thread = threading.Thread(target=charge, args=({"order_id": f"o-{i}"}, None))
        thread.start()
        thread.join()
    assert len(effects) == 20
    assert store._lean is not None and store._lean._taken == 1


class Interrupted(BaseException):
    """A signal's exception (a time-out's, SIGTERM's) raised between the send and the read."""


def test_a_call_interrupted_between_send_and_read_leaves_no_answer_for_the_next(
    store: ValkeyStore,
) -> None:
    assert claim(store, "warm", "a")[0]
    assert store._lean is not None
    lean = store._lean
    real = lean._replies

    class Reader:
        def read(self, connection: Any) -> Any:
            lean._replies = real
            raise Interrupted

    lean._replies = Reader()
    with pytest.raises(Interrupted):
        claim(store, "k-1", "a")  # sent; its answer left unread on the connection
    for i in range(3):
        won, held = claim(store, f"k-{i + 2}", f"owner-{i}")
        assert won and held is None, (i, won, held)
    won, held = claim(store, "k-1", "b")
    assert not won and held is not None and held.owner == "a"


class FailingSends:
    """A kept connection's socket whose sends fail with `fault`; all else the real socket's."""

    def __init__(self, real: Any, fault: BaseException) -> None:
        self._real, self._fault, self.sends = real, fault, 0

    def sendall(self, data: bytes) -> None:
        self.sends += 1
        raise self._fault

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize(
    ("fault", "code"),
    [
        (TimeoutError("timed out"), "TimeoutError"),
        (BrokenPipeError(32, "Broken pipe"), "ConnectionError"),
        (ConnectionResetError("reset"), "ConnectionError"),
        (OSError(), "ConnectionError"),  # no errno, no text: redis-py's own send fails on it
    ],
)
def test_a_send_the_socket_refuses_is_a_store_error_and_the_next_call_reconnects(
    store: ValkeyStore, fault: BaseException, code: str
) -> None:
    """The lean path sends on the kept socket itself (redis-py's send written out): a send
    that fails is redis-py's error for it, a StoreError that may have applied (a send can
    fail half done), and the connection is dropped, so nothing half sent is followed."""
    assert claim(store, "warm", "a")[0]
    assert store._lean is not None
    connection = store._lean._free[-1]
    failing = FailingSends(connection._sock, fault)
    connection._sock = failing
    with pytest.raises(StoreError) as caught:
        claim(store, "k-1", "a")
    assert failing.sends == 1
    assert (caught.value.code, caught.value.retryable, caught.value.maybe_applied) == (
        code,
        True,
        True,
    )
    assert connection._sock is None  # dropped with the failed send
    won, held = claim(store, "k-1", "b")  # nothing left: the claim is b's, on a fresh socket
    assert won and held is None
    assert store._lean._taken == 1


def test_a_wrapper_of_redis_pys_send_sees_every_lean_call(
    store: ValkeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another library's wrapper of `send_packed_command` (a counter, a tracer of sends) is
    called for each script the lean path sends: it writes the send out only where redis-py's
    own would run."""
    assert claim(store, "warm", "a")[0]
    assert store._lean is not None
    kept = set(store._lean._kept)
    real = redis.connection.AbstractConnection.send_packed_command
    seen: list[Any] = []

    def counting(connection: Any, command: Any, check_health: bool = True) -> None:
        seen.append(connection)
        real(connection, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
    for i in range(3):
        assert claim(store, f"k-{i}", "a")[0]
    assert len(seen) == 3 and set(seen) <= kept  # each on a kept connection: the lean path
    monkeypatch.undo()
    assert claim(store, "k-9", "a")[0]
    assert len(seen) == 3


def test_a_callable_set_as_execute_command_that_claims_redis_module_is_not_redis_pys_own(
    monkeypatch: pytest.MonkeyPatch, valkey_node: ValkeyServer
) -> None:
    """An object set in place of `Redis.execute_command` that says it is from redis.client
    (but, being no function, has no `__qualname__`) is neither taken for redis-py's own nor a
    crash: the store sends every script through it."""
    calls: list[Any] = []
    real = redis.Redis.execute_command

    class Impostor:
        __module__ = "redis.client"

        def __get__(self, client: Any, owner: Any = None) -> Any:
            if client is None:
                return self  # on the class: itself, as the lean path looks it up

            def bound(*args: Any, **options: Any) -> Any:
                calls.append(args[0])
                return real(client, *args, **options)

            return bound

    monkeypatch.setattr(redis.Redis, "execute_command", Impostor())
    store = ValkeyStore(valkey_node.url, prefix=f"lean-{uuid.uuid4().hex[:8]}:")
    try:
        assert claim(store, "k-1", "a")[0]
        assert store._lean is not None and not store._lean.serves()
        assert calls and calls[-1] == "EVALSHA"
    finally:
        store.close()


@pytest.mark.parametrize(("step", "applied"), [("get", False), ("scan", False), ("claim", True)])
def test_a_call_cut_by_close_may_have_applied_only_if_it_writes(
    store: ValkeyStore, step: str, applied: bool
) -> None:
    """A call another thread's close() cut is ClosedMidCall, retryable: a read (get, scan)
    applied nothing, a write may have."""
    assert claim(store, "warm", "a")[0]

    def cut(client: Any) -> Any:
        store.close()
        raise OSError("torn down by close()")

    with pytest.raises(StoreError) as caught:
        store._call(step, "pk-1", cut)
    assert (caught.value.code, caught.value.retryable, caught.value.maybe_applied) == (
        "ClosedMidCall",
        True,
        applied,
    )


def test_a_client_that_cannot_be_built_names_the_key_of_the_first_call() -> None:
    """A cluster store with no node to reach fails its first call (a read, before anything
    else built the client) with a StoreError that carries that call's key hash. (Port 1: no
    later test's server can take it, as one could a port freed by a stopped server.)"""
    store = ValkeyStore("redis://127.0.0.1:1", cluster=True, timeout=1, prefix="unbuilt:")
    with pytest.raises(StoreError) as caught:
        store.get("pk-first")
    assert caught.value.key_hash == "pk-first"
    store.close()
