"""The decorators on moto: selection, validation, results, policies, failures, logs."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import typing
from typing import Any

import pytest

import lambda_idempotency
from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    KeyMissingError,
    NoActiveExecutionError,
    PayloadMismatchError,
    ResultNotSerializableError,
    StoreError,
    current_execution,
    idempotent,
    idempotent_function,
)
from tests.conftest import FakeClock, FakeContext, RoundTrips
from tests.unit.models import Payment


def items(store: DynamoDBStore) -> list[dict[str, Any]]:
    return store.client.scan(TableName=store.table_name)["Items"]  # type: ignore[no-any-return]


def live_items(store: DynamoDBStore) -> list[dict[str, Any]]:
    """Items that hold a key: a release leaves only a tombstone, which holds nothing."""
    return [item for item in items(store) if item["status"]["S"] != "RELEASED"]


# -- keys, payloads, scopes --------------------------------------------------------------


def test_missing_key_raises_and_nothing_runs_or_is_stored(moto_store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="order_id")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "ok"

    for event in ({}, {"order_id": None}, {"order_id": ""}, {"order_id": []}):
        with pytest.raises(KeyMissingError):
            handler(event, None)
    assert runs == []
    assert items(moto_store) == []


def test_optional_key_runs_unprotected_each_time(moto_store: DynamoDBStore, caplog: Any) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="order_id", key_required=False)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with caplog.at_level(logging.WARNING, logger="lambda_idempotency"):
        assert [handler({}, None), handler({}, None)] == [1, 2]
    assert items(moto_store) == []
    assert "unprotected" in caplog.text


def test_powertools_jmespath_functions_select_inside_a_json_body(moto_store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent(
        store=moto_store, key="powertools_json(body).order.id", payload="powertools_json(body)"
    )
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    # Same JSON in another key order and spacing: same key, same payload.
    assert handler({"body": '{"order": {"id": "o-1", "amount": 5}}'}, None) == 1
    assert handler({"body": '{ "order": { "amount": 5, "id": "o-1" } }'}, None) == 1
    with pytest.raises(PayloadMismatchError):
        handler({"body": '{"order": {"id": "o-1", "amount": 6}}'}, None)


def test_callable_selectors(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key=lambda event: event["a"] + event["b"], payload=None)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        return event

    assert handler({"a": "x", "b": "y", "n": 1}, None) == {"a": "x", "b": "y", "n": 1}
    assert handler({"a": "x", "b": "y", "n": 2}, None) == {
        "a": "x",
        "b": "y",
        "n": 1,
    }  # no validation


def test_scope_keeps_tenants_apart(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="key", scope="tenant", payload="amount")
    def handler(event: dict[str, Any], context: Any) -> str:
        return f"{event['tenant']}:{event['amount']}"

    assert handler({"key": "k", "tenant": "A", "amount": 1}, None) == "A:1"
    assert (
        handler({"key": "k", "tenant": "B", "amount": 2}, None) == "B:2"
    )  # no mismatch, no replay
    assert len(items(moto_store)) == 2


def test_invalid_configuration_fails_at_decoration() -> None:
    store = DynamoDBStore("t")
    with pytest.raises(ConfigurationError, match="not valid JMESPath"):
        idempotent(store=store, key="order[")(lambda event, context: None)
    with pytest.raises(ConfigurationError, match="ttl_seconds"):
        idempotent(store=store, key="id", ttl_seconds=0)(lambda event, context: None)
    ten_years = 10 * 365 * 86_400  # the longest a result replays; past it a unit mistaken
    idempotent(store=store, key="id", ttl_seconds=ten_years)(lambda event, context: None)
    with pytest.raises(ConfigurationError, match=r"ttl_seconds.*at most 315,360,000"):
        idempotent(store=store, key="id", ttl_seconds=ten_years + 1)(lambda event, context: None)
    with pytest.raises(ConfigurationError, match="on_in_progress"):
        idempotent(store=store, key="id", on_in_progress="block")(lambda event, context: None)  # type: ignore[typeddict-item]


def test_store_needs_a_table_name_by_its_first_use(monkeypatch: Any) -> None:
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    store = DynamoDBStore()  # a module-level store imports without one
    with pytest.raises(ConfigurationError, match="IDEMPOTENCY_TABLE"):
        store.get("any-key")
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "from-env")
    assert DynamoDBStore().table_name == "from-env"


# -- results ---------------------------------------------------------------------------


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int


@dataclasses.dataclass
class Receipt:
    order_id: str
    lines: list[Line]
    note: str | None = None


def test_dataclass_results_are_rehydrated_on_replay(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="order_id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Receipt:
        return Receipt(event["order_id"], [Line("sku-1", 2)])

    first = handler({"order_id": "o-1"}, None)
    replay = handler({"order_id": "o-1"}, None)
    assert replay == first
    assert isinstance(replay, Receipt) and isinstance(replay.lines[0], Line)
    assert handler.idempotency.stats["replayed"] == 1


def test_pydantic_results_are_rehydrated_on_replay(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Payment:
        return Payment(id=event["id"], amount=3)

    assert handler({"id": "p"}, None) == handler({"id": "p"}, None) == Payment(id="p", amount=3)
    assert handler.idempotency.stats["replayed"] == 1


@pytest.mark.parametrize("value", [0, "", {}, [], None, False, 0.5])
def test_falsy_results_replay_as_themselves(moto_store: DynamoDBStore, value: Any) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return value

    assert handler({"id": 1}, None) == value
    replay = handler({"id": 1}, None)
    assert replay == value and type(replay) is type(value)
    assert runs == [1]


def test_unserializable_result_completes_the_key_and_retries_get_its_type(
    moto_store: DynamoDBStore,
) -> None:
    """The handler ran: releasing the key would run its effect again on the retry."""

    class Opaque:
        pass

    runs: list[int] = []

    @idempotent(store=moto_store, key="id")
    def handler(event: dict[str, Any], context: Any) -> Any:
        runs.append(1)
        return {"thing": Opaque()}

    assert isinstance(handler({"id": 1}, None)["thing"], Opaque)
    with pytest.raises(ResultNotSerializableError, match="Opaque"):
        handler({"id": 1}, None)
    assert runs == [1]
    assert [item["status"]["S"] for item in items(moto_store)] == ["COMPLETED"]


def test_100kb_json_result_is_stored_in_at_most_25kb(moto_store: DynamoDBStore) -> None:
    rows = [
        {"id": n, "sku": f"SKU-{n % 97:04d}", "name": f"item {n}", "price_cents": (n * 37) % 10_000}
        for n in range(1_600)
    ]
    document = json.dumps(rows)
    assert len(document) >= 100_000

    @idempotent(store=moto_store, key="id")
    def handler(event: dict[str, Any], context: Any) -> Any:
        return rows

    handler({"id": 1}, None)
    stored = items(moto_store)[0]["result"]["B"]
    assert len(stored) <= 25_000


def stored_as(size: int) -> str:
    """A string whose stored form (packed, compressed when that is smaller) is exactly
    `size` bytes: random base64 text, cut to length."""
    import base64
    import random

    from lambda_idempotency._stores.encoding import encode

    text = base64.b64encode(random.Random(13).randbytes(size)).decode()
    low, high = 0, len(text)
    while low < high:  # the shortest prefix stored in `size` bytes or more
        middle = (low + high) // 2
        if len(encode(text[:middle]).blob) < size:
            low = middle + 1
        else:
            high = middle
    assert len(encode(text[:low]).blob) == size
    return text[:low]


@pytest.mark.parametrize(("extra", "own_items"), [(0, 0), (1, 1)])
def test_a_result_that_fits_a_1_kb_record_stays_in_it(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch, extra: int, own_items: int
) -> None:
    """A stored result of exactly the room a 1 KB record leaves stays in its record (one item,
    replayed from the refused claim); a byte more goes to an item of its own. Either way it
    replays as itself."""
    limits: list[int] = []
    inline_limit = moto_store.inline_limit

    def spied(pk: str, **options: Any) -> int:
        limits.append(inline_limit(pk, **options))
        return limits[-1]

    monkeypatch.setattr(moto_store, "inline_limit", spied)
    results: dict[int, Any] = {0: "a probe: every key of this handler has the same room"}

    @idempotent(store=moto_store, key="id", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        return results[event["id"]]

    handler({"id": 0}, None)
    assert 600 < limits[0] < 1024
    results[1] = stored_as(limits[0] + extra)
    handler({"id": 1}, None)

    assert len(items(moto_store)) == 2 + own_items
    assert handler({"id": 1}, None) == results[1]


def test_a_zombies_large_result_never_replaces_the_new_owners(moto_store: DynamoDBStore) -> None:
    """Our lease lapses mid-handler and a retry takes the key over, runs and stores its large
    (chunked) result; then we finish and write our chunks too. Chunks are keyed by their
    writer's claim, so ours land beside the new owner's, never over them: its result replays."""
    import os

    clock = FakeClock()
    results = iter([{"blob": os.urandom(400_000).hex()} for _ in range(2)])
    new_owners: list[Any] = []

    @idempotent(store=moto_store, key="id", lease_seconds=1, clock=clock, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> Any:
        result = next(results)
        if event.get("zombie"):
            clock.advance(5)  # our lease lapses (skew included) and a retry takes over
            new_owners.append(handler({"id": event["id"]}, None))
        return result

    zombie = handler({"id": 1, "zombie": True}, None)  # completes fenced out: lease lost
    assert new_owners and zombie != new_owners[0]
    assert handler({"id": 1}, None) == new_owners[0]  # the new owner's, from its chunks


@pytest.mark.parametrize(
    ("lease_seconds", "remaining_ms", "ttl_seconds", "lease_ms", "ttl_s"),
    [
        (30, None, 3600, 30_000, 3600),  # lease_seconds
        (None, 20_000, 3600, 20_000, 3600),  # else the invocation's remaining time
        (None, None, 3600, 900_000, 3600),  # else Lambda's longest timeout
        (30, None, 10, 30_000, 32),  # a TTL shorter than the lease ends a second past it
    ],
)
def test_a_claim_holds_its_key_for_its_lease_and_never_expires_before_it(
    moto_store: DynamoDBStore,
    lease_seconds: int | None,
    remaining_ms: int | None,
    ttl_seconds: int,
    lease_ms: int,
    ttl_s: int,
) -> None:
    """A record that expired while its handler still ran would let a second claim in."""
    start_ms = 1_800_000_000_500
    clock = FakeClock(start_ms)
    held: list[Any] = []

    @idempotent(
        store=moto_store,
        key="id",
        clock=clock,
        lease_seconds=lease_seconds,
        ttl_seconds=ttl_seconds,
    )
    def handler(event: dict[str, Any], context: Any) -> str:
        pk, _ = handler.idempotency._identify(event)
        held.append(moto_store.get(pk))
        return "ok"

    handler({"id": 1}, None if remaining_ms is None else FakeContext(remaining_ms, clock=clock))
    assert held[0].lease_until == start_ms + lease_ms
    assert held[0].expiration == start_ms // 1000 + ttl_s


def test_store_result_policy_releases_unstored_results(moto_store: DynamoDBStore) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", store_result=lambda result: result["status"] < 500)
    def handler(event: dict[str, Any], context: Any) -> dict[str, int]:
        runs.append(1)
        return {"status": 503 if len(runs) == 1 else 200}

    assert handler({"id": 1}, None) == {"status": 503}
    assert live_items(moto_store) == []
    assert handler({"id": 1}, None) == {"status": 200}
    assert handler({"id": 1}, None) == {"status": 200}
    assert runs == [1, 1]


# -- settings are per decorator ---------------------------------------------------------


def test_decorators_sharing_a_store_keep_their_own_settings(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="id", payload=None, namespace="shared")
    def lenient(event: dict[str, Any], context: Any) -> str:
        return "lenient"

    @idempotent(store=moto_store, key="id", payload="@", namespace="strict")
    def strict(event: dict[str, Any], context: Any) -> str:
        return "strict"

    assert strict({"id": 1, "v": 1}, None) == "strict"
    assert lenient({"id": 1, "v": 1}, None) == "lenient"
    assert lenient({"id": 1, "v": 2}, None) == "lenient"  # no validation configured here
    with pytest.raises(PayloadMismatchError):
        strict({"id": 1, "v": 2}, None)


# -- the cache --------------------------------------------------------------------------


def test_warm_cache_respects_expiration(moto_store: DynamoDBStore) -> None:
    clock = FakeClock()
    runs: list[int] = []
    trips = RoundTrips(moto_store.client)

    @idempotent(store=moto_store, key="id", ttl_seconds=10, clock=clock)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    assert handler({"id": 1}, None) == 1
    trips.take()
    assert handler({"id": 1}, None) == 1
    assert trips.take() == []
    clock.advance(13)  # past the TTL and the 2 s clock-skew allowance
    assert handler({"id": 1}, None) == 2  # expired in memory and in the table: runs again


def test_cache_still_validates_the_payload(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        return "ok"

    handler({"id": 1, "v": 1}, None)
    trips = RoundTrips(moto_store.client)
    with pytest.raises(PayloadMismatchError):
        handler({"id": 1, "v": 2}, None)
    assert trips.take() == []


# -- failures ---------------------------------------------------------------------------


class FailingClient:
    """A DynamoDB client whose chosen operations fail, as a throttled or broken table does."""

    def __init__(self, client: Any, failing: set[str], *, after: int = 0) -> None:
        self._client = client
        self._failing = failing
        self._after = after
        self.meta = client.meta

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._client, name)
        if name not in self._failing:
            return operation

        def fail(**kwargs: Any) -> Any:
            if self._after > 0:
                self._after -= 1
                return operation(**kwargs)
            from botocore.exceptions import ClientError

            raise ClientError(
                {
                    "Error": {
                        "Code": "ProvisionedThroughputExceededException",
                        "Message": "slow down",
                    }
                },
                name,
            )

        return fail


def test_store_failure_at_claim_fails_closed(moto_store: DynamoDBStore) -> None:
    broken = DynamoDBStore(
        moto_store.table_name, client=FailingClient(moto_store.client, {"put_item"})
    )  # type: ignore[arg-type]
    runs: list[int] = []

    @idempotent(store=broken, key="id")
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(1)
        return "ok"

    with pytest.raises(StoreError) as caught:
        handler({"id": 1}, None)
    assert caught.value.code == "ProvisionedThroughputExceededException"
    assert caught.value.__cause__ is not None
    assert runs == []


def test_store_failure_at_completion_still_returns_the_result(
    moto_store: DynamoDBStore, caplog: Any, clock: FakeClock
) -> None:
    """DynamoDB throttles every completion: it is tried again with backoff until the
    invocation must answer, then the caller still gets the result it caused."""
    flaky = DynamoDBStore(
        moto_store.table_name,
        client=FailingClient(moto_store.client, {"put_item"}, after=1),  # type: ignore[arg-type]
    )

    @idempotent(store=flaky, key="id", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        return "charged"

    started = clock.now_ms()
    with caplog.at_level(logging.ERROR, logger="lambda_idempotency"):
        assert handler({"id": 1}, FakeContext(3000, clock=clock)) == "charged"
    assert handler.idempotency.stats["completion_failed"] == 1
    assert handler.idempotency.stats["completion_retry"] >= 3
    # Kept trying to within one backoff (at most 1 s) of the margin to answer (300 ms).
    assert 1700 <= clock.now_ms() - started <= 2700
    assert "completion_failed" in caplog.text


class SteppedClock(FakeClock):
    """A fake clock whose wall reading NTP can step (`step`); its monotonic one never moves
    but with the time slept."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks = 0

    def monotonic_ms(self) -> int:
        return self.ticks

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        self.ticks += int(seconds * 1000)

    def step(self, ms: int) -> None:
        self.ms += ms


