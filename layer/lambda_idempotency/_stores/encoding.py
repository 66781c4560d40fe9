"""Results to bytes and back: JSON, compressed when that pays, rehydrated from annotations.

The stored blob starts with one format byte so old records stay readable as formats grow:

    b"j" + JSON             plain UTF-8 JSON
    b"z" + zlib(JSON)       compressed (only when it saves space)
    b"t" + b"j"|b"z" ...    typed JSON: values JSON has no place for (bytes, Decimal, tuples,
                            dict keys other than strings, integers past 4,300 digits) as
                            tagged objects, see `_Tagger`
    b"x" + JSON             no result: the first run's could not be stored (its type or
                            size); the key is completed so the effect never runs twice
    b"c" + JSON pointer     a large result kept in chunk items of its own (see _store.py)

A replay is what the first caller got: the same value of the same type, or, for the
conversions the return annotation undoes (dataclasses, pydantic models, datetime, date,
time, enums, sets), the JSON they stand for. Anything that cannot be stored so (an object
JSON has no word for, a subclass of dict, list, str, int or float whose type would be lost,
dict keys that collide once stored, a cycle) completes the key with a "not stored" marker.

Most results are JSON values and nothing else: one walk over their types (`_plain`) proves
it, and they are written by the C encoder as they are. Only other results pay for the
tagger's walk, and only typed ones for the untagging walk on replay.

Every stored byte is untrusted on the way back: whatever a blob holds, reading it gives the
value, the "not stored" error its retries get, or a StoreError `StoredResultUnreadable`.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import dataclasses
import datetime
import decimal
import enum
import inspect
import io
import json
import sys
import types
import typing
import weakref
import zlib
from collections.abc import Callable, Collection, Iterator, Mapping
from types import AsyncGeneratorType, CoroutineType, GeneratorType
from typing import Any

from .._base.errors import (
    STORED_RESULT_UNREADABLE,
    IdempotencyError,
    ResultNotSerializableError,
    ResultTooLargeError,
    unreadable,
)
from .._base.value import Value

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
MAX_INT_DIGITS = sys.int_info.default_max_str_digits
"""4,300: Python turns integers of at most this many digits into text and back (its default
limit). Plain JSON holds those; a result with a longer integer is stored typed."""
TAGGED_INT_BITS = 2048
"""Inside typed JSON, integers past this (about 617 digits) are stored in hex: below the
smallest digit limit an interpreter may be set to (640), so any reader reads them back."""

_TAG = "\u0000"
"""The key of a tagged object in typed JSON. A result's own dict with this key is itself
wrapped as a tagged "dict", so no user value can pass for a tag."""
_MARKER_DETAIL_CHARS = 200
"""The most of a "not stored" marker's detail an error repeats (it names a type)."""

_PLAIN_SCALARS = frozenset({str, int, float, bool, type(None)})
_SUBCLASSED = (dict, list, tuple, str, int, float, bytes, bytearray, decimal.Decimal)
"""Types whose subclasses (other than enums) cannot be stored: JSON would keep the value and
lose the type, so a replay would be something else."""


