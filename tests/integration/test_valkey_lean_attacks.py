"""Attacks on the lean path of a ValkeyStore built from a URL (`_stores.valkey.lean`), on real
servers, effects counted: each call's answer is its own (stalls, kills, restarts, signals,
threads, async, huge and binary results, odd keys, a store closed mid-call), the path steps
aside for tracers and redis-py's metrics, errors mean what they mean on a store given a
client, and waiters share the pool with first calls. The round found three defects, each a
strict xfail first and now a plain test: a hand-written tracer set before the store was built
was bypassed; a URL's `encoding` split one key between the lean path and the client's; a
store closed by another thread mid-call let redis-py's raw exceptions out."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

from lambda_idempotency import StoreError, ValkeyStore, idempotent
from lambda_idempotency._dev.valkey_local import ValkeyServer
from lambda_idempotency._stores.valkey import lean

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(3)]


def prefix() -> str:
    return f"hl-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
def store(valkey_node: ValkeyServer) -> Iterator[ValkeyStore]:
    built = ValkeyStore(valkey_node.url, prefix=prefix())
    yield built
    built.close()


def charge_on(store: ValkeyStore, **options: Any) -> tuple[Any, list[str]]:
    effects: list[str] = []
    options.setdefault("on_in_progress", "wait")

    @idempotent(key="order_id", store=store, cache_size=0, **options)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        if event.get("work"):
            time.sleep(event["work"])
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


def flags(exc: BaseException) -> tuple[Any, ...]:
    assert isinstance(exc, StoreError), repr(exc)
    return (exc.code, exc.retryable, exc.maybe_applied)


def lean_store(url: str, **options: Any) -> ValkeyStore:
    return ValkeyStore(url, prefix=options.pop("prefix", "cmp:"), **options)


def given_store(url: str, **options: Any) -> ValkeyStore:
    timeout = options.pop("timeout", 5.0)
    client = redis.Redis.from_url(url, socket_timeout=timeout)
    return ValkeyStore(client=client, prefix=options.pop("prefix", "cmp:"), **options)


BUILDERS = {"lean": lean_store, "client": given_store}


def served_lean(store: ValkeyStore) -> bool:
    return store._lean is not None and store._lean._taken > 0


# -- 2. stepping aside ------------------------------------------------------------------------


def test_a_hand_written_tracer_installed_before_the_first_call_sees_every_script(
    valkey_node: ValkeyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The simplest tracer: a function of one's own set on `redis.Redis.execute_command`,
    calling the original (no `__wrapped__`), installed at start-up."""
    seen: list[str] = []
    original = redis.Redis.execute_command

    def traced(self: Any, *args: Any, **options: Any) -> Any:
        seen.append(str(args[0]))
        return original(self, *args, **options)

    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    built = ValkeyStore(valkey_node.url, prefix=prefix())
    charge, effects = charge_on(built)
    charge({"order_id": "o-1"}, None)
    charge({"order_id": "o-1"}, None)
    built.close()
    assert effects == ["o-1"]
    # claim, completion, the replay's claim; each script's first EVALSHA on this fresh
    # server is refused (NOSCRIPT), loaded, and sent again, all through the tracer
    assert seen.count("EVALSHA") - seen.count("SCRIPT LOAD") == 3


