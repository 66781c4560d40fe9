"""The idempotency record as stored in DynamoDB, and the names of its attributes.

Value objects here and elsewhere on the import path are NamedTuples, not dataclasses: a
frozen dataclass costs about 0.4 ms to define, and every cold start pays for it.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Status(enum.Enum):
    IN_PROGRESS = "IN_PROGRESS"
    COMPLETED = "COMPLETED"


class AttributeNames(NamedTuple):
    """Attribute names of the record; change them to share a table with another layout."""

    pk: str = "pk"
    status: str = "status"
    expiration: str = "expiration"
    lease_until: str = "lease_until"
    owner: str = "owner"
    payload_hash: str = "payload_hash"
    result: str = "result"
    claimed_at: str = "claimed_at"


class Record(NamedTuple):
    """One key's state. `expiration` is epoch seconds, `lease_until` epoch milliseconds."""

    pk: str
    status: Status
    expiration: int
    lease_until: int | None = None
    owner: str | None = None
    payload_hash: str | None = None
    result: bytes | None = None
    claimed_at: int | None = None
    """Epoch milliseconds of the claim that wrote the record; for operators (age, stuck)."""

    def is_expired(self, now_ms: int) -> bool:
        """DynamoDB deletes expired items days late, so an expired record counts as absent."""
        return self.expiration < now_ms // 1000

    def lease_lapsed(self, now_ms: int) -> bool:
        return self.lease_until is not None and self.lease_until < now_ms
