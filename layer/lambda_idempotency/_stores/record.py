"""The idempotency record as every store holds it, the names of its attributes, and the
shapes a store hands the protocol (a completion's writes, an operator's scan page).

Value objects here and elsewhere on the import path are `_base.value.Value` tuples, declared as
NamedTuples are but not dataclasses (about 0.4 ms to define one) nor `typing.NamedTuple`
(0.3 ms): every cold start pays for each class it defines.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .._base.value import Value


class Status(enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"
    RELEASED = "RELEASED"
    """A tombstone left by a release: the key is free for any other claim, but a delayed
    copy of the released claim's own request can no longer lock it again."""


class AttributeNames(Value):
    """Attribute names of the record; change them to share a table with another layout."""

    pk: str = "pk"
    status: str = "status"
    expiration: str = "expiration"
    lease_until: str = "lease_until"
    owner: str = "owner"
    payload_hash: str = "payload_hash"
    result: str = "result"
    claimed_at: str = "claimed_at"
    completed_at: str = "completed_at"
    format_version: str = "fmt"


FORMAT_VERSION = 1
"""The record format this version writes and reads (its `fmt` attribute). A record without
one was written by 0.1.0 or earlier, or by Powertools: format 1. A reader meeting a larger
number answers `NewerFormatError` before it reads anything else of the record.

The rule (docs/protocol.md): a format change that an older reader would misread bumps it;
additive attributes older readers ignore do not. The claim condition's words are frozen for
every format: `expiration`, `status` IN_PROGRESS with `lease_until`, RELEASED with
`lease_until` (an older reader's claim takes over a record by those alone)."""
FORMAT_ATTRIBUTE = {"N": str(FORMAT_VERSION)}
"""What every record (not a chunk: its record's format covers it) carries as `fmt`. Shared,
never mutated: 5 bytes of item."""


class Record(Value):
    """One key's state. `expiration` is epoch seconds, `lease_until` epoch milliseconds
    (for a RELEASED tombstone: when it was released)."""

    pk: str
    status: Status
    expiration: int
    lease_until: int | None = None
    owner: str | None = None
    payload_hash: str | None = None
    result: bytes | None = None
    claimed_at: int | None = None
    """Epoch milliseconds of the claim that wrote the record; for operators (age, stuck)."""
    completed_at: int | None = None
    """Epoch milliseconds of the completion, for replay hooks and operators."""
    read_at_ms: int | None = None
    """The moment of this read on the clock the record's times were written in. A store that
    keeps time on its server (`ValkeyStore`) sets it from the server's clock at the read,
    mapped into the writer's clock; None (DynamoDB): judge the record by the caller's own
    clock. Not part of the record as written: two reads of one record differ in it alone."""

    def judged_at(self, now_ms: int, read_ms: int | None = None) -> int:
        """The "now" to judge this record by (expired, lapsed, released, Retry-After, the
        next poll): `read_at_ms` plus what the caller's clock moved since the read
        (`now_ms - read_ms`, the caller's clock just after the read), or `now_ms` itself
        for a record without it. A caller whose clock is off then sees what the server saw."""
        if self.read_at_ms is None:
            return now_ms
        return self.read_at_ms + (0 if read_ms is None else max(0, now_ms - read_ms))

    def is_expired(self, now_ms: int, skew_ms: int = 0) -> bool:
        """DynamoDB deletes expired items days late, so an expired record counts as absent;
        only once it is expired even on a clock `skew_ms` behind ours."""
        return self.expiration < (now_ms - skew_ms) // 1000

    def lease_lapsed(self, now_ms: int, skew_ms: int = 0) -> bool:
        """The holder's lease ended even on a clock `skew_ms` behind ours."""
        return self.lease_until is not None and self.lease_until < now_ms - skew_ms

    def frees_at_ms(self, skew_ms: int) -> int:
        """The first millisecond a claim of the key is granted on every clock within the skew
        allowance: the record expired or its lease lapsed (both strictly past, as the claim's
        condition has them). A release frees the key at its own time (no allowance)."""
        if self.status is Status.RELEASED and self.lease_until is not None:
            return self.lease_until
        frees = (self.expiration + 1) * 1000 + skew_ms
        if self.lease_until is not None:
            frees = min(frees, self.lease_until + skew_ms + 1)
        return frees


class ReplayInfo(Value):
    """What `on_replay` is told about a replay, beside the result."""

    key_hash: str
    """The record's key, as stored and logged."""
    completed_at: int | None
    """Epoch milliseconds of the first run's completion; None when the record does not say
    (records written by Powertools, or before this field existed)."""
    source: Literal["cache", "store"]
    """Where the result came from: this container's warm cache, or the table."""


OnReplay = Callable[[Any, ReplayInfo], Any]
"""Called with each replayed result and what tells it apart; returns what the caller gets.
Here, below the engine, the decorators and the options' types that all name it."""

if TYPE_CHECKING:  # a Literal costs a cold start ~0.05 ms to build; only annotations name it
    InProgressPolicy = Literal["raise", "wait"]
    """What a call does on a record in progress: raise InProgressError, or wait for its
    result."""


OWNER_CHARS = 24
"""An owner token's length: 12 random bytes in hex. Chunk keys carry it."""


class StoredForm(Value):
    """One completion's writes, decided once (`DynamoDBStore.stored_form`) and sent as they
    are on every attempt: `chunks` (a packed result) as chunk items first, if not None, then
    `item`, the completed record, fenced on `owner`."""

    pk: str
    owner: str
    item: dict[str, Any]
    chunks: bytes | None = None


class ScanPage(Value):
    records: list[Record]
    scanned: int
    """Items read for this page, matching or not: a scan's cost follows these."""
    capacity_units: float
    unreadable: list[str]
    """The keys of matching items in a shape this library does not write (inspect them)."""
