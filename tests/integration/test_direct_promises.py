"""Four promises, each asserted for itself rather than through a side effect (a round-trip
count, a conformance byte, a waiter's timing, a Retry-After figure), on DynamoDB Local,
through the decorators, with the library's own default client on both of its paths (the
fast wire path and the plain boto3 client) and a fake clock:

- a completion fenced out by a takeover raises exactly the documented class,
  `LeaseLostError`, when enlisted writes were lost with it, and nothing without them
  (docs/guide.md "Enlisted writes", docs/protocol.md's zombie row);
- a claim that landed and was then throttled is released: the next call runs at once,
  not after the lease (docs/protocol.md, "the claim fails ... after a request that may have
  landed: it is released on the way out");
- the release's tombstone carries the release time as `lease_until` and lives 15 minutes
  (docs/protocol.md, step 4): a delayed copy of the claim, ours or another owner's signed
  before the release, never locks the key again, and the key is free for every other claim
  from the release's millisecond;
- the clock-skew allowance is in seconds (`clock_skew_seconds`, default 2): a lease lapsed by
  1.9 s still holds the key and one lapsed by 2.1 s does not; a record expired by 1.9 s still
  replays and one expired by 2.1 s runs again; and a retry `retry_after` seconds after an
  `InProgressError` is answered.

Each was once broken by hand (docs/contributing/testing.md) and caught here in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    IdempotencyError,
    InProgressError,
    LeaseLostError,
    Status,
    StoreError,
    current_execution,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeClock, FakeContext
from tests.reliability.faults import Fault, FaultInjector, fast_retries

pytestmark = pytest.mark.dynamodb_local

START_MS = 1_900_000_000_000
"""A whole second, in 2030: the records' times are exact and far from any TTL sweep."""
NAMESPACE = "orders"
EVENT = {"order_id": "o-1", "amount": 5}
BURST = 5
"""More faults in a row than botocore's standard mode makes attempts (3)."""
TOMBSTONE_SECONDS = 900
"""docs/protocol.md: the tombstone lives 15 minutes."""
SIGNATURE_VALID_SECONDS = 300
"""DynamoDB refuses a request signed more than 5 minutes earlier."""
SKEW_ALLOWANCE_MS = 2_000
"""The default clock-skew allowance."""


class HandlerFailedError(Exception):
    """The handler's own failure."""


@pytest.fixture(params=[True, False], ids=["fast-wire", "boto3"])
def default_store(
    request: pytest.FixtureRequest, store: DynamoDBStore, dynamodb_local_endpoint: str
) -> DynamoDBStore:
    """The library's own default client on the test table, on one of its two paths, with
    botocore's backoff shrunk (what it retries, and how often, untouched)."""
    default = DynamoDBStore(
        store.table_name, endpoint_url=dynamodb_local_endpoint, fast_wire=request.param
    )
    fast_retries(default.client)
    return default


@pytest.fixture
def faults(default_store: DynamoDBStore) -> Any:
    injector = FaultInjector(default_store.client)
    yield injector
    injector.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START_MS)


def counted(
    store: DynamoDBStore,
    clock: FakeClock,
    body: Callable[[dict[str, Any]], Any] | None = None,
    **options: Any,
) -> tuple[Any, list[dict[str, Any]]]:
    """A decorated handler (one container) that counts its runs; `body` does the work."""
    runs: list[dict[str, Any]] = []
    options.setdefault("cache_size", 0)

    @idempotent(store=store, key="order_id", namespace=NAMESPACE, clock=clock, **options)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(event)
        return "done" if body is None else body(event)

    return handler, runs


def pk_of(handler: Any, event: dict[str, Any] = EVENT) -> str:
    pk, _ = handler.idempotency._identify(event)
    return str(pk)


# -- a fenced completion: the exception the caller gets ----------------------------------------


