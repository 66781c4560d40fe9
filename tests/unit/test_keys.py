"""Selectors give exactly what JMESPath gives, whichever way they are evaluated; what counts
as a key; and the stored key, spelled as operators look it up."""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

import jmespath
import pytest
from jmespath.visitor import TreeInterpreter

from lambda_idempotency import (
    ConfigurationError,
    DynamoDBStore,
    KeyMissingError,
    PayloadInvalidError,
    ScopeMissingError,
    idempotent,
)
from lambda_idempotency._base.keys import compile_selector, describe_event, key_hash

EXPRESSIONS = [
    "@",
    "order_id",
    "body.order.id",
    'headers."Idempotency-Key"',
    "[order_id, amount]",
    "[order_id, body.order.id]",
    "items[0].sku",
    "length(items)",
    "items[?quantity > `1`].sku",
]
DATA: list[Any] = [
    {
        "order_id": "o-1",
        "amount": 12,
        "body": {"order": {"id": "b-1"}},
        "headers": {"Idempotency-Key": "k-1"},
        "items": [{"sku": "a", "quantity": 2}, {"sku": "b", "quantity": 1}],
    },
    {"order_id": None, "body": {"order": None}, "headers": "not an object", "items": []},
    {"body": ["a", "list"], "items": [{"sku": "c", "quantity": 5}]},
    OrderedDict(order_id="o-2", body=OrderedDict(order={"id": 7})),
    None,
    "a string",
    ["a", "list"],
    42,
]


@pytest.mark.parametrize("expression", EXPRESSIONS)
@pytest.mark.parametrize("data", DATA, ids=repr)
def test_compiled_selectors_agree_with_jmespath(expression: str, data: Any) -> None:
    try:
        expected: Any = jmespath.search(expression, data)
    except jmespath.exceptions.JMESPathError as exc:
        expected = type(exc)
    try:
        actual: Any = compile_selector(expression, role="key")(data)
    except jmespath.exceptions.JMESPathError as exc:
        actual = type(exc)

    assert actual == expected


# -- the plain selectors' fast path ---------------------------------------------------------

PLAIN = ["@", "order_id", "body.order.id", 'headers."Idempotency-Key"', "[order_id, amount]"]


