"""Waiting for an in-flight duplicate, and the Retry-After a refused duplicate is given, on moto
with a fake clock: how long a waiter waits, what ends its wait, and what it tells the caller.

Times here are exact to the millisecond: the fake clock moves only when the library sleeps, so
a waiter that gives up early, late, or never is seen as such.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    PayloadMismatchError,
    StoreError,
    idempotent,
)
from lambda_idempotency._protocol import waiting as _waiting
from lambda_idempotency._stores.encoding import encode
from lambda_idempotency._stores.record import Record, Status
from tests.conftest import FakeClock, FakeContext, RoundTrips

HOLDER = "holder-token"
HOUR_MS = 3_600_000


class ScriptedClock(FakeClock):
    """A fake clock that runs `action` once time reaches `at_ms`: what another invocation
    does while the waiter sleeps."""

    def __init__(self) -> None:
        super().__init__()
        self.start = self.ms
        self.script: list[tuple[int, Callable[[], None]]] = []

    def at(self, after_ms: int, action: Callable[[], None]) -> None:
        self.script.append((self.start + after_ms, action))

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        due = [entry for entry in self.script if entry[0] <= self.ms]
        for entry in due:
            self.script.remove(entry)
            entry[1]()

    @property
    def elapsed_ms(self) -> int:
        return self.ms - self.start


def waiting_handler(
    store: DynamoDBStore, clock: FakeClock, **options: Any
) -> tuple[Any, list[dict[str, Any]]]:
    runs: list[dict[str, Any]] = []

    @idempotent(
        store=store,
        key="order_id",
        on_in_progress="wait",
        clock=clock,
        cache_size=0,
        **options,
    )
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"ran": event["amount"]}

    return handler, runs


def hold(handler: Any, store: DynamoDBStore, event: dict[str, Any], lease_ms: int) -> str:
    """Another invocation claims the event's key, its lease ending `lease_ms` from now."""
    pk, payload_hash = handler.idempotency._identify(event)
    now = handler.idempotency.settings.clock.now_ms()
    won, _ = store.claim(
        pk,
        owner=HOLDER,
        payload_hash=payload_hash,
        now_ms=now,
        lease_until_ms=now + lease_ms,
        expiration_s=now // 1000 + 86_400,
    )
    assert won
    return str(pk)


def complete_as_holder(
    handler: Any, store: DynamoDBStore, event: dict[str, Any], result: Any
) -> Callable[[], None]:
    pk, payload_hash = handler.idempotency._identify(event)

    def complete() -> None:
        now = handler.idempotency.settings.clock.now_ms()
        assert store.complete(
            pk,
            owner=HOLDER,
            payload_hash=payload_hash,
            result=encode(result).blob,
            expiration_s=now // 1000 + 86_400,
            completed_at_ms=now,
        )

    return complete


EVENT = {"order_id": "o-1", "amount": 5}


# -- how long a waiter waits ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("remaining_ms", "max_wait_seconds", "waited_ms"),
    [
        (20_000, None, 18_000),  # its own time less a tenth, to answer in
        (5_000, None, 4_500),  # ... but never less than half a second
        (20_000, 3, 3_000),  # max_wait_seconds caps it
        (2_000, 10, 1_500),  # ... and the invocation's own time caps max_wait_seconds
        (None, 10, 10_000),  # without a Lambda context, max_wait_seconds alone
        (20_005, None, 18_005),  # to the millisecond: the margin is whole milliseconds
    ],
)
def test_a_waiter_gives_up_exactly_when_its_budget_ends(
    moto_store: DynamoDBStore,
    remaining_ms: int | None,
    max_wait_seconds: int | None,
    waited_ms: int,
) -> None:
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock, max_wait_seconds=max_wait_seconds)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    context = None if remaining_ms is None else FakeContext(remaining_ms, clock=clock)

    with pytest.raises(InProgressError) as refused:
        handler(dict(EVENT), context)

    assert clock.elapsed_ms == waited_ms
    assert runs == []
    assert str(refused.value) == "gave up waiting for the holder of this key"
    # Retry-After: from when it gave up, to the first millisecond past the holder's lease and
    # the clock-skew allowance (at the lease's end plus 2 s exactly, a claim is still refused).
    assert refused.value.retry_after == -(-(HOUR_MS + 2_000 + 1 - waited_ms) // 1000)


def test_an_invocation_out_of_time_does_not_wait_at_all(moto_store: DynamoDBStore) -> None:
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)

    with pytest.raises(InProgressError):
        handler(dict(EVENT), FakeContext(400, clock=clock))  # less than the answer margin

    assert clock.slept == []
    assert runs == []


