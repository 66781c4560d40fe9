"""`metrics=`: a CloudWatch metric per outcome, as EMF lines of our own or through the user's
Powertools `Metrics`, as CloudWatch would read them from the function's output."""

from __future__ import annotations

import collections
import json
import logging
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from aws_lambda_powertools import Metrics

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    InProgressError,
    KeyMissingError,
    PayloadMismatchError,
    StoreError,
    idempotent,
    idempotent_function,
    idempotent_http,
    idempotent_record,
    process_batch,
)
from tests.batch_events import batch, sqs_record
from tests.conftest import FakeClock, FakeContext
from tests.http_events import http_event
from tests.unit.test_decorators import FailingClient

RAW_KEY = "order-secret-4242"
RAW_PAYLOAD = "card-4111111111111111"


@pytest.fixture(autouse=True)
def _in_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "ChargeOrder")


def emf_lines(output: str) -> list[dict[str, Any]]:
    """The EMF documents among the lines written, each checked as CloudWatch checks it:
    every metric and dimension named in the directive has its value at the top level."""
    documents = []
    for line in output.splitlines():
        document = json.loads(line)
        if "_aws" not in document:
            continue
        assert isinstance(document["_aws"]["Timestamp"], int)
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for dimension_set in directive["Dimensions"]:
                assert all(isinstance(document[name], str) for name in dimension_set)
            for metric in directive["Metrics"]:
                assert metric["Unit"] == "Count"
                assert metric["Name"] in document
        documents.append(document)
    return documents


def counts(documents: list[dict[str, Any]]) -> collections.Counter[str]:
    """What CloudWatch would sum per metric name."""
    total: collections.Counter[str] = collections.Counter()
    for document in documents:
        for directive in document["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                values = document[metric["Name"]]
                total[metric["Name"]] += sum(values) if isinstance(values, list) else values
    return total


def charge_handler(store: DynamoDBStore, **options: Any) -> Any:
    @idempotent(key="order_id", store=store, **options)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"charged": event["amount"]}

    return handler


def event(amount: int = 5) -> dict[str, Any]:
    return {"order_id": RAW_KEY, "amount": amount, "card": RAW_PAYLOAD}


