"""The DynamoDB store's calls, and the only place botocore's errors are translated.

`TableConnection` (the store's base) reaches the table: its name, resolved on first use; the
client, built once unless one is passed (`client`, loaded then); the lean wire path over it
(`wire.path`), built once per client; in Lambda, for a store that builds its own client,
the direct path instead (`direct.transport`: no client at all). It prepares itself in
Lambda's INIT, and renews what a forked or restored process must not share
(`_base.lifecycle`). `send` makes one call through it and turns whatever
botocore raises into a `StoreError` that says what failed, where, and whether the same call
may succeed (`retryable`) or may have landed (`maybe_applied`); an expected refusal (a failed
condition) comes back as an answer. The transaction and the batch calls of a large result's
chunks go through it too.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..._base import lifecycle
from ..._base.errors import CompletionConflictError, ConfigurationError, StoreError

try:
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ParamValidationError,
        PartialCredentialsError,
    )
except ModuleNotFoundError as missing:  # outside Lambda, without [aws-sdk]: see TableConnection
    NO_BOTOCORE: ModuleNotFoundError | None = missing
    # never raised: no store is built without botocore; they only keep `send` importable, so
    # that a function using ValkeyStore alone imports the package without boto3
    _unreachable: Any = type("Unreachable", (Exception,), {})
    BotoCoreError = ClientError = ConnectTimeoutError = _unreachable  # type: ignore[misc]
    EndpointConnectionError = NoCredentialsError = NoRegionError = _unreachable  # type: ignore[misc]
    ParamValidationError = PartialCredentialsError = _unreachable  # type: ignore[misc]
else:
    NO_BOTOCORE = None

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .store_view import Send

CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"
MAX_TRANSACTION_ITEMS = 100
UNPROCESSED_ATTEMPTS = 6
"""Batch calls return throttled keys as Unprocessed*; ask again this often, backing off."""

RUNTIME_IAM_ACTIONS = frozenset(
    {
        "dynamodb:PutItem",
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:BatchWriteItem",
    }
)
"""What a decorated function needs on the idempotency table, no more. TransactWriteItems is
authorised per item: our item in it is a PutItem. A release is a PutItem too (a tombstone),
and BatchWriteItem writes the chunks of large results. Enlisted business writes need their
own actions on their own tables. Scan is for operators only (`stuck`); their `release` is a
PutItem as well."""

RETRYABLE_CODES = frozenset(
    {
        "ThrottlingException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
        "TransactionConflictException",
        "TransactionInProgressException",
        "ReplicatedWriteConflictException",
    }
)
"""Error codes after which the same request may succeed: throttling, DynamoDB's 5xx, and a
write of the same item from another Region of a strongly consistent global table."""
RETRYABLE_CANCELLATIONS = frozenset(
    {
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "TransactionConflict",
        "RequestLimitExceeded",
    }
)
"""Cancellation reasons of a transaction that may succeed when sent again."""

UNSENT = (NoRegionError, NoCredentialsError, PartialCredentialsError)
"""botocore errors raised before a request leaves (building the client, signing): nothing
landed, and botocore does not retry them."""
_LOCAL = "for DynamoDB Local, `lambda-idempotency local` prints the variables to export"
_FIXES = {
    "NoRegionError": "no AWS region: set AWS_REGION (Lambda sets it), or pass region_name=; "
    f"{_LOCAL}",
    "NoCredentialsError": "no AWS credentials: configure them (AWS_PROFILE, or the "
    f"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY variables); {_LOCAL}",
    "PartialCredentialsError": "incomplete AWS credentials: set both AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE",
    "ResourceNotFoundException": "no table {table} there: create it (for DynamoDB Local, "
    "`lambda-idempotency create-table --table {table}`), or point IDEMPOTENCY_TABLE, "
    "AWS_REGION or the endpoint at the one that exists",
    EndpointConnectionError.__name__: "nothing answers there: start DynamoDB Local "
    "(`lambda-idempotency local`), or check AWS_ENDPOINT_URL_DYNAMODB, the region and the network",
    ConnectTimeoutError.__name__: "nothing answers there: check the endpoint, the region and "
    "the network (a Lambda function in a VPC needs a DynamoDB endpoint or a NAT)",
}
"""The fix for the common causes of a failed call, by botocore's error name or code."""


