"""The record format: how a record's attributes are written and read, a part the store holds.

A layout is one object for what tells one table's records from another's: the status texts,
the claim's condition, what a release writes, where a result goes, and how a stored item
reads back as a `Record`. The key hashing is the same object's (`NativeKeys` below, whose
`NATIVE_KEYS` is the native layout; `powertools_layout.PowertoolsLayout`), so a store holds
one layout and a decorator asks the store's layout for its keys. The store does the I/O;
a layout only builds and reads attributes, and knows no store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ..._base.errors import (
    STORED_RECORD_UNREADABLE,
    UNKNOWN_RECORD_STATUS,
    NewerFormatError,
    StoreError,
    unreadable,
)
from ..._base.keys import default_namespace, key_hash, payload_hash
from ..record import FORMAT_ATTRIBUTE, FORMAT_VERSION, AttributeNames, Record, Status

# -- Condition fragments. Expired items linger for days, so "expired" counts as "absent".
KEY_ABSENT = "attribute_not_exists(#pk)"
"""No record: nobody has claimed the key yet."""
NOT_MINE = "(attribute_not_exists(#owner) OR #owner <> :owner)"
"""A claim never replaces a record its own owner token wrote: a delayed copy of a claim
request cannot re-lock a key its owner released, completed or saw expire."""
RECORD_EXPIRED = "#expiration < :expired_before_s"
"""A record past its TTL (on a clock `skew` behind ours too) that DynamoDB has not deleted
yet: the key is free again."""
LEASE_LAPSED = "(#status = :in_progress AND #lease_until < :lapsed_before_ms)"
"""An owner that crashed or timed out: its invocation cannot still be running, even on a
clock `skew` behind ours."""
RELEASED = "(#status = :released AND #lease_until <= :now_ms)"
"""A tombstone: free for any other claim made after the release (so not for a copy of a
claim that was signed before it, from another owner that released since)."""
CLAIMABLE = f"{KEY_ABSENT} OR ({NOT_MINE} AND ({RECORD_EXPIRED} OR {LEASE_LAPSED} OR {RELEASED}))"
OWNED_BY_ME = "#owner = :owner"
"""The fence: only the claim that still holds the key may complete or release it."""
STILL_IN_PROGRESS = "#status = :in_progress"
"""Release never deletes a completed record, even our own: a completion whose answer was
lost may have landed, and deleting it would run the handler and its writes again."""

TOMBSTONE_SECONDS = 900
"""How long a release's tombstone fences delayed copies of the released claim: DynamoDB
refuses a request signed more than 5 minutes ago, so 15 minutes is ample."""
RECORD_BYTES = 1024
"""A refused claim (every replay) is billed like a write of the record it found: 1 WCU per KB.
A result that would take the completed record past 1 KB goes to an item of its own, read
after the refused claim, so a replay's write cost stays 1 WCU whatever the result's size
(docs/benchmarks.md, "Where a result lives", measures the crossover). A budget, not a limit:
a record whose key leaves no room holds a chunk pointer past it (`stored_form`)."""
INLINE_RESULT_BYTES = 350_000
"""The most of a result Powertools' layout writes to `data` (docs/migrating.md)."""

Placements = Iterator[tuple[dict[str, Any], bytes | None]]
"""Where a packed result may go, best first: the record's result attributes, and the blob
to write as chunk items first (None: kept in the record)."""


