"""ValkeyStore on real Valkey servers: what a user sees, effects counted.

Races on one key, a zombie's late completion fenced out, a release of only the version read,
tombstones, the server deleting an expired record, a 6 MB result, a cluster of three
primaries, a decorated handler end to end, and faults (a connection dropped after the
script ran, a refused connection, a replica that refuses writes). The general contract runs
in tests/conformance/ against the same servers."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.cluster import RedisCluster

from lambda_idempotency import (
    ConfigurationError,
    InProgressError,
    NewerFormatError,
    Status,
    StoreError,
    ValkeyStore,
    current_execution,
    idempotent,
)
from lambda_idempotency._dev.valkey_local import (
    ValkeyCluster,
    ValkeyPair,
    ValkeyServer,
    call,
    free_port,
)
from lambda_idempotency._stores.encoding import encode
from lambda_idempotency._stores.valkey import scripts

pytestmark = pytest.mark.valkey

ROOT = Path(__file__).resolve().parents[2]


OPENED: list[Any] = []
"""Stores and clients a test opened, closed after it (no socket left to the garbage
collector, whose ResourceWarning the suite turns into an error)."""


@pytest.fixture(autouse=True)
def _close_what_the_test_opened() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def opened(thing: Any) -> Any:
    OPENED.append(thing)
    return thing


def fresh(url: str, **options: Any) -> ValkeyStore:
    return opened(ValkeyStore(url, prefix=f"t-{uuid.uuid4().hex[:8]}:", **options))


def owner() -> str:
    return secrets.token_hex(12)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def claim(store: ValkeyStore, pk: str, who: str, *, lease_ms: int = 30_000, **given: Any) -> Any:
    now = now_ms()
    arguments: dict[str, Any] = {
        "payload_hash": None,
        "now_ms": now,
        "lease_until_ms": now + lease_ms,
        "expiration_s": now // 1000 + 3600,
        "skew_ms": 0,
        **given,
    }
    return store.claim(pk, owner=who, **arguments)


def test_of_many_threads_racing_one_key_one_runs_and_the_rest_replay_or_wait(
    valkey_node: ValkeyServer,
) -> None:
    store = fresh(valkey_node.url)
    effects: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(12)

    @idempotent(key="id", store=store, lease_seconds=30, on_in_progress="wait", cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with lock:
            effects.append(event["id"])
        time.sleep(0.2)  # long enough for every racer to find it in progress
        return {"charged": event["id"]}

    def call(_: int) -> Any:
        start.wait()
        return charge({"id": "o-1"}, None)

    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(call, range(12)))

    assert effects == ["o-1"]
    assert answers == [{"charged": "o-1"}] * 12


@pytest.mark.parametrize("where", ["valkey_node", "valkey_cluster"])
def test_of_many_raw_claims_exactly_one_wins(where: str, request: pytest.FixtureRequest) -> None:
    server = request.getfixturevalue(where)
    store = fresh(server.url, cluster=where == "valkey_cluster")
    pk = store.layout.record_key("race", None, "k")
    start = threading.Barrier(16)

    def race(who: str) -> bool:
        start.wait()
        won, held = claim(store, pk, who)
        assert won or (held is not None and held.owner != who)
        return bool(won)

    with ThreadPoolExecutor(16) as pool:
        wins = list(pool.map(race, [owner() for _ in range(16)]))

    assert wins.count(True) == 1


@pytest.mark.parametrize(
    ("stored", "code"),
    [
        ({"status": "DONE", "expiration": "9999999999"}, "UnknownRecordStatus"),
        ({"status": "COMPLETED", "expiration": "soon"}, "StoredRecordUnreadable"),
        ({"status": "COMPLETED"}, "StoredRecordUnreadable"),
        ("not a hash", "StoredRecordUnreadable"),
    ],
    ids=["status", "number", "no expiration", "string"],
)
def test_a_record_this_library_never_wrote_is_a_typed_error_and_nothing_runs(
    valkey_node: ValkeyServer, stored: Any, code: str
) -> None:
    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "charged"

    key = store.key_of(store.layout.record_key(charge.idempotency.settings.namespace, None, "x"))
    if isinstance(stored, dict):
        store.client.hset(key, mapping=stored)
    else:
        store.client.set(key, stored)

    with pytest.raises(StoreError) as caught:
        charge({"id": "x"}, None)

    assert (caught.value.code, caught.value.retryable) == (code, False)
    assert effects == []


def test_a_zombie_completing_late_never_overwrites_the_new_holder(
    valkey_node: ValkeyServer,
) -> None:
    """The zombie's lease lapses on the server's clock; its completion, fenced on its owner
    token, writes nothing over the claim that took the key over."""
    store = fresh(valkey_node.url)
    pk, zombie, successor = store.layout.record_key("z", None, "k"), owner(), owner()
    assert claim(store, pk, zombie, lease_ms=200)[0]
    assert not claim(store, pk, successor)[0]  # live: refused
    time.sleep(0.3)
    assert claim(store, pk, successor)[0]  # lapsed on the server: taken over

    late = store.complete(pk, owner=zombie, payload_hash=None, result=b"zombie", expiration_s=2**31)
    assert not late
    record = store.get(pk)
    assert record is not None
    assert (record.status, record.owner, record.result) == (Status.IN_PROGRESS, successor, None)
    assert not store.release(pk, owner=zombie, now_ms=now_ms())
    assert store.complete(
        pk, owner=successor, payload_hash=None, result=b"mine", expiration_s=now_ms() // 1000 + 60
    )
    record = store.get(pk)
    assert record is not None
    assert (record.owner, record.result) == (successor, b"mine")


def test_a_callers_clock_running_ahead_never_frees_a_live_claim(
    valkey_node: ValkeyServer,
) -> None:
    """On DynamoDB a caller an hour ahead sees every lease lapsed; here the server decides."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("ahead", None, "k")
    assert claim(store, pk, owner(), lease_ms=30_000)[0]
    hour_ahead = now_ms() + 3_600_000
    won, held = claim(store, pk, owner(), now_ms=hour_ahead, lease_until_ms=hour_ahead + 1)
    assert not won
    assert held is not None
    assert held.status is Status.IN_PROGRESS