_BUILDING = threading.RLock()
"""Held while a store builds its client or its wire path on first use: an async call's steps
run in several worker threads at once, and boto3 builds clients (and its default session)
unsafely from several threads; one client per store, built once. Rare, so one lock for all."""


OFF = ("0", "false", "no")


class TableConnection:
    """A table and what reaches it: built on first use (at the first call, or at `ready`,
    not at import), or in Lambda's INIT where the runtime pre-pays it."""

    def __init__(
        self,
        table_name: str | None,
        *,
        client: DynamoDBClient | None,
        endpoint_url: str | None,
        region_name: str | None,
        fast_wire: bool,
    ) -> None:
        if NO_BOTOCORE is not None:  # Lambda's runtime has it; elsewhere the extra brings it
            from ..._base.extras import missing_extra

            absent = ModuleNotFoundError(str(NO_BOTOCORE), name="botocore")
            raise missing_extra(absent, "DynamoDBStore") from NO_BOTOCORE
        self._table_name = table_name
        self._client = client
        self._fast_wire = fast_wire
        self._wire: tuple[Any, Any] | None = None
        self._endpoint_url = endpoint_url
        self._region_name = region_name
        self._direct: Any = None
        """The direct path (`direct.transport`), or why it does not serve; None: not tried."""
        self._client_shown = False
        """Whether a caller took `client` (then the store's calls go through it)."""
        lifecycle.track(self)
        if lifecycle.prepares_now():
            self.prepare()

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
        """The boto3 client (built now if need be). Once a caller has it, the store's own
        calls go through it too: a Stubber, a `RoundTrips` or a hook on it sees them."""
        self._client_shown = True
        return self._own_client()

    def _own_client(self) -> DynamoDBClient:
        if self._client is None:
            with _BUILDING:
                if self._client is None:
                    from .client import default_client

                    self._client = default_client(self._endpoint_url, self._region_name)
        return self._client

    def _lean_client(self) -> Any:
        """The own client's lean wire path: where the direct path sends what it does not (a
        transaction, an operator's call, a call a tracer set up later must see)."""
        client = self._own_client()
        with _BUILDING:
            return self._build_wire(client)

    def _caller(self) -> Any:
        """What `_send` calls: the direct path (in Lambda, for our own client, until a caller
        takes `client`), the lean wire path over the client (see `wire.path`), or the client
        itself when it is off or cannot serve this client."""
        direct = self._direct
        if self._client_shown:
            pass  # a caller holds the client: its hooks and stubs see every call
        elif direct is not None and type(direct) is not str:
            return direct
        elif self._client is None and direct is None and self._direct_allowed():
            with _BUILDING:
                if self._direct is None:
                    self._direct = self._build_direct()
                if type(self._direct) is not str:
                    return self._direct
        client = self._own_client()
        wire = self._wire
        if wire is not None and wire[0] is client:
            return wire[1]
        with _BUILDING:
            return self._build_wire(client)

    def _direct_allowed(self) -> bool:
        """In Lambda (or when IDEMPOTENCY_DIRECT_WIRE=1 asks for it), unless the lean paths
        are off (`fast_wire=False`, IDEMPOTENCY_FAST_WIRE=0, IDEMPOTENCY_DIRECT_WIRE=0)."""
        if not self._fast_wire or os.environ.get("IDEMPOTENCY_FAST_WIRE", "").lower() in OFF:
            return False
        asked = os.environ.get("IDEMPOTENCY_DIRECT_WIRE", "").lower()
        if asked:
            return asked not in OFF
        return "AWS_LAMBDA_FUNCTION_NAME" in os.environ

    def _build_direct(self) -> Any:
        from .client import USER_AGENT
        from .direct.transport import direct_wire

        built = direct_wire(
            self._endpoint_url,
            self._region_name,
            self._peek_table_name(),
            self._lean_client,
            USER_AGENT,
        )
        if isinstance(built, str):
            from ..._base import observe

            observe.emit(
                logging.DEBUG,
                "direct_wire_off",
                None,
                reason=f"the direct path cannot serve ({built}): a boto3 client makes the calls",
            )
        return built

    def prepare(self) -> None:
        """Build what the first call would (the direct path, or the client and its lean
        path) and warm it, now: in Lambda's INIT, or SnapStart's before-snapshot hook. A
        failure is left for the first call to raise as it would have."""
        try:
            caller = self._caller()
            warm = getattr(type(caller), "warm", None)
            if warm is not None:
                warm(caller)
        except Exception as exc:
            from ..._base import observe

            observe.emit(logging.DEBUG, "prepare_failed", None, reason=type(exc).__name__)

    def renew(self) -> None:
        """In a forked child, or after a SnapStart restore: no pooled connection of the
        process this one was copied from is used again, and credentials are read again."""
        direct = self._direct
        if direct is not None and type(direct) is not str:
            direct.renew()
        if self._client is not None:
            forget_connections(self._client)

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
        direct = self._direct
        endpoint_url = self._endpoint_url
        if endpoint_url is None and direct is not None and type(direct) is not str:
            endpoint_url = direct.settings.url.rstrip("/")  # where the direct path sends
        return failure(
            operation,
            reason,
            table=self._peek_table_name(),
            client=self._client,
            endpoint_url=endpoint_url,
        )


