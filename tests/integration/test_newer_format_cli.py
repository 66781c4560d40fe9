"""A record of a newer format (a newer version of the library on the same table, as in a
gradual deployment) as the commands show it: `invoke` names the outcome, `inspect` says
what it is in one readable sentence. Against DynamoDB Local, through the command itself."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev import cli
from lambda_idempotency._stores.record import FORMAT_VERSION
from tests.conftest import local_client
from tests.http_events import http_event

pytestmark = pytest.mark.dynamodb_local

ROOT = Path(__file__).resolve().parents[2]

APP = """
from lambda_idempotency import DynamoDBStore, idempotent_http


@idempotent_http(store=DynamoDBStore())
def handler(event, context):
    return {"statusCode": 201, "body": '{"id": "pay_1"}'}
"""


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def a_project(folder: Path, table: str) -> None:
    """One HTTP function on the table `table`."""
    (folder / "fn").mkdir()
    (folder / "fn" / "app.py").write_text(APP)
    (folder / "template.yaml").write_text(
        f"""
Resources:
  NewerTable:
    Type: AWS::DynamoDB::Table
    Properties:
      TableName: {table}
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions: [{{AttributeName: pk, AttributeType: S}}]
      KeySchema: [{{AttributeName: pk, KeyType: HASH}}]
  Layer:
    Type: AWS::Serverless::LayerVersion
    Properties:
      ContentUri: {ROOT / "layer"}
  Payer:
    Type: AWS::Serverless::Function
    Properties:
      Handler: app.handler
      CodeUri: fn
      Layers: [!Ref Layer]
      Environment:
        Variables:
          IDEMPOTENCY_TABLE: !Ref NewerTable
"""
    )


def made_newer(client: Any, table: str) -> str:
    """The table's one record rewritten as the next format would write it: its pk."""
    (record,) = client.scan(TableName=table)["Items"]
    record["fmt"] = {"N": str(FORMAT_VERSION + 1)}
    client.put_item(TableName=table, Item=record)
    return str(record["pk"]["S"])


@pytest.mark.timeout_scale(3)  # two invocations, each a fresh process
def test_invoke_and_inspect_say_what_a_newer_formats_record_is(
    dynamodb_local_endpoint: str, capsys: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    table = f"newer-{uuid.uuid4().hex[:8]}"
    a_project(tmp_path, table)
    monkeypatch.chdir(tmp_path)
    assert run(capsys, "create-table", "--endpoint", dynamodb_local_endpoint)[0] == 0
    event = tmp_path / "request.json"
    event.write_text(
        json.dumps(http_event("http-api", headers={"idempotency-key": "k-1"}, body="{}"))
    )
    invoke = ("invoke", "Payer", "--event", str(event), "--endpoint", dynamodb_local_endpoint)

    status, _, err = run(capsys, *invoke)
    assert status == 0 and err.splitlines()[-1] == "Payer: executed 201", err

    pk = made_newer(local_client(dynamodb_local_endpoint), table)
    status, out, err = run(capsys, *invoke)

    assert status == 0 and json.loads(out)["statusCode"] == 503
    # it was "Payer: no idempotency outcome"
    assert err.splitlines()[-1] == "Payer: not run 503 (newer_format)", err

    where = ("--table", table, "--endpoint", dynamodb_local_endpoint)
    status, out, err = run(capsys, "inspect", "--pk", pk, *where)

    assert status == 5 and out == ""
    # it was "... retry later, when the newer version ): this library does not write it so
    # (another version, a manual edit?); nothing was changed"
    assert err == (
        f"lambda-idempotency: record {pk} was written by a newer version of "
        f"lambda-idempotency (record format {FORMAT_VERSION + 1}; this version reads up to "
        f"{FORMAT_VERSION}): read it with that version's lambda-idempotency; nothing was "
        "changed\n"
    )