def _jsonable(value: Any) -> Any:
    """What the conversions the return annotation undoes store for a value (see
    `rehydrate`); TypeError for a value with none, and for a result still to come (an
    awaitable dataclass, a model holding a generator), which `encode` then finds."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if deferred_kind(type(value)) is not None:
            raise TypeError(f"{type(value).__qualname__} is a result still to come")
        return dataclasses.asdict(value)
    model_dump = getattr(value, "model_dump", None)
    if model_dump is not None and callable(model_dump) and not isinstance(value, type):
        if deferred_in(value):  # pydantic would drain a generator or iterator into a list
            raise TypeError(f"{type(value).__qualname__} holds a result still to come")
        return model_dump(mode="json")
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    raise TypeError(f"Object of type {type(value).__qualname__} is not JSON serializable")


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
"""Built once: `json.dumps` with options builds an encoder on every call. Only ever given
what `_plain` or `_Tagger` made of a result: exact JSON types, no cycles."""
_ASCII_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, check_circular=False)
"""ASCII: lone surrogates survive as escapes."""


class Encoded(Value):
    """A result ready to store. `document` (the JSON, for the warm cache) is None when the
    result could not be stored and `blob` is a NOT_STORED marker; `problem` says why."""

    blob: bytes
    document: bytes | None
    typed: bool
    problem: str | None = None
    deferred: tuple[Any, ...] = ()
    """Results still to come inside the result (a coroutine, a generator, a future...): a
    forgotten `await`. The effect they stand for has not happened: nothing is stored."""


def encode(result: Any) -> Encoded:
    """The stored form of a handler's result. Never raises: the handler has run, its effect
    has happened, and the key must be completed whatever it returned; unless the result
    holds a result still to come (`deferred`), whose effect has not happened."""
    document = _plain_document(result)
    typed = False
    if document is None:
        tagger = _Tagger()
        try:
            data = tagger.tag(result)
            typed = tagger.tagged
            document = _ASCII_ENCODER.encode(data).encode() if typed else _json_bytes(data)
        except _NotStorableError as exc:
            return _not_stored("not_serializable", exc.type_name, result)
        except RecursionError:
            return _not_stored("not_serializable", "nesting too deep", result)
        except (ValueError, OverflowError) as exc:  # an interpreter with a lower digit limit
            return _not_stored("not_serializable", type(exc).__name__, result)
    blob = pack(document)
    if len(blob) > MAX_STORED_BYTES:
        return _not_stored("too_large", f"{len(blob)} bytes stored")
    return Encoded(TYPED + blob if typed else blob, document, typed)


def _plain_document(result: Any) -> bytes | None:
    """The JSON of a result made of exact JSON types only; None for any other (the tagger's
    work), and for one JSON cannot spell as it is (an integer past the digit limit, a lone
    surrogate)."""
    try:
        if _plain(result):
            return _ENCODER.encode(result).encode()
    except (ValueError, OverflowError, RecursionError):  # RecursionError: deep, or a cycle
        pass
    return None


def _json_bytes(data: Any) -> bytes:
    try:
        return _ENCODER.encode(data).encode()
    except UnicodeEncodeError:  # a lone surrogate: JSON's escape carries it
        return _ASCII_ENCODER.encode(data).encode()


def _plain(value: Any) -> bool:
    """Whether `value` is made of exact JSON types only (dict with str keys, list, str, int,
    float, bool, None), which plain JSON gives back as they were. The common path: one
    pass over the types, no conversion."""
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            kind = type(item)
            if kind is dict or kind is list:
                if not _plain(item):
                    return False
            elif kind not in _PLAIN_SCALARS:
                return False
        return True
    if kind is list:
        for item in value:
            kind = type(item)
            if kind is dict or kind is list:
                if not _plain(item):
                    return False
            elif kind not in _PLAIN_SCALARS:
                return False
        return True
    return kind in _PLAIN_SCALARS


def _not_stored(reason: str, detail: str, result: Any = None) -> Encoded:
    """A "not stored" marker; or, when the result holds results still to come (found only
    here, on the way to a marker: a plain result never pays for the look), no marker."""
    deferred = deferred_in(result)
    if deferred:
        return Encoded(b"", None, False, "deferred", deferred)
    return Encoded(not_stored_marker(reason, detail), None, False, f"{reason}: {detail}")


MAX_LOOKED_AT = 200_000
"""How many values `deferred_in` looks at, at most: a bound on an object graph reached
through attributes (a result holding a client, a pool, a whole application)."""
_NOT_WALKED = (str, bytes, bytearray, memoryview, range, type, types.ModuleType)
"""Collections and objects that hold no result still to come (or hold only code)."""


def deferred_in(result: Any) -> tuple[Any, ...]:
    """Every result still to come inside `result`: in dict keys and values, lists, tuples,
    sets, dataclass fields, pydantic model fields, any other mapping or collection (a
    deque, a UserDict) and an object's attributes (`vars()`, `__slots__`). An iterator
    is never iterated (that would consume it): it is itself a result still to come.

    Breadth first, each value seen once (a cycle, a value shared), so a value is met by
    its shortest path; bounded in how many values it looks at, not in depth. What an
    object holds in its attributes is its own business unless it is plainly a forgotten
    `await`: there, only a coroutine or generator that never started counts (a pool's
    running task, a file, a client's proxies are not the result's, and are left alone).
    A container's own code that raises is passed by. Only a result that cannot be
    stored pays for the look."""
    found: list[Any] = []
    seen: set[int] = set()
    queue: collections.deque[tuple[Any, bool]] = collections.deque([(result, False)])
    while queue and len(seen) < MAX_LOOKED_AT:
        value, via_attribute = queue.popleft()
        kind = type(value)
        if kind in _PLAIN_SCALARS or id(value) in seen or isinstance(value, _NOT_WALKED):
            continue
        seen.add(id(value))
        if deferred_kind(kind) is not None:
            if _still_to_come(value, via_attribute):
                found.append(value)
            continue
        if _opaque(value):
            continue
        held, by_attribute = _held(value, kind)
        queue.extend((inner, via_attribute or by_attribute) for inner in held)
    return tuple(found)


def _still_to_come(value: Any, via_attribute: bool) -> bool:
    """A deferred kind found in a container is the result's. One reached through an object's
    attributes is that object's business unless it is plainly left undone: a coroutine or
    generator that never started, a future; never a running task (a pool's keep-alive runs
    on its own) or a plain iterator (an id counter, a paginator under way)."""
    if not via_attribute:
        return True
    if inspect.iscoroutine(value):
        return inspect.getcoroutinestate(value) == inspect.CORO_CREATED
    if inspect.isgenerator(value):
        return inspect.getgeneratorstate(value) == inspect.GEN_CREATED
    running = sys.modules.get("asyncio")
    if running is not None and isinstance(value, running.Task):
        return False
    return deferred_kind(type(value)) in ("an awaitable", "a future")


def _opaque(value: Any) -> bool:
    """A file or stream (iterable over its lines, but no result still to come), a weak
    proxy (it stands for another object), or a runtime (an event loop, a thread, an
    executor, a logger: their insides, the loop's own tasks, an executor's queued work,
    are no part of the result and must not be cancelled as if they were)."""
    return isinstance(value, (io.IOBase, *weakref.ProxyTypes)) or _runtime(value)


def _held(value: Any, kind: type[Any]) -> tuple[list[Any], bool]:
    """The values `value` holds, for `deferred_in`, and whether they are its attributes
    (rather than its items or fields)."""
    if isinstance(value, dict):
        return [*value.keys(), *value.values()], False
    if isinstance(value, list | tuple | set | frozenset):
        return list(value), False
    if dataclasses.is_dataclass(value):
        return [getattr(value, field.name, None) for field in dataclasses.fields(value)], False
    with contextlib.suppress(Exception):  # the user's own code: never raise out
        if isinstance(getattr(kind, "model_fields", None), dict):  # a pydantic model
            return [getattr(value, name, None) for name in kind.model_fields], False
        if isinstance(value, Mapping):
            return [*value.keys(), *value.values()], False
        if isinstance(value, Collection):  # not an iterator: deferred_kind took those
            return list(value), False
        return [*_attributes(value, kind)], True
    return [], False


def _runtime(value: Any) -> bool:
    """An event loop, a thread, an executor: reached through an attribute, their insides
    (the loop's own tasks, an executor's queued work) are no part of the result, and must
    not be cancelled as if they were. Only modules already imported can have made one."""
    for module, names in _RUNTIME:
        found = sys.modules.get(module)
        for name in names if found is not None else ():
            cls = getattr(found, name, None)
            if isinstance(cls, type) and isinstance(value, cls):
                return True
    return False


_RUNTIME = (
    ("asyncio", ("AbstractEventLoop",)),
    ("threading", ("Thread",)),
    ("concurrent.futures", ("Executor",)),
    ("logging", ("Logger",)),
)


def _attributes(value: Any, kind: type[Any]) -> Iterator[Any]:
    """An object's attribute values: its `__dict__` and its `__slots__`."""
    yield from getattr(value, "__dict__", {}).values()
    for cls in kind.__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__"):
                yield getattr(value, name, None)


