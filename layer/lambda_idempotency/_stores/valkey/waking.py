"""A ValkeyStore's waiters: each blocks on a list of its own until the holder's completion or
release fills it (`scripts.ARM`), within what the client's connections allow.

**A block holds a connection.** A waiter's BLPOP keeps one of the client's pooled connections
for as long as it blocks; the holder's completion needs one too. So at most half of a pool's
connections block at once (`BLOCKING_SHARE`): a waiter past that sleeps through its poll
interval as on a store that does not wake, and the holder's completion, its release and the
other calls always find a connection. (redis-py caps a pool at 100 by default: 150
duplicates waiting in one process once starved the completion, the key stayed claimed, and
a waiter ran the effect again when the lease lapsed.)

**A block ends before the socket's timeout.** A block longer than the client's socket timeout
would make the client drop the connection, and the wake-up on it: a block lasts at most
`WAKE_BLOCK_SHARE` of the shorter of the client's socket timeout and the store's own, and
ends `BLOCK_LATE_SECONDS` before it (a server may answer a block that late). Where no block
fits (a socket timeout of 0.2 s), waiters poll.

**Each process its own waiters.** A waiter's token is the store's waiter id and the thread's
id; a forked child or a restored SnapStart environment draws a new waiter id (`renew`), as
its main thread has its parent's thread id.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

from .connection import redis_module
from .scripts import WAKE_KEEP_MS

WAKE_BLOCK_SHARE = 0.8
"""A waiter blocks at most this share of the socket's timeout at a time (and at least
`BLOCK_LATE_SECONDS` less): the timeout must not fire first (it would drop the connection,
and the wake-up on it)."""
WAKE_MIN_BLOCK_SECONDS = 0.001
"""Shorter blocks are not sent: BLPOP's finest timeout is a millisecond, and 0 blocks forever."""
BLOCK_LATE_SECONDS = 0.15
"""How late a server may end a block: Valkey times blocked clients out in its event loop,
which may sleep until its next 100 ms tick (`hz 10`), so a block asked for 160 ms answered
after a 200 ms socket timeout. A block ends this much before the socket's timeout."""
SHORTEST_USEFUL_BLOCK_SECONDS = 0.05
"""With less room than this under the socket's timeout, a waiter does not block: it sleeps
through its poll interval, as on a store that does not wake (a client with a 0.2 s timeout)."""
BLOCKING_SHARE = 0.5
"""At most this share of a pool's connections block at once; the rest serve the other calls."""
DEFAULT_POOL_CONNECTIONS = 100
"""redis-py's own cap on a pool of unspecified size."""


class Waiters:
    """This process's waiters of one store: their id, and the limits the client sets them."""

    def __init__(self, store_timeout_s: float) -> None:
        self.waiter = secrets.token_hex(8)
        self._store_timeout_s = store_timeout_s
        self._limits: tuple[threading.BoundedSemaphore, float] | None = None

    def token(self) -> str:
        """This thread's waiter token: a thread waits on one key at a time."""
        return f"{self.waiter}.{threading.get_ident()}"

    def wait(self, client: Any, arm: Any, key: str, seen: Any, timeout_s: float) -> None:
        """`ValkeyStore.wait_for_change` on the record `key`: `arm` (the ARM script) adds
        this waiter while the record is still `seen`, then it blocks within the limits."""
        deadline = time.monotonic() + timeout_s
        slots, longest = self.limits(client)
        if not longest or not slots.acquire(blocking=False):
            time.sleep(max(0.0, timeout_s))  # as on a store that does not wake
            return
        token = self.token()
        wake = f"{key}:wake:{token}"
        lease = "" if seen.lease_until is None else str(seen.lease_until)
        args = [seen.status.value, seen.owner or "", lease, token, str(WAKE_KEEP_MS)]
        try:
            if not arm(keys=[key, f"{key}:waiters", wake], args=args):
                return
            block = min(deadline - time.monotonic(), longest)
            if block >= WAKE_MIN_BLOCK_SECONDS:
                client.blpop([wake], timeout=round(block, 3))
        except redis_module().exceptions.RedisError:
            left = deadline - time.monotonic()
            if left > 0:
                time.sleep(left)
        finally:
            slots.release()

    def limits(self, client: Any) -> tuple[threading.BoundedSemaphore, float]:
        """(the blocks allowed at once, the longest block in seconds) for `client`."""
        limits = self._limits
        if limits is None:
            connections, socket_timeout = pool_of(client)
            slots = max(1, int(connections * BLOCKING_SHARE))
            longest = self._store_timeout_s
            if socket_timeout is not None and 0 < socket_timeout < longest:
                longest = socket_timeout
            block = min(longest * WAKE_BLOCK_SHARE, longest - BLOCK_LATE_SECONDS)
            if block < SHORTEST_USEFUL_BLOCK_SECONDS:
                block = 0.0  # no block fits: every waiter polls
            limits = (threading.BoundedSemaphore(slots), block)
            self._limits = limits
        return limits


def pool_of(client: Any) -> tuple[int, float | None]:
    """(the most connections one pool of `client` opens, its sockets' timeout): a standalone
    client's pool, or what a cluster client gives each node's."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        size = getattr(pool, "max_connections", None)
        kwargs = getattr(pool, "connection_kwargs", {})
    else:
        kwargs = getattr(getattr(client, "nodes_manager", None), "connection_kwargs", {})
        size = kwargs.get("max_connections")
    timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        size = DEFAULT_POOL_CONNECTIONS
    if not isinstance(timeout, int | float) or isinstance(timeout, bool):
        timeout = None
    return size, timeout
