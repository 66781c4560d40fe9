"""The store contract: what the protocol needs from a store, and what a store promises.

`_protocol.claiming`, `_protocol.completing`, `_protocol.replaying`, `_protocol.engine` and
`_protocol.coroutines` know a store only as an `IdempotencyStore`; the operator commands
(`lambda-idempotency stuck / inspect / release`) as an `OperatorStore`. `DynamoDBStore` keeps both,
in either layout; a store of your own proves it does by passing the conformance suite
(`tests/conformance/`, docs/testing.md). A store may also be a `WakingStore` (`ValkeyStore`
is): a waiting duplicate then blocks until the holder's write wakes it, instead of sleeping
between polls.

What every method promises:

- **Times come in as arguments** (`now_ms`, `lease_until_ms`, `expiration_s`), read from the
  caller's clock. The store holds no decorator settings and no per-call state, so one store
  serves any number of decorators. It reads no clock of its own for a decision, unless it
  keeps time on its server (the conformance suite's SERVER_CLOCK capability: `ValkeyStore`):
  then the caller's times set how long a lease or a record lasts, the server's clock when
  it ends.
- **A read says when it was made, on such a store.** Every record a SERVER_CLOCK store hands
  back (a refused claim, retake, extension or operator's release; `get`; a scan) carries
  `read_at_ms`: the server's clock at the read, mapped into the clock the record's times
  were written in. The protocol judges the record by it (`Record.judged_at`: expired,
  lapsed, released, Retry-After, the next poll), so a caller whose clock is off sees what
  the server sees. Any other store leaves it None, and the caller's clock judges.
- **Expired is absent.** A record whose `expiration` (epoch seconds) has passed counts as no
  record for every condition (claim, retake), even if the store still holds it; `get`
  returns it as stored, and the caller asks `Record.is_expired`.
- **Skew allowance.** Callers' clocks may differ by `skew_ms`: a lease counts as lapsed, and
  a record as expired, only once it is so on a clock that far behind `now_ms`.
- **Fenced on the owner token.** Every write after the claim (complete, release, extend)
  lands only while the record carries the caller's `owner` token (and, but for complete,
  is still IN_PROGRESS). A refused condition is an answer, never an error: `False`, or
  `(False, the record that holds the key)`, and nothing was written.
- **Errors.** A call that fails is a `StoreError` (the store's own error chained), with
  `retryable` (throttled, 5xx, a dropped connection: the same call may succeed) and
  `maybe_applied` (the write may have landed with its answer lost: the caller checks or
  releases, never assumes). A record or result in a shape the store did not write is a
  `StoreError` with a code from `UNREADABLE_CODES`; one written by a newer version is a
  `NewerFormatError`. Never a raw exception of the store's client.
- **Nothing read is trusted**, and no raw key or payload reaches an error message: `pk` is
  already the hashed key.

Records are `_stores.record.Record` values, read back as they were written (but for
`read_at_ms`, which says when): `pk` (the hashed key),
`status`, `expiration` (epoch s), `lease_until` (epoch ms; for a RELEASED tombstone, when it
was released), `owner`, `payload_hash`, `result` (the packed result, or the store's pointer
to its parts: `load_result` reads either), `claimed_at` and `completed_at` (epoch ms, None
where a layout does not keep them). `Record.frees_at_ms(skew_ms)` is the first millisecond
a claim of a held key is granted: a store's conditions must agree with it to the
millisecond (Retry-After and waiters go by it). RELEASED counts as absent for every other
claim from its release on; a layout without tombstones deletes the record instead.

This module is imported only for type checking and by tests: the runtime import path
(`from lambda_idempotency import idempotent, DynamoDBStore`) does not load it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .._base.keys import KeyLayout
    from .record import Record, ScanPage, StoredForm


@runtime_checkable
class IdempotencyStore(Protocol):
    """What the protocol asks of a store: claim, read, complete, release, extend."""

    @property
    def layout(self) -> KeyLayout:
        """How the decorators using this store turn a key (and scope) into a record's `pk`
        and a payload into its hash; `supports_scope` False refuses `scope=` at decoration."""

    def check_decoration(self, namespace: str, *, payload: bool) -> None:
        """Refuse, with a `ConfigurationError` saying which limit and by how much, a namespace
        whose records this store could never write (a key or an item past the store's
        limits), where the decorator is applied: a refusal at the claim would fail every
        call, one at the completion would come after the effect. `payload` says whether
        records carry a payload hash."""

    def ready(self, operation: str, pk: str | None = None, *, step: str | None = None) -> None:
        """Build the client now, before the caller reads its clock for a claim (building is a
        wait on a cold start: a lease read before it would end early). A client that cannot
        be built is the `StoreError` the call would raise, with nothing sent."""

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
        """Write a new IN_PROGRESS record owned by `owner` if the key is free, in one atomic
        step: no record, an expired one or an IN_PROGRESS one whose lease lapsed (each on a
        clock `skew_ms` behind `now_ms`), or a RELEASED one released at or before `now_ms`.
        A record carrying our own `owner` is never replaced: a delayed copy of a claim
        cannot lock a key its owner released, completed or saw expire.

        (True, the record replaced, if any: for the log) when we own the key; else (False,
        the record that holds it), read in the same step (a replay costs one call), or None
        when it was gone before it could be read (the caller claims again)."""

    def retake(
        self,
        pk: str,
        *,
        owner: str,
        released_at_ms: int,
        payload_hash: str | None,
        now_ms: int,
        lease_until_ms: int,
        expiration_s: int,
    ) -> tuple[bool, Record | None]:
        """A durable execution's claim over its own tombstone: the IN_PROGRESS record again,
        only while the key holds exactly the RELEASED record with our `owner` stamped
        `released_at_ms`. (True, None), or (False, what holds the key, None if nothing)."""

    def extend_lease(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        claimed_at_ms: int | None,
        lease_until_ms: int,
        expiration_s: int,
        now_ms: int | None = None,
        lease_ms: int | None = None,
    ) -> tuple[bool, Record | None]:
        """Move our IN_PROGRESS claim's lease to `lease_until_ms`, fenced on `owner`. The
        caller never asks for an earlier lease than it holds (`_protocol.claiming.extend_lease`
        takes the later one), so a lease never shortens. (True, None), or (False, what holds the key
        now) when the claim is no longer ours: taken over, completed or released. `now_ms` (the
        caller's clock when it asked) and `lease_ms` (the lease it asked for, from then) are for
        a SERVER_CLOCK store: it keeps the later of the lease held and `lease_ms` from its own
        now (so the record's `lease_until` may read a little later than `lease_until_ms`),
        whatever the caller's clock did since the claim (stepped by NTP mid-call). A store on
        callers' clocks may ignore both."""

    def get(self, pk: str) -> Record | None:
        """The record as stored, strongly consistent, expired or not (the caller decides);
        None when there is none."""

    def load_result(self, record: Record) -> bytes | None:
        """A completed record's packed result, byte for byte as completion wrote it,
        reassembled when it was stored in parts. Parts missing or not what the record names
        are a `StoreError` (`StoredResultUnreadable`): never a partial result."""

    def stored_form(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        result: bytes,
        expiration_s: int,
        claimed_at_ms: int | None = None,
        completed_at_ms: int | None = None,
    ) -> StoredForm:
        """A completion's writes, decided once: every retry sends this same form. The
        protocol reads only its `chunks` (not None: write them with `put_chunks` first); the
        rest is the store's own. A result the store can never hold is a `StoreError` that is
        not `retryable` (the protocol then completes with a NOT_STORED marker)."""

    def put_chunks(self, pk: str, *, owner: str, result: bytes, expiration_s: int) -> bytes:
        """Write a result too large for the record as immutable parts keyed by `owner`,
        before the record names them; the same result written again writes the same parts.
        Returns the pointer the record holds instead."""

    def write_completion(self, form: StoredForm, writes: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Write the COMPLETED record of `form`, fenced on its owner: False (nothing written,
        enlisted `writes` included) when another claim holds the key. With `writes`, the
        record and the writes land together or not at all; an enlisted write's condition
        failing is `CompletionConflictError`. Sending the same form again is safe."""

    def complete(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        result: bytes,
        expiration_s: int,
        claimed_at_ms: int | None = None,
        completed_at_ms: int | None = None,
        writes: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """`write_completion` of a result kept in the record as given (small, or a pointer
        `put_chunks` returned): the one-call completion, fenced on `owner` as above."""

    def release(self, pk: str, *, owner: str, now_ms: int) -> bool:
        """Give up our IN_PROGRESS claim so a retry runs again, fenced on `owner`: a RELEASED
        tombstone stamped `now_ms` (a layout without tombstones deletes the record). False,
        with nothing written, when the record is not ours or no longer IN_PROGRESS (a
        completion that landed is never undone)."""

    def commit_writes(self, writes: Sequence[Mapping[str, Any]]) -> None:
        """Commit enlisted writes on their own, all or none, for a call that ran without a
        record (idempotency disabled)."""


@runtime_checkable
class OperatorStore(IdempotencyStore, Protocol):
    """What the operator commands add: find stuck records, release one by its version.

    (Listing namespaces reads a table's key attribute itself, through `table_name`, `client`,
    `names` and `sort_key_attr`, or a ValkeyStore's key names, `valkey.operators`; `doctor`
    reads each one's own set-up.)"""

    def scan_stuck(
        self, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Live (not expired at `now_ms`) IN_PROGRESS records claimed before
        `claimed_before_ms`, page by page, each page with what it cost; a matching record
        the store cannot read is listed by key in `unreadable`, not a reason to stop."""

    def release_version(self, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
        """Replace the record `shown` with a RELEASED tombstone (keeping its owner token,
        stamped `now_ms`) only if it is still exactly that version. (True, None), or (False,
        what holds the key now, None if nothing) with nothing written: a record completed
        between the operator's read and this write stays, and its retries replay it."""


@runtime_checkable
class WakingStore(IdempotencyStore, Protocol):
    """An optional capability: a store that can wake a waiting duplicate when the record it
    waits on changes (`ValkeyStore`), so it answers within a round trip of the holder's
    completion rather than at the next poll. A store without it is polled on the schedule
    (`_protocol.waiting`); one with it is polled on that schedule too, as the fallback."""

    def wait_for_change(self, pk: str, *, seen: Record, timeout_s: float) -> None:
        """Return when the record `pk` may have changed from `seen` (at least: its holder
        completed or released it), or after `timeout_s` at the latest; the caller re-reads
        the record either way, so a spurious return costs a read, never a wrong answer. A
        change that lands between the caller's read of `seen` and this call is not missed
        (it returns at once). Never raises for a lost wake-up: it waits out `timeout_s`."""
