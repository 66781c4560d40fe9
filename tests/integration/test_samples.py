"""The main job: the sample functions, invoked as Lambda would from template.yaml, with the
sample events, against DynamoDB Local."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev import cli
from lambda_idempotency._dev.valkey_local import ValkeyCluster, call
from tests.conftest import drop_tables, local_client

ROOT = Path(__file__).resolve().parents[2]


def test_run_samples_prints_what_happened_to_each_event(
    dynamodb_local_endpoint: str, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.chdir(ROOT)
    client = local_client(dynamodb_local_endpoint)
    drop_tables(client, "IdempotencyTable", "ChargesTable")  # a fresh start for the samples

    status = cli.main(["run-samples", "--endpoint", dynamodb_local_endpoint])

    lines = capsys.readouterr().out.splitlines()
    outcome = {line.split()[0]: line for line in lines if line.startswith("  ")}
    assert status == 0
    assert "executed" in outcome["01-first-call.json"]
    assert "replayed" in outcome["02-same-retry.json"]
    assert "rejected (payload_mismatch)" in outcome["03-same-key-other-amount.json"]
    assert "rejected (key_missing)" in outcome["04-missing-key.json"]
    first_charge = outcome["01-first-call.json"].split('"charge_id": "')[1][:19]
    assert first_charge in outcome["02-same-retry.json"]
    charges = client.scan(TableName="ChargesTable")["Items"]
    assert [item["charge_id"]["S"] for item in charges] == [first_charge]  # charged once

    assert "executed 201" in outcome["01-first-request.json"]
    assert "replayed 201" in outcome["02-retry.json"]
    assert '"Idempotent-Replayed": "true"' in outcome["02-retry.json"]
    assert "rejected 422 (payload_mismatch)" in outcome["03-retry-changed-amount.json"]
    assert "rejected 400 (key_missing)" in outcome["04-no-idempotency-key.json"]
    assert "executed 201" in outcome["05-other-tenant-same-key.json"]
    assert "passed through 200" in outcome["06-get-payments.json"]
    payment = {name: re.findall(r"pay_[0-9a-f]{16}", line) for name, line in outcome.items()}
    assert payment["02-retry.json"] == payment["01-first-request.json"] != []
    assert set(payment["05-other-tenant-same-key.json"]).isdisjoint(
        payment["01-first-request.json"]
    )
    for name in ("03-retry-changed-amount.json", "04-no-idempotency-key.json"):
        assert "application/problem+json" in outcome[name]

    # the durable sample: one execution per event, run by the Durable Execution SDK's runner
    assert "executed" in outcome["01-first-order.json"]
    assert "replayed" in outcome["02-same-order-again.json"]
    assert "rejected (payload_mismatch)" in outcome["03-same-key-other-amount.json"]
    receipts = {name: re.findall(r"(?:ch|sh)_[0-9a-f]{16}", outcome[name]) for name in outcome}
    assert receipts["02-same-order-again.json"] == receipts["01-first-order.json"] != []

    assert "batch: 3 ok, 0 failed " in outcome["01-new-orders.json"]
    assert '{"batchItemFailures": []}' in outcome["01-new-orders.json"]
    assert "batch: 3 ok, 0 failed (3 replayed)" in outcome["02-same-batch-redelivered.json"]
    mixed = outcome["03-new-shipped-and-invalid.json"]
    assert "batch: 2 ok, 1 failed (1 replayed)" in mixed
    invalid = ROOT / "events" / "ship_orders" / "03-new-shipped-and-invalid.json"
    invalid_id = json.loads(invalid.read_text())["Records"][2]["messageId"]
    assert f'{{"batchItemFailures": [{{"itemIdentifier": "{invalid_id}"}}]}}' in mixed

    # the Valkey sample, against the local server run-samples started for it (and stopped)
    assert "executed" in outcome["01-first-notice.json"]
    assert "replayed" in outcome["02-notice-retried.json"]
    assert "rejected (payload_mismatch)" in outcome["03-same-id-other-order.json"]
    assert "rejected (key_missing)" in outcome["04-no-notification-id.json"]
    messages = {name: re.findall(r"msg_[0-9a-f]{16}", line) for name, line in outcome.items()}
    assert messages["02-notice-retried.json"] == messages["01-first-notice.json"] != []
    (valkey_url,) = [line.split()[-1] for line in lines if line.startswith("Valkey ready at ")]
    port = int(valkey_url.rsplit(":", 1)[1])
    with pytest.raises(OSError):
        call(port, "PING", timeout=1.0)


def test_invoke_of_the_valkey_sample_without_a_url_names_the_fix(
    capsys: Any, monkeypatch: Any
) -> None:
    """The template's cache has no local meaning: one line saying what to set, nothing run."""
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("IDEMPOTENCY_VALKEY_URL", raising=False)
    event = "events/notify_customer/01-first-notice.json"
    status = cli.main(["invoke", "NotifyCustomerFunction", "--event", event])
    out, err = capsys.readouterr()
    assert (status, out) == (2, "")
    assert err == (
        "lambda-idempotency: invoke NotifyCustomerFunction: IDEMPOTENCY_VALKEY_URL comes from "
        "the template's Valkey cache: set it to a local server "
        "(`IDEMPOTENCY_VALKEY_URL=redis://127.0.0.1:6379`), or use `run-samples`, which starts "
        "one\n"
    )


