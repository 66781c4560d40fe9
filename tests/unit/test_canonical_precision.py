"""Numbers that differ only past a double's precision are different numbers.

The canonical form compares numbers by their exact decimal value (`_base.canonical`'s docstring,
docs/http.md "What a retry must repeat"): `0.30000000000000001` is not `0.3`, although both
read as the same double, and a key reused with the one after the other is a different
payload (`PayloadMismatchError`, 422), never a replay. The same value spelled otherwise
(`1.0` and `1`, `-0` and `0`, `1e2` and `100`, `1e400` and a 1 with 400 zeros) is the same
payload.

The general properties in test_canonical.py draw numbers at random, and almost never two
that collide as doubles: a shortcut that writes a Decimal as the float it rounds to, without
checking that the float reads back as the same Decimal, passed them all. Here every draw is
such a collision (Decimals of 16 to 40 significant digits, within a quarter of a double's
spacing of one; integers past 2**53; the same values in exponent notation), and the examples
that once got through are pinned with `@example`. Hashes (`payload_hash`, what `idempotent`
and `idempotent_function` store), HTTP body fingerprints (JSON parsed with Decimals), and the
decorators end to end on moto, native layout.
"""

from __future__ import annotations

import decimal
import json
import math
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import (
    DynamoDBStore,
    PayloadMismatchError,
    idempotent,
    idempotent_function,
    idempotent_http,
)
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._base.canonical import canonical_text, number_text
from lambda_idempotency._base.keys import payload_hash
from lambda_idempotency._http import HttpRequest
from tests.http_events import http_event

CHECKS = settings(max_examples=200, deadline=None, database=None)
"""More examples than the profile's 25: each draw is cheap (hashing a number), and the
collisions these tests are about are what every draw is made of."""

EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def exact(number: int | float | Decimal) -> Decimal:
    """The value the canonical form compares: a float by its shortest repr (what it says it
    is), anything else exactly."""
    return Decimal(repr(number)) if isinstance(number, float) else Decimal(number)


def same_value(first: int | float | Decimal, second: int | float | Decimal) -> bool:
    return exact(first) == exact(second)


# -- what to draw ---------------------------------------------------------------------------

fast_range_doubles = st.floats(min_value=1e-7, max_value=9.9e15, exclude_min=True).flatmap(
    lambda magnitude: st.sampled_from([magnitude, -magnitude])
)
"""Doubles whose decimals the canonical form's fast path writes (-8 < adjusted < 16)."""
doubles = st.one_of(
    fast_range_doubles,
    fast_range_doubles,
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: f != 0),
)
significant_digits = st.one_of(st.sampled_from([16, 17, 17, 18]), st.integers(16, 40))


@st.composite
def beside(draw: st.DrawFn, double: float) -> Decimal:
    """A Decimal of 16-40 significant digits within a quarter of the double's spacing of it:
    `float()` reads it as `double` (or, at 16 digits, its neighbour), yet it is usually another
    number than `repr(double)` says."""
    spacing = Decimal(math.ulp(double))
    # A quarter spacing at most, in exact decimal arithmetic: k/2**24 of it, k <= 2**22.
    share = draw(st.one_of(st.integers(1, 2**22), st.integers(-(2**22), -1), st.just(0)))
    nudge = EXACT.multiply(EXACT.multiply(spacing, share), Decimal(5) ** 24).scaleb(-24)
    near = EXACT.add(Decimal(double), nudge)
    digits = draw(significant_digits)
    rounding = draw(st.sampled_from([decimal.ROUND_HALF_EVEN, decimal.ROUND_DOWN]))
    return decimal.Context(prec=digits, rounding=rounding, Emax=EXACT.Emax, Emin=EXACT.Emin).plus(
        near
    )


