"""The main job: the sample functions, invoked as Lambda would from template.yaml, with the
sample events, against DynamoDB Local."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev import cli
from tests.conftest import local_client

ROOT = Path(__file__).resolve().parents[2]


def test_run_samples_prints_what_happened_to_each_event(
    dynamodb_local_endpoint: str, capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.chdir(ROOT)
    client = local_client(dynamodb_local_endpoint)
    for name in ("IdempotencyTable", "ChargesTable"):  # a fresh start for the samples
        if name in client.list_tables()["TableNames"]:
            client.delete_table(TableName=name)

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