@pytest.fixture
def one_node_cluster() -> Iterator[ValkeyCluster]:
    """What run-samples starts for the Valkey sample (a cluster client, as ElastiCache
    Serverless is in cluster mode)."""
    with ValkeyCluster(size=1) as cluster:
        yield cluster


def test_invoke_of_the_valkey_sample_uses_the_url_it_is_given(
    one_node_cluster: ValkeyCluster, tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """IDEMPOTENCY_VALKEY_URL from the caller's environment reaches the function: the retry
    replays the first answer from that server."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", one_node_cluster.url)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"notification_id": f"ntf-{uuid.uuid4()}", "order_id": "o-1"}))
    answers = []
    for _ in range(2):
        status = cli.main(["invoke", "NotifyCustomerFunction", "--event", str(event)])
        out, err = capsys.readouterr()
        answers.append((status, json.loads(out), err.strip().splitlines()[-1]))
    (s1, first, said1), (s2, retry, said2) = answers
    assert (s1, s2) == (0, 0)
    assert (said1, said2) == (
        "NotifyCustomerFunction: executed",
        "NotifyCustomerFunction: replayed",
    )
    assert first["status"] == "sent" and retry == first


def test_run_samples_says_in_one_line_when_valkey_cannot_start(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """No traceback and no function invoked: the line names the sample and the fix."""
    monkeypatch.chdir(ROOT)
    broken = tmp_path / "valkey-server"
    broken.write_text("#!/bin/sh\necho no such server build\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("VALKEY_SERVER", str(broken))
    status = cli.main(["run-samples", "--endpoint", "http://127.0.0.1:9"])
    out, err = capsys.readouterr()
    assert status == 2
    assert "ChargeOrderFunction" not in out
    assert err.startswith(
        "lambda-idempotency: cannot start a local Valkey server for NotifyCustomerFunction: "
    )
    assert "no such server build" in err
    assert err.endswith("(VALKEY_SERVER names a valkey-server binary to use)\n")
    assert err.count("\n") == 1


def test_invoke_reports_a_missing_function_clearly(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    status = cli.main(
        ["invoke", "NoSuchFunction", "--event", "events/charge_order/01-first-call.json"]
    )
    assert status == 2
    assert "no function 'NoSuchFunction'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "{not json",
            "event {event} is not JSON: "
            "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        ),
        (None, "cannot read event {event}: No such file or directory"),
    ],
)
def test_invoke_reports_a_bad_event_clearly(
    tmp_path: Path, capsys: Any, monkeypatch: Any, content: str | None, message: str
) -> None:
    """One line on stderr naming the file and what is wrong with it; no traceback, nothing on
    stdout."""
    monkeypatch.chdir(ROOT)
    event = tmp_path / "event.json"
    if content is not None:
        event.write_text(content)
    status = cli.main(["invoke", "ChargeOrderFunction", "--event", str(event)])
    out, err = capsys.readouterr()
    assert status == 2
    assert out == ""
    assert err == f"lambda-idempotency: {message.format(event=event)}\n"