@st.composite
def appended(draw: st.DrawFn, double: float) -> Decimal:
    """The double as its repr says, with one more digit at significant position 17 to 40:
    `0.3` → `0.30000000000000001`, `-2.5` → `-2.4999999999999999999999`."""
    base = Decimal(repr(double))
    position = draw(st.one_of(st.just(17), st.integers(17, 40)))
    offset = Decimal((draw(st.integers(0, 1)), (draw(st.integers(1, 9)),), 0))
    return EXACT.add(base, offset.scaleb(base.adjusted() - position + 1))


def past_double(double: float) -> st.SearchStrategy[Decimal]:
    return st.one_of(appended(double), beside(double))


@st.composite
def double_twins(draw: st.DrawFn) -> tuple[Decimal | float, Decimal | float]:
    """Two numbers that read as one double, or nearly (at 16 and 17 digits, a neighbour):
    two Decimals beside it, or one and the double, or one and the double's repr."""
    double = draw(doubles)
    first = draw(past_double(double))
    second: Decimal | float = draw(
        st.one_of(past_double(double), st.just(double), st.just(Decimal(repr(double))))
    )
    return first, second


past_2_53 = st.one_of(
    st.integers(2**53 + 1, 10**16 - 1),
    st.integers(2**53 + 1, 2**80),
    st.integers(10**16, 10**40),
).flatmap(lambda n: st.sampled_from([n, -n]))
"""Integers a double cannot hold: `float(n)` is another integer for most of them."""


@st.composite
def integer_twins(draw: st.DrawFn) -> tuple[Any, Any]:
    """An integer past 2**53 (as int or Decimal, in plain or exponent notation) and another
    number that reads as the same double: the double itself, or a neighbouring integer."""
    n = draw(past_2_53)
    as_decimal = Decimal(n)
    with_zeros = EXACT.multiply(as_decimal, Decimal("1.000"))
    spelled = draw(st.sampled_from([n, as_decimal, as_decimal.normalize(EXACT), with_zeros]))
    other = draw(
        st.one_of(
            st.just(float(n)),
            st.just(Decimal(float(n))),
            st.integers(-16, 16).map(lambda step: n + step),
            st.integers(-16, 16).map(lambda step: Decimal(n + step)),
        )
    )
    return spelled, other


PINNED = [
    (Decimal("0.30000000000000001"), Decimal("0.3")),
    (Decimal("0.30000000000000001"), 0.3),
    (Decimal("0.1000000000000000055511151231257827"), 0.1),  # 0.1's exact binary, 34 digits
    (Decimal("1.0000000000000001"), 1),
    (Decimal("1.0000000000000001"), 1.0),
    (Decimal("-2.0000000000000002"), Decimal("-2")),
    (Decimal("9007199254740993"), 9007199254740992.0),  # 2**53 + 1
    (Decimal("9007199254740993"), 2**53),
    (Decimal("9.007199254740993E+15"), Decimal("9.007199254740992E+15")),
    (2**53 + 1, float(2**53 + 1)),
    (Decimal("1E+23"), 1e23),  # 1e23 is 99999999999999991611392 exactly, repr says 1e+23
    (Decimal("3.0000000000000001E+5"), 300000),
    (Decimal("1.00000000000000001E-7"), 1e-7),
]
"""Pairs that read as one double. Each is two different numbers but `1E+23` and `1e23` (a
float counts as its repr, and 1e23's is `1e+23`)."""


# -- hashes -----------------------------------------------------------------------------------


def pin(*pairs: tuple[Any, Any]) -> Any:
    """`@example` for every pair, outermost first."""

    def decorate(test: Any) -> Any:
        for first, second in reversed(pairs):
            test = example((first, second))(test)
        return test

    return decorate


@CHECKS
@given(st.one_of(double_twins(), integer_twins()))
@pin(*PINNED)
def test_numbers_that_read_as_one_double_hash_alike_only_when_equal(pair: tuple[Any, Any]) -> None:
    first, second = pair
    assert (payload_hash(first) == payload_hash(second)) is same_value(first, second)
    # Inside a payload too: the fast path writes whole documents.
    assert (
        payload_hash({"amount": first, "n": [1]}) == payload_hash({"n": [1], "amount": second})
    ) is same_value(first, second)


