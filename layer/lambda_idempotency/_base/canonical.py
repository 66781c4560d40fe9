"""Values to canonical text, for hashing keys and payloads: equal values give the same
text, different values different text, in time linear in the value's size.

The text is compact JSON with sorted keys wherever JSON can say the value, so the hashes of
strings, integers, booleans, None, lists and dicts are those of `json.dumps(value,
sort_keys=True, separators=(",", ":"), ensure_ascii=False)`. Beyond that:

- Numbers compare by their exact decimal value, and a float counts as its shortest repr:
  `1 == 1.0 == Decimal("1.00")`, `0.1 == Decimal("0.1")`, while
  `Decimal("0.1000000000000000000001")` is another number (and never the same as a string).
  A number is written as its digits without trailing zeros and where its point goes: in
  plain notation when that needs at most 15 padding zeros, else in scientific notation
  (`1e+1000000`). An exponent is never expanded into digits, so `1e1000000` costs what its
  9 characters cost. NaN and the infinities are `NaN`, `Infinity` and `-Infinity`.
- Any Mapping is an object (Powertools' event data classes hash like the dicts they wrap);
  any other Sequence (a tuple) is an array; a set is an array in canonical order.
  Dataclasses, pydantic models, datetimes and enums count as the JSON they are stored as.
- Object keys are text, as in JSON: a non-string key counts as the text `json.dumps` gives
  it (`{1: x}` is `{"1": x}`).
- Any depth: the walk keeps its own stack, never Python's. A value that contains itself,
  or holds something no JSON says (bytes, an arbitrary object), raises TypeError or
  ValueError.

Speed: most values (events of strings, ints and dicts) are written by the C JSON encoder;
the output is then checked for the few spellings where the encoder and the canonical form
may differ (`1.0`, `1e+16`, an integer with 16 trailing zeros). Those, anything the encoder
refuses (Decimals it cannot write exactly, huge integers, deep nesting), and containers it
does not know are written by the pure-Python walk, which gives the same text wherever both
succeed.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import json
import math
from collections.abc import Iterator, Mapping, Sequence, Set
from json.encoder import encode_basestring
from typing import Any

PLAIN_PADDING = 15
"""At most this many zeros are written to place a number's point; more, and the number is
written in scientific notation. 15 keeps every integer JSON encoders write today (up to
15 trailing zeros) in plain digits."""

MAX_INTEGER_BITS = 1 << 17
"""Python integers past the interpreter's digit limit are converted to decimal in time
quadratic in their size; beyond this (~39,000 digits) they are refused. JSON numbers are
never Python integers of that size (see `_http.py`): only a caller's own arguments are."""


def canonical_text(value: Any) -> str:
    """The canonical text of `value`. TypeError or ValueError when it has none."""
    try:
        text = _FAST.encode(value)
    except (_WalkNeededError, TypeError, ValueError, RecursionError):
        return _walk(value)
    if _may_differ(text):
        return _walk(value)
    return text


def canonical_bytes(value: Any) -> bytes:
    """UTF-8 of the canonical text; a lone surrogate (a direct invoke can carry one) is
    kept as its three bytes rather than refused."""
    return canonical_text(value).encode("utf-8", "surrogatepass")


# -- numbers ------------------------------------------------------------------------------