KINDS_KEPT = 256
_kinds: dict[type[Any], str | None] = {}


def deferred_kind(cls: type[Any]) -> str | None:
    """What a result of type `cls` is, when it is a result still to come. Each test is on
    the type alone, so the answer is kept per type (a few hundred at most): a dataclass
    result costs one look-up."""
    kind = _kinds.get(cls, "")  # "" is no kind: not yet asked (a get: threads may clear)
    if kind != "":
        return kind
    if len(_kinds) >= KINDS_KEPT:
        _kinds.clear()
    kind = _kinds[cls] = _kind_of(cls)
    return kind


def _kind_of(cls: type[Any]) -> str | None:
    if issubclass(cls, CoroutineType):
        return "a coroutine"
    if issubclass(cls, GeneratorType):
        return "a generator"
    if issubclass(cls, AsyncGeneratorType):
        return "an async generator"
    if hasattr(cls, "__await__"):  # asyncio futures and tasks, and any other awaitable
        return "an awaitable"
    futures = sys.modules.get("concurrent.futures")  # not imported: no type can be one
    if futures is not None and issubclass(cls, futures.Future):
        return "a future"
    generator_context = getattr(contextlib, "_GeneratorContextManagerBase", None)
    if generator_context is not None and issubclass(cls, generator_context):
        return "a context manager"
    if hasattr(cls, "__anext__"):
        return "an async iterator"
    if hasattr(cls, "__next__"):
        return "an iterator"
    return None


