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
claim lost so lets a second caller run the effect again (measured: docs/valkey.md).

**Waiting for replicas** (`replicas=`, `aof=`). Each write script is followed, on the same
connection, by `WAIT replicas timeout` (or `WAITAOF`): one pipeline, one round trip, sent in
cluster mode to the node that owns the key's slot. What a shortfall means depends on the step:
a claim (or retake) not acknowledged is released at once and refused with a `StoreError`
(`REPLICAS_NOT_ACKNOWLEDGED`) before the effect runs; an extension not acknowledged is a
`StoreError` too (a lost extension lets a second caller in while the holder runs). A
completion or a release not acknowledged is logged (`replicas_not_acknowledged`, a warning)
and answered as written: the effect has run and the record on the primary says so; raising
would only make the protocol retry until the invocation must answer and then return the same
result, and what a failover can lose then is a replay (a completion) or a wait until the
lease ends (a release), never a second run of an effect whose claim was acknowledged. WAIT
narrows the window; it does not close it: a replica that acknowledged may still lose the
write if it dies too, and an asynchronous failover may promote a replica that did not.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..._base import lifecycle
from ..._base.errors import (
    STORED_RECORD_UNREADABLE,
    UNKNOWN_RECORD_STATUS,
    ConfigurationError,
    NewerFormatError,
    StoreError,
    unreadable,
)
from ..._base.observe import emit
from ..dynamodb.layout import NATIVE_KEYS, TOMBSTONE_SECONDS
from ..record import FORMAT_VERSION, Record, ScanPage, Status, StoredForm
from . import scripts
from .waking import WAKE_MIN_BLOCK_SECONDS, Waiters

if TYPE_CHECKING:
    from ..._base.keys import KeyLayout

URL_VARIABLE = "IDEMPOTENCY_VALKEY_URL"
SCHEMES = ("valkey://", "valkeys://", "redis://", "rediss://", "unix://")
DEFAULT_PREFIX = "idempotency:"
SOCKET_TIMEOUT_SECONDS = 5.0
"""How long a call waits for its answer on a client built from a URL: past it, the call is a
`StoreError` (retryable, maybe applied) rather than a wait as long as the invocation."""
CONNECT_TIMEOUT_SECONDS = 2.0
POOL_CONNECTIONS = 100
"""The connections a store built from a URL opens at most (redis-py's default); a call that
finds them all busy waits for one, up to the store's timeout (a blocking pool)."""
MAX_TIMEOUT_SECONDS = 900
"""Lambda's longest invocation: a longer wait for one answer could only outlive its caller."""
REPLICA_TIMEOUT_MS = 1000
"""How long a write waits for its replicas' acknowledgement by default (`replica_timeout_ms`):
a healthy replica answers WAIT within a millisecond or two."""
AOF_REPLICA_TIMEOUT_MS = 2500
"""The default with `aof=True`: WAITAOF 1 1 answered in about a second on a healthy pair,
under `appendfsync everysec` and `always` alike (a replica reports the offset it fsynced in
its once-a-second acknowledgement), so a 1 s limit refused claims that were fine."""
REPLICAS_NOT_ACKNOWLEDGED = "ReplicasNotAcknowledged"
"""The `StoreError.code` of a claim, retake or extension fewer replicas acknowledged than
asked."""
WAIT_REFUSED = "WaitRefused"
"""The `StoreError.code` of a claim, retake or extension whose WAIT (or WAITAOF) the server
refused after the write ran (no append-only file, an ACL user without WAIT): configuration,
so not retryable; a claim is released first."""
POOL_EXHAUSTED = "PoolExhausted"
"""The `StoreError.code` of a call that found no free connection in time: nothing was sent."""
POOL_RETRY_FIRST_SECONDS = 0.001
POOL_RETRY_MAX_SECONDS = 0.05
"""A call on a given client's full pool is sent again after these pauses, doubling."""
_WAIT_FAILS = ("claim", "retake", "extend")
"""The writes refused when not acknowledged; the others are logged (the module docstring)."""

