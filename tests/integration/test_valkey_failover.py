"""What a Valkey failover loses, and what `ValkeyStore(replicas=...)` keeps, on real servers.

Replication is asynchronous: a primary acknowledges a claim before its replica has it. The
deterministic failover here stops the replica (SIGSTOP) and drops its link, so it cannot
receive the claim, kills the primary (SIGKILL) after it, resumes and promotes the replica,
and lets a second caller claim the same key there. Effects are counted (runs of the body)."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from lambda_idempotency import ConfigurationError, StoreError, ValkeyStore, idempotent
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, call
from lambda_idempotency._stores.valkey.replicas import REPLICAS_NOT_ACKNOWLEDGED

pytestmark = pytest.mark.valkey

OPENED: list[ValkeyStore] = []


@pytest.fixture(autouse=True)
def _close_what_the_test_opened() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().close()


def store_at(url: str, prefix: str, **options: Any) -> ValkeyStore:
    store = ValkeyStore(url, prefix=prefix, **options)
    OPENED.append(store)
    return store


def new_prefix() -> str:
    return f"fo-{uuid.uuid4().hex[:8]}:"


def charge(store: ValkeyStore, effects: list[str], during: Any = None) -> Any:
    """A handler whose effect is counted; `during` runs inside it, after the claim."""

    def body(event: dict[str, Any], context: Any) -> str:
        effects.append(event["id"])
        if during is not None:
            during()
        return "charged"

    return idempotent(key="id", store=store, lease_seconds=2, cache_size=0)(body)


def cut_off(pair: ValkeyPair) -> None:
    """The replica receives nothing from here on: stopped (SIGSTOP), and its link dropped by
    the primary, since bytes already sent would still reach it when it resumes."""
    pair.replica.pause()
    call(pair.primary.port, "CLIENT", "KILL", "TYPE", "replica")


def fail_over(pair: ValkeyPair) -> None:
    """The primary dies; the replica, stopped until now, resumes and is promoted."""
    pair.kill_primary()
    pair.replica.resume()
    pair.promote_replica()


def test_without_the_option_a_failover_loses_the_claim_and_the_effect_runs_twice(
    valkey_failover_pair: ValkeyPair,
) -> None:
    """The loss the option is for: the claim was acknowledged by the primary only, the
    primary died while the body ran, and on the promoted replica the key is free."""
    pair, prefix, effects = valkey_failover_pair, new_prefix(), []
    cut_off(pair)
    first = charge(store_at(pair.primary.url, prefix), effects, during=pair.kill_primary)
    assert first({"id": "order-1"}, None) == "charged"  # completion failed: logged, answered
    pair.replica.resume()
    pair.promote_replica()
    second = charge(store_at(pair.primary.url, prefix), effects)
    assert second({"id": "order-1"}, None) == "charged"
    assert effects == ["order-1", "order-1"]


@pytest.mark.parametrize("aof", [False, True], ids=["WAIT", "WAITAOF"])
def test_with_replicas_1_an_unacknowledged_claim_is_refused_before_the_body_runs(
    valkey_failover_pair: ValkeyPair, aof: bool
) -> None:
    """With `replicas=1` the claim the replica did not receive is released and refused
    with a typed error before the effect: after the failover the second caller runs it,
    once in all."""
    pair, prefix, effects = valkey_failover_pair, new_prefix(), []
    cut_off(pair)
    guarded = store_at(pair.primary.url, prefix, replicas=1, replica_timeout_ms=200, aof=aof)
    first = charge(guarded, effects)
    with pytest.raises(StoreError) as caught:
        first({"id": "order-2"}, None)
    assert caught.value.code == REPLICAS_NOT_ACKNOWLEDGED
    assert caught.value.retryable and not caught.value.maybe_applied
    assert "replicas did not acknowledge" in str(caught.value)
    assert "order-2" not in str(caught.value)
    assert effects == []
    (key,) = guarded.client.keys(prefix + "*")
    assert guarded.client.hget(key, "status") == b"RELEASED"  # not left locked
    fail_over(pair)
    second = charge(store_at(pair.primary.url, prefix), effects)
    assert second({"id": "order-2"}, None) == "charged"
    assert effects == ["order-2"]


def test_an_unacknowledged_claim_whose_release_is_lost_says_the_key_may_stay_held(
    valkey_failover_pair: ValkeyPair,
) -> None:
    """The claim's replica stood still, and the release that undoes it was lost too (a
    dropped connection): the error says the claim may hold the key until its lease ends,
    and that it may have applied, which it did (not that an extension may be lost)."""

    class ReleaseLost(redis.Redis):
        """A lone script call (the undo's release) fails as a dropped connection; the
        claim itself goes out in a pipeline with its WAIT."""

        def evalsha(self, *args: Any, **kwargs: Any) -> Any:
            raise redis.exceptions.ConnectionError("Connection closed by server.")

    pair, prefix = valkey_failover_pair, new_prefix()
    client = ReleaseLost.from_url(pair.primary.url)
    store = ValkeyStore(client=client, prefix=prefix, replicas=1, replica_timeout_ms=200)
    pk, now = store.layout.record_key("undo", None, "order-7"), time.time_ns() // 1_000_000
    pair.replica.pause()
    try:
        with pytest.raises(StoreError) as caught:
            store.claim(
                pk,
                owner="a" * 24,
                payload_hash=None,
                now_ms=now,
                lease_until_ms=now + 30_000,
                expiration_s=now // 1000 + 3600,
            )
        assert caught.value.code == REPLICAS_NOT_ACKNOWLEDGED
        assert caught.value.maybe_applied
        assert "nothing ran; the claim may hold the key until its lease ends" in str(caught.value)
        assert client.hget(store.key_of(pk), "status") == b"IN_PROGRESS"
    finally:
        pair.replica.resume()
        client.close()


def test_with_replicas_1_a_healthy_replica_costs_no_failure(valkey_pair: ValkeyPair) -> None:
    """The happy path: every claim, completion and replay answered, each effect once, no
    warning; after each call the replica already holds the completed record."""
    prefix, effects = new_prefix(), []
    # WAITAOF 1 1 takes about a second a write here (the replica reports its fsync once a
    # second): fewer calls
    for options, calls in (({"replicas": 1}, 5), ({"replicas": 1, "aof": True}, 2)):
        guarded = store_at(valkey_pair.primary.url, prefix, **options)
        replica = store_at(valkey_pair.replica.url, prefix)
        handler = charge(guarded, effects)
        for n in range(calls):
            order = f"ok-{options.get('aof', False)}-{n}"
            assert handler({"id": order}, None) == "charged"
            assert handler({"id": order}, None) == "charged"  # a replay
            keys = replica.client.keys(prefix + "*")
            assert len(keys) == len(effects)  # this record, acknowledged, is there
    assert len(effects) == 7


def test_an_unacknowledged_completion_is_logged_and_answered(
    valkey_failover_pair: ValkeyPair, caplog: pytest.LogCaptureFixture
) -> None:
    """The chosen answer for a completion: the effect has run, so the result is answered
    and the shortfall logged (a warning without the key), never raised."""
    pair, prefix, effects = valkey_failover_pair, new_prefix(), []
    guarded = store_at(pair.primary.url, prefix, replicas=1, replica_timeout_ms=200)
    handler = charge(guarded, effects, during=pair.replica.pause)
    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert handler({"id": "order-3"}, None) == "charged"
    pair.replica.resume()
    warned = [
        r.getMessage() for r in caplog.records if "replicas_not_acknowledged" in r.getMessage()
    ]
    assert len(warned) == 1 and '"step": "complete"' in warned[0]
    assert '"detail": "WAIT: 0 of 1 replicas within 200 ms"' in warned[0]  # what fell short
    assert "order-3" not in caplog.text
    assert handler({"id": "order-3"}, None) == "charged"  # completed on the primary: a replay
    assert effects == ["order-3"]


def test_an_unacknowledged_extension_is_refused(valkey_failover_pair: ValkeyPair) -> None:
    """A lost extension would let a second caller in while the holder runs: refused."""
    pair = valkey_failover_pair
    guarded = store_at(pair.primary.url, new_prefix(), replicas=1, replica_timeout_ms=200)
    pk = guarded.layout.record_key("ext", None, "order-4")
    now = guarded.client.time()[0] * 1000
    won, _ = guarded.claim(
        pk,
        owner="me",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 5000,
        expiration_s=now // 1000 + 60,
    )
    assert won
    pair.replica.pause()
    try:
        with pytest.raises(StoreError) as caught:
            guarded.extend_lease(
                pk,
                owner="me",
                payload_hash=None,
                claimed_at_ms=now,
                lease_until_ms=now + 60_000,
                expiration_s=now // 1000 + 120,
            )
    finally:
        pair.replica.resume()
    assert caught.value.code == REPLICAS_NOT_ACKNOWLEDGED and caught.value.maybe_applied


def test_an_unacknowledged_retake_is_released_and_refused(
    valkey_failover_pair: ValkeyPair,
) -> None:
    """A durable execution's retake of its own tombstone is a claim: refused the same way,
    its claim released again."""
    pair = valkey_failover_pair
    guarded = store_at(pair.primary.url, new_prefix(), replicas=1, replica_timeout_ms=200)
    pk = guarded.layout.record_key("retake", None, "order-5")
    now = guarded.client.time()[0] * 1000
    times = {"lease_until_ms": now + 5000, "expiration_s": now // 1000 + 60}
    assert guarded.claim(pk, owner="me", payload_hash=None, now_ms=now, **times)[0]
    assert guarded.release(pk, owner="me", now_ms=now + 1)
    tombstone = guarded.get(pk)
    assert tombstone is not None and tombstone.status.value == "RELEASED"
    pair.replica.pause()
    try:
        with pytest.raises(StoreError, match="replicas did not acknowledge") as caught:
            guarded.retake(
                pk,
                owner="me",
                released_at_ms=tombstone.lease_until or 0,
                payload_hash=None,
                now_ms=now + 2,
                **times,
            )
    finally:
        pair.replica.resume()
    assert caught.value.code == REPLICAS_NOT_ACKNOWLEDGED and not caught.value.maybe_applied
    record = guarded.get(pk)
    assert record is not None and record.status.value == "RELEASED"


def test_in_cluster_mode_the_wait_goes_to_the_node_that_owns_the_key(
    valkey_cluster: ValkeyCluster,
) -> None:
    """Keys spread over every node: each script and its WAITAOF reach the key's own node
    (a wrong node answers MOVED), and WAIT counts that node's replicas: none in this
    cluster, so `replicas=1` refuses every claim, releasing it."""
    prefix, effects = new_prefix(), []
    guarded = store_at(valkey_cluster.url, prefix, cluster=True, aof=True)
    handler = charge(guarded, effects)
    orders = [f"c-{n}" for n in range(30)]
    for order in orders:
        assert handler({"id": order}, None) == "charged"
        assert handler({"id": order}, None) == "charged"
    assert effects == orders
    found = guarded.client.scan_iter(match=prefix + "*")
    nodes = {guarded.client.get_node_from_key(key).port for key in found}
    assert len(nodes) == 3
    strict = store_at(
        valkey_cluster.url, new_prefix(), cluster=True, replicas=1, replica_timeout_ms=50
    )
    refused = charge(strict, effects)
    for order in orders[:6]:
        with pytest.raises(StoreError, match="replicas did not acknowledge"):
            refused({"id": order}, None)
    assert effects == orders


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"replicas": -1}, "replicas must be"),
        ({"replicas": True}, "replicas must be"),
        ({"replicas": "1"}, "replicas must be"),
        ({"replica_timeout_ms": 0}, "replica_timeout_ms must be"),
        ({"replica_timeout_ms": 1.5}, "replica_timeout_ms must be"),
        ({"replicas": 1, "replica_timeout_ms": 5000}, "less than the call's timeout"),
        ({"replicas": 1, "timeout": 1}, "less than the call's timeout"),
        ({"aof": True, "timeout": 2}, "less than the call's timeout"),
        ({"aof": "yes"}, "aof must be"),
    ],
)
def test_wait_options_are_checked_at_construction(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        ValkeyStore("redis://127.0.0.1:1", **options)


def test_a_store_that_waits_for_nothing_keeps_a_short_call_timeout() -> None:
    assert ValkeyStore("redis://127.0.0.1:1", timeout=0.3).replicas == 0
    shown = repr(ValkeyStore("redis://127.0.0.1:1", replicas=2, aof=True))
    assert shown.endswith("replicas=2, aof=True)")


def test_the_failover_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.valkey_failover` end to end at its smallest (numbers meaningless):
    one failover per waiting mode, one claim timed per mode."""
    from benchmarks import valkey_failover

    table = valkey_failover.main(["--trials", "1", "--aof-trials", "0", "--claims", "1"])

    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [row[0].lstrip("| ") for row in rows] == list(valkey_failover.MODES)
    assert [row[1] for row in rows] == ["1", "1", "0", "0"]
    assert rows[1][2] == "0"  # WAIT 1: the effect never ran twice
    assert "effect ran twice" in capsys.readouterr().out
