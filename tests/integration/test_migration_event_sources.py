"""Powertools and us on one DynamoDB Local table when the event is no plain dict: an event
source data class from `@event_source` outside the idempotency decorator, a pydantic model
or a dataclass argument of `idempotent_function`. Both sides select keys and payloads from
the raw event (Powertools' `_prepare_data`), so each replays what the other completed and
validates the other's payload hash, in both directions (issue 24, item 5).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from aws_lambda_powertools.utilities.data_classes import event_source
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from aws_lambda_powertools.utilities.idempotency import (
    idempotent as pt_idempotent,
)
from aws_lambda_powertools.utilities.idempotency import (
    idempotent_function as pt_idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import IdempotencyValidationError

from lambda_idempotency import (
    DynamoDBStore,
    PayloadMismatchError,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeContext, local_client
from tests.source_events import CASES, SourceCase

runs: list[Any] = []


def handler(event: Any, context: Any) -> dict[str, Any]:
    runs.append(event)
    return {"run": len(runs)}


class Order(pydantic.BaseModel):
    id: str
    amount: float


@dataclasses.dataclass
class OrderRecord:
    id: str
    amount: float


def charge(order: Any) -> dict[str, Any]:
    runs.append(order)
    return {"run": len(runs)}


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    runs.clear()
    yield


@pytest.fixture
def table(dynamodb_local_endpoint: str) -> tuple[Any, str]:
    client = local_client(dynamodb_local_endpoint)
    name = f"powertools-{uuid.uuid4().hex[:12]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    return client, name


PAYLOADS = ["selected", "whole event"]
"""The case's payload expression, or the whole event (`@`: our default)."""


def payload_of(case: SourceCase, payload: str) -> str:
    return case.payload if payload == "selected" else "@"


def powertools_handler(table: tuple[Any, str], case: SourceCase, payload: str) -> Any:
    client, name = table
    layer = DynamoDBPersistenceLayer(table_name=name, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath=case.key, payload_validation_jmespath=payload_of(case, payload)
    )
    return event_source(
        pt_idempotent(persistence_store=layer, config=config)(handler), data_class=case.data_class
    )


def our_handler(table: tuple[Any, str], case: SourceCase, payload: str) -> Any:
    client, name = table
    store = DynamoDBStore(name, client=client, layout="powertools")
    if payload == "selected":
        protect = idempotent(store=store, key=case.key, payload=case.payload, cache_size=0)
    else:  # the default payload, "@"
        protect = idempotent(store=store, key=case.key, cache_size=0)
    return event_source(protect(handler), data_class=case.data_class)


def keys_in(table: tuple[Any, str]) -> set[str]:
    client, name = table
    return {item["id"]["S"] for item in client.scan(TableName=name)["Items"]}


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_we_replay_what_powertools_completed_for_a_data_class_event(
    table: tuple[Any, str], case: SourceCase, payload: str
) -> None:
    before = powertools_handler(table, case, payload)
    after = our_handler(table, case, payload)
    stored = before(case.build("o-1", 10), FakeContext())
    written = keys_in(table)

    assert after(case.build("o-1", 10), FakeContext()) == stored
    with pytest.raises(PayloadMismatchError):  # Powertools' validation hash, read by us
        after(case.build("o-1", 11), FakeContext())
    assert len(runs) == 1
    assert keys_in(table) == written  # the same record: byte-equal key


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_powertools_replays_what_we_completed_for_a_data_class_event(
    table: tuple[Any, str], case: SourceCase, payload: str
) -> None:
    before = our_handler(table, case, payload)
    after = powertools_handler(table, case, payload)
    stored = before(case.build("o-1", 10), FakeContext())
    written = keys_in(table)

    assert after(case.build("o-1", 10), FakeContext()) == stored
    with pytest.raises(IdempotencyValidationError):  # our validation hash, read by Powertools
        after(case.build("o-1", 11), FakeContext())
    assert len(runs) == 1
    assert keys_in(table) == written


def powertools_charge(table: tuple[Any, str]) -> Any:
    client, name = table
    layer = DynamoDBPersistenceLayer(table_name=name, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="amount")
    config.register_lambda_context(FakeContext())
    return pt_idempotent_function(
        data_keyword_argument="order", persistence_store=layer, config=config
    )(charge)


def our_charge(table: tuple[Any, str]) -> Any:
    client, name = table
    store = DynamoDBStore(name, client=client, layout="powertools")
    return idempotent_function(store=store, key="order.id", payload="order.amount", cache_size=0)(
        charge
    )


@pytest.mark.parametrize("model", [Order, OrderRecord], ids=["pydantic", "dataclass"])
@pytest.mark.parametrize("powertools_first", [True, False], ids=["powertools-first", "us-first"])
def test_a_model_argument_keys_the_same_record_for_both(
    table: tuple[Any, str], model: type[Any], powertools_first: bool
) -> None:
    pt, ours = powertools_charge(table), our_charge(table)
    before, after = (pt, ours) if powertools_first else (ours, pt)
    mismatch = PayloadMismatchError if powertools_first else IdempotencyValidationError

    stored = before(order=model(id="o-1", amount=10.5))
    written = keys_in(table)

    assert after(order=model(id="o-1", amount=10.5)) == stored
    with pytest.raises(mismatch):
        after(order=model(id="o-1", amount=11))
    assert len(runs) == 1
    assert keys_in(table) == written


@pytest.mark.parametrize("powertools_first", [True, False], ids=["powertools-first", "us-first"])
def test_a_parsed_model_event_keys_the_same_record_for_both(
    table: tuple[Any, str], powertools_first: bool
) -> None:
    """`@event_parser(model=...)` outside the decorator: the handler gets a pydantic model;
    both sides key and validate its JSON dump (the whole event as the payload)."""
    from aws_lambda_powertools.utilities.parser import event_parser

    client, name = table
    layer = DynamoDBPersistenceLayer(table_name=name, boto3_client=client)
    config = IdempotencyConfig(event_key_jmespath="id", payload_validation_jmespath="@")
    pt = event_parser(pt_idempotent(persistence_store=layer, config=config)(handler), model=Order)
    store = DynamoDBStore(name, client=client, layout="powertools")
    ours = event_parser(idempotent(store=store, key="id", cache_size=0)(handler), model=Order)
    before, after = (pt, ours) if powertools_first else (ours, pt)
    mismatch = PayloadMismatchError if powertools_first else IdempotencyValidationError

    stored = before({"id": "o-1", "amount": 10.5}, FakeContext())
    written = keys_in(table)

    assert after({"id": "o-1", "amount": 10.5}, FakeContext()) == stored
    with pytest.raises(mismatch):
        after({"id": "o-1", "amount": 11}, FakeContext())
    assert len(runs) == 1
    assert keys_in(table) == written