ENLISTED_WRITES_REFUSED = (
    "add_write enlists a DynamoDB write to commit in one transaction with the idempotency "
    "record; with ValkeyStore the record lives in Valkey, which cannot join a DynamoDB "
    "transaction, so the write would not land together with the result. Write it in the "
    "handler (idempotently), or keep this function's records in a DynamoDBStore"
)
_STATUSES = {status.value: status for status in Status}
_DECIMAL = re.compile(rf"-?[0-9]{{1,{scripts.DIGITS}}}")


def _redis() -> Any:
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - exercised where redis-py is absent
        from ..._base.extras import MissingExtraError

        raise MissingExtraError(
            "ValkeyStore needs redis-py: pip install 'lambda-idempotency[valkey]'",
            extra="valkey",
            module="redis",
        ) from exc
    return redis


class ValkeyStore:
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
        _redis()
        if client is None and url is None:
            url = os.environ.get(URL_VARIABLE) or None
            if url is None:
                raise ConfigurationError(
                    f"ValkeyStore needs a url, a client= or {URL_VARIABLE} in the environment"
                )
        if client is not None and url is not None:
            raise ConfigurationError("ValkeyStore takes a url or a client=, not both")
        if url is not None and not url.startswith(SCHEMES):
            raise ConfigurationError(
                f"ValkeyStore's url starts with one of {', '.join(SCHEMES)}; "
                f"not {_masked(url).partition(':')[0]!r}"
            )
        if client is not None and _decodes(client):
            raise ConfigurationError(
                "ValkeyStore needs a client that answers bytes (decode_responses=False): "
                "results are binary"
            )
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ConfigurationError(
                "prefix must be a string without braces: the braces after it make the hashed "
                "key the record's hash tag (its cluster slot)"
            )
        self._url = url
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            timeout = -1
        if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
            raise ConfigurationError(
                f"timeout must be seconds, more than 0 and at most {MAX_TIMEOUT_SECONDS}"
            )
        self._cluster = cluster
        self._timeout = float(timeout)
        if replica_timeout_ms is None:
            replica_timeout_ms = AOF_REPLICA_TIMEOUT_MS if aof is True else REPLICA_TIMEOUT_MS
        self.replicas, self.replica_timeout_ms, self.aof = _wait_options(
            replicas, replica_timeout_ms, aof, self._timeout
        )
        self._client = client
        self.prefix = prefix
        self._scripts: dict[str, Any] | None = None
        self._building = threading.Lock()
        self._knows_unsent = False
        """Whether a failure to connect means nothing was sent: true of the clients this
        store builds (redis-py retries nothing on them: a retry hides whether an earlier
        attempt went out), false of a client given, which may retry or re-route."""
        self._waiters = Waiters(self._timeout)
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
            self._client = None
            self._scripts = None

    def __repr__(self) -> str:
        where = "client" if self._url is None else _masked(self._url)
        waits = f", replicas={self.replicas}" if self.replicas else ""
        waits += ", aof=True" if self.aof else ""
        return f"ValkeyStore({where!r}, prefix={self.prefix!r}{waits})"

    # -- the contract -------------------------------------------------------------------------

    @property
    def layout(self) -> KeyLayout:
        return NATIVE_KEYS

    @property
    def client(self) -> Any:
        """The redis-py client, built from the URL on first use."""
        if self._client is None:
            with self._building:
                if self._client is None:
                    self._client = self._build_client()
        return self._client

    def close(self) -> None:
        """Close the connections of the client this store built from its URL (the next call
        opens new ones). A client you gave stays yours to close."""
        client = self._client
        if self._url is not None and client is not None:
            self._client, self._scripts = None, None
            self._waiters = Waiters(self._timeout)
            client.close()
            for node in client.get_nodes() if self._cluster else ():
                # RedisCluster.close() closes each node's client but not its pool: the
                # sockets a pipeline sent to the key's node (`_run_and_wait`) would linger
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()

    def check_decoration(self, namespace: str, *, payload: bool) -> None:
        """Any namespace fits: Valkey keys and values hold far more than a record needs."""

    def ready(self, operation: str, pk: str | None = None, *, step: str | None = None) -> None:
        """Build the client and its scripts (no round trip: scripts load on first use)."""
        try:
            self._script("claim")
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"the Valkey client cannot be built ({type(exc).__name__}): check the URL",
                key_hash=pk,
                code="ClientNotBuilt",
                step=step,
            ) from exc

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
            return False, self._record(flat, pk, "claim", server_ms)
        try:
            return True, self._record(flat, pk, "claim", server_ms)
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
        return (True, None) if won else (False, self._record(flat, pk, "claim", *server_ms))

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
        return (True, None) if won else (False, self._record(flat, pk, "extend", *server_ms))

    def get(self, pk: str) -> Record | None:
        """The record, with the server's clock at the read (`read_at_ms`): one script."""
        flat, server_ms = self._run("get", pk, [])
        return self._record(flat, pk, "get", server_ms)

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
        deadline = time.monotonic() + timeout_s
        if pk.startswith("}"):  # an empty hash tag: no key beside the record in its slot
            time.sleep(max(0.0, timeout_s))
            return
        waiters = self._waiters
        slots, longest = waiters.limits(self.client)
        if not slots.acquire(blocking=False):
            time.sleep(max(0.0, timeout_s))
            return
        key = self.key_of(pk)
        token = waiters.token()
        wake = f"{key}:wake:{token}"
        args = [seen.status.value, seen.owner or "", _blank(seen.lease_until), token]
        try:
            armed = self._script("arm")(
                keys=[key, f"{key}:waiters", wake],
                args=[_arg(a) for a in [*args, scripts.WAKE_KEEP_MS]],
            )
            if not armed:
                return
            block = min(deadline - time.monotonic(), longest)
            if block >= WAKE_MIN_BLOCK_SECONDS:
                self.client.blpop([wake], timeout=round(block, 3))
        except _redis().exceptions.RedisError:
            left = deadline - time.monotonic()
            if left > 0:
                time.sleep(left)
        finally:
            slots.release()

    # -- operators ----------------------------------------------------------------------------

    def scan_stuck(
        self, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Live IN_PROGRESS records claimed before a time: SCAN over every primary (a cluster
        client scans each), then each hash read. `capacity_units` is 0: Valkey bills none.

        Judged on the server's clock, as the claims are: a record's `claimed_at` maps by its
        own offset (its holder's clock), `claimed_before_ms` by the operator's, measured as
        `now_ms` against the server's clock at the scan's first read."""
        size = page_size or 100
        operator_offset: int | None = None
        match = _glob_escape(self.prefix) + "{*}"
        keys = self._call(
            "scan", None, lambda client: iter(client.scan_iter(match=match, count=size))
        )
        while True:
            page: list[bytes] = self._call("scan", None, lambda _: _take(keys, size))
            if not page:
                return
            records, unreadable_keys = [], []
            for name in page:
                try:
                    pk = self.pk_of(name)
                except UnicodeDecodeError:  # not a name this library writes: listed, not read
                    inner = name[len(self.prefix.encode()) + 1 : -1]
                    unreadable_keys.append(inner.decode(errors="backslashreplace"))
                    continue
                if pk is None:
                    continue
                try:
                    flat, server_ms = self._call(
                        "scan", pk, lambda _, name=name: self._script("get")(keys=[name])
                    )
                except StoreError as exc:
                    if exc.code != STORED_RECORD_UNREADABLE:
                        raise  # the server failed: not the record's fault
                    unreadable_keys.append(pk)  # a key of another type (WRONGTYPE)
                    continue
                try:
                    record = self._record(flat, pk, "scan", server_ms)
                except StoreError:
                    unreadable_keys.append(pk)
                    continue
                if operator_offset is None:
                    operator_offset = now_ms - int(server_ms)
                if (
                    record is not None
                    and record.status is Status.IN_PROGRESS
                    and not record.is_expired(record.judged_at(now_ms))
                    and _claimed_before(record, claimed_before_ms, operator_offset, server_ms)
                ):
                    records.append(record)
            yield ScanPage(records, len(page), 0.0, unreadable_keys)
            if len(page) < size:
                return

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
        return False, self._record(flat, shown.pk, "release", *server_ms)

    # -- keys ---------------------------------------------------------------------------------

    def key_of(self, pk: str) -> str:
        """The record's key: the hashed key in braces, a hash tag, so in cluster mode the
        record and anything kept beside it under the same tag share one slot."""
        return f"{self.prefix}{{{pk}}}"

    def pk_of(self, key: bytes | str) -> str | None:
        text = key.decode() if isinstance(key, bytes) else key
        if not (text.startswith(self.prefix + "{") and text.endswith("}")):
            return None
        return text[len(self.prefix) + 1 : -1]

    # -- internals ----------------------------------------------------------------------------

    def _build_client(self) -> Any:
        """A client of the URL. A standalone one makes no retries of its own: each script is
        safe to send again, but only the protocol knows when (it retries completions with a
        backoff, and answers a failed claim before its effect runs), and an error says
        truthfully whether anything went out. A cluster client keeps redis-py's re-routing
        (MOVED after a failover, a node gone). A pooled connection the server closed while
        the function was frozen is found closed when it leaves the pool, and replaced. Its
        pool blocks: a call that finds every connection busy waits for one (`waking`)."""
        redis = _redis()
        url = _redis_url(self._url or "")
        options: dict[str, Any] = {
            "socket_timeout": self._timeout,
            "socket_connect_timeout": min(self._timeout, CONNECT_TIMEOUT_SECONDS),
        }
        pooled: dict[str, Any] = {"max_connections": POOL_CONNECTIONS, "timeout": self._timeout}
        if self._cluster:
            from redis.cluster import RedisCluster

            pooled["connection_pool_class"] = redis.BlockingConnectionPool
            return RedisCluster.from_url(url, **options, **pooled)
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        pool = redis.BlockingConnectionPool.from_url(
            url, retry=Retry(NoBackoff(), 0), **options, **pooled
        )
        client = redis.Redis(connection_pool=pool)
        client.auto_close_connection_pool = True
        self._knows_unsent = True
        return client

    def _script(self, name: str) -> Any:
        loaded = self._scripts
        if loaded is None:
            client = self.client
            loaded = {step: client.register_script(source) for step, source in scripts.ALL.items()}
            self._scripts = loaded
        return loaded[name]

    def _run(self, name: str, pk: str, args: list[Any]) -> Any:
        script = self._script(name)
        key = self.key_of(pk)
        return self._call(name, pk, lambda client: script(keys=[key], args=[_arg(a) for a in args]))

    def _written(
        self, name: str, pk: str, args: list[Any], *, undo: tuple[str, int] | None = None
    ) -> Any:
        """A write script's answer, after its replicas acknowledged it when `replicas` or
        `aof` ask so. A claim, retake or extension they did not acknowledge raises (a claim
        `undo`ne first: released by its owner token, best effort); the others are logged."""
        if not self.replicas and not self.aof:
            return self._run(name, pk, args)
        script, key = self._script(name), self.key_of(pk)
        values = [_arg(a) for a in args]
        answer, short, refused = self._call(
            name, pk, lambda client: self._run_and_wait(client, script, key, values)
        )
        wrote = bool(answer[0]) if isinstance(answer, list) else bool(answer)
        if short is None or not wrote:
            return answer  # a refused write wrote nothing a failover could lose
        if name not in _WAIT_FAILS:
            emit(logging.WARNING, "replicas_not_acknowledged", pk, step=name, detail=short)
            return answer
        released = False
        if undo is not None:
            owner, now_ms = undo
            try:
                released = bool(
                    self._run("release", pk, [owner, now_ms, now_ms // 1000 + TOMBSTONE_SECONDS])
                )
            except StoreError:
                released = False
        what = (
            "the claim was released and nothing ran"
            if released
            else "nothing ran; the claim may hold the key until its lease ends"
            if undo is not None
            else "the extension may be lost in a failover: stop the work"
        )
        said = "the server refused" if refused else "replicas did not acknowledge the write"
        raise StoreError(
            f"Valkey {name}: {said} ({short}); {what}",
            key_hash=pk,
            code=WAIT_REFUSED if refused else REPLICAS_NOT_ACKNOWLEDGED,
            retryable=not refused,
            maybe_applied=not released,
            step=name,
        )

    def _run_and_wait(
        self, client: Any, script: Any, key: str, values: list[Any]
    ) -> tuple[Any, str | None, bool]:
        """The script, then WAIT (or WAITAOF), in one pipeline: both on one connection, as
        WAIT counts the acknowledgements of its own connection's writes. A cluster client's
        pipeline would send the keyless WAIT to any node: the key's node is asked directly.
        EVALSHA, not the script object: a pipeline running one checks SCRIPT EXISTS first,
        a round trip more each time. (answer, what fell short or None, whether the server
        refused the WAIT): a WAIT refused after the script ran is a write not confirmed,
        never an error that says nothing was applied."""
        node_client = client
        if hasattr(client, "get_node_from_key"):
            node_client = client.get_redis_connection(client.get_node_from_key(key))
        errors = _redis().exceptions
        for attempt in (1, 2):
            pipe = node_client.pipeline(transaction=False)
            pipe.evalsha(script.sha, 1, key, *values)
            if self.aof:
                pipe.waitaof(1, self.replicas, self.replica_timeout_ms)
            else:
                pipe.wait(self.replicas, self.replica_timeout_ms)
            answer, acked = pipe.execute(raise_on_error=False)
            if isinstance(answer, errors.NoScriptError) and attempt == 1:
                script.sha = node_client.script_load(script.script)
                continue
            break
        if isinstance(answer, errors.MovedError | errors.AskError) and node_client is not client:
            client.nodes_manager.initialize()  # the slot moved: learn where, then retry
        if isinstance(answer, Exception):
            raise answer  # the script did not run, or failed as it ran: `_store_error` says
        if isinstance(acked, Exception):
            verb = "WAITAOF" if self.aof else "WAIT"
            return answer, f"{verb}: {type(acked).__name__}", True
        return answer, self._shortfall(acked), False

    def _shortfall(self, acked: Any) -> str | None:
        if self.aof:
            local, replicas = int(acked[0]), int(acked[1])
            if local >= 1 and replicas >= self.replicas:
                return None
            return (
                f"WAITAOF: local fsync {local}, {replicas} of {self.replicas} replicas "
                f"within {self.replica_timeout_ms} ms"
            )
        if int(acked) >= self.replicas:
            return None
        return f"WAIT: {int(acked)} of {self.replicas} replicas within {self.replica_timeout_ms} ms"

    def _call(self, step: str, pk: str | None, call: Any) -> Any:
        """The one place redis-py's errors become StoreErrors: what failed and whether
        retrying may help or the write may have landed, never a key or a payload. A standalone
        client's pool with no free connection sent nothing (redis-py takes the connection
        before any attempt): the call waits for one, up to the store's timeout."""
        errors = _redis().exceptions
        client = self.client
        standalone = not hasattr(client, "get_node_from_key")
        give_up = time.monotonic() + self._timeout
        pause = POOL_RETRY_FIRST_SECONDS
        while True:
            try:
                return call(client)
            except errors.RedisError as exc:
                exhausted = standalone and _pool_exhausted(errors, exc)
                if exhausted and time.monotonic() + pause < give_up:
                    time.sleep(pause)  # nothing was sent: send it once a connection is free
                    pause = min(pause * 2, POOL_RETRY_MAX_SECONDS)
                    continue
                if exhausted:
                    raise _error(
                        step, POOL_EXHAUSTED, pk, retryable=True, maybe_applied=False
                    ) from exc
                unsent = self._knows_unsent
                raise _store_error(errors, exc, step, pk, knows_unsent=unsent) from exc

    def _record(self, flat: Any, pk: str, step: str, server_ms: int | None = None) -> Record | None:
        """A record as read: a flat [field, value, ...] list (a script's answer) or a dict
        (HGETALL); None when empty. Anything not written so is a typed StoreError.
        `server_ms`, the server's clock at the read, becomes `read_at_ms` on the writer's
        clock (+ the record's `offset_ms`; None for a record without one)."""
        if not flat:
            return None
        try:
            if isinstance(flat, dict):
                fields = {_text(k): v for k, v in flat.items()}
            else:
                fields = {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}
        except (IndexError, UnicodeDecodeError, TypeError) as exc:
            raise unreadable(
                STORED_RECORD_UNREADABLE, "not a record", key_hash=pk, step=step
            ) from exc
        fmt = _integer(fields.get("fmt", b"1"), pk, step)
        if fmt > FORMAT_VERSION:
            raise NewerFormatError(key_hash=pk, format_version=fmt, known=FORMAT_VERSION, step=step)
        if fmt < 1:  # no version writes it: unreadable, as on DynamoDB
            raise unreadable(STORED_RECORD_UNREADABLE, "a format below 1", key_hash=pk, step=step)
        status = _STATUSES.get(_string(fields.get("status", b""), pk, step))
        if status is None:
            raise unreadable(
                UNKNOWN_RECORD_STATUS, "a status this library never writes", key_hash=pk, step=step
            )
        # Readable as the claim script's `readable` has it (scripts.NEEDS, NUMBERS, DIGITS):
        # what this reader refuses, the server never overwrites.
        missing = [name for name in scripts.NEEDS[status.value] if name not in fields]
        if missing:
            raise unreadable(STORED_RECORD_UNREADABLE, f"no {missing[0]}", key_hash=pk, step=step)
        numbers = {
            name: _integer(fields[name], pk, step) for name in scripts.NUMBERS if name in fields
        }
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
            None if owner is None else _string(owner, pk, step),
            None if digest is None else _string(digest, pk, step),
            None if result is None else bytes(result),
            numbers.get("claimed_at"),
            numbers.get("completed_at"),
            read_at,
        )