@pytest.mark.parametrize("installed", ["before the first call", "after the first call"])
def test_a_wrapt_tracer_sees_every_script(valkey_node: ValkeyServer, installed: str) -> None:
    import wrapt

    seen: list[str] = []
    original = redis.Redis.__dict__["execute_command"]

    def tracer(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(str(args[0]))
        return wrapped(*args, **kwargs)

    def install() -> None:
        wrapt.wrap_function_wrapper(redis.Redis, "execute_command", tracer)

    try:
        if installed == "before the first call":
            install()
        built = ValkeyStore(valkey_node.url, prefix=prefix())
        charge, effects = charge_on(built)
        charge({"order_id": "o-0"}, None)
        if installed == "after the first call":
            install()
        seen.clear()
        charge({"order_id": "o-1"}, None)
        charge({"order_id": "o-1"}, None)
        built.close()
    finally:
        redis.Redis.execute_command = original  # type: ignore[method-assign]
    assert seen.count("EVALSHA") == 3
    assert effects == ["o-0", "o-1"]


def test_redis_pys_own_command_metrics_count_every_script() -> None:
    """redis-py 8's observability on for real (an in-memory OpenTelemetry reader): each script
    of the store is counted, none skipped by the lean path."""
    pytest.importorskip("redis.observability.config")
    from opentelemetry import metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from redis.observability import recorder
    from redis.observability.config import MetricGroup, OTelConfig
    from redis.observability.providers import get_observability_instance

    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    # redis-py 8 records a pool's connections from its __del__: an earlier test's pool
    # collected while redis-py creates its instruments re-enters OpenTelemetry's meter lock
    # and deadlocks (seen once in a suite run): collected now, and no collection meanwhile
    gc.collect()
    gc.disable()
    otel = get_observability_instance()
    otel.init(OTelConfig(metric_groups=[MetricGroup.COMMAND]))
    recorder._metrics_collector = None
    try:
        with ValkeyServer() as node:
            built = ValkeyStore(node.url, prefix=prefix())
            charge, effects = charge_on(built)
            charge({"order_id": "o-1"}, None)
            charge({"order_id": "o-1"}, None)
            built.close()
        data = reader.get_metrics_data()
    finally:
        otel.shutdown()
        recorder._metrics_collector = None
        gc.enable()
    counted = 0
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "db.client.operation.duration":
                    continue
                for point in metric.data.data_points:
                    if point.attributes.get("db.operation.name") == "EVALSHA":
                        counted += point.count
    assert effects == ["o-1"]
    assert counted == 3


def test_a_url_naming_an_encoding_writes_one_key_on_both_paths(
    valkey_node: ValkeyServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A URL may name the client's encoding (`?encoding=latin-1`, passed on by redis-py); a
    prefix with a non-ASCII letter. The first call goes lean; a tracer installed afterwards
    sends the retry through the client."""
    built = ValkeyStore(valkey_node.url + "?encoding=latin-1", prefix=f"caf\u00e9-{prefix()}")
    charge, effects = charge_on(built)
    charge({"order_id": "o-1"}, None)
    original = redis.Redis.execute_command

    def traced(self: Any, *args: Any, **options: Any) -> Any:
        return original(self, *args, **options)

    traced.__wrapped__ = original  # type: ignore[attr-defined]
    monkeypatch.setattr(redis.Redis, "execute_command", traced)
    charge({"order_id": "o-1"}, None)
    built.close()
    assert effects == ["o-1"]


def test_a_store_given_a_client_never_goes_lean(valkey_node: ValkeyServer) -> None:
    built = given_store(valkey_node.url, prefix=prefix())
    charge, effects = charge_on(built)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: charge({"order_id": f"o-{i % 4}"}, None), range(32)))
    assert built._lean is None
    assert sorted(effects) == [f"o-{i}" for i in range(4)]
    built.client.close()


# -- 3. errors keep their meaning -------------------------------------------------------------


def fault_flags(build: Callable[..., ValkeyStore], url: str, fault: Callable[[], Any]) -> Any:
    """The flags of a claim's StoreError on a warmed store once `fault` happened."""
    built = build(url, prefix=prefix(), timeout=0.5)
    assert claim(built, "warm", "a")[0]
    undo = fault()
    try:
        with pytest.raises(StoreError) as caught:
            claim(built, f"k-{uuid.uuid4().hex}", "a")
    finally:
        if callable(undo):
            undo()
    return flags(caught.value)


@pytest.mark.parametrize("path", ["lean", "client"])
def test_a_timeout_after_the_request_left_may_have_applied(path: str) -> None:
    with ValkeyServer() as node:
        got = fault_flags(BUILDERS[path], node.url, lambda: (node.pause(), node.resume)[1])
    assert got == ("TimeoutError", True, True)


@pytest.mark.parametrize("path", ["lean", "client"])
def test_a_server_gone_sent_nothing(path: str) -> None:
    """Built from a URL: nothing was sent. A client given may retry, so its store says
    maybe (docs/valkey.md, Errors)."""
    with ValkeyServer() as node:
        got = fault_flags(BUILDERS[path], node.url, node.kill)
    assert got == ("ConnectionError", True, path == "client")


@pytest.mark.parametrize("path", ["lean", "client"])
def test_a_connection_killed_mid_call_may_have_applied(path: str) -> None:
    """The server holds the script (CLIENT PAUSE WRITE) and then kills the connection it
    came on: the request left, so it may have applied."""
    with ValkeyServer() as node, redis.Redis.from_url(node.url) as admin:
        built = BUILDERS[path](node.url, prefix=prefix())
        assert claim(built, "warm", "a")[0]
        admin.execute_command("CLIENT", "PAUSE", "2000", "WRITE")
        caught: list[BaseException] = []

        def call() -> None:
            try:
                claim(built, "k-1", "a")
            except BaseException as exc:
                caught.append(exc)

        thread = threading.Thread(target=call)
        thread.start()
        time.sleep(0.3)
        admin.client_kill_filter(_type="normal", skip_me=True)
        admin.execute_command("CLIENT", "UNPAUSE")
        thread.join(10)
        assert len(caught) == 1
        assert flags(caught[0]) == ("ConnectionError", True, True)
        won, held = claim(built, "k-2", "b")
        assert won and held is None


@pytest.mark.parametrize("path", ["lean", "client"])
def test_a_replica_refuses_with_readonly(path: str, valkey_pair: Any) -> None:
    built = BUILDERS[path](valkey_pair.replica.url, prefix=prefix())
    with pytest.raises(StoreError) as caught:
        claim(built, "k-1", "a")
    assert flags(caught.value) == ("ReadOnlyError", True, False)


@pytest.mark.parametrize("path", ["lean", "client"])
def test_out_of_memory_is_a_refusal(path: str) -> None:
    with ValkeyServer("--maxmemory-policy", "noeviction") as node:
        built = BUILDERS[path](node.url, prefix=prefix())
        assert claim(built, "k-1", "a")[0]
        now = now_ms()
        extend = {"owner": "a", "payload_hash": None, "claimed_at_ms": None}
        extend.update(lease_until_ms=now + 90_000, expiration_s=now // 1000 + 600)
        with redis.Redis.from_url(node.url) as admin:
            admin.config_set("maxmemory", "1")
            try:
                # a claim is refused as an extension is (docs/valkey.md, Errors)
                with pytest.raises(StoreError) as refused:
                    claim(built, "k-2", "a")
                with pytest.raises(StoreError) as caught:
                    built.extend_lease("k-1", **extend)
            finally:
                admin.config_set("maxmemory", "0")
        assert flags(refused.value) == ("OOM", True, False)
        assert built.get("k-2") is None
        assert flags(caught.value) == ("OOM", True, False)
        assert built.extend_lease("k-1", **extend) == (True, None)


@pytest.mark.parametrize("path", ["lean", "client"])
def test_a_key_that_is_not_a_hash_is_unreadable(path: str, valkey_node: ValkeyServer) -> None:
    built = BUILDERS[path](valkey_node.url, prefix=prefix())
    with redis.Redis.from_url(valkey_node.url) as admin:
        admin.set(built.key_of("k-1"), b"not a hash")
    with pytest.raises(StoreError) as caught:
        claim(built, "k-1", "a")
    assert caught.value.code == "StoredRecordUnreadable" or "unreadable" in str(caught.value)
    assert flags(caught.value)[1:] == (False, False)
    assert claim(built, "k-2", "a")[0]


@pytest.mark.parametrize("path", ["lean", "client"])
def test_scripts_flushed_between_every_call_are_reloaded(path: str, valkey_node: Any) -> None:
    built = BUILDERS[path](valkey_node.url, prefix=prefix())
    charge, effects = charge_on(built)
    with redis.Redis.from_url(valkey_node.url) as admin:
        for i in range(6):
            admin.script_flush()
            assert charge({"order_id": f"o-{i // 2}", "amount": i // 2}, None)["amount"] == i // 2
    assert effects == ["o-0", "o-1", "o-2"]


# -- 1. every call its own answer -------------------------------------------------------------


def test_calls_in_flight_when_the_server_stalls_leave_no_stale_answer() -> None:
    """Eight threads' claims time out while the server stands still (every kept connection
    and some pooled ones hold an answer to come); after it resumes, each call is its own."""
    with ValkeyServer() as node:
        built = ValkeyStore(node.url, timeout=0.4, prefix=prefix())
        charge, effects = charge_on(built)
        charge({"order_id": "warm"}, None)
        node.pause()
        try:
            with ThreadPoolExecutor(8) as pool:
                outcomes = list(pool.map(lambda i: _try(charge, {"order_id": f"s-{i}"}), range(8)))
        finally:
            node.resume()
        assert all(isinstance(o, StoreError) and o.maybe_applied for o in outcomes)
        with ThreadPoolExecutor(8) as pool:
            answers = list(
                pool.map(lambda i: charge({"order_id": f"n-{i}", "amount": i}, None), range(64))
            )
        assert [a["amount"] for a in answers] == list(range(64))
        assert sorted(e for e in effects if e.startswith("n-")) == sorted(
            f"n-{i}" for i in range(64)
        )
        built.close()


def _try(call: Callable[..., Any], event: dict[str, Any]) -> Any:
    try:
        return call(event, None)
    except StoreError as exc:
        return exc


def test_a_server_restarted_on_its_port_serves_every_next_call() -> None:
    with ValkeyServer() as first:
        port, url = first.port, first.url
        built = ValkeyStore(url, prefix=prefix())
        charge, effects = charge_on(built)
        with ThreadPoolExecutor(4) as pool:  # four kept connections
            list(pool.map(lambda i: charge({"order_id": f"a-{i}", "work": 0.05}, None), range(8)))
    with ValkeyServer(port=port):
        answers = [charge({"order_id": f"b-{i}", "amount": i}, None)["amount"] for i in range(8)]
    built.close()
    assert answers == list(range(8))
    assert sorted(effects[:8]) == [f"a-{i}" for i in range(8)]
    assert effects[8:] == [f"b-{i}" for i in range(8)]


class AlarmError(Exception):
    pass


def test_a_real_signal_between_send_and_read_leaves_no_answer_for_the_next() -> None:
    """SIGALRM's handler raises while a claim waits for a stalled server's answer."""

    def ring(signum: int, frame: Any) -> None:
        raise AlarmError

    with ValkeyServer() as node:
        built = ValkeyStore(node.url, prefix=prefix())
        assert claim(built, "warm", "a")[0]
        previous = signal.signal(signal.SIGALRM, ring)
        node.pause()
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(AlarmError):
                claim(built, "k-1", "a")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            node.resume()
            signal.signal(signal.SIGALRM, previous)
        for i in range(6):
            won, held = claim(built, f"k-{i + 2}", f"owner-{i}")
            assert won and held is None, (i, won, held)
        won, held = claim(built, "k-1", "b")
        assert not won and held is not None and held.owner == "a"
        built.close()


def test_two_hundred_threads_at_once_each_get_their_own_answer(store: ValkeyStore) -> None:
    charge, effects = charge_on(store)
    start = threading.Barrier(200)
    answers: dict[int, Any] = {}

    def run(i: int) -> None:
        start.wait()
        answers[i] = charge({"order_id": f"o-{i % 50}", "amount": i % 50}, None)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert {i: a["amount"] for i, a in answers.items()} == {i: i % 50 for i in range(200)}
    assert sorted(effects) == sorted(f"o-{i}" for i in range(50))
    assert store._lean is not None and store._lean._taken <= lean.KEPT


def test_async_handlers_each_get_their_own_answer(store: ValkeyStore) -> None:
    effects: list[str] = []

    @idempotent(key="order_id", store=store, cache_size=0, on_in_progress="wait")
    async def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["order_id"])
        await asyncio.sleep(0.01)
        return {"amount": event["amount"]}

    async def main() -> list[Any]:
        events = [{"order_id": f"o-{i % 30}", "amount": i % 30} for i in range(120)]
        return await asyncio.gather(*(charge(e, None) for e in events))

    answers = asyncio.run(main())
    assert [a["amount"] for a in answers] == [i % 30 for i in range(120)]
    assert sorted(effects) == sorted(f"o-{i}" for i in range(30))
    assert served_lean(store)


def test_huge_binary_results_and_odd_keys_read_the_same_on_both_paths(
    valkey_node: ValkeyServer,
) -> None:
    """A lean store writes MBs of every code point and RESP-looking bytes under keys with
    braces and unicode; a store given a client (same prefix) replays them, and the lean one."""
    shared = prefix()
    built = ValkeyStore(valkey_node.url, prefix=shared)
    given = given_store(valkey_node.url, prefix=shared)
    blob = "".join(map(chr, range(0xD800))) + "\r\n$-1\r\n*3\r\n:1\r\n" + "\x00" * 1000
    effects: list[str] = []

    def handler_on(on: ValkeyStore) -> Any:
        @idempotent(key="order_id", store=on, cache_size=0, namespace="hl.huge")
        def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
            effects.append(event["order_id"])
            return {"blob": blob * event["times"], "key": event["order_id"]}

        return charge

    lean_charge, given_charge = handler_on(built), handler_on(given)
    keys = ["}{", "{x}\u00fcn\u00efc\u00f6d\u00e9 \U0001f600", "a}b{c", "\r\n*1\r\n"]
    for i, key in enumerate(keys):
        first = lean_charge({"order_id": key, "times": 1 + 30 * (i == 0)}, None)
        assert first["key"] == key
        assert given_charge({"order_id": key, "times": 1 + 30 * (i == 0)}, None) == first
        assert lean_charge({"order_id": key, "times": 1 + 30 * (i == 0)}, None) == first
    assert len(first["blob"]) > 0 and effects == keys
    assert served_lean(built)
    built.close()
    given.client.close()


def test_a_forked_child_and_its_parent_calling_with_threads_keep_their_answers(
    store: ValkeyStore,
) -> None:
    charge, _ = charge_on(store)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: charge({"order_id": f"warm-{i}", "work": 0.02}, None), range(8)))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: four threads at once
        ok = False
        try:
            with ThreadPoolExecutor(4) as pool:
                got = list(
                    pool.map(lambda i: charge({"order_id": f"c-{i}", "amount": i}, None), range(80))
                )
            ok = [g["amount"] for g in got] == list(range(80))
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda i: charge({"order_id": f"p-{i}", "amount": i}, None), range(80)))
    os.waitpid(pid, 0)
    child = os.read(read, 1)
    os.close(read)
    assert [g["amount"] for g in got] == list(range(80))
    assert child == b"1"


