"""The fast wire path sends what boto3 sends and answers what boto3 answers.

For each request the store makes (from the store's own code), with SigV4's clock and the
random IDs fixed: the same URL, body bytes and headers (signature included); the same
retries, sleeps and retry quota on scripted throttles, 500s, dropped connections and CRC32
mismatches, in each retry mode; the same endpoint and signing scope for each endpoint
setting; the hooks users and tools rely on still fire; and the client does the call itself
when something it carries cannot be honoured (a Stubber, a patched `_make_api_call`, a hook
on an event the fast path skips)."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable
from typing import Any

import boto3
import botocore
import botocore.auth
import botocore.awsrequest
import botocore.client
import botocore.compat
import botocore.endpoint
import botocore.parsers
import pytest
import wrapt
from botocore.config import Config
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError
from botocore.stub import Stubber

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire import request as _wire_request
from lambda_idempotency._stores.dynamodb.wire.parse import compiled_parser
from lambda_idempotency._stores.dynamodb.wire.path import FastWire, fast_wire
from lambda_idempotency._stores.dynamodb.wire.request import wire_parts
from tests.wire_conformance import (
    Call,
    Scripted,
    answer,
    both_ways,
    empty_answer,
    error,
    freeze_signing_clock,
    same_outcome,
    store_calls,
)

CREDENTIALS = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "secret"}


def our_client(**config: Any) -> Any:
    """The store's own default client (fixed user agent, no client-side validation)."""
    client = default_client(None, "eu-west-1")
    if config:
        client = boto3.client(
            "dynamodb",
            region_name="eu-west-1",
            config=client.meta.config.merge(Config(**config)),
            **CREDENTIALS,
        )
    return client


def plain_client(**options: Any) -> Any:
    """A client as a user makes one: boto3's defaults."""
    options.setdefault("region_name", "eu-west-1")
    return boto3.client("dynamodb", **CREDENTIALS, **options)


CLIENTS: dict[str, Callable[[], Any]] = {
    "our client": our_client,
    "a default boto3 client": plain_client,
    "temporary credentials": lambda: plain_client(aws_session_token="token"),
    "Powertools' user agent hook": lambda: with_powertools_user_agent(our_client()),
    "a hook adding a header with runs of spaces": lambda: with_spaced_header(our_client()),
}


def with_spaced_header(client: Any) -> Any:
    """SigV4 signs a header's value with its runs of spaces collapsed and its ends trimmed."""

    def add(request: Any, **_: Any) -> None:
        request.headers["X-Tenant-Note"] = "  north   wing (bay  7)  "

    client.meta.events.register_first("request-created.dynamodb", add)  # before the signer
    return client


def with_powertools_user_agent(client: Any) -> Any:
    """Powertools registers a request-created hook on every client (any of its utilities
    imported) to add itself to the user agent: the fast path calls it, in its place."""
    from aws_lambda_powertools.shared.user_agent import register_feature_to_client

    register_feature_to_client(client, "idempotency")
    return client


def requests_of_the_store() -> list[Call]:
    return store_calls(DynamoDBStore("idempotency", client=our_client()), empty_answer)


CALLS = requests_of_the_store()


def test_every_request_shape_is_covered() -> None:
    assert [call.shape for call in CALLS] == [
        "claim",
        "complete inline",
        "complete with a write",
        "release",
        "get",
        "batch write",
        "batch get",
        "batch get",
        "commit writes",
    ]
    assert {call.method for call in CALLS} == {
        "put_item",
        "transact_write_items",
        "get_item",
        "batch_write_item",
        "batch_get_item",
    }


def counting_uuids() -> Callable[[], uuid.UUID]:
    ids = iter(range(10**6))
    return lambda: uuid.UUID(int=next(ids))


@pytest.fixture
def fixed_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """SigV4's clock, botocore's invocation IDs and idempotency tokens, and retry jitter, all
    fixed, so two requests built a second apart are byte for byte the same."""
    freeze_signing_clock(monkeypatch)
    monkeypatch.setattr(uuid, "uuid4", counting_uuids())
    monkeypatch.setattr(random, "random", lambda: 0.5)


