"""What an operator reads when something goes wrong: each anomaly's log line, exactly (its
outcome, level, hashed key and fields), on DynamoDB Local with faults injected through
botocore's before-send event. Alarms and dashboards are built on these lines
(docs/operations.md), so a renamed outcome, a lost field or a quieter level breaks them.
"""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from lambda_idempotency import (
    DynamoDBStore,
    LeaseLostError,
    ResultNotSerializableError,
    StoreError,
    current_execution,
    idempotent,
)
from lambda_idempotency._stores.encoding import not_stored_marker
from tests.conftest import FakeClock, FakeContext
from tests.reliability.faults import Fault, FaultInjector, fast_retries

pytestmark = pytest.mark.dynamodb_local

EVENT = {"order_id": "o-1", "amount": 5}


@pytest.fixture
def default_store(store: DynamoDBStore, dynamodb_local_endpoint: str) -> DynamoDBStore:
    """The library's own default client (its retries, its fixed user agent) on the test table."""
    default = DynamoDBStore(store.table_name, endpoint_url=dynamodb_local_endpoint)
    fast_retries(default.client)
    return default


def lines(caplog: Any) -> list[tuple[int, dict[str, Any]]]:
    """(level, line) of every log line of ours, without the namespace (asserted once)."""
    found = []
    for record in caplog.records:
        line = json.loads(record.getMessage())
        assert line.pop("namespace") == "orders"
        found.append((record.levelno, line))
    return found


def handler_for(store: DynamoDBStore, **options: Any) -> tuple[Any, list[int]]:
    runs: list[int] = []

    options.setdefault("cache_size", 0)

    @idempotent(store=store, key="order_id", namespace="orders", **options)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        if event.get("write"):
            current_execution().add_write(
                {
                    "Put": {
                        "TableName": store.table_name,
                        "Item": {"pk": {"S": f"charge#{event['order_id']}"}},
                    }
                }
            )
        if event.get("fail"):
            raise ValueError("declined")
        return {"charged": event["amount"]}

    return handler, runs


def put_completed(store: DynamoDBStore, pk: str, payload_hash: str, result: bytes) -> None:
    """A COMPLETED record as another invocation left it."""
    store.client.put_item(
        TableName=store.table_name,
        Item={
            "pk": {"S": pk},
            "status": {"S": "COMPLETED"},
            "expiration": {"N": str(2**31)},
            "owner": {"S": "someone"},
            "payload_hash": {"S": payload_hash},
            "result": {"B": result},
        },
    )


def take_over(
    store: DynamoDBStore, clock: FakeClock, pk: str, payload_hash: str, owner: str
) -> None:
    """Five seconds pass (our 1 s lease lapses, skew included) and `owner` claims the key."""
    clock.advance(5)
    now = clock.now_ms()
    won, _ = store.claim(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        now_ms=now,
        lease_until_ms=now + 60_000,
        expiration_s=now // 1000 + 3600,
        skew_ms=2_000,
    )
    assert won


