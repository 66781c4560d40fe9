"""Under a tracer or a user's hook, the lean path serves and the user sees exactly what the
client path shows them (issue 40), request for request, on DynamoDB Local.

Each test runs the same calls twice over one table: through a store whose calls take the lean
path, and through a store whose calls the client makes (`fast_wire=False`), each on a client
of its own built as ours is. The calls cover every operation the store sends and its errors: a
first run (PutItem, PutItem), a replay (a refused condition), a handler's error (the release),
a large result (BatchWriteItem, then BatchGetItem on its replay), a transactional completion
(TransactWriteItems), a read (GetItem), a throttle retried and a throttle that outlasts the
retries (injected in `before-send`, which both paths emit). What the tracer recorded is then
compared field by field; ids, times and stack frames are the only fields left out (the frames
are the code each path runs), and each request id is checked against the one DynamoDB sent.
That the lean path served is checked too: the client's own request serializer, which only
its `_make_api_call` calls, built none of the lean store's requests.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import botocore.client
import botocore.endpoint
import pytest
from botocore.awsrequest import AWSResponse

from lambda_idempotency import DynamoDBStore, StoreError, current_execution, idempotent
from lambda_idempotency._stores.dynamodb.client import default_client
from lambda_idempotency.testing import create_idempotency_table
from tests.conftest import FakeContext

pytestmark = pytest.mark.dynamodb_local

PATHS = ("direct", "lean", "client")
"""The direct path (a store without a client, in Lambda), the fast wire path over a client,
and the client path, the reference."""
REGION = "us-east-1"
_tables = (f"traced-{os.getpid()}-{n}" for n in itertools.count())


@pytest.fixture
def table(dynamodb_local_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in list(os.environ):
        if name.startswith(("AWS_", "IDEMPOTENCY_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "local")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "local")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamodb_local_endpoint)
    monkeypatch.setenv("IDEMPOTENCY_DIRECT_WIRE", "1")  # the direct path, outside Lambda
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "BOTO_CONFIG"):
        monkeypatch.setenv(name, os.devnull + "-absent")
    # botocore's retry back-off, not waited out: the decisions are what is compared
    monkeypatch.setattr(time, "sleep", lambda seconds: None)
    name = next(_tables)
    create_idempotency_table(default_client(dynamodb_local_endpoint, REGION), name)
    return name


class Throttles:
    """In `before-send`: the next `count` attempts of `operation` answered with DynamoDB's
    throttle, each with a request id of its own."""

    def __init__(self) -> None:
        self.pending: dict[str, int] = {}
        self.sent = itertools.count()

    def __call__(self, request: Any, **_: Any) -> AWSResponse | None:
        operation = request.headers["X-Amz-Target"].decode().split(".")[1]
        if not self.pending.get(operation):
            return None
        self.pending[operation] -= 1
        body = json.dumps(
            {
                "__type": "com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",
                "message": "The level of configured provisioned throughput was exceeded",
            }
        ).encode()
        headers = {
            "x-amzn-RequestId": f"THROTTLED{next(self.sent):04d}",
            "Content-Type": "application/x-amz-json-1.0",
            "x-amz-crc32": str(zlib.crc32(body)),
        }
        return AWSResponse(request.url, 400, headers, _Raw(body))


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


class Path:
    """One store, its own client, and what the client saw: the requests sent (their
    headers), the request ids answered, and the requests the client's serializer built."""

    def __init__(self, name: str, endpoint: str, table: str) -> None:
        self.name = name
        self.throttles = Throttles()
        self.sent: list[dict[str, str]] = []
        self.request_ids: list[str] = []
        self.serialized = 0
        if name == "direct":  # no client: its settings from the environment (`table`)
            self.store = DynamoDBStore(table)
            self.direct = self.store._caller()
            assert type(self.direct).__name__ == "DirectWire"
            # what it sends through its own client (a transaction): the lean path over it
            self.client = self.store._own_client()
            self.store._lean_client()
            self._observe(self.direct.events)
        else:
            self.client = default_client(endpoint, REGION)
            self.store = DynamoDBStore(table, client=self.client, fast_wire=name == "lean")
            self.store._caller()  # its path built now (the lean one checks itself on a twin)
        self._observe(self.client.meta.events)
        serializer = self.client._serializer
        original = serializer.serialize_to_request

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.serialized += 1
            return original(*args, **kwargs)

        serializer.serialize_to_request = counted

    def _observe(self, events: Any) -> None:
        events.register_first("before-send.dynamodb", self._sent)
        events.register("before-send.dynamodb", self.throttles)
        events.register("after-call.dynamodb", self._answered)

    def _sent(self, request: Any, **_: Any) -> None:
        self.sent.append(
            {k: v.decode() if isinstance(v, bytes) else v for k, v in request.headers.items()}
        )

    def _answered(self, http_response: Any, **_: Any) -> None:
        self.request_ids.append(http_response.headers.get("x-amzn-RequestId"))

    def run(self, scenario: Callable[[Path], None]) -> None:
        """The scenario's calls; the lean store's went the lean way (none serialized by
        the client), the other's the client's."""
        before = self.serialized, len(self.sent)
        scenario(self)
        serialized, sent = self.serialized - before[0], len(self.sent) - before[1]
        assert sent > 0
        if self.name == "client":
            assert serialized > 0
        else:
            assert serialized == 0, "the path stepped aside to the client's own way"
        if self.name == "direct":
            assert self.store._caller() is self.direct