def test_without_context_or_cap_a_waiter_waits_for_a_slow_holder(
    moto_store: DynamoDBStore,
) -> None:
    """Nothing says when the caller gives up: the waiter waits (up to Lambda's longest
    timeout), here for a holder that takes half a minute, and answers within half a second
    of it (its polls are at most that far apart by then)."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(30_000, complete_as_holder(handler, moto_store, EVENT, {"ran": "holder"}))

    assert handler(dict(EVENT), None) == {"ran": "holder"}
    assert 30_000 <= clock.elapsed_ms <= 30_500
    assert runs == []


def test_without_context_or_cap_a_waiter_gives_up_after_lambdas_longest_timeout(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing says when the caller gives up: the waiter waits 15 minutes, no more, for a
    holder that never finishes. Its thousands of polls read the holder's unchanged record
    from memory, so the test takes a second, not a minute of moto."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    held = moto_store.get(pk)
    monkeypatch.setattr(moto_store, "get", lambda key: held if key == pk else None)

    with pytest.raises(InProgressError) as refused:
        handler(dict(EVENT), None)

    assert clock.elapsed_ms == 900_000
    assert runs == []
    assert refused.value.retry_after == -(-(HOUR_MS + 2_000 + 1 - 900_000) // 1000)


def test_a_waiter_polls_at_a_quarter_of_the_holder_age(moto_store: DynamoDBStore) -> None:
    """Polls 100 ms apart at most while the holder is young, then a quarter of the time the
    holder has run, up to half a second apart, each drawn from half to all of that: a waiter
    is at most a quarter of the handler's time late, at fewer reads the longer it waits."""
    clock = ScriptedClock()
    handler, _ = waiting_handler(moto_store, clock, max_wait_seconds=10)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    trips = RoundTrips(moto_store.client)

    with pytest.raises(InProgressError):
        handler(dict(EVENT), None)

    age = 0
    for slept in clock.slept[:-1]:  # the last sleep is cut short by the deadline
        nominal = min(max(age / 4, 100), 500)
        assert nominal / 2 - 1 <= slept * 1000 <= nominal + 1
        age += round(slept * 1000)
    polls = trips.take().count("GetItem")
    assert polls == len(clock.slept)
    # 10 s of polls: about 6 in the first 0.4 s, 8 more to 2 s, 2.7 a second after that.
    assert 25 <= polls <= 50
    assert all(slept >= 0.25 for slept in clock.slept[-5:-1])  # the last seconds: 0.5 s apart


def test_a_waiter_arriving_late_polls_at_the_holder_pace(moto_store: DynamoDBStore) -> None:
    """A duplicate of a key whose holder has run for 20 s already polls at the slowest pace
    from the start: a retry storm on a long-running key costs ~2.7 reads a second a caller,
    not the young-holder pace (13 a second)."""
    clock = ScriptedClock()
    handler, _ = waiting_handler(moto_store, clock, max_wait_seconds=5)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.advance(20)
    trips = RoundTrips(moto_store.client)

    with pytest.raises(InProgressError):
        handler(dict(EVENT), None)

    assert all(0.25 <= slept <= 0.5 for slept in clock.slept[:-1])
    assert 10 <= trips.take().count("GetItem") <= 20


def test_waiters_that_arrive_together_do_not_poll_together(moto_store: DynamoDBStore) -> None:
    """Jitter: eight waiters refused at the same moment draw different poll times."""
    schedules = []
    for _ in range(8):
        clock = ScriptedClock()
        handler, _ = waiting_handler(moto_store, clock, max_wait_seconds=2)
        hold(handler, moto_store, {**EVENT, "order_id": f"o-{len(schedules)}"}, lease_ms=HOUR_MS)
        with pytest.raises(InProgressError):
            handler({**EVENT, "order_id": f"o-{len(schedules)}"}, None)
        schedules.append(tuple(clock.slept[:3]))
    assert len(set(schedules)) == 8


def test_a_waiter_polls_the_moment_the_holder_lease_lapses(moto_store: DynamoDBStore) -> None:
    """Lease 3 s, skew allowance 2 s: the key frees at 5,001 ms on every clock, and that is
    when the waiter polls (not up to a poll interval later), claims and runs."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=3_000)

    assert handler(dict(EVENT), FakeContext(60_000, clock=clock)) == {"ran": 5}
    assert clock.elapsed_ms == 5_001
    assert len(runs) == 1


def test_a_waiter_runs_the_moment_a_release_ahead_of_its_clock_frees_the_key(
    moto_store: DynamoDBStore,
) -> None:
    """A tombstone released 1.5 s ahead of the waiter's clock frees the key when the waiter's
    clock reaches it: the waiter polls then, claims and runs, not a poll interval later, and
    sends no claim before (each would be refused, and cost a write)."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    assert moto_store.release(pk, owner=HOLDER, now_ms=clock.now_ms() + 1_500)
    trips = RoundTrips(moto_store.client)

    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": 5}
    assert clock.elapsed_ms == 1_500
    assert len(runs) == 1
    assert trips.take().count("PutItem") == 3  # the refused claim, the winning one, completion