def test_a_release_leaves_a_tombstone_that_only_its_own_delayed_claim_cannot_pass(
    valkey_node: ValkeyServer,
) -> None:
    store = fresh(valkey_node.url)
    pk, a, b = store.layout.record_key("t", None, "k"), owner(), owner()
    assert claim(store, pk, a)[0]
    assert store.release(pk, owner=a, now_ms=now_ms())

    won, held = claim(store, pk, a)  # a delayed copy of the released claim
    assert not won
    assert held is not None
    assert (held.status, held.owner) == (Status.RELEASED, a)
    ttl_ms = store.client.pttl(store.key_of(pk))
    # the tombstone fences for its 15 minutes, then lingers (deciding nothing), then goes
    assert 0 < ttl_ms <= 901_000 + scripts.LINGER_MS
    assert claim(store, pk, b)[0]  # anyone else: free


def test_an_operator_releases_only_the_version_read(valkey_node: ValkeyServer) -> None:
    store = fresh(valkey_node.url)
    pk, a = store.layout.record_key("op", None, "k"), owner()
    assert claim(store, pk, a)[0]
    shown = store.get(pk)
    assert shown is not None
    now = now_ms()
    store.extend_lease(
        pk,
        owner=a,
        payload_hash=None,
        claimed_at_ms=shown.claimed_at,
        lease_until_ms=now + 60_000,
        expiration_s=now // 1000 + 3600,
    )
    released, current = store.release_version(shown, now_ms=now_ms())
    assert not released  # the lease moved since it was shown
    assert current is not None
    assert store.complete(
        pk, owner=a, payload_hash=None, result=b"r", expiration_s=now // 1000 + 60
    )

    released, current = store.release_version(current, now_ms=now_ms())
    assert not released  # completed meanwhile: stays, and its retries replay it
    assert current is not None
    assert current.status is Status.COMPLETED
    assert store.release_version(current, now_ms=now_ms()) == (True, None)
    record = store.get(pk)
    assert record is not None
    assert (record.status, record.owner) == (Status.RELEASED, a)

    stuck = store.layout.record_key("op", None, "stuck")
    assert claim(store, stuck, a)[0]
    now = now_ms()
    found = [
        record.pk
        for page in store.scan_stuck(claimed_before_ms=now + 1, now_ms=now)
        for record in page.records
    ]
    assert found == [stuck]


