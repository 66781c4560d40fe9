"""ValkeyStore: the idempotency record in Valkey (or Redis), each protocol step one script.

    from lambda_idempotency import ValkeyStore, idempotent

    @idempotent(store=ValkeyStore("rediss://cache.example.com:6379"), key="order_id")
    def handler(event, context): ...

Every step is one server-side Lua script (`scripts`): claim-or-answer-with-the-holder,
complete only while the record carries our owner token, release only our claim in progress,
extend only our live claim, an operator's release only of the version shown. Nothing is read
in one call and written in another, so no race sits between them (Powertools' Redis layer
claims with SET NX, reads with GET, takes an orphan over with a second SET under a lock key
and completes with an unconditional SET: none of it fenced).

**The server's clock decides.** The contract hands a store times read from the caller's
clock (`now_ms`, `lease_until_ms`, `expiration_s`). Here they are turned into server-clock
deadlines inside the script: the claim measures `offset = now_ms - TIME` and stores it, and
every caller time T of that record maps to the server's as `T - offset` (a lease of the
invocation's remaining time lapses that long after the claim ran, on the server's clock).
A completed record's key expires (PEXPIREAT) at the first server millisecond it counts as
expired; a claim or a tombstone lingers past it (`scripts.LINGER_MS`), its expiry and lapse
being the claim's conditions, so a holder outliving both while unchallenged still completes.
The record read back carries the writers' own numbers, as the DynamoDB store's does, and
`read_at_ms`: the server's clock at the read (each script that answers a record answers
`TIME` with it), mapped into the writer's clock by the record's offset. The protocol judges
the record by that (`Record.judged_at`), so Retry-After, a waiter's polls and its takeover of
a lapsed lease or a released key follow the server's clock, not the reader's.

**What the skew allowance does then.** Callers' clocks no longer decide anything, so their
disagreement cannot free a live key early, nor make a reader misjudge one. `skew_ms` stays a
grace period on the server's clock: a lease frees `skew_ms` after it ends, a record expires
`skew_ms` after its expiration, exactly as long as on DynamoDB and, for a claim, by the
allowance of the claim that asks (as there), so decorators mean the same thing on either
store; the key of a completed record expires by the allowance of the call that wrote it.
Retry-After and a waiter's polls include it, computed on the server's time, so they fall
when the server frees the key whatever the caller's clock says. The allowance no longer has
to cover the callers' skew: it only delays a crashed holder's takeover, by as much. A
caller whose clock is minutes off no longer takes over a live claim, nor waits on a key the
server already gave away.

**Keys.** A record is one hash, `{prefix}{<pk>}`: the hashed key inside braces is a hash
tag, so in cluster mode the record, its tombstone (the same hash) and its result (a field of
it, up to Lambda's 6 MB and beyond: Valkey strings hold 512 MB) live on one node, and every
script touches that node only. The key scheme is `NATIVE_KEYS`, scope (tenant) included.

**What it cannot keep.** Enlisted DynamoDB writes (`current_execution().add_write`) commit
in one DynamoDB transaction with the record; Valkey has none with DynamoDB, so they are
refused with a `ConfigurationError` at `add_write`, inside the handler, before anything is
stored (`enlisted_writes_refusal`). Durability is Valkey's: a write acknowledged by a
primary that dies before its replica received it is lost (asynchronous replication), and a
claim lost so lets a second caller run the effect again (measured: docs/contributing/valkey.md).

**Waiting for replicas** (`replicas=`, `aof=`): each write script and its WAIT in one
pipeline; what a shortfall or a refused WAIT means for each step is `replicas`'. How the
client is built and what its failures mean is `connection`'s; how a record is read,
`reading`'s; how waiters block, `waking`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._base import lifecycle
from ..._base.errors import ConfigurationError, StoreError
from ..dynamodb.layout import NATIVE_KEYS, TOMBSTONE_SECONDS
from ..record import Record, ScanPage, StoredForm
from . import operators
from .connection import SOCKET_TIMEOUT_SECONDS, checked_target, fresh_pool_locks
from .reading import record_of
from .transport import ScriptTransport
from .urls import masked
from .waking import Waiters

if TYPE_CHECKING:
    from ..._base.keys import KeyLayout

DEFAULT_PREFIX = "idempotency:"
_LEFT_BEHIND: list[Any] = []
"""Clients a forked child dropped: its parent's, kept unclosed (`renew`)."""
ENLISTED_WRITES_REFUSED = (
    "add_write enlists a DynamoDB write to commit in one transaction with the idempotency "
    "record; with ValkeyStore the record lives in Valkey, which cannot join a DynamoDB "
    "transaction, so the write would not land together with the result. Write it in the "
    "handler (idempotently), or keep this function's records in a DynamoDBStore"
)