@pytest.mark.parametrize("expression", PLAIN)
def test_plain_selectors_never_reach_the_jmespath_interpreter(
    expression: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CPU budget per invocation counts on it: the interpreter costs a tree walk a call."""
    expected = [jmespath.search(expression, data) for data in DATA]
    selector = compile_selector(expression, role="key")

    def interpreted(*args: Any) -> Any:
        raise AssertionError(f"{expression!r} went through the JMESPath interpreter")

    monkeypatch.setattr(TreeInterpreter, "visit", interpreted)
    assert [selector(data) for data in DATA] == expected


# -- selectors refused at decoration -----------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "selector"),
    [("key", None), *((role, s) for role in ("key", "payload") for s in (42, "", "   "))],
    ids=repr,
)
def test_a_selector_that_is_neither_jmespath_nor_a_callable_is_refused(
    role: str, selector: Any
) -> None:
    options = {"key": "id", role: selector}
    with pytest.raises(
        ConfigurationError, match=f"^{role} must be a JMESPath expression or a callable$"
    ):
        idempotent(store=DynamoDBStore("t"), **options)(lambda event, context: None)


def test_invalid_jmespath_is_refused_naming_the_role_and_the_expression() -> None:
    with pytest.raises(ConfigurationError, match=r"^payload 'body\[' is not valid JMESPath: "):
        idempotent(store=DynamoDBStore("t"), key="id", payload="body[")(lambda event, context: None)


# -- what counts as a key --------------------------------------------------------------------


@pytest.mark.parametrize(
    "event",
    [{}, {"a": None, "b": None}, {"a": None}],
    ids=["both-absent", "both-null", "one-null-one-absent"],
)
def test_an_all_null_multi_select_key_is_refused_not_merged(
    moto_store: DynamoDBStore, event: dict[str, Any]
) -> None:
    """`[a, b]` with both missing selects `[null, null]`: counted as a key, every such request
    would share one record and replay the first one's result."""
    runs: list[int] = []

    @idempotent(store=moto_store, key="[a, b]")
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with pytest.raises(KeyMissingError):
        handler(event, None)
    assert runs == []


@pytest.mark.parametrize(
    "key",
    [0, False, "0", [None, "o-1"], ["o-1", "o-2"], ("o-1", None), {"order": None}, {None: "o-1"}],
    ids=["zero", "false", "zero-text", "one-of-two", "two", "tuple", "dict", "dict-none-key"],
)
def test_falsy_or_partly_null_keys_still_protect_the_handler(
    moto_store: DynamoDBStore, key: Any
) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key=lambda event: key, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    assert [handler({}, None), handler({}, None)] == [1, 1]
    assert runs == [1]


@pytest.mark.parametrize("scope", [None, "", [], [None, None]], ids=repr)
def test_a_missing_scope_refuses_to_run_unscoped(moto_store: DynamoDBStore, scope: Any) -> None:
    runs: list[int] = []

    @idempotent(store=moto_store, key="id", scope=lambda event: scope)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with pytest.raises(ScopeMissingError):
        handler({"id": "o-1"}, None)
    assert runs == []


@pytest.mark.parametrize("role", ["key", "payload"])
def test_a_value_that_cannot_be_hashed_is_refused_naming_what_was_selected(
    moto_store: DynamoDBStore, role: str
) -> None:
    runs: list[int] = []
    options = {"key": "id", role: lambda event: object()}

    @idempotent(store=moto_store, **options)
    def handler(event: dict[str, Any], context: Any) -> int:
        runs.append(1)
        return len(runs)

    with pytest.raises(PayloadInvalidError, match=f"^the selected {role} cannot be fingerprinted"):
        handler({"id": "o-1"}, None)
    assert runs == []


# -- the stored key, as operators look it up ----------------------------------------------------


def charge(event: dict[str, Any], context: Any) -> str:
    return "charged"


class Refund:
    """A callable object as a handler: no `__qualname__` of its own."""

    def __call__(self, event: dict[str, Any], context: Any) -> str:
        return "refunded"


def stored_keys(store: DynamoDBStore) -> list[str]:
    items = store.client.scan(TableName=store.table_name)["Items"]
    return sorted(item["pk"]["S"] for item in items)


@pytest.mark.parametrize("function_name", ["ChargeOrderFunction", None])
def test_the_stored_key_is_the_documented_namespace_and_hash(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch, function_name: str | None
) -> None:
    """`lambda-idempotency inspect --key K --namespace N` finds a record by this spelling:
    `{Lambda function name}.{module}.{qualname}#sha256(canonical [scope, key])`."""
    if function_name is None:
        monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
        namespace = f"{__name__}.charge"
    else:
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
        namespace = f"{function_name}.{__name__}.charge"

    idempotent(store=moto_store, key="id")(charge)({"id": "order-1001"}, None)

    assert stored_keys(moto_store) == [key_hash(namespace, None, "order-1001")]
    assert stored_keys(moto_store)[0].startswith(f"{namespace}#")


def test_two_lambda_functions_sharing_a_table_keep_their_keys_apart(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every SAM sample is `app.lambda_handler`: only the function's name tells them apart."""
    for function_name in ("ChargeFunction", "RefundFunction"):
        monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
        assert idempotent(store=moto_store, key="id")(charge)({"id": 1}, None) == "charged"
    assert len(stored_keys(moto_store)) == 2


def test_a_callable_object_handler_is_namespaced_by_its_class(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "RefundFunction")
    idempotent(store=moto_store, key="id")(Refund())({"id": "r-1"}, None)
    expected = key_hash(f"RefundFunction.{__name__}.Refund", None, "r-1")
    assert stored_keys(moto_store) == [expected]


def test_a_builtin_method_handler_without_a_module_is_keyed_by_its_qualified_name(
    moto_store: DynamoDBStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A method of a builtin type (`dict.get`) has no `__module__`: it is still protected,
    and its stored key keeps the documented spelling with an empty module."""
    monkeypatch.delenv("AWS_LAMBDA_FUNCTION_NAME", raising=False)
    handler = idempotent(store=moto_store, key="id")(dict.get)
    assert handler({"id": "order-7"}, "id") == "order-7"
    assert handler({"id": "order-7"}, "id") == "order-7"
    assert stored_keys(moto_store) == [key_hash(".dict.get", None, "order-7")]


def test_partials_of_two_functions_never_replay_each_others_results(
    moto_store: DynamoDBStore,
) -> None:
    """A functools.partial has no name of its own: it is namespaced by the function inside."""

    def charge_in(event: dict[str, Any], context: Any, currency: str) -> str:
        return f"charged in {currency}"

    def refund_in(event: dict[str, Any], context: Any, currency: str) -> str:
        return f"refunded in {currency}"

    charging = idempotent(store=moto_store, key="id")(functools.partial(charge_in, currency="EUR"))
    refunding = idempotent(store=moto_store, key="id")(functools.partial(refund_in, currency="EUR"))

    assert charging({"id": 1}, None) == "charged in EUR"
    assert refunding({"id": 1}, None) == "refunded in EUR"
    namespace = f"{__name__}.{charge_in.__qualname__}"
    assert key_hash(namespace, None, 1) in stored_keys(moto_store)


def test_a_given_namespace_replaces_the_default_whole(moto_store: DynamoDBStore) -> None:
    idempotent(store=moto_store, key="id", namespace="orders-v1")(charge)({"id": 7}, None)
    assert stored_keys(moto_store) == [key_hash("orders-v1", None, 7)]


def test_the_scope_enters_the_stored_key(moto_store: DynamoDBStore) -> None:
    handler = idempotent(store=moto_store, key="id", scope="tenant", namespace="n")(charge)
    handler({"id": 7, "tenant": "acme"}, None)
    assert stored_keys(moto_store) == [key_hash("n", "acme", 7)]
    assert key_hash("n", "acme", 7) != key_hash("n", None, 7) != key_hash("n", "other", 7)


# -- events of the wrong shape, as error messages name them ------------------------------------


@pytest.mark.parametrize(
    ("event", "described"),
    [
        ({}, "an empty mapping"),
        ({"b": 1, "a": 2}, "a mapping with keys a, b"),
        (dict.fromkeys("fedcba", 0), "a mapping with keys a, b, c, d, e, f"),
        (dict.fromkeys("gfedcba", 0), "a mapping with keys a, b, c, d, e, f, ..."),
        ({1: "x"}, "a mapping with keys 1"),
        (["Records"], "a list"),
        ("Records", "a str"),
        (None, "a NoneType"),
    ],
    ids=["empty", "sorted", "six", "seven", "int-key", "list", "str", "none"],
)
def test_a_wrong_event_is_named_by_its_kind_and_first_six_keys(event: Any, described: str) -> None:
    assert describe_event(event) == described


def test_a_wrong_event_is_described_without_its_values() -> None:
    described = describe_event({"card": "4111 1111 1111 1111", "email": "a@example.com"})
    assert "4111" not in described and "example" not in described