def test_an_expired_claim_is_absent_to_a_claim_and_the_server_deletes_it_later(
    valkey_node: ValkeyServer,
) -> None:
    """An expired claim counts as absent by the claim's condition; its key lingers a while
    (so a holder still running can complete), then the server deletes it."""
    store = fresh(valkey_node.url)
    pk, a = store.layout.record_key("ttl", None, "k"), owner()
    now = now_ms()
    now -= now % 1000 - 1  # just past a whole second: the record expires 1 s + skew later
    assert claim(store, pk, a, now_ms=now, lease_until_ms=now + 60_000, expiration_s=now // 1000)[0]
    key = store.key_of(pk)
    assert 0 < store.client.pttl(key) <= 60_001 + scripts.LINGER_MS

    time.sleep(1.1)

    expired = store.get(pk)
    assert expired is not None and expired.is_expired(now_ms())
    assert claim(store, pk, owner())[0]


def test_the_server_deletes_an_expired_completed_record(valkey_node: ValkeyServer) -> None:
    store = fresh(valkey_node.url)
    pk, a = store.layout.record_key("ttl", None, "done"), owner()
    assert claim(store, pk, a)[0]
    now = now_ms()
    assert store.complete(pk, owner=a, payload_hash=None, result=b"r", expiration_s=now // 1000)
    key = store.key_of(pk)
    assert 0 < store.client.pttl(key) <= 1_000

    time.sleep(1.1)

    assert store.client.exists(key) == 0
    assert store.get(pk) is None


def test_a_6_mb_result_replays_byte_for_byte_in_one_call(valkey_node: ValkeyServer) -> None:
    store = fresh(valkey_node.url)
    effects: list[str] = []
    rows = base64.b64encode(os.urandom(4_500_000)).decode()  # 6 MB, compressing to 4.5

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0)
    def report(event: dict[str, Any], context: Any) -> dict[str, str]:
        effects.append(event["id"])
        return {"rows": rows}

    first = report({"id": "r-1"}, None)
    replayed = report({"id": "r-1"}, None)

    assert replayed == first
    assert replayed["rows"] == rows
    assert effects == ["r-1"]
    pk = store.layout.record_key(report.idempotency.settings.namespace, None, "r-1")
    assert len(store.client.hget(store.key_of(pk), "result")) > 4_500_000


def test_a_decorated_handler_end_to_end(valkey_node: ValkeyServer) -> None:
    store = opened(ValkeyStore(valkey_node.url.replace("redis://", "valkey://"), prefix="e2e:"))
    effects: list[tuple[str, int]] = []

    @idempotent(key="order_id", payload="amount", store=store, lease_seconds=30, cache_size=0)
    def charge(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append((event["order_id"], event["amount"]))
        if event["amount"] < 0:
            raise ValueError("refused by the bank")
        return {"charged": event["amount"]}

    order = f"o-{uuid.uuid4().hex}"
    assert charge({"order_id": order, "amount": 5}, None) == {"charged": 5}
    assert charge({"order_id": order, "amount": 5}, None) == {"charged": 5}
    failing = f"o-{uuid.uuid4().hex}"
    for _ in range(2):
        with pytest.raises(ValueError):
            charge({"order_id": failing, "amount": -1}, None)

    assert effects == [(order, 5), (failing, -1), (failing, -1)]  # released: runs again
    assert charge.idempotency.stats["replayed"] == 1


def test_enlisted_dynamodb_writes_are_refused_in_the_handler_saying_why(
    valkey_node: ValkeyServer,
) -> None:
    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0)
    def pay(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write({"Put": {"TableName": "t", "Item": {"id": {"S": "1"}}}})
        effects.append(event["id"])  # never reached: the write could not land with the result
        return "paid"

    with pytest.raises(ConfigurationError, match="cannot join a DynamoDB transaction"):
        pay({"id": "p-1"}, None)
    assert effects == []
    record = store.get(store.layout.record_key(pay.idempotency.settings.namespace, None, "p-1"))
    assert record is not None
    assert record.status is Status.RELEASED  # free for the retry once the code is fixed


def test_a_cluster_spreads_records_over_its_nodes_each_on_the_slot_of_its_tag(
    valkey_cluster: ValkeyCluster,
) -> None:
    store = fresh(valkey_cluster.url, cluster=True)
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if event["id"].endswith("!"):
            raise RuntimeError("failed")
        return event["id"].upper()

    ids = [f"e-{n}" for n in range(30)]
    assert [handle({"id": i}, None) for i in ids] == [i.upper() for i in ids]
    assert [handle({"id": i}, None) for i in ids] == [i.upper() for i in ids]
    with pytest.raises(RuntimeError):
        handle({"id": "x!"}, None)
    assert effects == [*ids, "x!"]

    client: RedisCluster = store.client
    namespace = handle.idempotency.settings.namespace
    nodes = set()
    for i in ids:
        pk = store.layout.record_key(namespace, None, i)
        key = store.key_of(pk)
        assert client.keyslot(key) == client.keyslot(pk)  # the tag alone picks the slot
        nodes.add(client.get_node_from_key(key).name)
    assert len(nodes) == 3  # every primary holds some: each script ran on its key's node


def test_a_connection_dropped_after_the_script_ran_may_have_applied(
    valkey_node: ValkeyServer,
) -> None:
    class Dropping(redis.Redis):
        """Runs every script, then loses its answer, as a connection cut after the send."""

        def evalsha(self, *args: Any, **kwargs: Any) -> Any:
            super().evalsha(*args, **kwargs)
            raise redis.ConnectionError("Connection closed by server.")

    prefix = f"drop-{uuid.uuid4()}:"
    store = ValkeyStore(client=opened(Dropping.from_url(valkey_node.url)), prefix=prefix)
    reader = ValkeyStore(client=opened(redis.Redis.from_url(valkey_node.url)), prefix=prefix)
    pk, a = store.layout.record_key("drop", None, "raw key"), owner()

    with pytest.raises(StoreError) as caught:
        claim(store, pk, a)

    assert (caught.value.retryable, caught.value.maybe_applied) == (True, True)
    assert caught.value.step == "claim"
    assert caught.value.key_hash == pk
    assert "raw key" not in str(caught.value)
    record = reader.get(pk)  # it had landed (a read is a script too: read on a sound client)
    assert record is not None
    assert record.owner == a


def test_a_lost_claim_answer_frees_the_key_and_the_retry_runs_once(
    valkey_node: ValkeyServer,
) -> None:
    drop = threading.Event()

    class Dropping(redis.Redis):
        def evalsha(self, *args: Any, **kwargs: Any) -> Any:
            answer = super().evalsha(*args, **kwargs)
            if drop.is_set():
                drop.clear()
                raise redis.TimeoutError("Timeout reading from socket")
            return answer

    store = ValkeyStore(
        client=opened(Dropping.from_url(valkey_node.url)), prefix=f"lost-{uuid.uuid4()}:"
    )
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0)
    def handle(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        return "done"

    drop.set()
    with pytest.raises(StoreError) as caught:
        handle({"id": "l-1"}, None)
    assert caught.value.maybe_applied
    assert handle({"id": "l-1"}, None) == "done"  # the landed claim was released, fenced
    assert handle({"id": "l-1"}, None) == "done"
    assert effects == ["l-1"]


def test_a_refused_connection_is_retryable_and_sent_nothing() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    with pytest.raises(StoreError) as caught:
        claim(opened(ValkeyStore(url)), "ns#" + "0" * 64, owner())
    assert (caught.value.retryable, caught.value.maybe_applied) == (True, False)
    # a client of your own may have retried an attempt that went out: it cannot say
    given = ValkeyStore(client=opened(redis.Redis.from_url(url, socket_connect_timeout=1)))
    with pytest.raises(StoreError) as caught:
        claim(given, "ns#" + "0" * 64, owner())
    assert (caught.value.retryable, caught.value.maybe_applied) == (True, True)


def test_a_server_that_stops_answering_is_a_timeout_whose_claim_may_have_landed() -> None:
    """The request reached the server, which stood still (SIGSTOP: a stalled node, a long
    fork): the claim times out as a StoreError saying it may have applied, and it did, once
    the server moved again."""
    with ValkeyServer() as node:
        store = opened(ValkeyStore(node.url, timeout=0.3))
        pk, a = store.layout.record_key("stall", None, "k"), owner()
        assert claim(store, store.layout.record_key("stall", None, "warm"), a)[0]  # loaded
        node.pause()
        try:
            with pytest.raises(StoreError) as caught:
                claim(store, pk, a)
        finally:
            node.resume()

        assert (caught.value.code, caught.value.retryable) == ("TimeoutError", True)
        assert caught.value.maybe_applied
        deadline = time.monotonic() + 5
        while (record := store.get(pk)) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert record is not None
        assert record.owner == a


def test_a_connection_the_server_closed_between_invocations_is_replaced(
    valkey_node: ValkeyServer,
) -> None:
    """A frozen Lambda's pooled connection, closed by the server (idle timeout, a restart)
    meanwhile: the next call reconnects rather than fail."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("idle", None, "k")
    assert claim(store, pk, owner())[0]
    with redis.Redis.from_url(valkey_node.url) as admin:
        assert admin.client_kill_filter(_type="normal", skip_me=True) >= 1

    assert not claim(store, pk, owner())[0]


def test_closing_a_store_built_from_a_url_closes_its_connections(
    valkey_node: ValkeyServer,
) -> None:
    """A store's connections are its client's pool's: closing the store closes them, not
    only the client object (the server counts its clients)."""
    with redis.Redis.from_url(valkey_node.url) as admin:
        name = f"closing-{uuid.uuid4().hex[:8]}"
        store = fresh(valkey_node.url + f"?client_name={name}")
        for i in range(3):
            assert claim(store, store.layout.record_key("close", None, f"k{i}"), owner())[0]

        def named() -> int:
            return sum(1 for c in admin.client_list() if c.get("name") == name)

        assert named() >= 1
        store.close()
        deadline = time.monotonic() + 5
        while named() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert named() == 0


def test_a_replica_refuses_the_write_retryably_with_nothing_applied(
    valkey_pair: ValkeyPair,
) -> None:
    store = fresh(valkey_pair.replica.url)
    with pytest.raises(StoreError) as caught:
        claim(store, "ns#" + "1" * 64, owner())
    assert (caught.value.code, caught.value.retryable) == ("ReadOnlyError", True)
    assert not caught.value.maybe_applied


def test_a_duplicate_in_flight_gets_retry_after(valkey_node: ValkeyServer) -> None:
    store = fresh(valkey_node.url)
    refused: list[InProgressError] = []

    @idempotent(key="id", store=store, lease_seconds=20, payload=None)
    def export(event: dict[str, Any], context: Any) -> str:
        if event["who"] == "first":
            try:
                export({"id": "x", "who": "second"}, None)
            except InProgressError as exc:
                refused.append(exc)
        return str(event["who"])

    assert export({"id": "x", "who": "first"}, None) == "first"
    # 20 s lease, 2 s skew, less the milliseconds between the two claims, rounded up
    assert [exc.retry_after for exc in refused] in ([22], [23])


def test_a_store_is_built_from_a_url_or_a_client_and_refuses_what_cannot_work(
    valkey_node: ValkeyServer,
) -> None:
    with pytest.raises(ConfigurationError):
        ValkeyStore(client=opened(redis.Redis.from_url(valkey_node.url, decode_responses=True)))
    with pytest.raises(ConfigurationError):
        ValkeyStore(valkey_node.url, client=opened(redis.Redis.from_url(valkey_node.url)))
    with pytest.raises(ConfigurationError, match="braces"):
        ValkeyStore(valkey_node.url, prefix="app{1}:")
    with pytest.raises(ConfigurationError, match="'https'"):
        ValkeyStore("https://cache.example")
    for timeout in (0, -1, True, "5", 901):
        with pytest.raises(ConfigurationError, match="timeout"):
            ValkeyStore(valkey_node.url, timeout=timeout)
    secret = ValkeyStore("rediss://user:hunter2@cache.example:6379")
    assert "hunter2" not in repr(secret)
    blob = encode({"a": 1}).blob
    store = fresh(valkey_node.url)
    assert (
        store.stored_form("p", owner="o", payload_hash=None, result=blob, expiration_s=1).chunks
        is None
    )


def test_without_redis_py_the_store_names_the_extra_and_a_dynamodb_handler_never_loads_it() -> None:
    probe = (
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "import lambda_idempotency as li\n"
        "from lambda_idempotency import DynamoDBStore, idempotent\n"
        "assert not any(m.startswith(('redis', 'lambda_idempotency._stores.valkey')) "
        "for m in sys.modules if sys.modules[m] is not None)\n"
        "try:\n"
        "    li.ValkeyStore('redis://localhost')\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "layer")},
        timeout=60,
    )
    assert "lambda-idempotency[valkey]" in ran.stdout


def test_scripts_flushed_from_the_server_are_loaded_again(
    valkey_node: ValkeyServer, valkey_cluster: ValkeyCluster
) -> None:
    """A restarted or failed-over node has forgotten the scripts: NOSCRIPT, then EVALSHA again
    after loading, never an error to the caller."""
    for store in (fresh(valkey_node.url), fresh(valkey_cluster.url, cluster=True)):
        pk = store.layout.record_key("flush", None, "k")
        assert claim(store, pk, owner())[0]
        flushed = valkey_cluster.nodes if isinstance(store.client, RedisCluster) else [valkey_node]
        for server in flushed:
            with redis.Redis.from_url(server.url) as admin:
                admin.script_flush()
        won, held = claim(store, pk, owner())
        assert not won
        assert held is not None


def test_the_http_front_end_on_valkey_replays_per_tenant(valkey_node: ValkeyServer) -> None:
    from lambda_idempotency import idempotent_http
    from tests.http_events import http_event

    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent_http(store=store, lease_seconds=30, cache_size=0)
    def create(event: dict[str, Any], context: Any) -> dict[str, Any]:
        effects.append(event["body"])
        return {"statusCode": 201, "body": json.dumps({"created": len(effects)})}

    def request(tenant: str) -> dict[str, Any]:
        claims = {"jwt": {"claims": {"sub": tenant}, "scopes": []}}
        headers = {"idempotency-key": "k-1", "content-type": "application/json"}
        event = http_event("http-api", headers=headers, body='{"a": 1}', authorizer=claims)
        return dict(create(event, None))

    first, again, other = request("alice"), request("alice"), request("bob")

    assert first["statusCode"] == again["statusCode"] == other["statusCode"] == 201
    assert again["body"] == first["body"]
    assert again["headers"]["Idempotent-Replayed"] == "true"
    assert json.loads(other["body"]) == {"created": 2}  # another tenant: never a replay
    assert len(effects) == 2


def test_a_batch_on_valkey_runs_each_record_once(valkey_node: ValkeyServer) -> None:
    from lambda_idempotency import idempotent_record, process_batch
    from tests.batch_events import batch, failed, sqs_record

    store = fresh(valkey_node.url)
    shipped: list[str] = []

    @idempotent_record(store=store, lease_seconds=30, cache_size=0)
    def ship(record: dict[str, Any]) -> str:
        order = json.loads(record["body"])["order"]
        if order == "bad":
            raise ValueError("cannot ship")
        shipped.append(order)
        return order

    event = batch(*(sqs_record(f"m-{n}", {"order": o}) for n, o in enumerate(["a", "bad", "b"])))
    first = process_batch(event, None, ship)
    again = process_batch(event, None, ship)

    assert failed(dict(first)) == failed(dict(again)) == ["m-1"]
    assert shipped == ["a", "b"]


def test_async_duplicates_on_valkey_run_once_and_wait_for_the_result(
    valkey_node: ValkeyServer,
) -> None:
    store = fresh(valkey_node.url)
    effects: list[str] = []

    @idempotent(key="id", store=store, lease_seconds=30, cache_size=0, on_in_progress="wait")
    async def charge(event: dict[str, Any], context: Any) -> str:
        await asyncio.sleep(0.2)
        effects.append(event["id"])
        return "charged"

    async def main() -> list[str]:
        return list(await asyncio.gather(*(charge({"id": "a-1"}, None) for _ in range(3))))

    assert asyncio.run(main()) == ["charged"] * 3
    assert effects == ["a-1"]


OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["claim", "complete", "release", "extend"]), st.integers(0, 2)),
    max_size=12,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(operations=OPERATIONS)
def test_any_interleaving_of_three_owners_follows_the_contract(
    valkey_node: ValkeyServer, operations: list[tuple[str, int]]
) -> None:
    """Claims, completions, releases and extensions by three owners in any order (leases
    long: none lapses) answer as the contract says, and the record is what it says after
    each: one holder at a time, only the holder completes, releases or extends, a completion
    is never undone, a tombstone frees the key for everyone but its own owner."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("model", None, "k")
    owners = [owner() for _ in range(3)]
    model: tuple[Status, int] | None = None
    for operation, who in operations:
        token, now = owners[who], now_ms()
        ours = model is not None and model[1] == who
        if operation == "claim":
            free = model is None or (model[0] is Status.RELEASED and not ours)
            won, _ = claim(store, pk, token)
            assert won == free
            model = (Status.IN_PROGRESS, who) if free else model
        elif operation == "complete":
            done = store.complete(
                pk, owner=token, payload_hash=None, result=b"r", expiration_s=now // 1000 + 60
            )
            assert done == ours
            model = (Status.COMPLETED, who) if ours else model
        elif operation == "release":
            held = ours and model is not None and model[0] is Status.IN_PROGRESS
            assert store.release(pk, owner=token, now_ms=now) == held
            model = (Status.RELEASED, who) if held else model
        else:
            held = ours and model is not None and model[0] is Status.IN_PROGRESS
            extended, _ = store.extend_lease(
                pk,
                owner=token,
                payload_hash=None,
                claimed_at_ms=None,
                lease_until_ms=now + 60_000,
                expiration_s=now // 1000 + 3600,
            )
            assert extended == held
        record = store.get(pk)
        if model is None:
            assert record is None
        else:
            assert record is not None
            assert (record.status, record.owner) == (model[0], owners[model[1]])


def test_a_heartbeat_holds_the_key_on_the_servers_clock_past_the_first_lease(
    valkey_node: ValkeyServer,
) -> None:
    """Work three times as long as its lease, holding the key by a heartbeat: every
    duplicate meanwhile is refused, and the one after replays."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    refused: list[int] = []

    @idempotent(
        key="id", payload=None, store=store, lease_seconds=0.4, clock_skew_seconds=0, cache_size=0
    )
    def export(event: dict[str, Any], context: Any) -> str:
        if event["who"] == "duplicate":
            effects.append("duplicate")
            return "duplicate"
        effects.append("holder")
        with current_execution().heartbeat(every=0.1, extend_by=0.4):
            for _ in range(6):
                time.sleep(0.2)
                try:
                    export({"id": "h-1", "who": "duplicate"}, None)
                except InProgressError as exc:
                    refused.append(exc.retry_after)
        return "holder"

    assert export({"id": "h-1", "who": "holder"}, None) == "holder"
    assert len(refused) == 6
    assert effects == ["holder"]
    assert export({"id": "h-1", "who": "duplicate"}, None) == "holder"


def test_a_wrong_password_is_a_store_error_that_retrying_cannot_fix_and_nothing_runs() -> None:
    """A server that refuses the credentials: a typed StoreError, not retryable (the next
    attempt sends the same password), nothing applied, the password nowhere in it."""
    with ValkeyServer() as node:
        call(node.port, "CONFIG", "SET", "requirepass", "right-secret")
        store = opened(ValkeyStore(f"redis://:wrong-secret@127.0.0.1:{node.port}"))
        effects: list[str] = []
        handle = idempotent(key="id", store=store, namespace="auth", cache_size=0)(
            lambda event, context: effects.append(event["id"]) or "ran"
        )
        with pytest.raises(StoreError) as caught:
            handle({"id": "auth-1"}, None)
        assert caught.value.code == "AuthenticationError"
        assert (caught.value.retryable, caught.value.maybe_applied) == (False, False)
        assert caught.value.key_hash == store.layout.record_key("auth", None, "auth-1")
        assert "wrong-secret" not in str(caught.value)
        assert effects == []


def test_a_store_shows_its_url_with_the_user_and_never_the_password(
    valkey_node: ValkeyServer,
) -> None:
    shown = repr(ValkeyStore("rediss://alice:hunter2@cache.example:6379/0"))
    assert shown == "ValkeyStore('rediss://alice:***@cache.example:6379/0', prefix='idempotency:')"
    assert repr(ValkeyStore("valkey://cache.example:6379")) == (
        "ValkeyStore('valkey://cache.example:6379', prefix='idempotency:')"
    )
    given = ValkeyStore(client=opened(redis.Redis.from_url(valkey_node.url)), prefix="p:")
    assert repr(given) == "ValkeyStore('client', prefix='p:')"


def test_scripts_flushed_from_a_primary_that_waits_for_its_replica_are_loaded_again(
    valkey_pair: ValkeyPair,
) -> None:
    """With `replicas=`, each script goes out in a pipeline with its WAIT: a primary that has
    forgotten the scripts (restarted, failed over) answers NOSCRIPT there too, and the store
    loads the script and sends it again: the caller sees the write, never the error."""
    store = fresh(valkey_pair.primary.url, replicas=1)
    first, second = (store.layout.record_key("flush-wait", None, k) for k in ("a", "b"))
    who = owner()
    assert claim(store, first, who)[0]
    with redis.Redis.from_url(valkey_pair.primary.url) as admin:
        admin.script_flush()
    assert claim(store, second, who)[0]
    with redis.Redis.from_url(valkey_pair.primary.url) as admin:
        admin.script_flush()
    assert store.complete(second, owner=who, payload_hash=None, result=b"r", expiration_s=2**31)
    record = store.get(second)
    assert record is not None
    assert (record.status, record.result) == (Status.COMPLETED, b"r")


def test_an_unreadable_record_names_what_it_lacks_and_its_key_hash_never_the_key(
    valkey_node: ValkeyServer,
) -> None:
    """What an operator reads in the error: the field missing, or the status that is no
    text, and the record's hashed key (to find it with `inspect`), never the raw key."""
    store = fresh(valkey_node.url)
    pk = store.layout.record_key("unreadable", None, "raw-key-x")
    name = store.key_of(pk)
    store.client.hset(name, mapping={"status": "COMPLETED", "owner": "x"})
    with pytest.raises(StoreError) as caught:
        store.get(pk)
    assert str(caught.value) == "the stored record cannot be read: no expiration"
    assert (caught.value.key_hash, caught.value.step) == (pk, "get")
    store.client.delete(name)
    store.client.hset(name, mapping={"status": b"\xc3(", "expiration": "1"})
    with pytest.raises(StoreError) as caught:
        claim(store, pk, owner())
    assert str(caught.value) == "the stored record cannot be read: a text that is not UTF-8"
    assert (caught.value.key_hash, caught.value.step) == (pk, "claim")
    assert "raw-key-x" not in repr(caught.value.__dict__)


def test_an_operator_releases_a_result_a_handler_completed_and_the_next_call_runs(
    valkey_node: ValkeyServer,
) -> None:
    """The version shown includes when the handler completed it (`completed_at`): the
    release matches it exactly, and the key runs again once, as after any release."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="op-done", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or len(effects)
    )
    assert handle({"id": "done-1"}, None) == 1
    shown = store.get(store.layout.record_key("op-done", None, "done-1"))
    assert shown is not None
    assert (shown.status, shown.completed_at is not None) == (Status.COMPLETED, True)
    assert store.release_version(shown, now_ms=now_ms()) == (True, None)
    assert handle({"id": "done-1"}, None) == 2
    assert handle({"id": "done-1"}, None) == 2
    assert effects == ["done-1", "done-1"]


def test_a_completion_given_enlisted_writes_refuses_them_naming_the_key_and_writes_nothing(
    valkey_node: ValkeyServer,
) -> None:
    """The store's own refusal, for a caller of the store contract past the decorator's
    check at `add_write`: the error carries the record's hashed key, and the claim stays
    as it was (its holder can still complete it without the writes)."""
    store = fresh(valkey_node.url)
    pk, who = store.layout.record_key("enlist", None, "k"), owner()
    assert claim(store, pk, who)[0]
    form = store.stored_form(pk, owner=who, payload_hash=None, result=b"r", expiration_s=2**31)
    put = {"Put": {"TableName": "t", "Item": {"id": {"S": "1"}}}}
    with pytest.raises(ConfigurationError, match="cannot join a DynamoDB transaction") as caught:
        store.write_completion(form, [put])
    assert caught.value.key_hash == pk
    record = store.get(pk)
    assert record is not None
    assert record.status is Status.IN_PROGRESS
    assert store.write_completion(form)


def test_a_record_of_a_newer_format_names_the_step_that_met_it_and_nothing_runs(
    valkey_node: ValkeyServer,
) -> None:
    """A rolling deploy's newer version wrote the record: the claim that meets it, and an
    operator's read, each say which step met it (the outcome line's `step`), run nothing
    and leave the record as it was."""
    store = fresh(valkey_node.url)
    effects: list[str] = []
    handle = idempotent(key="id", store=store, namespace="newer", cache_size=0)(
        lambda event, context: effects.append(event["id"]) or "ran"
    )
    pk = store.layout.record_key("newer", None, "n-1")
    newer = {"fmt": "99", "status": "COMPLETED", "expiration": str(2**31), "result": "x"}
    store.client.hset(store.key_of(pk), mapping=newer)
    with pytest.raises(NewerFormatError) as caught:
        handle({"id": "n-1"}, None)
    assert (caught.value.step, caught.value.format_version, caught.value.key_hash) == (
        "claim",
        99,
        pk,
    )
    with pytest.raises(NewerFormatError) as caught:
        store.get(pk)
    assert caught.value.step == "get"
    assert effects == []
    assert store.client.hgetall(store.key_of(pk)) == {
        k.encode(): v.encode() for k, v in newer.items()
    }