# -- 4. waiters beside first calls ------------------------------------------------------------


def test_waiters_and_first_calls_share_the_pool(store: ValkeyStore) -> None:
    charge, effects = charge_on(store)
    errors: list[BaseException] = []
    answers: list[Any] = []

    def run(event: dict[str, Any]) -> None:
        try:
            answers.append(charge(event, None)["charged"])
        except BaseException as exc:
            errors.append(exc)

    holder = threading.Thread(target=run, args=({"order_id": "hot", "work": 1.0},))
    holder.start()
    time.sleep(0.1)
    hot = {"order_id": "hot", "work": 1.0}
    waiters = [threading.Thread(target=run, args=(hot,)) for _ in range(150)]
    firsts = [threading.Thread(target=run, args=({"order_id": f"f-{i}"},)) for i in range(40)]
    for thread in waiters + firsts:
        thread.start()
    for thread in [holder, *waiters, *firsts]:
        thread.join(60)
    assert errors == []
    assert sorted(effects) == sorted(["hot"] + [f"f-{i}" for i in range(40)])
    assert answers.count("hot") == 151


# -- 5. close ---------------------------------------------------------------------------------


def test_close_then_calls_work(store: ValkeyStore) -> None:
    charge, effects = charge_on(store)
    for i in range(5):
        assert charge({"order_id": f"o-{i}", "amount": i}, None)["amount"] == i
        store.close()
        assert charge({"order_id": f"o-{i}", "amount": i}, None)["amount"] == i
    assert effects == [f"o-{i}" for i in range(5)]


