"""Canonical hashing: the same value always hashes alike, different values never do, and
hostile values (huge exponents, huge integers, deep nesting, lone surrogates) hash in
bounded work or are refused with a typed error."""

from __future__ import annotations

import decimal
import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from lambda_idempotency import IdempotencyError, MisuseError, PayloadInvalidError
from lambda_idempotency._base.canonical import (
    MAX_INTEGER_BITS,
    _walk,
    canonical_text,
    number_text,
)
from lambda_idempotency._base.keys import key_hash, payload_hash

CHECKS = settings(
    max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "150")), deadline=None, database=None
)
"""Small example counts in CI; HYPOTHESIS_EXAMPLES=5000 for a long run."""

# -- values -------------------------------------------------------------------------------

texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
"""Any code point, lone surrogates included."""

decimals = st.builds(
    lambda sign, digits, exponent: Decimal((sign, digits, exponent)),
    st.integers(0, 1),
    st.lists(st.integers(0, 9), min_size=1, max_size=25).map(tuple),
    st.one_of(st.integers(-30, 30), st.integers(-(10**6), 10**6)),
)
numbers = st.one_of(
    st.integers(),
    st.integers(-(10**40), 10**40).map(lambda n: n * 10 ** (abs(n) % 25)),
    st.floats(allow_nan=False, allow_infinity=False),
    decimals,
)
scalars = st.one_of(st.none(), st.booleans(), texts, numbers)


def arrays_and_objects(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(children, max_size=4), st.dictionaries(texts, children, max_size=4))


values = st.recursive(scalars, arrays_and_objects, max_leaves=20)


EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def reference(value: Any) -> Any:
    """What equality means for hashing, spelled out independently of the implementation:
    numbers by exact value (a float by its repr), dicts regardless of order."""
    if value is None or isinstance(value, bool):
        return ("constant", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, int | float | Decimal):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        if number.is_zero():
            return ("number", 0)
        return ("number", number.normalize(EXACT))
    if isinstance(value, list | tuple):
        return ("array", tuple(reference(item) for item in value))
    return ("object", frozenset((key, reference(item)) for key, item in value.items()))