def not_stored_marker(reason: str, detail: str) -> bytes:
    """What a completed key stores when its result could not be: why, never the value."""
    return NOT_STORED + json.dumps({"reason": reason, "detail": detail}).encode()


def pack(document: bytes) -> bytes:
    if len(document) >= COMPRESS_FROM_BYTES:
        compressed = zlib.compress(document, 6)
        if len(compressed) < len(document):
            return COMPRESSED + compressed
    return PLAIN + document


def unpack(
    blob: bytes | None, *, key_hash: str | None = None, step: str = "replay"
) -> tuple[bytes, bool]:
    """The JSON document inside a stored blob, and whether it is typed. A NOT_STORED
    marker raises the error its retries get; a blob no version writes (no result at all
    included) raises StoreError `StoredResultUnreadable`."""
    if type(blob) is not bytes:
        raise unreadable(
            STORED_RESULT_UNREADABLE, "the record holds no result", key_hash=key_hash, step=step
        )
    typed = blob[:1] == TYPED
    packed = blob[1:] if typed else blob
    tag = packed[:1]
    if tag == PLAIN:
        return packed[1:], typed
    if tag == COMPRESSED:
        try:
            return zlib.decompress(packed[1:]), typed
        except zlib.error:
            raise unreadable(
                STORED_RESULT_UNREADABLE,
                "its compressed form does not decompress",
                key_hash=key_hash,
                step=step,
            ) from None
    if tag == NOT_STORED and not typed:
        raise not_stored_error(blob, key_hash, step=step)
    raise unreadable(
        STORED_RESULT_UNREADABLE,
        f"unknown stored result format {tag!r}",
        key_hash=key_hash,
        step=step,
    )


def not_stored_error(
    blob: bytes, key_hash: str | None = None, *, step: str = "replay"
) -> IdempotencyError:
    """The error a NOT_STORED marker's retries get; StoreError `StoredResultUnreadable`
    (returned, not raised) for a marker that does not say why as we write it."""
    try:
        marker = json.loads(blob[1:])
    except (ValueError, RecursionError):
        marker = None
    reason = marker.get("reason") if type(marker) is dict else None
    detail = marker.get("detail", "") if type(marker) is dict else None
    if type(reason) is not str or type(detail) is not str:
        return unreadable(
            STORED_RESULT_UNREADABLE,
            'its "not stored" marker does not parse',
            key_hash=key_hash,
            step=step,
        )
    detail = detail[:_MARKER_DETAIL_CHARS]
    if reason == "too_large":
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


def loads(
    document: bytes, typed: bool, *, key_hash: str | None = None, step: str = "replay"
) -> Any:
    """The value a stored document holds; StoreError `StoredResultUnreadable` for one that
    does not parse, or holds a tag this version does not know."""
    try:
        data = json.loads(document)
        return _untag(data) if typed else data
    except _UnreadableError as exc:
        reason = str(exc)
    except RecursionError:
        reason = "its JSON is nested too deep"
    except UnicodeDecodeError:
        reason = "it is not UTF-8"
    except json.JSONDecodeError:
        reason = "it is not JSON"
    except (ValueError, TypeError, ArithmeticError):
        # a hex int, a Decimal or base64 that does not parse (binascii.Error is a ValueError),
        # an unhashable key, a number past the digit limit
        reason = "a value in it cannot be read"
    raise unreadable(STORED_RESULT_UNREADABLE, reason, key_hash=key_hash, step=step)


# -- typed JSON ---------------------------------------------------------------------------


class _NotStorableError(Exception):
    def __init__(self, type_name: str) -> None:
        super().__init__(type_name)
        self.type_name = type_name


class _UnreadableError(Exception):
    """Typed JSON no version writes; its message says what, never the stored value."""


