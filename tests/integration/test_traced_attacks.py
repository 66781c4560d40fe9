"""Attacks on issue 40's promises: under a tracer or a user's hook the fast wire path serves,
and the user sees what the client path (`fast_wire=False`) shows them, request for request;
what it cannot honour is handed to the client with one log line a process; the effect
happens once and nothing leaks from the path's self-check into the user's trace.

Each test asserts the promise. The nine defects this round found (each a strict xfail first)
are fixed; their tests are plain tests now.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import botocore
import botocore.client
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire import guard as wire_guard
from lambda_idempotency._stores.dynamodb.wire.lean import FastWire
from lambda_idempotency.testing import create_idempotency_table
from tests.conftest import FakeContext
from tests.integration.test_traced_paths import (
    _aws_subsegments,
    _invocation,
    _span_fields,
    _trace_fields,
    _xray_fields,
    xray_patched,
)

pytestmark = pytest.mark.dynamodb_local

REGION = "us-east-1"
PATHS = ("lean", "client")
_tables = (f"attack-{os.getpid()}-{n}" for n in itertools.count())
_keys = itertools.count()


@pytest.fixture
def table(dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    for name in (
        "IDEMPOTENCY_FAST_WIRE",
        "IDEMPOTENCY_FAST_WIRE_CHECK",
        "AWS_PROFILE",
        "AWS_LAMBDA_FUNCTION_NAME",
        "_X_AMZN_TRACE_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    name = next(_tables)
    create_idempotency_table(default_client(dynamodb_local_endpoint, REGION), name)
    return name


@pytest.fixture(autouse=True)
def botocore_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore's two traced methods put back as they were after each test, whatever order
    the tracers were undone in (OpenTelemetry's unwrap takes off the outermost wrapper)."""
    for cls, names in (
        (botocore.client.BaseClient, wire_guard.CLIENT_METHODS),
        (botocore.endpoint.Endpoint, wire_guard.ENDPOINT_METHODS),
    ):
        for name in names:
            monkeypatch.setattr(cls, name, cls.__dict__[name])