def _wait_options(
    replicas: object, timeout_ms: object, aof: object, call_timeout_s: float
) -> tuple[int, int, bool]:
    """`replicas`, `replica_timeout_ms` and `aof` checked: WAIT's timeout 0 would block for
    ever, and one as long as the call's own would drop the connection first (a store that
    waits for nothing keeps any `timeout`)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ConfigurationError(f"replicas must be a whole number, 0 or more; not {replicas!r}")
    if not isinstance(aof, bool):
        raise ConfigurationError(f"aof must be True or False; not {aof!r}")
    waits = replicas > 0 or aof
    limit = int(call_timeout_s * 1000) if waits else 2**31
    if (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, int)
        or not 0 < timeout_ms < limit
    ):
        raise ConfigurationError(
            "replica_timeout_ms must be whole milliseconds, more than 0 and less than the "
            f"call's timeout ({limit} ms); not {timeout_ms!r}"
        )
    return replicas, timeout_ms, aof


def _store_error(
    errors: Any, exc: Exception, step: str, pk: str | None, *, knows_unsent: bool
) -> StoreError:
    """redis-py's error as the library's. A refusal the server answered (READONLY from a
    replica after a failover, MOVED/ASK/TRYAGAIN, LOADING, NOSCRIPT, OOM) ran nothing: retry.
    A connection that dropped or timed out after the request left may have run it: a write
    may have landed. A failure to connect sent nothing, when the client made no attempt
    before it (`knows_unsent`)."""
    name = type(exc).__name__
    writes = step not in ("get", "scan")
    refused = (
        errors.ReadOnlyError,
        errors.BusyLoadingError,
        errors.NoScriptError,
        errors.TryAgainError,
        errors.AskError,
        errors.MovedError,
        errors.ClusterDownError,
    )
    if isinstance(exc, refused):
        return _error(step, name, pk, retryable=True, maybe_applied=False)
    if isinstance(exc, errors.AuthenticationError | errors.AuthorizationError):
        return _error(step, name, pk, retryable=False, maybe_applied=False)
    if isinstance(exc, errors.ConnectionError | errors.TimeoutError | errors.ClusterError):
        unsent = knows_unsent and "connecting to" in str(exc)
        return _error(step, name, pk, retryable=True, maybe_applied=writes and not unsent)
    if isinstance(exc, getattr(errors, "OutOfMemoryError", ())) or str(exc).startswith("OOM"):
        # redis-py strips the OOM code from the message where it has a class for it
        return _error(step, "OOM", pk, retryable=True, maybe_applied=False)
    if isinstance(exc, errors.ResponseError) and str(exc).startswith("WRONGTYPE"):
        # The record's key holds no hash: nothing this library wrote. Nothing ran.
        return unreadable(STORED_RECORD_UNREADABLE, "not a hash", key_hash=pk, step=step)
    # A script that failed as it ran (`user_script` in its error) keeps the writes it made
    # before failing: a writing step's may have landed. BUSY (another script running) ran none.
    message = str(exc)
    ran = isinstance(exc, errors.ResponseError) and "script" in message
    ran = ran and not message.startswith("BUSY")
    return _error(step, name, pk, retryable=False, maybe_applied=writes and ran)


def _pool_exhausted(errors: Any, exc: Exception) -> bool:
    """Whether `exc` says the pool had no connection to give: raised before anything is sent
    (MaxConnectionsError, or the messages of older redis-py and of a blocking pool)."""
    if isinstance(exc, getattr(errors, "MaxConnectionsError", ())):
        return True
    message = str(exc)
    return isinstance(exc, errors.ConnectionError) and message in _POOL_EXHAUSTED_SAID


_POOL_EXHAUSTED_SAID = ("Too many connections", "No connection available.")


def _error(
    step: str, reason: str, pk: str | None, *, retryable: bool, maybe_applied: bool
) -> StoreError:
    return StoreError(
        f"Valkey {step} failed ({reason})",
        key_hash=pk,
        code=reason,
        retryable=retryable,
        maybe_applied=maybe_applied,
        step=step,
    )


def _claimed_before(record: Record, before_ms: int, operator_offset: int, server_ms: int) -> bool:
    """Whether `record` was claimed before the operator's `before_ms`, both mapped to the
    server's clock: its `claimed_at` by its offset (`read_at_ms` less the server's clock at
    the read), `before_ms` by the operator's. As they are where it has no offset; always
    when it has no `claimed_at`."""
    if record.claimed_at is None:
        return True
    if record.read_at_ms is None:
        return record.claimed_at < before_ms
    offset = record.read_at_ms - int(server_ms)
    return record.claimed_at - offset < before_ms - operator_offset


def _take(keys: Iterator[bytes], count: int) -> list[bytes]:
    page: list[bytes] = []
    for found in keys:
        page.append(found)
        if len(page) >= count:
            break
    return page


def _decodes(client: Any) -> bool:
    try:
        return bool(client.get_encoder().decode_responses)
    except AttributeError:
        return False


def _redis_url(url: str) -> str:
    for scheme, meant in (("valkey://", "redis://"), ("valkeys://", "rediss://")):
        if url.startswith(scheme):
            return meant + url[len(scheme) :]
    return url


def _masked(url: str) -> str:
    """The URL without its password."""
    scheme, sep, rest = url.partition("://")
    credentials, at, host = rest.rpartition("@")
    if not at:
        return url
    user = credentials.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{host}"


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\{}" else c for c in text)


def _arg(value: Any) -> Any:
    return str(value) if isinstance(value, int) else value


def _blank(value: int | None) -> int | str:
    return "" if value is None else value


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _string(value: Any, pk: str, step: str) -> str:
    """A text field as read: bytes that are not UTF-8 are no record this library wrote."""
    try:
        return _text(value)
    except UnicodeDecodeError as exc:
        raise unreadable(
            STORED_RECORD_UNREADABLE, "a text that is not UTF-8", key_hash=pk, step=step
        ) from exc


def _integer(value: Any, pk: str, step: str) -> int:
    """A number as this library writes it: strict decimal, at most `scripts.DIGITS` digits
    (as the claim script's `integer`: Python's int alone takes `1_0`, ` 1`, any length)."""
    try:
        text = _text(value)
        if not _DECIMAL.fullmatch(text):
            raise ValueError("not a decimal integer")
        return int(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise unreadable(
            STORED_RECORD_UNREADABLE, "a number that is no integer", key_hash=pk, step=step
        ) from exc