def forget_connections(client: Any) -> None:
    """Give the client, in this process, pools of its own: the ones it has are copies of its
    parent's (or of the snapshot's). Replaced, not closed: closing takes the pools' lock,
    which a fork copies as held when another thread of the parent was inside it, and the
    copied sockets are left to the process they belong to."""
    session: Any = getattr(getattr(client, "_endpoint", None), "http_session", None)
    pool_settings = getattr(session, "_get_pool_manager_kwargs", None)
    if pool_settings is None or not hasattr(session, "_manager"):
        return  # not botocore's urllib3 session: nothing of it this process can renew
    from urllib3 import PoolManager

    manager = PoolManager(**pool_settings())
    manager.pool_classes_by_scheme = getattr(
        session, "_pool_classes_by_scheme", manager.pool_classes_by_scheme
    )
    session._proxy_managers = {}
    session._manager = manager


def send(
    caller: Callable[[], Any],
    failure: Callable[[str, str], str],
    operation: str,
    pk: str | None,
    expected: Iterable[str],
    *,
    step: str | None = None,
    **request: Any,
) -> tuple[dict[str, Any], str | None]:
    """Call DynamoDB, through what `caller()` gives (the client, or its lean wire path), for
    the protocol's `step`. An expected refusal (a failed condition) comes back as its error
    code with the error response; anything else becomes a StoreError, chained to botocore's,
    with `failure`'s line naming the operation, table and endpoint."""
    try:
        response: dict[str, Any] = getattr(caller(), operation)(**request)
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if code in expected:
            return dict(exc.response), code
        metadata = exc.response.get("ResponseMetadata", {})
        server_error = int(metadata.get("HTTPStatusCode", 0)) >= 500
        raise StoreError(
            failure(operation, code),
            key_hash=pk,
            code=code,
            retryable=server_error or code in RETRYABLE_CODES,
            # An earlier attempt that botocore retried may have landed, and so may a 5xx.
            maybe_applied=server_error or int(metadata.get("RetryAttempts", 0)) > 0,
            step=step,
        ) from exc
    except ParamValidationError as exc:
        raise unbuildable(operation, pk, exc, step) from exc
    except UNSENT as exc:
        # No region, no credentials: refused before anything left, on every attempt.
        raise StoreError(failure(operation, type(exc).__name__), key_hash=pk, step=step) from exc
    except BotoCoreError as exc:
        raise StoreError(
            failure(operation, type(exc).__name__),
            key_hash=pk,
            retryable=True,
            maybe_applied=True,  # a read timeout or a dropped connection: it may have landed
            step=step,
        ) from exc
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        # botocore could not serialize the request: without client-side validation a
        # malformed enlisted write fails here, before anything is sent.
        raise unbuildable(operation, pk, exc, step) from exc
    return response, None


