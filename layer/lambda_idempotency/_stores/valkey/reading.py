"""Reading a ValkeyStore record: a hash as a script answers it (a flat [field, value, ...]
list) or HGETALL does (a dict), checked as strictly as the claim script checks it
(`scripts.READABLE`, built from the same `NEEDS`, `NUMBERS` and `DIGITS`): what this reader
refuses, the server never overwrites. Every stored byte is untrusted: anything this library
did not write is a typed StoreError naming what is wrong, never the value.
"""

from __future__ import annotations

import re
from typing import Any

from ..._base.errors import (
    STORED_RECORD_UNREADABLE,
    UNKNOWN_RECORD_STATUS,
    NewerFormatError,
    unreadable,
)
from ..record import FORMAT_VERSION, Record, Status
from . import scripts

_STATUSES = {status.value: status for status in Status}
_DECIMAL = re.compile(rf"-?[0-9]{{1,{scripts.DIGITS}}}")


def record_of(flat: Any, pk: str, step: str, server_ms: int | None = None) -> Record | None:
    """A record as read: a flat [field, value, ...] list (a script's answer) or a dict
    (HGETALL); None when empty. Anything not written so is a typed StoreError.
    `server_ms`, the server's clock at the read, becomes `read_at_ms` on the writer's
    clock (+ the record's `offset_ms`; None for a record without one)."""
    if not flat:
        return None
    try:
        if isinstance(flat, dict):
            fields = {text(k): v for k, v in flat.items()}
        else:
            fields = {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}
    except (IndexError, UnicodeDecodeError, TypeError) as exc:
        raise unreadable(STORED_RECORD_UNREADABLE, "not a record", key_hash=pk, step=step) from exc
    fmt = integer(fields.get("fmt", b"1"), pk, step)
    if fmt > FORMAT_VERSION:
        raise NewerFormatError(key_hash=pk, format_version=fmt, known=FORMAT_VERSION, step=step)
    if fmt < 1:  # no version writes it: unreadable, as on DynamoDB
        raise unreadable(STORED_RECORD_UNREADABLE, "a format below 1", key_hash=pk, step=step)
    status = _STATUSES.get(string(fields.get("status", b""), pk, step))
    if status is None:
        raise unreadable(
            UNKNOWN_RECORD_STATUS, "a status this library never writes", key_hash=pk, step=step
        )
    # Readable as the claim script's `readable` has it (scripts.NEEDS, NUMBERS, DIGITS):
    # what this reader refuses, the server never overwrites.
    missing = [name for name in scripts.NEEDS[status.value] if name not in fields]
    if missing:
        raise unreadable(STORED_RECORD_UNREADABLE, f"no {missing[0]}", key_hash=pk, step=step)
    numbers = {name: integer(fields[name], pk, step) for name in scripts.NUMBERS if name in fields}
    owner, digest = fields.get("owner"), fields.get("payload_hash")
    result = fields.get("result")
    read_at = None
    if server_ms is not None and "offset_ms" in numbers:
        read_at = int(server_ms) + numbers["offset_ms"]
    return Record(
        pk,
        status,
        numbers["expiration"],
        numbers.get("lease_until"),
        None if owner is None else string(owner, pk, step),
        None if digest is None else string(digest, pk, step),
        None if result is None else bytes(result),
        numbers.get("claimed_at"),
        numbers.get("completed_at"),
        read_at,
    )


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def string(value: Any, pk: str, step: str) -> str:
    """A text field as read: bytes that are not UTF-8 are no record this library wrote."""
    try:
        return text(value)
    except UnicodeDecodeError as exc:
        raise unreadable(
            STORED_RECORD_UNREADABLE, "a text that is not UTF-8", key_hash=pk, step=step
        ) from exc


def integer(value: Any, pk: str, step: str) -> int:
    """A number as this library writes it: strict decimal, at most `scripts.DIGITS` digits
    (as the claim script's `integer`: Python's int alone takes `1_0`, ` 1`, any length)."""
    try:
        written = text(value)
        if not _DECIMAL.fullmatch(written):
            raise ValueError("not a decimal integer")
        return int(written)
    except (ValueError, UnicodeDecodeError) as exc:
        raise unreadable(
            STORED_RECORD_UNREADABLE, "a number that is no integer", key_hash=pk, step=step
        ) from exc
