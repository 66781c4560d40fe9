"""The fast wire path never goes around what a client carries (issue 26).

Each botocore method the lean path does the work of instead of calling it, patched or wrapped
on the class or on the one object, gets the call as it would from the client; data the store
did not build (enlisted writes) is checked as the client checks parameters; and a hook
registered while the path checks the client's hooks is seen on the next call."""

from __future__ import annotations

import functools
from typing import Any
from unittest import mock

import boto3
import botocore.signers
import pytest
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters
from hypothesis import example, given
from hypothesis import strategies as st

from lambda_idempotency import DynamoDBStore, StoreError, current_execution, idempotent
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire.path import FastWire
from tests.wire_conformance import Scripted, answer

CREDENTIALS = {"aws_access_key_id": "AKIDEXAMPLE", "aws_secret_access_key": "secret"}
GET = {"TableName": "idempotency", "Key": {"pk": {"S": "k"}}}


def our_client() -> Any:
    return default_client(None, "eu-west-1")


def plain_client() -> Any:
    return boto3.client("dynamodb", region_name="eu-west-1", **CREDENTIALS)


def scripted(client: Any) -> Scripted:
    """Every request answered `{}` in before-send, and kept."""
    wire = Scripted([answer()])
    client.meta.events.register("before-send.dynamodb", wire)
    return wire


def targets(requests: list[Any]) -> list[str]:
    return [request.headers["X-Amz-Target"].decode().split(".")[1] for request in requests]


@pytest.fixture(autouse=True)
def fast_wire_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)


# -- methods patched on the one object -----------------------------------------------------

CLIENT_METHODS = [
    "_make_api_call",
    "_make_request",
    "_convert_to_request_dict",
    "_emit_api_params",
    "_resolve_endpoint_ruleset",
]
ENDPOINT_METHODS = [
    "make_request",
    "_send_request",
    "create_request",
    "prepare_request",
    "_get_response",
    "_do_get_response",
]


@pytest.mark.parametrize("name", CLIENT_METHODS)
def test_a_mock_on_the_client_object_sees_the_stores_call(name: str) -> None:
    """`mock.patch.object(client, "_make_api_call", ...)` on the instance, as tests do."""
    client = our_client()
    wire = scripted(client)
    store = DynamoDBStore("idempotency", client=client)
    store.get("k")  # the lean path built and in use
    with mock.patch.object(client, name, wraps=getattr(client, name)) as patched:
        store.get("k")
    assert patched.call_count == 1
    assert targets(wire.requests) == ["GetItem", "GetItem"]


@pytest.mark.parametrize("name", ENDPOINT_METHODS)
def test_a_wrapper_on_the_clients_endpoint_sees_the_stores_call(name: str) -> None:
    client = our_client()
    scripted(client)
    store = DynamoDBStore("idempotency", client=client)
    store.get("k")
    with mock.patch.object(client._endpoint, name, wraps=getattr(client._endpoint, name)) as seen:
        store.get("k")
    assert seen.call_count == 1


# -- the signer: a header a tool adds is signed and sent ------------------------------------


