"""DynamoDBStore's conditions and transactions on DynamoDB Local: who may claim a key and
when (leases, expiry, clock skew, tombstones), the owner fence on completion and release, and
enlisted writes committed with the result or not at all."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lambda_idempotency import CompletionConflictError, DynamoDBStore, Status
from tests.store_calls import HOUR_S, NOW, SKEW, Requests, claim, item


def ledger_put(store: DynamoDBStore, name: str, condition: str | None = None) -> dict[str, Any]:
    put: dict[str, Any] = {"TableName": store.table_name, "Item": {"pk": {"S": name}}}
    if condition:
        put["ConditionExpression"] = condition
    return {"Put": put}


def test_a_held_key_is_refused_with_the_holder_record(store: DynamoDBStore) -> None:
    claim(store, "A", payload_hash="h-1")

    won, held = claim(store, "B", now_ms=NOW + 1_000)

    assert won is False
    assert held.owner == "A" and held.status is Status.IN_PROGRESS and held.payload_hash == "h-1"
    assert item(store)["owner"]["S"] == "A"


def test_a_lapsed_lease_is_taken_over_only_past_the_skew_allowance(
    store: DynamoDBStore,
) -> None:
    claim(store, "A", lease_until_ms=NOW + 5_000)

    lapsed_here_only = NOW + 5_000 + SKEW  # lapsed on our clock, not on one 2 s behind
    assert claim(store, "B", now_ms=lapsed_here_only, skew_ms=SKEW)[0] is False
    won, replaced = claim(store, "B", now_ms=lapsed_here_only + 1, skew_ms=SKEW)

    assert won is True
    assert replaced.owner == "A" and replaced.status is Status.IN_PROGRESS
    assert item(store)["owner"]["S"] == "B"


def test_an_expired_record_is_claimed_afresh_only_past_the_skew_allowance(
    store: DynamoDBStore,
) -> None:
    claim(store, "A", lease_until_ms=NOW + 5_000)
    store.complete("k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S)

    # Still inside its last second on a clock 2 s behind: the record stands.
    almost = HOUR_S * 1000 + SKEW + 999
    won, held = claim(store, "B", now_ms=almost, skew_ms=SKEW)
    assert won is False and held.status is Status.COMPLETED and held.result == b"r"

    won, replaced = claim(store, "B", now_ms=almost + 1, skew_ms=SKEW)
    assert won is True and replaced.status is Status.COMPLETED


def test_a_completed_record_is_never_taken_over_by_its_lapsed_lease(
    store: DynamoDBStore,
) -> None:
    claim(store, "A", lease_until_ms=NOW + 1_000)
    store.complete("k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S)

    assert claim(store, "B", now_ms=NOW + 60_000)[0] is False


def test_a_delayed_copy_of_a_claim_never_relocks_its_own_released_key(
    store: DynamoDBStore,
) -> None:
    claim(store, "A")
    assert store.release("k", owner="A", now_ms=NOW + 1_000)

    won, held = claim(store, "A", now_ms=NOW + 2_000)  # the copy lands after the release

    assert won is False and held.status is Status.RELEASED


def test_a_released_key_is_free_for_claims_made_after_the_release(
    store: DynamoDBStore,
) -> None:
    claim(store, "A")
    store.release("k", owner="A", now_ms=NOW + 10_000)

    # B's request was signed before A released (a delayed copy): it must not lock the key.
    assert claim(store, "B", now_ms=NOW + 5_000)[0] is False
    won, replaced = claim(store, "C", now_ms=NOW + 10_000)
    assert won is True and replaced.status is Status.RELEASED


def test_a_zombie_completion_is_fenced_and_the_new_owner_keeps_the_key(
    store: DynamoDBStore,
) -> None:
    claim(store, "A", lease_until_ms=NOW + 1_000)
    claim(store, "B", now_ms=NOW + 10_000)

    completed = store.complete(
        "k", owner="A", payload_hash=None, result=b"A's", expiration_s=HOUR_S
    )

    assert completed is False
    record = store.get("k")
    assert record is not None and record.owner == "B" and record.status is Status.IN_PROGRESS


def test_a_zombie_release_leaves_the_new_owner_claim_alone(store: DynamoDBStore) -> None:
    claim(store, "A", lease_until_ms=NOW + 1_000)
    claim(store, "B", now_ms=NOW + 10_000)

    assert store.release("k", owner="A", now_ms=NOW + 11_000) is False

    record = store.get("k")
    assert record is not None and record.owner == "B" and record.status is Status.IN_PROGRESS


def test_release_never_deletes_a_completed_record_even_our_own(
    store: DynamoDBStore,
) -> None:
    claim(store, "A")
    store.complete("k", owner="A", payload_hash=None, result=b"r", expiration_s=HOUR_S)

    assert store.release("k", owner="A", now_ms=NOW + 1_000) is False
    record = store.get("k")
    assert record is not None and record.status is Status.COMPLETED and record.result == b"r"


def test_release_leaves_a_tombstone_that_fences_for_fifteen_minutes(
    store: DynamoDBStore,
) -> None:
    claim(store, "A", payload_hash="h-1")

    assert store.release("k", owner="A", now_ms=NOW + 1_500) is True

    tombstone = store.get("k")
    assert tombstone is not None
    assert tombstone.status is Status.RELEASED and tombstone.owner == "A"
    assert tombstone.lease_until == NOW + 1_500
    assert tombstone.expiration == (NOW + 1_500) // 1000 + 900
    assert tombstone.result is None and tombstone.payload_hash is None


def test_a_release_of_a_key_nobody_holds_is_refused(store: DynamoDBStore) -> None:
    assert store.release("k", owner="A", now_ms=NOW) is False
    assert item(store) == {}


def test_a_completion_with_writes_commits_them_in_one_transaction_keyed_by_owner(
    store: DynamoDBStore,
) -> None:
    """The owner token is the transaction's idempotency token: a repeat that landed before
    is answered, not applied twice."""
    owner = uuid.uuid4().hex  # tokens are remembered account-wide, across tables
    claim(store, owner)
    requests = Requests(store.client)

    assert store.complete(
        "k",
        owner=owner,
        payload_hash=None,
        result=b"r",
        expiration_s=HOUR_S,
        writes=[ledger_put(store, "entry")],
    )

    (sent,) = requests.of("TransactWriteItems")
    assert sent["ClientRequestToken"] == owner
    assert item(store, "entry") != {}
    assert item(store)["status"]["S"] == "COMPLETED"


def test_a_fenced_completion_writes_none_of_its_enlisted_writes(
    store: DynamoDBStore,
) -> None:
    zombie = uuid.uuid4().hex
    claim(store, zombie, lease_until_ms=NOW + 1_000)
    claim(store, "B", now_ms=NOW + 10_000)

    completed = store.complete(
        "k",
        owner=zombie,
        payload_hash=None,
        result=b"r",
        expiration_s=HOUR_S,
        writes=[ledger_put(store, "entry")],
    )

    assert completed is False
    assert item(store, "entry") == {}


def test_writes_committed_without_a_record_conflict_on_their_first_condition(
    store: DynamoDBStore,
) -> None:
    """With no record in the transaction, a first write's failed condition is the caller's
    conflict, not a fence."""
    store.client.put_item(TableName=store.table_name, Item={"pk": {"S": "taken"}})

    with pytest.raises(CompletionConflictError):
        store.commit_writes([ledger_put(store, "taken", "attribute_not_exists(pk)")])


def test_writes_committed_without_a_record_land_in_one_transaction(
    store: DynamoDBStore,
) -> None:
    requests = Requests(store.client)

    store.commit_writes([ledger_put(store, "a"), ledger_put(store, "b")])
    store.commit_writes([])

    assert len(requests.of("TransactWriteItems")) == 1
    assert item(store, "a") != {} and item(store, "b") != {}
