"""Our native layout in a single-table design: a composite key, the records under one
static partition value, on DynamoDB Local."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, idempotent
from tests.conftest import FakeContext, local_client


@pytest.fixture
def shared(dynamodb_local_endpoint: str) -> tuple[Any, str]:
    """An application's table: `pk` and `sk`, other items already in it."""
    client = local_client(dynamodb_local_endpoint)
    name = f"app-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=name,
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
    client.put_item(TableName=name, Item={"pk": {"S": "customer#1"}, "sk": {"S": "profile"}})
    return client, name


def counting(store: DynamoDBStore, runs: list[Any], **options: Any) -> Any:
    @idempotent(store=store, key="order_id", cache_size=0, **options)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(event)
        if event.get("fail"):
            raise RuntimeError("declined")
        return event.get("reply", {"run": len(runs)})

    return handler


def test_records_live_under_the_static_partition_and_replay(shared: tuple[Any, str]) -> None:
    client, name = shared
    store = DynamoDBStore(name, client=client, sort_key_attr="sk", static_pk_value="idem#orders")
    runs: list[Any] = []
    handler = counting(store, runs)

    assert handler({"order_id": "o-1"}, FakeContext()) == {"run": 1}
    assert handler({"order_id": "o-1"}, FakeContext()) == {"run": 1}

    items = client.query(
        TableName=name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "idem#orders"}},
    )["Items"]
    assert [item["sk"]["S"].split("#")[0] for item in items] == [
        f"{__name__}.counting.<locals>.handler"
    ]
    assert len(runs) == 1


def test_two_static_partitions_share_a_table_without_mixing(shared: tuple[Any, str]) -> None:
    client, name = shared
    runs: list[Any] = []
    first = counting(DynamoDBStore(name, client=client, sort_key_attr="sk"), runs)
    other = DynamoDBStore(name, client=client, sort_key_attr="sk", static_pk_value="idem#other")
    second = counting(other, runs)

    assert first({"order_id": "o-1"}, FakeContext()) == {"run": 1}
    assert second({"order_id": "o-1"}, FakeContext()) == {"run": 2}
    assert first({"order_id": "o-1"}, FakeContext()) == {"run": 1}
    default_pk = f"idempotency#{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', '')}"
    partitions = {item["pk"]["S"] for item in client.scan(TableName=name)["Items"]}
    assert partitions == {"customer#1", default_pk, "idem#other"}


def test_a_release_and_a_chunked_result_work_under_a_sort_key(shared: tuple[Any, str]) -> None:
    client, name = shared
    store = DynamoDBStore(name, client=client, sort_key_attr="sk")
    runs: list[Any] = []
    handler = counting(store, runs)
    big = os.urandom(600_000).hex()  # incompressible past one item: stored in chunks

    with pytest.raises(RuntimeError):
        handler({"order_id": "o-1", "fail": True}, FakeContext())
    assert handler({"order_id": "o-1", "reply": big}, FakeContext()) == big
    assert handler({"order_id": "o-1", "reply": big}, FakeContext()) == big

    assert len(runs) == 2
    chunks = [item for item in client.scan(TableName=name)["Items"] if "#chunk#" in item["sk"]["S"]]
    assert len(chunks) >= 2
