"""Two layouts, one meaning (issue 24, item 5).

- `idempotent_http`'s fingerprint means the same request in both layouts: Powertools
  defines no hash for it, so it is ours (canonical JSON) under `layout="powertools"` too,
  never Powertools' encoder (Decimal as a string, numbers as spelled).
- Where Powertools does define the hash (its decorators' keys and `validation`), ours is
  byte for byte its own, its known collisions included: pinned here, documented in
  docs/migrating.md.
- Powertools' event source data classes, pydantic models and dataclasses as the event:
  JMESPath keys and payloads run over the raw event, as Powertools' `_prepare_data` does,
  so they hash as the plain event in both layouts.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
import math
import uuid
from collections.abc import Iterator
from typing import Any

import pydantic
import pytest
from aws_lambda_powertools.utilities.data_classes import (
    APIGatewayProxyEventV2,
    SQSEvent,
    event_source,
)
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
)
from aws_lambda_powertools.utilities.parser import event_parser
from hypothesis import given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    PayloadMismatchError,
    idempotent,
    idempotent_function,
    idempotent_http,
)
from lambda_idempotency._base.keys import payload_hash
from tests.http_events import header_field, http_event
from tests.source_events import CASES, SourceCase

LAYOUTS = ["native", "powertools"]


@pytest.fixture(params=LAYOUTS)
def store(request: pytest.FixtureRequest, moto_store: DynamoDBStore) -> Iterator[DynamoDBStore]:
    """A store of each layout on moto (the Powertools one on a table keyed as its docs say)."""
    if request.param == "native":
        yield moto_store
        return
    client = moto_store.client
    client.create_table(
        TableName="powertools",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    yield DynamoDBStore("powertools", client=client, layout="powertools")


def powertools_layer(**config: Any) -> DynamoDBPersistenceLayer:
    layer = DynamoDBPersistenceLayer(table_name="t", boto3_client=object())  # type: ignore[arg-type]
    layer.configure(IdempotencyConfig(**config), function_name="app.handler")
    return layer


# -- idempotent_http: the fingerprint is ours in every layout --------------------------------


def http_handler(store: DynamoDBStore) -> tuple[Any, list[Any]]:
    runs: list[Any] = []

    @idempotent_http(store=store, scope=None, cache_size=0)
    def create(event: Any, context: Any) -> dict[str, Any]:
        runs.append(event["body"])
        return {"statusCode": 201, "body": f"payment {len(runs)}"}

    return create, runs


def post(key: str, body: str) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    return http_event("http-api", headers=headers, body=body)


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        ('{"amount": 1.5}', '{"amount": "1.5"}'),  # a number is never its digits' string
        ('{"amount": "1.5"}', '{"amount": 1.5}'),
        ('{"amount": 0.30000000000000001}', '{"amount": 0.3}'),  # past double precision
        ('{"amount": 1e400}', '{"amount": "1E+400"}'),
        ('{"n": 12345678901234567890}', '{"n": "12345678901234567890"}'),
    ],
)
def test_a_different_body_under_a_reused_key_is_refused_in_every_layout(
    store: DynamoDBStore, first: str, retry: str
) -> None:
    create, runs = http_handler(store)
    assert create(post("k-1", first), None)["statusCode"] == 201

    refused = create(post("k-1", retry), None)

    assert refused["statusCode"] == 422
    assert "key-reused" in refused["body"]
    assert runs == [first]


@pytest.mark.parametrize(
    ("first", "retry"),
    [
        ('{"amount": 100}', '{"amount": 1e2}'),
        ('{"amount": 1.5}', '{"amount": 1.50}'),
        ('{"amount": 100.0}', '{ "amount" : 100 }'),
        ('{"a": 1, "b": [2.5e-3]}', '{"b": [0.0025], "a": 1.0}'),
    ],
)
def test_the_same_body_spelled_otherwise_replays_in_every_layout(
    store: DynamoDBStore, first: str, retry: str
) -> None:
    create, runs = http_handler(store)
    assert create(post("k-1", first), None)["statusCode"] == 201

    replay = create(post("k-1", retry), None)

    assert replay["statusCode"] == 201
    assert header_field(replay)["idempotent-replayed"] == "true"
    assert runs == [first]


def test_the_record_key_is_still_the_layouts(store: DynamoDBStore) -> None:
    """Only the payload's meaning changes: the record stays keyed by the layout (Powertools:
    its hash of the header's JSON, as its own `idempotent` on `headers."idempotency-key"`
    would key it), so records written before keep their keys."""
    create, _ = http_handler(store)
    engine = create.idempotency

    pk, _ = engine._identify(_request(post("k-1", '{"amount": 1.5}')))

    assert pk == store.layout.record_key(engine.settings.namespace, None, "k-1")
    if not store.layout.supports_scope:  # the fingerprint's hash at the C encoder's speed
        assert engine.settings.layout._fingerprint is True
    if not store.layout.supports_scope:
        powertools_key = powertools_layer()._get_hashed_idempotency_key("k-1")
        assert pk.split("#")[1] == powertools_key.split("#")[1]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ('{"amount": 150, "currency": "EUR", "lines": [{"sku": "a", "qty": 2}]}', None),
        ('{"ok": true, "note": null, "n": -12345678901234567}', "application/json"),
        ("amount=150&currency=EUR", "application/x-www-form-urlencoded"),
        ("not json at all", None),
        ("", None),
    ],
)
def test_a_body_without_fractions_keeps_the_hash_earlier_versions_stored(
    store: DynamoDBStore, body: str, content_type: str | None
) -> None:
    """Under the Powertools layout, a body whose numbers are all integers (and any body that
    is no JSON) hashes as before this change, through Powertools' formula: a retry of a
    request an earlier version completed still replays after the upgrade."""
    from lambda_idempotency._http import HttpRequest

    create, _ = http_handler(store)
    headers = {"Idempotency-Key": "k-1"}
    if content_type is not None:
        headers["Content-Type"] = content_type
    request = _request(http_event("http-api", headers=headers, body=body))

    _, stored_hash = create.idempotency._identify(request)

    assert stored_hash == store.layout.payload_hash(HttpRequest.fingerprint(request))


def test_a_body_with_a_fraction_is_hashed_as_the_native_layout_hashes_it(
    store: DynamoDBStore,
) -> None:
    create, _ = http_handler(store)

    _, stored_hash = create.idempotency._identify(_request(post("k-1", '{"amount": 1.5}')))

    fingerprint = ["POST", "/payments", {"json": {"amount": decimal.Decimal("1.5")}}]
    assert stored_hash == payload_hash(fingerprint)


LEAVES = [
    0,
    1,
    100,
    -7,
    10**17,
    10**18,
    1.5,
    0.3,
    100.0,
    float("inf"),
    float("nan"),
    True,
    None,
    "1.5",
    "100",
    "",
    decimal.Decimal("1E+2"),
    decimal.Decimal("100.00"),
    decimal.Decimal("-0.0"),
    decimal.Decimal("0E-1000"),
    decimal.Decimal("1.50"),
    decimal.Decimal("0.30000000000000001"),
    decimal.Decimal("1E+18"),
    decimal.Decimal("999999999999999999"),
    decimal.Decimal("1E+400"),
    decimal.Decimal("Infinity"),
]
payloads = st.recursive(
    st.sampled_from(LEAVES),
    lambda children: (
        st.lists(children, max_size=3)
        | st.lists(children, max_size=2).map(tuple)
        | st.dictionaries(st.sampled_from(["a", "b", "1", 1, None, True]), children, max_size=2)
    ),
    max_leaves=5,
)


def http_layout(hash_function: str = "md5", *, fingerprint: bool = False) -> Any:
    from lambda_idempotency._http import canonical_payloads

    store = DynamoDBStore("t", layout="powertools", hash_function=hash_function)
    return canonical_payloads(store.layout, fingerprint=fingerprint)


@settings(max_examples=400, deadline=None)
@given(payloads, payloads, st.sampled_from(["md5", "sha256"]))
def test_http_payloads_hash_alike_exactly_when_they_are_the_same_value(
    one: Any, other: Any, hash_function: str
) -> None:
    """The meaning is `_base.canonical`'s, under the Powertools layout as under the native one:
    one hash per value, whatever the spelling of its numbers, and never one for two."""
    from lambda_idempotency._base.canonical import canonical_text

    layout = http_layout(hash_function)
    same = canonical_text(one) == canonical_text(other)

    assert (layout.payload_hash(one) == layout.payload_hash(other)) is same


fingerprint_leaves = [
    leaf
    for leaf in LEAVES
    # What `_read_json` makes: no finite float, no int of more than 18 characters.
    if not (isinstance(leaf, float) and math.isfinite(leaf))
    and not (type(leaf) is int and abs(leaf) >= 10**18)
]
fingerprints = st.recursive(
    st.sampled_from(fingerprint_leaves),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "é"]), children, max_size=2)
    ),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(fingerprints, st.sampled_from(["md5", "sha256"]))
def test_the_fingerprints_fast_way_is_the_walks(value: Any, hash_function: str) -> None:
    """`idempotent_http`'s own fingerprint is hashed by the C encoder, any other payload by
    a walk in Python: on what the fingerprint holds, the same hash."""
    fast = http_layout(hash_function, fingerprint=True)
    walked = http_layout(hash_function)

    assert fast.payload_hash(["POST", "/p", {"json": value}]) == walked.payload_hash(
        ["POST", "/p", {"json": value}]
    )


@pytest.mark.parametrize("fingerprint", [True, False], ids=["fingerprint", "payload"])
def test_a_payload_never_gets_another_hash_for_want_of_stack(fingerprint: bool) -> None:
    """A payload nested 150 deep, hashed with a thousand frames to spare and then with a
    hundred and twenty: Powertools' formula (`json.dumps`) recurses, and when it runs out
    of stack the answer is `PayloadInvalidError` (the parser's own answer for a body too
    deep), never a hash of another way and never a RecursionError."""
    import sys

    from lambda_idempotency import PayloadInvalidError

    nested: Any = 1
    for _ in range(150):
        nested = [nested]
    layout = http_layout(fingerprint=fingerprint)
    roomy = layout.payload_hash(nested)
    assert roomy == DynamoDBStore("t", layout="powertools").layout.payload_hash(nested)

    frames, frame = 0, sys._getframe()
    while frame is not None:
        frames, frame = frames + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(frames + 120)
    try:
        with pytest.raises(PayloadInvalidError, match=r"too deep|recursion depth"):
            layout.payload_hash(nested)
    finally:
        sys.setrecursionlimit(limit)


def test_the_integral_walk_keeps_its_own_stack() -> None:
    from lambda_idempotency._http import integral_json

    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    walked = integral_json(deep)
    for _ in range(100_000):
        assert type(walked) is list and len(walked) == 1
        walked = walked[0]
    assert walked == 1
    assert integral_json({"a": (decimal.Decimal("1E+2"), 2.0)}) == {"a": [100, 2]}


def _request(event: dict[str, Any]) -> Any:
    from lambda_idempotency._http import HttpRequest

    return HttpRequest.from_event(event)


def test_a_user_payload_selector_in_idempotent_http_is_hashed_canonically_too(
    store: DynamoDBStore,
) -> None:
    runs: list[Any] = []

    @idempotent_http(store=store, scope=None, cache_size=0, payload="powertools_json(body)")
    def create(event: Any, context: Any) -> dict[str, Any]:
        runs.append(event["body"])
        return {"statusCode": 201, "body": "made"}

    create(post("k-1", '{"amount": 100}'), None)
    assert create(post("k-1", '{"amount": 100.0}'), None)["statusCode"] == 201  # a replay
    assert create(post("k-1", '{"amount": "100"}'), None)["statusCode"] == 422
    assert len(runs) == 1


# -- where Powertools defines the hash: its own, collisions included --------------------------


POWERTOOLS_COLLISIONS = [
    ({"amount": decimal.Decimal("1.5")}, {"amount": "1.5"}),
    ({"amount": decimal.Decimal("Infinity")}, {"amount": "Infinity"}),
    ({"at": __import__("datetime").date(2024, 1, 2)}, {"at": "2024-01-02"}),
    ({"id": __import__("uuid").UUID(int=7)}, {"id": "00000000-0000-0000-0000-000000000007"}),
]


@pytest.mark.parametrize(("one", "other"), POWERTOOLS_COLLISIONS)
def test_powertools_own_collisions_are_kept_where_its_decorators_hash(
    one: dict[str, Any], other: dict[str, Any]
) -> None:
    """Byte equality with Powertools is the contract of its decorators' keys and payload
    hashes: a value it cannot tell from a string is one value for us too there (two
    hashes would make a record Powertools wrote invisible to us: a second run across the
    switch). docs/migrating.md lists these. If Powertools ever separates them, this fails
    and the docs change with it."""
    ours = DynamoDBStore("t", layout="powertools").layout
    layer = powertools_layer(payload_validation_jmespath="@")

    assert ours.payload_hash(one) == layer._get_hashed_payload(one)
    assert ours.payload_hash(other) == layer._get_hashed_payload(other)
    assert ours.payload_hash(one) == ours.payload_hash(other)  # Powertools' collision
    key = ours.record_key("test-func.app.handler", None, one)
    assert key == layer._get_hashed_idempotency_key(one)


def test_the_native_layout_tells_a_decimal_from_its_string() -> None:
    for one, other in POWERTOOLS_COLLISIONS[:2]:
        assert payload_hash(one) != payload_hash(other)


def test_a_decimal_and_its_string_are_one_payload_for_powertools_function_hashes(
    store: DynamoDBStore,
) -> None:
    """`idempotent_function` under the Powertools layout: Powertools' meaning (one payload);
    native: two. This is the documented difference, pinned end to end."""
    runs: list[Any] = []

    @idempotent_function(store=store, key="order.id", payload="order.amount", cache_size=0)
    def charge(order: dict[str, Any]) -> str:
        runs.append(order)
        return "charged"

    charge(order={"id": "o-1", "amount": decimal.Decimal("1.5")})
    if store.layout.supports_scope:
        with pytest.raises(PayloadMismatchError):
            charge(order={"id": "o-1", "amount": "1.5"})
    else:
        assert charge(order={"id": "o-1", "amount": "1.5"}) == "charged"
    assert len(runs) == 1


# -- event source data classes and models as the event --------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_a_data_class_event_keys_and_hashes_as_its_raw_event(
    store: DynamoDBStore, case: SourceCase
) -> None:
    runs: list[Any] = []

    def handler(event: Any, context: Any) -> dict[str, Any]:
        runs.append(event)
        return {"run": len(runs)}

    protect = idempotent(store=store, key=case.key, cache_size=0)
    decorated = event_source(protect(handler), data_class=case.data_class)
    raw = case.build("o-1", 10)

    assert decorated(case.build("o-1", 10), None) == {"run": 1}
    assert decorated(case.build("o-1", 10), None) == {"run": 1}
    with pytest.raises(PayloadMismatchError):
        decorated(case.build("o-1", 11), None)
    assert decorated(case.build("o-2", 10), None) == {"run": 2}

    assert isinstance(runs[0], case.data_class)  # the handler still gets the data class
    engine = protect(handler).idempotency
    assert engine._identify(case.data_class(raw)) == engine._identify(raw)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_payload_expressions_select_from_the_raw_event(
    store: DynamoDBStore, case: SourceCase
) -> None:
    engine = idempotent(store=store, key=case.key, payload=case.payload)(
        lambda event, context: None
    ).idempotency
    raw = case.build("o-1", 10)

    assert engine._identify(case.data_class(raw)) == engine._identify(raw)
    assert engine._identify(case.data_class(raw))[1] != engine._identify(case.build("o-1", 11))[1]


@pytest.mark.parametrize(
    "expression",
    ["keys(@)", "length(Records)", "Records[?eventSource=='aws:sqs'].messageId | [0]", "@"],
)
def test_any_jmespath_over_a_data_class_sees_the_raw_event(expression: str) -> None:
    from lambda_idempotency._base.keys import compile_selector

    raw = CASES[2].build("o-1", 10)
    select = compile_selector(expression, role="key")

    assert select(SQSEvent(raw)) == select(raw)
    assert select(raw) is not None


def test_a_callable_selector_still_gets_the_data_class(store: DynamoDBStore) -> None:
    seen: list[Any] = []

    def key(event: Any) -> str:
        seen.append(event)
        return str(event.request_context.request_id)

    @event_source(data_class=APIGatewayProxyEventV2)
    @idempotent(store=store, key=key, payload=lambda event: event.json_body)
    def handler(event: APIGatewayProxyEventV2, context: Any) -> str:
        return "ok"

    assert handler(CASES[1].build("o-1", 10), None) == "ok"
    assert isinstance(seen[0], APIGatewayProxyEventV2)


class Order(pydantic.BaseModel):
    order_id: str
    amount: float


@dataclasses.dataclass
class OrderRecord:
    order_id: str
    amount: float


def test_a_pydantic_model_event_is_keyed_as_powertools_keys_it(store: DynamoDBStore) -> None:
    """`@event_parser(model=...)` outside `@idempotent`: the handler gets a model; the key
    is selected from its JSON dump (Powertools: `model_dump(mode="json")`)."""
    runs: list[Any] = []

    @event_parser(model=Order)
    @idempotent(store=store, key="order_id", cache_size=0)
    def handler(event: Order, context: Any) -> float:
        runs.append(event)
        return event.amount

    assert handler({"order_id": "o-1", "amount": 10}, None) == 10
    assert handler({"order_id": "o-1", "amount": 10}, None) == 10
    assert handler({"order_id": "o-2", "amount": 10}, None) == 10
    assert len(runs) == 2


@pytest.mark.parametrize(
    "event",
    [Order(order_id="o-1", amount=10), OrderRecord("o-1", 10.0)],
    ids=["pydantic", "dataclass"],
)
def test_a_model_event_hashes_as_its_dict(store: DynamoDBStore, event: Any) -> None:
    engine = idempotent(store=store, key="order_id")(lambda event, context: None).idempotency

    assert engine._identify(event) == engine._identify({"order_id": "o-1", "amount": 10.0})


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_idempotent_function_takes_a_data_class_argument_in_every_layout(
    store: DynamoDBStore, case: SourceCase
) -> None:
    runs: list[Any] = []

    @idempotent_function(store=store, key=f"event.{case.key}", cache_size=0)
    def consume(event: Any) -> str:
        runs.append(event)
        return "done"

    assert consume(case.data_class(case.build("o-1", 10))) == "done"
    assert consume(event=case.data_class(case.build("o-1", 10))) == "done"
    with pytest.raises(PayloadMismatchError):
        consume(case.data_class(case.build("o-1", 11)))
    assert len(runs) == 1
    engine = consume.idempotency  # type: ignore[attr-defined]
    raw = case.build("o-1", 10)
    assert engine._identify({"event": case.data_class(raw)}) == engine._identify({"event": raw})


class Shipment(pydantic.BaseModel):
    """Fields a JSON-mode dump writes otherwise than a Python-mode one."""

    id: uuid.UUID
    at: datetime.datetime
    amount: decimal.Decimal


def test_raw_event_follows_powertools_prepare_data() -> None:
    from aws_lambda_powertools.utilities.idempotency.base import _prepare_data

    from lambda_idempotency._base.keys import raw_event

    raw = CASES[1].build("o-1", 10)
    shipment = Shipment(id=uuid.UUID(int=7), at=datetime.datetime(2024, 1, 2), amount="1.50")
    for value in (
        APIGatewayProxyEventV2(raw),
        SQSEvent(CASES[2].build("o-1", 1)),
        Order(order_id="o-1", amount=1.5),
        shipment,
        OrderRecord("o-1", 1.5),
        raw,
        ["a", 1],
        "text",
        None,
    ):
        assert raw_event(value) == _prepare_data(value)
    assert raw_event(raw) is raw  # a dict is not copied
    assert json.dumps(raw_event(shipment))  # JSON mode


@pytest.mark.parametrize(
    "expression",
    [
        "@",
        "order",
        "order.order_id",
        "detail.order.order_id",
        "[order.order_id, detail]",
        "order.order_id || detail",
        "keys(@)",
    ],
)
@pytest.mark.parametrize(
    "event",
    [
        {"order": Order(order_id="o-1", amount=1), "detail": "d"},
        Order(order_id="o-1", amount=1),
        {"detail": {"order": Order(order_id="o-1", amount=1)}},
        APIGatewayProxyEventV2({"order": {"order_id": "o-1"}, "detail": "d"}),
    ],
    ids=["model-inside-a-dict", "model", "model-deeper", "data-class"],
)
def test_selections_are_powertools_own(expression: str, event: Any) -> None:
    """Only the event itself is prepared, as Powertools prepares it: a model nested inside
    a dict is not looked into (Powertools' JMESPath finds nothing there either)."""
    import jmespath
    from aws_lambda_powertools.utilities.idempotency.base import _prepare_data

    from lambda_idempotency._base.keys import compile_selector

    expected = jmespath.search(expression, _prepare_data(event))
    assert compile_selector(expression, role="key")(event) == expected


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (10**18, decimal.Decimal("1E+18")),  # the bound, on both sides of it
        (10**17, decimal.Decimal("1E+17")),
        (-(10**18) + 1, decimal.Decimal("-999999999999999999.0")),
        (0, decimal.Decimal("0E-1000000")),
        (0, decimal.Decimal("-0.000")),
        (100, 1e2),
        (1e20, decimal.Decimal("1E+20")),
        (10**17, 1e17),
        ({1: "a"}, {"1": "a"}),  # keys are text, as in JSON
        ({None: 1, True: 2}, {"null": 1, "true": 2.0}),
    ],
)
def test_http_payloads_pinned_as_one_value(one: Any, other: Any) -> None:
    from lambda_idempotency._http import canonical_payloads

    layout = canonical_payloads(DynamoDBStore("t", layout="powertools").layout)
    assert layout.payload_hash([one]) == layout.payload_hash([other])


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (decimal.Decimal("0.30000000000000001"), decimal.Decimal("0.3")),
        (decimal.Decimal("1.5"), "1.5"),
        (10**18, "1000000000000000000"),
        ({1: "a", "1": "b"}, {"1": "b"}),  # two keys of one text are not one key
        ({1: "a", "1": "b"}, {"1": "a"}),
        ({float("nan"): "a", float("nan"): "b"}, {"NaN": "a"}),
        ({float("nan"): "a", float("nan"): "b"}, {"NaN": "b"}),
        (float("inf"), "Infinity"),
    ],
)
def test_http_payloads_pinned_as_two_values(one: Any, other: Any) -> None:
    from lambda_idempotency._http import canonical_payloads

    layout = canonical_payloads(DynamoDBStore("t", layout="powertools").layout)
    assert layout.payload_hash([one]) != layout.payload_hash([other])