@CHECKS
@given(st.one_of(doubles.flatmap(past_double), past_2_53, past_2_53.map(Decimal)))
@example(Decimal("0.30000000000000001"))
@example(Decimal("9007199254740993"))
@example(Decimal("-1.2345678901234567E-5"))
def test_a_number_is_written_as_exactly_its_value(number: Any) -> None:
    """The canonical text reads back as the same number, to the last digit, alone and
    inside a document (where the C encoder writes it)."""
    assert Decimal(number_text(number)) == exact(number)
    document = json.loads(canonical_text({"a": [number]}), parse_float=Decimal, parse_int=Decimal)
    assert document["a"][0] == exact(number)


@pytest.mark.parametrize(
    "spellings",
    [
        (1, 1.0, Decimal("1.0"), Decimal("1E+0"), Decimal("0.1E+1")),
        (0, -0.0, 0.0, Decimal("-0"), Decimal("-0E-5"), Decimal("0E+400")),
        (100, 1e2, Decimal("1E+2"), Decimal("100.000"), Decimal("1000E-1")),
        (10**400, Decimal("1E+400"), Decimal("10E+399"), Decimal("0.1E+401")),
        (2**53 + 1, Decimal(2**53 + 1), Decimal("9.007199254740993E+15")),
        (0.3, Decimal("0.3"), Decimal("0.30000000000000000")),
    ],
    ids=["one", "zero", "hundred", "1e400", "2**53+1", "0.3"],
)
def test_the_same_number_spelled_otherwise_hashes_alike(spellings: tuple[Any, ...]) -> None:
    """What the documented semantics makes equal: `1.0` and `1`, `-0` and `0`, an exponent
    and its digits."""
    assert len({payload_hash(number) for number in spellings}) == 1
    assert len({payload_hash({"amount": number}) for number in spellings}) == 1


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Decimal("1E+400"), float("inf")),  # 1e400 is a number, not a double's overflow
        (Decimal("1E+400"), Decimal("1E+399")),
        (Decimal("1E+400"), 10**400 + 1),
        (Decimal("1E-400"), 0),  # nor is 1e-400 a double's underflow
        (Decimal("-1E-400"), Decimal("1E-400")),
    ],
    ids=["1e400-inf", "1e400-1e399", "1e400-plus-1", "1e-400-0", "-1e-400-1e-400"],
)
def test_numbers_past_a_doubles_range_are_not_its_overflow(first: Any, second: Any) -> None:
    assert payload_hash(first) != payload_hash(second)


# -- HTTP body fingerprints ------------------------------------------------------------------


def body_fingerprint(body: str) -> str:
    event = http_event("http-api", headers={"Content-Type": "application/json"}, body=body)
    return _keys.payload_hash(HttpRequest.from_event(event).fingerprint())


def json_number(number: Any) -> str:
    """How a client writes the number in a JSON body."""
    if isinstance(number, float):
        return repr(number)
    return str(number)  # a Decimal's str is JSON (`1.5E+7`, `-0`); an int's likewise


@CHECKS
@given(st.one_of(double_twins(), integer_twins()))
@pin(*PINNED)
def test_json_bodies_that_read_as_one_double_are_one_request_only_when_equal(
    pair: tuple[Any, Any],
) -> None:
    first, second = (json_number(number) for number in pair)
    same = Decimal(first) == Decimal(second)
    assert (
        body_fingerprint(f'{{"amount": {first}}}') == body_fingerprint(f'{{"amount":{second}}}')
    ) is same


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        ("0.30000000000000001", "0.3", False),
        ("0.30000000000000001", "0.300000000000000010", True),
        ("9007199254740993", "9007199254740992", False),
        ("9007199254740993", "9007199254740993.0", True),
        ("9007199254740993", "9.007199254740993e15", True),
        ("1e400", "1e399", False),
        ("1e400", "10E+399", True),
        ("1e400", "1" + "0" * 400, True),
        ("1e-400", "0", False),
        ("-0", "0", True),
        ("-0.0", "0", True),
        ("1.0", "1", True),
        ("1e2", "100", True),
        ("1.00000000000000001", "1", False),
        ("123456789012345678", "123456789012345680", False),
    ],
)
def test_json_body_numbers_compare_by_exact_value(first: str, second: str, same: bool) -> None:
    """docs/http.md: numbers compare by their exact decimal value however they are spelled."""
    assert (
        body_fingerprint(f'{{"amount": {first}}}') == body_fingerprint(f'{{"amount": {second}}}')
    ) is same