def closed_while_calling(store: ValkeyStore) -> tuple[list[Any], list[BaseException], list[str]]:
    """Six threads call on fresh keys for a second while a seventh closes the store every
    5 ms: (wrong answers, failures, effects)."""
    charge, effects = charge_on(store)
    wrong: list[Any] = []
    failures: list[BaseException] = []
    stop = time.monotonic() + 1.0

    def caller(n: int) -> None:
        i = 0
        while time.monotonic() < stop:
            key = f"t{n}-{i}"
            try:
                got = charge({"order_id": key, "amount": i}, None)
                if got != {"charged": key, "amount": i}:
                    wrong.append((key, got))
            except BaseException as exc:
                failures.append(exc)
            i += 1

    def closer() -> None:
        while time.monotonic() < stop:
            store.close()
            time.sleep(0.005)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(6)]
    threads.append(threading.Thread(target=closer))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return wrong, failures, effects


def test_a_store_closed_while_threads_call_never_answers_wrong(store: ValkeyStore) -> None:
    wrong, _, effects = closed_while_calling(store)
    assert wrong == []
    assert len(effects) == len(set(effects)) > 0


def test_a_store_closed_while_threads_call_fails_only_with_store_errors(
    store: ValkeyStore,
) -> None:
    _, failures, _ = closed_while_calling(store)
    assert all(isinstance(f, StoreError) for f in failures), {type(f) for f in failures}