def _handler(path: Path, body: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    return idempotent(store=path.store, key="id", cache_size=0)(lambda event, context: body(event))


def first_run_and_replay(path: Path) -> None:
    handler = _handler(path, lambda event: {"ok": event["id"][-7:]})
    assert handler({"id": f"{path.name}-order-1"}, FakeContext()) == {"ok": "order-1"}
    assert handler({"id": f"{path.name}-order-1"}, FakeContext()) == {"ok": "order-1"}


def handler_error(path: Path) -> None:
    def fails(event: dict[str, Any]) -> Any:
        raise ValueError("card declined")

    with pytest.raises(ValueError):
        _handler(path, fails)({"id": f"{path.name}-order-2"}, FakeContext())


def large_result(path: Path) -> None:
    handler = _handler(path, lambda event: "x" * 500_000)
    assert len(handler({"id": f"{path.name}-order-3"}, FakeContext())) == 500_000
    assert len(handler({"id": f"{path.name}-order-3"}, FakeContext())) == 500_000


def transactional(path: Path) -> None:
    table = path.store.table_name

    def charges(event: dict[str, Any]) -> Any:
        current_execution().add_write(
            {
                "Put": {
                    "TableName": table,
                    "Item": {"pk": {"S": f"charge#{path.name}"}, "amount": {"N": "42"}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            }
        )
        return {"charged": 42}

    assert _handler(path, charges)({"id": f"{path.name}-order-4"}, FakeContext()) == {"charged": 42}


def read(path: Path) -> None:
    assert path.store.get("absent") is None


def throttled_once(path: Path) -> None:
    path.throttles.pending["PutItem"] = 1
    handler = _handler(path, lambda event: {"ok": event["id"][-7:]})
    assert handler({"id": f"{path.name}-order-5"}, FakeContext()) == {"ok": "order-5"}


def throttled_throughout(path: Path) -> None:
    path.throttles.pending["PutItem"] = 3  # our client's three attempts
    with pytest.raises(StoreError):
        handler = _handler(path, lambda event: {"ok": event["id"][-7:]})
        handler({"id": f"{path.name}-order-6"}, FakeContext())


SCENARIOS = [
    first_run_and_replay,
    handler_error,
    large_result,
    transactional,
    read,
    throttled_once,
    throttled_throughout,
]


# -- X-Ray (Powertools' Tracer patches botocore with it) -----------------------------------


class SentToXRay:
    """An X-Ray emitter that keeps what the SDK would send to the daemon."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        pass


@contextlib.contextmanager
def xray_patched(
    monkeypatch: pytest.MonkeyPatch,
    *,
    in_lambda: bool = True,
    context_missing: str = "LOG_ERROR",
    modules: tuple[str, ...] | None = ("botocore", "httplib"),
) -> Iterator[SentToXRay]:
    """X-Ray's own patch of botocore (and of http.client, as `patch_all` and Powertools'
    Tracer patch it; None: the test patches), the recorder as it runs in Lambda (or outside
    it, with `context_missing`); all of it undone afterwards."""
    from aws_xray_sdk import global_sdk_config
    from aws_xray_sdk.core import patch, patcher, xray_recorder
    from aws_xray_sdk.core.context import Context
    from aws_xray_sdk.core.lambda_launcher import LambdaContext
    from aws_xray_sdk.ext import httplib

    for cls, name in (
        (botocore.client.BaseClient, "_make_api_call"),
        (botocore.endpoint.Endpoint, "prepare_request"),
    ):
        monkeypatch.setattr(cls, name, cls.__dict__[name])  # restored after the test
    if in_lambda:
        monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    else:
        monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    saved = xray_recorder.context, xray_recorder.emitter, xray_recorder.sampling
    threshold, enabled = xray_recorder.streaming_threshold, global_sdk_config.sdk_enabled()
    sent = SentToXRay()
    # as the recorder is made in Lambda: each subsegment sent when it ends
    context = LambdaContext() if in_lambda else Context(context_missing=context_missing)
    xray_recorder.configure(emitter=sent, context=context, sampling=False, streaming_threshold=0)
    global_sdk_config.set_sdk_enabled(True)
    if modules:
        patch(modules)
    try:
        yield sent
    finally:
        httplib.unpatch()
        with contextlib.suppress(AttributeError):
            delattr(botocore.client, "_xray_enabled")
        patcher._PATCHED_MODULES.difference_update({"botocore", "httplib"})
        xray_recorder.context, xray_recorder.emitter, xray_recorder.sampling = saved
        xray_recorder.streaming_threshold = threshold
        global_sdk_config.set_sdk_enabled(enabled)


_invocations = itertools.count(1)


def _invocation(monkeypatch: pytest.MonkeyPatch, number: int, sampled: bool) -> str:
    """A trace header as Lambda's runtime sets it before an invocation; its parent."""
    parent = f"{number:016x}"
    monkeypatch.setenv(
        "_X_AMZN_TRACE_ID",
        f"Root=1-5759e988-{number:024x};Parent={parent};Sampled={int(sampled)}",
    )
    return parent


def _aws_subsegments(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(entity: dict[str, Any]) -> None:
        if entity.get("namespace") == "aws":
            found.append(entity)
        for child in entity.get("subsegments", ()):
            walk(child)

    for document in documents:
        walk(document)
    return found


def _xray_fields(subsegment: dict[str, Any], request_ids: Iterator[str]) -> dict[str, Any]:
    """A subsegment less its ids, times and stack frames; its request id checked against the
    one DynamoDB answered (a throttle's retries answer first)."""
    fields = {
        k: v
        for k, v in subsegment.items()
        if k not in ("id", "parent_id", "trace_id", "start_time", "end_time", "cause", "aws")
    }
    fields["aws"] = {k: v for k, v in subsegment.get("aws", {}).items() if k != "request_id"}
    cause = subsegment.get("cause")
    if cause is not None:
        fields["cause"] = {
            **{k: v for k, v in cause.items() if k not in ("exceptions", "working_directory")},
            "exceptions": [
                {k: v for k, v in e.items() if k not in ("id", "stack", "truncated")}
                for e in cause.get("exceptions", ())
            ],
        }
    return fields


@pytest.mark.parametrize("sampled", [True, False], ids=["sampled", "not sampled"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_xray_records_the_same_subsegments_and_headers_on_both_paths(
    scenario: Callable[[Path], None],
    sampled: bool,
    table: str,
    dynamodb_local_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}
    invocation = next(_invocations)
    with xray_patched(monkeypatch) as sent:
        for name in PATHS:
            path = Path(name, dynamodb_local_endpoint, table)
            _invocation(monkeypatch, invocation, sampled)  # the same trace for both
            sent.documents.clear()
            path.run(scenario)
            subsegments = _aws_subsegments(sent.documents)
            ids = {s["id"] for s in subsegments}
            headers = [_trace_fields(h.get("X-Amzn-Trace-Id", "")) for h in path.sent]
            if sampled:
                # each request's header names its own subsegment, the retries included
                assert len(subsegments) >= 1
                assert all(h["Parent"] in ids for h in headers), (headers, ids)
            else:
                assert subsegments == []
                assert all(h.get("Sampled") == "0" for h in headers), headers
            seen[name] = {
                "subsegments": [_xray_fields(s, iter(())) for s in subsegments],
                "request ids": [s.get("aws", {}).get("request_id") for s in subsegments],
                "headers": [{k: v for k, v in h.items() if k != "Parent"} for h in headers],
                "requests": len(path.sent),
            }
            if sampled:  # one per call, as DynamoDB answered it last
                assert seen[name]["request ids"] == path.request_ids
    for part in ("requests", "headers", "subsegments"):
        assert seen["direct"][part] == seen["client"][part], part
        assert seen["lean"][part] == seen["client"][part], part


def _trace_fields(header: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in header.split(";") if "=" in part)


# -- OpenTelemetry --------------------------------------------------------------------------


@contextlib.contextmanager
def opentelemetry() -> Iterator[tuple[Any, Any]]:
    from opentelemetry.instrumentation.botocore import BotocoreInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentor = BotocoreInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield spans, provider.get_tracer("test")
    finally:
        instrumentor.uninstrument()


def _span_fields(span: Any) -> dict[str, Any]:
    attributes = dict(span.attributes or {})
    attributes.pop("aws.request_id", None)  # checked against DynamoDB's answers apart
    return {
        "name": span.name,
        "kind": span.kind,
        "attributes": attributes,
        "status": (span.status.status_code, span.status.description),
        "events": [
            (
                event.name,
                {k: v for k, v in (event.attributes or {}).items() if k != "exception.stacktrace"},
            )
            for event in span.events
        ],
        "links": list(span.links),
    }


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_opentelemetry_records_the_same_spans_and_headers_on_both_paths(
    scenario: Callable[[Path], None], table: str, dynamodb_local_endpoint: str
) -> None:
    from opentelemetry.trace import SpanKind

    seen: dict[str, Any] = {}
    with opentelemetry() as (spans, tracer):
        for name in PATHS:
            path = Path(name, dynamodb_local_endpoint, table)
            spans.clear()
            with tracer.start_as_current_span("handler", kind=SpanKind.SERVER) as parent:
                path.run(scenario)
            finished = [s for s in spans.get_finished_spans() if s.kind is SpanKind.CLIENT]
            assert finished
            assert all(s.parent.span_id == parent.get_span_context().span_id for s in finished)
            ids = [s.attributes.get("aws.request_id") for s in finished]
            assert [i for i in ids if not (i or "").startswith("THROTTLED")] == [
                i for i in path.request_ids if not i.startswith("THROTTLED")
            ]
            seen[name] = {
                "spans": [_span_fields(s) for s in finished],
                "requests": len(path.sent),
                "header names": [sorted(h) for h in path.sent],
            }
    assert seen["direct"] == seen["client"]
    assert seen["lean"] == seen["client"]


# -- a user's hooks ---------------------------------------------------------------------------


class Hooks:
    """A user's `before-call` and `after-call` hooks: what botocore gave them, and a header
    the `before-call` hook adds to every request."""

    def __init__(self, client: Any) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.client = client
        client.meta.events.register("before-call.dynamodb", self.before)
        client.meta.events.register("after-call.dynamodb", self.after)

    def before(
        self, model: Any, params: dict[str, Any], request_signer: Any, context: Any, **kwargs: Any
    ) -> None:
        assert request_signer is self.client._request_signer
        assert params["context"] is context
        params["headers"]["x-tenant"] = "tenant-42"
        self.calls.append(
            (
                "before-call",
                kwargs["event_name"],
                model.name,
                {k: v for k, v in params.items() if k not in ("headers", "body", "context")},
                {k: v for k, v in params["headers"].items() if k != "User-Agent"},
                json.loads(params["body"]),
                sorted(context),
            )
        )

    def after(
        self, http_response: Any, parsed: dict[str, Any], model: Any, context: Any, **kwargs: Any
    ) -> None:
        answered = {k: v for k, v in parsed.items() if k != "ResponseMetadata"}
        self.calls.append(
            (
                "after-call",
                kwargs["event_name"],
                model.name,
                http_response.status_code,
                answered,
                sorted(parsed["ResponseMetadata"]),
                sorted(context),
            )
        )


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_users_hooks_are_called_with_what_the_client_path_gives_them(
    scenario: Callable[[Path], None], table: str, dynamodb_local_endpoint: str
) -> None:
    seen: dict[str, Any] = {}
    for name in ("lean", "client"):  # hooks on a client: the direct path has none
        path = Path(name, dynamodb_local_endpoint, table)
        hooks = Hooks(path.client)
        path.run(scenario)
        assert all(h.get("x-tenant") == "tenant-42" for h in path.sent)
        seen[name] = _anonymised(hooks.calls, path.name)
    assert seen["lean"] == seen["client"]


def _anonymised(calls: list[Any], name: str) -> str:
    """The two paths' calls differ in what they must: the owner and request tokens, the
    times, the hashes of keys and payloads (each path's events name it), the path's name in
    its own writes."""
    import re

    text = json.dumps(calls, default=repr)
    text = re.sub(r'"(:?owner)": \{"S": "[^"]+"\}', r'"\1": "<token>"', text)
    text = re.sub(r'\{"N": "\d{9,}"\}', '"<time>"', text)
    text = re.sub(r"[0-9a-f]{64}", "<hash of the key or payload>", text)
    text = re.sub(r'"ClientRequestToken": "[^"]+"', '"ClientRequestToken": "<token>"', text)
    return text.replace(f"charge#{name}", "charge#<path>")