def number_text(value: int | float | decimal.Decimal) -> str:
    """The canonical text of a number, from its exact value."""
    if isinstance(value, int):
        return _integer_text(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return _NON_FINITE[math.copysign(1.0, value) if math.isinf(value) else 0.0]
        text = float.__repr__(value)
        if "e" not in text and not text.endswith(".0"):
            return text  # plain and not integral: exactly the canonical spelling
        return _decimal_text(decimal.Decimal(text))
    return _decimal_text(value)


_NON_FINITE = {0.0: "NaN", 1.0: "Infinity", -1.0: "-Infinity"}


def _integer_text(value: int) -> str:
    try:
        text = int.__repr__(value)
    except ValueError:  # past the interpreter's int-to-str digit limit
        if value.bit_length() > MAX_INTEGER_BITS:
            raise ValueError(
                f"an integer of {value.bit_length()} bits is too large to fingerprint"
            ) from None
        return _decimal_text(decimal.Decimal(value))
    digits = text.rstrip("0")
    if len(text) - len(digits) <= PLAIN_PADDING:
        return text
    sign = "-" if value < 0 else ""
    return _format(sign, digits.lstrip("-"), len(text) - len(digits))


def _decimal_text(value: decimal.Decimal) -> str:
    if not value.is_finite():
        if value.is_nan():
            return "NaN"
        return "-Infinity" if value.is_signed() else "Infinity"
    if not value:
        return "0"
    # "E" formatting writes every digit of the coefficient and the exponent as a number,
    # in time linear in the digits: `-1.2300E+1000000`.
    mantissa, exponent = format(value, "E").split("E")
    sign = "-" if mantissa.startswith("-") else ""
    coefficient = mantissa.lstrip("-").replace(".", "")
    digits = coefficient.rstrip("0")
    # The exponent of the last kept digit: the first digit sits at `exponent`.
    return _format(sign, digits, int(exponent) - len(digits) + 1)


def _format(sign: str, digits: str, exponent: int) -> str:
    """`sign digits * 10**exponent` (digits with no trailing zero) in its one spelling.

    Plain when at most PLAIN_PADDING zeros are needed: integers as `int` writes them,
    fractions as `repr(float)` does (`0.001`, `12.5`). Otherwise scientific as
    `repr(float)` writes it (`1e+16`, `1.5e-05`), so every float that is not integral
    keeps its repr.
    """
    point = len(digits) + exponent  # digits before the point (negative: zeros after it)
    if exponent >= 0:
        if exponent <= PLAIN_PADDING:
            return sign + digits + "0" * exponent
    elif point > 0:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    elif point > -4:
        return f"{sign}0.{'0' * -point}{digits}"
    fraction = f".{digits[1:]}" if len(digits) > 1 else ""
    return f"{sign}{digits[0]}{fraction}e{point - 1:+03d}"


# -- the walk -----------------------------------------------------------------------------


class _WalkNeededError(Exception):
    """The C encoder met a value only the walk can write exactly."""


def _walk(root: Any) -> str:
    """The canonical text, written with a stack of our own: any depth, no recursion.

    The stack is three flat lists, not a tuple per level: a deep value would otherwise
    allocate objects the garbage collector keeps scanning."""
    out: list[str] = []
    members: list[Iterator[Any]] = []  # per open container: what is left of it
    closers: list[str] = []
    open_ids: list[int] = []
    seen: set[int] = set()  # open_ids, to catch a value that contains itself
    value = root
    while True:
        kind = type(value)
        if kind is str:
            out.append(encode_basestring(value))
        elif value is None or value is True or value is False:
            out.append(_CONSTANTS[value])
        elif kind is int or kind is float or kind is decimal.Decimal:
            out.append(number_text(value))
        elif kind is dict or kind is list or kind is tuple or _is_container(value):
            if id(value) in seen:
                raise ValueError("the value contains itself")
            seen.add(id(value))
            open_ids.append(id(value))
            if isinstance(value, Mapping):
                out.append("{")
                members.append(_members(value))
                closers.append("}")
            else:
                out.append("[")
                members.append(iter(value))
                closers.append("]")
        elif isinstance(value, str):
            out.append(encode_basestring(value))
        elif isinstance(value, int | float | decimal.Decimal):
            out.append(number_text(value))
        else:
            value = _as_json(value)
            continue
        while members:
            item = next(members[-1], _END)
            if item is _END:
                members.pop()
                seen.discard(open_ids.pop())
                out.append(closers.pop())
                continue
            if out[-1] not in _OPENERS:
                out.append(",")
            if closers[-1] == "}":
                label, value = item
                out.append(label)
            else:
                value = item
            break
        else:
            return "".join(out)


_CONSTANTS = {None: "null", True: "true", False: "false"}
_OPENERS = ("[", "{")
_END: Any = object()


def _is_container(value: Any) -> bool:
    return isinstance(value, Mapping) or (
        isinstance(value, Sequence) and not isinstance(value, str | bytes | bytearray)
    )


def _members(mapping: Mapping[Any, Any]) -> Iterator[tuple[str, Any]]:
    """`"key":` and value, in the C encoder's order: by key, or by key text when the keys
    do not compare (the encoder refuses those)."""
    keys = list(mapping)
    try:
        keys.sort()
    except TypeError:
        keys.sort(key=lambda key: (_key_text(key), type(key).__qualname__))
    labels = [encode_basestring(_key_text(key)) + ":" for key in keys]
    return zip(labels, [mapping[key] for key in keys], strict=True)


def _key_text(key: Any) -> str:
    """The text `json.dumps` makes of a key."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, float):
        return float.__repr__(key) if math.isfinite(key) else number_text(key)
    if isinstance(key, int):
        try:
            return int.__repr__(key)
        except ValueError:
            return number_text(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__qualname__}")


def _as_json(value: Any) -> Any:
    """What a value JSON has no word for counts as (TypeError when nothing)."""
    if isinstance(value, Set):
        return sorted(value, key=canonical_text)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if model_dump is not None and callable(model_dump) and not isinstance(value, type):
        return model_dump(mode="json")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    raise TypeError(f"a {type(value).__qualname__} is not a JSON value")


# -- the fast path ------------------------------------------------------------------------


def _fast_default(value: Any) -> Any:
    """The C encoder's hook for what it does not know: a small Decimal as the int or float
    it equals (so it is written exactly as the walk would), containers as their JSON
    shape; anything else goes to the walk."""
    if isinstance(value, decimal.Decimal):
        if value.is_finite() and -8 < value.adjusted() < 16:
            _, digits, exponent = value.as_tuple()
            if len(digits) <= 17 and isinstance(exponent, int):
                if exponent >= 0 or value == value.to_integral_value():
                    return int(value)
                as_float = float(value)
                if decimal.Decimal(repr(as_float)) == value:
                    return as_float
        raise _WalkNeededError
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        return list(value)
    return _as_json(value)


_FAST = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_fast_default
)
"""Built once: `json.dumps` with options builds an encoder on every call."""


def _may_differ(text: str) -> bool:
    """Whether the encoder's text may hold a number the canonical form spells otherwise: an
    integral float (`1.0`, `1e+16`) or an integer with more than PLAIN_PADDING trailing
    zeros. Strings that merely look so cost a walk, never a wrong hash."""
    if "0000000000000000" in text or _ends_a_float_in_point_zero(text):
        return True
    # "e+" is slow to search for (e is everywhere); "+" is rare and found at memchr speed.
    # Past a few dozen hits the walk is cheaper than looking further.
    index = text.find("+")
    for _ in range(32):
        if index < 0:
            return False
        if text[index - 1 : index] == "e":
            return True
        index = text.find("+", index + 1)
    return True


def _ends_a_float_in_point_zero(text: str) -> bool:
    """`1.0` as the encoder ends a float: before a comma, a closing bracket or the end.
    Four scans at memchr speed, and no pattern compiled at import (0.2 ms of a cold start)."""
    return ".0," in text or ".0]" in text or ".0}" in text or text.endswith(".0")
