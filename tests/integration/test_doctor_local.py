"""`lambda-idempotency doctor` against DynamoDB Local: what it can answer is checked, what it
cannot (it has no DescribeContinuousBackups, no Application Auto Scaling) is reported as not
checked, never guessed and never a crash."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

from lambda_idempotency._dev import cli
from lambda_idempotency._dev.dynamodb_local import free_port
from lambda_idempotency._dev.local_tables import create_table
from lambda_idempotency._dev.template import Template
from tests.conftest import local_client

ROOT = Path(__file__).resolve().parents[2]


def doctor(capsys: Any, *argv: str) -> tuple[int, dict[str, str], str, str]:
    status = cli.main(["doctor", *argv])
    captured = capsys.readouterr()
    lines = {line[6:].split("  ")[0]: line for line in captured.out.splitlines()[1:-1]}
    return status, lines, captured.out, captured.err


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_a_right_table_passes_and_pitr_is_reported_as_not_checked(
    dynamodb_local_endpoint: str, capsys: Any
) -> None:
    client = local_client(dynamodb_local_endpoint)
    name = unique("doctor-right")
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        DeletionProtectionEnabled=True,
    )
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"}
    )

    status, lines, out, _ = doctor(capsys, name, "--endpoint", dynamodb_local_endpoint)

    assert status == 0, out
    for check in ("key schema", "TTL", "billing", "deletion protection", "Regions"):
        assert lines[check].startswith("ok"), out
    assert lines["point-in-time recovery"] == (
        "??    point-in-time recovery  not checked: this endpoint does not implement it "
        "(DynamoDB Local does not)"
    )
    assert out.splitlines()[-1] == (
        "no check failed; 1 not checked (point-in-time recovery): exit 0"
    )


def test_the_templates_table_as_created_locally_passes(
    dynamodb_local_endpoint: str, capsys: Any
) -> None:
    """`local` and `create-table` create it with the template's deletion protection (once
    left off, so doctor failed on the table `local` had just made)."""
    spec = Template(ROOT / "template.yaml").idempotency_table()
    table = dataclasses.replace(spec, name=unique("doctor-template"))
    create_table(local_client(dynamodb_local_endpoint), table)

    status, lines, out, _ = doctor(capsys, table.name, "--endpoint", dynamodb_local_endpoint)

    assert status == 0, out
    for check in ("key schema", "TTL", "billing", "deletion protection", "Regions"):
        assert lines[check].startswith("ok"), out
    assert out.splitlines()[-1] == (
        "no check failed; 1 not checked (point-in-time recovery): exit 0"
    )


def test_a_wrong_table_fails_each_way_it_is_wrong(
    dynamodb_local_endpoint: str, capsys: Any
) -> None:
    """Powertools' key, provisioned, TTL on another attribute, no deletion protection."""
    client = local_client(dynamodb_local_endpoint)
    name = unique("doctor-wrong")
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
    )
    client.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "ttl"}
    )

    status, lines, out, _ = doctor(capsys, name, "--endpoint", dynamodb_local_endpoint)

    assert status == 1
    assert (
        "partition key id (S); the native layout needs partition key pk (S)"
        in (lines["key schema"])
    )
    assert "on ttl, but the store writes its expiry to expiration" in lines["TTL"]
    assert lines["billing"].startswith("warn  billing                 provisioned, 5 WCU, write")
    assert (
        "auto scaling not checked (a local endpoint has no Application Auto Scaling)"
        in (lines["billing"])
    )
    assert out.splitlines()[-1] == (
        "3 failed (key schema, TTL, deletion protection); 1 warning (billing); "
        "1 not checked (point-in-time recovery): exit 1"
    )

    status, lines, out, _ = doctor(
        capsys, name, "--endpoint", dynamodb_local_endpoint, "--layout", "powertools"
    )
    assert lines["key schema"].startswith("ok"), out


def test_no_dynamodb_at_the_endpoint_is_one_line_with_how_to_start_one(capsys: Any) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"

    status, _, out, err = doctor(capsys, "AnyTable", "--endpoint", endpoint)

    assert status == 2 and out == ""
    port = endpoint.rsplit(":", 1)[1]
    assert err == (
        f"lambda-idempotency: cannot reach DynamoDB at {endpoint}: start one with "
        f"`lambda-idempotency local --port {port}`\n"
    )


def test_a_missing_table_names_the_tables_there(dynamodb_local_endpoint: str, capsys: Any) -> None:
    status, _, _, err = doctor(capsys, "no-such-table", "--endpoint", dynamodb_local_endpoint)

    assert status == 2
    assert err.startswith(
        f"lambda-idempotency: no table no-such-table at {dynamodb_local_endpoint}"
    )
    assert "name one of them with TABLE" in err