class _Tagger:
    """Turns a result into JSON-able data, with what plain JSON cannot hold exactly as
    tagged objects ({"\\u0000": tag, "v": ...}):

        int        past TAGGED_INT_BITS, in hex
        decimal    str(Decimal): any, NaN and 1E+5000 included
        bytes      base64 (bytearray: tag "bytearray")
        tuple      its items
        dict       [[key, value], ...]: a dict with str keys one of which is the tag key
        map        [[key, value], ...]: keys other than str, each tagged as a value is

    `tagged` says whether any tag was written: when none was, the data is plain JSON."""

    __slots__ = ("seen", "tagged")

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.tagged = False

    def tag(self, value: Any) -> Any:
        kind = type(value)
        if kind is str or kind is float or kind is bool or value is None:
            return value
        if kind is int:
            if value.bit_length() > TAGGED_INT_BITS:
                self.tagged = True
                return {_TAG: "int", "v": hex(value)}
            return value
        if kind is dict or kind is list or kind is tuple:
            if id(value) in self.seen:
                raise _NotStorableError(f"a circular {kind.__qualname__}")
            self.seen.add(id(value))
            try:
                if kind is dict:
                    return self._dict(value)
                items = [self.tag(item) for item in value]
                if kind is list:
                    return items
                self.tagged = True
                return {_TAG: "tuple", "v": items}
            finally:
                self.seen.discard(id(value))
        if kind is decimal.Decimal:
            self.tagged = True
            return {_TAG: "decimal", "v": str(value)}
        if kind is bytes or kind is bytearray:
            self.tagged = True
            name = "bytes" if kind is bytes else "bytearray"
            return {_TAG: name, "v": base64.b64encode(value).decode()}
        return self.tag(_converted(value))

    def _dict(self, value: dict[Any, Any]) -> Any:
        if all(type(key) is str for key in value):  # the common case: a JSON object
            items = {key: self.tag(item) for key, item in value.items()}
            if _TAG not in items:
                return items
            self.tagged = True
            return {_TAG: "dict", "v": [[key, item] for key, item in items.items()]}
        keys, converted = [], False
        for key in value:
            stored, same = self._key(key)
            keys.append(stored)
            converted = converted or not same
        if converted and len({_key_value(key) for key in keys}) < len(keys):
            raise _NotStorableError("a dict whose keys collide once stored")
        pairs = [[key, self.tag(item)] for key, item in zip(keys, value.values(), strict=True)]
        if all(type(key) is str for key in keys):  # enums' and datetimes' text: an object
            if _TAG not in keys:
                return dict(pairs)
            self.tagged = True
            return {_TAG: "dict", "v": pairs}
        self.tagged = True
        return {_TAG: "map", "v": pairs}

    def _key(self, key: Any) -> tuple[Any, bool]:
        """A dict key as stored, and whether it reads back as itself (else it is one of the
        conversions the annotation undoes: an enum's value, a datetime's ISO text)."""
        kind = type(key)
        if kind is str or kind is float or kind is bool or key is None or kind is int:
            return self.tag(key), True
        if kind is decimal.Decimal or kind is bytes:
            return self.tag(key), True
        if kind is tuple:
            parts = [self._key(part) for part in key]
            self.tagged = True
            return {_TAG: "tuple", "v": [part for part, _ in parts]}, all(s for _, s in parts)
        if isinstance(key, enum.Enum | datetime.datetime | datetime.date | datetime.time):
            stored, _ = self._key(_converted(key))
            return stored, False
        raise _NotStorableError(f"a dict with {kind.__qualname__} keys")


def _key_value(stored: Any) -> Any:
    """What a stored key reads back as, to find keys that collide (only for dicts with a
    converted key: a dict's own keys never collide)."""
    if type(stored) is not dict:
        return stored
    return _untag(stored)