def test_a_store_refusing_claims_over_a_lapsed_lease_gets_no_claim_storm(
    moto_store: DynamoDBStore,
) -> None:
    """A store that refuses every claim over a record the protocol judges free (its fields
    disagree, or the store judges otherwise): the first refusal is polled at once (the
    ordinary takeover), every one after it backs off as a throttled poll does, so a waiter
    never loops claim-refused-claim without a pause; it gives up at its budget, nothing run."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock, max_wait_seconds=1)
    hold(handler, moto_store, EVENT, lease_ms=-60_000)  # lapsed a minute ago
    claims: list[int] = []
    get = moto_store.get

    def refusing_claim(key: str, **_: Any) -> tuple[bool, Record | None]:
        claims.append(clock.elapsed_ms)
        assert len(claims) < 100, "a claim storm: no pause between refused claims"
        return False, get(key)

    moto_store.claim = refusing_claim  # type: ignore[method-assign]
    with pytest.raises(InProgressError):
        handler(dict(EVENT), FakeContext(30_000, clock=clock))

    assert runs == []
    assert claims[:2] == [0, 0]
    gaps = [later - earlier for earlier, later in itertools.pairwise(claims[1:])]
    # a throttled poll's backoff at least, but for the last sleep, cut short by the budget
    assert all(gap >= 100 for gap in gaps[:-1]), gaps
    assert claims[-1] <= 1_000 and len(claims) <= 8, claims


def test_a_throttled_poll_backs_off_and_the_wait_goes_on(
    moto_store: DynamoDBStore, caplog: Any
) -> None:
    """The key's partition throttles the waiter's reads (after botocore's own retries): the
    waiter skips those polls, doubles its interval per throttle in a row, and still replays
    the holder's result; nothing runs twice."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(3_000, complete_as_holder(handler, moto_store, EVENT, {"ran": "holder"}))
    get = moto_store.get
    throttles = iter(range(4))

    def throttled_get(key: str) -> Any:
        if next(throttles, None) is not None:
            raise StoreError("throttled", key_hash=key, code="ThrottlingException", retryable=True)
        return get(key)

    moto_store.get = throttled_get  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": "holder"}

    assert runs == []
    assert handler.idempotency.stats["wait_throttled"] == 4
    age = 0
    for in_a_row, slept in enumerate(clock.slept[:5]):  # 0 .. 4 throttles before each sleep
        nominal = min(min(max(age / 4, 100), 500) * 2**in_a_row, 4_000)
        assert nominal / 2 - 1 <= slept * 1000 <= nominal + 1
        age += round(slept * 1000)
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    assert lines[0] == {
        "idempotency": "wait_throttled",
        "key_hash": pk,
        "namespace": handler.idempotency.settings.namespace,
        "code": "ThrottlingException",
    }


def test_a_waiter_throttled_again_after_an_answered_poll_backs_off_from_the_start(
    moto_store: DynamoDBStore,
) -> None:
    """Throttles that come and go: an answered poll (the holder still running) ends a run of
    throttles, so the next throttle doubles the interval once, not once per throttle seen in
    the whole wait; the waiter still replays the holder's result and nothing runs twice."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(3_000, complete_as_holder(handler, moto_store, EVENT, {"ran": "holder"}))
    get = moto_store.get
    polls = iter([True, False, True, False, True])  # throttled, answered, throttled, ...

    def sometimes_throttled_get(key: str) -> Any:
        if next(polls, False):
            raise StoreError("throttled", key_hash=key, code="ThrottlingException", retryable=True)
        return get(key)

    moto_store.get = sometimes_throttled_get  # type: ignore[method-assign]
    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": "holder"}

    assert runs == []
    assert handler.idempotency.stats["wait_throttled"] == 3
    age = 0
    for throttled_before, slept in zip([0, 1, 0, 1, 0, 1], clock.slept, strict=False):
        nominal = min(max(age / 4, 100), 500) * 2**throttled_before
        assert nominal / 2 - 1 <= slept * 1000 <= nominal + 1
        age += round(slept * 1000)


# -- what ends a wait -------------------------------------------------------------------------


def test_a_waiter_replays_the_holder_result_soon_after_it_completes(
    moto_store: DynamoDBStore,
) -> None:
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(2_000, complete_as_holder(handler, moto_store, EVENT, {"ran": "holder"}))

    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": "holder"}
    assert 2_000 <= clock.elapsed_ms <= 2_500
    assert runs == []
    assert handler.idempotency.stats["waiting"] == 1


def test_a_waiter_runs_the_handler_once_the_holder_releases(moto_store: DynamoDBStore) -> None:
    """The holder failed and released the key (a tombstone): the waiter claims and runs."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(1_000, lambda: moto_store.release(pk, owner=HOLDER, now_ms=clock.now_ms() - 5_000))

    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": 5}
    assert len(runs) == 1
    assert 1_000 <= clock.elapsed_ms <= 1_500


def test_a_waiter_runs_the_handler_once_the_holder_record_is_gone(
    moto_store: DynamoDBStore,
) -> None:
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    clock.at(
        1_000,
        lambda: moto_store.client.delete_item(
            TableName=moto_store.table_name, Key={"pk": {"S": pk}}
        ),
    )

    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == {"ran": 5}
    assert len(runs) == 1
    assert clock.elapsed_ms <= 1_500


def test_a_waiter_takes_over_once_the_holder_lease_lapses_beyond_the_skew(
    moto_store: DynamoDBStore,
) -> None:
    """A crashed holder: its lease ends in 3 s; with the 2 s skew allowance the waiter claims
    a little after 5 s, not before (the holder may still run on a clock 2 s behind)."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=3_000)
    trips = RoundTrips(moto_store.client)

    assert handler(dict(EVENT), FakeContext(60_000, clock=clock)) == {"ran": 5}
    assert len(runs) == 1
    assert 5_000 < clock.elapsed_ms <= 5_600
    assert handler.idempotency.stats["taken_over"] == 1
    # One refused claim, polls, one claim that wins: no claims sent while the lease has
    # lapsed on our clock but not on the holder's (each would be refused, and cost a write).
    sent = trips.take()
    assert sent.count("PutItem") == 3  # the two claims and the completion
    assert set(sent) == {"PutItem", "GetItem"}


def test_a_waiter_takes_over_an_expired_holder_only_past_the_skew(
    moto_store: DynamoDBStore,
) -> None:
    """A holder record without a lease (as Powertools writes one) frees at its expiration,
    plus the skew allowance: the waiter polls and claims at that millisecond."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    now = clock.now_ms()
    expiration_s = now // 1000 + 4
    moto_store.client.put_item(
        TableName=moto_store.table_name,
        Item={
            "pk": {"S": pk},
            "status": {"S": "IN_PROGRESS"},
            "expiration": {"N": str(expiration_s)},
            "owner": {"S": HOLDER},
            "payload_hash": {"S": payload_hash},
        },
    )

    trips = RoundTrips(moto_store.client)
    assert handler(dict(EVENT), FakeContext(60_000, clock=clock)) == {"ran": 5}
    assert len(runs) == 1
    assert trips.take().count("PutItem") == 3  # refused claim, winning claim, completion
    # Free once expired on a clock 2 s behind: at (expiration + 1) s + 2 s, when it polls.
    assert clock.now_ms() == (expiration_s + 1) * 1000 + 2_000


def test_a_waiter_that_polls_another_payload_refuses_it(moto_store: DynamoDBStore) -> None:
    """While the waiter waited, the key's record was replaced by a run of another payload
    (the holder lapsed and someone else claimed): the waiter must not replay that result."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock, payload="@")
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    other = {**EVENT, "amount": 999}
    _, other_hash = handler.idempotency._identify(other)

    def replaced_by_other_payload() -> None:
        moto_store.client.put_item(
            TableName=moto_store.table_name,
            Item={
                "pk": {"S": pk},
                "status": {"S": "COMPLETED"},
                "expiration": {"N": str(clock.now_ms() // 1000 + 86_400)},
                "owner": {"S": "someone-else"},
                "payload_hash": {"S": other_hash},
                "result": {"B": encode({"ran": 999}).blob},
            },
        )

    clock.at(1_000, replaced_by_other_payload)

    with pytest.raises(PayloadMismatchError) as refused:
        handler(dict(EVENT), FakeContext(30_000, clock=clock))
    assert refused.value.key_hash == pk
    assert str(refused.value) == "this key was used with a different payload"
    assert runs == []


def test_a_waiter_whose_poll_fails_raises_a_store_error_and_logs_it(
    moto_store: DynamoDBStore, caplog: Any
) -> None:
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)

    def fail_reads(*_: Any) -> None:
        raise StoreError("reads are failing", key_hash=pk, code="InternalServerError")

    clock.at(500, lambda: setattr(moto_store, "get", fail_reads))
    with (
        caplog.at_level(logging.DEBUG, logger="lambda_idempotency"),
        pytest.raises(StoreError),
    ):
        handler(dict(EVENT), FakeContext(30_000, clock=clock))

    assert runs == []
    lines = [json.loads(r.getMessage()) for r in caplog.records]
    assert {"idempotency": "waiting", "key_hash": pk, "namespace": lines[0]["namespace"]} in lines
    assert [(r.levelno, json.loads(r.getMessage())) for r in caplog.records][-1] == (
        logging.ERROR,
        {
            "idempotency": "store_error",
            "key_hash": pk,
            "namespace": lines[0]["namespace"],
            "step": "wait",
            "code": "InternalServerError",
        },
    )


# -- Retry-After for a refused duplicate ------------------------------------------------------


def raising_handler(store: DynamoDBStore, clock: FakeClock, **options: Any) -> Any:
    @idempotent(store=store, key="order_id", clock=clock, cache_size=0, **options)
    def handler(event: dict[str, Any], context: Any) -> str:
        return "ran"

    return handler


@pytest.mark.parametrize(
    ("lease_ms", "skew_seconds", "retry_after"),
    [
        # The first whole second past the holder's lease plus the default 2 s allowance: at
        # 32.000 s the lease has not lapsed yet on a clock 2 s behind (the claim's condition
        # is strict), so 32 would send the caller back to a second refusal.
        (30_000, None, 33),
        (29_999, None, 32),
        (30_001, None, 33),  # rounded up: a retry sooner than that would be refused again
        (30_000, 0, 31),
        (-1_500, None, 1),  # lapsed on our clock, not yet on one 2 s behind: soon, not never
    ],
)
def test_retry_after_is_when_the_holder_lease_lapses_on_every_clock(
    moto_store: DynamoDBStore,
    clock: FakeClock,
    lease_ms: int,
    skew_seconds: int | None,
    retry_after: int,
) -> None:
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    handler = raising_handler(moto_store, clock, **options)
    pk = hold(handler, moto_store, EVENT, lease_ms=lease_ms)

    with pytest.raises(InProgressError) as refused:
        handler(dict(EVENT), FakeContext(30_000, clock=clock))

    assert refused.value.retry_after == retry_after
    assert refused.value.key_hash == pk
    assert str(refused.value) == "another invocation is running with this key"


def test_retry_after_for_a_holder_without_a_lease_is_its_expiration(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    """Powertools writes IN_PROGRESS records without a lease when it has no context: the key
    frees past the record's expiration (its last second, plus the skew allowance), so say
    that, not "1 s", and not a second early."""
    handler = raising_handler(moto_store, clock)
    pk, _ = handler.idempotency._identify(EVENT)
    now = clock.now_ms()
    moto_store.client.put_item(
        TableName=moto_store.table_name,
        Item={
            "pk": {"S": pk},
            "status": {"S": "IN_PROGRESS"},
            "expiration": {"N": str(now // 1000 + 600)},
            "owner": {"S": HOLDER},
        },
    )

    with pytest.raises(InProgressError) as refused:
        handler(dict(EVENT), FakeContext(30_000, clock=clock))

    expected = -(-((now // 1000 + 601) * 1000 + 2_000 - now) // 1000)
    assert refused.value.retry_after == expected

    clock.advance(expected - 1)  # a second sooner: still held on a clock 2 s behind
    with pytest.raises(InProgressError):
        handler(dict(EVENT), FakeContext(30_000, clock=clock))
    clock.advance(1)
    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == "ran"


def test_retry_after_for_a_release_ahead_of_our_clock_is_until_the_release(
    moto_store: DynamoDBStore, clock: FakeClock
) -> None:
    """A tombstone released 1.5 s ahead of our clock (the releaser's clock runs ahead): the key
    frees when our clock reaches the release, with no skew allowance on top."""
    handler = raising_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)
    assert moto_store.release(pk, owner=HOLDER, now_ms=clock.now_ms() + 1_500)

    with pytest.raises(InProgressError) as refused:
        handler(dict(EVENT), FakeContext(30_000, clock=clock))
    assert refused.value.retry_after == 2

    clock.advance(1.5)
    assert handler(dict(EVENT), FakeContext(30_000, clock=clock)) == "ran"


def test_a_refused_duplicate_is_logged_with_its_retry_after(
    moto_store: DynamoDBStore, clock: FakeClock, caplog: Any
) -> None:
    handler = raising_handler(moto_store, clock)
    pk = hold(handler, moto_store, EVENT, lease_ms=10_000)

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(InProgressError),
    ):
        handler(dict(EVENT), FakeContext(30_000, clock=clock))

    lines = [(r.levelno, json.loads(r.getMessage())) for r in caplog.records]
    assert lines == [
        (
            logging.INFO,
            {
                "idempotency": "in_progress",
                "key_hash": pk,
                "namespace": handler.idempotency.settings.namespace,
                "retry_after": 13,
            },
        )
    ]


# -- a waiter that has seen the function run -------------------------------------------------


def timed_handler(store: DynamoDBStore, clock: FakeClock) -> tuple[Any, list[dict[str, Any]]]:
    """A handler whose body takes `takes_ms` of the event on the fake clock."""
    runs: list[dict[str, Any]] = []

    @idempotent(store=store, key="order_id", on_in_progress="wait", clock=clock, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        clock.advance(event["takes_ms"] / 1000)
        return {"ran": event["order_id"]}

    return handler, runs


def polls_at(clock: ScriptedClock, since_ms: int) -> list[int]:
    """When the waiter polled, in ms from `since_ms` (each sleep ends in a poll)."""
    times, at = [], 0
    for slept in clock.slept:
        at += int(slept * 1000)
        times.append(at - since_ms)
    return times


def run_three_times(handler: Any, clock: ScriptedClock) -> None:
    for takes_ms in (2_900, 3_100, 3_000):
        handler({"order_id": f"earlier-{takes_ms}", "takes_ms": takes_ms}, None)
    clock.start = clock.ms
    clock.slept.clear()


def test_a_waiter_that_has_seen_the_function_run_answers_soon_after_a_holder_on_time(
    moto_store: DynamoDBStore,
) -> None:
    """This container ran the function three times, 2.9 to 3.1 s each. Another invocation
    holds a key and completes at 3.05 s: the waiter polls 100 ms before the shortest run
    would have ended, then every 25 to 50 ms, and answers within 50 ms of the completion (by
    then the regular schedule polls 250 to 500 ms apart)."""
    clock = ScriptedClock()
    handler, runs = timed_handler(moto_store, clock)
    run_three_times(handler, clock)
    assert list(handler.idempotency.recent_runs_ms) == [2_900, 3_100, 3_000]
    event = {"order_id": "hot", "takes_ms": 3_000}
    hold(handler, moto_store, event, lease_ms=HOUR_MS)
    clock.at(3_050, complete_as_holder(handler, moto_store, event, {"ran": "holder"}))

    assert handler(dict(event), FakeContext(30_000, clock=clock)) == {"ran": "holder"}

    assert 3_050 <= clock.elapsed_ms <= 3_100
    assert len(runs) == 3
    window = [at for at in polls_at(clock, 0) if at >= 2_800]
    assert window[0] == 2_800  # 100 ms before the shortest run would have ended
    assert all(25 <= b - a <= 50 for a, b in itertools.pairwise(window))


def test_a_holder_slower_than_every_recent_run_is_polled_at_the_regular_pace_again(
    moto_store: DynamoDBStore,
) -> None:
    """The holder takes 6 s, twice the runs this container saw: the dense polls stop half a
    second after they started (250 ms past the longest run, capped), and the waiter goes
    back to polling a
    jittered quarter of the holder's age apart, so a slow holder costs no more reads than
    before; the waiter still replays its result."""
    clock = ScriptedClock()
    handler, runs = timed_handler(moto_store, clock)
    run_three_times(handler, clock)
    event = {"order_id": "slow", "takes_ms": 6_000}
    hold(handler, moto_store, event, lease_ms=HOUR_MS)
    clock.at(6_000, complete_as_holder(handler, moto_store, event, {"ran": "holder"}))
    trips = RoundTrips(moto_store.client)

    assert handler(dict(event), FakeContext(30_000, clock=clock)) == {"ran": "holder"}

    assert 6_000 <= clock.elapsed_ms <= 6_500
    assert len(runs) == 3
    times = polls_at(clock, 0)
    dense = [at for at in times if 2_800 <= at < 3_300]
    assert 10 <= len(dense) <= 21  # 500 ms (the cap) at 25 to 50 ms apart
    after = [at for at in times if at >= 3_300]
    assert all(250 <= b - a <= 500 for a, b in itertools.pairwise(after))
    assert len(after) <= (6_500 - 3_300) // 250 + 1
    # The regular schedule's jittered polls before the window are 16 to 18 as drawn; the bound
    # is that plus the window's and the slow pace's most, not one draw's count.
    assert trips.take().count("GetItem") == len(times) <= 20 + 21 + 13


def test_a_container_learns_run_times_from_the_records_it_replays(
    moto_store: DynamoDBStore,
) -> None:
    """A container that never ran the function learns how long it takes from a record it
    replays (claimed at, completed at); a record without both ends (as Powertools writes
    them) or with ends no invocation could have (a clock that jumped) teaches it nothing."""
    clock = ScriptedClock()
    handler, runs = timed_handler(moto_store, clock)
    now = clock.now_ms()

    def stored(order_id: str, **ends: int) -> dict[str, Any]:
        event = {"order_id": order_id, "takes_ms": 0}
        pk, payload_hash = handler.idempotency._identify(event)
        hold(handler, moto_store, event, lease_ms=HOUR_MS)
        assert moto_store.complete(
            pk,
            owner=HOLDER,
            payload_hash=payload_hash,
            result=encode({"ran": "holder"}).blob,
            expiration_s=now // 1000 + 86_400,
            **ends,
        )
        return event

    for event in (
        stored("both", claimed_at_ms=now - 1_234, completed_at_ms=now),
        stored("instant", claimed_at_ms=now, completed_at_ms=now),
        stored("no-claim", completed_at_ms=now),
        stored("backwards", claimed_at_ms=now + 5, completed_at_ms=now),
        stored("too-long", claimed_at_ms=now - 900_001, completed_at_ms=now),
        stored("longest", claimed_at_ms=now - 900_000, completed_at_ms=now),
    ):
        assert handler(event, None) == {"ran": "holder"}

    assert runs == []
    assert list(handler.idempotency.recent_runs_ms) == [1_234, 0, 900_000]


def test_a_container_remembers_its_latest_sixteen_runs(moto_store: DynamoDBStore) -> None:
    clock = ScriptedClock()
    handler, _ = timed_handler(moto_store, clock)
    for takes_ms in range(100, 2_100, 100):
        handler({"order_id": f"o-{takes_ms}", "takes_ms": takes_ms}, None)
    assert list(handler.idempotency.recent_runs_ms) == list(range(500, 2_100, 100))


def test_a_waiter_polling_in_a_busy_loop_fails_its_test_at_once(
    moto_store: DynamoDBStore,
) -> None:
    """Should the schedule ever poll without waiting while the key stays held (a key that
    frees sooner by the schedule than by the wait loop's reading), the fake clock would never
    move and the test would hang: the clock raises instead, after a thousand sleeps in a row
    that do not move it. Sleeps that move it never raise."""
    clock = ScriptedClock()
    handler, runs = waiting_handler(moto_store, clock)
    hold(handler, moto_store, EVENT, lease_ms=HOUR_MS)

    with (
        mock.patch.object(_waiting, "next_poll_ms", return_value=0),
        pytest.raises(RuntimeError, match="busy loop"),
    ):
        handler(dict(EVENT), FakeContext(30_000, clock=clock))
    assert len(clock.slept) == 1_001
    assert runs == []

    moving = FakeClock()
    for _ in range(5_000):
        moving.sleep(0.0004)  # under a millisecond: does not move it...
        moving.sleep(0.001)  # ...but this does
    assert len(moving.slept) == 10_000


# -- the poll schedule, property by property ------------------------------------------------
#
# `next_poll_ms` is a pure function of the held record, the time, the skew allowance, the
# throttles in a row and one jitter draw: the draw is given here, as a share of the jitter
# range, so each answer can be checked to the millisecond.

NOW_MS = 1_790_000_000_000


class Jitter:
    """Stands in for `random` in `_protocol.waiting`: every draw is `share` of the way from the low
    bound to the high one."""

    def __init__(self, share: float) -> None:
        self.share = share

    def uniform(self, low: float, high: float) -> float:
        return low + (high - low) * self.share


def poll_in_ms(
    held: Record,
    *,
    age_ms: int,
    skew_ms: int,
    throttled: int,
    share: float,
    now_ms: int = NOW_MS,
    runs_ms: list[int] | None = None,
) -> int:
    with mock.patch.object(_waiting, "random", Jitter(share)):
        return _waiting.next_poll_ms(
            held,
            now_ms=now_ms,
            started_ms=now_ms - age_ms,
            skew_ms=skew_ms,
            throttled=throttled,
            runs_ms=runs_ms or (),
        )


def holder(age_ms: int, now_ms: int = NOW_MS, **fields: Any) -> Record:
    """A holder that claimed `age_ms` ago; by default its lease and record last an hour."""
    defaults: dict[str, Any] = {
        "status": Status.IN_PROGRESS,
        "expiration": now_ms // 1000 + 3_600,
        "lease_until": now_ms + HOUR_MS,
        "claimed_at": now_ms - age_ms,
    }
    return Record("pk", **{**defaults, **fields})


def free_on_every_clock(held: Record, now_ms: int, skew_ms: int) -> bool:
    """What a poll at `now_ms` finds, reading `held` unchanged: the key free to claim (as the
    waiter decides it after reading the record)."""
    if held.is_expired(now_ms, skew_ms):
        return True
    if held.status is Status.RELEASED:
        return (held.lease_until or 0) <= now_ms
    return held.lease_lapsed(now_ms, skew_ms)


ages = st.integers(0, 3_000) | st.integers(0, 3_600_000)
shares = st.floats(0.0, 1.0)


@given(age_ms=ages, throttled=st.integers(0, 12), share=shares)
# Where the step times the jitter draw rounds near a half millisecond, or the cap binds:
@example(age_ms=0, throttled=0, share=0.989)  # 100 ms x 0.9945 = 99.45 ms: 99
@example(age_ms=10_000, throttled=0, share=0.9978)  # 500 ms x 0.9989 = 499.45 ms: 499
@example(age_ms=60_000, throttled=5, share=1.0)  # 500 ms x 32, capped: 4,000 ms
@example(age_ms=0, throttled=6, share=0.9989)  # 100 ms x 64, capped: x 0.99945 = 3,998 ms
def test_a_poll_comes_a_jittered_quarter_of_the_holder_age_later_within_the_bounds(
    age_ms: int, throttled: int, share: float
) -> None:
    """The step is a quarter of the holder's age, at least 100 ms, at most 500 ms; each poll
    in a row that was throttled doubles it, up to 4 s; the poll comes after half to all of the
    step (the jitter draw), to the nearest millisecond."""
    step = min(max(age_ms / 4, 100), 500)
    step = min(step * 2**throttled, 4_000)
    jitter = 0.5 + 0.5 * share

    polled_in = poll_in_ms(
        holder(age_ms), age_ms=age_ms, skew_ms=2_000, throttled=throttled, share=share
    )

    assert abs(polled_in - step * jitter) <= 0.5
    assert 50 <= polled_in <= 4_000  # 100 ms at least, jittered to half; 4 s at most


@given(
    age_ms=ages,
    skew_ms=st.integers(0, 5_000),
    throttled=st.integers(0, 3),
    share=shares,
    kind=st.sampled_from(["lease", "no lease (Powertools)", "released ahead of our clock"]),
    frees_in_ms=st.integers(1, 600) | st.integers(1, 5_000),
)
@example(10_000, 2_000, 0, 1.0, "no lease (Powertools)", 200)
@example(10_000, 2_000, 0, 1.0, "lease", 200)
@example(10_000, 2_000, 0, 1.0, "released ahead of our clock", 200)
@example(10_000, 2_000, 1, 1.0, "lease", 200)
def test_a_waiter_polls_the_first_millisecond_the_key_is_free_on_every_clock(
    age_ms: int, skew_ms: int, throttled: int, share: float, kind: str, frees_in_ms: int
) -> None:
    """When the held key frees on every clock (lease or record lapsed past the skew allowance,
    or a release ahead of our clock reached) sooner than the next regular poll, the waiter
    polls at exactly that millisecond: not before (the poll would find the key still held),
    not after (it would answer late). A throttled waiter keeps backing off instead."""
    now = NOW_MS
    if kind == "lease":
        held = holder(age_ms, now, lease_until=now + frees_in_ms - skew_ms - 1)
    elif kind == "no lease (Powertools)":
        # Whole seconds: such a record frees the skew allowance past a second's start.
        now = NOW_MS + (skew_ms - frees_in_ms) % 1000
        expiration = (now + frees_in_ms - skew_ms) // 1000 - 1
        held = holder(age_ms, now, lease_until=None, expiration=expiration)
    else:
        held = holder(age_ms, now, status=Status.RELEASED, lease_until=now + frees_in_ms)
    assume(not free_on_every_clock(held, now, skew_ms))  # the key is held when it waits
    first_free = next(
        t for t in range(now + 1, now + 6_000) if free_on_every_clock(held, t, skew_ms)
    )
    regular = poll_in_ms(
        holder(age_ms, now),
        age_ms=age_ms,
        skew_ms=skew_ms,
        throttled=throttled,
        share=share,
        now_ms=now,
    )

    polled_in = poll_in_ms(
        held, age_ms=age_ms, skew_ms=skew_ms, throttled=throttled, share=share, now_ms=now
    )

    if first_free - now < regular and not throttled:
        assert polled_in == first_free - now
    else:
        assert polled_in == regular


@given(
    age_ms=st.integers(0, 25_000),
    skew_ms=st.integers(0, 5_000),
    share=shares,
    kind=st.sampled_from(["lease", "no lease (Powertools)", "released ahead of our clock"]),
    freed_ms_ago=st.integers(0, 5_000),
)
def test_a_waiter_whose_key_is_already_free_polls_at_once(
    age_ms: int, skew_ms: int, share: float, kind: str, freed_ms_ago: int
) -> None:
    """The refused claim came back after the key had freed on every clock (a slow answer):
    the waiter polls at once instead of a regular interval later. A throttled one backs off
    all the same."""
    now = NOW_MS
    if kind == "lease":
        held = holder(age_ms, now, lease_until=now - skew_ms - 1 - freed_ms_ago)
    elif kind == "no lease (Powertools)":
        held = holder(age_ms, now, lease_until=None, expiration=(now - skew_ms) // 1000 - 1)
    else:
        held = holder(age_ms, now, status=Status.RELEASED, lease_until=now - freed_ms_ago)
    assert free_on_every_clock(held, now, skew_ms)
    regular = poll_in_ms(
        holder(age_ms, now), age_ms=age_ms, skew_ms=skew_ms, throttled=1, share=share
    )

    assert poll_in_ms(held, age_ms=age_ms, skew_ms=skew_ms, throttled=0, share=share) == 0
    assert poll_in_ms(held, age_ms=age_ms, skew_ms=skew_ms, throttled=1, share=share) == regular


runs = st.lists(st.integers(0, 20_000), min_size=1, max_size=16)


@given(age_ms=st.integers(0, 25_000), runs_ms=runs, share=shares)
# Either side of the window's edges: opening, closing 250 ms past the longest run, the cap.
@example(age_ms=2_799, runs_ms=[2_900], share=1.0)
@example(age_ms=2_800, runs_ms=[2_900], share=1.0)
@example(age_ms=3_149, runs_ms=[2_900], share=0.0)
@example(age_ms=3_150, runs_ms=[2_900], share=0.0)
@example(age_ms=3_299, runs_ms=[9_000, 2_900], share=0.0)
@example(age_ms=3_300, runs_ms=[9_000, 2_900], share=0.0)
@example(age_ms=200, runs_ms=[300, 250], share=1.0)  # the regular poll comes first
@example(age_ms=2_900, runs_ms=[2_900], share=0.4996)  # 50 ms x 0.7498 = 37.49 ms: 37
def test_a_waiter_that_has_seen_the_function_run_polls_when_the_holder_is_due(
    age_ms: int, runs_ms: list[int], share: float
) -> None:
    """The window opens 100 ms before the shortest recent run would have ended, counted from
    the holder's claim, and closes 250 ms after the longest would have, at most 500 ms after it
    opens. Before it, the waiter polls at its regular time or the opening, whichever is
    sooner; within it, at its regular time or a jittered 25 to 50 ms, whichever is sooner;
    after it, at its regular time: never later than without the runs."""
    regular = poll_in_ms(holder(age_ms), age_ms=age_ms, skew_ms=2_000, throttled=0, share=share)
    opens = min(runs_ms) - 100
    closes = min(max(runs_ms) + 250, opens + 500)

    polled_in = poll_in_ms(
        holder(age_ms), age_ms=age_ms, skew_ms=2_000, throttled=0, share=share, runs_ms=runs_ms
    )

    if age_ms < opens:
        assert polled_in == min(regular, opens - age_ms)
    elif age_ms < closes:
        assert polled_in == min(regular, round(50 * (0.5 + 0.5 * share)))
    else:
        assert polled_in == regular


@given(age_ms=st.integers(0, 25_000), runs_ms=runs, throttled=st.integers(0, 6), share=shares)
def test_runs_seen_change_nothing_for_a_throttled_waiter_or_a_holder_without_claimed_at(
    age_ms: int, runs_ms: list[int], throttled: int, share: float
) -> None:
    """A throttled waiter backs off as before; a record without `claimed_at` (Powertools')
    does not say when its holder started, so there is nothing to count the runs from."""
    held = holder(age_ms)
    assert poll_in_ms(
        held, age_ms=age_ms, skew_ms=2_000, throttled=throttled + 1, share=share, runs_ms=runs_ms
    ) == poll_in_ms(held, age_ms=age_ms, skew_ms=2_000, throttled=throttled + 1, share=share)
    anonymous = holder(age_ms, claimed_at=None)
    assert poll_in_ms(
        anonymous, age_ms=age_ms, skew_ms=2_000, throttled=throttled, share=share, runs_ms=runs_ms
    ) == poll_in_ms(anonymous, age_ms=age_ms, skew_ms=2_000, throttled=throttled, share=share)
