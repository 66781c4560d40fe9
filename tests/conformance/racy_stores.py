"""Stores that are atomic only most of the time: each replaces one conditional write of
`DynamoDBStore` (on a real table) by a read, a few milliseconds' gap, and an unconditional
write, deciding by the read exactly as the condition would have. One caller at a time sees no
difference (they pass `test_store_contract`); callers racing on one key do, and
`test_races` must catch each (tests/integration/test_conformance_catches_races.py).

- `ReadThenWriteClaim`: a claim that reads the record, then writes its own if the key was free.
- `UnfencedCompletion`: a completion that checks the owner by a read, then writes regardless.
- `UnfencedRelease`: a release that checks the claim by a read, then writes the tombstone
  over whatever claim is there by then."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from lambda_idempotency import DynamoDBStore, Status
from lambda_idempotency._stores.record import Record, StoredForm
from lambda_idempotency.testing import create_idempotency_table
from tests.conformance.conftest import DYNAMODB, SCOPE, TOMBSTONE, StoreFactory, _dynamodb

GAP_S = 0.005
"""Between the read and the write: the time a busy client or server may take there."""


def free_for(held: Record | None, owner: str, now_ms: int, skew_ms: int) -> bool:
    """What the claim's condition decides (`CLAIMABLE`), decided on a record read before."""
    if held is None:
        return True
    if held.owner == owner:
        return False
    if held.is_expired(now_ms, skew_ms):
        return True
    if held.status is Status.RELEASED:
        return (held.lease_until or 0) <= now_ms
    return held.status is Status.IN_PROGRESS and held.lease_lapsed(now_ms, skew_ms)


class ReadThenWriteClaim(DynamoDBStore):
    def claim(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        now_ms: int,
        lease_until_ms: int,
        expiration_s: int,
        skew_ms: int = 0,
    ) -> tuple[bool, Record | None]:
        held = self.get(pk)
        if not free_for(held, owner, now_ms, skew_ms):
            return False, held
        time.sleep(GAP_S)
        item = self.claim_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            now_ms=now_ms,
            lease_until_ms=lease_until_ms,
            expiration_s=expiration_s,
        )
        self.client.put_item(TableName=self.table_name, Item=item)
        return True, held


class UnfencedCompletion(DynamoDBStore):
    def write_completion(self, form: StoredForm, writes: Sequence[Mapping[str, Any]] = ()) -> bool:
        if writes:  # enlisted writes: not raced here
            return super().write_completion(form, writes)
        held = self.get(form.pk)
        if held is None or held.owner != form.owner:
            return False
        time.sleep(GAP_S)
        self.client.put_item(TableName=self.table_name, Item=form.item)
        return True


class UnfencedRelease(DynamoDBStore):
    def release(self, pk: str, *, owner: str, now_ms: int) -> bool:
        held = self.get(pk)
        if held is None or (held.owner, held.status) != (owner, Status.IN_PROGRESS):
            return False
        time.sleep(GAP_S)
        _, target = self.layout.release_write(self._key(pk), self.names, owner=owner, now_ms=now_ms)
        self.client.put_item(TableName=self.table_name, **target)
        return True


RACY = (ReadThenWriteClaim, UnfencedCompletion, UnfencedRelease)
_tables = (f"racy-{os.getpid()}-{n}" for n in itertools.count())


def factory(kind: type[DynamoDBStore], client: Any) -> StoreFactory:
    """A conformance `StoreFactory` of one racy kind on a new table of `client`'s endpoint,
    with the capabilities of the store it imitates (the native layout)."""

    def make() -> DynamoDBStore:
        return kind(create_idempotency_table(client, next(_tables)), client=client)

    return _dynamodb(f"racy-{kind.__name__}", make, DYNAMODB | {TOMBSTONE, SCOPE})
