"""`inspect`, `stuck` and `release` on a table of Powertools for AWS Lambda's idempotency
utility (`--layout powertools`), on DynamoDB Local: records the real Powertools wrote, found
by the raw key as its functions hash it, with a simple key and with a sort key."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from aws_lambda_powertools.utilities.idempotency import idempotent as pt_idempotent

from lambda_idempotency import DynamoDBStore, idempotent
from lambda_idempotency._dev import cli
from tests.conftest import FakeContext, local_client

runs: list[str] = []
"""Every run of the handler body: the effect we count."""


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    runs.append(event["order_id"])
    return {"charged": event["amount"], "run": len(runs)}


NAMESPACE = f"test-func.{__name__}.handler"
"""Powertools' own namespace for `handler` outside Lambda (no AWS_LAMBDA_FUNCTION_NAME)."""


class Table(NamedTuple):
    client: Any
    name: str
    sort_key_attr: str | None
    endpoint: str

    def powertools_handler(self, **config: Any) -> Any:
        layer = DynamoDBPersistenceLayer(
            table_name=self.name, sort_key_attr=self.sort_key_attr, boto3_client=self.client
        )
        config = IdempotencyConfig(event_key_jmespath="order_id", **config)
        return pt_idempotent(persistence_store=layer, config=config)(handler)

    def our_handler(self) -> Any:
        store = DynamoDBStore(
            self.name, client=self.client, layout="powertools", sort_key_attr=self.sort_key_attr
        )
        return idempotent(store=store, key="order_id", payload=None)(handler)

    def flags(self) -> list[str]:
        flags = ["--table", self.name, "--endpoint", self.endpoint, "--layout", "powertools"]
        return flags + (["--sort-key-attr", self.sort_key_attr] if self.sort_key_attr else [])

    def items(self) -> list[dict[str, Any]]:
        return list(self.client.scan(TableName=self.name, ConsistentRead=True)["Items"])


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    runs.clear()
    yield


@pytest.fixture(params=[None, "sk"], ids=["simple-key", "sort-key"])
def table(request: pytest.FixtureRequest, dynamodb_local_endpoint: str) -> Table:
    """A table as Powertools' docs create it: `id` (S), and a sort key when asked."""
    client = local_client(dynamodb_local_endpoint)
    name = f"powertools-cli-{uuid.uuid4().hex[:12]}"
    sort_key: str | None = request.param
    schema = [{"AttributeName": "id", "KeyType": "HASH"}]
    attributes = [{"AttributeName": "id", "AttributeType": "S"}]
    if sort_key is not None:
        schema.append({"AttributeName": sort_key, "KeyType": "RANGE"})
        attributes.append({"AttributeName": sort_key, "AttributeType": "S"})
    client.create_table(
        TableName=name,
        KeySchema=schema,
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
    )
    return Table(client, name, sort_key, dynamodb_local_endpoint)


def run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def by_key(order_id: str) -> list[str]:
    return ["--key", order_id, "--namespace", NAMESPACE]


def test_inspect_finds_a_powertools_record_by_its_raw_key_and_decodes_its_result(
    table: Table, capsys: Any
) -> None:
    table.powertools_handler()({"order_id": "o-1", "amount": 10}, FakeContext())

    status, out, err = run(capsys, "inspect", *table.flags(), *by_key("o-1"), "--result", "--json")

    assert (status, err) == (0, "")
    described = json.loads(out)
    assert described["status"] == "COMPLETED"
    assert described["result"] == {"charged": 10, "run": 1}
    assert described["pk"].startswith(f"{NAMESPACE}#")


def test_stuck_lists_a_powertools_claim_that_never_completed(table: Table, capsys: Any) -> None:
    layer = DynamoDBPersistenceLayer(
        table_name=table.name, sort_key_attr=table.sort_key_attr, boto3_client=table.client
    )
    config = IdempotencyConfig(event_key_jmespath="order_id")
    layer.configure(config, function_name=f"{__name__}.handler")
    layer.save_inprogress(data={"order_id": "o-2", "amount": 5}, remaining_time_in_millis=60_000)

    status, out, err = run(capsys, "stuck", *table.flags(), "--older-than", "0.0001", "--json")

    assert status == 0, err
    (found,) = json.loads(out)
    inspected = run(capsys, "inspect", *table.flags(), *by_key("o-2"), "--json")
    assert inspected[0] == 0
    assert found["pk"] == json.loads(inspected[1])["pk"]
    assert found["status"] == "IN_PROGRESS"


def test_release_lets_a_completed_powertools_key_run_again_for_both_libraries(
    table: Table, capsys: Any
) -> None:
    event = {"order_id": "o-3", "amount": 7}
    powertools = table.powertools_handler()
    powertools(event, FakeContext())
    assert powertools(event, FakeContext()) == {"charged": 7, "run": 1}  # a replay

    status, out, err = run(capsys, "release", *table.flags(), *by_key("o-3"), "--yes")

    assert status == 0, err
    assert "released" in out
    assert table.items() == []  # Powertools cannot read a tombstone: a conditional delete
    assert powertools(event, FakeContext()) == {"charged": 7, "run": 2}
    run(capsys, "release", *table.flags(), *by_key("o-3"), "--yes")
    assert table.our_handler()(event, FakeContext()) == {"charged": 7, "run": 3}
    assert runs == ["o-3"] * 3


def test_without_the_layout_the_powertools_record_is_not_found_and_nothing_is_written(
    table: Table, capsys: Any
) -> None:
    """What an operator who forgets --layout sees: DynamoDB refuses the native key on
    Powertools' `id` key schema, and the line names the options that fit."""
    table.powertools_handler()({"order_id": "o-4", "amount": 1}, FakeContext())
    native = [flag for flag in table.flags() if flag not in ("--layout", "powertools")]
    before = table.items()

    released = run(capsys, "release", *native, *by_key("o-4"), "--yes")
    inspected = run(capsys, "inspect", *native, *by_key("o-4"))

    for status, out, err in (released, inspected):
        assert (status, out) == (2, "")
        assert "--layout" in err and "doctor" in err
        assert len(err.strip().splitlines()) == 1
    assert table.items() == before


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--layout", "powertools", "--scope", "tenant-a"], "no scope"),
        (["--hash-function", "sha256"], "only for --layout powertools"),
        (["--layout", "powertools", "--hash-function", "nope"], "not in hashlib"),
    ],
)
def test_layout_options_that_cannot_apply_are_one_line_and_exit_2(
    dynamodb_local_endpoint: str, capsys: Any, flags: list[str], says: str
) -> None:
    where = ["--table", "any", "--endpoint", dynamodb_local_endpoint]

    status, out, err = run(capsys, "inspect", *where, *by_key("o-5"), *flags)

    assert (status, out) == (2, "")
    assert says in err
    assert len(err.strip().splitlines()) == 1