class ThrottledCompletions:
    """A DynamoDB client that throttles the completions (put_item after the claim) numbered
    in `throttled` (1 is the first completion attempt)."""

    def __init__(self, client: Any, throttled: range) -> None:
        self._client, self._throttled, self._puts = client, throttled, 0
        self.meta = client.meta

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._client, name)
        if name != "put_item":
            return operation

        def put(**kwargs: Any) -> Any:
            self._puts += 1
            if self._puts - 1 in self._throttled:
                from botocore.exceptions import ClientError

                error = {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}
                raise ClientError({"Error": error}, name)
            return operation(**kwargs)

        return put


@pytest.mark.parametrize("step_ms", [3_600_000, -3_600_000], ids=["forward", "back"])
def test_completion_retries_run_to_the_invocations_deadline_whatever_the_wall_clock_does(
    moto_store: DynamoDBStore, step_ms: int
) -> None:
    """NTP steps the container's clock while the handler runs: the completion's retries are
    timed on the monotonic clock, so a step forward does not give up on a result that a
    retry would have stored (the key left IN_PROGRESS), nor a step back retry past the
    invocation's deadline (Lambda would cut the call mid-retry)."""
    clock = SteppedClock()
    throttled = range(1, 3) if step_ms > 0 else range(1, 10_000)
    flaky = DynamoDBStore(
        moto_store.table_name, client=ThrottledCompletions(moto_store.client, throttled)
    )  # type: ignore[arg-type]

    @idempotent(store=flaky, key="id", clock=clock, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        clock.step(step_ms)
        return "charged"

    context = FakeContext(3000, clock=clock)
    assert handler({"id": 1}, context) == "charged"
    if step_ms > 0:
        assert handler.idempotency.stats["executed"] == 1  # stored on the third attempt
        assert handler({"id": 1}, FakeContext(3000, clock=clock)) == "charged"
        assert handler.idempotency.stats["replayed"] == 1
    else:
        assert handler.idempotency.stats["completion_failed"] == 1
        assert 1700 <= clock.ticks <= 2700  # gave up at the deadline, not an hour later


def test_log_lines_carry_the_hash_never_the_raw_key_or_payload(
    moto_store: DynamoDBStore, caplog: Any
) -> None:
    @idempotent(store=moto_store, key="card", cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> str:
        if event.get("fail"):
            raise RuntimeError("declined")
        return "ok"

    secret, amount = "4111-1111-1111-1111", "amount-31337"
    with caplog.at_level(logging.DEBUG, logger="lambda_idempotency"):
        handler({"card": secret, "amount": amount}, None)
        handler({"card": secret, "amount": amount}, None)
        with pytest.raises(PayloadMismatchError):
            handler({"card": secret, "amount": "other"}, None)
        with pytest.raises(RuntimeError):
            handler({"card": "other-card", "fail": True}, None)
    outcomes = [json.loads(record.getMessage())["idempotency"] for record in caplog.records]
    assert outcomes == [
        "claimed",
        "executed",
        "replayed",
        "payload_mismatch",
        "claimed",
        "released",
    ]
    assert secret not in caplog.text and amount not in caplog.text
    assert all(json.loads(record.getMessage())["key_hash"] for record in caplog.records)


def test_disabled_runs_every_time_with_a_warning(monkeypatch: Any) -> None:
    monkeypatch.setenv("IDEMPOTENCY_DISABLED", "1")
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    runs: list[int] = []

    @idempotent(key="id")  # no store, no table: nothing is touched
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with pytest.warns(RuntimeWarning, match="IDEMPOTENCY_DISABLED"):
        assert handler({"id": 1}, None) == 1
    assert handler({"id": 1}, None) == 2


def test_current_execution_outside_a_call_is_a_clear_error() -> None:
    with pytest.raises(NoActiveExecutionError):
        current_execution()


def test_add_write_rejects_malformed_items(moto_store: DynamoDBStore) -> None:
    @idempotent(store=moto_store, key="id")
    def handler(event: dict[str, Any], context: Any) -> None:
        current_execution().add_write({"Insert": {}})

    with pytest.raises(ConfigurationError, match="Insert"):
        handler({"id": 1}, None)
    assert live_items(moto_store) == []  # released


# -- idempotent_function ------------------------------------------------------------------


@dataclasses.dataclass
class Order:
    id: str
    amount: int


def test_idempotent_function_selects_from_arguments_however_passed(
    moto_store: DynamoDBStore,
) -> None:
    runs: list[int] = []

    @idempotent_function(store=moto_store, key="order.id", payload="order")
    def ship(order: Order, priority: bool = False) -> dict[str, Any]:
        runs.append(1)
        return {"shipped": order.id}

    assert ship(Order("o-1", 5)) == {"shipped": "o-1"}
    assert ship(order=Order("o-1", 5), priority=True) == {"shipped": "o-1"}
    with pytest.raises(PayloadMismatchError):
        ship(Order("o-1", 6))
    assert runs == [1]


def test_idempotent_function_leases_for_the_enclosing_invocation(moto_store: DynamoDBStore) -> None:
    leases: list[int | None] = []
    clock = FakeClock()

    @idempotent_function(store=moto_store, key="item", clock=clock)
    def reserve(item: str) -> str:
        leases.append(current_execution().lease_until_ms)
        return item

    @idempotent(store=moto_store, key="id", clock=clock)
    def handler(event: dict[str, Any], context: Any) -> str:
        return reserve("sku-1")

    from lambda_idempotency.testing import FakeLambdaContext

    handler({"id": 1}, FakeLambdaContext(remaining_ms=7_000))
    assert leases == [clock.now_ms() + 7_000]


# -- the package surface ------------------------------------------------------------------


def test_all_lists_every_public_name() -> None:
    public = {
        name for name in dir(lambda_idempotency) if name.isidentifier() and not name.startswith("_")
    }
    assert set(lambda_idempotency.__all__) == public - {"testing"}


def test_import_loads_neither_pydantic_nor_powertools() -> None:
    code = (
        "import sys, lambda_idempotency;"
        "heavy = ('pydantic', 'aws_lambda_powertools');"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert output.stdout.strip() == "[]"


def test_default_client_names_this_library_and_its_version() -> None:
    from importlib.metadata import version

    from lambda_idempotency._stores.dynamodb.client import USER_AGENT
    from lambda_idempotency._version import VERSION

    installed = version("lambda-idempotency")
    # a build writes its commit into what it builds (setup.py); an editable install runs the
    # source, which names none: the version before the commit agrees either way
    assert installed == VERSION or installed.split("+")[0] == VERSION
    client = DynamoDBStore("t", region_name="us-east-1").client
    assert client.meta.config.user_agent.startswith(USER_AGENT)
    assert f"lambda-idempotency/{VERSION}" == USER_AGENT


def test_default_client_makes_three_attempts_in_all() -> None:
    """botocore reads `max_attempts` as retries; the store means three attempts in total."""
    from botocore.awsrequest import AWSResponse

    class Body:
        status_code = 400
        headers: typing.ClassVar[dict[str, str]] = {}
        content = b'{"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException"}'

        def stream(self) -> Any:
            return iter([self.content])

    store = DynamoDBStore("t", region_name="us-east-1")
    sent: list[str] = []

    def throttle(request: Any, **_: Any) -> AWSResponse:
        sent.append(request.url)
        return AWSResponse(request.url, 400, {}, Body())  # type: ignore[arg-type]

    store.client.meta.events.register("before-send.dynamodb.GetItem", throttle)
    with pytest.raises(StoreError) as raised:
        store.get("k")
    assert raised.value.code == "ThrottlingException" and raised.value.retryable
    assert len(sent) == 3
