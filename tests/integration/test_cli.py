"""The `lambda-idempotency` command against DynamoDB Local: local runs and operator commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import DynamoDBStore, _keys, idempotent
from lambda_idempotency._dev import cli
from tests.conftest import local_client

ROOT = Path(__file__).resolve().parents[2]
EVENTS = ROOT / "events" / "charge_order"


@pytest.fixture
def fresh_tables(dynamodb_local_endpoint: str, monkeypatch: Any) -> Any:
    """The template's tables, empty, on the shared DynamoDB Local."""
    monkeypatch.chdir(ROOT)
    client = local_client(dynamodb_local_endpoint)
    for name in ("IdempotencyTable", "ChargesTable"):
        if name in client.list_tables()["TableNames"]:
            client.delete_table(TableName=name)
    return client


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_create_table_as_the_template_defines_it(
    fresh_tables: Any, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, out, _ = run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)

    assert status == 0
    assert "table IdempotencyTable created, TTL on expiration" in out
    ttl = fresh_tables.describe_time_to_live(TableName="IdempotencyTable")
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expiration"
    schema = fresh_tables.describe_table(TableName="IdempotencyTable")["Table"]["KeySchema"]
    assert schema == [{"AttributeName": "pk", "KeyType": "HASH"}]
    status, out, _ = run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    assert "already exists" in out


def test_invoke_each_sample_event_prints_the_response(
    fresh_tables: Any, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)
    responses = []
    for event in sorted(EVENTS.glob("*.json")):
        status, out, _ = run(
            capsys,
            "invoke",
            "ChargeOrderFunction",
            "-e",
            str(event),
            "--endpoint",
            dynamodb_local_endpoint,
        )
        responses.append((status, json.loads(out)))

    (s1, first), (s2, retry), (s3, mismatch), (s4, missing) = responses
    assert (s1, s2, s3, s4) == (0, 0, 1, 1)
    assert first["status"] == "charged" and retry == first
    assert mismatch["errorType"] == "PayloadMismatchError"
    assert missing["errorType"] == "KeyMissingError"


def completed_and_stuck_records(store: DynamoDBStore) -> tuple[str, str, str]:
    """One completed record (by the decorator), one IN_PROGRESS claimed an hour ago, one
    IN_PROGRESS claimed just now."""

    @idempotent(store=store, key="order_id", namespace="Charge.app.handler")
    def handler(event: dict[str, Any], context: Any) -> dict[str, str]:
        return {"charged": event["order_id"]}

    handler({"order_id": "o-1"}, None)
    completed = _keys.key_hash("Charge.app.handler", None, "o-1")
    now = cli._now_ms()
    old, fresh = "ns#old-stuck", "ns#fresh"
    for pk, claimed in ((old, now - 3_600_000), (fresh, now)):
        store.claim(
            pk,
            owner="o",
            payload_hash=None,
            now_ms=claimed,
            lease_until_ms=claimed + 900_000,
            expiration_s=now // 1000 + 3600,
        )
    return completed, old, fresh


def test_inspect_by_raw_key_and_by_pk(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    completed, old, _ = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, _ = run(
        capsys, "inspect", *where, "--key", "o-1", "--namespace", "Charge.app.handler"
    )
    assert status == 0
    assert "COMPLETED" in out and completed in out and "bytes stored" in out

    status, out, _ = run(capsys, "inspect", *where, "--pk", old, "--json")
    described = json.loads(out)
    assert described["status"] == "IN_PROGRESS"
    assert 3590 < described["age_s"] < 3700
    assert described["lease_left_s"] < 0  # claimed an hour ago with a 15-minute lease


def test_inspect_missing_record_and_missing_table(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, _, err = run(
        capsys,
        "inspect",
        "--table",
        store.table_name,
        "--endpoint",
        dynamodb_local_endpoint,
        "--pk",
        "nope",
    )
    assert status == 2 and "no record nope" in err

    status, _, err = run(
        capsys,
        "inspect",
        "--table",
        "no-such-table",
        "--endpoint",
        dynamodb_local_endpoint,
        "--pk",
        "x",
    )
    assert status == 2
    assert "ResourceNotFoundException" in err and "does not exist" in err
    assert "Traceback" not in err


def test_stuck_lists_old_in_progress_records_with_progress_and_cost(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    _, old, fresh = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint)

    status, out, err = run(capsys, "stuck", *where, "--older-than", "10", "--page-size", "1")

    assert status == 0
    assert old in out and fresh not in out
    assert "1 IN_PROGRESS records claimed over 10 min ago" in out
    assert "scanned 3 items in" in err and "read cost:" in err

    status, out, err = run(
        capsys, "stuck", *where, "--older-than", "10", "--page-size", "1", "--max-pages", "1"
    )
    assert "stopped at --max-pages" in err


def test_release_needs_yes(store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any) -> None:
    _, old, _ = completed_and_stuck_records(store)
    where = ("--table", store.table_name, "--endpoint", dynamodb_local_endpoint, "--pk", old)

    status, out, err = run(capsys, "release", *where)
    assert status == 2 and "--yes" in err and "IN_PROGRESS" in out
    assert store.get(old) is not None

    status, out, _ = run(capsys, "release", *where, "--yes")
    assert status == 0 and f"released {old}" in out
    assert store.get(old) is None


def test_operator_commands_need_a_record_name(
    store: DynamoDBStore, dynamodb_local_endpoint: str, capsys: Any
) -> None:
    status, _, err = run(
        capsys, "inspect", "--table", store.table_name, "--endpoint", dynamodb_local_endpoint
    )
    assert status == 2 and "--pk PK, or --key KEY with --namespace" in err


def test_no_credentials_is_one_clear_line(capsys: Any, monkeypatch: Any, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv(
        "AWS_EC2_METADATA_DISABLED", "true"
    )  # never ask an instance metadata service
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)

    status, _, err = run(capsys, "inspect", "--table", "t", "--region", "eu-west-1", "--pk", "x")

    assert status == 2
    assert "no AWS credentials" in err and "Traceback" not in err


def test_invoke_against_moto_server(capsys: Any, monkeypatch: Any) -> None:
    from moto.server import ThreadedMotoServer

    from lambda_idempotency._dev.dynamodb_local import free_port

    monkeypatch.chdir(ROOT)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        assert run(capsys, "create-table", "--endpoint", endpoint)[0] == 0
        event = str(EVENTS / "01-first-call.json")
        first = run(capsys, "invoke", "ChargeOrderFunction", "-e", event, "--endpoint", endpoint)
        retry = run(capsys, "invoke", "ChargeOrderFunction", "-e", event, "--endpoint", endpoint)
    finally:
        server.stop()
    assert first[0] == retry[0] == 0
    assert json.loads(first[1]) == json.loads(retry[1])
    assert json.loads(first[1])["status"] == "charged"