def adding_a_header(sign: Any) -> Any:
    @functools.wraps(sign)
    def traced(self: Any, operation_name: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        request.headers["X-Tool-Trace"] = "span-1"
        return sign(self, operation_name, request, *args, **kwargs)

    return traced


def signed_names(request: Any) -> list[str]:
    authorization = request.headers["Authorization"].decode()
    return authorization.split("SignedHeaders=")[1].split(",")[0].split(";")


def test_a_patched_signer_sign_signs_and_sends_its_header(monkeypatch: pytest.MonkeyPatch) -> None:
    client = our_client()
    wire = scripted(client)
    store = DynamoDBStore("idempotency", client=client)
    store.get("k")  # the lean path built and in use
    sign = botocore.signers.RequestSigner.sign
    monkeypatch.setattr(botocore.signers.RequestSigner, "sign", adding_a_header(sign))
    store.get("k")
    sent = wire.requests[-1]
    assert sent.headers["X-Tool-Trace"] == b"span-1"
    assert "x-tool-trace" in signed_names(sent)


def test_a_sign_replaced_on_the_signer_object_signs_and_sends_its_header() -> None:
    client = our_client()
    wire = scripted(client)
    store = DynamoDBStore("idempotency", client=client)
    signer = client._request_signer
    bound = adding_a_header(botocore.signers.RequestSigner.sign).__get__(signer)
    with mock.patch.object(signer, "sign", bound):
        store.get("k")
    assert wire.requests[-1].headers["X-Tool-Trace"] == b"span-1"
    assert "x-tool-trace" in signed_names(wire.requests[-1])


def test_a_signer_handler_wrapped_with_botocores_names_gets_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrapper made with functools.wraps carries botocore's module and name, not its code:
    registered by the client in the signer's place, it is what the client calls."""
    original = botocore.signers.RequestSigner.handler
    calls: list[str] = []

    @functools.wraps(original)
    def handler(self: Any, operation_name: Any = None, request: Any = None, **kwargs: Any) -> Any:
        calls.append(operation_name)
        request.headers["X-Tool-Trace"] = "span-2"
        return original(self, operation_name, request, **kwargs)

    monkeypatch.setattr(botocore.signers.RequestSigner, "handler", handler)
    client = our_client()  # created with the wrapper as its signing hook
    wire = scripted(client)
    DynamoDBStore("idempotency", client=client).get("k")
    assert calls == ["GetItem"]
    assert "x-tool-trace" in signed_names(wire.requests[-1])


# -- parameters the store did not build -----------------------------------------------------

CLIENTS = {"our default client": our_client, "a default boto3 client": plain_client}


@pytest.mark.parametrize("fast_wire", [True, False], ids=["fast path", "client path"])
@pytest.mark.parametrize("make_client", CLIENTS.values(), ids=CLIENTS.keys())
def test_an_enlisted_write_botocore_refuses_is_refused_and_nothing_is_written(
    make_client: Any, fast_wire: bool
) -> None:
    """{"SS": "vip"} is not a string set: sent, DynamoDB would store {"v", "i", "p"}."""
    client = make_client()
    wire = scripted(client)
    store = DynamoDBStore("idempotency", client=client, fast_wire=fast_wire)

    @idempotent(store=store, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        item = {"pk": {"S": "customer#1"}, "tags": {"SS": "vip"}}
        current_execution().add_write({"Put": {"TableName": "customers", "Item": item}})
        return "done"

    with pytest.raises(StoreError) as caught:
        handler({"id": 1}, None)
    assert caught.value.code == "InvalidRequest"
    assert (caught.value.retryable, caught.value.maybe_applied) == (False, False)
    assert isinstance(caught.value.__cause__, ParamValidationError)
    assert "TransactWriteItems" not in targets(wire.requests)  # refused before sending
    assert targets(wire.requests) == ["PutItem", "PutItem"]  # the claim, then its release


VALUES = st.one_of(
    st.text(max_size=3),
    st.integers(),
    st.binary(max_size=3),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=2), max_size=2),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["S", "N"]), st.text(max_size=2), max_size=1),
)
ATTRIBUTE_VALUES = st.dictionaries(
    st.sampled_from(["S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"]),
    VALUES,
    min_size=1,
    max_size=2,
)


def transaction(value: Any) -> dict[str, Any]:
    return {
        "TransactItems": [
            {"Put": {"TableName": "customers", "Item": {"pk": {"S": "c"}, "tags": value}}}
        ],
        "ClientRequestToken": "token",
    }


def outcome(caller: Any, client: Any, value: Any) -> Any:
    wire = scripted(client)
    params = transaction(value)
    try:
        caller.transact_write_items(**params)
    except ParamValidationError as exc:
        return ("refused", str(exc))
    except Exception as exc:  # botocore's serializer on what it was not checked for
        return ("failed", type(exc).__name__)
    finally:
        client.meta.events.unregister("before-send.dynamodb", wire)
    return ("sent", wire.requests[0].body)


