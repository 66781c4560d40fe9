"""The records two versions of the library write and read in these tests, built the same way
in either process: the test's (this version) and the driver's (the previous release, in a
subprocess of its own). Standard library only, and only the public API every release has
had (`DynamoDBStore`, `idempotent_function`), so the previous release can run it as is.
"""

from __future__ import annotations

import decimal
import random
from collections.abc import Callable
from typing import Any

NAMESPACE = "compat"
LEASE_SECONDS = 120
"""A live claim's lease: longer than any test takes."""


def large() -> str:
    """About 12 KB of hex that compresses to about half: past the 1 KB record, so the
    record holds a pointer and the result lives in chunk items."""
    return random.Random(7).randbytes(6000).hex()


RESULTS: dict[str, Callable[[], Any]] = {
    "plain": lambda: {"order": "o-1", "total": 12.5, "items": [1, 2, 3], "note": None},
    "none": lambda: None,
    "tuple": lambda: (1, "two", [3.0, None]),
    "typed_keys": lambda: {1: "one", (2, 3): "pair", "raw": b"\x00\xff"},
    "decimal": lambda: {"amount": decimal.Decimal("12.50"), "big": 10**700},
    "not_stored": object,
    "chunked": large,
    "released": lambda: "run after a release",
}
"""What each kind of record's first run returns (`not_stored`: a value no version stores,
so the key completes with a "not stored" marker; `released`: the first run raises, leaving
a tombstone, and the next run returns this)."""


class FirstRunError(RuntimeError):
    """The first run of a `released` kind raises this: its key is released for the retry."""


def protected(module: Any, store: Any, kind: str, runs: list[str]) -> Callable[[str], Any]:
    """The kind's function, decorated by `module` (either version's `lambda_idempotency`):
    each run is appended to `runs`; `fail=True` makes a run raise after counting it."""

    @module.idempotent_function(
        key="order_id",
        payload="order_id",
        store=store,
        namespace=f"{NAMESPACE}.{kind}",
        lease_seconds=LEASE_SECONDS,
        cache_size=0,
    )
    def run(order_id: str, fail: bool = False) -> Any:
        runs.append(kind)
        if fail:
            raise FirstRunError(kind)
        return RESULTS[kind]()

    return run


def outcome(call: Callable[[], Any]) -> dict[str, Any]:
    """What a call gave, as both processes report it: the value's type and repr, or the
    error's type, code and message."""
    try:
        value = call()
    except Exception as exc:
        return {
            "error": type(exc).__name__,
            "code": getattr(exc, "code", None),
            "message": str(exc)[:300],
        }
    return {"type": type(value).__name__, "repr": repr(value)}


def expected(kind: str, *, first: bool = False) -> dict[str, Any]:
    """The outcome of a correct replay of `kind` (`first`: of its first run)."""
    if kind == "not_stored":
        return {"type": "object"} if first else {"error": "ResultNotSerializableError"}
    value = RESULTS[kind]()
    return {"type": type(value).__name__, "repr": repr(value)}