class Layout:
    """A layout: our own record format, with the hooks another layout overrides, and the
    key hashing each layout brings (`_base.keys.KeyLayout`'s). Attribute names come from the
    store, which passes them in."""

    name = "native"
    supports_scope: bool
    """Whether a scope (tenant) can enter the key."""
    in_progress_text = Status.IN_PROGRESS.value
    statuses: Mapping[str, Status] = {status.value: status for status in Status}
    """The stored status texts this layout writes, and what each means."""
    claim_condition = CLAIMABLE
    record_budget = RECORD_BYTES
    """The completed record's size up to which it keeps its result (`inline_limit`)."""

    def namespace(self, function: Callable[..., Any], given: str | None) -> str:
        """The key prefix for a decorated function, resolved once at decoration."""
        raise NotImplementedError

    def record_key(self, namespace: str, scope: Any, key: Any) -> str:
        """The stored key of a selected key value (and scope, when the layout has one)."""
        raise NotImplementedError

    def payload_hash(self, payload: Any) -> str:
        """The stored hash of a selected payload."""
        raise NotImplementedError

    def claim_values(self, owner: str, now_ms: int, skew_ms: int) -> dict[str, Any]:
        """The values `claim_condition` reads."""
        return {
            ":owner": {"S": owner},
            ":expired_before_s": {"N": str((now_ms - skew_ms) // 1000)},
            ":lapsed_before_ms": {"N": str(now_ms - skew_ms)},
            ":now_ms": {"N": str(now_ms)},
            ":in_progress": {"S": Status.IN_PROGRESS.value},
            ":released": {"S": Status.RELEASED.value},
        }

    def release_write(
        self, key: dict[str, Any], names: AttributeNames, *, owner: str, now_ms: int
    ) -> tuple[str, dict[str, Any]]:
        """The protocol's release of our claim: a tombstone, so a delayed copy of our claim
        request cannot lock the key again (the store adds the fence)."""
        tombstone = {
            **key,
            names.status: {"S": Status.RELEASED.value},
            names.owner: {"S": owner},
            names.lease_until: {"N": str(now_ms)},
            names.expiration: {"N": str(now_ms // 1000 + TOMBSTONE_SECONDS)},
            names.format_version: FORMAT_ATTRIBUTE,
        }
        return "put_item", {"Item": tombstone}

    def forced_release_write(
        self, key: dict[str, Any], names: AttributeNames, shown: Record, *, now_ms: int
    ) -> tuple[str, dict[str, Any]]:
        """An operator's release of the record `shown` (`release_version`): a tombstone that
        keeps its owner token, stamped `now_ms` as the protocol's own release is."""
        tombstone: dict[str, Any] = {
            **key,
            names.status: {"S": Status.RELEASED.value},
            names.lease_until: {"N": str(now_ms)},
            names.expiration: {"N": str(now_ms // 1000 + TOMBSTONE_SECONDS)},
            names.format_version: FORMAT_ATTRIBUTE,
        }
        if shown.owner is not None:
            tombstone[names.owner] = {"S": shown.owner}
        return "put_item", {"Item": tombstone}

    def stored_status(self, status: Status) -> str:
        """The text a status is stored as in this layout."""
        return status.value

    def extra_attribute_names(self) -> tuple[str, ...]:
        """Attribute names the layout writes beside `AttributeNames` (Powertools' `data`)."""
        return ()

    def placements(
        self, names: AttributeNames, blob: bytes, *, inline: bool, pointer: Callable[[], bytes]
    ) -> Placements:
        """Where a packed result may go, best first. `stored_form` takes the first whose item
        fits; a pointer's (`pointer()` makes it) comes last and always fits (checked when the
        decorator was applied)."""
        if inline:
            yield {names.result: {"B": blob}}, None
        yield {names.result: {"B": pointer()}}, blob

    def result_fallback_name(self, names: AttributeNames) -> str:
        """The attribute `replayed_result` reads besides our `result` (none here)."""
        return names.result

    def replayed_result(
        self, item: Mapping[str, Any], status: Status, result: bytes | None
    ) -> bytes | None:
        """What a record replays: our `result` (a layout may read another attribute too)."""
        return result

    def record(
        self,
        item: Mapping[str, Any],
        names: AttributeNames,
        key_name: str,
        step: str,
        pk: str | None = None,
    ) -> Record:
        """The record in a stored item, or a StoreError naming what is wrong with it (the
        attribute, never its value): every stored byte is untrusted. Its format version is
        read first: a record a newer version wrote is a NewerFormatError, whatever else it
        holds (a status, a result tag or a chunk pointer this version does not know)."""
        name, kind = key_name, "a string"
        try:
            pk = text(item[name])
            name, kind = names.format_version, "a format version"
            found = item.get(name)
            if found is not None and found != FORMAT_ATTRIBUTE:
                version = integer(found)
                if version > FORMAT_VERSION:
                    raise NewerFormatError(
                        key_hash=pk, format_version=version, known=FORMAT_VERSION, step=step
                    )
                if version < 1:
                    raise ValueError(name)
            name, kind = names.status, "a string"
            status = self.statuses.get(text(item[name]))
            if status is None:
                raise KeyError(name)
            name, kind = names.expiration, "an integer"
            expiration = integer(item[name])
            name = names.lease_until
            lease_until = optional(item.get(name), integer)
            name = names.claimed_at
            claimed_at = optional(item.get(name), integer)
            name = names.completed_at
            completed_at = optional(item.get(name), integer)
            name, kind = names.owner, "a string"
            owner = optional(item.get(name), text)
            name = names.payload_hash
            payload_hash = optional(item.get(name), text)
            name, kind = names.result, "binary"
            result = optional(item.get(name), binary)
            name, kind = self.result_fallback_name(names), "UTF-8 text"
            result = self.replayed_result(item, status, result)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise _unreadable_record(item, name, kind, names.status, step, pk) from None
        return Record(
            pk=pk,
            status=status,
            expiration=expiration,
            lease_until=lease_until,
            owner=owner,
            payload_hash=payload_hash,
            result=result,
            claimed_at=claimed_at,
            completed_at=completed_at,
        )


def text(value: Any) -> str:
    """An S attribute's string (KeyError / TypeError for any other attribute value)."""
    found = value["S"]
    if type(found) is not str:
        raise TypeError("S")
    return found


def integer(value: Any) -> int:
    """An N attribute that holds an integer, as every number this library writes does."""
    found = value["N"]
    if type(found) is not str:
        raise TypeError("N")
    return int(found)


def binary(value: Any) -> bytes:
    blob = value["B"]
    if type(blob) is bytes:
        return blob
    if type(blob) is bytearray:
        return bytes(blob)
    raise TypeError("B")


def optional(value: Any, read: Callable[[Any], Any]) -> Any:
    return None if value is None else read(value)


def _unreadable_record(
    item: Any, name: str, kind: str, status_name: str, step: str, pk: str | None
) -> StoreError:
    """Why a stored item is no record, in words of our own: the attribute and what it
    should be, never the stored value (the status excepted: it names a state, not data)."""
    present = isinstance(item, Mapping) and item.get(name) is not None
    if name == status_name:
        status = item.get(name) if isinstance(item, Mapping) else None
        shown_text = status.get("S") if isinstance(status, Mapping) else None
        shown = shown_text[:40] if type(shown_text) is str else "none"
        return StoreError(
            f"the record has a status this library does not write: {shown!r}",
            key_hash=pk,
            code=UNKNOWN_RECORD_STATUS,
            step=step,
        )
    what = f"its {name!r} is not {kind}" if present else f"its {name!r} is missing"
    return unreadable(STORED_RECORD_UNREADABLE, what, key_hash=pk, step=step)


class NativeKeys(Layout):
    """Our own layout: `namespace#sha256(canonical JSON of [scope, key])`, and our own
    record format (`Layout`'s)."""

    supports_scope = True

    @staticmethod
    def namespace(function: Callable[..., Any], given: str | None) -> str:
        return given if given is not None else default_namespace(function)

    record_key = staticmethod(key_hash)
    payload_hash = staticmethod(payload_hash)


NATIVE_KEYS = NativeKeys()
"""The native layout: its keys and its record format, one object every native store holds."""