def comparable(headers: Any) -> dict[str, Any]:
    """The headers, with the user agent's feature list (`m/E,b,e`) as a set: botocore joins
    a set, so its order is not even the same from one boto3 call to the next."""
    compared = dict(headers)
    compared["User-Agent"] = {
        frozenset(part[2:].split(",")) if part.startswith("m/") else part
        for part in compared["User-Agent"].decode().split(" ")
    }
    return compared


def sent(client: Any, caller: Any, call: Call, steps: list[Any]) -> Scripted:
    wire = Scripted(list(steps))
    client.meta.events.register("before-send.dynamodb", wire)
    try:
        getattr(caller, call.method)(**call.fresh())
    finally:
        client.meta.events.unregister("before-send.dynamodb", wire)
    return wire


@pytest.mark.parametrize("make_client", CLIENTS.values(), ids=CLIENTS.keys())
@pytest.mark.parametrize("call", CALLS, ids=[f"{c.shape}-{c.method}" for c in CALLS])
def test_each_request_goes_out_byte_for_byte_as_boto3_sends_it(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch, make_client: Any, call: Call
) -> None:
    requests = []
    for through_wire in (False, True):
        monkeypatch.setattr(uuid, "uuid4", counting_uuids())  # the same IDs on each path
        client = make_client()
        caller = FastWire(client) if through_wire else client
        assert not through_wire or caller.usable(call.method)
        requests.append(sent(client, caller, call, [answer()]).requests[0])
    boto3_sent, wire_sent = requests
    assert wire_sent.method == boto3_sent.method
    assert wire_sent.url == boto3_sent.url
    assert wire_sent.body == boto3_sent.body
    assert comparable(wire_sent.headers) == comparable(boto3_sent.headers)
    assert b"Signature=" in wire_sent.headers["Authorization"]
    assert wire_sent.headers["X-Amz-Date"] == b"20270115T080000Z"  # both signed at FROZEN


def test_the_fast_path_signs_with_the_signer_botocore_chose(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore's SigV4 signer (the CRT's when awscrt is installed, `make wire-awscrt`)
    signs each request of the fast path, as it signs the client's."""
    signer = botocore.auth.AUTH_TYPE_MAPS["v4"]
    signed_by: list[type] = []
    add_auth = signer.add_auth

    def spy(self: Any, request: Any) -> None:
        signed_by.append(type(self))
        add_auth(self, request)

    monkeypatch.setattr(signer, "add_auth", spy)
    client = our_client()
    caller = FastWire(client)
    for call in CALLS:
        for through in (client, caller):
            sent(client, through, call, [answer()])
    assert len(signed_by) == 2 * len(CALLS)
    assert all(issubclass(signer_class, signer) for signer_class in signed_by)
    assert (signer.__module__ == "botocore.crt.auth") == botocore.compat.HAS_CRT


def test_a_binary_value_goes_out_as_base64_and_comes_back_as_bytes() -> None:
    client = our_client()
    item = {"pk": {"S": "k"}, "blob": {"B": b"\x00\xff"}, "set": {"BS": [b"a", b"\x01"]}}
    body = b'{"Item": {"pk": {"S": "k"}, "blob": {"B": "AP8="}, "set": {"BS": ["YQ==", "AQ=="]}}}'
    script = sent(
        client,
        FastWire(client),
        Call("x", "put_item", {"TableName": "t", "Item": item}),
        [answer()],
    )
    assert b'"blob": {"B": "AP8="}' in script.requests[0].body
    script = Scripted([answer(body=body)])
    client.meta.events.register("before-send.dynamodb", script)
    got = FastWire(client).get_item(TableName="t", Key={"pk": {"S": "k"}})
    assert got["Item"]["blob"] == {"B": b"\x00\xff"}
    assert got["Item"]["set"] == {"BS": [b"a", b"\x01"]}


# -- answers and errors ---------------------------------------------------------------------

