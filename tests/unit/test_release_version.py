"""DynamoDBStore.release_version, the operator's release, on moto: it replaces exactly the
record version it was given, in both layouts, and nothing else."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from lambda_idempotency import DynamoDBStore, Status
from lambda_idempotency._stores.dynamodb.layout import TOMBSTONE_SECONDS
from tests.store_calls import HOUR_S, NOW, claim, item

CHANGES = {
    "status": {"S": "COMPLETED"},
    "owner": {"S": "B"},
    "lease_until": {"N": str(NOW + 60_000)},
    "expiration": {"N": str(HOUR_S + 1)},
    "claimed_at": {"N": str(NOW + 1)},
    "completed_at": {"N": str(NOW + 2)},
}


@pytest.mark.parametrize("field", sorted(CHANGES))
def test_a_record_changed_in_any_field_since_it_was_read_is_not_released(
    field: str, moto_store: DynamoDBStore
) -> None:
    claim(moto_store, "A")
    shown = moto_store.get("k")
    assert shown is not None
    client: Any = moto_store.client
    client.put_item(
        TableName=moto_store.table_name, Item={**item(moto_store), field: CHANGES[field]}
    )
    changed = item(moto_store)

    released, current = moto_store.release_version(shown, now_ms=NOW + 5_000)

    assert not released
    assert current == moto_store.get("k") and current != shown
    assert item(moto_store) == changed


def test_the_record_shown_becomes_a_tombstone_with_its_owner(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    shown = moto_store.get("k")
    assert shown is not None

    assert moto_store.release_version(shown, now_ms=NOW + 5_000) == (True, None)

    assert moto_store.get("k") == shown._replace(
        status=Status.RELEASED,
        owner="A",
        lease_until=NOW + 5_000,
        expiration=(NOW + 5_000) // 1000 + TOMBSTONE_SECONDS,
        claimed_at=None,
    )
    assert moto_store.release_version(shown, now_ms=NOW + 6_000)[0] is False  # not twice


def test_a_record_gone_since_it_was_read_is_reported_gone(moto_store: DynamoDBStore) -> None:
    claim(moto_store, "A")
    shown = moto_store.get("k")
    assert shown is not None
    moto_store.delete("k")

    assert moto_store.release_version(shown, now_ms=NOW) == (False, None)
    assert moto_store.get("k") is None


@pytest.fixture
def powertools_store(moto_store: DynamoDBStore) -> DynamoDBStore:
    client: Any = boto3.client("dynamodb", region_name="us-east-1")
    client.create_table(
        TableName="powertools",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return DynamoDBStore("powertools", client=client, layout="powertools")


def test_powertools_layout_deletes_the_record_shown_and_only_that_one(
    powertools_store: DynamoDBStore,
) -> None:
    store = powertools_store
    for pk in ("k1", "k2"):
        store.claim(
            pk,
            owner="A",
            payload_hash=None,
            now_ms=NOW,
            lease_until_ms=NOW + 10_000,
            expiration_s=HOUR_S,
        )
    first, second = store.get("k1"), store.get("k2")
    assert first is not None and second is not None
    assert store.complete("k2", owner="A", payload_hash=None, result=b"j1", expiration_s=HOUR_S)

    assert store.release_version(first, now_ms=NOW + 20_000) == (True, None)
    released, current = store.release_version(second, now_ms=NOW + 20_000)

    assert store.get("k1") is None  # no tombstone: Powertools would not read one
    assert not released and current is not None and current.status is Status.COMPLETED
    assert store.get("k2") == current