def test_each_outcome_is_one_emf_line_in_the_default_namespace_by_function(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = charge_handler(moto_store, metrics=True)
    cold = charge_handler(moto_store, metrics=True, cache_size=0)

    handler(event(), FakeContext())  # executed
    handler(event(), FakeContext())  # replayed from this container's cache
    cold(event(), FakeContext())  # replayed from DynamoDB
    with pytest.raises(PayloadMismatchError):
        cold(event(amount=6), FakeContext())
    with pytest.raises(KeyMissingError):
        handler({"amount": 1}, FakeContext())

    documents = emf_lines(capsys.readouterr().out)
    assert len(documents) == 5
    assert counts(documents) == {
        "executed": 1,
        "replayed_from_cache": 1,
        "replayed": 1,
        "payload_mismatch": 1,
        "key_missing": 1,
    }
    for document in documents:
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "LambdaIdempotency"
        assert directive["Dimensions"] == [["function_name"]]
        assert document["function_name"] == "ChargeOrder"


def test_a_namespace_of_your_own_and_no_raw_key_or_payload_in_any_line(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = charge_handler(moto_store, metrics="Payments/Idempotency")
    handler(event(), FakeContext())

    output = capsys.readouterr().out
    (document,) = emf_lines(output)
    assert document["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Payments/Idempotency"
    assert document["idempotency_namespace"] == handler.idempotency.settings.namespace
    assert RAW_KEY not in output
    assert RAW_PAYLOAD not in output


def test_in_progress_and_taken_over_are_counted(
    moto_store: DynamoDBStore, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """A crashed holder's key is refused while its lease runs, then taken over."""
    handler = charge_handler(moto_store, metrics=True, clock=clock, lease_seconds=5)
    _claim_as_killed_invocation(moto_store, handler.idempotency, clock)

    with pytest.raises(InProgressError):
        handler(event(), None)
    clock.advance(10)
    handler(event(), None)

    assert counts(emf_lines(capsys.readouterr().out)) == {
        "in_progress": 1,
        "taken_over": 1,
        "executed": 1,
    }


def _claim_as_killed_invocation(store: DynamoDBStore, engine: Any, clock: FakeClock) -> None:
    """The record a killed invocation leaves: its claim, never completed nor released."""
    pk, payload_hash = engine._identify(event())
    store.claim(
        pk,
        owner="killed",
        payload_hash=payload_hash,
        now_ms=clock.now_ms(),
        lease_until_ms=clock.now_ms() + 5000,
        expiration_s=clock.now_ms() // 1000 + 3600,
        skew_ms=engine.settings.skew_ms,
    )


def test_a_handler_error_counts_released(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    @idempotent(key="order_id", store=moto_store, metrics=True)
    def handler(event: dict[str, Any], context: Any) -> None:
        raise ValueError("card declined")

    with pytest.raises(ValueError, match="declined"):
        handler(event(), FakeContext())

    assert counts(emf_lines(capsys.readouterr().out)) == {"released": 1}


def test_through_powertools_metrics_the_counts_join_the_users_namespace_and_flush(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = Metrics(namespace="Orders", service="checkout")
    try:

        @metrics.log_metrics
        @idempotent(key="order_id", store=moto_store, metrics=metrics)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            metrics.add_metric(name="OrderCharged", unit="Count", value=1)
            return {"charged": event["amount"]}

        handler(event(), FakeContext())
        handler(event(), FakeContext())
        output = capsys.readouterr().out
    finally:
        metrics.clear_metrics()

    first, retry = emf_lines(output)
    for document in (first, retry):
        (directive,) = document["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "Orders"
        assert directive["Dimensions"] == [["service"]]
        assert document["service"] == "checkout"
    assert counts([first]) == {"executed": 1, "OrderCharged": 1}
    assert counts([retry]) == {"replayed_from_cache": 1}
    assert RAW_KEY not in output


def test_every_front_end_takes_the_option(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    @idempotent_function(key="order_id", store=moto_store, metrics=True)
    def ship(order_id: str) -> str:
        return "shipped"

    @idempotent_http(store=moto_store, metrics=True)
    def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return {"statusCode": 201, "body": "{}"}

    @idempotent_record(store=moto_store, metrics=True)
    def record_handler(record: Any) -> None:
        return None

    ship(RAW_KEY)
    api(http_event("http-api", headers={"Idempotency-Key": RAW_KEY}, body="{}"), FakeContext())
    api(http_event("http-api", body="{}"), FakeContext())  # 400: no key
    api(http_event("http-api", headers={"Idempotency-Key": "\x01"}, body="{}"), FakeContext())
    messages = batch(sqs_record("m-1", {"n": 1}), sqs_record("m-2", {"n": 2}))
    assert process_batch(messages, FakeContext(), record_handler) == {"batchItemFailures": []}

    output = capsys.readouterr().out
    assert counts(emf_lines(output)) == {"executed": 4, "key_missing": 1, "key_invalid": 1}
    assert RAW_KEY not in output


def test_a_body_refused_as_unfingerprintable_is_counted_payload_invalid(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 400 for a body that cannot be read by value is counted under its own outcome,
    the one docs/operations.md lists, so an alarm on it sees every such refusal."""
    runs: list[Any] = []

    @idempotent_http(store=moto_store, metrics=True)
    def api(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"statusCode": 201, "body": "{}"}

    too_deep = "[" * 100_000 + "]" * 100_000
    request = http_event("http-api", headers={"Idempotency-Key": "k-1"}, body=too_deep)
    assert api(request, FakeContext())["statusCode"] == 400
    assert runs == []
    assert counts(emf_lines(capsys.readouterr().out)) == {"payload_invalid": 1}


def test_off_by_default_nothing_is_written(
    moto_store: DynamoDBStore, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = charge_handler(moto_store)
    handler(event(), FakeContext())
    handler(event(), FakeContext())

    assert capsys.readouterr().out == ""


def test_off_by_default_nothing_is_imported() -> None:
    """A fresh interpreter, as at a cold start: no metrics module, no tracing SDK."""
    script = textwrap.dedent(
        """
        import sys
        from lambda_idempotency import DynamoDBStore, idempotent

        @idempotent(key="order_id", store=DynamoDBStore("t", region_name="us-east-1"))
        def handler(event, context):
            return 1

        loaded = {"lambda_idempotency._base.metrics", "aws_xray_sdk", "opentelemetry"}
        print(sorted(loaded & set(sys.modules)))
        @idempotent(key="order_id", metrics=True, store=DynamoDBStore("t", region_name="x"))
        def counted(event, context):
            return 1
        print(sorted(loaded & set(sys.modules)))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=30
    )
    assert result.stdout.splitlines() == ["[]", "['lambda_idempotency._base.metrics']"]


@pytest.mark.parametrize("wrong", [42, "", " ", ":x", "AWS/Lambda", "Zahlungen€", object()])
def test_a_wrong_option_is_refused_at_decoration(moto_store: DynamoDBStore, wrong: Any) -> None:
    with pytest.raises(ConfigurationError, match="metrics="):
        charge_handler(moto_store, metrics=wrong)


def test_the_alarmed_failures_are_counted(
    moto_store: DynamoDBStore, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """DynamoDB throttling every write: a claim fails (`store_error`, nothing ran); a
    completion is retried until the invocation must answer (`completion_failed`)."""
    throttled_claims = DynamoDBStore(
        moto_store.table_name,
        client=FailingClient(moto_store.client, {"put_item"}),  # type: ignore[arg-type]
    )
    throttled_completions = DynamoDBStore(
        moto_store.table_name,
        client=FailingClient(moto_store.client, {"put_item"}, after=1),  # type: ignore[arg-type]
    )
    refused = charge_handler(throttled_claims, metrics=True)
    unfinished = charge_handler(throttled_completions, metrics=True, clock=clock)

    with pytest.raises(StoreError):
        refused(event(), FakeContext())
    assert unfinished(event(), FakeContext(3000, clock=clock)) == {"charged": 5}

    counted = counts(emf_lines(capsys.readouterr().out))
    assert counted["store_error"] == 1
    assert counted["completion_failed"] == 1
    assert counted["completion_retry"] >= 3
    assert "executed" not in counted


class BrokenMetrics:
    def add_metric(self, name: str, unit: str, value: float) -> None:
        raise RuntimeError("metrics backend down")


def test_a_failing_metrics_sink_never_changes_the_outcome(
    moto_store: DynamoDBStore, caplog: pytest.LogCaptureFixture
) -> None:
    handler = charge_handler(moto_store, metrics=BrokenMetrics())

    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert handler(event(), FakeContext()) == {"charged": 5}
        assert handler(event(), FakeContext()) == {"charged": 5}

    failures = [json.loads(r.getMessage()) for r in caplog.records]
    assert [f["idempotency"] for f in failures] == ["metric_failed", "metric_failed"]
    assert failures[0]["error"] == "RuntimeError"
    assert handler.idempotency.stats["executed"] == 1
