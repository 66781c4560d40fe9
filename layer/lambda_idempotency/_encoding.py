"""Results to bytes and back: JSON, compressed when that pays, rehydrated from annotations.

The stored blob starts with one format byte so old records stay readable as formats grow:

    b"j" + JSON             plain UTF-8 JSON
    b"z" + zlib(JSON)       compressed (only when it saves space)
    b"c" + JSON pointer     a large result split into chunk items (see _store.py)
"""

from __future__ import annotations

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

from ._errors import ResultNotSerializableError
from ._keys import to_jsonable

PLAIN = b"j"
COMPRESSED = b"z"
CHUNKED = b"c"

COMPRESS_FROM_BYTES = 512
"""Below this, zlib's header and the CPU cost outweigh what it saves."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=to_jsonable)
"""Built once: `json.dumps` with options builds an encoder on every call."""


def dumps(result: Any) -> bytes:
    """Serialize a handler's result, naming the offending type when it cannot be stored."""
    try:
        return _ENCODER.encode(result).encode()
    except (TypeError, ValueError, OverflowError) as exc:
        raise ResultNotSerializableError(
            f"the result of type {type(result).__qualname__} cannot be stored as JSON: {exc}"
        ) from exc


def pack(document: bytes) -> bytes:
    if len(document) >= COMPRESS_FROM_BYTES:
        compressed = zlib.compress(document, 6)
        if len(compressed) < len(document):
            return COMPRESSED + compressed
    return PLAIN + document


def unpack(blob: bytes) -> bytes:
    """The JSON document inside a plain or compressed blob."""
    tag, body = blob[:1], blob[1:]
    if tag == PLAIN:
        return body
    if tag == COMPRESSED:
        return zlib.decompress(body)
    raise ValueError(f"unknown stored result format {tag!r}")


_SCALARS: dict[type, Callable[[Any], Any]] = {
    decimal.Decimal: lambda data: decimal.Decimal(str(data)),
    datetime.datetime: datetime.datetime.fromisoformat,
    datetime.date: datetime.date.fromisoformat,
    datetime.time: datetime.time.fromisoformat,
}
"""Stored as JSON numbers or ISO strings (see `_keys.to_jsonable`), rebuilt exactly."""


def return_type_of(function: Callable[..., Any]) -> Any:
    """The return annotation, resolved; `None` when there is none or it cannot be resolved."""
    try:
        return typing.get_type_hints(function).get("return")
    except Exception:  # an unresolvable forward reference: replay the plain JSON value
        return None


def rehydrate(data: Any, annotation: Any) -> Any:
    """Turn replayed JSON back into what the handler's return annotation says it returned:
    dataclasses, pydantic models, Decimal, datetime, date, time, enums, and containers of
    them. Anything else replays as the JSON value it was stored as."""
    if annotation is None or data is None or annotation is Any:
        return data
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        arms = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
        return rehydrate(data, arms[0]) if len(arms) == 1 else data
    if origin is tuple and isinstance(data, list):
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(rehydrate(item, args[0]) for item in data)
        if len(args) == len(data):
            return tuple(rehydrate(item, arg) for item, arg in zip(data, args, strict=True))
        return tuple(data)
    if origin in (list, set, frozenset) and isinstance(data, list):
        args = typing.get_args(annotation)
        items = [rehydrate(item, args[0] if args else None) for item in data]
        return items if origin is list else origin(items)
    scalar = _SCALARS.get(annotation) if isinstance(annotation, type) else None
    if scalar is not None:
        return scalar(data)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(data)
    if origin is dict and isinstance(data, dict):
        args = typing.get_args(annotation)
        value_type = args[1] if len(args) == 2 else None
        return {key: rehydrate(value, value_type) for key, value in data.items()}
    if not isinstance(annotation, type) or not isinstance(data, dict):
        return data
    model_validate = getattr(annotation, "model_validate", None)
    if model_validate is not None:  # a pydantic model: it was already imported by the user
        return model_validate(data)
    if dataclasses.is_dataclass(annotation):
        hints = typing.get_type_hints(annotation)
        values = {
            field.name: rehydrate(data[field.name], hints.get(field.name))
            for field in dataclasses.fields(annotation)
            if field.init and field.name in data
        }
        return annotation(**values)
    return data