def variant(value: Any) -> Any:
    """The same value spelled otherwise: keys in another order, numbers with trailing zeros
    or as another type, tuples for lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float | Decimal):
        number = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        sign, digits, exponent = number.as_tuple()
        assert isinstance(exponent, int)
        return Decimal((sign, (*digits, 0, 0), exponent - 2))
    if isinstance(value, list):
        return tuple(variant(item) for item in value)
    return {key: variant(value[key]) for key in reversed(list(value))}


def label(value: Any) -> str:
    """A test id: huge integers have no repr past the interpreter's digit limit; ASCII with
    no backslash, since pytest escapes those in ids and then cannot select the test by its
    id (`make mutate` selects tests by id)."""
    if isinstance(value, tuple):
        return ",".join(label(item) for item in value)
    if isinstance(value, int) and value.bit_length() > 64:
        return f"int-of-{value.bit_length()}-bits"
    return ascii(value)[:40].replace("\\", "/")


# -- equal values, equal hashes -----------------------------------------------------------


@CHECKS
@given(values)
def test_the_same_value_spelled_otherwise_hashes_alike(value: Any) -> None:
    assert payload_hash(variant(value)) == payload_hash(value)


@CHECKS
@given(st.dictionaries(texts, scalars, min_size=2, max_size=8))
def test_key_order_never_matters(value: dict[str, Any]) -> None:
    shuffled = dict(reversed(list(value.items())))
    assert payload_hash(shuffled) == payload_hash(value)


@pytest.mark.parametrize(
    "spellings",
    [
        (1, 1.0, Decimal("1"), Decimal("1.00"), Decimal("0.1E+1")),
        (0, 0.0, -0.0, Decimal("0"), Decimal("-0.000"), Decimal("0E+1000000")),
        (0.1, Decimal("0.1"), Decimal("0.100"), Decimal("1E-1")),
        (2.5, Decimal("2.50")),
        (10**20, 1e20, Decimal("1E+20"), Decimal("100000000000000000000.0")),
        (10**5000, Decimal("1E+5000"), Decimal("10E+4999")),
        (-(10**16), -1e16, Decimal("-1E16")),
        (float("inf"), Decimal("Infinity")),
        (float("nan"), Decimal("NaN"), Decimal("sNaN")),
    ],
    ids=label,
)
def test_numbers_compare_by_exact_value(spellings: tuple[Any, ...]) -> None:
    assert len({payload_hash(number) for number in spellings}) == 1


# -- different values, different hashes ---------------------------------------------------


@CHECKS
@given(values, values)
# Values that read as one double (the draws above almost never make such a pair; more of
# them in test_canonical_precision.py).
@example(Decimal("0.30000000000000001"), Decimal("0.3"))
@example(Decimal("0.30000000000000001"), 0.3)
@example(Decimal("9007199254740993"), 9007199254740992.0)
def test_different_values_hash_differently(first: Any, second: Any) -> None:
    same = reference(first) == reference(second)
    assert (payload_hash(first) == payload_hash(second)) is same


@CHECKS
@given(values)
@example(Decimal("0.30000000000000001"))
@example([Decimal("-1.0000000000000001E-7")])
def test_the_canonical_text_reads_back_as_the_same_value(value: Any) -> None:
    """The text is JSON that parses back to an equal value: no two values share one."""
    text = canonical_text(value)
    parsed = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    assert reference(parsed) == reference(value)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (Decimal("0.1000000000000000000001"), "0.1000000000000000000001"),
        (Decimal("1E+1000000"), "1e+1000000"),
        (1, "1"),
        (None, "null"),
        (True, "true"),
        (1, True),
        (0, False),
        (0.1, Decimal("0.1000000000000000000001")),
        ([], {}),
        ([1, 2], {"1": 2}),
        ([["a"]], ["a"]),
        ({"a": [1]}, {"a": 1}),
        ([1, [2]], [[1], 2]),
        (Decimal("1E+1000000"), Decimal("1E+1000001")),
        (Decimal("-1E-999999"), Decimal("1E-999999")),
        ("\ud800", "\ufffd"),
        ("\ud800", "\\ud800"),
    ],
    ids=label,
)
def test_no_value_passes_for_another(first: Any, second: Any) -> None:
    assert payload_hash(first) != payload_hash(second)


def test_key_and_scope_never_run_together() -> None:
    assert key_hash("ns", "a", "bc") != key_hash("ns", "ab", "c")
    assert key_hash("ns", None, "k") != key_hash("ns", "null", "k")


# -- what hashes stay as they were ----------------------------------------------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        texts,
        st.integers(-(10**30), 10**30).filter(lambda n: n % 10**16 != 0 or n == 0),
    ),
    arrays_and_objects,
    max_leaves=20,
)


@CHECKS
@given(json_values)
def test_plain_json_hashes_as_before(value: Any) -> None:
    """Strings, integers, booleans, None, lists and dicts keep the hash they had: sha256 of
    compact JSON with sorted keys, so records written before stay valid."""
    before = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical_text(value) == before
    expected = hashlib.sha256(before.encode("utf-8", "surrogatepass")).hexdigest()
    assert payload_hash(value) == expected


def test_a_stored_key_hash_never_changes() -> None:
    assert key_hash("orders", None, "o-1") == (
        "orders#" + hashlib.sha256(b'[null,"o-1"]').hexdigest()
    )


# -- the fast path and the walk agree ------------------------------------------------------


class Wrapper(Mapping[Any, Any]):
    """A Mapping that is no dict, as Powertools' event data classes are."""

    def __init__(self, data: dict[Any, Any]) -> None:
        self._data = data

    def __getitem__(self, key: Any) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


def every_container(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(texts, children, max_size=4),
        st.dictionaries(texts, children, max_size=3).map(Wrapper),
        st.dictionaries(st.one_of(st.integers(), st.floats()), children, max_size=3),
        st.frozensets(st.one_of(texts, st.integers(), decimals), max_size=4),
    )


containers = st.recursive(
    st.one_of(
        scalars,
        st.floats(),
        st.sampled_from([Decimal("NaN"), Decimal("-Infinity"), 1e16, 1.0, 10**17, -0.0]),
    ),
    every_container,
    max_leaves=20,
)