def zombie_and_usurper(
    store: DynamoDBStore, clock: FakeClock, *, enlisted: bool
) -> tuple[Any, list[str]]:
    """A (lease 1 s) claims, stalls 5 s, and meanwhile B, in another container, takes the
    lapsed lease over and completes; then A returns and completes, fenced out."""
    done: list[str] = []
    usurper, _ = counted(store, clock, lambda event: "result-B")

    def zombie_body(event: dict[str, Any]) -> str:
        clock.advance(5)  # past A's 1 s lease and the 2 s allowance
        assert usurper(dict(EVENT), None) == "result-B"
        done.append("B")
        if enlisted:
            current_execution().add_write(
                {"Put": {"TableName": store.table_name, "Item": {"pk": {"S": "charge#A"}}}}
            )
        return "result-A"

    zombie, _ = counted(store, clock, zombie_body, lease_seconds=1)
    return zombie, done


FENCE_FAULTS = [None, "throttled", "5xx", "lost", "unsent"]
"""What may happen to the zombie's completion on its way: nothing, or one fault botocore
retries (the repeat meets the same fence)."""


@pytest.mark.parametrize("fault", FENCE_FAULTS)
def test_a_fenced_completion_with_enlisted_writes_raises_exactly_lease_lost_error(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock, fault: str | None
) -> None:
    zombie, done = zombie_and_usurper(default_store, clock, enlisted=True)
    if fault is not None:
        faults.add(Fault("complete", fault, first=2))  # the usurper's completion is the 1st

    with pytest.raises(IdempotencyError) as caught:
        zombie(dict(EVENT), None)

    assert type(caught.value) is LeaseLostError, f"got {type(caught.value).__name__}"
    assert caught.value.key_hash == pk_of(zombie)
    assert done == ["B"]
    assert faults.seen["complete"] >= 2 and (fault is None or faults.injected == 1)
    # Nothing of the zombie's landed, and the usurper's record stands.
    key = {"pk": {"S": "charge#A"}}
    assert "Item" not in default_store.client.get_item(TableName=default_store.table_name, Key=key)
    record = default_store.get(pk_of(zombie))
    assert record is not None and record.status is Status.COMPLETED
    again, runs = counted(default_store, clock)
    assert again(dict(EVENT), None) == "result-B" and runs == []


@pytest.mark.parametrize("fault", FENCE_FAULTS)
def test_a_fenced_completion_without_enlisted_writes_returns_its_result(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock, fault: str | None
) -> None:
    """docs/protocol.md: the zombie's completion never touches the new owner's record; its
    effects outside DynamoDB happened, and its caller gets what the handler returned."""
    zombie, done = zombie_and_usurper(default_store, clock, enlisted=False)
    if fault is not None:
        faults.add(Fault("complete", fault, first=2))

    assert zombie(dict(EVENT), None) == "result-A"

    assert done == ["B"]
    assert zombie.idempotency.stats["lease_lost"] == 1
    again, runs = counted(default_store, clock)
    assert again(dict(EVENT), None) == "result-B" and runs == []


def test_idempotent_function_raises_exactly_lease_lost_error_when_fenced(
    default_store: DynamoDBStore, clock: FakeClock
) -> None:
    @idempotent_function(
        store=default_store, key="order_id", namespace="charges", clock=clock, cache_size=0
    )
    def usurper(order_id: str) -> str:
        return "result-B"

    @idempotent_function(
        store=default_store,
        key="order_id",
        namespace="charges",
        clock=clock,
        cache_size=0,
        lease_seconds=1,
    )
    def zombie(order_id: str) -> str:
        clock.advance(5)
        assert usurper(order_id) == "result-B"
        current_execution().add_write(
            {"Put": {"TableName": default_store.table_name, "Item": {"pk": {"S": "charge#A"}}}}
        )
        return "result-A"

    with pytest.raises(IdempotencyError) as caught:
        zombie("o-1")

    assert type(caught.value) is LeaseLostError, f"got {type(caught.value).__name__}"
    assert usurper("o-1") == "result-B"


# -- a claim that landed and was then throttled -----------------------------------------------


