"""How a DynamoDB store reaches its table: the table's name, resolved on first use; the client,
built once (`client`) unless one is passed; the lean wire path over it (`wire.path`), built
once per client; and each call sent through `calls`, botocore's errors translated there."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..._base.errors import ConfigurationError, StoreError
from .calls import UNSENT, failure, send

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

_BUILDING = threading.RLock()
"""Held while a store builds its client or its wire path on first use: an async call's steps
run in several worker threads at once, and boto3 builds clients (and its default session)
unsafely from several threads; one client per store, built once. Rare, so one lock for all."""


class TableConnection:
    """A table and the client that reaches it, built on first use (a cold start's wait comes
    at the first call, or at `ready`, not at import)."""

    def __init__(
        self,
        table_name: str | None,
        *,
        client: DynamoDBClient | None,
        endpoint_url: str | None,
        region_name: str | None,
        fast_wire: bool,
    ) -> None:
        self._table_name = table_name
        self._client = client
        self._fast_wire = fast_wire
        self._wire: tuple[Any, Any] | None = None
        self._endpoint_url = endpoint_url
        self._region_name = region_name

    @property
    def table_name(self) -> str:
        """The table, read from IDEMPOTENCY_TABLE on first use when not given: a module-level
        `DynamoDBStore()` imports without one (IDEMPOTENCY_DISABLED, or a test that sets the
        variable later) and fails only at the first call that needs the table."""
        if not self._table_name:
            resolved = self._peek_table_name()
            if not resolved:
                raise ConfigurationError(
                    "no table name: pass DynamoDBStore(table_name) or set IDEMPOTENCY_TABLE"
                )
            self._table_name = resolved
        return self._table_name

    @table_name.setter
    def table_name(self, value: str) -> None:
        self._table_name = value

    def _peek_table_name(self) -> str | None:
        if self._table_name is not None:
            return self._table_name
        return os.environ.get("IDEMPOTENCY_TABLE") or None

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            with _BUILDING:
                if self._client is None:
                    from .client import default_client

                    self._client = default_client(self._endpoint_url, self._region_name)
        return self._client

    def _caller(self) -> Any:
        """What `_send` calls: the lean wire path over the client (see `wire.path`), or the
        client itself when it is off or cannot serve this client."""
        client = self.client
        wire = self._wire
        if wire is not None and wire[0] is client:
            return wire[1]
        with _BUILDING:
            return self._build_wire(client)

    def ready(self, operation: str, pk: str | None = None, *, step: str | None = None) -> None:
        """Build the client (and its wire path) now, before a caller reads its clock: building
        is a wait on a cold start. A client that cannot be built (no region) is the same
        StoreError the call itself would raise, sent nothing."""
        try:
            self._caller()
        except UNSENT as exc:
            raise StoreError(
                self._failure(operation, type(exc).__name__), key_hash=pk, step=step
            ) from exc

    def _build_wire(self, client: Any) -> Any:
        if self._wire is None or self._wire[0] is not client:
            if self._fast_wire and os.environ.get("IDEMPOTENCY_FAST_WIRE", "").lower() not in (
                "0",
                "false",
                "no",
            ):
                from .wire.path import fast_wire

                self._wire = (client, fast_wire(client))
            else:
                self._wire = (client, client)
        return self._wire[1]

    def _send(
        self,
        operation: str,
        pk: str | None,
        expected: Iterable[str],
        *,
        step: str | None = None,
        **request: Any,
    ) -> tuple[dict[str, Any], str | None]:
        """Call DynamoDB for the protocol's `step` (`calls.send`): an expected refusal (a
        failed condition) comes back as its error code with the error response; anything
        else is a StoreError naming the operation, table and endpoint."""
        return send(self._caller, self._failure, operation, pk, expected, step=step, **request)

    def _failure(self, operation: str, reason: str) -> str:
        """`calls.failure`'s line for this table, client and endpoint."""
        return failure(
            operation,
            reason,
            table=self._peek_table_name(),
            client=self._client,
            endpoint_url=self._endpoint_url,
        )