def failure(
    operation: str, reason: str, *, table: str | None, client: Any, endpoint_url: str | None
) -> str:
    """One line: what failed, on which table, where, and for the common causes the fix.
    Names only (table, endpoint, region): never a key or a payload."""
    table = table or "?"
    meta = getattr(client, "meta", None)
    endpoint = getattr(meta, "endpoint_url", None) or (
        endpoint_url
        or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    where = f"table {table} at {endpoint}" if endpoint else f"table {table}"
    fix = _FIXES.get(reason)
    return f"DynamoDB {operation} failed: {reason} ({where})" + (
        f": {fix.format(table=table)}" if fix else ""
    )


def unbuildable(
    operation: str, pk: str | None, exc: Exception, step: str | None = None
) -> StoreError:
    """A request refused before it was sent (botocore's parameter check, or its serializer):
    nothing landed, and the same request would be refused again."""
    return StoreError(
        f"DynamoDB {operation} request could not be built: {type(exc).__name__}",
        key_hash=pk,
        code="InvalidRequest",
        step=step,
    )


def transact(
    send: Send, pk: str | None, items: list[Mapping[str, Any]], token: str | None = None
) -> bool:
    """TransactWriteItems of our completion (`pk`) and enlisted writes, or of enlisted writes
    alone (`pk` None). False when the first item's condition (our fence) failed."""
    if len(items) > MAX_TRANSACTION_ITEMS:
        raise ConfigurationError(
            f"{len(items)} writes in one transaction; DynamoDB allows {MAX_TRANSACTION_ITEMS}"
        )
    request: dict[str, Any] = {"TransactItems": items}
    if token is not None:
        request["ClientRequestToken"] = token
    response, refused = send(
        "transact_write_items", pk, {TRANSACTION_CANCELED}, step="complete", **request
    )
    if refused is None:
        return True
    reasons: list[dict[str, Any]] = response.get("CancellationReasons", [])
    codes = [reason.get("Code", "None") for reason in reasons]
    if pk is not None and codes[:1] == ["ConditionalCheckFailed"]:
        return False  # the fence: another claim owns the record now
    if "ConditionalCheckFailed" in codes:
        raise CompletionConflictError(
            "an enlisted write's condition failed; neither it nor the result was written",
            key_hash=pk,
            reasons=reasons,
        )
    raise StoreError(
        f"the completion transaction was cancelled: {', '.join(codes)}",
        key_hash=pk,
        code=TRANSACTION_CANCELED,
        retryable=bool(set(codes) & RETRYABLE_CANCELLATIONS),
    )


def batch_get(
    send: Send, table: str, pk: str, keys: list[dict[str, Any]], *, consistent: bool
) -> list[dict[str, Any]]:
    """The items of `keys` that BatchGetItem finds, asking again for the keys it leaves
    unprocessed (throttled), backing off, UNPROCESSED_ATTEMPTS times at most."""
    items: list[dict[str, Any]] = []
    request: dict[str, Any] = {table: {"Keys": keys, "ConsistentRead": consistent}}
    for attempt in range(UNPROCESSED_ATTEMPTS):
        response, _ = send("batch_get_item", pk, set(), step="replay", RequestItems=request)
        items.extend(response.get("Responses", {}).get(table, []))
        request = response.get("UnprocessedKeys") or {}
        if not request:
            break
        time.sleep(min(0.05 * 2**attempt, 1.0))  # throttled: back off before asking again
    return items


def batch_write(send: Send, table: str, pk: str, requests: list[dict[str, Any]]) -> None:
    """BatchWriteItem of `requests`, asking again for what it leaves unprocessed; a
    retryable StoreError when DynamoDB still leaves some after UNPROCESSED_ATTEMPTS."""
    pending: dict[str, Any] = {table: requests}
    for attempt in range(UNPROCESSED_ATTEMPTS):
        response, _ = send("batch_write_item", pk, set(), step="chunks", RequestItems=pending)
        pending = response.get("UnprocessedItems") or {}
        if not pending:
            return
        time.sleep(min(0.05 * 2**attempt, 1.0))  # throttled: back off before asking again
    raise StoreError(
        "DynamoDB left chunks of the result unwritten (throttled)",
        key_hash=pk,
        code="UnprocessedItems",
        retryable=True,
    )