@pytest.fixture
def told(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Callable[[], list]:
    """The fast_wire_off lines logged from now on (the once-a-process memory cleared)."""
    monkeypatch.setattr(wire_guard, "_told", set())
    caplog.set_level(logging.DEBUG, logger="lambda_idempotency")

    def lines() -> list[dict[str, Any]]:
        found = []
        for record in caplog.records:
            if (
                record.name.startswith("lambda_idempotency")
                and "fast_wire_off" in record.getMessage()
            ):
                found.append({"level": record.levelname, **json.loads(record.getMessage())})
        return found

    return lines


class Side:
    """One store over its own client, on one path; counts the client's serializer (only the
    client's own `_make_api_call` calls it) and keeps the requests' headers sent."""

    def __init__(self, name: str, endpoint: str, table: str, *, build: bool = True, **config: Any):
        self.name = name
        if config:
            import boto3

            self.client = boto3.client(
                "dynamodb", endpoint_url=endpoint, region_name=REGION, config=Config(**config)
            )
        else:
            self.client = default_client(endpoint, REGION)
        table = f"{table}-{name}"
        create_idempotency_table(default_client(endpoint, REGION), table)
        self.table = table
        self.store = DynamoDBStore(table, client=self.client, fast_wire=name == "lean")
        self.sent: list[dict[str, str]] = []
        self.bodies: list[bytes] = []
        self.serialized = 0
        self.client.meta.events.register_first("before-send.dynamodb", self._sent)
        serializer = self.client._serializer
        original = serializer.serialize_to_request

        def counted(*args: Any, **kwargs: Any) -> Any:
            if "self-check" not in repr(args[0]):  # the self-check's twin shares it
                self.serialized += 1
            return original(*args, **kwargs)

        serializer.serialize_to_request = counted
        if build:
            self.build()

    def build(self) -> Any:
        before = self.serialized
        caller = self.store._caller()
        self.serialized = before  # the self-check's twin shares the serializer
        return caller

    @property
    def caller(self) -> Any:
        return self.store._caller()

    def _sent(self, request: Any, **_: Any) -> None:
        self.sent.append(
            {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        )
        self.bodies.append(bytes(request.body or b""))

    def served_lean(self) -> bool:
        return isinstance(self.store._caller(), FastWire) and self.serialized == 0

    def handler(self, body: Callable[[dict[str, Any]], Any] | None = None) -> Callable[..., Any]:
        self.runs = 0

        def run(event: dict[str, Any], context: Any) -> Any:
            self.runs += 1
            return {"ok": event["id"]} if body is None else body(event)

        return idempotent(store=self.store, key="id", cache_size=0)(run)

    def record(self) -> dict[str, Any] | None:
        """The records' statuses in this side's table (the client's scan, not counted)."""
        before = self.serialized
        items = self.client.scan(
            TableName=self.store.table_name,
        )["Items"]
        self.serialized = before
        self.sent.pop()
        self.bodies.pop()
        return {
            "count": len(items),
            "status": sorted(i.get("status", {}).get("S", "?") for i in items),
        }


def both(endpoint: str, table: str, **config: Any) -> dict[str, Side]:
    return {name: Side(name, endpoint, table, **config) for name in PATHS}


def key(side: Side) -> str:
    return f"{side.name}-{next(_keys)}"


class Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


def dynamodb_answer(status: int, body: dict[str, Any], request_id: str = "CANNED") -> AWSResponse:
    raw = json.dumps(body).encode()
    headers = {
        "x-amzn-RequestId": request_id,
        "Content-Type": "application/x-amz-json-1.0",
        "x-amz-crc32": str(zlib.crc32(raw)),
    }
    return AWSResponse("http://canned", status, headers, Raw(raw))


# =====================================================================================
# A user's hooks
# =====================================================================================


def _before_call_seen(sides: dict[str, Side]) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {}
    for name, side in sides.items():
        seen[name] = []

        def before(params: Any, context: Any, seen: list[Any] = seen[name], **_: Any) -> None:
            seen.append(dict(params["headers"]))

        side.client.meta.events.register("before-call.dynamodb", before)
    return seen


def test_a_before_call_hook_reads_the_user_agent_the_client_path_gives_it(
    table: str, dynamodb_local_endpoint: str
) -> None:
    sides = both(dynamodb_local_endpoint, table)
    seen = _before_call_seen(sides)
    for side in sides.values():
        assert side.store.get("absent") is None
    assert sides["lean"].served_lean()
    assert [h["User-Agent"] for h in seen["lean"]] == [h["User-Agent"] for h in seen["client"]]


def test_a_request_created_hook_run_first_reads_the_user_agent_the_client_path_gives_it(
    table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, list[str]] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():
        seen[name] = []
        side.client.meta.events.register_first(
            "request-created.dynamodb",
            lambda request, seen=seen[name], **_: seen.append(request.headers["User-Agent"]),
        )
        assert side.store.get("absent") is None
    assert sides["lean"].served_lean()
    as_str = {n: [v.decode() if isinstance(v, bytes) else v for v in s] for n, s in seen.items()}
    assert as_str["lean"] == as_str["client"]


def test_a_before_call_hook_is_given_the_same_context_values(
    table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, list[Any]] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():
        seen[name] = []

        def before(
            params: Any, context: Any, model: Any, seen: list = seen[name], **kw: Any
        ) -> None:
            seen.append(
                (
                    kw["event_name"],
                    model.name,
                    {k: v for k, v in context.items() if k != "client_config"},
                    context["client_config"] is side_config(context),
                    {k: v for k, v in params.items() if k not in ("context", "headers", "body")},
                )
            )

        side.client.meta.events.register("before-call.dynamodb", before)
        handler = side.handler()
        event = {"id": f"same-{name}"}
        assert handler(event, FakeContext()) == {"ok": event["id"]}
        assert handler(event, FakeContext()) == {"ok": event["id"]}
    assert sides["lean"].served_lean()
    assert seen["lean"] == seen["client"]


def side_config(context: dict[str, Any]) -> Any:
    return context["client_config"]


def test_a_before_call_hook_choosing_no_signature_is_honoured(
    table: str, dynamodb_local_endpoint: str
) -> None:
    sides = both(dynamodb_local_endpoint, table)
    for side in sides.values():

        def unsigned(context: Any, **_: Any) -> None:
            context["auth_type"] = "none"

        def answer(request: Any, **_: Any) -> AWSResponse:
            return dynamodb_answer(200, {})

        side.client.meta.events.register("before-call.dynamodb.GetItem", unsigned)
        side.client.meta.events.register("before-send.dynamodb", answer)
        side.caller.get_item(TableName=side.table, Key={"pk": {"S": "x"}})
    assert sides["lean"].served_lean()
    signed = {n: ["Authorization" in h for h in s.sent] for n, s in sides.items()}
    assert signed["lean"] == signed["client"] == [False]


def test_a_before_call_hook_changing_the_body_and_url_is_honoured(
    table: str, dynamodb_local_endpoint: str
) -> None:
    sides = both(dynamodb_local_endpoint, table)
    for side in sides.values():

        def change(params: Any, **_: Any) -> None:
            body = json.loads(params["body"])
            body["ConsistentRead"] = False
            params["body"] = json.dumps(body).encode()
            params["url"] = params["url"].rstrip("/") + "/"

        side.client.meta.events.register("before-call.dynamodb.GetItem", change)
        got = side.caller.get_item(
            TableName=side.table, Key={"pk": {"S": "x"}}, ConsistentRead=True
        )
        assert "Item" not in got  # signed over the changed body: DynamoDB Local accepted it
    assert sides["lean"].served_lean()
    bodies = {n: [b.replace(s.table.encode(), b"T") for b in s.bodies] for n, s in sides.items()}
    assert bodies["lean"] == bodies["client"]
    assert b'"ConsistentRead": false' in sides["lean"].bodies[0]


def test_a_before_call_hook_answering_short_circuits_as_botocore_does(
    table: str, dynamodb_local_endpoint: str
) -> None:
    outcome: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():
        after: list[Any] = []

        def answer(**_: Any) -> Any:
            http = dynamodb_answer(200, {})
            return http, {"Item": {"pk": {"S": "from-hook"}}, "ResponseMetadata": {"X": 1}}

        side.client.meta.events.register("before-call.dynamodb.GetItem", answer)
        side.client.meta.events.register(
            "after-call.dynamodb.GetItem", lambda parsed, after=after, **_: after.append(parsed)
        )
        got = side.caller.get_item(TableName=side.table, Key={"pk": {"S": "x"}})
        outcome[name] = (got, after, len(side.sent))
    assert sides["lean"].served_lean()
    assert outcome["lean"] == outcome["client"]
    assert outcome["lean"][2] == 0  # nothing sent


def test_a_before_call_hook_answering_a_refused_condition_is_read_as_the_client_reads_it(
    table: str, dynamodb_local_endpoint: str
) -> None:
    outcome: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():

        def answer(**_: Any) -> Any:
            error = {"Error": {"Code": "ConditionalCheckFailedException", "Message": "no"}}
            return dynamodb_answer(400, {}), {**error, "ResponseMetadata": {}}

        side.client.meta.events.register("before-call.dynamodb.PutItem", answer)
        with pytest.raises(Exception) as raised:
            side.caller.put_item(TableName=side.table, Item={"pk": {"S": "x"}})
        outcome[name] = (type(raised.value).__name__, str(raised.value), len(side.sent))
    assert sides["lean"].served_lean()
    assert outcome["lean"] == outcome["client"]


def test_a_before_call_hook_raising_runs_no_handler_and_locks_no_key(
    table: str, dynamodb_local_endpoint: str
) -> None:
    outcome: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():

        def boom(**_: Any) -> None:
            raise RuntimeError("hook failed")

        side.client.meta.events.register("before-call.dynamodb.PutItem", boom)
        handler = side.handler()
        with pytest.raises(Exception) as raised:
            handler({"id": key(side)}, FakeContext())
        outcome[name] = (type(raised.value).__name__, side.runs, len(side.sent))
        side.client.meta.events.unregister("before-call.dynamodb.PutItem", boom)
    assert sides["lean"].served_lean()
    assert outcome["lean"] == outcome["client"]
    assert outcome["lean"][1:] == (0, 0)


def test_an_after_call_hook_raising_on_the_first_write_does_as_the_client_path_does(
    table: str, dynamodb_local_endpoint: str
) -> None:
    outcome: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)
    for name, side in sides.items():
        failures = [1]

        def boom(failures: list[int] = failures, **_: Any) -> None:
            if failures:
                failures.pop()
                raise RuntimeError("after-call hook failed")

        side.client.meta.events.register("after-call.dynamodb.PutItem", boom)
        handler = side.handler()
        event = {"id": f"after-call-raises-{name}"}
        with pytest.raises(Exception) as raised:
            handler(event, FakeContext())
        first = (type(raised.value).__name__, side.runs)
        try:
            second = handler(event, FakeContext())
        except Exception as exc:
            second = type(exc).__name__
        outcome[name] = (first, second, side.runs, side.record())
    assert sides["lean"].served_lean()
    assert outcome["lean"] == outcome["client"], outcome
    # both: the claim landed, then the hook raised; the key stays held until its lease ends
    assert outcome["lean"][1] == "InProgressError"


def test_a_before_call_hook_registered_after_the_first_call_is_called_and_the_path_serves(
    table: str, dynamodb_local_endpoint: str
) -> None:
    side = Side("lean", dynamodb_local_endpoint, table)
    assert side.store.get("absent") is None
    calls: list[str] = []
    hook = lambda model, **_: calls.append(model.name)  # noqa: E731
    side.client.meta.events.register("before-call.dynamodb", hook)
    handler = side.handler()
    handler({"id": "late-hook"}, FakeContext())
    assert calls == ["PutItem", "PutItem"]
    side.client.meta.events.unregister("before-call.dynamodb", hook)
    handler({"id": "late-hook-2"}, FakeContext())
    assert calls == ["PutItem", "PutItem"]
    assert side.served_lean()


def test_after_call_error_hooks_see_the_same_exception_on_a_connection_error(
    dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    monkeypatch.delenv("IDEMPOTENCY_FAST_WIRE", raising=False)  # CI's boto3-path run sets it
    seen: dict[str, Any] = {}
    for name in PATHS:
        side = Side(name, dynamodb_local_endpoint, "t")
        errors: list[str] = []
        side.client.meta.events.register(
            "after-call-error.dynamodb",
            lambda exception, context, errors=errors, **_: errors.append(
                (type(exception).__name__, sorted(context))
            ),
        )

        def refuse(request: Any, **_: Any) -> None:
            raise botocore.exceptions.EndpointConnectionError(endpoint_url=request.url)

        side.client.meta.events.register("before-send.dynamodb", refuse)
        with pytest.raises(botocore.exceptions.EndpointConnectionError):
            side.caller.get_item(TableName="t", Key={"pk": {"S": "x"}})
        seen[name] = (errors, len(side.sent))
        if name == "lean":
            assert side.served_lean()
    assert seen["lean"] == seen["client"]


# =====================================================================================
# Tracers: what they record, the self-check kept out of it, the path serving
# =====================================================================================


@contextlib.contextmanager
def otel(**options: Any) -> Iterator[tuple[Any, Any]]:
    """OpenTelemetry's botocore instrumentation, spans kept in memory; undone afterwards."""
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentor = BotocoreInstrumentor()
    default_propagator = getattr(instrumentor, "propagator", None)
    instrumentor.instrument(tracer_provider=provider, **options)
    try:
        yield spans, provider.get_tracer("test")
    finally:
        instrumentor.uninstrument()
        # the instrumentor is one object a process: another propagator would outlive the test
        instrumentor.propagator = default_propagator


def first_run_replay_and_read(side: Side) -> None:
    handler = side.handler()
    event = {"id": "order-1"}
    assert handler(event, FakeContext()) == {"ok": "order-1"}
    assert handler(event, FakeContext()) == {"ok": "order-1"}
    assert side.store.get("absent") is None


def _anonymous(value: Any, side: Side) -> Any:
    return json.loads(json.dumps(value, default=repr).replace(side.table, "<table>"))


def _client_spans(spans: Any) -> list[Any]:
    from opentelemetry.trace import SpanKind

    return [s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT]


def test_the_self_check_records_no_span_and_calls_no_hook_under_opentelemetry(
    table: str, dynamodb_local_endpoint: str
) -> None:
    hooked: list[str] = []
    with otel(
        request_hook=lambda span, service, operation, params: hooked.append(operation),
        response_hook=lambda span, service, operation, result: hooked.append(operation),
    ) as (spans, tracer):
        with tracer.start_as_current_span("handler"):
            side = Side("lean", dynamodb_local_endpoint, table, build=False)
            events = side.client.meta.events
            events.register("before-call.dynamodb", lambda **_: hooked.append("before-call"))
            events.register("after-call.dynamodb", lambda **_: hooked.append("after-call"))
            spans.clear()
            hooked.clear()
            side.build()
            assert isinstance(side.caller, FastWire)
            assert spans.get_finished_spans() == ()
            assert hooked == []
            first_run_replay_and_read(side)
        assert side.served_lean()
        assert len(_client_spans(spans)) == 4  # PutItem, PutItem, GetItem... and GetItem
        assert hooked.count("before-call") == 4


def test_the_self_check_records_no_subsegment_under_xray(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with xray_patched(monkeypatch) as sent:
        _invocation(monkeypatch, 9001, sampled=True)
        side = Side("lean", dynamodb_local_endpoint, table, build=False)
        sent.documents.clear()
        side.build()
        assert isinstance(side.caller, FastWire)
        assert _aws_subsegments(sent.documents) == []
        first_run_replay_and_read(side)
        assert side.served_lean()
        assert len(_aws_subsegments(sent.documents)) == 4


def test_the_self_check_of_an_unsigned_client_records_no_span(
    table: str, dynamodb_local_endpoint: str
) -> None:
    with otel() as (spans, tracer):
        with tracer.start_as_current_span("handler"):
            side = Side(
                "lean",
                dynamodb_local_endpoint,
                table,
                build=False,
                signature_version=botocore.UNSIGNED,
            )
            spans.clear()
            side.build()
        assert [s.name for s in _client_spans(spans)] == []


def test_a_call_handed_to_the_client_mid_call_is_traced_once(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IDEMPOTENCY_FAST_WIRE_CHECK", "0")
    with otel() as (spans, _tracer):
        side = Side("lean", dynamodb_local_endpoint, table, signature_version=botocore.UNSIGNED)
        side.client.meta.events.register(
            "before-send.dynamodb", lambda **_: dynamodb_answer(200, {})
        )
        spans.clear()
        side.caller.get_item(TableName=side.table, Key={"pk": {"S": "x"}})
        assert [s.name for s in _client_spans(spans)] == ["DynamoDB.GetItem"]


def _compare_under(
    tracing: Callable[[], Any],
    scenario: Callable[[Side], None],
    endpoint: str,
    table: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    xray: Any = None,
    spans: Any = None,
    tracer: Any = None,
) -> dict[str, Any]:
    """The scenario on both paths under the tracers set up; what each recorded, anonymised."""
    seen: dict[str, Any] = {}
    invocation = next(_keys) + 5000
    for name in PATHS:
        side = Side(name, endpoint, table)
        if xray is not None:
            _invocation(monkeypatch, invocation, sampled=True)
            xray.documents.clear()
        if spans is not None:
            spans.clear()
        context = tracer.start_as_current_span("handler") if tracer else contextlib.nullcontext()
        with context:
            scenario(side)
        if name == "lean":
            assert side.served_lean(), "the lean path stepped aside"
        record: dict[str, Any] = {"requests": len(side.sent)}
        record["headers"] = [
            {
                k: v
                for k, v in _trace_fields(h.get("X-Amzn-Trace-Id", "")).items()
                if k != "Parent" and (k != "Root" or xray is not None)
            }
            for h in side.sent
        ]
        if xray is not None:
            subsegments = _aws_subsegments(xray.documents)
            ids = {s["id"] for s in subsegments}
            record["subsegments"] = [_xray_fields(s, iter(())) for s in subsegments]
        if spans is not None:
            finished = _client_spans(spans)
            record["spans"] = [_span_fields(s) for s in finished]
            span_ids = {f"{s.context.span_id:016x}" for s in finished}
        parents = [_trace_fields(h.get("X-Amzn-Trace-Id", "")).get("Parent") for h in side.sent]
        if xray is not None:
            record["header parents are subsegments"] = [p in ids for p in parents]
        elif spans is not None:
            record["header parents are spans"] = [p in span_ids for p in parents]
        seen[name] = _anonymous(record, side)
    return seen


def test_opentelemetry_header_parent_is_each_requests_span(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otel() as (spans, tracer):
        seen = _compare_under(
            otel,
            first_run_replay_and_read,
            dynamodb_local_endpoint,
            table,
            monkeypatch,
            spans=spans,
            tracer=tracer,
        )
    assert seen["lean"] == seen["client"]
    assert all(seen["lean"]["header parents are spans"])


def test_xray_patched_after_the_stores_first_call_is_served_and_records_the_same(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sides = both(dynamodb_local_endpoint, table)
    for side in sides.values():
        assert side.store.get("absent") is None  # before any tracer
    seen: dict[str, Any] = {}
    with xray_patched(monkeypatch) as sent:
        for name, side in sides.items():
            _invocation(monkeypatch, 9100, sampled=True)
            sent.documents.clear()
            first_run_replay_and_read(side)
            seen[name] = _anonymous(
                [_xray_fields(s, iter(())) for s in _aws_subsegments(sent.documents)], side
            )
    assert sides["lean"].served_lean()
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]) == 4


def test_xray_unpatched_after_calls_under_it_leaves_the_path_serving_untraced(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with xray_patched(monkeypatch) as sent:
        _invocation(monkeypatch, 9200, sampled=True)
        side = Side("lean", dynamodb_local_endpoint, table)
        sent.documents.clear()
        first_run_replay_and_read(side)
        assert len(_aws_subsegments(sent.documents)) == 4
        patched = botocore.client.BaseClient.__dict__["_make_api_call"]
        for cls, name in (
            (botocore.client.BaseClient, "_make_api_call"),
            (botocore.endpoint.Endpoint, "prepare_request"),
        ):  # X-Ray's patch undone as xray_patched undoes it at the test's end
            setattr(cls, name, cls.__dict__[name].__wrapped__)
    assert patched is not botocore.client.BaseClient.__dict__["_make_api_call"]
    sent.documents.clear()
    handler = side.handler()
    assert handler({"id": "after-unpatch"}, FakeContext()) == {"ok": "after-unpatch"}
    assert sent.documents == []
    assert side.served_lean()


def test_xray_and_opentelemetry_at_once_record_the_same_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with xray_patched(monkeypatch) as sent, otel() as (spans, tracer):
        seen = _compare_under(
            otel,
            first_run_replay_and_read,
            dynamodb_local_endpoint,
            table,
            monkeypatch,
            xray=sent,
            spans=spans,
            tracer=tracer,
        )
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]["subsegments"]) == len(seen["lean"]["spans"]) == 4


def test_opentelemetry_then_xray_at_once_record_the_same_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with otel() as (spans, tracer), xray_patched(monkeypatch) as sent:
        seen = _compare_under(
            otel,
            first_run_replay_and_read,
            dynamodb_local_endpoint,
            table,
            monkeypatch,
            xray=sent,
            spans=spans,
            tracer=tracer,
        )
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]["subsegments"]) == len(seen["lean"]["spans"]) == 4


def test_opentelemetry_request_and_response_hooks_are_called_with_the_same(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    with otel(
        request_hook=lambda span, service, operation, params: calls.append(
            ("request", service, operation, sorted(params))
        ),
        response_hook=lambda span, service, operation, result: calls.append(
            ("response", service, operation, sorted(result or {}))
        ),
    ) as (_spans, _tracer):
        seen = {}
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            calls.clear()
            first_run_replay_and_read(side)
            seen[name] = list(calls)
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]) == 8