class ValkeyStore(ScriptTransport):
    """The idempotency record in Valkey or Redis (tested on Valkey 9, single node and
    cluster; docs/valkey.md).

    url: `valkey://`, `valkeys://` (TLS), `redis://`, `rediss://` (TLS) or `unix://`; default
    the environment's IDEMPOTENCY_VALKEY_URL. client: a redis-py client you already have
    (`redis.Redis` or `redis.cluster.RedisCluster`, bytes responses) instead of a URL.
    cluster: build a cluster client from `url`. prefix: put before every record's key.
    timeout: seconds a call built from `url` waits for its answer (default 5).
    replicas: after each write (claim, completion, release, extension), wait until this many
    replicas acknowledged it (WAIT), at most `replica_timeout_ms` (default 1000; 2500 with
    `aof`). A claim they did not acknowledge is released and refused (`StoreError`, code
    `REPLICAS_NOT_ACKNOWLEDGED`) before the effect runs; a completion or a release is
    logged and answered (the module docstring says why). aof: wait with WAITAOF instead:
    the primary's own append-only file fsynced, and `replicas` replicas' too (needs
    `appendonly yes`; with replicas about a second a write, docs/valkey.md).
    """

    enlisted_writes_refusal = ENLISTED_WRITES_REFUSED
    """Why `add_write` is refused with this store (read by the protocol at the claim)."""

    def __init__(
        self,
        url: str | None = None,
        *,
        client: Any = None,
        cluster: bool = False,
        prefix: str = DEFAULT_PREFIX,
        timeout: float = SOCKET_TIMEOUT_SECONDS,
        replicas: int = 0,
        replica_timeout_ms: int | None = None,
        aof: bool = False,
    ) -> None:
        url, timeout = checked_target(url, client, timeout, cluster=cluster)
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigurationError(
                "prefix must be a string without braces: the braces after it make the hashed "
                "key the record's hash tag (its cluster slot)"
            )
        super().__init__(url, client, cluster, timeout, prefix, (replicas, replica_timeout_ms, aof))
        self.replicas, self.replica_timeout_ms = self._wait.replicas, self._wait.timeout_ms
        self.aof = self._wait.aof
        lifecycle.track(self)

    def prepare(self) -> None:
        """Nothing to build ahead: a connection opened before a SnapStart snapshot would be
        a dead one after the restore (`_base.lifecycle`)."""

    def renew(self) -> None:
        """In a forked child or a restored SnapStart environment: a waiter id of its own (a
        copied one shares its parent's wake-ups), and a client of its own when the store built
        it (redis-py renews a pool in a forked child, not after a restore)."""
        self._waiters = Waiters(self._timeout)
        self._building = threading.Lock()  # a fork copies one another thread held as held
        if self._url is not None:
            if self._client is not None:
                # never closed here: closing takes its pool's lock, which a fork copies as
                # held when another thread was in the pool (the child would hang for ever)
                _LEFT_BEHIND.append(self._client)
            self._client, self._lean = None, None
            self._scripts = None
        elif self._client is not None:
            fresh_pool_locks(self._client)

    def __repr__(self) -> str:
        where = "client" if self._url is None else masked(self._url)
        waits = f", replicas={self.replicas}" if self.replicas else ""
        waits += ", aof=True" if self.aof else ""
        return f"ValkeyStore({where!r}, prefix={self.prefix!r}{waits})"

    # -- the contract -------------------------------------------------------------------------

    @property
    def layout(self) -> KeyLayout:
        return NATIVE_KEYS

    def check_decoration(self, namespace: str, *, payload: bool) -> None:
        """Any namespace fits: Valkey keys and values hold far more than a record needs."""

    def ready(self, operation: str, pk: str | None = None, *, step: str | None = None) -> None:
        """Build the client and its scripts (no round trip: scripts load on first use)."""
        self._built(step, pk)
        self._script("claim", pk)

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
        args = [owner, payload_hash or "", now_ms, lease_until_ms, expiration_s, skew_ms]
        won, flat, server_ms = self._written("claim", pk, args, undo=(owner, now_ms))
        if not won:
            return False, record_of(flat, pk, "claim", server_ms)
        try:
            return True, record_of(flat, pk, "claim", server_ms)
        except StoreError:
            return True, None  # the record replaced is for the log only: the key is ours

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
        args = [owner, released_at_ms, payload_hash or "", now_ms, lease_until_ms, expiration_s]
        won, flat, *server_ms = self._written("retake", pk, args, undo=(owner, now_ms))
        return (True, None) if won else (False, record_of(flat, pk, "claim", *server_ms))

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
        claimed = "" if claimed_at_ms is None else claimed_at_ms
        asked = ["", ""] if now_ms is None or lease_ms is None else [now_ms, lease_ms]
        args = [owner, payload_hash or "", claimed, lease_until_ms, expiration_s, *asked]
        won, flat, *server_ms = self._written("extend", pk, args)
        return (True, None) if won else (False, record_of(flat, pk, "extend", *server_ms))

    def get(self, pk: str) -> Record | None:
        """The record, with the server's clock at the read (`read_at_ms`): one script."""
        flat, server_ms = self._run("get", pk, [])
        return record_of(flat, pk, "get", server_ms)

    def load_result(self, record: Record) -> bytes | None:
        """The result as completion wrote it: it lives in the record itself, whole."""
        return record.result

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
        """The completion, in one script: the result stays in the record whatever its size
        (no parts, so `chunks` is None and a replay is one call)."""
        item = {
            "payload_hash": payload_hash,
            "expiration": expiration_s,
            "result": result,
            "claimed_at": claimed_at_ms,
            "completed_at": completed_at_ms,
        }
        return StoredForm(pk, owner, item, None)

    def put_chunks(self, pk: str, *, owner: str, result: bytes, expiration_s: int) -> bytes:
        """Never asked for (`stored_form` keeps every result whole); the result as given."""
        return result

    def write_completion(self, form: StoredForm, writes: Sequence[Mapping[str, Any]] = ()) -> bool:
        if writes:
            raise ConfigurationError(ENLISTED_WRITES_REFUSED, key_hash=form.pk)
        item = form.item
        args = [
            form.owner,
            item["payload_hash"] or "",
            item["expiration"],
            item["result"],
            _blank(item["claimed_at"]),
            _blank(item["completed_at"]),
        ]
        return bool(self._written("complete", form.pk, args))

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
        form = self.stored_form(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            result=result,
            expiration_s=expiration_s,
            claimed_at_ms=claimed_at_ms,
            completed_at_ms=completed_at_ms,
        )
        return self.write_completion(form, writes)

    def release(self, pk: str, *, owner: str, now_ms: int) -> bool:
        args = [owner, now_ms, now_ms // 1000 + TOMBSTONE_SECONDS]
        return bool(self._written("release", pk, args))

    def commit_writes(self, writes: Sequence[Mapping[str, Any]]) -> None:
        if writes:
            raise ConfigurationError(ENLISTED_WRITES_REFUSED)

    # -- wake-ups (the contract's optional `WakingStore`) -----------------------------------------

    def wait_for_change(self, pk: str, *, seen: Record, timeout_s: float) -> None:
        """Return once the record may have changed from `seen`, or after `timeout_s`: the
        caller re-reads it either way. Two calls: one script arms this waiter while the
        record is still `seen` (else returns at once), then BLPOP on the waiter's own list,
        which the holder's completion or release fills in its own script (`scripts.ARM`).
        A wake-up lost with its connection costs the rest of `timeout_s`, never more, and
        never an error: the caller's next read says what the server can. A waiter past the
        pool's share of blocks sleeps `timeout_s` instead (`waking`)."""
        if pk.startswith("}"):  # an empty hash tag: no key beside the record in its slot
            time.sleep(max(0.0, timeout_s))
            return
        self._waiters.wait(self.client, self._script("arm"), self.key_of(pk), seen, timeout_s)

    # -- operators ----------------------------------------------------------------------------

    def scan_stuck(
        self, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Live IN_PROGRESS records claimed before a time: SCAN over every primary (a cluster
        client scans each), then each hash read. `capacity_units` is 0: Valkey bills none.

        Judged on the server's clock, as the claims are: a record's `claimed_at` maps by its
        own offset (its holder's clock), `claimed_before_ms` by the operator's, measured as
        `now_ms` against the server's clock at the scan's first read."""
        return operators.scan_stuck(self, claimed_before_ms, now_ms, page_size or 100)

    def release_version(self, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
        """Replace exactly the record `shown` by a RELEASED tombstone keeping its owner token,
        stamped `now_ms`; (False, what holds the key now) when anything changed since."""
        args = [
            shown.status.value,
            shown.owner or "",
            _blank(shown.lease_until),
            shown.expiration,
            _blank(shown.claimed_at),
            _blank(shown.completed_at),
            now_ms,
            now_ms // 1000 + TOMBSTONE_SECONDS,
        ]
        released, flat, *server_ms = self._written("release_version", shown.pk, args)
        if released:
            return True, None
        return False, record_of(flat, shown.pk, "release", *server_ms)

    # -- keys ---------------------------------------------------------------------------------

    # -- internals ----------------------------------------------------------------------------


def _blank(value: int | None) -> int | str:
    return "" if value is None else value
