"""The result encoding of the version before typed keys and tuples (commit c17cb17), kept
verbatim as a fixture: every record it wrote must replay, with today's decoder, as it
replayed with its own (tests/unit/test_stored_bytes.py). Do not edit: it is history."""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import base64
import dataclasses
import datetime
import decimal
import enum
import json
import types
import typing
import zlib
from collections.abc import Callable
from typing import Any

from lambda_idempotency._base.errors import (
    IdempotencyError,
    ResultNotSerializableError,
    ResultTooLargeError,
)
from lambda_idempotency._base.value import Value

PLAIN = b"j"
COMPRESSED = b"z"
TYPED = b"t"
NOT_STORED = b"x"
CHUNKED = b"c"

COMPRESS_FROM_BYTES = 512
"""Below this, zlib's header and the CPU cost outweigh what it saves."""
MAX_STORED_BYTES = 8 * 1024 * 1024
"""The largest packed result kept: past Lambda's 6 MB response limit with room for JSON
that compresses badly. Larger ones complete the key with a NOT_STORED marker."""
MAX_INT_DIGITS = 4000
"""Python refuses to print integers past 4300 digits: past this, they are stored typed."""

_TAG = "\u0000"
"""The key of a tagged object in typed JSON. A result's own dict with this key is itself
wrapped as a tagged "dict", so no user value can pass for a tag."""


def _jsonable(value: Any) -> Any:
    """`json` default for results: the non-JSON types a handler commonly returns."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if model_dump is not None and callable(model_dump) and not isinstance(value, type):
        return model_dump(mode="json")
    if isinstance(value, decimal.Decimal):
        raise ValueError("a Decimal is stored typed, to replay as the Decimal it was")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"Object of type {type(value).__qualname__} is not JSON serializable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_jsonable)
"""Built once: `json.dumps` with options builds an encoder on every call."""
_TYPED_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)
"""ASCII: lone surrogates survive as escapes."""


class Encoded(Value):
    """A result ready to store. `document` (the JSON, for the warm cache) is None when the
    result could not be stored and `blob` is a NOT_STORED marker; `problem` says why."""

    blob: bytes
    document: bytes | None
    typed: bool
    problem: str | None = None


def encode(result: Any) -> Encoded:
    """The stored form of a handler's result. Never raises: the handler has run, its effect
    has happened, and the key must be completed whatever it returned."""
    try:
        document = _ENCODER.encode(result).encode()
        typed = False
    except (TypeError, ValueError, OverflowError, RecursionError):
        try:
            document = _TYPED_ENCODER.encode(_tag(result, set())).encode()
            typed = True
        except _NotStorableError as exc:
            return _not_stored("not_serializable", exc.type_name)
        except RecursionError:
            return _not_stored("not_serializable", "nesting too deep")
    blob = pack(document)
    if len(blob) > MAX_STORED_BYTES:
        return _not_stored("too_large", f"{len(blob)} bytes stored")
    return Encoded(TYPED + blob if typed else blob, document, typed)


def _not_stored(reason: str, detail: str) -> Encoded:
    return Encoded(not_stored_marker(reason, detail), None, False, f"{reason}: {detail}")


def not_stored_marker(reason: str, detail: str) -> bytes:
    """What a completed key stores when its result could not be: why, never the value."""
    return NOT_STORED + json.dumps({"reason": reason, "detail": detail}).encode()


def pack(document: bytes) -> bytes:
    if len(document) >= COMPRESS_FROM_BYTES:
        compressed = zlib.compress(document, 6)
        if len(compressed) < len(document):
            return COMPRESSED + compressed
    return PLAIN + document


def unpack(blob: bytes) -> tuple[bytes, bool]:
    """The JSON document inside a stored blob, and whether it is typed. A NOT_STORED
    marker raises the error its retries get."""
    tag = blob[:1]
    if tag == TYPED:
        document, _ = unpack(blob[1:])
        return document, True
    if tag == PLAIN:
        return blob[1:], False
    if tag == COMPRESSED:
        return zlib.decompress(blob[1:]), False
    if tag == NOT_STORED:
        raise not_stored_error(blob)
    raise ValueError(f"unknown stored result format {tag!r}")


def not_stored_error(blob: bytes, key_hash: str | None = None) -> IdempotencyError:
    marker = json.loads(blob[1:])
    detail = str(marker.get("detail", ""))
    if marker.get("reason") == "too_large":
        return ResultTooLargeError(
            f"the first run's result was too large to store ({detail}); the handler is not "
            "run again for this key",
            key_hash=key_hash,
        )
    error = ResultNotSerializableError(
        f"the first run's result could not be stored ({detail}); the handler is not run "
        "again for this key"
    )
    error.key_hash = key_hash
    return error


def loads(document: bytes, typed: bool) -> Any:
    data = json.loads(document)
    return _untag(data) if typed else data


# -- typed JSON ---------------------------------------------------------------------------


class _NotStorableError(Exception):
    def __init__(self, type_name: str) -> None:
        super().__init__(type_name)
        self.type_name = type_name


def _tag(value: Any, seen: set[int]) -> Any:
    """`value` as JSON-able data, with what plain JSON cannot hold as tagged objects."""
    if value is None or isinstance(value, bool | str | float):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_INT_DIGITS * 3:  # ~3.3 bits a digit: well inside 4300
            return {_TAG: "int", "v": hex(value)}
        return int(value)
    if isinstance(value, decimal.Decimal):
        return {_TAG: "decimal", "v": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {_TAG: "bytes", "v": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict | list | tuple):
        if id(value) in seen:
            raise _NotStorableError(f"a circular {type(value).__qualname__}")
        seen.add(id(value))
        try:
            if isinstance(value, dict):
                return _tag_dict(value, seen)
            return [_tag(item, seen) for item in value]
        finally:
            seen.discard(id(value))
    try:
        plain = _jsonable(value)
    except (TypeError, ValueError):
        raise _NotStorableError(type(value).__qualname__) from None
    return _tag(plain, seen)


def _tag_dict(value: dict[Any, Any], seen: set[int]) -> Any:
    items: dict[str, Any] = {}
    for key, item in value.items():
        if isinstance(key, str):
            items[key] = _tag(item, seen)
        elif key is None or isinstance(key, bool | int | float):
            items[json.dumps(key)] = _tag(item, seen)  # as JSON spells them: 1 -> "1"
        else:
            raise _NotStorableError(f"a dict with {type(key).__qualname__} keys")
    if _TAG in items:
        return {_TAG: "dict", "v": list(items.items())}
    return items


_UNTAG: dict[str, Callable[[Any], Any]] = {
    "int": lambda text: int(text, 16),
    "decimal": decimal.Decimal,
    "bytes": base64.b64decode,
}


def _untag(data: Any) -> Any:
    if isinstance(data, list):
        return [_untag(item) for item in data]
    if not isinstance(data, dict):
        return data
    tag = data.get(_TAG)
    if tag is None:
        return {key: _untag(item) for key, item in data.items()}
    if tag == "dict":
        return {key: _untag(item) for key, item in data["v"]}
    return _UNTAG[tag](data["v"])
