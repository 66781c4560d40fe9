"""The main job: the sample functions, invoked as Lambda would from template.yaml, with the
sample events, against DynamoDB Local."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import _cli
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

    status = _cli.main(["run-samples", "--endpoint", dynamodb_local_endpoint])

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


def test_invoke_reports_a_missing_function_clearly(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    status = _cli.main(
        ["invoke", "NoSuchFunction", "--event", "events/charge_order/01-first-call.json"]
    )
    assert status == 2
    assert "no function 'NoSuchFunction'" in capsys.readouterr().err


@pytest.mark.parametrize("content", ["{not json", None])
def test_invoke_reports_a_bad_event_clearly(
    tmp_path: Path, capsys: Any, monkeypatch: Any, content: str | None
) -> None:
    monkeypatch.chdir(ROOT)
    event = tmp_path / "event.json"
    if content is not None:
        event.write_text(content)
    status = _cli.main(["invoke", "ChargeOrderFunction", "--event", str(event)])
    assert status == 2
    assert "event" in capsys.readouterr().err
