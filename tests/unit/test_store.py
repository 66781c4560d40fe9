"""DynamoDBStore on its own, on moto: the records it writes, the conditions that guard them,
the reads it asks to be strongly consistent, large results split into chunks, and how each
failure of DynamoDB reaches the caller."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from lambda_idempotency import (
    AttributeNames,
    CompletionConflictError,
    ConfigurationError,
    DynamoDBStore,
    Status,
    StoreError,
)
from lambda_idempotency._stores.dynamodb.result_placement import stored_result_bytes
from lambda_idempotency._stores.record import Record
from tests.store_calls import HOUR_S, NOW, Requests, claim, item


class Failing:
    """A client whose `operation` raises what `fail` builds (from the request), the other
    operations reaching the real client."""

    def __init__(self, client: Any, operation: str, fail: Callable[[dict[str, Any]], Any]) -> None:
        self._client, self._operation, self._fail = client, operation, fail
        self.calls: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        if name != self._operation:
            return getattr(self._client, name)

        def call(**request: Any) -> Any:
            self.calls.append(request)
            return self._fail(request)

        return call


def client_error(
    code: str, status: int = 400, retries: int = 0, operation: str = "PutItem", **extra: Any
) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "refused"},
        "ResponseMetadata": {"HTTPStatusCode": status, "RetryAttempts": retries},
        **extra,
    }
    return ClientError(response, operation)


def failing_store(operation: str, fail: Callable[[dict[str, Any]], Any]) -> DynamoDBStore:
    """A store whose client fails `operation` as `fail` says, with no DynamoDB behind it."""
    return DynamoDBStore("t", client=Failing(object(), operation, fail))  # type: ignore[arg-type]


def raising(exc: BaseException) -> Callable[[dict[str, Any]], Any]:
    def fail(request: dict[str, Any]) -> Any:
        raise exc

    return fail


# -- the claim ------------------------------------------------------------------------------


def test_a_claim_writes_an_in_progress_record_with_its_lease(moto_store: DynamoDBStore) -> None:
    won, replaced = claim(
        moto_store, "A", payload_hash="h-1", lease_until_ms=NOW + 5_000, expiration_s=HOUR_S
    )

    assert (won, replaced) == (True, None)
    assert moto_store.get("k") == Record(
        pk="k",
        status=Status.IN_PROGRESS,
        expiration=HOUR_S,
        lease_until=NOW + 5_000,
        owner="A",
        payload_hash="h-1",
        claimed_at=NOW,
    )


def test_a_claim_without_payload_hash_stores_none(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A", payload_hash=None)

    assert "payload_hash" not in item(moto_store)


def test_a_refused_claim_costs_one_request(moto_store: DynamoDBStore) -> None:
    """The holder's record comes back with the refusal: no second read."""
    claim(moto_store, "A", payload_hash="h-1")
    requests = Requests(moto_store.client)

    won, held = claim(moto_store, "B")

    assert won is False and held.owner == "A"
    assert [name for name, _ in requests.sent] == ["PutItem"]


def test_a_refused_claim_reads_the_holder_when_the_endpoint_returns_nothing(
    moto_store: DynamoDBStore,
) -> None:
    """Some endpoints ignore ReturnValuesOnConditionCheckFailure: the holder is then read,
    strongly consistent (an eventually consistent read could miss the claim that won)."""
    claim(moto_store, "A")
    real: Any = moto_store.client

    def refused_without_item(request: dict[str, Any]) -> Any:
        try:
            return real.put_item(**request)
        except ClientError as exc:
            response: dict[str, Any] = exc.response  # type: ignore[assignment]
            response.pop("Item", None)
            raise

    client = Failing(real, "put_item", refused_without_item)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]
    requests = Requests(real)

    won, held = claim(store, "B")

    assert won is False and held.owner == "A"
    assert [body.get("ConsistentRead") for body in requests.of("GetItem")] == [True]


def test_without_a_skew_allowance_a_lease_lapses_the_millisecond_after_it_ends(
    moto_store: DynamoDBStore,
) -> None:
    claim(moto_store, "A", lease_until_ms=NOW + 5_000)

    assert claim(moto_store, "B", now_ms=NOW + 5_000)[0] is False
    assert claim(moto_store, "B", now_ms=NOW + 5_001)[0] is True