def test_a_failed_run_releases_its_key_and_says_why_at_debug(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """The handler's own error is the function's to log (Lambda's runtime logs it): the
    release that answers it is routine, a DEBUG line, and INFO stays quiet."""
    handler, runs = handler_for(default_store)
    pk, _ = handler.idempotency._identify(EVENT)

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"), pytest.raises(ValueError):
        handler({**EVENT, "fail": True}, None)
    assert lines(caplog) == []
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"), pytest.raises(ValueError):
        handler({**EVENT, "fail": True}, None)

    assert lines(caplog)[-1] == (
        logging.DEBUG,
        {"idempotency": "released", "key_hash": pk, "reason": "ValueError"},
    )
    assert handler({**EVENT}, None) == {"charged": 5}  # the retry runs again
    assert len(runs) == 3


def test_a_run_interrupted_releases_its_key_with_a_line_at_info(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """An interruption (a signal's exception, not the handler's own error) is worth a line."""

    class Interrupted(BaseException):
        pass

    @idempotent(store=default_store, key="order_id", namespace="orders", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        raise Interrupted

    pk, _ = handler.idempotency._identify(EVENT)
    with caplog.at_level(logging.INFO, logger="lambda_idempotency"), pytest.raises(Interrupted):
        handler(dict(EVENT), None)

    assert lines(caplog) == [
        (logging.INFO, {"idempotency": "released", "key_hash": pk, "reason": "Interrupted"})
    ]


def test_a_release_that_fails_is_an_error_line_and_the_handler_error_wins(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """The key stays locked until its lease lapses: the operator must see that, and the
    caller still gets the handler's own error, not the store's."""
    handler, runs = handler_for(default_store)
    pk, _ = handler.idempotency._identify(EVENT)
    FaultInjector(default_store.client).add(Fault("release", "5xx", count=10))

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"), pytest.raises(ValueError):
        handler({**EVENT, "fail": True}, None)

    assert lines(caplog) == [
        (
            logging.ERROR,
            {
                "idempotency": "release_failed",
                "key_hash": pk,
                "reason": "ValueError",
                "code": "InternalServerError",
            },
        )
    ]
    record = default_store.get(pk)
    assert record is not None and record.status.value == "IN_PROGRESS"
    assert runs == [1]


def test_a_release_refused_because_the_key_was_taken_over_is_not_released(
    default_store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    """Our lease lapsed while the handler ran and another invocation claimed the key: our
    failure must leave its claim alone, and the line says it was not released."""
    handler, _ = handler_for(default_store, clock=clock, lease_seconds=1)
    pk, payload_hash = handler.idempotency._identify(EVENT)

    @idempotent(
        store=default_store,
        key="order_id",
        namespace="orders",
        clock=clock,
        lease_seconds=1,
        cache_size=0,
    )
    def slow_then_fail(event: dict[str, Any], context: Any) -> None:
        take_over(default_store, clock, pk, payload_hash, "new-owner")
        raise ValueError("declined")

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"), pytest.raises(ValueError):
        slow_then_fail(dict(EVENT), None)

    assert (
        logging.INFO,
        {"idempotency": "not_released", "key_hash": pk, "reason": "ValueError"},
    ) in lines(caplog)
    record = default_store.get(pk)
    assert record is not None and record.owner == "new-owner"
    assert record.status.value == "IN_PROGRESS"


@pytest.mark.parametrize("release", ["refused", "failing"])
def test_a_completion_that_landed_with_its_answer_lost_is_confirmed_not_undone(
    default_store: DynamoDBStore, caplog: Any, clock: FakeClock, release: str
) -> None:
    """The completion transaction (with an enlisted write) commits but its answer is lost,
    then every later attempt fails: the invocation reads the record, finds its own
    completion, answers with the result, and the write happened once. Whether the release
    it tries first is refused (the record is completed) or fails outright."""
    handler, runs = handler_for(default_store, clock=clock)
    pk, _ = handler.idempotency._identify(EVENT)
    faults = FaultInjector(default_store.client)
    faults.add(Fault("complete", "lost"))
    faults.add(Fault("complete", "5xx", first=2, count=1000))
    if release == "failing":
        faults.add(Fault("release", "5xx", count=1000))

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"):
        result = handler({**EVENT, "write": True}, FakeContext(3_000, clock=clock))

    assert result == {"charged": 5}
    logged = lines(caplog)
    assert logged[-3:] == [
        (
            logging.ERROR,
            {
                "idempotency": "completion_failed",
                "key_hash": pk,
                "step": "complete",
                "code": "InternalServerError",
            },
        ),
        (
            (
                logging.INFO,
                {"idempotency": "not_released", "key_hash": pk, "reason": "completion failed"},
            )
            if release == "refused"
            else (
                logging.ERROR,
                {
                    "idempotency": "release_failed",
                    "key_hash": pk,
                    "reason": "completion failed",
                    "code": "InternalServerError",
                },
            )
        ),
        (logging.WARNING, {"idempotency": "completion_confirmed", "key_hash": pk}),
    ]
    faults.clear()
    assert handler({**EVENT, "write": True}, None) == {"charged": 5}  # a replay now
    assert runs == [1]
    charge = default_store.client.get_item(
        TableName=default_store.table_name, Key={"pk": {"S": "charge#o-1"}}, ConsistentRead=True
    )
    assert "Item" in charge


def test_a_completion_that_never_lands_releases_and_raises(
    default_store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    """Nothing landed (every attempt refused before it was sent): the key is released so a
    retry runs again, and the caller gets a StoreError rather than a result nobody stored."""
    handler, runs = handler_for(default_store, clock=clock)
    pk, _ = handler.idempotency._identify(EVENT)
    faults = FaultInjector(default_store.client)
    faults.add(Fault("complete", "unsent", count=1000))

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"), pytest.raises(StoreError):
        handler({**EVENT, "write": True}, FakeContext(3_000, clock=clock))

    assert lines(caplog)[-1] == (
        logging.INFO,
        {"idempotency": "released", "key_hash": pk, "reason": "completion failed"},
    )
    faults.clear()
    assert handler({**EVENT, "write": True}, None) == {"charged": 5}
    assert runs == [1, 1]


def test_a_stored_result_that_cannot_be_read_is_a_store_error_not_a_rerun(
    store: DynamoDBStore, caplog: Any
) -> None:
    handler, runs = handler_for(store)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    put_completed(store, pk, payload_hash, b"\x00garbage")

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(StoreError) as failed,
    ):
        handler(dict(EVENT), None)

    assert failed.value.code == "StoredResultUnreadable"
    assert failed.value.key_hash == pk
    assert str(failed.value) == (
        "the stored result cannot be read: unknown stored result format b'\\x00'"
    )
    assert lines(caplog) == [
        (
            logging.ERROR,
            {
                "idempotency": "store_error",
                "key_hash": pk,
                "step": "replay",
                "code": "StoredResultUnreadable",
            },
        )
    ]
    assert runs == []


def test_a_completed_record_without_a_result_is_unreadable_not_none(store: DynamoDBStore) -> None:
    """A native record completed with no result attribute: no version of this library
    writes one, so what the first caller got is unknown. It is a StoreError, never a guess
    (None) and never a second run. (Powertools' layout replays None, as Powertools does.)"""
    handler, runs = handler_for(store)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    store.client.put_item(
        TableName=store.table_name,
        Item={
            "pk": {"S": pk},
            "status": {"S": "COMPLETED"},
            "expiration": {"N": str(2**31)},
            "payload_hash": {"S": payload_hash},
        },
    )
    with pytest.raises(StoreError) as failed:
        handler(dict(EVENT), None)
    assert (failed.value.code, failed.value.step) == ("StoredResultUnreadable", "replay")
    assert runs == []


def test_a_replay_of_a_result_never_stored_warns_and_raises(
    store: DynamoDBStore, caplog: Any
) -> None:
    handler, runs = handler_for(store)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    put_completed(store, pk, payload_hash, not_stored_marker("not_serializable", "TypeError"))

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(ResultNotSerializableError) as refused,
    ):
        handler(dict(EVENT), None)

    assert refused.value.key_hash == pk
    assert lines(caplog) == [
        (logging.WARNING, {"idempotency": "replayed_not_stored", "key_hash": pk})
    ]
    assert runs == []


def test_a_result_dynamodb_refuses_completes_the_key_with_a_marker(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """The effect has happened and DynamoDB will not take the result: the key completes
    anyway, without it. The first caller gets its result; every retry gets a typed error
    naming why, and the handler never runs again."""
    handler, runs = handler_for(default_store)
    pk, _ = handler.idempotency._identify(EVENT)
    FaultInjector(default_store.client).add(Fault("complete", "refused"))

    with caplog.at_level(logging.INFO, logger="lambda_idempotency"):
        assert handler(dict(EVENT), None) == {"charged": 5}

    assert lines(caplog) == [
        (
            logging.ERROR,
            {
                "idempotency": "completion_failed",
                "key_hash": pk,
                "step": "complete",
                "code": "ValidationException",
            },
        ),
        (
            logging.WARNING,
            {
                "idempotency": "result_not_storable",
                "key_hash": pk,
                "problem": "store_refused: ValidationException",
            },
        ),
    ]
    with pytest.raises(ResultNotSerializableError) as refused:
        handler(dict(EVENT), None)
    assert "ValidationException" in str(refused.value)
    assert refused.value.key_hash == pk
    assert runs == [1]


def test_a_transaction_dynamodb_refuses_commits_nothing_and_frees_the_key(
    default_store: DynamoDBStore,
) -> None:
    """With enlisted writes the refusal may be the writes' own: nothing committed, so the
    key is released and the caller gets the StoreError; a retry runs again."""
    handler, runs = handler_for(default_store)
    faults = FaultInjector(default_store.client)
    faults.add(Fault("complete", "refused"))

    with pytest.raises(StoreError) as failed:
        handler({**EVENT, "write": True}, None)
    assert failed.value.code == "ValidationException"

    faults.clear()
    assert handler({**EVENT, "write": True}, None) == {"charged": 5}
    assert runs == [1, 1]


@pytest.mark.parametrize("reads", ["working", "failing"])
def test_a_failed_completion_never_counts_another_invocation_completion_as_ours(
    default_store: DynamoDBStore, dynamodb_local_endpoint: str, clock: FakeClock, reads: str
) -> None:
    """Our lease lapsed mid-handler, another invocation took the key over and completed it,
    and our completion transaction fails: the caller gets the StoreError, never a success
    that would claim our enlisted write committed (it did not). Likewise when the record
    cannot even be read back."""
    other_store = DynamoDBStore(default_store.table_name, endpoint_url=dynamodb_local_endpoint)
    pk_box: list[str] = []

    @idempotent(store=default_store, key="order_id", clock=clock, lease_seconds=1, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        pk, payload_hash = handler.idempotency._identify(event)
        pk_box.append(pk)
        take_over(other_store, clock, pk, payload_hash, "other")
        assert other_store.complete(
            pk, owner="other", payload_hash=payload_hash, result=b"", expiration_s=2**31
        )
        current_execution().add_write(
            {"Put": {"TableName": default_store.table_name, "Item": {"pk": {"S": "charge#1"}}}}
        )
        return "charged"

    faults = FaultInjector(default_store.client)
    faults.add(Fault("complete", "5xx", count=1000))
    if reads == "failing":
        faults.add(Fault("get", "5xx", count=1000))

    with pytest.raises(StoreError):
        handler(dict(EVENT), FakeContext(3_000, clock=clock))

    record = other_store.get(pk_box[0])
    assert record is not None and record.owner == "other"
    charge = other_store.client.get_item(
        TableName=default_store.table_name, Key={"pk": {"S": "charge#1"}}, ConsistentRead=True
    )
    assert "Item" not in charge


def test_a_refused_result_is_a_typed_error_in_the_same_warm_container_too(
    default_store: DynamoDBStore,
) -> None:
    """With the warm cache on, the container that ran the call answers its retry from the
    table's marker: the typed error, not a crash on an empty cache entry and not a rerun."""
    handler, runs = handler_for(default_store, cache_size=16)
    FaultInjector(default_store.client).add(Fault("complete", "refused"))

    assert handler(dict(EVENT), None) == {"charged": 5}
    with pytest.raises(ResultNotSerializableError):
        handler(dict(EVENT), None)
    assert runs == [1]


@pytest.mark.parametrize("enlisted", [True, False])
def test_a_completion_fenced_out_by_a_takeover_says_the_lease_was_lost(
    store: DynamoDBStore, caplog: Any, clock: FakeClock, enlisted: bool
) -> None:
    """Our lease lapsed mid-handler and another invocation claimed the key: our completion
    is fenced out. With enlisted writes the caller must learn they were not committed
    (LeaseLostError naming the key); without, it gets its result. Either way a WARNING says
    the lease was lost."""
    pk_box: list[str] = []

    @idempotent(
        store=store,
        key="order_id",
        namespace="orders",
        clock=clock,
        lease_seconds=1,
        cache_size=0,
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        pk, payload_hash = handler.idempotency._identify(event)
        pk_box.append(pk)
        take_over(store, clock, pk, payload_hash, "other")
        if enlisted:
            current_execution().add_write(
                {"Put": {"TableName": store.table_name, "Item": {"pk": {"S": "charge#1"}}}}
            )
        return "charged"

    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        if enlisted:
            with pytest.raises(LeaseLostError) as lost:
                handler(dict(EVENT), None)
            assert lost.value.key_hash == pk_box[0]
            assert str(lost.value) == (
                "the lease lapsed and another invocation took the key over; "
                "the enlisted writes were not committed"
            )
        else:
            assert handler(dict(EVENT), None) == "charged"

    assert (logging.WARNING, {"idempotency": "lease_lost", "key_hash": pk_box[0]}) in lines(caplog)
    record = store.get(pk_box[0])
    assert record is not None and record.owner == "other"


def test_a_completion_conflict_reads_nothing_back(default_store: DynamoDBStore) -> None:
    """An enlisted write's condition fails on the first completion attempt: nothing could
    have landed, so the key is released without a read (the read is for lost answers)."""
    from lambda_idempotency import CompletionConflictError
    from lambda_idempotency.testing import RoundTrips

    @idempotent(store=default_store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        current_execution().add_write(
            {
                "ConditionCheck": {
                    "TableName": default_store.table_name,
                    "Key": {"pk": {"S": "account#1"}},
                    "ConditionExpression": "attribute_exists(pk)",
                }
            }
        )
        return "charged"

    trips = RoundTrips(default_store.client)
    with pytest.raises(CompletionConflictError):
        handler(dict(EVENT), None)
    assert trips.take() == ["PutItem", "TransactWriteItems", "PutItem"]


def test_chunks_that_cannot_be_written_are_logged_as_the_chunks_step(
    default_store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    import os

    big = {"blob": os.urandom(600_000).hex()}  # past the inline limit once compressed

    @idempotent(store=default_store, key="order_id", namespace="orders", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return big

    pk, _ = handler.idempotency._identify(EVENT)
    FaultInjector(default_store.client).add(Fault("chunks", "5xx", count=1000))
    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert handler(dict(EVENT), FakeContext(3_000, clock=clock)) == big

    logged = lines(caplog)
    assert {line["step"] for _, line in logged} == {"chunks"}
    assert logged[-1] == (
        logging.ERROR,
        {
            "idempotency": "completion_failed",
            "key_hash": pk,
            "step": "chunks",
            "code": "InternalServerError",
        },
    )


def test_a_completion_that_landed_then_is_refused_as_a_conflict_is_confirmed_as_ours(
    default_store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    """The completion transaction commits with its answer lost, the next attempts fail, and
    the one after is refused because the enlisted write's condition no longer holds (it
    landed: DynamoDB has forgotten the token). The invocation reads the record back, finds
    its own completion, and answers with the result: no conflict, no release, one run."""
    handler, runs = handler_for(default_store, clock=clock)
    pk, _ = handler.idempotency._identify(EVENT)
    faults = FaultInjector(default_store.client)
    faults.add(Fault("complete", "lost"))
    faults.add(Fault("complete", "5xx", first=2, count=2))  # botocore's two retries
    faults.add(Fault("complete", "conflict", first=4))  # our own retry

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler({**EVENT, "write": True}, FakeContext(3_000, clock=clock)) == {"charged": 5}

    outcomes = [line["idempotency"] for _, line in lines(caplog)]
    assert "completion_conflict" not in outcomes
    assert outcomes[-1] == "executed"
    record = default_store.get(pk)
    assert record is not None and record.status.value == "COMPLETED"
    faults.clear()
    assert handler({**EVENT, "write": True}, None) == {"charged": 5}  # a replay
    assert runs == [1]


def test_a_completion_conflict_is_a_warning_and_releases_the_key_saying_why(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """An enlisted write's condition fails: a WARNING names the key, the key is released
    with the reason, and the caller's retry runs again."""
    from lambda_idempotency import CompletionConflictError

    handler, runs = handler_for(default_store)
    pk, _ = handler.idempotency._identify(EVENT)
    FaultInjector(default_store.client).add(Fault("complete", "conflict"))

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(CompletionConflictError),
    ):
        handler({**EVENT, "write": True}, None)

    assert lines(caplog)[-2:] == [
        (logging.WARNING, {"idempotency": "completion_conflict", "key_hash": pk}),
        (
            logging.INFO,
            {
                "idempotency": "released",
                "key_hash": pk,
                "reason": "enlisted write condition failed",
            },
        ),
    ]
    assert handler({**EVENT, "write": True}, None) == {"charged": 5}
    assert runs == [1, 1]


@pytest.mark.parametrize(("remaining_ms", "retries"), [(2_833, 5), (2_834, 6), (12_000, 14)])
def test_completion_retries_stop_when_the_next_backoff_would_pass_the_time_to_answer(
    default_store: DynamoDBStore,
    caplog: Any,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    remaining_ms: int,
    retries: int,
) -> None:
    """Every completion attempt fails (5xx): the invocation retries after 50 ms, doubling
    to 1 s, as long as the next pause ends before the time it must answer by (its remaining
    time less a tenth: 2,550, 2,551 or 10,800 ms here), each retry a WARNING, then gives up
    with an ERROR and answers. Jitter at its ceiling, so the pauses are exact."""
    from lambda_idempotency._protocol import completing as _completing

    monkeypatch.setattr(_completing, "random", SimpleNamespace(uniform=lambda low, high: high))
    handler, runs = handler_for(default_store, clock=clock)
    pk, _ = handler.idempotency._identify(EVENT)
    FaultInjector(default_store.client).add(Fault("complete", "5xx", count=10**6))

    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert handler(dict(EVENT), FakeContext(remaining_ms, clock=clock)) == {"charged": 5}

    assert clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, *[1.0] * (retries - 5)]
    step = {"key_hash": pk, "step": "complete", "code": "InternalServerError"}
    assert lines(caplog) == [
        *[(logging.WARNING, {"idempotency": "completion_retry", **step})] * retries,
        (logging.ERROR, {"idempotency": "completion_failed", **step}),
    ]
    assert runs == [1]


def test_completion_backoff_is_jittered_between_half_and_all_of_each_step(
    default_store: DynamoDBStore, clock: FakeClock
) -> None:
    """Retries of many invocations must not fall in step: each pause is drawn between half
    and all of 50 ms, 100 ms, ... 1 s."""
    handler, _ = handler_for(default_store, clock=clock)
    FaultInjector(default_store.client).add(Fault("complete", "5xx", count=10**6))

    handler(dict(EVENT), FakeContext(12_000, clock=clock))

    ceilings = [min(0.05 * 2**n, 1.0) for n in range(len(clock.slept))]
    assert len(clock.slept) >= 8
    assert all(c / 2 <= s <= c for s, c in zip(clock.slept, ceilings, strict=True))
    assert len(set(clock.slept)) > len(clock.slept) // 2  # drawn, not fixed


def test_chunks_dynamodb_refuses_complete_the_key_with_a_marker_and_commit_the_writes(
    default_store: DynamoDBStore,
) -> None:
    """A result too large to sit in its record, whose chunks DynamoDB will not take: the
    effect has happened, so the key completes with the marker instead, the enlisted write
    commits with it, and a retry gets the typed error rather than a second run."""
    import os

    big = {"blob": os.urandom(600_000).hex()}
    runs: list[int] = []

    @idempotent(store=default_store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        current_execution().add_write(
            {"Put": {"TableName": default_store.table_name, "Item": {"pk": {"S": "charge#1"}}}}
        )
        return big

    FaultInjector(default_store.client).add(Fault("chunks", "refused", count=10**6))
    assert handler(dict(EVENT), None) == big

    with pytest.raises(ResultNotSerializableError):
        handler(dict(EVENT), None)
    assert runs == [1]
    charge = default_store.client.get_item(
        TableName=default_store.table_name, Key={"pk": {"S": "charge#1"}}, ConsistentRead=True
    )
    assert "Item" in charge


def test_a_request_without_its_key_is_refused_with_a_warning(
    store: DynamoDBStore, caplog: Any
) -> None:
    """The key expression selects nothing: the handler does not run, the caller learns why,
    and a WARNING says so (no key to hash)."""
    from lambda_idempotency import KeyMissingError

    handler, runs = handler_for(store)
    with (
        caplog.at_level(logging.DEBUG, logger="lambda_idempotency"),
        pytest.raises(KeyMissingError) as missing,
    ):
        handler({"amount": 5}, None)

    assert str(missing.value) == "the idempotency key expression selected nothing"
    assert lines(caplog) == [(logging.WARNING, {"idempotency": "key_missing", "key_hash": None})]
    assert runs == []


def test_a_request_without_an_optional_key_runs_unprotected_with_a_warning(
    store: DynamoDBStore, caplog: Any
) -> None:
    handler, runs = handler_for(store, key_required=False)
    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler({"amount": 5}, None) == {"charged": 5}

    assert lines(caplog) == [
        (logging.WARNING, {"idempotency": "unprotected", "key_hash": None, "reason": "no key"})
    ]
    assert runs == [1]


def test_a_request_without_its_scope_is_refused_with_an_error(
    store: DynamoDBStore, caplog: Any
) -> None:
    """Running unscoped would let one tenant replay another's result: refused, and an ERROR
    (a missing tenant is a bug in the caller or the authorizer)."""
    from lambda_idempotency import ScopeMissingError

    handler, runs = handler_for(store, scope="tenant")
    with (
        caplog.at_level(logging.DEBUG, logger="lambda_idempotency"),
        pytest.raises(ScopeMissingError) as missing,
    ):
        handler(dict(EVENT), None)

    assert str(missing.value) == "the scope expression selected nothing; refusing to run unscoped"
    assert lines(caplog) == [(logging.ERROR, {"idempotency": "scope_missing", "key_hash": None})]
    assert runs == []


def test_a_takeover_of_a_lapsed_lease_is_a_warning_saying_how_long_ago_it_lapsed(
    store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    """A claim is routine (DEBUG); taking over a crashed or timed-out holder's key is not: a
    WARNING with how long its lease had lapsed."""
    handler, runs = handler_for(store, clock=clock, lease_seconds=1)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    now = clock.now_ms()
    won, _ = store.claim(
        pk,
        owner="crashed",
        payload_hash=payload_hash,
        now_ms=now,
        lease_until_ms=now + 1_000,
        expiration_s=now // 1000 + 3600,
    )
    assert won
    clock.advance(3.5)  # lapsed 2.5 s ago: past the 2 s skew allowance

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler(dict(EVENT), None) == {"charged": 5}
        assert handler({**EVENT, "order_id": "o-2"}, None) == {"charged": 5}

    pk2, _ = handler.idempotency._identify({**EVENT, "order_id": "o-2"})
    logged = lines(caplog)
    assert logged[0] == (
        logging.WARNING,
        {"idempotency": "taken_over", "key_hash": pk, "lapsed_ms": 2_500},
    )
    assert (logging.DEBUG, {"idempotency": "claimed", "key_hash": pk2}) in logged
    assert runs == [1, 1]


@pytest.mark.parametrize("cache_size", [0, 16])
def test_a_key_reused_with_another_payload_is_refused_with_a_warning(
    store: DynamoDBStore, caplog: Any, cache_size: int
) -> None:
    """The same key with another payload is a client bug, never a replay of the first
    answer: refused (naming the key), and a WARNING, whether the first result is in the
    warm cache or only in the table."""
    from lambda_idempotency import PayloadMismatchError

    handler, runs = handler_for(store, cache_size=cache_size)
    pk, _ = handler.idempotency._identify(EVENT)
    handler(dict(EVENT), None)

    with (
        caplog.at_level(logging.DEBUG, logger="lambda_idempotency"),
        pytest.raises(PayloadMismatchError) as refused,
    ):
        handler({**EVENT, "amount": 6}, None)

    assert str(refused.value) == "this key was used with a different payload"
    assert refused.value.key_hash == pk
    assert (logging.WARNING, {"idempotency": "payload_mismatch", "key_hash": pk}) in lines(caplog)
    assert runs == [1]


@pytest.mark.parametrize(("expired_ago_ms", "outcome"), [(1_000, "taken_over"), (3_000, "claimed")])
def test_a_claim_over_a_record_past_its_ttl_is_routine_only_past_the_skew(
    store: DynamoDBStore, caplog: Any, clock: FakeClock, expired_ago_ms: int, outcome: str
) -> None:
    """DynamoDB deletes expired records late, so one past its TTL is as good as gone and
    claiming its key is routine; but only once it is past even on a clock 2 s behind ours.
    Before that its holder may still be running: a takeover, and a WARNING."""
    handler, _ = handler_for(store, clock=clock)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    now = clock.now_ms() // 1000 * 1000  # on a second: expiry is kept in whole seconds
    clock.ms = now
    won, _ = store.claim(
        pk,
        owner="crashed",
        payload_hash=payload_hash,
        now_ms=now - 10_000,
        lease_until_ms=now - 5_000,
        expiration_s=(now - expired_ago_ms) // 1000 - 1,
    )
    assert won

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler(dict(EVENT), None) == {"charged": 5}

    assert lines(caplog)[0][1]["idempotency"] == outcome


def test_a_claim_refused_by_a_record_nobody_can_read_gives_up_after_three_tries(
    store: DynamoDBStore, caplog: Any
) -> None:
    """Every claim is refused, yet the record holding the key cannot be read (an endpoint
    that ignores ReturnValuesOnConditionCheckFailure, a record deleted in between): after
    three claims the caller gets a retryable StoreError, and an ERROR line; nothing runs."""
    handler, runs = handler_for(store)
    pk, payload_hash = handler.idempotency._identify(EVENT)
    won, _ = store.claim(
        pk,
        owner="holder",
        payload_hash=payload_hash,
        now_ms=0,
        lease_until_ms=2**41,
        expiration_s=2**31,
    )
    assert won
    faults = FaultInjector(store.client)
    faults.add(Fault(frozenset({"claim", "get"}), "strip_item", count=10**6))

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(StoreError) as failed,
    ):
        handler(dict(EVENT), None)

    assert str(failed.value) == (
        "DynamoDB refused the claim but the record holding the key could not be read, 3 times"
    )
    assert (failed.value.code, failed.value.key_hash, failed.value.retryable) == (
        "ClaimRefusedRecordUnseen",
        pk,
        True,
    )
    assert faults.seen["claim"] == 3
    assert lines(caplog) == [
        (
            logging.ERROR,
            {
                "idempotency": "store_error",
                "key_hash": pk,
                "step": "claim",
                "code": "ClaimRefusedRecordUnseen",
            },
        )
    ]
    assert runs == []


def test_a_result_the_policy_refuses_releases_the_key_saying_so(
    store: DynamoDBStore, caplog: Any
) -> None:
    """`store_result` says no (an error response, say): the key is released, with the
    policy as the reason, so the retry runs again."""
    handler, runs = handler_for(store, store_result=lambda result: False)
    pk, _ = handler.idempotency._identify(EVENT)

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler(dict(EVENT), None) == {"charged": 5}

    assert lines(caplog)[-1] == (
        logging.DEBUG,  # routine: the function's own response says what went wrong
        {"idempotency": "released", "key_hash": pk, "reason": "result not stored by policy"},
    )
    assert handler(dict(EVENT), None) == {"charged": 5}
    assert runs == [1, 1]


def test_a_result_that_cannot_be_stored_is_a_warning_naming_its_type(
    store: DynamoDBStore, caplog: Any
) -> None:
    """The effect has happened but the result has no stored form: the key completes without
    it, and a WARNING names the type (never the value)."""

    class Receipt:
        pass

    @idempotent(store=store, key="order_id", namespace="orders", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return Receipt()

    pk, _ = handler.idempotency._identify(EVENT)
    with caplog.at_level(logging.INFO, logger="lambda_idempotency"):
        assert isinstance(handler(dict(EVENT), None), Receipt)

    assert lines(caplog) == [
        (
            logging.WARNING,
            {
                "idempotency": "result_not_storable",
                "key_hash": pk,
                "problem": f"not_serializable: {Receipt.__qualname__}",
            },
        )
    ]


@pytest.mark.parametrize(
    ("lease_seconds", "handler_ms", "retries"),
    [
        (60, 450, 12),  # 10 s less a tenth, from the end of the work
        (60, 30_000, 12),  # however long the work took (issue 31: it used to run from the claim)
        (3, 0, 6),  # a lease under 10 s bounds it instead: 3 s less 300 ms
    ],
)
def test_without_a_context_completion_retries_for_ten_seconds_at_most(
    default_store: DynamoDBStore,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    lease_seconds: int,
    handler_ms: int,
    retries: int,
) -> None:
    """Outside Lambda nothing says when the caller gives up: completion keeps trying for
    10 s from the end of the work (or the lease's length, if shorter), less a tenth to
    answer in. Jitter at its ceiling, so the pauses are exact."""
    from lambda_idempotency._protocol import completing as _completing

    monkeypatch.setattr(_completing, "random", SimpleNamespace(uniform=lambda low, high: high))

    @idempotent(store=default_store, key="order_id", clock=clock, lease_seconds=lease_seconds)
    def handler(event: dict[str, Any], context: Any) -> str:
        clock.advance(handler_ms / 1000)
        return "charged"

    FaultInjector(default_store.client).add(Fault("complete", "5xx", count=10**6))
    assert handler(dict(EVENT), None) == "charged"
    assert clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, *[1.0] * (retries - 5)]


def test_a_claim_that_may_have_landed_unanswered_is_released_on_the_way_out(
    default_store: DynamoDBStore, caplog: Any
) -> None:
    """The claim lands but its answer is lost, and botocore's retries fail: the handler
    does not run (fail closed), and the claim that may be there is released, fenced on our
    token, so the caller's retry runs now instead of after the whole lease."""
    handler, runs = handler_for(default_store)
    pk, _ = handler.idempotency._identify(EVENT)
    faults = FaultInjector(default_store.client)
    faults.add(Fault("claim", "lost"))
    faults.add(Fault("claim", "5xx", first=2, count=2))

    with (
        caplog.at_level(logging.INFO, logger="lambda_idempotency"),
        pytest.raises(StoreError),
    ):
        handler(dict(EVENT), None)

    assert lines(caplog) == [
        (
            logging.ERROR,
            {
                "idempotency": "store_error",
                "key_hash": pk,
                "step": "claim",
                "code": "InternalServerError",
            },
        ),
        (logging.INFO, {"idempotency": "released", "key_hash": pk, "reason": "claim failed"}),
    ]
    faults.clear()
    assert handler(dict(EVENT), None) == {"charged": 5}
    assert runs == [1]
