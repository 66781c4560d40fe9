"""The outcome and the key hash on the function's trace: X-Ray through Powertools' `Tracer`,
and OpenTelemetry, with the real SDKs and what they would send."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aws_lambda_powertools import Tracer
from aws_xray_sdk.core import xray_recorder
from aws_xray_sdk.core.context import Context
from aws_xray_sdk.core.lambda_launcher import LambdaContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from lambda_idempotency import DynamoDBStore, InProgressError, idempotent
from tests.conftest import FakeContext

RAW_KEY = "order-secret-4242"
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


@pytest.fixture(scope="module", autouse=True)
def _close_the_sdk_socket() -> Iterator[None]:
    """The SDK opens a UDP socket for its daemon at import and never closes it."""
    yield
    xray_recorder.emitter._socket.close()


class SentToXRay:
    """An X-Ray emitter that keeps what the SDK would send to the daemon."""

    def __init__(self) -> None:
        self.documents: list[dict[str, Any]] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(json.loads(entity.serialize()))

    def set_daemon_address(self, address: str | None) -> None:
        pass


@pytest.fixture
def xray_in_lambda(monkeypatch: pytest.MonkeyPatch) -> Iterator[SentToXRay]:
    """The recorder as it runs in Lambda (a facade segment from the trace header) with an
    active Powertools Tracer; restored afterwards."""
    monkeypatch.setenv("_X_AMZN_TRACE_ID", TRACE_HEADER)
    saved = xray_recorder.context, xray_recorder.emitter, xray_recorder.sampling
    sent = SentToXRay()
    xray_recorder.configure(emitter=sent, context=LambdaContext(), sampling=False)
    try:
        yield sent
    finally:
        xray_recorder.context, xray_recorder.emitter, xray_recorder.sampling = saved
        Tracer._reset_config()


def test_xray_subsegment_of_a_powertools_tracer_carries_outcome_and_key_hash(
    moto_store: DynamoDBStore, xray_in_lambda: SentToXRay
) -> None:
    tracer = Tracer(service="checkout", disabled=False, auto_patch=False)

    @tracer.capture_lambda_handler
    @idempotent(key="order_id", store=moto_store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"charged": 5}

    handler({"order_id": RAW_KEY}, FakeContext())
    handler({"order_id": RAW_KEY}, FakeContext())

    first, retry = (d for d in xray_in_lambda.documents if d["name"] == "## handler")
    key_hash = first["annotations"]["idempotency_key_hash"]
    assert first["annotations"]["idempotency_outcome"] == "executed"
    assert retry["annotations"]["idempotency_outcome"] == "replayed"
    assert retry["annotations"]["idempotency_key_hash"] == key_hash
    assert key_hash.startswith(handler.idempotency.settings.namespace + "#")
    assert RAW_KEY not in json.dumps(xray_in_lambda.documents)


def test_xray_without_an_open_segment_is_left_alone(
    moto_store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK imported (as Powertools does) but nothing traced: no "cannot find the
    current segment" error on every outcome, and the call goes through."""
    saved = xray_recorder.context
    xray_recorder.configure(context=Context(context_missing="LOG_ERROR"))
    try:

        @idempotent(key="order_id", store=moto_store)
        def handler(event: dict[str, Any], context: Any) -> int:
            return 1

        with caplog.at_level(logging.DEBUG, logger="aws_xray_sdk"):
            assert handler({"order_id": RAW_KEY}, FakeContext()) == 1
    finally:
        xray_recorder.context = saved
    assert [r for r in caplog.records if r.name.startswith("aws_xray_sdk")] == []


def test_opentelemetry_current_span_carries_outcome_and_key_hash(
    moto_store: DynamoDBStore,
) -> None:
    exported = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    tracer = provider.get_tracer("checkout")

    @idempotent(key="order_id", store=moto_store, lease_seconds=60)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        with tracer.start_as_current_span("duplicate"), pytest.raises(InProgressError):
            handler(event, context)  # the same key, while this call holds it
        return {"charged": 5}

    with tracer.start_as_current_span("handler"):
        handler({"order_id": RAW_KEY}, FakeContext())

    spans = {span.name: dict(span.attributes or {}) for span in exported.get_finished_spans()}
    assert spans["duplicate"]["idempotency.outcome"] == "in_progress"
    assert spans["handler"]["idempotency.outcome"] == "executed"
    assert spans["handler"]["idempotency.key_hash"] == spans["duplicate"]["idempotency.key_hash"]
    assert RAW_KEY not in json.dumps(spans)


def test_no_span_recording_is_no_trace_failure(
    moto_store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenTelemetry and X-Ray imported, neither recording: nothing fails on the way."""

    @idempotent(key="order_id", store=moto_store)
    def handler(event: dict[str, Any], context: Any) -> int:
        return 1

    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        assert handler({"order_id": RAW_KEY}, FakeContext()) == 1
    outcomes = [json.loads(r.getMessage())["idempotency"] for r in caplog.records]
    assert outcomes == ["claimed", "executed"]