@pytest.mark.parametrize(
    "then",
    ["throttled", "5xx"],
)
def test_a_claim_that_landed_then_was_throttled_is_released_and_the_next_call_runs(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock, then: str
) -> None:
    """The claim's first attempt lands with its answer lost; botocore's retries are all
    throttled, so the caller gets a retryable StoreError and the handler does not run. The
    claim may have landed: it is released on the way out, so the next call runs now, not
    when the 15-minute lease ends."""
    faults.add(Fault("claim", "lost", first=1, count=1))
    faults.add(Fault("claim", then, first=2, count=BURST))
    handler, runs = counted(default_store, clock)

    with pytest.raises(StoreError) as caught:
        handler(dict(EVENT), None)

    assert caught.value.retryable and runs == []
    assert faults.seen["claim"] == 3  # botocore's three attempts, the first of which landed
    faults.clear()
    retry, retried = counted(default_store, clock)  # another container, the same instant
    assert retry(dict(EVENT), None) == "done"
    assert len(retried) == 1
    assert retry(dict(EVENT), None) == "done" and len(retried) == 1  # and it stays done


def test_a_claim_that_landed_was_throttled_then_won_is_released_when_the_handler_fails(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> None:
    """The claim's first attempt lands with its answer lost, the second is throttled, the
    third meets our own record: the claim is ours, the handler runs and fails, and the release
    frees the key for the next call at once."""
    faults.add(Fault("claim", "lost", first=1, count=1))
    faults.add(Fault("claim", "throttled", first=2, count=1))

    def fails(event: dict[str, Any]) -> Any:
        raise HandlerFailedError("declined")

    handler, runs = counted(default_store, clock, fails)
    with pytest.raises(HandlerFailedError):
        handler(dict(EVENT), None)
    assert len(runs) == 1 and faults.seen["claim"] == 3

    retry, retried = counted(default_store, clock)
    assert retry(dict(EVENT), None) == "done"
    assert len(retried) == 1


# -- the tombstone's time ----------------------------------------------------------------------


def sweep_expired(store: DynamoDBStore, now_s: int) -> None:
    """What DynamoDB's TTL may do at `now_s`: delete every item whose expiration is past."""
    items = store.client.scan(TableName=store.table_name)["Items"]
    for item in items:
        if "expiration" in item and int(item["expiration"]["N"]) < now_s:
            store.client.delete_item(TableName=store.table_name, Key={"pk": item["pk"]})


def failed_run_with_a_refused_duplicate(
    store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> tuple[Any, str, int]:
    """A claims at START_MS; 1.234 s later B's claim (another container) is refused; A fails
    2.345 s after its claim and releases. Both claim requests are captured as they were sent.
    Returns A's handler, owner token and release time."""
    faults.add(Fault("claim", "capture", first=1, count=2))
    owners: list[str] = []
    duplicate, _ = counted(store, clock)

    def fails(event: dict[str, Any]) -> Any:
        owners.append(current_execution().owner or "")
        clock.advance(1.234)
        with pytest.raises(InProgressError):
            duplicate(dict(EVENT), None)
        clock.advance(1.111)
        raise HandlerFailedError("declined")

    handler, _ = counted(store, clock, fails)
    with pytest.raises(HandlerFailedError):
        handler(dict(EVENT), None)
    faults.clear()
    assert len(faults.captured) == 2 and clock.now_ms() == START_MS + 2_345
    return handler, owners[0], clock.now_ms()


def test_the_tombstone_is_stamped_with_the_release_time_and_lives_fifteen_minutes(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> None:
    handler, owner, released_at = failed_run_with_a_refused_duplicate(default_store, faults, clock)

    tombstone = default_store.get(pk_of(handler))
    assert tombstone is not None
    assert tombstone.status is Status.RELEASED
    assert tombstone.owner == owner
    assert tombstone.lease_until == released_at  # the release's own millisecond
    assert tombstone.expiration == released_at // 1000 + TOMBSTONE_SECONDS
    assert tombstone.result is None and tombstone.payload_hash is None


def test_no_delayed_copy_of_a_claim_relocks_a_released_key(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> None:
    """Our own claim and another owner's, both signed before the release, delivered again
    after it (as late as DynamoDB accepts them, with the table swept of what TTL may have
    deleted by then): both refused, and the next call runs."""
    handler, owner, released_at = failed_run_with_a_refused_duplicate(default_store, faults, clock)
    pk = pk_of(handler)
    ours, theirs = faults.captured

    for copy in (ours, theirs):
        status, answer = faults.deliver(copy)
        assert status == 400 and answer["__type"].endswith("ConditionalCheckFailedException")
    # The last moment a copy can land: 5 minutes after it was signed, on DynamoDB's clock,
    # which may run the skew allowance ahead of the releaser's.
    latest_ms = START_MS + 1_234 + SIGNATURE_VALID_SECONDS * 1000 + SKEW_ALLOWANCE_MS
    sweep_expired(default_store, -(-latest_ms // 1000))
    for copy in (ours, theirs):
        status, answer = faults.deliver(copy)
        assert status == 400 and answer["__type"].endswith("ConditionalCheckFailedException")

    record = default_store.get(pk)
    assert record is not None and record.status is Status.RELEASED and record.owner == owner
    assert record.lease_until == released_at
    retry, retried = counted(default_store, clock)
    assert retry(dict(EVENT), None) == "done" and len(retried) == 1


def test_a_released_key_is_free_from_the_release_millisecond(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> None:
    """The tombstone holds the key for nobody: the next call at the very millisecond of the
    release runs, and waits for nothing (no InProgressError, no 15 minutes)."""
    _, _, released_at = failed_run_with_a_refused_duplicate(default_store, faults, clock)
    assert clock.now_ms() == released_at

    retry, retried = counted(default_store, clock)
    assert retry(dict(EVENT), None) == "done"
    assert len(retried) == 1


def test_a_release_ahead_of_our_clock_frees_the_key_when_our_clock_reaches_it(
    default_store: DynamoDBStore, faults: FaultInjector, clock: FakeClock
) -> None:
    """A caller whose clock runs 1.5 s behind the releaser's: the key is free for it when its
    clock reaches the release time (no skew allowance on top), and not a millisecond before;
    `retry_after` says so."""
    failed_run_with_a_refused_duplicate(default_store, faults, clock)
    behind = FakeClock(clock.now_ms() - 1_500)
    retry, retried = counted(default_store, behind)

    with pytest.raises(InProgressError) as refused:
        retry(dict(EVENT), None)
    assert refused.value.retry_after == 2

    behind.advance(1.499)
    with pytest.raises(InProgressError):
        retry(dict(EVENT), None)
    behind.advance(0.001)
    assert retry(dict(EVENT), None) == "done" and len(retried) == 1


# -- the skew allowance's unit -----------------------------------------------------------------


def crashed_holder(
    store: DynamoDBStore, faults: FaultInjector, clock: FakeClock, **options: Any
) -> int:
    """An invocation claims at START_MS with a 10 s lease, fails, and cannot release (every
    attempt unsent): its record stays IN_PROGRESS, as a crashed one's does. Its lease end."""

    def fails(event: dict[str, Any]) -> Any:
        raise HandlerFailedError("crashed")

    faults.add(Fault("release", "unsent", count=BURST))
    holder, _ = counted(store, clock, fails, lease_seconds=10, **options)
    with pytest.raises(HandlerFailedError):
        holder(dict(EVENT), None)
    faults.clear()
    record = store.get(pk_of(holder))
    assert record is not None and record.status is Status.IN_PROGRESS
    assert record.lease_until == START_MS + 10_000
    return START_MS + 10_000


SKEWS = [
    pytest.param(None, 2_000, id="default-2s"),
    pytest.param(0.5, 500, id="0.5s"),
    pytest.param(10, 10_000, id="10s"),
]


@pytest.mark.parametrize(("skew_seconds", "skew_ms"), SKEWS)
def test_a_lapsed_lease_is_taken_over_only_past_the_allowance_in_seconds(
    default_store: DynamoDBStore,
    faults: FaultInjector,
    clock: FakeClock,
    skew_seconds: float | None,
    skew_ms: int,
) -> None:
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    lease_until = crashed_holder(default_store, faults, clock, **options)
    retry, runs = counted(default_store, clock, **options)

    for lapsed_by_ms in (skew_ms - 100, skew_ms):  # e.g. 1.9 s, then 2.0 s: still held
        clock.ms = lease_until + lapsed_by_ms
        with pytest.raises(InProgressError):
            retry(dict(EVENT), None)
    assert runs == []

    clock.ms = lease_until + skew_ms + 1  # the first millisecond past the allowance
    assert retry(dict(EVENT), None) == "done"
    assert len(runs) == 1 and retry.idempotency.stats["taken_over"] == 1


@pytest.mark.parametrize(("skew_seconds", "skew_ms"), SKEWS)
def test_a_lease_lapsed_by_a_tenth_past_the_allowance_is_taken_over(
    default_store: DynamoDBStore,
    faults: FaultInjector,
    clock: FakeClock,
    skew_seconds: float | None,
    skew_ms: int,
) -> None:
    """The brief's figures: with the default allowance, lapsed by 2.1 s runs."""
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    lease_until = crashed_holder(default_store, faults, clock, **options)
    retry, runs = counted(default_store, clock, **options)

    clock.ms = lease_until + skew_ms + 100
    assert retry(dict(EVENT), None) == "done" and len(runs) == 1


@pytest.mark.parametrize(("skew_seconds", "skew_ms"), SKEWS)
def test_retry_after_seconds_later_the_key_answers(
    default_store: DynamoDBStore,
    faults: FaultInjector,
    clock: FakeClock,
    skew_seconds: float | None,
    skew_ms: int,
) -> None:
    """docs/http.md: Retry-After is when the lease lapses on every clock, "by then the key is
    sure to answer". Asked at the claim's instant, at the lease's end, and just before the
    allowance runs out; each retry `retry_after` seconds later runs (and sooner would not)."""
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    lease_until = crashed_holder(default_store, faults, clock, **options)
    retry, runs = counted(default_store, clock, **options)

    for asked_at in (START_MS, lease_until, lease_until + skew_ms - 1):
        clock.ms = asked_at
        with pytest.raises(InProgressError) as refused:
            retry(dict(EVENT), None)
        free_at = lease_until + skew_ms + 1
        assert refused.value.retry_after == max(1, math.ceil((free_at - asked_at) / 1000))
        if refused.value.retry_after > 1:
            clock.ms = asked_at + (refused.value.retry_after - 1) * 1000
            with pytest.raises(InProgressError):
                retry(dict(EVENT), None)
    clock.ms = asked_at + refused.value.retry_after * 1000
    assert retry(dict(EVENT), None) == "done" and len(runs) == 1


@pytest.mark.parametrize(("skew_seconds", "skew_ms"), SKEWS)
def test_a_completed_record_expires_only_past_the_allowance_in_seconds(
    default_store: DynamoDBStore,
    clock: FakeClock,
    skew_seconds: float | None,
    skew_ms: int,
) -> None:
    """`expiration` is the record's last second: it is expired on our clock from the next
    second on, and for a claim only once it is so on a clock the allowance behind."""
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    first, runs = counted(default_store, clock, ttl_seconds=60, **options)
    assert first(dict(EVENT), None) == "done"
    record = default_store.get(pk_of(first))
    assert record is not None and record.expiration == START_MS // 1000 + 60
    expired_from = (record.expiration + 1) * 1000  # on our clock

    for expired_by_ms in (skew_ms - 100, skew_ms - 1):  # e.g. 1.9 s: still replays
        clock.ms = expired_from + expired_by_ms
        assert first(dict(EVENT), None) == "done"
        assert len(runs) == 1
    clock.ms = expired_from + skew_ms  # e.g. 2.0 s: expired on a clock 2 s behind too
    assert first(dict(EVENT), None) == "done"
    assert len(runs) == 2


@pytest.mark.parametrize(("skew_seconds", "skew_ms"), SKEWS)
def test_a_waiter_runs_the_first_millisecond_past_the_allowance(
    default_store: DynamoDBStore,
    faults: FaultInjector,
    clock: FakeClock,
    skew_seconds: float | None,
    skew_ms: int,
) -> None:
    """A duplicate told to wait on a crashed holder runs when the lease has lapsed on every
    clock, not before (it would take over a live lease) and not later."""
    options = {} if skew_seconds is None else {"clock_skew_seconds": skew_seconds}
    lease_until = crashed_holder(default_store, faults, clock, **options)
    started: list[int] = []
    waiter, runs = counted(
        default_store,
        clock,
        lambda event: started.append(clock.now_ms()) or "done",
        on_in_progress="wait",
        **options,
    )

    assert waiter(dict(EVENT), FakeContext(60_000, clock=clock)) == "done"
    assert started == [lease_until + skew_ms + 1] and len(runs) == 1