@CHECKS
@given(containers)
@example({"amount": Decimal("0.30000000000000001")})
def test_the_fast_path_writes_what_the_walk_writes(value: Any) -> None:
    assert canonical_text(value) == _walk(value)


def test_a_mapping_hashes_as_the_dict_it_wraps_and_a_tuple_as_a_list() -> None:
    data = {"b": (1, 2), "a": Wrapper({"c": Decimal("0.5")})}
    assert payload_hash(Wrapper(data)) == payload_hash({"a": {"c": 0.5}, "b": [1, 2]})


def test_a_set_hashes_by_its_members_in_any_order() -> None:
    assert payload_hash({3, 1, 2}) == payload_hash(frozenset([2, 3, 1]))
    assert payload_hash({Decimal("0.5"), 1}) == payload_hash({0.5, Decimal("1.0")})


# -- hostile values -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (Decimal("1e1000000"), "1e+1000000"),
        (Decimal("-1e-999999"), "-1e-999999"),
        (Decimal("1.5e4400"), "1.5e+4400"),
        (Decimal("-7.250E+999999999999999999"), "-7.25e+999999999999999999"),
        (10**5000, "1e+5000"),
        (3 * 10**5000 + 10**4990, "3.0000000001e+5000"),
        (float("1e300"), "1e+300"),
        (1e-300, "1e-300"),
    ],
    ids=label,
)
def test_an_exponent_is_never_expanded_into_digits(number: Any, text: str) -> None:
    """The text of a number is as long as its digits and its exponent, however large the
    exponent: a 22-byte body costs what 22 bytes cost."""
    assert number_text(number) == text
    assert canonical_text({"amount": number}) == f'{{"amount":{text}}}'


def test_long_digit_strings_keep_every_digit() -> None:
    digits = "7" * 100_000
    assert number_text(Decimal(digits)) == digits
    assert number_text(Decimal(f"0.{digits}")) == f"0.{digits}"
    assert payload_hash(Decimal(digits + "1")) != payload_hash(Decimal(digits + "2"))


def test_integers_past_the_interpreter_digit_limit_hash() -> None:
    big = 7**20_000  # ~16,900 digits, past the 4,300-digit int-to-str limit
    assert payload_hash(big) == payload_hash(Decimal(big))
    assert payload_hash(big) != payload_hash(big + 1)


def test_an_integer_too_large_to_convert_is_a_typed_error() -> None:
    with pytest.raises(PayloadInvalidError, match="too large"):
        payload_hash([1 << (MAX_INTEGER_BITS + 1)])


@pytest.mark.parametrize("depth", [2_000, 20_000])
def test_any_depth_hashes_without_recursion(depth: int) -> None:
    nested: Any = "leaf"
    for level in range(depth):
        nested = [nested] if level % 2 else {"a": nested}
    deeper: Any = [nested]
    assert payload_hash(nested) == payload_hash(_rebuilt(depth))
    assert payload_hash(deeper) != payload_hash(nested)


def _rebuilt(depth: int) -> Any:
    nested: Any = "leaf"
    for level in range(depth):
        nested = (nested,) if level % 2 else Wrapper({"a": nested})
    return nested


@CHECKS
@given(st.lists(texts, min_size=1, max_size=4))
def test_lone_surrogates_hash_and_stay_distinct(strings: list[str]) -> None:
    assert payload_hash(strings) == payload_hash(list(strings))
    assert payload_hash(strings) != payload_hash([*strings, "\udfff"])


# -- what cannot be hashed ----------------------------------------------------------------


def circular() -> list[Any]:
    loop: list[Any] = [1]
    loop.append([loop])
    return loop


@pytest.mark.parametrize(
    "value",
    [b"bytes", object(), {(1, 2): "tuple key"}, circular(), {"a": {"b": bytearray(2)}}],
    ids=["bytes", "object", "tuple-key", "circular", "nested-bytearray"],
)
def test_a_value_with_no_fingerprint_is_a_typed_error(value: Any) -> None:
    with pytest.raises(PayloadInvalidError, match="cannot be fingerprinted") as caught:
        payload_hash(value)
    assert isinstance(caught.value, IdempotencyError)
    assert not isinstance(caught.value, MisuseError)
