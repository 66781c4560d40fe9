"""Attacks on ValkeyStore from its promise (docs/valkey.md, docs/protocol.md), on real servers.

Each test states the promise it attacks. A test marked xfail(strict) shows a defect found:
it fails on the code as it is and turns red (XPASS) the day the defect is fixed. The rest
guard promises the attacks could not break."""

from __future__ import annotations

import contextlib
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
    ResultNotSerializableError,
    Status,
    StoreError,
    ValkeyStore,
    idempotent,
)
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyServer
from tests.conftest import call_until_the_key_frees

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
    assert calls["evalsha"] <= 20, (
        f"{calls['evalsha']} scripts (claims, arms, reads) in about one second"
    )


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


def test_a_warm_cache_whose_clock_runs_ten_minutes_behind_keeps_a_result_no_longer_than_the_server(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a key runs again once its TTL ends on the server's clock; a container whose
    clock runs behind does not go on replaying the result from its warm cache for as long
    as its clock is off."""
    store = fresh(valkey_node.url)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return f"answer-{len(effects)}"

    options: dict[str, Any] = {"key": "id", "store": store, "ttl_seconds": 1}
    writer = idempotent(cache_size=0, clock_skew_seconds=0, **options)(body)
    behind = idempotent(clock_skew_seconds=0, clock=SkewedClock(-600_000), **options)(body)
    assert writer({"id": "t-1"}, None) == "answer-1"
    assert behind({"id": "t-1"}, None) == "answer-1"  # from the server, into its cache
    assert behind.idempotency.stats["replayed"] == 1
    time.sleep(2.5)  # the record's TTL (its whole last second) ends on the server
    assert behind({"id": "t-1"}, None) == "answer-2"
    assert effects == ["t-1", "t-1"]


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
    try:
        assert handle({"id": "h-1"}, None) == "done"
        assert handle({"id": "h-1"}, None) == "done"
        assert effects == ["h-1"]
    except StoreError as exc:
        keys = store.client.keys(store.prefix + "*")
        ttls = [store.client.pttl(k) for k in keys]
        raise AssertionError(
            f"StoreError {exc.code} maybe_applied={exc.maybe_applied}; keys left {ttls} "
            "(-1: no expiry)"
        ) from exc


def test_a_waiter_whose_clock_runs_behind_runs_the_key_once_the_holder_released_it(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: the server's clock decides: a holder that fails releases its key, and a
    duplicate waiting for it claims the key and runs, whatever its own clock says."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    running = threading.Event()

    def failing(event: dict[str, Any], context: Any) -> str:
        effects.append("holder")
        running.set()
        time.sleep(0.5)
        raise RuntimeError("the holder fails")

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append("waiter")
        return "charged"

    holder = idempotent(key="id", store=store, namespace="rel", lease_seconds=30, cache_size=0)(
        failing
    )
    waiter = idempotent(
        key="id",
        store=store,
        namespace="rel",
        lease_seconds=30,
        cache_size=0,
        on_in_progress="wait",
        max_wait_seconds=4,
        clock=SkewedClock(-HOUR),
    )(body)
    errors: list[BaseException] = []

    def run_holder() -> None:
        try:
            holder({"id": "b-1"}, None)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=run_holder)
    thread.start()
    assert running.wait(10)
    try:
        answer = waiter({"id": "b-1"}, None)
    finally:
        thread.join(10)
    assert answer == "charged"
    assert effects == ["holder", "waiter"]


# -- hostile keys, namespaces, records --------------------------------------------------------


@pytest.mark.parametrize("where", ["valkey_node", "valkey_cluster"])
@pytest.mark.parametrize(
    ("namespace", "key"),
    [
        ("a}b{c", "{k}"),
        ("}", "}{"),
        ("{", "\x00\xff binary"),
        ("ünï{cödé}", "ключ " * 20_000),
    ],
    ids=["braces", "closing-first", "opening-only", "unicode-huge"],
)
def test_braces_and_hostile_keys_in_namespace_or_key_keep_one_run_per_key(
    where: str, namespace: str, key: str, request: pytest.FixtureRequest
) -> None:
    """Promise: a key and everything of it sit in one slot and every script touches one
    node, whatever the namespace and key hold (braces break no hash tag); one run per key,
    a replay after it, and another key is another run."""
    server = request.getfixturevalue(where)
    store = fresh(server.url, cluster=where == "valkey_cluster")
    effects: list[str] = []

    @idempotent(key="id", store=store, namespace=namespace, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> int:
        effects.append(event["id"])
        return len(effects)

    assert handle({"id": key}, None) == 1
    assert handle({"id": key}, None) == 1
    assert handle({"id": key + "2"}, None) == 2
    assert len(effects) == 2
    pk = store.layout.record_key(namespace, None, key)
    record = store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert key not in store.key_of(pk) or len(key) < 3


def test_scan_stuck_on_a_cluster_finds_the_stuck_claims_of_every_node(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Promise: the operator's scan_stuck reads every primary of a cluster."""
    store = fresh(valkey_cluster.url, cluster=True)
    pks = [store.layout.record_key("stuck", None, f"k{i}") for i in range(30)]
    for pk in pks:
        assert claim(store, pk, owner(), now_ms=now_ms() - 60_000)[0]
    nodes = {store.client.get_node_from_key(store.key_of(pk)).name for pk in pks}
    assert len(nodes) == 3
    now = now_ms()  # claims before the next millisecond, on the server's clock: all of them
    found = [
        record.pk
        for page in store.scan_stuck(claimed_before_ms=now + 1, now_ms=now, page_size=7)
        for record in page.records
    ]
    assert sorted(found) == sorted(pks)


def test_scan_stuck_lists_a_foreign_key_under_the_prefix_as_unreadable_and_goes_on(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a record this library never wrote is listed as unreadable, and the scan
    still finds the stuck claims beside it."""
    store = fresh(valkey_node.url)
    stuck = store.layout.record_key("stuck", None, "real")
    assert claim(store, stuck, owner(), now_ms=now_ms() - 60_000)[0]
    foreign = store.layout.record_key("stuck", None, "foreign")
    store.client.set(store.key_of(foreign), b"someone else's string")
    now = now_ms()  # claims before the next millisecond, on the server's clock
    pages = list(store.scan_stuck(claimed_before_ms=now + 1, now_ms=now))
    assert [r.pk for page in pages for r in page.records] == [stuck]
    assert [pk for page in pages for pk in page.unreadable] == [foreign]


@pytest.mark.parametrize(
    "stored",
    [
        {"status": "IN_PROGRESS", "owner": "x", "expiration": "9999999999", "frees_at": "soon"},
        {"status": "COMPLETED", "owner": "x", "expiration": "9999999999", "offset_ms": "?"},
        ["a", "list"],
        {"member"},
    ],
    ids=["garbled-frees_at", "garbled-offset", "list", "set"],
)
def test_a_garbled_or_foreign_record_is_a_typed_error_and_nothing_runs(
    valkey_node: ValkeyServer, stored: Any
) -> None:
    """Promise: whatever someone else left under the key, the handler does not run and the
    caller gets a StoreError naming no key; the foreign record is left as it was."""
    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent(key="id", store=store, namespace="g", cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "ran"

    name = store.key_of(store.layout.record_key("g", None, "raw-key-g"))
    if isinstance(stored, dict):
        store.client.hset(name, mapping=stored)
    elif isinstance(stored, list):
        store.client.rpush(name, *stored)
    else:
        store.client.sadd(name, *stored)
    with pytest.raises(StoreError) as caught:
        handle({"id": "raw-key-g"}, None)
    assert "raw-key-g" not in str(caught.value)
    assert effects == []
    assert store.client.type(name) == {dict: b"hash", list: b"list", set: b"set"}[type(stored)]
    if isinstance(stored, dict):
        assert store.client.hgetall(name) == {k.encode(): v.encode() for k, v in stored.items()}


# -- results ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["valkey_node", "valkey_cluster"])
@pytest.mark.parametrize("size", [6 * 1024 * 1024 + 1, 9 * 1024 * 1024], ids=["6MB+1", "9MB"])
def test_a_result_past_6_mb_runs_once_and_replays_or_names_why(
    where: str, size: int, request: pytest.FixtureRequest
) -> None:
    """Promise: results up to 6 MB replay as they were, and one too big to store completes
    its key with a marker (the retry gets a typed error): never a second run."""
    server = request.getfixturevalue(where)
    store = fresh(server.url, cluster=where == "valkey_cluster")
    effects: list[str] = []

    @idempotent(key="id", store=store, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> bytes:
        effects.append(event["id"])
        return secrets.token_bytes(16) + b"x" * (size - 16)

    first = handle({"id": "big"}, None)
    assert len(first) == size
    with contextlib.suppress(ResultNotSerializableError):  # too big to store: a marker
        assert handle({"id": "big"}, None) == first
    assert effects == ["big"]


def test_a_result_json_cannot_hold_completes_the_key_and_its_retry_names_why(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a result that cannot be stored still completes its key with a NOT_STORED
    marker: the first caller gets it, the retry a typed error, the handler runs once."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    made = object()

    @idempotent(key="id", store=store, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> object:
        effects.append(event["id"])
        return made

    assert handle({"id": "o"}, None) is made
    with pytest.raises(ResultNotSerializableError):
        handle({"id": "o"}, None)
    assert effects == ["o"]


# -- logs -------------------------------------------------------------------------------------

RAW_KEY, RAW_PAYLOAD = "RAW-KEY-5f1e", "RAW-PAYLOAD-93ab"


def test_no_log_line_or_error_carries_a_raw_key_or_payload(
    valkey_node: ValkeyServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Promise: no raw key or payload in any error message or log line, on every path:
    claim, replay, in progress, payload mismatch, a failing handler's release, a foreign
    record, a store error."""
    caplog.set_level(logging.DEBUG)
    store = fresh(valkey_node.url)
    running, finish = threading.Event(), threading.Event()
    shown: list[str] = []

    @idempotent(key="id", store=store, cache_size=0, namespace="logs")
    def handle(event: dict[str, Any], context: Any) -> str:
        if event.get("fail"):
            raise RuntimeError("failed")
        if event.get("slow"):
            running.set()
            finish.wait(10)
        return "ok"

    def attempt(event: dict[str, Any]) -> None:
        try:
            handle(event, None)
        except Exception as exc:
            shown.append(f"{type(exc).__name__}: {exc} {exc.args!r}")

    attempt({"id": RAW_KEY, "p": RAW_PAYLOAD})
    attempt({"id": RAW_KEY, "p": RAW_PAYLOAD})  # replay
    attempt({"id": RAW_KEY, "p": RAW_PAYLOAD + "-other"})  # mismatch
    attempt({"id": RAW_KEY + "-f", "p": RAW_PAYLOAD, "fail": True})  # released
    thread = threading.Thread(target=attempt, args=({"id": RAW_KEY + "-s", "slow": 1},))
    thread.start()
    assert running.wait(10)
    attempt({"id": RAW_KEY + "-s", "slow": 1})  # in progress
    finish.set()
    thread.join(10)
    store.client.set(store.key_of(store.layout.record_key("logs", None, RAW_KEY + "-x")), b"s")
    attempt({"id": RAW_KEY + "-x"})  # a foreign record
    broken = ValkeyStore("redis://127.0.0.1:1", prefix="atk-broken:")
    OPENED.append(broken)
    handle_broken = idempotent(key="id", store=broken, cache_size=0)(lambda e, c: "ok")
    try:
        handle_broken({"id": RAW_KEY, "p": RAW_PAYLOAD}, None)
    except StoreError as exc:
        shown.append(f"{exc} {exc.args!r}")

    assert any("PayloadMismatch" in text for text in shown)
    assert any("InProgress" in text for text in shown)
    assert len(shown) >= 5
    lines = [caplog.text, *shown]
    lines += [repr(getattr(r, "__dict__", {})) for r in caplog.records]
    leaked = [line for line in lines if RAW_KEY in line or RAW_PAYLOAD in line]
    assert leaked == []


# -- a holder past its lease ------------------------------------------------------------------


def test_a_holder_that_outlives_its_lease_unchallenged_still_records_its_result(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: the side effect happens once per key. A handler that runs past its lease
    and its short TTL while no other call took the key over still owns it (as on DynamoDB,
    where the completion is fenced on the owner token only: seen passing there): its result
    is recorded and replays, rather than dropped so that the retry runs the effect again."""
    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent(
        key="id", store=store, ttl_seconds=2, lease_seconds=1, clock_skew_seconds=0, cache_size=0
    )
    def handle(event: dict[str, Any], context: Any) -> int:
        effects.append(event["id"])
        if len(effects) == 1:
            time.sleep(4)  # past the lease and the claim's expiry, nobody else calling
        return len(effects)

    first = handle({"id": "slow"}, None)
    assert first == 1
    assert handle({"id": "slow"}, None) == 1
    assert effects == ["slow"]


# -- processes, lost answers, flushed scripts, failover -----------------------------------------

RACER = """
import sys, time
from lambda_idempotency import InProgressError, ValkeyStore, idempotent
url, prefix, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
store = ValkeyStore(url, prefix=prefix)

@idempotent(key="id", store=store, lease_seconds=30, on_in_progress="wait", cache_size=0)
def charge(event, context):
    store.client.rpush(prefix + "effects", b"1")
    time.sleep(0.3)
    return "charged"

time.sleep(max(0.0, start - time.time()))
print(charge({"id": "p-1"}, None))
store.close()
"""


def test_processes_racing_one_key_run_its_effect_once(valkey_node: ValkeyServer) -> None:
    """Promise: once per key across processes (no shared memory, each its own client):
    one runs, the others wait for its answer."""
    import os
    import subprocess
    import sys

    prefix = f"atk-proc-{uuid.uuid4().hex[:8]}:"
    start = time.time() + 2.0
    env = {**os.environ}
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, valkey_node.url, prefix, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(4)
    ]
    answers = [racer.communicate(timeout=60) for racer in racers]
    assert [out.strip() for out, _ in answers] == ["charged"] * 4, answers
    store = fresh(valkey_node.url)
    assert store.client.llen(prefix + "effects") == 1
    store.client.delete(prefix + "effects")


def test_a_completion_whose_answer_is_lost_is_recorded_once_and_replays(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: a completion that landed but whose answer was lost is not taken for a
    failure: the caller gets its result, the retry replays it, the effect ran once."""
    import redis

    scripts_seen: list[int] = []

    class LosingSecond(redis.Redis):
        def evalsha(self, *args: Any, **kwargs: Any) -> Any:
            answer = super().evalsha(*args, **kwargs)
            scripts_seen.append(1)
            if len(scripts_seen) == 2:  # the claim, then the completion
                raise redis.TimeoutError("Timeout reading from socket")
            return answer

    client = LosingSecond.from_url(valkey_node.url)
    OPENED.append(client)
    store = ValkeyStore(client=client, prefix=f"atk-lost-{uuid.uuid4().hex[:8]}:")
    effects: list[str] = []

    @idempotent(key="id", store=store, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "done"

    assert handle({"id": "c-1"}, None) == "done"
    assert handle({"id": "c-1"}, None) == "done"
    assert effects == ["c-1"]


def test_scripts_flushed_on_every_cluster_node_mid_run_leave_the_heartbeat_and_completion_whole(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Promise: scripts the servers forgot are loaded again: a heartbeat and the completion
    of a handler whose node flushed its scripts mid-run keep the key and record the result."""
    from lambda_idempotency import current_execution

    store = fresh(valkey_cluster.url, cluster=True)
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=1, clock_skew_seconds=0, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=1):
            for node in store.client.get_primaries():
                node.redis_connection.script_flush()
            time.sleep(2)
        return "done"

    other = fresh(valkey_cluster.url, cluster=True)
    other.prefix = store.prefix
    assert handle({"id": "f-1"}, None) == "done"
    assert handle({"id": "f-1"}, None) == "done"
    assert effects == ["f-1"]


def test_a_primary_demoted_mid_run_fails_the_completion_loudly_and_locks_no_longer_than_the_lease(
    valkey_failover_pair: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Promise: after a failover the old primary refuses the completion (READONLY, retried,
    then `completion_failed` logged and the result returned, as on DynamoDB); the claim left
    on the new primary holds the key while its lease lasts and frees when it ends (never
    locked longer), so the retry there runs."""
    pair = valkey_failover_pair
    old = fresh(pair.primary.url)
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            old.client.wait(1, 2000)  # the claim reached the replica
            pair.promote_replica()  # the replica is the primary now
            old.client.replicaof("127.0.0.1", pair.primary.port)  # the old one follows it
        return "done"

    first = idempotent(key="id", store=old, lease_seconds=2, clock_skew_seconds=0)(body)
    assert first({"id": "fo-1"}, None) == "done"
    failed = [r for r in caplog.records if "completion_failed" in r.getMessage()]
    assert failed and "ReadOnlyError" in failed[0].getMessage()
    assert "fo-1" not in caplog.text
    new = fresh(pair.primary.url)
    new.prefix = old.prefix
    second = idempotent(key="id", store=new, lease_seconds=2, clock_skew_seconds=0, cache_size=0)(
        body
    )
    with pytest.raises(InProgressError) as caught:
        second({"id": "fo-1"}, None)  # the claim replicated before the failover holds
    assert caught.value.retry_after is not None and caught.value.retry_after <= 3
    time.sleep(caught.value.retry_after + 0.2)
    assert second({"id": "fo-1"}, None) == "done"
    assert second({"id": "fo-1"}, None) == "done"
    assert len(effects) == 2


# -- a duplicate whose clock runs behind --------------------------------------------------------


def test_retry_after_for_a_caller_whose_clock_runs_behind_is_the_servers_lease(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: Retry-After is the first whole second at which a claim is granted; the
    server's clock decides when that is, not the duplicate's."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("ra", None, "k")
    namespace = pk.partition("#")[0]
    assert claim(store, pk, owner(), lease_ms=30_000, skew_ms=1_000)[0]
    behind = idempotent(
        key="id",
        store=store,
        namespace=namespace,
        cache_size=0,
        clock_skew_seconds=1,
        clock=SkewedClock(-600_000),
    )(lambda event, context: "ran")
    with pytest.raises(InProgressError) as caught:
        behind({"id": "k"}, None)
    assert caught.value.retry_after is not None
    assert caught.value.retry_after <= 32


def test_a_waiter_whose_clock_runs_behind_takes_over_a_crashed_holders_lapsed_lease(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: leases run on the server's clock: when a crashed holder's lease ends there,
    a duplicate told to wait claims the key and runs, whatever its own clock says."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("crash", None, "k")
    namespace = pk.partition("#")[0]
    assert claim(store, pk, owner(), lease_ms=500)[0]  # the holder crashes here
    effects: list[str] = []

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "ran"

    waiter = idempotent(
        key="id",
        store=store,
        namespace=namespace,
        cache_size=0,
        clock_skew_seconds=0,
        on_in_progress="wait",
        max_wait_seconds=4,
        clock=SkewedClock(-600_000),
    )(body)
    assert waiter({"id": "k"}, None) == "ran"
    assert effects == ["k"]


@pytest.mark.parametrize("offset_ms", [600_000, -600_000], ids=["ahead", "behind"])
def test_a_takeover_by_a_caller_whose_clock_is_off_logs_how_long_ago_the_server_saw_it_lapse(
    valkey_node: ValkeyServer, caplog: pytest.LogCaptureFixture, offset_ms: int
) -> None:
    """Promise: the takeover's WARNING says how long the holder's lease had lapsed on the
    server's clock (here about 0.5 s), not on the caller's (ten minutes more, or less)."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("over", None, "k")
    namespace = pk.partition("#")[0]
    assert claim(store, pk, owner(), lease_ms=300)[0]  # the holder crashes here
    time.sleep(0.8)
    caller = idempotent(
        key="id",
        store=store,
        namespace=namespace,
        cache_size=0,
        clock_skew_seconds=0,
        clock=SkewedClock(offset_ms),
    )(lambda event, context: "ran")
    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert caller({"id": "k"}, None) == "ran"
    lapsed = [r.getMessage() for r in caplog.records if "taken_over" in r.getMessage()]
    assert len(lapsed) == 1
    ms = int(lapsed[0].partition('"lapsed_ms": ')[2].rstrip("}"))
    assert 400 <= ms <= 5_000, lapsed[0]


@pytest.mark.parametrize(
    ("holder_skew_ms", "waiter_skew_s"), [(2_000, 0), (0, 2)], ids=["smaller", "larger"]
)
def test_a_waiter_with_another_skew_allowance_than_the_holders_takes_over_by_its_own(
    valkey_node: ValkeyServer, holder_skew_ms: int, waiter_skew_s: int
) -> None:
    """Promise: decorators sharing a key may allow different skews; a waiter takes over a
    crashed holder's key once its lease lapsed by the waiter's own allowance (as a claim's
    condition on DynamoDB has it), which is when it expects to, and polls at a measured pace
    until then: not in a tight loop of claims the server refuses by the holder's."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("mix", None, "k")
    namespace = pk.partition("#")[0]
    assert claim(store, pk, owner(), lease_ms=300, skew_ms=holder_skew_ms)[0]  # then crashes
    started = time.monotonic()
    calls = {"evalsha": 0}
    original = store.client.evalsha

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls["evalsha"] += 1
        return original(*args, **kwargs)

    store.client.evalsha = counting
    waiter = idempotent(
        key="id",
        store=store,
        namespace=namespace,
        cache_size=0,
        clock_skew_seconds=waiter_skew_s,
        on_in_progress="wait",
        max_wait_seconds=5,
    )(lambda event, context: "ran")
    assert waiter({"id": "k"}, None) == "ran"
    took = time.monotonic() - started
    assert 0.3 + waiter_skew_s <= took <= 0.3 + waiter_skew_s + 1.0
    assert calls["evalsha"] <= 60, f"{calls['evalsha']} scripts in {took:.1f} s"


@pytest.mark.parametrize("offset_ms", [0, HOUR, -HOUR], ids=["true", "ahead", "behind"])
def test_a_holder_whose_clock_is_off_holds_its_key_by_heartbeat_no_longer(
    valkey_node: ValkeyServer, offset_ms: int
) -> None:
    """Promise: a heartbeat moves the lease on the server's clock, whatever the holder's
    clock says: while it beats, a duplicate on a true clock is refused; once it stops (the
    holder hangs), the key frees after about one extension, not an hour early or late."""
    from lambda_idempotency import current_execution

    store = fresh(valkey_node.url)
    effects: list[str] = []
    beating, hung = threading.Event(), threading.Event()

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        with current_execution().heartbeat(every=0.2, extend_by=1):
            time.sleep(2.5)  # past its first 1 s lease
            beating.set()
            time.sleep(0.5)
        hung.wait(10)  # hangs without a heartbeat: its last extension runs out
        return "holder"

    holder = idempotent(
        key="id",
        store=store,
        namespace="hb",
        lease_seconds=1,
        clock_skew_seconds=0,
        cache_size=0,
        clock=SkewedClock(offset_ms),
    )(body)
    duplicate = idempotent(
        key="id", store=store, namespace="hb", lease_seconds=5, clock_skew_seconds=0, cache_size=0
    )(lambda event, context: effects.append("duplicate") or "duplicate")
    thread = threading.Thread(target=lambda: holder({"id": "hb"}, None), daemon=True)
    thread.start()
    try:
        assert beating.wait(10)
        with pytest.raises(InProgressError):
            duplicate({"id": "hb"}, None)
        answer = call_until_the_key_frees(duplicate, {"id": "hb"})
        assert answer == "duplicate"
    finally:
        hung.set()
        thread.join(10)
    assert effects == ["hb", "duplicate"]


def test_scan_stuck_with_a_glob_prefix_finds_only_its_own_records(
    valkey_node: ValkeyServer,
) -> None:
    """Promise: `prefix=` separates stores: an operator's scan_stuck under a prefix holding
    glob characters (and unicode) lists that store's stuck claims, never another's whose
    keys the unescaped pattern would match."""
    tag = uuid.uuid4().hex[:6]
    mine = ValkeyStore(valkey_node.url, prefix=f"ü{tag}*?[ab]:")
    theirs = ValkeyStore(valkey_node.url, prefix=f"ü{tag}XYa:")
    OPENED.extend([mine, theirs])
    old = now_ms() - 60_000
    ours = [mine.layout.record_key("g", None, f"k{i}") for i in range(3)]
    for pk in ours:
        assert claim(mine, pk, owner(), now_ms=old)[0]
    assert claim(theirs, theirs.layout.record_key("g", None, "x"), owner(), now_ms=old)[0]
    now = now_ms()  # claims before the next millisecond, on the server's clock
    found = [
        record.pk
        for page in mine.scan_stuck(claimed_before_ms=now + 1, now_ms=now)
        for record in page.records
    ]
    assert sorted(found) == sorted(ours)


@pytest.mark.parametrize("lost", [1, 2], ids=["claim", "completion"])
def test_a_cluster_client_resending_a_script_whose_answer_was_lost_runs_the_effect_once(
    valkey_cluster: ValkeyCluster, lost: int
) -> None:
    """Promise: every script is safe to send again: a cluster client (which resends a
    command on a timeout by itself) whose claim or completion landed but lost its answer
    still runs the effect once, answers, and replays."""
    from redis.cluster import RedisCluster
    from redis.exceptions import TimeoutError as RedisTimeout

    sent: list[str] = []

    class Losing(RedisCluster):
        def _execute_command(self, target_node: Any, *args: Any, **kwargs: Any) -> Any:
            answer = super()._execute_command(target_node, *args, **kwargs)
            if str(args[0]).upper() == "EVALSHA":
                sent.append("evalsha")
                if len(sent) == lost:
                    raise RedisTimeout("Timeout reading from socket")
            return answer

    client = Losing.from_url(valkey_cluster.url)
    OPENED.append(client)
    store = ValkeyStore(client=client, prefix=f"atk-cl-{uuid.uuid4().hex[:8]}:")
    effects: list[str] = []

    @idempotent(key="id", store=store, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "done"

    assert handle({"id": "cl-1"}, None) == "done"
    assert handle({"id": "cl-1"}, None) == "done"
    assert effects == ["cl-1"]
    assert len(sent) >= lost + 1  # the lost one was sent again


def test_a_cluster_client_resending_a_release_whose_answer_was_lost_frees_the_key(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Promise: a failing handler's key is released (the retry runs), even when the
    release's answer was lost and the client sent it again (the second finds it done)."""
    from redis.cluster import RedisCluster
    from redis.exceptions import TimeoutError as RedisTimeout

    sent: list[str] = []

    class Losing(RedisCluster):
        def _execute_command(self, target_node: Any, *args: Any, **kwargs: Any) -> Any:
            answer = super()._execute_command(target_node, *args, **kwargs)
            if str(args[0]).upper() == "EVALSHA":
                sent.append("evalsha")
                if len(sent) == 2:  # the claim, then the release
                    raise RedisTimeout("Timeout reading from socket")
            return answer

    client = Losing.from_url(valkey_cluster.url)
    OPENED.append(client)
    store = ValkeyStore(client=client, prefix=f"atk-cr-{uuid.uuid4().hex[:8]}:")
    effects: list[str] = []

    @idempotent(key="id", store=store, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if len(effects) == 1:
            raise RuntimeError("first attempt fails")
        return "done"

    with pytest.raises(RuntimeError):
        handle({"id": "cr-1"}, None)
    assert handle({"id": "cr-1"}, None) == "done"
    assert effects == ["cr-1", "cr-1"]


def test_one_batch_delivered_twice_at_once_on_a_cluster_ships_each_record_once(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Promise: process_batch runs each record once per key: the same batch delivered twice
    at the same time, its records spread over every node of a cluster, ships each once."""
    import json

    from lambda_idempotency import idempotent_record, process_batch
    from tests.batch_events import batch, failed, sqs_record

    store = fresh(valkey_cluster.url, cluster=True)
    shipped: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(2)

    @idempotent_record(store=store, lease_seconds=30, cache_size=0, on_in_progress="wait")
    def ship(record: dict[str, Any]) -> str:
        order = json.loads(record["body"])["order"]
        with lock:
            shipped.append(order)
        time.sleep(0.05)
        return order

    orders = [f"o{n}" for n in range(24)]
    event = batch(*(sqs_record(f"m-{n}", {"order": o}) for n, o in enumerate(orders)))
    nodes = {
        store.client.get_node_from_key(store.key_of(store.layout.record_key("x", None, o))).name
        for o in orders
    }
    assert len(nodes) == 3
    answers: list[Any] = []

    def deliver() -> None:
        start.wait()
        answers.append(process_batch(event, None, ship))

    threads = [threading.Thread(target=deliver) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 2
    assert [failed(dict(answer)) for answer in answers] == [[], []]
    assert sorted(shipped) == sorted(orders)
