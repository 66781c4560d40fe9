"""A ValkeyStore's way to the server: its client (given, or built from the URL on first use),
its scripts, and one call's sending: the lean path where it serves (`lean`), the client's
otherwise, a write followed by its WAIT where `replicas` or `aof` ask (`replicas`), every
failure a StoreError (`connection`). `ValkeyStore` is this and the store contract on top,
as `DynamoDBStore` is its `TableConnection` and the contract.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..._base.errors import StoreError
from ..._base.observe import emit
from ..dynamodb.layout import TOMBSTONE_SECONDS
from . import scripts
from .connection import build_client, call, close_client, not_built
from .lean import UNSENT, LeanSender
from .replicas import WAIT_FAILS, ReplicaWait, refusal
from .waking import Waiters, pool_of

CLOSED_MID_CALL = "ClosedMidCall"
"""The `StoreError.code` of a call another thread's `close()` cut (retryable, maybe applied)."""


class ScriptTransport:
    """The client, the scripts and the sending of one call (the module docstring)."""

    def __init__(
        self,
        url: str | None,
        client: Any,
        cluster: bool,
        timeout: float,
        prefix: str,
        wait: tuple[int, int | None, bool],
    ) -> None:
        self._url, self._client, self._cluster, self._timeout = url, client, cluster, timeout
        self.prefix = prefix
        call_timeout = timeout
        if client is not None:  # a call on it waits as long as its own sockets do
            _, socket_timeout = pool_of(client)
            call_timeout = min(call_timeout, socket_timeout or call_timeout)
        self._wait = ReplicaWait(*wait, call_timeout)
        self._scripts: dict[str, Any] | None = None
        self._building = threading.Lock()
        self._knows_unsent = False
        """Whether a failure to connect means nothing was sent: true of the clients this
        store builds (redis-py retries nothing on them: a retry hides whether an earlier
        attempt went out), false of a client given, which may retry or re-route."""
        self._lean: LeanSender | None = None
        """The lean path's sender, on a standalone client the store built (`lean`)."""
        self._closes = 0
        """How often `close` ran: a call that saw it change failed because of it."""
        self._waiters = Waiters(timeout)

    @property
    def client(self) -> Any:
        """The redis-py client, built from the URL on first use."""
        if self._client is None:
            with self._building:
                if self._client is None:
                    client = build_client(
                        self._url or "", cluster=self._cluster, timeout=self._timeout
                    )
                    self._lean = None if self._cluster else LeanSender(client)
                    self._knows_unsent = not self._cluster
                    self._client = client
        return self._client

    def close(self) -> None:
        """Close the connections of the client this store built from its URL (the next call
        opens new ones). A client you gave stays yours to close."""
        client = self._client
        if self._url is not None and client is not None:
            self._client, self._scripts, self._lean = None, None, None
            self._waiters = Waiters(self._timeout)
            self._closes += 1
            close_client(client)

    def _script(self, name: str, pk: str | None = None) -> Any:
        loaded = self._scripts
        if loaded is None:
            client = self._built(name, pk)
            loaded = {step: client.register_script(source) for step, source in scripts.ALL.items()}
            self._scripts = loaded
        return loaded[name]

    def _built(self, step: str | None, pk: str | None) -> Any:
        """The client, its building's failure a StoreError (`connection.not_built`)."""
        try:
            return self.client
        except Exception as exc:
            failure = not_built(exc, step, pk)
            if failure is None:
                raise
            raise failure from exc

    def _run(self, name: str, pk: str, args: list[Any]) -> Any:
        loaded = self._scripts
        script = self._script(name, pk) if loaded is None else loaded[name]
        key = f"{self.prefix}{{{pk}}}"  # key_of's, written out on the hot path
        lean = self._lean
        if lean is not None and lean.serves():  # it packs ints itself
            closes = self._closes
            try:
                answer = lean.evalsha(script, key, args)
            except Exception as exc:
                # its failure mapped (and a full pool waited out) as the client's would be
                failed: list[BaseException] = [exc]

                def again(_: Any) -> Any:
                    if failed:
                        raise failed.pop()
                    return lean.evalsha(script, key, args)

                answer = self._call(name, pk, again, closes=closes)
            if answer is not UNSENT:
                return answer
        values = [_arg(a) for a in args]
        return self._call(name, pk, lambda client: script(keys=[key], args=values))

    def _written(
        self, name: str, pk: str, args: list[Any], *, undo: tuple[str, int] | None = None
    ) -> Any:
        """A write script's answer, after its replicas acknowledged it when `replicas` or
        `aof` ask so. A claim, retake or extension they did not acknowledge raises (a claim
        `undo`ne first: released by its owner token, best effort); the others are logged."""
        if not self._wait.asks:
            return self._run(name, pk, args)
        script, key = self._script(name, pk), self.key_of(pk)
        values = [_arg(a) for a in args]
        answer, short, refused = self._call(
            name, pk, lambda client: self._wait.send(client, script, key, values)
        )
        wrote = bool(answer[0]) if isinstance(answer, list) else bool(answer)
        if short is None or not wrote:
            return answer  # a refused write wrote nothing a failover could lose
        if name not in WAIT_FAILS:
            emit(logging.WARNING, "replicas_not_acknowledged", pk, step=name, detail=short)
            return answer
        undone = None if undo is None else self._undo(pk, *undo)
        raise refusal(name, pk, short, refused=refused, undone=undone)

    def _undo(self, pk: str, owner: str, now_ms: int) -> bool:
        """Release a claim not confirmed, by its owner token: whether it was (best effort)."""
        try:
            return bool(
                self._run("release", pk, [owner, now_ms, now_ms // 1000 + TOMBSTONE_SECONDS])
            )
        except StoreError:
            return False

    def _call(self, step: str, pk: str | None, send: Any, closes: int | None = None) -> Any:
        """`send(client)`'s answer, its failure a StoreError (`connection.call`). A store
        closed by another thread mid-call (since `closes`, when the call began before this)
        leaves redis-py's connection half torn down: whatever that raises, a socket's error
        redis-py mapped or not, is a StoreError saying so (the call may have been sent)."""
        client = self._built(step, pk)
        closes = self._closes if closes is None else closes
        unsent = self._knows_unsent
        try:
            return call(client, send, step, pk, timeout=self._timeout, knows_unsent=unsent)
        except Exception as exc:
            if self._closes == closes:
                raise
            raise StoreError(
                f"Valkey {step} failed (the store was closed during the call)",
                key_hash=pk,
                code=CLOSED_MID_CALL,
                retryable=True,
                maybe_applied=step not in ("get", "scan"),
                step=step,
            ) from exc

    def key_of(self, pk: str) -> str:
        """The record's key: the hashed key in braces, a hash tag, so in cluster mode the
        record and anything kept beside it under the same tag share one slot."""
        return f"{self.prefix}{{{pk}}}"

    def pk_of(self, key: bytes | str) -> str | None:
        """The pk in a key name SCAN answered, decoded as the client encodes (its URL's
        `encoding`): None for a name this store did not write."""
        if isinstance(key, bytes):
            encoder = getattr(self.client, "get_encoder", None)
            text = key.decode(encoder().encoding if encoder else "utf-8")
        else:
            text = key
        if not (text.startswith(self.prefix + "{") and text.endswith("}")):
            return None
        return text[len(self.prefix) + 1 : -1]


def _arg(value: Any) -> Any:
    return str(value) if isinstance(value, int) else value