def test_the_claim_asks_for_the_holder_record_in_its_refusal(moto_store: DynamoDBStore) -> None:
    """One round trip for a refused claim: the record that holds the key comes back with it."""
    requests = Requests(moto_store.client)
    claim(moto_store, "A")

    (sent,) = requests.of("PutItem")
    assert sent["ReturnValuesOnConditionCheckFailure"] == "ALL_OLD"
    assert sent["ReturnValues"] == "ALL_OLD"


# -- completion and release ------------------------------------------------------------------


def test_completion_stores_the_result_and_its_times(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A", payload_hash="h-1")

    assert moto_store.complete(
        "k",
        owner="A",
        payload_hash="h-1",
        result=b"packed",
        expiration_s=HOUR_S + 5,
        claimed_at_ms=NOW,
        completed_at_ms=NOW + 70,
    )

    record = moto_store.get("k")
    assert record is not None
    assert record.status is Status.COMPLETED and record.result == b"packed"
    assert (record.owner, record.payload_hash) == ("A", "h-1")
    assert (record.claimed_at, record.completed_at, record.expiration) == (
        NOW,
        NOW + 70,
        HOUR_S + 5,
    )
    assert record.lease_until is None


def test_completion_leaves_out_what_it_was_not_given(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    moto_store.complete("k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S)

    assert set(item(moto_store)) == {"pk", "status", "expiration", "owner", "result", "fmt"}


# -- reads -----------------------------------------------------------------------------------


def test_reading_a_record_is_strongly_consistent(moto_store: DynamoDBStore) -> None:
    """A waiter polling the holder's record must see its completion as soon as it landed."""
    requests = Requests(moto_store.client)

    assert moto_store.get("k") is None
    claim(moto_store, "A")
    assert moto_store.get("k") is not None

    assert [body["ConsistentRead"] for body in requests.of("GetItem")] == [True, True]


def test_a_record_with_a_status_we_never_write_is_refused_not_guessed(
    moto_store: DynamoDBStore,
) -> None:
    moto_store.client.put_item(
        TableName=moto_store.table_name,
        Item={"pk": {"S": "k"}, "status": {"S": "X" * 60}, "expiration": {"N": "1"}},
    )
    with pytest.raises(StoreError) as caught:
        moto_store.get("k")
    assert str(caught.value) == (
        f"the record has a status this library does not write: {'X' * 40!r}"
    )
    assert caught.value.code == "UnknownRecordStatus" and caught.value.key_hash == "k"
    assert "X" * 41 not in str(caught.value)

    moto_store.client.put_item(
        TableName=moto_store.table_name, Item={"pk": {"S": "k"}, "expiration": {"N": "1"}}
    )
    with pytest.raises(StoreError, match="'none'"):
        moto_store.get("k")


def test_delete_removes_a_record_whoever_holds_it(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    moto_store.delete("k")

    assert moto_store.get("k") is None


# -- large results in chunks -----------------------------------------------------------------


def test_a_large_result_is_split_into_chunks_and_reassembled(moto_store: DynamoDBStore) -> None:
    result = bytes(range(256)) * 2_800  # 716 800 bytes: three chunks
    claim(moto_store, "A")

    pointer = moto_store.put_chunks("k", owner="A", result=result, expiration_s=HOUR_S)
    moto_store.complete("k", owner="A", payload_hash=None, result=pointer, expiration_s=HOUR_S)
    record = moto_store.get("k")

    assert record is not None and moto_store.load_result(record) == result
    assert stored_result_bytes(record) == len(result)
    described = json.loads(pointer[1:])
    assert described == {
        "owner": "A",
        "count": 3,
        "bytes": len(result),
        "sha256": hashlib.sha256(result).hexdigest(),
    }
    chunks = [item(moto_store, f"k#chunk#A#{i}") for i in range(3)]
    assert [len(chunk["result"]["B"]) for chunk in chunks] == [350_000, 350_000, 16_800]
    assert all(chunk["expiration"]["N"] == str(HOUR_S) for chunk in chunks)


def test_chunks_are_written_at_most_25_a_request(moto_store: DynamoDBStore) -> None:
    result = b"\x01" * (350_000 * 26 + 1)  # 27 chunks: BatchWriteItem takes 25 at most
    requests = Requests(moto_store.client)

    pointer = moto_store.put_chunks("k", owner="A", result=result, expiration_s=HOUR_S)

    sizes = [
        len(body["RequestItems"][moto_store.table_name]) for body in requests.of("BatchWriteItem")
    ]
    assert sizes == [25, 2]
    assert json.loads(pointer[1:])["count"] == 27


def test_an_inline_result_is_returned_as_stored(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    moto_store.complete("k", owner="A", payload_hash=None, result=b"zinline", expiration_s=HOUR_S)
    record = moto_store.get("k")

    assert record is not None and moto_store.load_result(record) == b"zinline"
    assert stored_result_bytes(record) == 7
    assert stored_result_bytes(record._replace(result=None)) == 0
    # A chunk pointer that does not say its size (written before it did) counts as 0.
    assert stored_result_bytes(record._replace(result=b'c{"owner": "A", "count": 2}')) == 0


def complete_chunked(store: DynamoDBStore, owner: str, result: bytes) -> Any:
    pointer = store.put_chunks("k", owner=owner, result=result, expiration_s=HOUR_S)
    store.complete("k", owner=owner, payload_hash=None, result=pointer, expiration_s=HOUR_S)
    return store.get("k")


def test_a_chunk_whose_checksum_does_not_match_is_refused_not_replayed(
    moto_store: DynamoDBStore,
) -> None:
    claim(moto_store, "A")
    record = complete_chunked(moto_store, "A", b"\x02" * 400_000)
    moto_store.client.put_item(
        TableName=moto_store.table_name,
        Item={"pk": {"S": "k#chunk#A#1"}, "result": {"B": b"\x03" * 50_000}},
    )

    with pytest.raises(StoreError, match=r"^a chunked result is incomplete or corrupt$") as caught:
        moto_store.load_result(record)
    assert caught.value.key_hash == "k" and caught.value.record == record


def test_a_missing_chunk_is_refused_not_replayed_short(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    record = complete_chunked(moto_store, "A", b"\x02" * 400_000)
    moto_store.delete("k#chunk#A#1")

    with pytest.raises(StoreError, match=r"^a chunked result is incomplete or corrupt$"):
        moto_store.load_result(record)


def test_chunks_are_read_from_their_writer_only(moto_store: DynamoDBStore) -> None:
    """A zombie (A) writes its chunks for the same key before and after B completed: B's
    record replays B's result, whole."""
    claim(moto_store, "A", lease_until_ms=NOW + 1_000)
    moto_store.put_chunks("k", owner="A", result=b"\x0a" * 400_000, expiration_s=HOUR_S)
    claim(moto_store, "B", now_ms=NOW + 10_000)

    record = complete_chunked(moto_store, "B", b"\x0b" * 400_000)
    moto_store.put_chunks("k", owner="A", result=b"\x0c" * 400_000, expiration_s=HOUR_S)

    assert moto_store.load_result(record) == b"\x0b" * 400_000


def test_chunks_are_read_cheaply_first_and_consistently_only_when_missed(
    moto_store: DynamoDBStore,
) -> None:
    """Chunks are immutable: an eventually consistent read finds them whole or not at all,
    and only the chunks it missed are read again, strongly consistent."""
    claim(moto_store, "A")
    result = b"\x05" * 800_000
    record = complete_chunked(moto_store, "A", result)
    real = moto_store.client
    first: list[bool] = []

    def misses_the_last_chunk_once(request: dict[str, Any]) -> Any:
        response = real.batch_get_item(**request)
        if not first:
            first.append(True)
            items = response["Responses"][moto_store.table_name]
            response["Responses"][moto_store.table_name] = [
                found for found in items if found["pk"]["S"] != "k#chunk#A#2"
            ]
        return response

    client = Failing(real, "batch_get_item", misses_the_last_chunk_once)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]

    assert store.load_result(record) == result
    consistent = [request["RequestItems"][store.table_name] for request in client.calls]
    assert [(len(read["Keys"]), read["ConsistentRead"]) for read in consistent] == [
        (3, False),
        (1, True),
    ]
    assert consistent[1]["Keys"] == [{"pk": {"S": "k#chunk#A#2"}}]


def test_throttled_chunk_reads_are_asked_again_backing_off(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six requests at most, 50 ms doubling up to 1 s between them; what is still missing
    then is read once more, strongly consistent."""
    claim(moto_store, "A")
    result = b"\x06" * (350_000 * 6 + 10)  # seven chunks
    record = complete_chunked(moto_store, "A", result)
    real: Any = moto_store.client
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)

    def one_key_at_a_time(request: dict[str, Any]) -> Any:
        read = request["RequestItems"][moto_store.table_name]
        keys = read["Keys"]
        response = real.batch_get_item(
            RequestItems={moto_store.table_name: {**read, "Keys": keys[:1]}}
        )
        if keys[1:]:
            response["UnprocessedKeys"] = {moto_store.table_name: {**read, "Keys": keys[1:]}}
        return response

    client = Failing(real, "batch_get_item", one_key_at_a_time)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]

    assert store.load_result(record) == result
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    reads = [call["RequestItems"][store.table_name] for call in client.calls]
    assert [(len(read["Keys"]), read["ConsistentRead"]) for read in reads] == [
        (7, False),
        (6, False),
        (5, False),
        (4, False),
        (3, False),
        (2, False),
        (1, True),
    ]


def test_a_chunk_read_answered_with_nothing_but_unprocessed_keys_is_asked_again(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim(moto_store, "A")
    result = b"\x06" * 400_000
    record = complete_chunked(moto_store, "A", result)
    real: Any = moto_store.client
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    throttled: list[dict[str, Any]] = [
        {},
        {"Responses": {}},
    ]  # DynamoDB's answers when it read none of the keys

    def throttled_twice(request: dict[str, Any]) -> Any:
        if throttled:
            return {**throttled.pop(0), "UnprocessedKeys": request["RequestItems"]}
        return real.batch_get_item(**request)

    client = Failing(real, "batch_get_item", throttled_twice)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]

    assert store.load_result(record) == result
    assert len(client.calls) == 3


def test_throttled_chunk_writes_are_sent_again_then_fail_retryable(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    slept: list[float] = []
    monkeypatch.setattr("time.sleep", slept.append)

    def never_processed(request: dict[str, Any]) -> Any:
        return {"UnprocessedItems": request["RequestItems"]}

    client = Failing(moto_store.client, "batch_write_item", never_processed)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]

    with pytest.raises(StoreError) as caught:
        store.put_chunks("k", owner="A", result=b"\x07" * 400_000, expiration_s=HOUR_S)

    assert str(caught.value) == "DynamoDB left chunks of the result unwritten (throttled)"
    assert caught.value.retryable and caught.value.code == "UnprocessedItems"
    assert caught.value.key_hash == "k"
    assert len(client.calls) == 6
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]


def test_chunk_writes_throttled_once_land_on_the_second_request(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    real = moto_store.client

    def first_chunk_only(request: dict[str, Any]) -> Any:
        ((table, writes),) = request["RequestItems"].items()
        real.batch_write_item(RequestItems={table: writes[:1]})
        return {"UnprocessedItems": {table: writes[1:]}} if writes[1:] else {}

    client = Failing(real, "batch_write_item", first_chunk_only)
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]
    claim(store, "A")

    record = complete_chunked(store, "A", b"\x08" * 400_000)

    assert len(client.calls) == 2
    assert store.load_result(record) == b"\x08" * 400_000


# -- transactions with enlisted writes -------------------------------------------------------


def ledger_put(store: DynamoDBStore, name: str, condition: str | None = None) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": store.table_name, "Item": {"pk": {"S": name}}}
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def cancelled(*codes: str | None) -> Callable[[dict[str, Any]], Any]:
    reasons = [{} if code is None else {"Code": code} for code in codes]
    return raising(
        client_error(
            "TransactionCanceledException",
            operation="TransactWriteItems",
            CancellationReasons=reasons,
        )
    )


def test_a_failed_enlisted_condition_is_a_conflict_not_a_lost_lease(
    moto_store: DynamoDBStore,
) -> None:
    claim(moto_store, "A")
    client = Failing(
        moto_store.client, "transact_write_items", cancelled(None, "ConditionalCheckFailed")
    )
    store = DynamoDBStore(moto_store.table_name, client=client)  # type: ignore[arg-type]

    with pytest.raises(CompletionConflictError) as caught:
        store.complete(
            "k",
            owner="A",
            payload_hash=None,
            result=b"r",
            expiration_s=HOUR_S,
            writes=[ledger_put(moto_store, "entry")],
        )
    assert caught.value.reasons == [{}, {"Code": "ConditionalCheckFailed"}]
    assert caught.value.key_hash == "k"
    assert str(caught.value) == (
        "an enlisted write's condition failed; neither it nor the result was written"
    )


def test_a_cancellation_that_gives_no_reasons_is_a_store_error() -> None:
    store = failing_store(
        "transact_write_items",
        raising(client_error("TransactionCanceledException", operation="TransactWriteItems")),
    )

    with pytest.raises(StoreError, match=r"cancelled: $") as caught:
        store.complete(
            "k",
            owner="A",
            payload_hash=None,
            result=b"r",
            expiration_s=HOUR_S,
            writes=[{"Put": {"TableName": "t", "Item": {"pk": {"S": "entry"}}}}],
        )
    assert caught.value.retryable is False and caught.value.key_hash == "k"


@pytest.mark.parametrize(
    ("codes", "retryable"),
    [
        (["None", "ThrottlingError"], True),
        (["TransactionConflict", "None"], True),
        (["None", "ProvisionedThroughputExceeded"], True),
        (["RequestLimitExceeded"], True),
        (["None", "ValidationError"], False),
        (["ItemCollectionSizeLimitExceeded"], False),
    ],
)
def test_a_cancelled_transaction_says_why_and_whether_to_send_it_again(
    codes: list[str], retryable: bool
) -> None:
    store = failing_store("transact_write_items", cancelled(*codes))

    with pytest.raises(StoreError) as caught:
        store.complete(
            "k",
            owner="A",
            payload_hash=None,
            result=b"r",
            expiration_s=HOUR_S,
            writes=[{"Put": {"TableName": "t", "Item": {"pk": {"S": "entry"}}}}],
        )
    assert not isinstance(caught.value, CompletionConflictError)
    assert caught.value.retryable is retryable
    assert caught.value.code == "TransactionCanceledException" and caught.value.key_hash == "k"
    assert f"cancelled: {', '.join(codes)}" in str(caught.value)


def test_a_reason_without_code_reads_as_none() -> None:
    store = failing_store("transact_write_items", cancelled(None, "ThrottlingError"))
    puts = [{"Put": {"TableName": "t", "Item": {"pk": {"S": name}}}} for name in "ab"]

    with pytest.raises(StoreError, match="cancelled: None, ThrottlingError"):
        store.commit_writes(puts)


def test_at_most_100_writes_go_in_one_transaction() -> None:
    sent: list[int] = []

    class Accepting:
        def transact_write_items(self, **request: Any) -> dict[str, Any]:
            sent.append(len(request["TransactItems"]))
            return {}

    store = DynamoDBStore("t", client=Accepting())  # type: ignore[arg-type]
    puts = [{"Put": {"TableName": "t", "Item": {"pk": {"S": str(n)}}}} for n in range(101)]

    store.commit_writes(puts[:100])
    with pytest.raises(
        ConfigurationError, match="101 writes in one transaction; DynamoDB allows 100"
    ):
        store.commit_writes(puts)
    assert sent == [100]


# -- failures ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "retryable", "maybe_applied"),
    [
        (client_error("ThrottlingException"), True, False),
        (client_error("ProvisionedThroughputExceededException"), True, False),
        (client_error("RequestLimitExceeded"), True, False),
        (client_error("TransactionConflictException"), True, False),
        (client_error("TransactionInProgressException"), True, False),
        # A global table with strong consistency: another Region writes the same key.
        (client_error("ReplicatedWriteConflictException"), True, False),
        (client_error("ServiceUnavailable", status=503), True, True),
        (client_error("InternalServerError", status=500), True, True),
        (client_error("SomethingNew", status=500), True, True),
        (client_error("ValidationException"), False, False),
        (client_error("AccessDeniedException", status=499), False, False),
        # botocore retried before giving up: an earlier attempt may have landed.
        (client_error("ThrottlingException", retries=1), True, True),
        (client_error("ValidationException", retries=2), False, True),
    ],
)
def test_each_dynamodb_error_says_if_it_may_pass_and_if_it_may_have_landed(
    error: ClientError, retryable: bool, maybe_applied: bool
) -> None:
    store = failing_store("put_item", raising(error))

    with pytest.raises(StoreError) as caught:
        claim(store, "A")

    code = error.response["Error"]["Code"]
    assert (caught.value.retryable, caught.value.maybe_applied) == (retryable, maybe_applied)
    assert caught.value.code == code and caught.value.key_hash == "k"
    assert str(caught.value).startswith(f"DynamoDB put_item failed: {code}")
    assert caught.value.__cause__ is error


def test_an_error_without_a_code_is_unknown_and_not_retried() -> None:
    store = failing_store("get_item", raising(ClientError({}, "GetItem")))

    with pytest.raises(StoreError) as caught:
        store.get("k")
    assert caught.value.code == "Unknown"
    assert (caught.value.retryable, caught.value.maybe_applied) == (False, False)


def test_a_lost_connection_may_have_landed_and_may_be_retried() -> None:
    error = EndpointConnectionError(endpoint_url="https://dynamodb")
    store = failing_store("put_item", raising(error))

    with pytest.raises(StoreError) as caught:
        store.release("k", owner="A", now_ms=NOW)
    assert (caught.value.retryable, caught.value.maybe_applied) == (True, True)
    assert caught.value.key_hash == "k" and caught.value.__cause__ is error
    assert str(caught.value).startswith(
        "DynamoDB put_item failed: EndpointConnectionError (table t): nothing answers there"
    )


def test_a_request_botocore_cannot_build_is_refused_before_sending() -> None:
    store = failing_store("put_item", raising(TypeError("bad value")))

    with pytest.raises(StoreError) as caught:
        claim(store, "A")
    assert caught.value.code == "InvalidRequest" and caught.value.key_hash == "k"
    assert (caught.value.retryable, caught.value.maybe_applied) == (False, False)
    assert str(caught.value) == "DynamoDB put_item request could not be built: TypeError"


# -- operators' scan -------------------------------------------------------------------------


CHUNKED_RECORD = Record(
    pk="k",
    status=Status.COMPLETED,
    expiration=HOUR_S,
    result=b'c{"owner": "A", "count": 1, "bytes": 1, "sha256": ""}',
)


def complete_with_a_write(store: DynamoDBStore) -> Any:
    return store.complete(
        "k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S, writes=[{"Put": {}}]
    )


@pytest.mark.parametrize(
    ("operation", "call", "key"),
    [
        ("delete_item", lambda store: store.delete("k"), "k"),
        ("get_item", lambda store: store.get("k"), "k"),
        ("scan", lambda store: list(store.scan_stuck(claimed_before_ms=NOW, now_ms=NOW)), None),
        ("transact_write_items", lambda store: store.commit_writes([{"Put": {}}]), None),
        ("transact_write_items", complete_with_a_write, "k"),
        (
            "put_item",
            lambda store: store.complete(
                "k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S
            ),
            "k",
        ),
        (
            "batch_write_item",
            lambda store: store.put_chunks("k", owner="A", result=b"r", expiration_s=1),
            "k",
        ),
        ("batch_get_item", lambda store: store.load_result(CHUNKED_RECORD), "k"),
    ],
)
def test_every_call_fails_as_a_store_error_naming_its_key(
    operation: str, call: Callable[[DynamoDBStore], Any], key: str | None
) -> None:
    store = failing_store(operation, raising(client_error("ThrottlingException")))

    with pytest.raises(StoreError) as caught:
        call(store)
    assert caught.value.code == "ThrottlingException" and caught.value.retryable
    assert caught.value.key_hash == key


def test_a_failed_consistent_reread_of_missing_chunks_names_its_key() -> None:
    answers: list[Any] = [{"Responses": {"t": []}}, client_error("ThrottlingException")]

    def missed_then_throttled(request: dict[str, Any]) -> Any:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    store = failing_store("batch_get_item", missed_then_throttled)

    with pytest.raises(StoreError) as caught:
        store.load_result(CHUNKED_RECORD)
    assert caught.value.code == "ThrottlingException" and caught.value.key_hash == "k"
    assert answers == []


def test_scan_finds_live_claims_older_than_the_cutoff(moto_store: DynamoDBStore) -> None:
    def record(pk: str, status: str, expiration_s: int, claimed_at: int | None) -> None:
        found: dict[str, Any] = {
            "pk": {"S": pk},
            "status": {"S": status},
            "expiration": {"N": str(expiration_s)},
        }
        if claimed_at is not None:
            found["claimed_at"] = {"N": str(claimed_at)}
        moto_store.client.put_item(TableName=moto_store.table_name, Item=found)

    record("stuck", "IN_PROGRESS", HOUR_S, NOW - 60_000)
    record("no-claim-time", "IN_PROGRESS", HOUR_S, None)
    record("expires-now", "IN_PROGRESS", NOW // 1000, NOW - 60_000)
    record("recent", "IN_PROGRESS", HOUR_S, NOW - 1_000)
    record("at-cutoff", "IN_PROGRESS", HOUR_S, NOW - 30_000)
    record("expired", "IN_PROGRESS", NOW // 1000 - 1, NOW - 60_000)
    record("done", "COMPLETED", HOUR_S, NOW - 60_000)

    pages = list(moto_store.scan_stuck(claimed_before_ms=NOW - 30_000, now_ms=NOW + 999))

    assert sorted(r.pk for page in pages for r in page.records) == [
        "expires-now",
        "no-claim-time",
        "stuck",
    ]
    assert sum(page.scanned for page in pages) == 7


def test_scan_pages_through_the_table(moto_store: DynamoDBStore) -> None:
    for n in range(5):
        claim(moto_store, f"owner-{n}") if n == 0 else moto_store.claim(
            f"k{n}",
            owner="A",
            payload_hash=None,
            now_ms=NOW,
            lease_until_ms=NOW + 1,
            expiration_s=HOUR_S,
        )
    requests = Requests(moto_store.client)

    pages = list(moto_store.scan_stuck(claimed_before_ms=NOW + 1, now_ms=NOW, page_size=2))

    assert [page.scanned for page in pages][:3] == [2, 2, 1]
    assert sorted(r.pk for page in pages for r in page.records) == ["k", "k1", "k2", "k3", "k4"]
    sent = requests.of("Scan")
    assert [body["Limit"] for body in sent] == [2] * len(sent)
    assert all(body["ReturnConsumedCapacity"] == "TOTAL" for body in sent)
    assert "ExclusiveStartKey" not in sent[0] and "ExclusiveStartKey" in sent[1]
    assert all(isinstance(page.capacity_units, float) for page in pages)


def test_scan_reports_what_each_page_cost() -> None:
    class Pages:
        def scan(self, **request: Any) -> dict[str, Any]:
            return {"Items": [], "ScannedCount": 7, "ConsumedCapacity": {"CapacityUnits": 2.5}}

    (page,) = DynamoDBStore("t", client=Pages()).scan_stuck(  # type: ignore[arg-type]
        claimed_before_ms=NOW, now_ms=NOW
    )

    assert (page.records, page.scanned, page.capacity_units) == ([], 7, 2.5)

    class Empty:
        def scan(self, **request: Any) -> dict[str, Any]:
            assert "Limit" not in request
            return {}

    (page,) = DynamoDBStore("t", client=Empty()).scan_stuck(  # type: ignore[arg-type]
        claimed_before_ms=NOW, now_ms=NOW
    )
    assert (page.records, page.scanned, page.capacity_units) == ([], 0, 0.0)


# -- configuration ---------------------------------------------------------------------------


def test_the_table_name_comes_from_the_environment_when_not_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "from-env")
    assert DynamoDBStore().table_name == "from-env"
    assert DynamoDBStore("given").table_name == "given"
    assert repr(DynamoDBStore("given")) == "DynamoDBStore(table_name='given')"

    monkeypatch.delenv("IDEMPOTENCY_TABLE")
    unnamed = DynamoDBStore()  # a module-level store imports without the variable ...
    with pytest.raises(ConfigurationError) as caught:
        unnamed.table_name  # noqa: B018  (... and fails at its first call that needs it)
    assert str(caught.value) == (
        "no table name: pass DynamoDBStore(table_name) or set IDEMPOTENCY_TABLE"
    )
    with pytest.raises(ConfigurationError, match="no table name"):
        DynamoDBStore("").table_name  # noqa: B018


def test_powertools_options_are_refused_in_the_native_layout_by_name() -> None:
    with pytest.raises(ConfigurationError) as caught:
        DynamoDBStore("t", status_attr="s", key_attr="id")
    assert str(caught.value) == (
        "key_attr, status_attr: only for layout='powertools'; the native layout names its "
        "attributes with attribute_names="
    )

    with pytest.raises(ConfigurationError) as caught:
        DynamoDBStore.__init__(DynamoDBStore("t"), "t", layout="powertools")
    assert str(caught.value) == "DynamoDBStore has no layout 'powertools'"


def test_a_single_table_store_keys_records_and_chunks_under_its_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    store = DynamoDBStore("t", sort_key_attr="sk")
    assert store._key("k") == {"pk": {"S": "idempotency#orders"}, "sk": {"S": "k"}}

    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME")
    assert DynamoDBStore("t", sort_key_attr="sk").static_pk_value == "idempotency#"
    assert DynamoDBStore("t", sort_key_attr="sk", static_pk_value="").static_pk_value == ""
    assert DynamoDBStore("t")._key("k") == {"pk": {"S": "k"}}


def test_renamed_attributes_are_the_ones_written_and_read(moto_store: DynamoDBStore) -> None:
    names = AttributeNames(
        pk="pk",
        status="st",
        expiration="exp",
        lease_until="lease",
        owner="own",
        payload_hash="ph",
        result="res",
        claimed_at="cat",
        completed_at="dat",
        format_version="v",
    )
    store = DynamoDBStore(moto_store.table_name, client=moto_store.client, attribute_names=names)
    claim(store, "A", payload_hash="h")
    assert set(item(store)) == {"pk", "st", "exp", "lease", "own", "ph", "cat", "v"}
    assert claim(store, "B")[0] is False

    store.complete(
        "k",
        owner="A",
        payload_hash="h",
        result=b"r",
        expiration_s=HOUR_S,
        claimed_at_ms=NOW,
        completed_at_ms=NOW,
    )
    assert set(item(store)) == {"pk", "st", "exp", "own", "ph", "res", "cat", "dat", "v"}
    assert store.release("k", owner="A", now_ms=NOW) is False
    record = store.get("k")
    assert record is not None and record.result == b"r" and record.completed_at == NOW


def test_the_default_client_is_built_once_with_bounded_retries_and_timeouts() -> None:
    store = DynamoDBStore("t", endpoint_url="http://localhost:1", region_name="eu-west-3")

    client = store.client
    assert store.client is client
    assert client.meta.endpoint_url == "http://localhost:1"
    assert client.meta.region_name == "eu-west-3"
    config: Any = client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2, 10)
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.user_agent.startswith("lambda-idempotency/")


def test_a_single_table_store_reads_back_its_records_and_chunks_by_sort_key(
    moto_store: DynamoDBStore,
) -> None:
    client = moto_store.client
    client.create_table(
        TableName="app",
        KeySchema=[
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    store = DynamoDBStore("app", client=client, sort_key_attr="sk", static_pk_value="idem")
    result = b"\x09" * 400_000
    claim(store, "A")

    record = complete_chunked(store, "A", result)

    assert record.pk == "k" and store.load_result(record) == result
    keys = {(i["pk"]["S"], i["sk"]["S"]) for i in client.scan(TableName="app")["Items"]}
    assert keys == {("idem", "k"), ("idem", "k#chunk#A#0"), ("idem", "k#chunk#A#1")}
    assert claim(store, "B")[1].pk == "k"