# -- the decorators end to end ----------------------------------------------------------------

END_TO_END = [
    (Decimal("0.30000000000000001"), Decimal("0.3"), False),
    (Decimal("0.30000000000000001"), 0.3, False),
    (Decimal("9007199254740993"), 9007199254740992, False),
    (Decimal("1.0000000000000001"), 1, False),
    (Decimal("1E+400"), Decimal("1E+399"), False),
    (Decimal("1.0"), 1, True),
    (Decimal("-0"), 0, True),
    (Decimal("1E+2"), 100, True),
    (Decimal("1E+400"), 10**400, True),
]
END_TO_END_IDS = [
    f"{type(first).__name__}-{first}-vs-{type(second).__name__}-{str(second)[:20]}"
    for first, second, _ in END_TO_END
]


@pytest.mark.parametrize("cache_size", [0, 16], ids=["from-the-table", "warm-cache"])
@pytest.mark.parametrize(("first", "second", "same"), END_TO_END, ids=END_TO_END_IDS)
def test_idempotent_refuses_a_key_reused_with_a_number_past_double_precision(
    moto_store: DynamoDBStore, first: Any, second: Any, same: bool, cache_size: int
) -> None:
    runs: list[Any] = []

    @idempotent(store=moto_store, key="id", cache_size=cache_size)
    def handler(event: dict[str, Any], context: Any) -> str:
        runs.append(event["amount"])
        return "charged"

    assert handler({"id": "o-1", "amount": first}, None) == "charged"
    if same:
        assert handler({"id": "o-1", "amount": second}, None) == "charged"
    else:
        with pytest.raises(PayloadMismatchError):
            handler({"id": "o-1", "amount": second}, None)
    assert runs == [first]


@pytest.mark.parametrize(("first", "second", "same"), END_TO_END, ids=END_TO_END_IDS)
def test_idempotent_function_refuses_a_key_reused_with_a_number_past_double_precision(
    moto_store: DynamoDBStore, first: Any, second: Any, same: bool
) -> None:
    runs: list[Any] = []

    @idempotent_function(store=moto_store, key="order_id", cache_size=0)
    def charge(order_id: str, amount: Any) -> str:
        runs.append(amount)
        return "charged"

    assert charge("o-1", first) == "charged"
    if same:
        assert charge("o-1", amount=second) == "charged"
    else:
        with pytest.raises(PayloadMismatchError):
            charge("o-1", amount=second)
    assert runs == [first]


@pytest.mark.parametrize(
    ("first", "second", "status"),
    [
        ("0.30000000000000001", "0.3", 422),
        ("9007199254740993", "9007199254740992", 422),
        ("1e400", "1e399", 422),
        ("0.30000000000000001", "3.0000000000000001e-1", 201),
        ("-0", "0.0", 201),
        ("1.0", "1", 201),
        ("1e400", "10e399", 201),
    ],
)
def test_idempotent_http_answers_422_to_a_body_past_double_precision(
    moto_store: DynamoDBStore, first: str, second: str, status: int
) -> None:
    runs: list[Any] = []

    @idempotent_http(store=moto_store, cache_size=0)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        runs.append(event["body"])
        return {"statusCode": 201, "body": "{}"}

    def post(body: str) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "Idempotency-Key": "k-1"}
        return http_event("http-api", headers=headers, body=f'{{"amount": {body}}}')

    assert handler(post(first), None)["statusCode"] == 201
    assert handler(post(second), None)["statusCode"] == status
    assert len(runs) == 1
