"""DynamoDB Local's own answers parse and raise the same through the fast wire path as
through boto3: each request the store makes is sent to DynamoDB Local through boto3, its raw
answer kept, then replayed to both paths (so both parse the very same bytes) and the results
and exceptions compared whole. Then the same requests go live through the fast path alone:
a refused claim carries the item, a cancelled transaction its reasons, a malformed one is a
ValidationException."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.dynamodb.wire.path import FastWire
from tests.wire_conformance import Call, answer, both_ways, same_outcome, store_calls


class RawAnswers:
    """Each raw answer the client receives, kept in its `after-call` hook."""

    def __init__(self, client: Any) -> None:
        self.kept: list[tuple[int, dict[str, str], bytes]] = []
        client.meta.events.register("after-call.dynamodb", self._keep)

    def _keep(self, http_response: Any, **_: Any) -> None:
        self.kept.append(
            (http_response.status_code, dict(http_response.headers), http_response.content)
        )


def live_calls(store: DynamoDBStore, through: Any) -> list[Call]:
    """The store's requests, answered live by DynamoDB Local through `through`."""

    def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = getattr(through, method)(**copy.deepcopy(params))
        return result

    return store_calls(store, send)


@pytest.fixture
def replayed(store: DynamoDBStore) -> list[tuple[Call, tuple[int, dict[str, str], bytes]]]:
    """Every request shape with DynamoDB Local's raw answer to it, errors included: a claim
    of a held key, a transaction whose enlisted write is refused, a malformed write."""
    client: Any = store.client
    raw = RawAnswers(client)
    store.claim(
        "k",
        owner="someone-else",
        payload_hash=None,
        now_ms=1_800_000_000_000,
        lease_until_ms=1_800_000_060_000,
        expiration_s=1_800_003_600,
    )
    raw.kept.clear()
    calls = []
    for call in live_calls(store, _Raising(client)):
        calls.append(call)
    assert len(raw.kept) == len(calls)
    return list(zip(calls, raw.kept, strict=True))


class _Raising:
    """The client, but a refused request is an answer too: the store's code goes on."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, method: str) -> Any:
        def call(**params: Any) -> dict[str, Any]:
            try:
                result: dict[str, Any] = getattr(self._client, method)(**params)
            except self._client.exceptions.ClientError as exc:
                return dict(exc.response)
            return result

        return call


def test_dynamodb_locals_answers_parse_and_raise_the_same(
    store: DynamoDBStore, replayed: list[tuple[Call, Any]]
) -> None:
    statuses = [status for _, (status, _, _) in replayed]
    assert 200 in statuses
    assert 400 in statuses  # the claim of a held key and the refused transaction
    client: Any = store.client
    for call, (status, headers, body) in replayed:
        scripted = [
            answer(status, body, **{k: v for k, v in headers.items() if k != "x-amz-crc32"})
        ]
        through_client, through_wire = both_ways(lambda c=client: _twin(c), scripted, call)
        same_outcome(through_client, through_wire)


def _twin(client: Any) -> Any:
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=client.meta.endpoint_url,
        region_name=client.meta.region_name,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def test_refusals_reach_the_caller_with_what_dynamodb_said(store: DynamoDBStore) -> None:
    client: Any = store.client
    wire = FastWire(client)
    table = store.table_name
    held = {"pk": {"S": "held"}, "status": {"S": "IN_PROGRESS"}, "blob": {"B": b"\x00\xff"}}
    wire.put_item(TableName=table, Item=held)

    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as refused:
        wire.put_item(
            TableName=table,
            Item={"pk": {"S": "held"}},
            ConditionExpression="attribute_not_exists(pk)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    assert refused.value.response["Item"] == held
    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"

    with pytest.raises(client.exceptions.TransactionCanceledException) as cancelled:
        wire.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": table, "Item": {"pk": {"S": "new"}}}},
                {
                    "ConditionCheck": {
                        "TableName": table,
                        "Key": {"pk": {"S": "held"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                },
            ]
        )
    reasons = cancelled.value.response["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["None", "ConditionalCheckFailed"]
    assert reasons[1]["Item"] == held

    with pytest.raises(client.exceptions.ClientError) as invalid:
        wire.put_item(TableName=table, Item={"pk": {"S": "x"}}, ConditionExpression="(((")
    assert invalid.value.response["Error"]["Code"] == "ValidationException"
    assert wire.get_item(TableName=table, Key={"pk": {"S": "new"}}).get("Item") is None

    for method, params in [
        (
            "put_item",
            {"TableName": table, "Item": {"pk": {"S": "x"}}, "ConditionExpression": "((("},
        ),
        ("get_item", {"TableName": table, "Key": {"pk": {"S": "held"}}, "ConsistentRead": True}),
        ("get_item", {"TableName": "no-such-table", "Key": {"pk": {"S": "held"}}}),
    ]:
        outcomes = []
        for caller in (client, wire):
            try:
                outcomes.append(getattr(caller, method)(**copy.deepcopy(params)))
            except client.exceptions.ClientError as exc:
                outcomes.append((type(exc), str(exc), _without_request_ids(exc.response)))
        if isinstance(outcomes[0], dict):
            outcomes = [_without_request_ids(outcome) for outcome in outcomes]
        assert outcomes[1] == outcomes[0]


def _without_request_ids(response: Any) -> Any:
    """A live answer, less what differs from one request to the next."""
    response = dict(response)
    metadata = dict(response.pop("ResponseMetadata"))
    metadata.pop("RequestId")
    headers = dict(metadata.pop("HTTPHeaders"))
    for varying in ("date", "x-amzn-requestid", "x-amz-crc32"):
        headers.pop(varying, None)
    return response, metadata, headers
