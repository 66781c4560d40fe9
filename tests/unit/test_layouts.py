"""Store layouts: Powertools' key and payload hashes, the options each layout takes, the
replay hook's info, and POWERTOOLS_IDEMPOTENCY_DISABLED."""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import uuid
from typing import Any

import pytest
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    ReplayInfo,
    idempotent,
    idempotent_function,
    idempotent_http,
)
from lambda_idempotency._decorators import build_engine
from tests.conftest import FakeClock
from tests.http_events import header_field, http_event


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


def powertools_layer(hash_function: str = "md5") -> DynamoDBPersistenceLayer:
    layer = DynamoDBPersistenceLayer(table_name="t", boto3_client=object())  # type: ignore[arg-type]
    layer.configure(
        IdempotencyConfig(payload_validation_jmespath="@", hash_function=hash_function),
        function_name="app.handler",
    )
    return layer


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.decimals(allow_nan=False, allow_infinity=False)
    | st.dates()
    | st.sampled_from([Colour.RED, Line("a", 1), uuid.UUID(int=7)]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(json_values, st.sampled_from(["md5", "sha256"]))
def test_keys_and_payload_hashes_are_the_ones_powertools_computes(
    value: Any, hash_function: str
) -> None:
    store = DynamoDBStore("t", layout="powertools", hash_function=hash_function)
    layer = powertools_layer(hash_function)

    assume(not layer.is_missing_idempotency_key(value))  # Powertools runs those unprotected

    key = store.layout.record_key("test-func.app.handler", None, value)

    assert key == layer._get_hashed_idempotency_key(value)
    assert store.layout.payload_hash(value) == layer._get_hashed_payload(value)


def test_the_default_prefix_is_powertools_function_module_and_qualname(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = DynamoDBStore("t", layout="powertools")

    def handler(event: Any, context: Any) -> None: ...

    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    assert store.layout.namespace(handler, None) == f"test-func.{__name__}.{handler.__qualname__}"
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "orders")
    assert store.layout.namespace(handler, None).startswith("orders.")
    assert store.layout.namespace(handler, "charges") == "charges"  # Powertools' key_prefix
    prefixed = DynamoDBStore("t", layout="powertools", key_prefix="payments")
    assert prefixed.layout.namespace(handler, None) == "payments"


def test_a_scope_is_refused_in_the_powertools_layout() -> None:
    store = DynamoDBStore("t", layout="powertools")

    with pytest.raises(ConfigurationError, match="no scope"):
        idempotent(store=store, key="id", scope="tenant")(lambda event, context: None)
    with pytest.raises(ConfigurationError, match="no scope"):
        idempotent_http(store=store)(lambda event, context: None)  # its default: the principal
    idempotent_http(store=store, scope=None)(lambda event, context: None)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"layout": "dynamo"}, "layout must be"),
        ({"key_attr": "id"}, "only for layout='powertools'"),
        ({"layout": "powertools", "hash_function": "nope"}, "not in hashlib"),
        ({"layout": "powertools", "data_attr": "status"}, "used twice"),
        ({"layout": "powertools", "sort_key_attr": "id"}, "names another attribute"),
        ({"sort_key_attr": "status"}, "names another attribute"),
    ],
)
def test_layout_options_are_checked_when_the_store_is_built(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        DynamoDBStore("t", **options)


def test_the_powertools_layout_is_still_a_dynamodb_store() -> None:
    store = DynamoDBStore("t", layout="powertools", sort_key_attr="sk", static_pk_value="p")

    assert isinstance(store, DynamoDBStore)
    assert store._key("k") == {"id": {"S": "p"}, "sk": {"S": "k"}}
    assert repr(store) == "DynamoDBStore(table_name='t', layout='powertools')"


# -- on_replay ------------------------------------------------------------------------------


def test_on_replay_gets_the_key_the_completion_time_and_the_source(
    moto_store: DynamoDBStore,
) -> None:
    clock = FakeClock()
    seen: list[tuple[Any, ReplayInfo]] = []

    def note(result: Any, info: ReplayInfo) -> Any:
        seen.append((result, info))
        return {"replayed": result}

    @idempotent_function(key="order", store=moto_store, clock=clock, on_replay=note)
    def ship(order: str) -> str:
        return f"shipped {order}"

    completed_at = clock.now_ms()
    assert ship("o-1") == "shipped o-1"
    clock.advance(5)
    assert ship("o-1") == {"replayed": "shipped o-1"}  # from the warm cache
    cold = build_engine(ship, key="order", store=moto_store, clock=clock, on_replay=note)
    assert cold.run({"order": "o-1"}, None, lambda: "again") == {"replayed": "shipped o-1"}

    assert [info.source for _, info in seen] == ["cache", "store"]
    assert {info.completed_at for _, info in seen} == {completed_at}
    assert seen[0][1].key_hash == seen[1][1].key_hash
    assert seen[0][1].key_hash.startswith(f"{__name__}.")


def test_http_on_replay_runs_before_the_replayed_mark(moto_store: DynamoDBStore) -> None:
    def stamp(response: Any, info: ReplayInfo) -> Any:
        return {**response, "headers": {**response.get("headers", {}), "X-First-Run": "earlier"}}

    @idempotent_http(store=moto_store, scope=None, on_replay=stamp)
    def create(event: Any, context: Any) -> Any:
        return {"statusCode": 201, "headers": {"Content-Type": "text/plain"}, "body": "made"}

    event = http_event("http-api", headers={"Idempotency-Key": "k-1"}, body="{}")
    first = create(event, None)
    replay = create(event, None)

    assert "x-first-run" not in header_field(first)
    assert header_field(replay)["x-first-run"] == "earlier"
    assert header_field(replay)["idempotent-replayed"] == "true"
    assert replay["body"] == "made"


# -- disabling -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "y", "yes", "t", "true", "on", "TRUE", "On"])
def test_powertools_disable_switch_is_honoured_with_its_truthy_values(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", value)
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    runs: list[int] = []

    @idempotent(key="id")  # no store, no table: nothing is touched
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with pytest.warns(RuntimeWarning, match="POWERTOOLS_IDEMPOTENCY_DISABLED"):
        assert handler({"id": 1}, None) == 1
    assert handler({"id": 1}, None) == 2


@pytest.mark.parametrize("value", ["0", "false", "off", "no", ""])
def test_powertools_disable_switch_off_keeps_protection(
    monkeypatch: pytest.MonkeyPatch, moto_store: DynamoDBStore, value: str
) -> None:
    monkeypatch.setenv("POWERTOOLS_IDEMPOTENCY_DISABLED", value)
    runs: list[int] = []

    @idempotent(key="id", store=moto_store)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    assert handler({"id": 1}, None) == handler({"id": 1}, None) == 1


def test_powertools_hash_input_is_its_json_dump() -> None:
    """The documented formula, spelled out once: md5 of json.dumps(sort_keys=True)."""
    import hashlib

    store = DynamoDBStore("t", layout="powertools")
    value = {"b": decimal.Decimal("1.5"), "a": datetime.date(2024, 1, 2)}
    text = json.dumps({"a": "2024-01-02", "b": "1.5"}, sort_keys=True)

    assert store.layout.payload_hash(value) == hashlib.md5(text.encode()).hexdigest()