def _converted(value: Any) -> Any:
    """A value of no exact JSON type, as the conversions the annotation undoes store it; or
    _NotStorableError. Never lets the value's own code (a model's serializer, a repr, a
    dataclass field's deepcopy) raise out: the key must be completed. A result still to
    come is never converted (see `_jsonable`): `encode` finds it and stores nothing."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, _SUBCLASSED):
        base = next(base for base in type(value).__mro__ if base in _SUBCLASSED)
        raise _NotStorableError(f"{type(value).__qualname__} (a subclass of {base.__name__})")
    try:
        return _jsonable(value)
    except Exception:
        raise _NotStorableError(type(value).__qualname__) from None


def _untag(data: Any) -> Any:
    kind = type(data)
    if kind is list:
        return [_untag(item) for item in data]
    if kind is not dict:
        return data
    if _TAG not in data:
        return {key: _untag(item) for key, item in data.items()}
    tag, payload = data[_TAG], data.get("v")
    if len(data) != 2 or payload is None:
        raise _UnreadableError("a tagged value in it is malformed")
    if tag == "tuple" and type(payload) is list:
        return tuple(_untag(item) for item in payload)
    if tag == "dict" and type(payload) is list:
        return {_text(key): _untag(item) for key, item in map(_pair, payload)}
    if tag == "map" and type(payload) is list:
        return {_untag(key): _untag(item) for key, item in map(_pair, payload)}
    untag = _UNTAG.get(tag) if type(tag) is str else None
    if untag is None or type(payload) is not str:
        raise _UnreadableError("it holds a tag this version does not know")
    return untag(payload)


def _pair(pair: Any) -> tuple[Any, Any]:
    if type(pair) is not list or len(pair) != 2:
        raise _UnreadableError("a tagged dict in it is malformed")
    return pair[0], pair[1]


def _text(key: Any) -> str:
    if type(key) is not str:
        raise _UnreadableError("a tagged dict in it is malformed")
    return key


def _decimal(text: str) -> decimal.Decimal:
    return decimal.Decimal(text)  # raises InvalidOperation (an ArithmeticError) on bad text


_UNTAG: dict[str, Callable[[str], Any]] = {
    "int": lambda text: int(text, 16),
    "decimal": _decimal,
    "bytes": lambda text: base64.b64decode(text, validate=True),
    "bytearray": lambda text: bytearray(base64.b64decode(text, validate=True)),
}


# -- rehydration --------------------------------------------------------------------------

_SCALARS: dict[type, Callable[[Any], Any]] = {
    decimal.Decimal: lambda data: (
        data if isinstance(data, decimal.Decimal) else decimal.Decimal(str(data))
    ),
    datetime.datetime: datetime.datetime.fromisoformat,
    datetime.date: datetime.date.fromisoformat,
    datetime.time: datetime.time.fromisoformat,
}
"""Stored as JSON numbers or ISO strings (see `_jsonable`), rebuilt exactly."""


def return_type_of(function: Callable[..., Any]) -> Any:
    """The return annotation, resolved; `None` when there is none or it cannot be resolved."""
    try:
        return typing.get_type_hints(function).get("return")
    except Exception:  # an unresolvable forward reference: replay the plain JSON value
        return None


def rehydrate(data: Any, annotation: Any) -> Any:
    """Turn replayed JSON back into what the handler's return annotation says it returned:
    dataclasses, pydantic models, Decimal, datetime, date, time, enums, and containers of
    them (dict keys too). Anything else replays as the value it was stored as. Data that
    does not fit the annotation raises whatever the type's constructor raises: the caller
    (the protocol) answers it as a stored result it cannot read."""
    if annotation is None or data is None or annotation is Any:
        return data
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        arms = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
        return rehydrate(data, arms[0]) if len(arms) == 1 else data
    if origin is tuple and isinstance(data, list | tuple):
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(rehydrate(item, args[0]) for item in data)
        if len(args) == len(data):
            return tuple(rehydrate(item, arg) for item, arg in zip(data, args, strict=True))
        return tuple(data)
    if origin in (list, set, frozenset) and isinstance(data, list):
        args = typing.get_args(annotation)
        if origin is list and (not args or args[0] is Any):
            return data  # JSON's own fresh list: nothing to rebuild
        items = [rehydrate(item, args[0] if args else None) for item in data]
        return items if origin is list else origin(items)
    scalar = _SCALARS.get(annotation) if isinstance(annotation, type) else None
    if scalar is not None:
        return scalar(data)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return annotation(data)
    if origin is dict and isinstance(data, dict):
        args = typing.get_args(annotation)
        key_type, value_type = args if len(args) == 2 else (None, None)
        if key_type is None or key_type is Any or key_type in _PLAIN_SCALARS:
            if value_type is None or value_type is Any:
                return data  # JSON's own fresh dict: nothing to rebuild
            return {key: rehydrate(value, value_type) for key, value in data.items()}
        # keys stored as what an enum or a datetime stands for
        return {
            rehydrate(key, key_type): rehydrate(value, value_type) for key, value in data.items()
        }
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