ITEM = b'{"pk": {"S": "k"}, "status": {"S": "IN_PROGRESS"}, "result": {"B": "AP8="}}'
ANSWERS = {
    "success with the old item": answer(
        body=b'{"Attributes": ' + ITEM + b', "ConsumedCapacity": {"CapacityUnits": 1}}'
    ),
    "a refused claim with the item": answer(
        400,
        b'{"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException", '
        b'"message": "The conditional request failed", "Item": ' + ITEM + b"}",
    ),
    "a cancelled transaction": error(
        "TransactionCanceledException",
        Message="Transaction cancelled, please refer cancellation reasons for specific reasons "
        "[ConditionalCheckFailed, None]",
        CancellationReasons=[
            {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
            {"Code": "None"},
        ],
    ),
    "a validation error": error("ValidationException", message="One or more parameter values"),
    "an unknown error code": error("SomethingNewException", status=400),
    "an internal error, once": error("InternalServerError", status=500),
}


@pytest.mark.parametrize("scripted", ANSWERS.values(), ids=ANSWERS.keys())
@pytest.mark.parametrize("call", CALLS[:3], ids=[c.shape for c in CALLS[:3]])
def test_each_answer_parses_and_raises_as_through_boto3(
    monkeypatch: pytest.MonkeyPatch, scripted: Any, call: Call
) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    through_client, through_wire = both_ways(our_client, [scripted, answer()], call)
    same_outcome(through_client, through_wire)


# -- retries --------------------------------------------------------------------------------

CONNECTION_ERROR = EndpointConnectionError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com/")
SCRIPTS = {
    "throttled twice": [error("ThrottlingException"), error("ThrottlingException"), answer()],
    "throttled throughout": [error("ProvisionedThroughputExceededException")],
    "500 then success": [error("InternalServerError", status=500), answer()],
    "503 throughout": [answer(503, b"")],
    "a dropped connection": [CONNECTION_ERROR, answer()],
    "a connect timeout throughout": [
        ConnectTimeoutError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com/")
    ],
    "a CRC32 mismatch": [answer(body=b'{"Attributes": {}}', crc=1), answer()],
    "CRC32 mismatches throughout": [answer(body=b"{}", crc=1)],
    "a transaction conflict": [error("TransactionConflictException"), answer()],
    "a refused condition is not retried": [error("ConditionalCheckFailedException")],
}
MODES = ["standard", "adaptive", "legacy"]


def fix_jitter(client: Any) -> Any:
    """Standard and adaptive modes draw their backoff jitter from a `random` bound when the
    client was made: fixed here, so both paths sleep the same."""
    for handler in client.meta.events._emitter._handlers.prefix_search("needs-retry.dynamodb"):
        policy = getattr(getattr(handler, "__self__", None), "_retry_policy", None)
        if policy is not None:
            policy._retry_backoff._random = lambda: 0.5
    return client


def retry_quota(client: Any) -> Any:
    for handler in client.meta.events._emitter._handlers.prefix_search("needs-retry.dynamodb"):
        checker = getattr(getattr(handler, "__self__", None), "_retry_quota", None)
        if checker is not None:
            return checker._quota.available_capacity
    return None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", SCRIPTS.values(), ids=SCRIPTS.keys())
def test_retries_sleeps_and_quota_are_botocores(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch, mode: str, steps: list[Any]
) -> None:
    call = CALLS[0]
    runs = []
    for through_wire in (False, True):
        sleeps: list[float] = []
        monkeypatch.setattr(time, "sleep", sleeps.append)
        client = fix_jitter(our_client(retries={"mode": mode, "total_max_attempts": 4}))
        caller = FastWire(client) if through_wire else client
        script = Scripted(list(steps))
        client.meta.events.register("before-send.dynamodb", script)
        try:
            outcome: Any = getattr(caller, call.method)(**call.fresh())
        except Exception as exc:
            outcome = exc
        runs.append((outcome, len(script.requests), sleeps, retry_quota(client), script))
    (boto3_outcome, boto3_attempts, boto3_sleeps, boto3_quota, boto3_script) = runs[0]
    (wire_outcome, wire_attempts, wire_sleeps, wire_quota, wire_script) = runs[1]
    same_outcome(boto3_outcome, wire_outcome)
    assert wire_attempts == boto3_attempts
    assert wire_sleeps == pytest.approx(boto3_sleeps, abs=0.01)
    assert wire_quota == boto3_quota
    retried = [r.headers["amz-sdk-request"] for r in wire_script.requests]
    assert retried == [r.headers["amz-sdk-request"] for r in boto3_script.requests]


def test_a_throttle_is_retried_and_counted_in_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    client = our_client()
    script = Scripted([error("ThrottlingException"), answer()])
    client.meta.events.register("before-send.dynamodb", script)
    got = FastWire(client).put_item(**CALLS[0].fresh())
    assert len(script.requests) == 2
    assert got["ResponseMetadata"]["RetryAttempts"] == 1


# -- endpoints ------------------------------------------------------------------------------

ENDPOINTS: dict[str, dict[str, Any]] = {
    "a custom endpoint_url": {"endpoint_url": "http://localhost:8123"},
    "FIPS": {"config": Config(use_fips_endpoint=True)},
    "dual-stack": {"config": Config(use_dualstack_endpoint=True)},
    "FIPS and dual-stack in GovCloud": {
        "region_name": "us-gov-west-1",
        "config": Config(use_fips_endpoint=True, use_dualstack_endpoint=True),
    },
    "China": {"region_name": "cn-north-1"},
    "another region": {"region_name": "ap-southeast-2"},
}
if "account_id_endpoint_mode" in Config.OPTION_DEFAULTS:
    ENDPOINTS["an account-based endpoint"] = {
        "aws_account_id": "123456789012",
        "config": Config(account_id_endpoint_mode="required"),
    }


@pytest.mark.parametrize("options", ENDPOINTS.values(), ids=ENDPOINTS.keys())
def test_the_endpoint_and_signing_scope_are_the_ones_the_client_resolved(
    fixed_ids: None, options: dict[str, Any]
) -> None:
    client = plain_client(**options)
    for call in (CALLS[0], CALLS[2], CALLS[6]):
        through_client = sent(client, client, call, [answer()]).requests[0]
        through_wire = sent(client, FastWire(client), call, [answer()]).requests[0]
        assert through_wire.url == through_client.url
        assert through_wire.headers["Authorization"] == through_client.headers["Authorization"]


def test_a_table_arn_reaches_the_endpoint_of_its_account(fixed_ids: None) -> None:
    if "account_id_endpoint_mode" not in Config.OPTION_DEFAULTS:
        return  # botocore without account-based endpoints: nothing to resolve differently
    client = plain_client(config=Config(account_id_endpoint_mode="preferred"))
    arn = "arn:aws:dynamodb:eu-west-1:111122223333:table/idempotency"
    call = Call("get", "get_item", {"TableName": arn, "Key": {"pk": {"S": "k"}}})
    through_client = sent(client, client, call, [answer()]).requests[0]
    through_wire = sent(client, FastWire(client), call, [answer()]).requests[0]
    assert through_wire.url == through_client.url
    assert "111122223333" in through_wire.url


# -- hooks and stepping aside ---------------------------------------------------------------


def test_the_hooks_tools_rely_on_fire_on_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    client = our_client()
    fired: list[str] = []
    for event in ("request-created", "before-send", "needs-retry", "after-call"):
        client.meta.events.register_last(
            f"{event}.dynamodb", lambda event_name, **_: fired.append(event_name.split(".")[0])
        )
    script = Scripted([error("ThrottlingException"), answer()])
    client.meta.events.register("before-send.dynamodb", script)
    wire = FastWire(client)
    assert wire.usable("put_item")
    wire.put_item(**CALLS[0].fresh())
    assert fired == [
        *("request-created", "before-send", "needs-retry"),
        *("request-created", "before-send", "needs-retry", "after-call"),
    ]


SKIPPED = [
    "provide-client-params",
    "before-parameter-build",
    "before-endpoint-resolution",
    "choose-signer",
    "before-sign",
    "before-parse",
    "response-received",
]


@pytest.mark.parametrize("event", SKIPPED)
def test_a_hook_on_an_event_the_fast_path_skips_sends_the_call_through_the_client(
    event: str,
) -> None:
    client = our_client()
    wire = FastWire(client)
    assert wire.usable("put_item")
    seen: list[str] = []
    client.meta.events.register(f"{event}.dynamodb", lambda **_: seen.append(event))
    assert not wire.usable("put_item")
    sent(client, client, CALLS[0], [answer()])
    through_client = list(seen)  # (older botocore has no before-parse)
    seen.clear()
    sent(client, wire, CALLS[0], [answer()])
    assert seen == through_client
    assert wire.usable("get_item") is False  # one verdict for the client, not per operation


def test_a_stubber_gets_every_call_and_hands_back_when_it_stops() -> None:
    client = our_client()
    store = DynamoDBStore("idempotency", client=client)
    stored = {"pk": {"S": "k"}, "status": {"S": "COMPLETED"}, "expiration": {"N": "1"}}
    with Stubber(client) as stubber:
        stubber.add_response("get_item", {"Item": stored})
        assert not FastWire(client).usable("get_item")
        record = store.get("k")
        stubber.assert_no_pending_responses()
    assert record is not None
    assert record.status.value == "COMPLETED"
    assert FastWire(client).usable("get_item")


def test_a_patched_make_api_call_sees_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    original = botocore.client.BaseClient._make_api_call
    seen: list[str] = []

    def traced(self: Any, operation_name: str, api_params: Any) -> Any:
        seen.append(operation_name)
        return original(self, operation_name, api_params)

    client = our_client()
    wire = FastWire(client)
    monkeypatch.setattr(botocore.client.BaseClient, "_make_api_call", traced)
    assert not wire.usable("put_item")
    sent(client, wire, CALLS[0], [answer()])
    assert seen == ["PutItem"]
    assert fast_wire(client) is client  # patched before the store's first call: no wire


@pytest.mark.parametrize(
    ("owner", "method"),
    [
        (botocore.client.BaseClient, "_make_api_call"),
        (botocore.endpoint.Endpoint, "prepare_request"),
    ],
)
def test_a_tracer_wrapping_botocore_like_xray_sees_every_call(
    monkeypatch: pytest.MonkeyPatch, owner: type, method: str
) -> None:
    """aws_xray_sdk's patch wraps both with wrapt (and cannot be undone in a test run)."""
    seen: list[str] = []

    def traced(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        seen.append(method)
        return wrapped(*args, **kwargs)

    client = our_client()
    wire = FastWire(client)
    monkeypatch.setattr(owner, method, wrapt.FunctionWrapper(owner.__dict__[method], traced))
    assert not wire.usable("put_item")
    sent(client, wire, CALLS[0], [answer()])
    assert seen == [method]
    assert not isinstance(fast_wire(our_client()), FastWire)  # wrapped before first use


def test_a_method_replaced_on_the_client_gets_the_call() -> None:
    client = our_client()
    wire = FastWire(client)
    client.get_item = lambda **_: {"Item": {"pk": {"S": "mocked"}}}
    assert wire.get_item(TableName="t", Key={"pk": {"S": "k"}}) == {"Item": {"pk": {"S": "mocked"}}}


def test_what_is_not_a_botocore_client_is_used_as_it_is() -> None:
    stand_in = object()
    assert fast_wire(stand_in) is stand_in


@pytest.mark.parametrize("layout", ["native", "powertools"])
def test_fast_wire_false_sends_every_call_through_the_client(
    layout: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In either layout (the Powertools layout's store once dropped `fast_wire=False`)."""
    client = our_client()
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)
    on = DynamoDBStore("idempotency", client=client, layout=layout)
    off = DynamoDBStore("idempotency", client=client, layout=layout, fast_wire=False)
    assert isinstance(on._caller(), FastWire)
    assert off._caller() is client
    monkeypatch.setenv("IDEMPOTENCY_FAST_WIRE", "0")
    assert DynamoDBStore("idempotency", client=client, layout=layout)._caller() is client


@pytest.mark.parametrize("value", ["0", "false", "False", "no", "NO"])
def test_idempotency_fast_wire_off_in_any_spelling_sends_calls_through_the_client(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    client = our_client()
    monkeypatch.setenv("IDEMPOTENCY_FAST_WIRE", value)
    assert DynamoDBStore("idempotency", client=client)._caller() is client


def test_the_lean_path_is_built_once_per_client_not_per_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Building it costs about a millisecond, several times a request on the lean path."""
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)
    store = DynamoDBStore("idempotency", client=our_client())
    first = store._caller()
    assert isinstance(first, FastWire)
    assert store._caller() is first
    assert store._caller() is first
    store._client = our_client()  # a new client gets a lean path of its own
    second = store._caller()
    assert isinstance(second, FastWire)
    assert second is not first
    assert second.client is store.client


def test_endpoint_discovery_sends_the_calls_through_the_client() -> None:
    client = plain_client(config=Config(endpoint_discovery_enabled=True))
    assert not FastWire(client).usable("put_item")
    assert FastWire(plain_client()).usable("put_item")


# -- every answer the store reads, parsed as botocore parses it -----------------------------

RICH_ITEM = {
    "pk": {"S": "k"},
    "status": {"S": "COMPLETED"},
    "expiration": {"N": "1800003600"},
    "lease_until": {"N": "-1.5e3"},
    "result": {"B": "AP8="},
    "chunks": {"BS": ["YQ==", "AQ=="]},
    "tags": {"SS": ["a", "b"]},
    "counts": {"NS": ["1", "0.25"]},
    "gone": {"NULL": True},
    "flag": {"BOOL": False},
    "nested": {
        "M": {
            "list": {"L": [{"S": "x"}, {"N": "2"}, {"M": {"deep": {"B": "AQ=="}}}, {"L": []}]},
            "empty": {"M": {}},
        }
    },
}
CAPACITY = {
    "TableName": "idempotency",
    "CapacityUnits": 1.5,
    "WriteCapacityUnits": 1.0,
    "Table": {"CapacityUnits": 1.5},
    "GlobalSecondaryIndexes": {"by-status": {"ReadCapacityUnits": 0.5}},
}
METRICS = {"ItemCollectionKey": {"pk": {"S": "k"}}, "SizeEstimateRangeGB": [0.0, 1.0]}
SHAPED_ANSWERS: dict[str, tuple[Call, dict[str, Any]]] = {
    "claim: the old item, capacity and metrics": (
        CALLS[0],
        {"Attributes": RICH_ITEM, "ConsumedCapacity": CAPACITY, "ItemCollectionMetrics": METRICS},
    ),
    "complete: capacity and metrics per table": (
        CALLS[2],
        {"ConsumedCapacity": [CAPACITY], "ItemCollectionMetrics": {"idempotency": [METRICS]}},
    ),
    "get: the item": (CALLS[4], {"Item": RICH_ITEM, "ConsumedCapacity": CAPACITY}),
    "get: no item": (CALLS[4], {}),
    "batch write: unprocessed writes": (
        CALLS[5],
        {
            "UnprocessedItems": {
                "idempotency": [
                    {"PutRequest": {"Item": RICH_ITEM}},
                    {"DeleteRequest": {"Key": {"pk": {"S": "k"}}}},
                ]
            },
            "ConsumedCapacity": [CAPACITY],
        },
    ),
    "batch get: items and unprocessed keys": (
        CALLS[6],
        {
            "Responses": {"idempotency": [RICH_ITEM, {"pk": {"S": "k#1"}}]},
            "UnprocessedKeys": {
                "idempotency": {
                    "Keys": [{"pk": {"S": "k#2"}}],
                    "ConsistentRead": True,
                    "ProjectionExpression": "#r",
                    "ExpressionAttributeNames": {"#r": "result"},
                }
            },
        },
    ),
    "a member this botocore does not know": (CALLS[4], {"Item": RICH_ITEM, "NewThing": [1]}),
    "a null in a list": (CALLS[4], {"Item": {"l": {"L": [None, {"S": "x"}]}}}),
    "a null attribute value": (CALLS[4], {"Item": {"a": None}}),
    "a value of a type newer than this botocore": (CALLS[4], {"Item": {"a": {"V": "1"}}}),
    "a value with two types": (CALLS[4], {"Item": {"a": {"S": "1", "N": "1"}}}),
    "a value whose one type is null": (CALLS[4], {"Item": {"a": {"S": None}, "b": {"S": "x"}}}),
    "a structure with one member it does not know": (
        CALLS[0],
        {"Attributes": {"a": {"S": "1"}}, "ConsumedCapacity": {"Novel": 1}},
    ),
    "an item that is not an object": (CALLS[4], {"Item": "k"}),
}


@pytest.mark.parametrize(("call", "body"), SHAPED_ANSWERS.values(), ids=SHAPED_ANSWERS.keys())
def test_each_answer_shape_parses_as_through_boto3(call: Call, body: dict[str, Any]) -> None:
    """Blobs as bytes, numbers as the strings DynamoDB sent, nested maps and lists, capacity
    as floats; and what a compiled parser does not know goes to botocore's, which decides."""
    scripted = answer(body=json.dumps(body).encode())
    through_client, through_wire = both_ways(our_client, [scripted], call)
    same_outcome(through_client, through_wire)


ERROR_BODIES = {
    "a 400 without a body": answer(400, b""),
    "a 500 without a body": answer(500, b""),
    "a 502 from a proxy, in HTML": answer(502, b"<html><body>Bad Gateway</body></html>"),
    "a 400 whose body is not JSON": answer(400, b"not json"),
    "a refused claim without the item": error("ConditionalCheckFailedException"),
    "a refused claim with a blob in the item": answer(
        400,
        b'{"__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException", '
        b'"Message": "refused", "Item": ' + json.dumps(RICH_ITEM).encode() + b"}",
    ),
    "a cancelled transaction with items": error(
        "TransactionCanceledException",
        CancellationReasons=[{"Code": "ConditionalCheckFailed", "Item": RICH_ITEM}, {}],
    ),
    "a code with a namespace and a colon": answer(
        400, b'{"__type": "aws.dynamodb#ResourceNotFoundException:http://x", "message": "m"}'
    ),
}


@pytest.mark.parametrize("scripted", ERROR_BODIES.values(), ids=ERROR_BODIES.keys())
@pytest.mark.parametrize("call", [CALLS[0], CALLS[2], CALLS[4]], ids=["claim", "complete", "get"])
def test_each_error_raises_as_through_boto3(
    monkeypatch: pytest.MonkeyPatch, call: Call, scripted: Any
) -> None:
    monkeypatch.setattr(time, "sleep", lambda _: None)
    through_client, through_wire = both_ways(our_client, [scripted, answer()], call)
    same_outcome(through_client, through_wire)


def test_an_error_body_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore decodes a refused claim's body twice: for its error code, then for the item."""
    decoded: list[str] = []
    loads = json.loads

    def counting(text: Any, **options: Any) -> Any:
        decoded.append(text)
        return loads(text, **options)

    refused = ANSWERS["a refused claim with the item"]
    counts = []
    for through_wire in (False, True):
        client = our_client()
        client.meta.events.register("before-send.dynamodb", Scripted([refused]))
        caller = FastWire(client) if through_wire else client
        monkeypatch.setattr(json, "loads", counting)
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):
            caller.put_item(**CALLS[0].fresh())
        monkeypatch.setattr(json, "loads", loads)
        counts.append(len(decoded))
        decoded.clear()
    assert counts == [2, 1]


# -- a botocore without the private parts the cheaper objects rely on -----------------------


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (botocore.awsrequest, "_HeaderKey"),
        (botocore.auth, "_host_from_url"),
        (botocore.auth, "SIGNED_HEADERS_BLACKLIST"),
    ],
)
def test_a_botocore_without_a_private_part_gets_no_cheaper_objects(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str
) -> None:
    with monkeypatch.context() as patched:
        patched.delattr(module, name)
        assert wire_parts() is None
    assert wire_parts() is not None


@pytest.mark.parametrize("call", CALLS, ids=[f"{c.shape}-{c.method}" for c in CALLS])
def test_without_the_cheaper_objects_the_requests_are_botocores_own(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch, call: Call
) -> None:
    monkeypatch.setattr(_wire_request, "wire_parts", lambda: None)
    requests = []
    for through_wire in (False, True):
        monkeypatch.setattr(uuid, "uuid4", counting_uuids())
        client = our_client()
        caller = FastWire(client) if through_wire else client
        requests.append(sent(client, caller, call, [answer()]).requests[0])
    assert requests[1].body == requests[0].body
    assert comparable(requests[1].headers) == comparable(requests[0].headers)


def test_a_parser_it_does_not_know_is_used_as_it_is() -> None:
    class Parser(botocore.parsers.JSONParser):  # type: ignore[misc]
        pass

    parser = Parser()
    assert compiled_parser(parser) is parser
    assert type(compiled_parser(botocore.parsers.JSONParser())) is not botocore.parsers.JSONParser


def test_a_request_hook_sees_botocores_header_behaviour(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request-created hook gets headers that behave as botocore's HTTPHeaders: a second
    value is added, not replaced; reads find the first; deletes remove every one."""
    seen: dict[str, Any] = {}

    def hook(request: Any, **_: Any) -> None:
        headers = request.headers
        headers["X-Extra"] = "one"
        headers["x-extra"] = "two"
        seen["first"] = headers["X-EXTRA"]
        seen["all"] = headers.get_all("X-Extra")
        seen["missing"] = headers["nope"]
        seen["in"] = ("x-extra" in headers, "nope" in headers)
        del headers["X-Extra"]
        seen["after"] = (headers.get("x-extra"), len(headers) == len(list(headers.keys())))
        headers.replace_header("Content-Type", "application/x-amz-json-1.0")

    outcomes = []
    for through_wire in (False, True):
        monkeypatch.setattr(uuid, "uuid4", counting_uuids())
        client = our_client()
        client.meta.events.register_first("request-created.dynamodb", hook)
        caller = FastWire(client) if through_wire else client
        assert not through_wire or caller.usable("get_item")
        request = sent(client, caller, CALLS[4], [answer()]).requests[0]
        outcomes.append((dict(seen), comparable(request.headers)))
    assert outcomes[1] == outcomes[0]
    assert outcomes[0][0]["all"] == ["one", "two"]


def test_a_send_hook_sees_botocores_prepared_headers(
    fixed_ids: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What moto, recorders and urllib3 do with a prepared request's headers (look up in any
    case, test, iterate, copy and change the copy) goes as with botocore's HeadersDict."""

    def uses(headers: Any) -> Any:
        copied = headers.copy()
        copied["x-amz-target"] = "changed"
        del copied["CONTENT-TYPE"]
        return (
            isinstance(headers, botocore.awsrequest.HeadersDict),
            headers.get("x-AMZ-target"),
            headers.get("nope", "default"),
            "content-length" in headers,
            "nope" in headers,
            list(headers),
            list(headers.items()),
            len(headers),
            sorted(copied.items()),
            headers["X-Amz-Target"],
        )

    seen = []
    for through_wire in (False, True):
        monkeypatch.setattr(uuid, "uuid4", counting_uuids())
        client = our_client()
        client.meta.events.register(
            "before-send.dynamodb", lambda request, **_: seen.append(uses(request.headers))
        )
        caller = FastWire(client) if through_wire else client
        sent(client, caller, CALLS[0], [answer()])
    assert seen[1] == seen[0]