@pytest.mark.parametrize("make_client", CLIENTS.values(), ids=CLIENTS.keys())
@given(value=ATTRIBUTE_VALUES)
@example(value={"SS": "vip"})
@example(value={"N": 5})
@example(value={"L": [{"S": "x"}]})
@example(value={"S": "ok"})
def test_an_enlisted_write_is_checked_on_the_fast_path_as_by_the_client(
    make_client: Any, value: Any
) -> None:
    """Both ways refuse the same values with the same report, or send the same bytes; and
    neither sends a value botocore's check refuses."""
    client = make_client()
    through_client = outcome(client, client, value)
    through_wire = outcome(FastWire(client), client, value)
    assert through_wire == through_client
    if through_wire[0] == "sent":
        shape = client.meta.service_model.operation_model("TransactWriteItems").input_shape
        validate_parameters(transaction(value), shape)


# -- a hook registered while the path looks at the client's hooks ---------------------------


def test_a_hook_registered_during_the_hook_check_is_honoured_on_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread (a Stubber, a tracer) registers a hook just as the check ends: the
    next call must see it, not a verdict kept for the hooks as they were."""
    client = our_client()
    scripted(client)
    wire = FastWire(client)
    seen: list[str] = []
    trie = client.meta.events._emitter._handlers
    search = trie.prefix_search
    registered: list[bool] = []

    def search_then_register(name: str) -> Any:
        found = search(name)
        if name == "request-created.dynamodb.BatchWriteItem" and not registered:
            registered.append(True)  # the check's last look, done: the other thread's turn
            client.meta.events.register(
                "before-call.dynamodb", lambda **_: seen.append("before-call")
            )
        return found

    monkeypatch.setattr(trie, "prefix_search", search_then_register)
    wire.get_item(**GET)  # checks the hooks; the hook lands meanwhile
    assert registered == [True]
    seen.clear()
    wire.get_item(**GET)
    assert seen == ["before-call"]


def test_a_client_with_its_own_request_signer_gets_the_call() -> None:
    client = our_client()
    scripted(client)
    wire = FastWire(client)
    assert wire.usable("get_item")
    replaced = mock.Mock(wraps=client._request_signer)
    client._request_signer = replaced
    assert not wire.usable("get_item")


# -- a tracer as users install it -----------------------------------------------------------


@pytest.mark.parametrize("first_call", ["before", "after"])
def test_opentelemetrys_botocore_instrumentation_gets_a_span_and_a_header_per_request(
    first_call: str,
) -> None:
    """BotocoreInstrumentor wraps `_make_api_call` (the span) and `prepare_request` (the trace
    header) on botocore's classes, whether the store already made its first call or not: each
    of the store's requests is in a span and carries that span's header (the lean path calls
    the wrappers itself: tests/integration/test_traced_paths.py). Uninstrumented, the path
    serves that client without them."""
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    client = our_client()
    wire = scripted(client)
    store = DynamoDBStore("idempotency", client=client)
    if first_call == "before":
        store.get("k")
        assert isinstance(store._caller(), FastWire)  # the lean path built and serving
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        store.get("k")
        store.claim("k", owner="o", payload_hash="h", now_ms=1, lease_until_ms=2, expiration_s=3)
    finally:
        instrumentor.uninstrument()
    traced = spans.get_finished_spans()
    assert [span.name for span in traced] == ["DynamoDB.GetItem", "DynamoDB.PutItem"]
    for span, request in zip(traced, wire.requests[-2:], strict=True):
        header = request.headers["X-Amzn-Trace-Id"].decode()
        assert f"Parent={span.context.span_id:016x}" in header
    caller = store._caller()
    if isinstance(caller, FastWire):
        assert caller.usable("get_item")  # the wrappers gone: the path again
