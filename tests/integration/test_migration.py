"""Powertools for AWS Lambda and us on one DynamoDB Local table, both directions.

The same functions are decorated by the real Powertools utility and by us with
`DynamoDBStore(layout="powertools")` (same module and qualname, same key and payload
expressions), as in a deployment that switches decorators over a table full of records.
Every scenario runs on a table with a simple key and on one with a sort key.
"""

from __future__ import annotations

import decimal
import uuid
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest
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
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from lambda_idempotency import (
    DynamoDBStore,
    InProgressError,
    PayloadMismatchError,
    ReplayInfo,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeClock, FakeContext, local_client

# -- the functions both libraries decorate --------------------------------------------------

runs: list[Any] = []
"""Every run of a handler body: the effect we count."""
inside: list[Callable[[], Any]] = []
"""Called once from inside the next handler run: another caller arriving mid-flight."""
results: list[Any] = []
"""What the next handler runs return (default: a charge receipt)."""


def handler(event: dict[str, Any], context: Any) -> Any:
    runs.append(event)
    if inside:
        inside.pop()()
    return results.pop(0) if results else {"charged": event["amount"], "run": len(runs)}


def charge(order: dict[str, Any]) -> Any:
    runs.append(order)
    if inside:
        inside.pop()()
    return results.pop(0) if results else {"charged": order["amount"], "run": len(runs)}


@pytest.fixture(autouse=True)
def _fresh_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    runs.clear()
    inside.clear()
    results.clear()
    yield
    assert not inside, "a scenario's mid-flight caller never ran"


class Table(NamedTuple):
    client: Any
    name: str
    sort_key_attr: str | None

    def powertools(self, **config: Any) -> tuple[DynamoDBPersistenceLayer, IdempotencyConfig]:
        layer = DynamoDBPersistenceLayer(
            table_name=self.name, sort_key_attr=self.sort_key_attr, boto3_client=self.client
        )
        return layer, IdempotencyConfig(**config)

    def ours(self) -> DynamoDBStore:
        return DynamoDBStore(
            self.name, client=self.client, layout="powertools", sort_key_attr=self.sort_key_attr
        )

    def items(self) -> list[dict[str, Any]]:
        return list(self.client.scan(TableName=self.name, ConsistentRead=True)["Items"])


@pytest.fixture(params=[None, "sk"], ids=["simple-key", "sort-key"])
def table(request: pytest.FixtureRequest, dynamodb_local_endpoint: str) -> Table:
    """A table as Powertools' docs create it: `id` (S), and a sort key when asked."""
    client = local_client(dynamodb_local_endpoint)
    name = f"powertools-{uuid.uuid4().hex[:12]}"
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
    return Table(client, name, sort_key)


def pt_handler(table: Table, **config: Any) -> Any:
    layer, cfg = table.powertools(event_key_jmespath="order_id", **config)
    return pt_idempotent(persistence_store=layer, config=cfg)(handler)


def our_handler(table: Table, **options: Any) -> Any:
    options.setdefault("payload", None)
    return idempotent(store=table.ours(), key="order_id", **options)(handler)


def pt_function(table: Table, **config: Any) -> Any:
    layer, cfg = table.powertools(event_key_jmespath="id", **config)
    cfg.register_lambda_context(FakeContext())  # as Powertools' docs ask, for a lease
    return pt_idempotent_function(
        data_keyword_argument="order", persistence_store=layer, config=cfg
    )(charge)


def our_function(table: Table, **options: Any) -> Any:
    options.setdefault("payload", None)
    return idempotent_function(store=table.ours(), key="order.id", **options)(charge)


# -- Powertools first, then us ---------------------------------------------------------------


def test_we_replay_every_completed_powertools_handler_record(table: Table) -> None:
    before, after = pt_handler(table), our_handler(table, cache_size=0)
    events = [{"order_id": f"o-{i}", "amount": i} for i in range(3)]
    results.extend([{"charged": 0, "run": 1}, {}, None])  # falsy results too
    stored = [before(event, FakeContext()) for event in events]

    replayed = [after(event, FakeContext()) for event in events]

    assert replayed == stored == [{"charged": 0, "run": 1}, {}, None]
    assert len(runs) == 3  # no effect ran again
    assert len(table.items()) == 3


def test_we_replay_completed_powertools_function_records(table: Table) -> None:
    before, after = pt_function(table), our_function(table)
    order = {"id": "o-1", "amount": decimal.Decimal("10.50")}

    stored = before(order=order)
    replayed = after(order=order)

    # Powertools stored the Decimal as a string (its encoder): that is what it replays too.
    assert stored == {"charged": decimal.Decimal("10.50"), "run": 1}
    assert replayed == {"charged": "10.50", "run": 1}
    assert len(runs) == 1


def test_a_new_key_runs_under_our_decorator_in_powertools_format(table: Table) -> None:
    pt_handler(table)({"order_id": "o-1", "amount": 1}, FakeContext())

    ours = our_handler(table)({"order_id": "o-2", "amount": 2}, FakeContext())

    assert ours == {"charged": 2, "run": 2}
    by_key = {item.get("sk", item["id"])["S"]: item for item in table.items()}
    assert len(by_key) == 2
    for key, item in by_key.items():
        assert key.startswith(f"test-func.{__name__}.handler#")
        assert item["status"]["S"] == "COMPLETED"
        assert set(item) >= {"expiration", "data"}


def test_we_validate_payloads_against_powertools_validation_hash(table: Table) -> None:
    before = pt_handler(table, payload_validation_jmespath="amount")
    after = our_handler(table, payload="amount", cache_size=0)
    before({"order_id": "o-1", "amount": 10}, FakeContext())

    with pytest.raises(PayloadMismatchError):
        after({"order_id": "o-1", "amount": 11}, FakeContext())
    assert after({"order_id": "o-1", "amount": 10}, FakeContext()) == {"charged": 10, "run": 1}
    assert len(runs) == 1


def test_function_payloads_validate_across_libraries(table: Table) -> None:
    before = pt_function(table, payload_validation_jmespath="amount")
    after = our_function(table, payload="order.amount")
    before(order={"id": "o-1", "amount": 10})

    with pytest.raises(PayloadMismatchError):
        after(order={"id": "o-1", "amount": 11})
    assert after(order={"id": "o-1", "amount": 10}) == {"charged": 10, "run": 1}
    assert len(runs) == 1


def test_we_refuse_a_live_powertools_claim(table: Table) -> None:
    before, after = pt_handler(table), our_handler(table)
    event = {"order_id": "o-1", "amount": 10}
    refused: list[InProgressError] = []

    def arrive_mid_flight() -> None:
        with pytest.raises(InProgressError) as caught:
            after(event, FakeContext())
        refused.append(caught.value)

    inside.append(arrive_mid_flight)
    before(event, FakeContext(remaining_ms=20_000))

    assert len(runs) == 1
    assert 1 <= refused[0].retry_after <= 23  # the Powertools lease, plus our skew allowance
    assert after(event, FakeContext()) == {"charged": 10, "run": 1}


def test_we_take_over_a_lapsed_powertools_claim_but_not_before(table: Table) -> None:
    """A Powertools claim with `in_progress_expiration` frees when that passes (and our
    skew allowance); our FakeClock moves our time, Powertools' record stays as written."""
    layer, config = table.powertools(event_key_jmespath="order_id")
    layer.configure(config, function_name=f"{__name__}.handler")
    event = {"order_id": "o-1", "amount": 10}
    layer.save_inprogress(data=event, remaining_time_in_millis=30_000)
    clock = FakeClock()
    after = our_handler(table, clock=clock)

    clock.advance(30 + 1.5)  # lapsed, but not on a clock 2 s behind ours
    with pytest.raises(InProgressError):
        after(event, FakeContext(clock=clock))
    clock.advance(1)

    assert after(event, FakeContext(clock=clock)) == {"charged": 10, "run": 1}


@pytest.mark.filterwarnings("ignore:Couldn't determine the remaining time left")
def test_a_powertools_claim_without_a_lease_holds_until_its_expiration(table: Table) -> None:
    """Powertools' idempotent_function without a registered context writes no
    in_progress_expiration: it holds the key until `expiration`, for us as for Powertools."""
    layer, config = table.powertools(event_key_jmespath="id", expires_after_seconds=600)
    layer.configure(config, function_name=f"{__name__}.charge")
    order = {"id": "o-1", "amount": 10}
    layer.save_inprogress(data=order)
    clock = FakeClock()
    after = our_function(table, clock=clock)

    clock.advance(590)
    with pytest.raises(InProgressError) as refused:
        after(order=order)
    assert 10 <= refused.value.retry_after <= 13  # until its expiration, not "1 s"
    assert runs == []
    clock.advance(13)

    assert after(order=order) == {"charged": 10, "run": 1}


# -- us first, then Powertools (a rollback) ---------------------------------------------------


def test_powertools_replays_what_we_stored(table: Table) -> None:
    before, after = our_handler(table), pt_handler(table)
    results.extend([{"charged": 10, "items": ["a", "é"]}, {}])
    first = before({"order_id": "o-1", "amount": 10}, FakeContext())
    empty = before({"order_id": "o-2", "amount": 0}, FakeContext())

    assert after({"order_id": "o-1", "amount": 10}, FakeContext()) == first
    # Powertools' own quirk: it replays a falsy result ({} here) as None. It does not run it.
    assert empty == {}
    assert after({"order_id": "o-2", "amount": 0}, FakeContext()) is None
    assert len(runs) == 2


def test_powertools_replays_a_result_of_many_kilobytes_we_stored(table: Table) -> None:
    """On Powertools' table the result stays in the record, where Powertools reads it: only
    our own layout moves a result past 1 KB to items of its own."""
    before, after = our_handler(table), pt_handler(table)
    results.append({"lines": [f"line {n}: {uuid.uuid4().hex}" for n in range(3_000)]})
    first = before({"order_id": "o-1", "amount": 10}, FakeContext())

    assert after({"order_id": "o-1", "amount": 10}, FakeContext()) == first
    assert len(runs) == 1


def test_powertools_replays_our_function_records(table: Table) -> None:
    before, after = our_function(table), pt_function(table)
    results.append({"charged": decimal.Decimal("1.10"), "at": b"\x00raw"})
    results.append({"charged": decimal.Decimal("2.20")})

    assert before(order={"id": "o-1", "amount": 1}) == {
        "charged": decimal.Decimal("1.10"),
        "at": b"\x00raw",
    }
    before(order={"id": "o-2", "amount": 2})

    # bytes: Powertools could never store it; it sees a completed record with no data (None).
    assert after(order={"id": "o-1", "amount": 1}) is None
    # Decimal: stored as Powertools itself would have (a string), and exactly for us.
    assert after(order={"id": "o-2", "amount": 2}) == {"charged": "2.20"}
    assert our_function(table)(order={"id": "o-2", "amount": 2}) == {
        "charged": decimal.Decimal("2.20")
    }
    assert len(runs) == 2


def test_powertools_validates_payloads_we_stored(table: Table) -> None:
    before = our_function(table, payload="order.amount")
    after = pt_function(table, payload_validation_jmespath="amount")
    before(order={"id": "o-1", "amount": 10})

    with pytest.raises(IdempotencyValidationError):
        after(order={"id": "o-1", "amount": 11})
    assert after(order={"id": "o-1", "amount": 10}) == {"charged": 10, "run": 1}
    assert len(runs) == 1


def test_powertools_refuses_our_live_claims(table: Table) -> None:
    before, after = our_handler(table), pt_handler(table)
    event = {"order_id": "o-1", "amount": 10}

    def arrive_mid_flight() -> None:
        with pytest.raises(IdempotencyAlreadyInProgressError):
            after(event, FakeContext())

    inside.append(arrive_mid_flight)
    assert before(event, FakeContext()) == {"charged": 10, "run": 1}
    assert after(event, FakeContext()) == {"charged": 10, "run": 1}
    assert len(runs) == 1


def test_powertools_refuses_our_live_function_claims(table: Table) -> None:
    before, after = our_function(table), pt_function(table)

    def arrive_mid_flight() -> None:
        with pytest.raises(IdempotencyAlreadyInProgressError):
            after(order={"id": "o-1", "amount": 10})

    inside.append(arrive_mid_flight)
    before(order={"id": "o-1", "amount": 10})
    assert len(runs) == 1


def test_our_completion_stays_fenced_when_powertools_took_a_lapsed_lease(table: Table) -> None:
    """Our claim is written with a lease already over in real time (our clock is behind):
    Powertools takes the key over mid-run, and our late completion must not overwrite it."""
    clock = FakeClock()
    clock.advance(-120)
    before, after = our_handler(table, clock=clock), pt_handler(table)
    event = {"order_id": "o-1", "amount": 10}
    inside.append(lambda: after(event, FakeContext()))
    results.extend([{"winner": "powertools"}, {"winner": "ours"}])  # the inner run ends first

    assert before(event, FakeContext(remaining_ms=5_000, clock=clock)) == {"winner": "ours"}

    assert before.idempotency.stats["lease_lost"] == 1
    assert after(event, FakeContext()) == {"winner": "powertools"}
    assert our_handler(table)(event, FakeContext()) == {"winner": "powertools"}


def test_our_release_frees_the_key_for_powertools(table: Table) -> None:
    def failing(event: dict[str, Any], context: Any) -> Any:
        runs.append(event)
        raise RuntimeError("declined")

    failing.__qualname__ = handler.__qualname__
    before = idempotent(store=table.ours(), key="order_id", payload=None)(failing)
    event = {"order_id": "o-1", "amount": 10}
    with pytest.raises(RuntimeError):
        before(event, FakeContext())

    assert table.items() == []  # no tombstone in this layout: Powertools could not read one
    assert pt_handler(table)(event, FakeContext()) == {"charged": 10, "run": 2}


def test_on_replay_tells_a_powertools_replay_apart(table: Table) -> None:
    pt_handler(table)({"order_id": "o-1", "amount": 1}, FakeContext())
    our_handler(table)({"order_id": "o-2", "amount": 2}, FakeContext())
    seen: list[ReplayInfo] = []

    def note(result: Any, info: ReplayInfo) -> Any:
        seen.append(info)
        return {**result, "replayed": True}

    after = our_handler(table, on_replay=note)
    assert after({"order_id": "o-1", "amount": 1}, FakeContext())["replayed"] is True
    after({"order_id": "o-2", "amount": 2}, FakeContext())

    assert [info.completed_at is None for info in seen] == [True, False]  # Powertools: none
    assert [info.source for info in seen] == ["store", "store"]
    assert all(info.key_hash.startswith(f"test-func.{__name__}.handler#") for info in seen)


def test_function_name_and_key_prefix_are_part_of_the_key_for_both(
    table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    layer, config = table.powertools(event_key_jmespath="order_id")
    pt_idempotent(persistence_store=layer, config=config, key_prefix="charges")(handler)(
        {"order_id": "o-1", "amount": 1}, FakeContext()
    )
    pt_handler(table)({"order_id": "o-2", "amount": 2}, FakeContext())

    ours = table.ours()
    prefixed = idempotent(store=ours, key="order_id", payload=None, namespace="charges")(handler)
    assert prefixed({"order_id": "o-1", "amount": 1}, FakeContext()) == {"charged": 1, "run": 1}
    assert our_handler(table)({"order_id": "o-2", "amount": 2}, FakeContext())["run"] == 2
    assert len(runs) == 2
    if table.sort_key_attr is not None:
        assert {item["id"]["S"] for item in table.items()} == {"idempotency#orders"}