def test_opentelemetry_suppressed_records_nothing_on_either_path_and_the_path_serves(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.instrumentation.utils import suppress_instrumentation

    def suppressed(side: Side) -> None:
        with suppress_instrumentation():
            first_run_replay_and_read(side)

    with otel() as (spans, tracer):
        seen = _compare_under(
            otel,
            suppressed,
            dynamodb_local_endpoint,
            table,
            monkeypatch,
            spans=spans,
            tracer=tracer,
        )
    assert seen["lean"] == seen["client"]
    assert seen["lean"]["spans"] == []


# =====================================================================================
# What the path cannot honour: the client makes the call, one line a process says so
# =====================================================================================


def _seen_by(counter: list[str]) -> Callable[..., Any]:
    def someone_elses_wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        counter.append(args[0] if args and isinstance(args[0], str) else type(args[0]).__name__)
        return wrapped(*args, **kwargs)

    return someone_elses_wrapper


def _steps_aside_and_tells_once(
    side: Side, seen: list[str], told: Callable[[], list], naming: str
) -> None:
    assert side.store.get("absent") is None
    assert side.store.get("absent") is None
    assert seen, "the patch did not see the calls"
    assert side.serialized > 0, "the client did not make the calls"
    lines = told()
    assert len(lines) == 1, lines
    assert lines[0]["level"] == "INFO"
    assert naming in lines[0]["reason"], lines[0]


def test_an_unknown_wrapt_wrapper_on_make_api_call_makes_the_client_call_told_once(
    table: str, dynamodb_local_endpoint: str, told: Callable[[], list]
) -> None:
    import wrapt

    seen: list[str] = []
    wrapt.wrap_function_wrapper(botocore.client.BaseClient, "_make_api_call", _seen_by(seen))
    side = Side("lean", dynamodb_local_endpoint, table)
    seen.clear()
    _steps_aside_and_tells_once(side, seen, told, "someone_elses_wrapper")
    Side("lean", dynamodb_local_endpoint, table + "-2").store.get("absent")
    assert len(told()) == 1  # once a process


def test_a_functools_wraps_patch_on_prepare_request_makes_the_client_call_told_once(
    table: str,
    dynamodb_local_endpoint: str,
    told: Callable[[], list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import functools

    seen: list[str] = []
    original = botocore.endpoint.Endpoint.prepare_request

    @functools.wraps(original)
    def adds_a_header(self: Any, request: Any) -> Any:
        seen.append("prepare_request")
        request.headers["x-tenant"] = "t"
        return original(self, request)

    monkeypatch.setattr(botocore.endpoint.Endpoint, "prepare_request", adds_a_header)
    side = Side("lean", dynamodb_local_endpoint, table)
    seen.clear()
    # the line names the patch (its code), not the botocore method whose names it copied
    _steps_aside_and_tells_once(side, seen, told, "adds_a_header")


def test_an_unknown_wrapper_installed_after_the_first_call_makes_the_client_call_told_once(
    table: str, dynamodb_local_endpoint: str, told: Callable[[], list]
) -> None:
    import wrapt

    side = Side("lean", dynamodb_local_endpoint, table)
    assert side.store.get("absent") is None
    assert side.served_lean()
    seen: list[str] = []
    wrapt.wrap_function_wrapper(botocore.endpoint.Endpoint, "_send", _seen_by(seen))
    _steps_aside_and_tells_once(side, seen, told, "someone_elses_wrapper")


def test_an_unknown_wrapper_removed_lets_the_path_serve_again(
    table: str,
    dynamodb_local_endpoint: str,
    told: Callable[[], list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wrapt

    side = Side("lean", dynamodb_local_endpoint, table)
    original = botocore.endpoint.Endpoint.__dict__["_send"]
    seen: list[str] = []
    wrapt.wrap_function_wrapper(botocore.endpoint.Endpoint, "_send", _seen_by(seen))
    try:
        assert side.store.get("absent") is None
        assert seen
    finally:
        botocore.endpoint.Endpoint._send = original
    side.serialized = 0
    assert side.store.get("absent") is None
    assert side.served_lean()


def test_an_unknown_wrapper_on_top_of_xray_makes_the_client_call_xray_sees_it_told_once(
    table: str,
    dynamodb_local_endpoint: str,
    told: Callable[[], list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import wrapt

    with xray_patched(monkeypatch) as sent:
        _invocation(monkeypatch, 9300, sampled=True)
        seen: list[str] = []
        wrapt.wrap_function_wrapper(botocore.client.BaseClient, "_make_api_call", _seen_by(seen))
        side = Side("lean", dynamodb_local_endpoint, table)
        seen.clear()
        sent.documents.clear()
        _steps_aside_and_tells_once(side, seen, told, "someone_elses_wrapper")
        assert len(_aws_subsegments(sent.documents)) == 2  # X-Ray saw the client's calls


def test_a_patch_on_the_one_client_makes_the_client_call_told_once(
    table: str, dynamodb_local_endpoint: str, told: Callable[[], list]
) -> None:
    side = Side("lean", dynamodb_local_endpoint, table)
    seen: list[str] = []
    original = side.client._make_api_call

    def spy(operation: str, params: Any) -> Any:
        seen.append(operation)
        return original(operation, params)

    with mock.patch.object(side.client, "_make_api_call", spy):
        _steps_aside_and_tells_once(side, seen, told, "_make_api_call")


def test_a_hook_on_an_event_the_path_skips_makes_the_client_call_told_once(
    table: str, dynamodb_local_endpoint: str, told: Callable[[], list]
) -> None:
    side = Side("lean", dynamodb_local_endpoint, table)
    seen: list[str] = []

    def before_sign(**_: Any) -> None:
        seen.append("before-sign")

    side.client.meta.events.register("before-sign.dynamodb", before_sign)
    _steps_aside_and_tells_once(side, seen, told, "before_sign")


def test_xray_and_opentelemetry_log_no_fast_wire_off_line(
    table: str,
    dynamodb_local_endpoint: str,
    told: Callable[[], list],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with xray_patched(monkeypatch), otel():
        _invocation(monkeypatch, 9400, sampled=True)
        side = Side("lean", dynamodb_local_endpoint, table)
        first_run_replay_and_read(side)
        assert side.served_lean()
    assert told() == []


# =====================================================================================
# X-Ray without an open segment, Powertools' Tracer
# =====================================================================================


xray = xray_patched
"""X-Ray's recorder with a keeping emitter, botocore patched by it (or by whoever the test has
patch it when `modules` is None); all of it undone afterwards."""


def _outcome_of(side: Side, event_id: str) -> tuple[Any, ...]:
    handler = side.handler()
    results = []
    for _ in range(2):
        try:
            results.append(handler({"id": event_id}, FakeContext()))
        except Exception as exc:
            results.append(type(exc).__name__)
    try:
        record = side.record()
    except Exception as exc:
        record = type(exc).__name__
    return (results, side.runs, record)


@pytest.mark.parametrize("context_missing", ["LOG_ERROR", "IGNORE_ERROR"])
def test_xray_outside_lambda_with_no_segment_runs_once_and_keeps_the_result(
    context_missing: str,
    table: str,
    dynamodb_local_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: dict[str, Any] = {}
    with xray(monkeypatch, in_lambda=False, context_missing=context_missing) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            caplog.clear()
            outcome = _outcome_of(side, "no-segment")
            xray_errors = [
                r.getMessage()[:60] for r in caplog.records if r.name.startswith("aws_xray_sdk")
            ]
            seen[name] = (outcome, len(side.sent), xray_errors)
            if name == "lean":
                assert side.served_lean()
        assert sent.documents == []
    assert seen["lean"] == seen["client"]
    assert seen["lean"][0][1] == 1  # the handler ran once
    assert seen["lean"][0][0] == [{"ok": "no-segment"}] * 2


def test_xray_runtime_error_with_no_segment_runs_no_handler_and_locks_no_key(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)  # tables made before X-Ray refuses calls
    with xray(monkeypatch, in_lambda=False, context_missing="RUNTIME_ERROR"):
        for name, side in sides.items():
            seen[name] = (_outcome_of(side, "runtime-error"), len(side.sent))
            if name == "lean":
                assert isinstance(side.caller, FastWire)
                assert side.serialized == 0
    assert seen["lean"] == seen["client"]
    assert seen["lean"][0][1] == 0  # no handler ran
    for side in sides.values():
        assert side.record()["count"] == 0  # nothing written, nothing locked


def test_xray_in_lambda_with_no_trace_header_does_as_the_client_path_does(
    table: str,
    dynamodb_local_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        monkeypatch.delenv("_X_AMZN_TRACE_ID", raising=False)
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            sent.documents.clear()
            caplog.clear()
            outcome = _outcome_of(side, "no-header")
            seen[name] = (
                outcome[0:2],
                len(side.sent),
                [_xray_fields(s, iter(())) for s in _aws_subsegments(sent.documents)],
                sorted(
                    {
                        _trace_fields(h.get("X-Amzn-Trace-Id", "")).get("Sampled", "-")
                        for h in side.sent
                    }
                ),
            )
            if name == "lean":
                assert side.served_lean()
    seen = {n: json.loads(json.dumps(v).replace(f"-{n}", "-<path>")) for n, v in seen.items()}
    assert seen["lean"] == seen["client"]


def test_xray_sdk_disabled_does_as_the_client_path_does(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_xray_sdk import global_sdk_config

    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        global_sdk_config.set_sdk_enabled(False)
        _invocation(monkeypatch, 9500, sampled=True)
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            sent.documents.clear()
            outcome = _outcome_of(side, "disabled")
            headers = [_trace_fields(h.get("X-Amzn-Trace-Id", "")) for h in side.sent]
            seen[name] = (
                outcome[1],
                len(side.sent),
                len(sent.documents),
                [sorted(h) for h in headers],
            )
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_powertools_tracer_is_served_and_records_what_the_client_path_records(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_lambda_powertools import Tracer

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    monkeypatch.setattr(Tracer, "_config", dict(Tracer._default_config))
    seen: dict[str, Any] = {}
    with xray(monkeypatch, modules=None) as sent:
        tracer = Tracer(service="orders", patch_modules=("botocore", "httplib"))
        assert not tracer.disabled
        assert hasattr(botocore.client.BaseClient.__dict__["_make_api_call"], "_self_wrapper")
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9600, sampled=True)
            sent.documents.clear()
            runs: list[str] = []

            @tracer.capture_lambda_handler
            @idempotent(store=side.store, key="id", cache_size=0)
            def handler(event: dict[str, Any], context: Any, runs: list[str] = runs) -> Any:
                runs.append(event["id"])
                return {"ok": event["id"]}

            assert handler({"id": "pt-1"}, FakeContext()) == {"ok": "pt-1"}
            assert handler({"id": "pt-1"}, FakeContext()) == {"ok": "pt-1"}
            subsegments = _aws_subsegments(sent.documents)
            ids = {s["id"] for s in subsegments}
            parents = [_trace_fields(h.get("X-Amzn-Trace-Id", "")).get("Parent") for h in side.sent]
            seen[name] = _anonymous(
                {
                    "runs": runs,
                    "subsegments": [_xray_fields(s, iter(())) for s in subsegments],
                    "parents are subsegments": [p in ids for p in parents],
                },
                side,
            )
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]["subsegments"]) == 3
    assert all(seen["lean"]["parents are subsegments"])


# =====================================================================================
# The whole X-Ray tree (httplib's subsegments too), errors before sending, propagators
# =====================================================================================


def _tree(documents: list[dict[str, Any]]) -> list[Any]:
    """Every subsegment sent: its name, namespace, its parent's name, the flags, the http
    block less times: the shape of the trace."""
    by_id: dict[str, dict[str, Any]] = {}

    def walk(entity: dict[str, Any], parent: str | None) -> None:
        by_id[entity["id"]] = entity
        entity.setdefault("_parent_name", parent)
        for child in entity.get("subsegments", ()):
            walk(child, entity.get("name"))

    for document in documents:
        walk(document, None)
    shape = []
    for document in documents:
        if document.get("type") != "subsegment":
            continue
        parent = by_id.get(document.get("parent_id", ""), {}).get("name")
        shape.append(
            (
                document.get("name"),
                document.get("namespace"),
                parent,
                bool(document.get("error")),
                bool(document.get("fault")),
                bool(document.get("throttle")),
                document.get("http", {}).get("request", {}).get("method"),
                document.get("http", {}).get("response", {}).get("status"),
            )
        )
    return shape


def test_xray_with_httplib_records_the_same_tree_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9700, sampled=True)
            sent.documents.clear()
            first_run_replay_and_read(side)
            seen[name] = _tree(sent.documents)
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]) >= 4  # (urllib3 2 sends without http.client's _send_request)


def test_a_refused_enlisted_write_is_recorded_as_the_client_path_records_it(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambda_idempotency import current_execution

    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9800, sampled=True)
            sent.documents.clear()

            def enlists(event: dict[str, Any], side: Side = side) -> Any:
                current_execution().add_write(
                    {"Put": {"TableName": side.table, "Item": {"pk": {"SS": "vip"}}}}
                )
                return {"ok": 1}

            handler = side.handler(enlists)
            try:
                outcome: Any = handler({"id": "enlisted"}, FakeContext())
            except Exception as exc:
                outcome = (type(exc).__name__, type(exc.__cause__).__name__)
            seen[name] = _anonymous(
                (
                    outcome,
                    side.runs,
                    [_xray_fields(s, iter(())) for s in _aws_subsegments(sent.documents)],
                ),
                side,
            )
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_opentelemetry_with_another_propagator_puts_the_same_headers_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    seen: dict[str, Any] = {}
    with otel(propagator=TraceContextTextMapPropagator()) as (spans, tracer):
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            spans.clear()
            with tracer.start_as_current_span("handler"):
                first_run_replay_and_read(side)
            finished = _client_spans(spans)
            ids = [f"{s.context.span_id:016x}" for s in finished]
            parents = [h.get("traceparent", "--").split("-")[2] for h in side.sent]
            seen[name] = (sorted({k for h in side.sent for k in h}), parents == ids)
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert seen["lean"][1]


def test_in_lambda_the_recursion_header_and_opentelemetry_agree_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    _invocation(monkeypatch, 9900, sampled=True)
    seen: dict[str, Any] = {}
    with otel() as (_spans, tracer):
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            with tracer.start_as_current_span("handler"):
                first_run_replay_and_read(side)
            seen[name] = [h.get("X-Amzn-Trace-Id") for h in side.sent]
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_a_hook_on_every_services_before_call_is_called_by_the_lean_path(
    table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, list[str]] = {}
    for name in PATHS:
        side = Side(name, dynamodb_local_endpoint, table)
        seen[name] = []
        side.client.meta.events.register(
            "before-call", lambda model, seen=seen[name], **_: seen.append(model.name)
        )
        first_run_replay_and_read(side)
        if name == "lean":
            assert side.served_lean()
    assert seen["lean"] == seen["client"] and seen["lean"]


# =====================================================================================
# A tracer's own exception
# =====================================================================================


def test_an_opentelemetry_response_hook_raising_after_the_claim_does_as_the_client_path(
    table: str, dynamodb_local_endpoint: str
) -> None:
    failures: list[int] = []

    def response_hook(span: Any, service: str, operation: str, result: Any) -> None:
        if failures:
            failures.pop()
            raise RuntimeError("the tracer's hook failed")

    seen: dict[str, Any] = {}
    with otel(response_hook=response_hook):
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            failures.append(1)
            seen[name] = _outcome_of(side, "hook-raises")
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_an_opentelemetry_request_hook_raising_sends_nothing_and_runs_no_handler(
    table: str, dynamodb_local_endpoint: str
) -> None:
    def request_hook(span: Any, service: str, operation: str, params: Any) -> None:
        raise RuntimeError("the tracer's hook failed")

    seen: dict[str, Any] = {}
    sides = both(dynamodb_local_endpoint, table)
    with otel(request_hook=request_hook):
        for name, side in sides.items():
            handler = side.handler()
            with pytest.raises(Exception) as raised:
                handler({"id": "request-hook"}, FakeContext())
            seen[name] = (type(raised.value).__name__, side.runs, len(side.sent))
            if name == "lean":
                assert isinstance(side.caller, FastWire) and side.serialized == 0
    assert seen["lean"] == seen["client"]
    assert seen["lean"][1:] == (0, 0)


def test_an_xray_emitter_raising_as_a_subsegment_ends_does_as_the_client_path(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9950, sampled=True)
            failures = [1]
            keep = sent.send_entity

            def send_entity(entity: Any, failures: list = failures, keep: Any = keep) -> None:
                if failures and getattr(entity, "namespace", None) == "aws":
                    failures.pop()
                    raise OSError("the daemon's socket failed")
                keep(entity)

            monkeypatch.setattr(sent, "send_entity", send_entity)
            seen[name] = _outcome_of(side, "emitter-raises")
            monkeypatch.setattr(sent, "send_entity", keep)
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


# =====================================================================================
# Threads: tracers set up and taken away while calls are in flight
# =====================================================================================


def _hammer(
    side: Side, toggle: Callable[[bool], None], workers: int = 4, per_worker: int = 12
) -> None:
    """`workers` threads each run `per_worker` keys (a first run and a replay each) while the
    main thread sets the tracer up and takes it away; every handler runs once per key, every
    call answers its own result, nothing stays locked."""
    runs: dict[str, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    @idempotent(store=side.store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        with lock:
            runs[event["id"]] = runs.get(event["id"], 0) + 1
        return {"ok": event["id"]}

    done = threading.Event()

    def work(worker: int) -> None:
        try:
            for n in range(per_worker):
                event = {"id": f"w{worker}-{n}"}
                for _ in range(2):
                    assert handler(event, FakeContext()) == {"ok": event["id"]}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    on = False
    while any(t.is_alive() for t in threads):
        on = not on
        toggle(on)
        done.wait(0.003)
    if on:
        toggle(False)
    for thread in threads:
        thread.join()
    assert errors == []
    assert runs == {f"w{w}-{n}": 1 for w in range(workers) for n in range(per_worker)}
    record = side.record()
    assert record == {
        "count": workers * per_worker,
        "status": ["COMPLETED"] * (workers * per_worker),
    }


def test_opentelemetry_instrumented_and_uninstrumented_while_calls_are_in_flight(
    table: str, dynamodb_local_endpoint: str
) -> None:
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    instrumentor = BotocoreInstrumentor()
    provider = TracerProvider()
    spans = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    side = Side("lean", dynamodb_local_endpoint, table)

    def toggle(on: bool) -> None:
        if on:
            instrumentor.instrument(tracer_provider=provider)
        else:
            instrumentor.uninstrument()

    try:
        _hammer(side, toggle)
    finally:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
    assert side.served_lean()
    calls = len(side.sent) - 1  # less the record's scan
    assert 0 < len(_client_spans(spans)) <= calls  # never two spans for one call


def test_xray_patched_and_unpatched_while_calls_are_in_flight(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wrapt
    from aws_xray_sdk.ext.boto_utils import inject_header
    from aws_xray_sdk.ext.botocore.patch import _xray_traced_botocore

    side = Side("lean", dynamodb_local_endpoint, table)
    originals = (
        botocore.client.BaseClient.__dict__["_make_api_call"],
        botocore.endpoint.Endpoint.__dict__["prepare_request"],
    )

    def toggle(on: bool) -> None:
        if on:  # as aws_xray_sdk.ext.botocore.patch does it
            wrapt.wrap_function_wrapper(
                "botocore.client", "BaseClient._make_api_call", _xray_traced_botocore
            )
            wrapt.wrap_function_wrapper(
                "botocore.endpoint", "Endpoint.prepare_request", inject_header
            )
        else:
            botocore.client.BaseClient._make_api_call = originals[0]
            botocore.endpoint.Endpoint.prepare_request = originals[1]

    with xray(monkeypatch, modules=()) as sent:
        _invocation(monkeypatch, 9990, sampled=True)
        _hammer(side, toggle)
        recorded = len(_aws_subsegments(sent.documents))
    assert side.served_lean()
    assert 0 < recorded <= len(side.sent)  # never two subsegments for one call


def test_concurrent_first_calls_under_opentelemetry_record_only_the_users_calls(
    table: str, dynamodb_local_endpoint: str
) -> None:
    with otel() as (spans, _tracer):
        side = Side("lean", dynamodb_local_endpoint, table, build=False)
        spans.clear()
        barrier = threading.Barrier(4)
        errors: list[BaseException] = []
        handler = side.handler()

        def work(n: int) -> None:
            try:
                barrier.wait()
                assert handler({"id": f"first-{n}"}, FakeContext()) == {"ok": f"first-{n}"}
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert side.runs == 4
        assert [s.name for s in _client_spans(spans)] == ["DynamoDB.PutItem"] * 8
    assert side.served_lean()


# =====================================================================================
# More setups: patch_all, a user's own subsegment, a wrapper twice, prepare_request alone
# =====================================================================================

_PATCH_ALL = r"""
import json, os, sys
import botocore.endpoint
from aws_xray_sdk import global_sdk_config
from aws_xray_sdk.core import patch_all, xray_recorder
from aws_xray_sdk.core.lambda_launcher import LambdaContext
from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency._stores.dynamodb.wire.lean import FastWire

class Sent:
    documents = []
    def send_entity(self, entity): self.documents.append(json.loads(entity.serialize()))
    def set_daemon_address(self, address): pass

sent = Sent()
xray_recorder.configure(
    emitter=sent, context=LambdaContext(), sampling=False, streaming_threshold=0
)
global_sdk_config.set_sdk_enabled(True)
patch_all()
endpoint, table = sys.argv[1], sys.argv[2]
out = {}
for number, name in enumerate(("lean", "client")):
    os.environ["_X_AMZN_TRACE_ID"] = (
        f"Root=1-5759e988-{number:024x};Parent={number + 1:016x};Sampled=1"
    )
    client = default_client(endpoint, "us-east-1")
    store = DynamoDBStore(f"{table}-{name}", client=client, fast_wire=name == "lean")
    store._caller()
    serialized = []
    original = client._serializer.serialize_to_request
    def counted(*a, original=original, serialized=serialized, **k):
        serialized.append(1)
        return original(*a, **k)
    client._serializer.serialize_to_request = counted
    sent.documents.clear()
    handler = idempotent(store=store, key="id", cache_size=0)(lambda event, context: {"ok": 1})
    handler({"id": "a"}, None); handler({"id": "a"}, None)
    subsegments = []
    def walk(entity):
        if entity.get("namespace") == "aws":
            aws = entity["aws"]
            subsegments.append((entity["name"], aws["operation"], bool(entity.get("error"))))
        for child in entity.get("subsegments", ()):
            walk(child)
    for document in sent.documents:
        walk(document)
    lean = isinstance(store._caller(), FastWire) and not serialized
    out[name] = {"lean": lean, "subsegments": subsegments}
print(json.dumps(out))
"""


def test_xray_patch_all_is_served_and_records_what_the_client_path_records(
    table: str, dynamodb_local_endpoint: str, tmp_path: Any
) -> None:
    import subprocess
    import sys

    for name in PATHS:
        create_idempotency_table(default_client(dynamodb_local_endpoint, REGION), f"{table}-{name}")
    script = tmp_path / "patch_all.py"
    script.write_text(_PATCH_ALL)
    import lambda_idempotency

    layer = os.path.dirname(os.path.dirname(os.path.abspath(lambda_idempotency.__file__)))
    paths = [layer, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "LAMBDA_TASK_ROOT": "/var/task", "PYTHONPATH": os.pathsep.join(paths)}
    done = subprocess.run(
        [sys.executable, str(script), dynamodb_local_endpoint, table],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["lean"]["lean"] is True
    assert out["lean"]["subsegments"] == out["client"]["subsegments"]
    assert len(out["lean"]["subsegments"]) == 3


def test_a_users_own_subsegment_is_the_parent_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_xray_sdk.core import xray_recorder

    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9960, sampled=True)
            sent.documents.clear()
            with xray_recorder.in_subsegment("## charge"):
                first_run_replay_and_read(side)
            seen[name] = _tree(sent.documents)
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert [e[2] for e in seen["lean"] if e[1] == "aws"] == ["## charge"] * 4


def test_xray_wrapper_twice_records_two_nested_subsegments_as_the_client_path_does(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wrapt
    from aws_xray_sdk.ext.botocore.patch import _xray_traced_botocore

    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        wrapt.wrap_function_wrapper(
            "botocore.client", "BaseClient._make_api_call", _xray_traced_botocore
        )  # a second patch, as a second tool patching it again would
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9970, sampled=True)
            sent.documents.clear()
            first_run_replay_and_read(side)
            ids = {s["id"] for s in _aws_subsegments(sent.documents)}
            parents = [_trace_fields(h.get("X-Amzn-Trace-Id", "")).get("Parent") for h in side.sent]
            seen[name] = (_tree(sent.documents), [p in ids for p in parents])
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"][0]) == 8


def test_only_prepare_request_wrapped_is_served_with_the_same_headers(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wrapt
    from aws_xray_sdk.core import xray_recorder
    from aws_xray_sdk.ext.boto_utils import inject_header

    seen: dict[str, Any] = {}
    with xray(monkeypatch, modules=()):
        wrapt.wrap_function_wrapper("botocore.endpoint", "Endpoint.prepare_request", inject_header)
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9980, sampled=True)
            with xray_recorder.in_subsegment("## mine") as mine:
                first_run_replay_and_read(side)
            seen[name] = [
                _trace_fields(h.get("X-Amzn-Trace-Id", "")).get("Parent") == mine.id
                for h in side.sent
            ]
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"] == [True] * 4


def test_a_short_circuiting_hook_and_a_raising_after_call_hook_under_xray_record_the_same(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    with xray(monkeypatch) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9985, sampled=True)
            sent.documents.clear()

            def answer(**_: Any) -> Any:
                meta = {"RequestId": "FROM-HOOK", "HTTPStatusCode": 200, "RetryAttempts": 0}
                return dynamodb_answer(200, {}), {"ResponseMetadata": meta}

            def boom(**_: Any) -> None:
                raise RuntimeError("after-call hook failed")

            events = side.client.meta.events
            events.register("before-call.dynamodb.GetItem", answer)
            assert side.caller.get_item(TableName=side.table, Key={"pk": {"S": "x"}})
            events.register("after-call.dynamodb.GetItem", boom)
            with pytest.raises(RuntimeError):
                side.caller.get_item(TableName=side.table, Key={"pk": {"S": "x"}})
            seen[name] = _anonymous(
                [_xray_fields(s, iter(())) for s in _aws_subsegments(sent.documents)]
                + [s.get("aws", {}).get("request_id") for s in _aws_subsegments(sent.documents)],
                side,
            )
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_a_request_created_hook_adding_a_header_after_signing_is_honoured(
    table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, Any] = {}
    for name in PATHS:
        side = Side(name, dynamodb_local_endpoint, table)
        side.client.meta.events.register(
            "request-created.dynamodb",
            lambda request, **_: request.headers.__setitem__("x-tenant", "t-1"),
        )
        first_run_replay_and_read(side)
        seen[name] = [
            (h.get("x-tenant"), "x-tenant" in h.get("Authorization", "")) for h in side.sent
        ]
        if name == "lean":
            assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_xray_wrapper_on_the_clients_own_class_is_served_and_records_the_same(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import wrapt
    from aws_xray_sdk.ext.botocore.patch import _xray_traced_botocore

    seen: dict[str, Any] = {}
    with xray(monkeypatch, modules=()) as sent:
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            cls = type(side.client)  # botocore's DynamoDB class, made per client creator
            assert "_make_api_call" not in cls.__dict__
            wrapt.wrap_function_wrapper(cls, "_make_api_call", _xray_traced_botocore)
            try:
                _invocation(monkeypatch, 9990 + len(seen), sampled=True)
                sent.documents.clear()
                first_run_replay_and_read(side)
                seen[name] = _tree(sent.documents)
                if name == "lean":
                    assert side.served_lean()
            finally:
                delattr(cls, "_make_api_call")
    assert seen["lean"] == seen["client"]
    assert len(seen["lean"]) == 4


def test_xray_unsampled_and_opentelemetry_put_the_same_trace_header_on_both_paths(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}
    with otel() as (spans, _tracer), xray(monkeypatch):
        for name in PATHS:
            side = Side(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, 9995, sampled=False)
            spans.clear()
            first_run_replay_and_read(side)
            ids = {f"{s.context.span_id:016x}" for s in _client_spans(spans)}
            headers = [_trace_fields(h.get("X-Amzn-Trace-Id", "")) for h in side.sent]
            seen[name] = [
                (h.get("Root"), h.get("Sampled"), h.get("Parent") in ids) for h in headers
            ]
            if name == "lean":
                assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_a_before_call_hook_sees_headers_params_and_context_in_the_client_paths_order(
    table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, list[Any]] = {}
    for name in PATHS:
        side = Side(name, dynamodb_local_endpoint, table)
        seen[name] = []
        side.client.meta.events.register(
            "before-call.dynamodb",
            lambda params, context, seen=seen[name], **_: seen.append(
                (list(params["headers"]), list(params), list(context))
            ),
        )
        first_run_replay_and_read(side)
        if name == "lean":
            assert side.served_lean()
    assert seen["lean"] == seen["client"]


def test_in_lambda_a_before_call_hook_registered_first_sees_the_headers_the_client_path_gives(
    table: str, dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    _invocation(monkeypatch, 9997, sampled=True)
    seen: dict[str, list[Any]] = {}
    for name in PATHS:
        side = Side(name, dynamodb_local_endpoint, table)
        seen[name] = []
        side.client.meta.events.register_first(
            "before-call.dynamodb",
            lambda params, seen=seen[name], **_: seen.append(
                params["headers"].get("X-Amzn-Trace-Id")
            ),
        )
        assert side.store.get("absent") is None
        if name == "lean":
            assert side.served_lean()
    assert seen["lean"] == seen["client"]