# -- one error for one unhashable input, in both layouts -------------------------------------


def test_a_body_nested_near_the_parsers_limit_is_answered_never_raised(
    store: DynamoDBStore,
) -> None:
    """Each depth the parser reads is fingerprinted, and each it cannot is a 400: never a
    RecursionError from hashing it (Powertools' formula recurses; a deep body takes the
    canonical way, which does not)."""
    create, _ = http_handler(store)
    answers = set()
    for depth in range(0, 1_200, 7):
        body = "[" * depth + "1" + "]" * depth
        answers.add(create(post(f"k-{depth}", body), None)["statusCode"])
    assert answers == {201, 400}


@pytest.mark.parametrize("payload", [b"\x00raw", object()], ids=["bytes", "an-object"])
def test_an_unhashable_selection_is_payload_invalid_in_every_layout(
    store: DynamoDBStore, payload: Any
) -> None:
    from lambda_idempotency import PayloadInvalidError

    runs: list[Any] = []

    @idempotent(store=store, key="id", payload=lambda event: event["payload"])
    def handler(event: Any, context: Any) -> None:
        runs.append(event)

    with pytest.raises(PayloadInvalidError, match="cannot be fingerprinted"):
        handler({"id": "o-1", "payload": payload}, None)
    with pytest.raises(PayloadInvalidError, match="cannot be fingerprinted"):
        idempotent(store=store, key=lambda event: event["payload"], payload=None)(handler)(
            {"payload": payload}, None
        )
    assert runs == []


def test_a_selection_too_deep_for_powertools_formula_is_payload_invalid() -> None:
    """Powertools' formula is `json.dumps`, which recurses: a selection it cannot write has
    no Powertools hash (Powertools itself raises RecursionError), and we refuse it with the
    typed error, never a RecursionError. The native layout hashes any depth."""
    from lambda_idempotency import PayloadInvalidError

    deep: Any = 1
    for _ in range(50_000):
        deep = [deep]
    layout = DynamoDBStore("t", layout="powertools").layout

    with pytest.raises(PayloadInvalidError, match="payload cannot be fingerprinted"):
        layout.payload_hash(deep)
    with pytest.raises(PayloadInvalidError, match="key cannot be fingerprinted"):
        layout.record_key("ns", None, deep)
    assert payload_hash(deep)
