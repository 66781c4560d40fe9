"""The operator commands when DynamoDB fails them (throttled, 5xx on every attempt, nothing
listening): one line and exit code 2 within seconds, as an operator waits for it, and nothing
written."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse

from lambda_idempotency import DynamoDBStore
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli import tables as cli_tables
from lambda_idempotency._dev.cli.records import now_ms
from lambda_idempotency._dev.dynamodb_local import free_port

COMMANDS = {
    "inspect": ("inspect", "--pk", "ns#k", "--result"),
    "stuck": ("stuck", "--older-than", "0"),
    "release": ("release", "--pk", "ns#k", "--yes", "--force"),
}


def answer(status: int, code: str) -> Any:
    body = json.dumps({"__type": f"com.amazonaws.dynamodb.v20120810#{code}", "message": "no"})

    class Body:
        def stream(self, **_: Any) -> Any:
            yield body.encode()

    def hook(request: Any, **_: Any) -> AWSResponse:
        headers: Any = {}
        return AWSResponse(request.url, status, headers, Body())

    return hook


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("fault", ["throttled", "5xx", "nothing listening"])
def test_a_failing_dynamodb_is_one_line_within_seconds(
    command: str,
    fault: str,
    store: DynamoDBStore,
    dynamodb_local_endpoint: str,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = now_ms()
    store.claim(
        "ns#k",
        owner="A",
        payload_hash=None,
        now_ms=now - 3_600_000,
        lease_until_ms=now - 3_000_000,
        expiration_s=now // 1000 + 3600,
    )
    before = store.get("ns#k")
    endpoint = dynamodb_local_endpoint
    if fault == "nothing listening":
        endpoint = f"http://127.0.0.1:{free_port()}"
    else:
        hook = answer(400, "ThrottlingException") if fault == "throttled" else answer(500, "Oops")
        build = cli_tables.store_for

        def failing_store(*args: Any, **kwargs: Any) -> DynamoDBStore:
            built = build(*args, **kwargs)
            built.client.meta.events.register("before-send.dynamodb", hook)
            return built

        monkeypatch.setattr(cli_tables, "store_for", failing_store)
    argv = [*COMMANDS[command], "--table", store.table_name, "--endpoint", endpoint]

    started = time.monotonic()
    status = cli.main(argv)
    took = time.monotonic() - started
    out, err = capsys.readouterr()

    assert status == 2 and out == "", (out, err)
    assert err.count("\n") == 1 and err.startswith("lambda-idempotency: "), err
    expected = {
        "throttled": "ThrottlingException",
        "5xx": "failed",
        "nothing listening": "cannot reach DynamoDB",
    }[fault]
    assert expected in err, err
    assert took < 10, took  # botocore's defaults for DynamoDB: 10 attempts, about 25 s
    assert store.get("ns#k") == before
