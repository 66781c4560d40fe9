"""Selectors give exactly what JMESPath gives, whichever way they are evaluated."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import jmespath
import pytest

from lambda_idempotency._keys import compile_selector

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
