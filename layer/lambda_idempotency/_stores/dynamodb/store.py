"""DynamoDBStore: the record's I/O, and the only place botocore's errors are translated.

The store holds no decorator settings and no per-call state: times, owners and hashes come
in as arguments, so one store can serve any number of decorators without mixing them.

Timeline of one key, and what each condition closes:

    A: claim ──────── run ──────── complete(owner = A)     ✔
    B:        claim ✘ (ALL_OLD: IN_PROGRESS) → InProgressError / wait
    A: claim ── run ─ ─ ─ ─ (lease lapses) ─ ─ ─ ─ ─ complete(owner = A) ✘ fenced
    C:                          claim ✔ (lease lapsed) ── run ── complete(owner = C) ✔
    D: claim ── run ✘ ── release (tombstone, owner = D)
    D':   (a delayed copy of D's claim lands)  claim ✘ (the record is D's own)

Times in conditions come from the callers' clocks, which may differ by `skew_ms`: a lease
counts as lapsed, and a record as expired, only once it is so on a clock that far behind.

The conditions' named fragments, the status texts, what a release writes, where a result goes and
how an item reads back are the record format: the store's `layout` (`_stores.dynamodb.layout`),
native or Powertools', which the store holds and sends requests for.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

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

from ..._base.errors import (
    STORED_RESULT_UNREADABLE,
    CompletionConflictError,
    ConfigurationError,
    StoreError,
    unreadable,
)
from ..._base.value import Value
from ..._version import VERSION
from ..encoding import CHUNKED, MAX_STORED_BYTES
from ..record import (
    FORMAT_ATTRIBUTE,
    OWNER_CHARS,
    AttributeNames,
    Record,
    ScanPage,
    Status,
    StoredForm,
)
from .layout import (
    INLINE_RESULT_BYTES,  # noqa: F401 (its former home; still importable)
    NATIVE_KEYS,
    OWNED_BY_ME,
    RECORD_BYTES,  # noqa: F401 (its former home; still importable)
    STILL_IN_PROGRESS,
    TOMBSTONE_SECONDS,
    Layout,
    binary,
)
from .layout import text as _text
from .limits import (
    ITEM_BYTES,
    KEY_NAME_BYTES,
    NAME_BYTES,
    PARTITION_KEY_BYTES,
    SORT_KEY_BYTES,
    WIDEST_NUMBER,
    item_size,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .powertools_layout import PowertoolsOptions

CHUNK_BYTES = 350_000
"""The result bytes a chunk item holds, when its key and names leave that much of 400 KB."""
OVERHEADS_KEPT = 64
"""Record overheads a store remembers (one per length of key: a namespace or a few)."""
BATCH_WRITE_ITEMS = 25
"""BatchWriteItem takes at most 25 items a request."""
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

USER_AGENT = f"lambda-idempotency/{VERSION}"
"""The default client's user agent; botocore appends its own name and version."""

_CONDITION_FAILED = "ConditionalCheckFailedException"
_TRANSACTION_CANCELED = "TransactionCanceledException"
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


def _default_client(endpoint_url: str | None, region_name: str | None) -> DynamoDBClient:
    import boto3
    from botocore.config import Config

    # Our requests are built by code, not typed by people: botocore's client-side parameter
    # validation would only cost CPU on every call (about 35 µs a request). Enlisted writes
    # are typed by people: botocore checks those (an {"SS": "vip"} DynamoDB would store as
    # the set of its letters), on either path (validate_user_data).
    # total_max_attempts counts the first attempt too (botocore reads "max_attempts" in a
    # Config as retries: 3 there means 4 attempts). A fixed user agent spares botocore
    # building its long one twice per request (about 90 µs of a ~320 µs call).
    config = Config(
        user_agent=USER_AGENT,
        connect_timeout=2,
        read_timeout=10,
        retries={"mode": "standard", "total_max_attempts": 3},
        parameter_validation=False,
    )
    try:
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=config
        )
    except NoRegionError:
        # boto3 reads AWS_DEFAULT_REGION only; Lambda sets both, other SDKs read AWS_REGION.
        fallback = os.environ.get("AWS_REGION")
        if region_name is not None or not fallback:
            raise
        client = boto3.client(
            "dynamodb", endpoint_url=endpoint_url, region_name=fallback, config=config
        )
    from .wire.path import validate_user_data

    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems", validate_user_data
    )
    return client


_BUILDING = threading.RLock()
"""Held while a store builds its client or its wire path on first use: an async call's steps
run in several worker threads at once, and boto3 builds clients (and its default session)
unsafely from several threads; one client per store, built once. Rare, so one lock for all."""


class DynamoDBStore:
    """Reads and writes idempotency records in one DynamoDB table.

    `table_name` defaults to the `IDEMPOTENCY_TABLE` environment variable. Pass `client` to
    reuse or instrument a boto3 DynamoDB client; otherwise one is created on first use.

    `sort_key_attr` keeps the records in a table with a composite key (single-table
    designs): the partition key holds `static_pk_value` (default
    `idempotency#<AWS_LAMBDA_FUNCTION_NAME>`), the sort key the record's key. Every record
    then shares one partition, bound to DynamoDB's per-partition throughput.

    `layout="powertools"` reads and writes the records of Powertools for AWS Lambda's
    idempotency utility, on its table, with its option names (see docs/migrating.md). The
    store holds its layout (`layout`: the record format and the key hashing, one object),
    and does the I/O for either.

    `fast_wire` (on by default, for our own client and for one passed in) sends the
    protocol's requests through a lean path over the client's own botocore parts (signer,
    credentials, endpoint, HTTP session, retry handler, `before-send`), for about 0.6 of
    boto3's CPU a call. It is on for a passed client too because it inspects that client and
    steps aside, call by call, whenever it cannot honour something the client carries (a
    Stubber, a hook on an event it skips, X-Ray or OpenTelemetry patching, endpoint
    discovery): what a client can observe does not change. `fast_wire=False`, or
    IDEMPOTENCY_FAST_WIRE=0 in the environment (no redeploy of code needed), sends every
    request through boto3 as usual.
    """

    layout: Layout = NATIVE_KEYS
    """How records are written and read, and how the decorators using this store hash keys
    and payloads into them."""

    def __init__(
        self,
        table_name: str | None = None,
        *,
        client: DynamoDBClient | None = None,
        attribute_names: AttributeNames | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        layout: str = "native",
        sort_key_attr: str | None = None,
        static_pk_value: str | None = None,
        fast_wire: bool = True,
        **powertools: Unpack[PowertoolsOptions],
    ) -> None:
        if layout not in ("native", "powertools"):
            raise ConfigurationError(f"layout must be 'native' or 'powertools', not {layout!r}")
        built = self.__dict__.get("layout")
        if built is not None and built.name != layout:  # a store keeps the layout it was built with
            raise ConfigurationError(f"{type(self).__name__} has no layout {layout!r}")
        if powertools and layout == "native":
            raise ConfigurationError(
                f"{', '.join(sorted(powertools))}: only for layout='powertools'; the native "
                "layout names its attributes with attribute_names="
            )
        self._table_name = table_name
        if layout == "powertools":
            from .powertools_layout import PowertoolsLayout

            self.names = PowertoolsLayout.attribute_names(attribute_names, powertools)
        else:
            self.names = attribute_names if attribute_names is not None else AttributeNames()
        if sort_key_attr is not None and sort_key_attr in self.names:
            raise ConfigurationError(f"sort_key_attr {sort_key_attr!r} names another attribute")
        self.layout = PowertoolsLayout(powertools) if layout == "powertools" else NATIVE_KEYS
        self.sort_key_attr = sort_key_attr
        self.static_pk_value = (
            static_pk_value
            if static_pk_value is not None
            else f"idempotency#{os.environ.get('AWS_LAMBDA_FUNCTION_NAME', '')}"
        )
        self._client = client
        self._fast_wire = fast_wire
        self._wire: tuple[Any, Any] | None = None
        self._endpoint_url = endpoint_url
        self._region_name = region_name
        self._overheads: dict[tuple[int, int, int], int] = {}
        """`_stores.record_overhead` by the lengths that vary (a few namespaces' worth)."""

    def __repr__(self) -> str:
        shown = "" if self.layout is NATIVE_KEYS else f", layout={self.layout.name!r}"
        return f"DynamoDBStore(table_name={self._peek_table_name()!r}{shown})"

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
                    self._client = _default_client(self._endpoint_url, self._region_name)
        return self._client

    def _caller(self) -> Any:
        """What `_send` calls: the lean wire path over the client (see _wire.py), or the
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
        except _UNSENT as exc:
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

    # -- the protocol's four writes ---------------------------------------------------------

    def check_decoration(self, namespace: str, *, payload: bool) -> None:
        """Refuse, when a decorator is applied, a namespace and store whose items DynamoDB would
        refuse later: the record's key and its chunk items' keys (longer: `{pk}#chunk#{owner}#n`)
        within the key limits, and the largest items of fixed size (the claim, which a release's
        tombstone never outgrows, and the completed record holding a chunk pointer) within
        400 KB. Chunk items need no check: they hold what their key and names leave."""
        for problem in _decoration_problems(self, namespace, payload=payload):
            raise ConfigurationError(problem)

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
        """Write a new IN_PROGRESS record if the key is free.

        Returns (True, the record we replaced, if any) when we own the key, else (False, the
        record that holds it), straight from the failed write: no second read. A record is
        free once expired or lapsed on a clock `skew_ms` behind `now_ms`.
        """
        names = self.names
        item = self.claim_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            now_ms=now_ms,
            lease_until_ms=lease_until_ms,
            expiration_s=expiration_s,
        )
        response, refused = self._send(
            "put_item",
            pk,
            {_CONDITION_FAILED},
            step="claim",
            TableName=self.table_name,
            Item=item,
            ConditionExpression=self.layout.claim_condition,
            ExpressionAttributeNames={
                "#pk": names.pk,
                "#status": names.status,
                "#expiration": names.expiration,
                "#lease_until": names.lease_until,
                "#owner": names.owner,
            },
            ExpressionAttributeValues=self.layout.claim_values(owner, now_ms, skew_ms),
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, self._replaced(response.get("Attributes"), pk)
        held = response.get("Item")
        if held is None:  # an endpoint that ignores ReturnValuesOnConditionCheckFailure
            return False, self.get(pk)
        return False, self._record(held, "claim", pk)

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
        """Write the completed record with `result` in it as given (a packed result, or the
        pointer `put_chunks` returned), fenced on `owner`. The decorators go through
        `stored_form` and `write_completion` instead, which place the result first."""
        item = self.completed_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            expiration_s=expiration_s,
            claimed_at_ms=claimed_at_ms,
            completed_at_ms=completed_at_ms,
        )
        attributes, _ = next(self._placements(result, owner, inline=True))
        return self.write_completion(StoredForm(pk, owner, {**item, **attributes}), writes)

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
        """The completion's writes, decided once: the record as it will be sent, and the
        packed result to write as chunk items first when the record does not keep it.

        The result stays in the record while it fits `inline_limit` (a budget: 1 KB of
        record for the native layout) and the whole item, every attribute counted, fits
        DynamoDB's 400 KB; otherwise the record holds a pointer to chunks, whatever the
        budget. Retrying a completion sends this same form again, never a re-placed one (a
        pointer placed again would be chunked over the chunks it points at)."""
        item = self.completed_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            expiration_s=expiration_s,
            claimed_at_ms=claimed_at_ms,
            completed_at_ms=completed_at_ms,
        )
        size = self._record_overhead(pk, owner, payload_hash)  # the item's, or more
        inline = len(result) <= self.inline_limit(pk, owner=owner, payload_hash=payload_hash)
        for attributes, chunks in self._placements(result, owner, inline=inline, pk=pk):
            if size + item_size(attributes) <= ITEM_BYTES:
                return StoredForm(pk, owner, {**item, **attributes}, chunks)
        raise StoreError(
            f"the completed record cannot hold even a chunk pointer within DynamoDB's "
            f"{ITEM_BYTES:,} bytes ({size:,} without its result)",
            key_hash=pk,
            code="ItemTooLarge",
        )

    def write_completion(self, form: StoredForm, writes: Sequence[Mapping[str, Any]] = ()) -> bool:
        """Send the completed record, fenced on its owner (its chunks, if any, were written
        first). Returns False when another claim took the key over (our lease lapsed);
        nothing was written then, enlisted writes included.

        Sending the same form again is safe: the fence still holds for a record we
        completed, and a transaction carries our owner token as its ClientRequestToken, so
        DynamoDB answers a repeat of one that landed without applying it twice."""
        put = {
            "TableName": self.table_name,
            "Item": form.item,
            "ConditionExpression": OWNED_BY_ME,
            "ExpressionAttributeNames": {"#owner": self.names.owner},
            "ExpressionAttributeValues": {":owner": {"S": form.owner}},
        }
        if not writes:
            _, refused = self._send(
                "put_item", form.pk, {_CONDITION_FAILED}, step="complete", **put
            )
            return refused is None
        return self._transact(form.pk, [{"Put": put}, *writes], token=form.owner)

    def completed_item(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        expiration_s: int,
        claimed_at_ms: int | None = None,
        completed_at_ms: int | None = None,
    ) -> dict[str, Any]:
        """The completed record's attributes but its result."""
        names = self.names
        item: dict[str, Any] = {
            **self._key(pk),
            names.status: {"S": Status.COMPLETED.value},
            names.expiration: {"N": str(expiration_s)},
            names.owner: {"S": owner},
            names.format_version: FORMAT_ATTRIBUTE,
        }
        if claimed_at_ms is not None:
            item[names.claimed_at] = {"N": str(claimed_at_ms)}
        if completed_at_ms is not None:
            item[names.completed_at] = {"N": str(completed_at_ms)}
        if payload_hash is not None:
            item[names.payload_hash] = {"S": payload_hash}
        return item

    def claim_item(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        now_ms: int,
        lease_until_ms: int,
        expiration_s: int,
    ) -> dict[str, Any]:
        """An IN_PROGRESS record, as a claim writes it."""
        names = self.names
        item: dict[str, Any] = {
            **self._key(pk),
            names.status: {"S": self.layout.in_progress_text},
            names.expiration: {"N": str(expiration_s)},
            names.lease_until: {"N": str(lease_until_ms)},
            names.owner: {"S": owner},
            names.claimed_at: {"N": str(now_ms)},
            names.format_version: FORMAT_ATTRIBUTE,
        }
        if payload_hash is not None:
            item[names.payload_hash] = {"S": payload_hash}
        return item

    def pointer_record(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        expiration_s: int,
        chunks: int,
        stored_bytes: int,
    ) -> dict[str, Any]:
        """The largest completed record of a fixed size: one naming `chunks` chunk items of
        a `stored_bytes` result, times at their widest (for the decoration-time check)."""
        item = self.completed_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            expiration_s=expiration_s,
            claimed_at_ms=int(WIDEST_NUMBER),
            completed_at_ms=int(WIDEST_NUMBER),
        )
        pointer = _pointer_bytes(owner, "0" * 64, chunks, stored_bytes)
        return {**item, self.names.result: {"B": pointer}}

    def extra_attribute_names(self) -> tuple[str, ...]:
        """Attribute names the layout writes beside `AttributeNames` (Powertools' `data`)."""
        return self.layout.extra_attribute_names()

    def _placements(
        self, blob: bytes, owner: str, *, inline: bool, pk: str = ""
    ) -> Iterator[tuple[dict[str, Any], bytes | None]]:
        """Where the layout puts a packed result, best first (`Layout.placements`)."""
        return self.layout.placements(
            self.names, blob, inline=inline, pointer=lambda: self._pointer_to(pk, owner, blob)
        )

    def _pointer_to(self, pk: str, owner: str, blob: bytes) -> bytes:
        room = self.chunk_bytes(pk, owner=owner, expiration_s=int(WIDEST_NUMBER))
        return self._chunk_pointer(owner, blob, -(-len(blob) // room))

    def release(self, pk: str, *, owner: str, now_ms: int) -> bool:
        """Give up our IN_PROGRESS claim so a retry runs again: a tombstone in the native
        layout, so a delayed copy of our claim request cannot lock the key again
        (`Layout.release_write`), fenced on our token. False when the record is no longer
        ours, or is no longer in progress."""
        names = self.names
        operation, target = self.layout.release_write(
            self._key(pk), names, owner=owner, now_ms=now_ms
        )
        _, refused = self._send(
            operation,
            pk,
            {_CONDITION_FAILED},
            step="release",
            TableName=self.table_name,
            **target,
            ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",
            ExpressionAttributeNames={"#owner": names.owner, "#status": names.status},
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":in_progress": {"S": self.layout.in_progress_text},
            },
        )
        return refused is None

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
        """A durable execution's claim over its own tombstone (an operator's forced release,
        or our release of an execution the SDK then replayed): the IN_PROGRESS record again,
        on the condition that the key still holds that tombstone, stamped `released_at_ms`.
        Any other claim since (a new execution) keeps the key; a delayed copy of this write
        cannot undo a later release. (True, None), or (False, the record holding the key)."""
        names = self.names
        item = self.claim_item(
            pk,
            owner=owner,
            payload_hash=payload_hash,
            now_ms=now_ms,
            lease_until_ms=lease_until_ms,
            expiration_s=expiration_s,
        )
        response, refused = self._send(
            "put_item",
            pk,
            {_CONDITION_FAILED},
            TableName=self.table_name,
            Item=item,
            ConditionExpression=f"{OWNED_BY_ME} AND #status = :released AND #lease_until = :at",
            ExpressionAttributeNames={
                "#owner": names.owner,
                "#status": names.status,
                "#lease_until": names.lease_until,
            },
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":released": {"S": Status.RELEASED.value},
                ":at": {"N": str(released_at_ms)},
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, None
        held = response.get("Item")
        return False, None if held is None else self._record(held, "claim", pk)

    def extend_lease(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        claimed_at_ms: int | None,
        lease_until_ms: int,
        expiration_s: int,
    ) -> tuple[bool, Record | None]:
        """Move our IN_PROGRESS claim's lease to `lease_until_ms`, fenced on `owner`: a
        PutItem of the claim as it was with the new lease (no permission beyond the claim's,
        and the same item in either layout). Returns (True, None), or (False, the record that
        holds the key now) when the claim is no longer ours: taken over after our lease
        lapsed, or completed or released."""
        names = self.names
        item: dict[str, Any] = {
            **self._key(pk),
            names.status: {"S": self.layout.in_progress_text},
            names.expiration: {"N": str(expiration_s)},
            names.lease_until: {"N": str(lease_until_ms)},
            names.owner: {"S": owner},
            names.format_version: FORMAT_ATTRIBUTE,
        }
        if claimed_at_ms is not None:
            item[names.claimed_at] = {"N": str(claimed_at_ms)}
        if payload_hash is not None:
            item[names.payload_hash] = {"S": payload_hash}
        response, refused = self._send(
            "put_item",
            pk,
            {_CONDITION_FAILED},
            step="extend_lease",
            TableName=self.table_name,
            Item=item,
            ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",
            ExpressionAttributeNames={"#owner": names.owner, "#status": names.status},
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":in_progress": {"S": self.layout.in_progress_text},
            },
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, None
        held = response.get("Item")
        return False, None if held is None else self._record(held, "extend", pk)

    def inline_limit(self, pk: str, *, owner: str, payload_hash: str | None) -> int:
        """The most result bytes the completed record holds and stays within its layout's
        `record_budget` (RECORD_BYTES natively; DynamoDB's item size, every attribute
        counted, times at their widest)."""
        overhead = self._record_overhead(pk, owner, payload_hash)
        return max(0, self.layout.record_budget - overhead - len(self.names.result.encode()))

    def _record_overhead(self, pk: str, owner: str, payload_hash: str | None) -> int:
        """The completed record's bytes but its result (times at their widest: at least
        what the record takes), counted on the record itself. Only the lengths of the key,
        the owner and the hash vary, the same for every key of a namespace: counted once per
        such shape."""
        shape = (len(pk.encode()), len(owner), -1 if payload_hash is None else len(payload_hash))
        overhead = self._overheads.get(shape)
        if overhead is None:
            widest = int(WIDEST_NUMBER)
            item = self.completed_item(
                pk,
                owner=owner,
                payload_hash=payload_hash,
                expiration_s=widest,
                claimed_at_ms=widest,
                completed_at_ms=widest,
            )
            overhead = item_size(item)
            if len(self._overheads) < OVERHEADS_KEPT:
                self._overheads[shape] = overhead
        return overhead

    def chunk_bytes(self, pk: str, *, owner: str, expiration_s: int) -> int:
        """The result bytes one chunk item of this key holds: CHUNK_BYTES, or what its key
        and names leave of DynamoDB's 400 KB when that is less."""
        item = self._chunk_item(pk, owner, 10**9, expiration_s, b"")
        return min(CHUNK_BYTES, ITEM_BYTES - item_size(item))

    def put_chunks(self, pk: str, *, owner: str, result: bytes, expiration_s: int) -> bytes:
        """Write a large result as immutable chunk items keyed by our owner token, before
        the completion names them, and return the pointer the record stores instead. A
        completion that is fenced out leaves them to expire; no other run ever reads them.
        Writing the same result again writes the same items."""
        size = self.chunk_bytes(pk, owner=owner, expiration_s=int(WIDEST_NUMBER))
        starts = range(0, len(result), size)
        for first in range(0, len(starts), BATCH_WRITE_ITEMS):
            requests = [
                {
                    "PutRequest": {
                        "Item": self._chunk_item(
                            pk, owner, index, expiration_s, result[start : start + size]
                        )
                    }
                }
                for index, start in enumerate(
                    starts[first : first + BATCH_WRITE_ITEMS], start=first
                )
            ]
            self._batch_write(pk, requests)
        return self._chunk_pointer(owner, result, len(starts))

    def _chunk_item(
        self, pk: str, owner: str, index: int, expiration_s: int, part: bytes
    ) -> dict[str, Any]:
        return {
            **self._key(_chunk_pk(pk, owner, index)),
            self.names.expiration: {"N": str(expiration_s)},
            self.names.result: {"B": part},
        }

    def commit_writes(self, writes: Sequence[Mapping[str, Any]]) -> None:
        """Commit enlisted writes on their own, for calls that run without a record."""
        if writes:
            self._transact(None, list(writes))

    # -- reads and operator actions -------------------------------------------------------

    def get(self, pk: str) -> Record | None:
        """The record as stored (strongly consistent), expired or not."""
        response, _ = self._send(
            "get_item",
            pk,
            set(),
            step="get",
            TableName=self.table_name,
            Key=self._key(pk),
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else self._record(item, "get", pk)

    def delete(self, pk: str) -> None:
        """Remove a record unconditionally (tests and clean-ups only: it breaks the fence and
        may remove a record completed a moment ago; operators use `release_version`)."""
        self._send(
            "delete_item", pk, set(), step="delete", TableName=self.table_name, Key=self._key(pk)
        )

    def release_version(self, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
        """Operators only: replace the record `shown`, if it is still exactly that version,
        with a RELEASED tombstone so its key runs again. (True, None) when released; else
        (False, what holds the key now, None if nothing): nothing was written.

        The condition (`_version_condition`) closes the race of a record completed between
        the operator's read and this write: the completed record stays, and retries replay
        it. The tombstone keeps the record's owner token and is stamped `now_ms`, as the
        protocol's own release is: a delayed copy of a claim sent before the release cannot
        lock the key again, and a holder that was still running (a release forced over a
        live lease) may still complete over it, so its effect is recorded, not run again.
        A completed record's chunk items are left to their own TTL: they are keyed by its
        owner token, and nothing else ever reads them."""
        operation, target = self.layout.forced_release_write(
            self._key(shown.pk), self.names, shown, now_ms=now_ms
        )
        response, refused = self._send(
            operation,
            shown.pk,
            {_CONDITION_FAILED},
            step="release",
            TableName=self.table_name,
            **target,
            **self._version_condition(shown),
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, None
        held = response.get("Item")
        current = None if held is None else self._record(held, "release", shown.pk)
        if current is not None and current == Record(
            shown.pk, Status.RELEASED, now_ms // 1000 + TOMBSTONE_SECONDS, now_ms, shown.owner
        ):
            return True, None  # our own tombstone: botocore resent a write that had landed
        return False, current

    def _version_condition(self, shown: Record) -> dict[str, Any]:
        """A condition that holds only for the record `shown`: same status, owner token, lease,
        expiration and times. Each claim has a token of its own and every completion sets a
        fresh expiration, so any write by anyone since the read fails it."""
        names = self.names
        fields = (
            ("status", names.status, {"S": self.layout.stored_status(shown.status)}),
            ("owner", names.owner, None if shown.owner is None else {"S": shown.owner}),
            ("lease_until", names.lease_until, _number(shown.lease_until)),
            ("expiration", names.expiration, _number(shown.expiration)),
            ("claimed_at", names.claimed_at, _number(shown.claimed_at)),
            ("completed_at", names.completed_at, _number(shown.completed_at)),
        )
        clauses: list[str] = []
        attribute_names: dict[str, str] = {}
        values: dict[str, Any] = {}
        for alias, name, value in fields:
            attribute_names[f"#{alias}"] = name
            if value is None:
                clauses.append(f"attribute_not_exists(#{alias})")
            else:
                clauses.append(f"#{alias} = :{alias}")
                values[f":{alias}"] = value
        return {
            "ConditionExpression": " AND ".join(clauses),
            "ExpressionAttributeNames": attribute_names,
            "ExpressionAttributeValues": values,
        }

    def scan_stuck(
        self, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Live IN_PROGRESS records claimed before a time, page by page (operators only: a
        scan reads the whole table, and each page says what it cost)."""
        names = self.names
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "FilterExpression": (
                "#status = :in_progress AND #expiration >= :now_s"
                " AND (#claimed_at < :before OR attribute_not_exists(#claimed_at))"
            ),
            "ExpressionAttributeNames": {
                "#status": names.status,
                "#expiration": names.expiration,
                "#claimed_at": names.claimed_at,
            },
            "ExpressionAttributeValues": {
                ":in_progress": {"S": self.layout.in_progress_text},
                ":now_s": {"N": str(now_ms // 1000)},
                ":before": {"N": str(claimed_before_ms)},
            },
            "ReturnConsumedCapacity": "TOTAL",
        }
        if page_size is not None:
            request["Limit"] = page_size
        while True:
            response, _ = self._send("scan", None, set(), step="scan", **request)
            capacity = response.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0)
            records, unreadable = [], []
            for item in response.get("Items", []):
                try:
                    records.append(self._record(item, "scan"))
                except StoreError as exc:
                    # One record this library cannot read is reported, not a reason to stop.
                    unreadable.append(exc.key_hash or "")
            yield ScanPage(
                records=records,
                scanned=int(response.get("ScannedCount", 0)),
                capacity_units=float(capacity),
                unreadable=unreadable,
            )
            last_key = response.get("LastEvaluatedKey")
            if last_key is None:
                return
            request["ExclusiveStartKey"] = last_key

    def load_result(self, record: Record) -> bytes | None:
        """The record's packed result, reassembled from its chunks when it was split. A
        pointer that does not parse, and chunks missing or not what the pointer names, are
        a StoreError `StoredResultUnreadable`: never a partial result."""
        blob = record.result
        if blob is None or blob[:1] != CHUNKED:
            return blob
        pointer = chunk_pointer(blob, key_hash=record.pk)
        keys = [self._key(_chunk_pk(record.pk, pointer.owner, i)) for i in range(pointer.chunks)]
        # Chunks are immutable and written before the record names them: an eventually
        # consistent read either finds one whole or misses it, and only misses pay for a
        # strongly consistent read.
        parts = self._batch_get(record.pk, keys, consistent=False)
        missing = [key for key in keys if self._pk_of(key) not in parts]
        if missing:
            parts.update(self._batch_get(record.pk, missing, consistent=True))
        joined = b"".join(parts.get(self._pk_of(key), b"") for key in keys)
        digest = hashlib.sha256(joined).hexdigest()
        if digest != pointer.sha256 or pointer.size not in (None, len(joined)):
            raise StoreError(
                "a chunked result is incomplete or corrupt",
                key_hash=record.pk,
                record=record,
                code=STORED_RESULT_UNREADABLE,
                step="replay",
            )
        return joined

    # -- internals ------------------------------------------------------------------------

    def _key(self, pk: str) -> dict[str, Any]:
        """The item's primary key: `pk` alone, or under the static partition value."""
        if self.sort_key_attr is None:
            return {self.names.pk: {"S": pk}}
        return {self.names.pk: {"S": self.static_pk_value}, self.sort_key_attr: {"S": pk}}

    def _pk_of(self, item: Mapping[str, Any]) -> str:
        return str(item[self.sort_key_attr or self.names.pk]["S"])

    def _batch_get(
        self, pk: str, keys: list[dict[str, Any]], *, consistent: bool
    ) -> dict[str, bytes]:
        names = self.names
        parts: dict[str, bytes] = {}
        request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": consistent}}
        for attempt in range(UNPROCESSED_ATTEMPTS):
            response, _ = self._send(
                "batch_get_item", pk, set(), step="replay", RequestItems=request
            )
            for item in response.get("Responses", {}).get(self.table_name, []):
                try:
                    parts[_text(item[self.sort_key_attr or names.pk])] = binary(item[names.result])
                except (KeyError, TypeError, AttributeError):
                    continue  # a chunk we never wrote so: missing, which the checksum tells
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
            time.sleep(min(0.05 * 2**attempt, 1.0))  # throttled: back off before asking again
        return parts

    def _batch_write(self, pk: str, requests: list[dict[str, Any]]) -> None:
        pending: dict[str, Any] = {self.table_name: requests}
        for attempt in range(UNPROCESSED_ATTEMPTS):
            response, _ = self._send(
                "batch_write_item", pk, set(), step="chunks", RequestItems=pending
            )
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

    @staticmethod
    def _chunk_pointer(owner: str, result: bytes, count: int) -> bytes:
        return _pointer_bytes(owner, hashlib.sha256(result).hexdigest(), count, len(result))

    def _transact(
        self, pk: str | None, items: list[Mapping[str, Any]], token: str | None = None
    ) -> bool:
        if len(items) > MAX_TRANSACTION_ITEMS:
            raise ConfigurationError(
                f"{len(items)} writes in one transaction; DynamoDB allows {MAX_TRANSACTION_ITEMS}"
            )
        request: dict[str, Any] = {"TransactItems": items}
        if token is not None:
            request["ClientRequestToken"] = token
        response, refused = self._send(
            "transact_write_items", pk, {_TRANSACTION_CANCELED}, step="complete", **request
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
            code=_TRANSACTION_CANCELED,
            retryable=bool(set(codes) & RETRYABLE_CANCELLATIONS),
        )

    def _send(
        self,
        operation: str,
        pk: str | None,
        expected: Iterable[str],
        *,
        step: str | None = None,
        **request: Any,
    ) -> tuple[dict[str, Any], str | None]:
        """Call DynamoDB for the protocol's `step`. An expected refusal (a failed condition)
        comes back as its error code with the error response; anything else becomes a
        StoreError, chained to botocore's, naming the operation, table and endpoint."""
        try:
            response: dict[str, Any] = getattr(self._caller(), operation)(**request)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in expected:
                return dict(exc.response), code
            metadata = exc.response.get("ResponseMetadata", {})
            server_error = int(metadata.get("HTTPStatusCode", 0)) >= 500
            raise StoreError(
                self._failure(operation, code),
                key_hash=pk,
                code=code,
                retryable=server_error or code in RETRYABLE_CODES,
                # An earlier attempt that botocore retried may have landed, and so may a 5xx.
                maybe_applied=server_error or int(metadata.get("RetryAttempts", 0)) > 0,
                step=step,
            ) from exc
        except ParamValidationError as exc:
            raise _unbuildable(operation, pk, exc, step) from exc
        except _UNSENT as exc:
            # No region, no credentials: refused before anything left, on every attempt.
            raise StoreError(
                self._failure(operation, type(exc).__name__), key_hash=pk, step=step
            ) from exc
        except BotoCoreError as exc:
            raise StoreError(
                self._failure(operation, type(exc).__name__),
                key_hash=pk,
                retryable=True,
                maybe_applied=True,  # a read timeout or a dropped connection: it may have landed
                step=step,
            ) from exc
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # botocore could not serialize the request: without client-side validation a
            # malformed enlisted write fails here, before anything is sent.
            raise _unbuildable(operation, pk, exc, step) from exc
        return response, None

    def _failure(self, operation: str, reason: str) -> str:
        """One line: what failed, on which table, where, and for the common causes the fix.
        Names only (table, endpoint, region): never a key or a payload."""
        table = self._peek_table_name() or "?"
        meta = getattr(self._client, "meta", None)
        endpoint = getattr(meta, "endpoint_url", None) or (
            self._endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        where = f"table {table} at {endpoint}" if endpoint else f"table {table}"
        fix = _FIXES.get(reason)
        return f"DynamoDB {operation} failed: {reason} ({where})" + (
            f": {fix.format(table=table)}" if fix else ""
        )

    def _replaced(self, item: Mapping[str, Any] | None, pk: str) -> Record | None:
        """The record a won claim replaced, for the log only. DynamoDB's condition already
        found it expired, lapsed or released by its own attributes, so the key was free
        whatever else it holds: one that cannot be read is not an error here."""
        if item is None:
            return None
        try:
            return self._record(item, "claim", pk)
        except StoreError:
            return None

    def _record(self, item: Mapping[str, Any], step: str, pk: str | None = None) -> Record:
        """The record in a stored item, as the layout reads it (or a StoreError)."""
        return self.layout.record(item, self.names, self.sort_key_attr or self.names.pk, step, pk)


def stored_result_bytes(record: Record) -> int:
    """The stored (packed) size of a record's result, chunks included (0 for a pointer
    written before pointers said their size)."""
    if record.result is None:
        return 0
    if record.result[:1] != CHUNKED:
        return len(record.result)
    try:
        size = json.loads(record.result[1:]).get("bytes", 0)
    except (ValueError, RecursionError, AttributeError):
        size = None
    if type(size) is not int or size < 0:
        raise unreadable(
            STORED_RESULT_UNREADABLE,
            "its chunk pointer does not parse, or its size is no count of bytes",
            key_hash=record.pk,
            step="inspect",
        )
    return size


MAX_CHUNKS = 100
"""The most chunks a pointer may name: what one BatchGetItem reads (`load_result` sends
one). A result of at most MAX_STORED_BYTES takes far fewer."""


class ChunkPointer(Value):
    """What a chunked record's result attribute holds instead of the result."""

    owner: str
    """The owner token of the claim that wrote the chunks: part of their keys."""
    chunks: int
    sha256: str
    """Hex digest of the joined chunks."""
    size: int | None = None
    """The joined chunks' length; None in pointers written before it was recorded."""


def chunk_pointer(blob: bytes, *, key_hash: str | None, step: str = "replay") -> ChunkPointer:
    """The pointer in a CHUNKED blob; StoreError `StoredResultUnreadable` for one that does
    not parse, or lacks its owner, count (1 to MAX_CHUNKS) or checksum."""
    try:
        pointer = json.loads(blob[1:])
    except (ValueError, RecursionError):
        pointer = None
    if type(pointer) is dict:
        owner, count = pointer.get("owner"), pointer.get("count")
        digest, size = pointer.get("sha256"), pointer.get("bytes")
        if (
            type(owner) is str
            and owner
            and type(count) is int
            and 0 < count <= MAX_CHUNKS
            and type(digest) is str
            and (size is None or (type(size) is int and size >= 0))
        ):
            return ChunkPointer(owner, count, digest, size)
    raise unreadable(
        STORED_RESULT_UNREADABLE,
        "its chunk pointer does not parse, or lacks its owner, count or checksum",
        key_hash=key_hash,
        step=step,
    )


def _pointer_bytes(owner: str, sha256: str, count: int, stored_bytes: int) -> bytes:
    pointer = {"owner": owner, "count": count, "bytes": stored_bytes, "sha256": sha256}
    return CHUNKED + json.dumps(pointer).encode()


def _number(value: int | None) -> dict[str, str] | None:
    return None if value is None else {"N": str(value)}


def _unbuildable(
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


_UNSENT = (NoRegionError, NoCredentialsError, PartialCredentialsError)
"""botocore errors raised before a request leaves (building the client, signing): nothing
landed, and botocore does not retry them."""
_LOCAL = "for DynamoDB Local, `lambda-idempotency local` prints the variables to export"
_FIXES = {
    "NoRegionError": "no AWS region: set AWS_REGION (Lambda sets it), or pass region_name=",
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


def _chunk_pk(pk: str, owner: str, index: int) -> str:
    """Chunks are keyed by their writer's owner token, so a later run's chunks never mix in."""
    return f"{pk}#chunk#{owner}#{index}"


def _decoration_problems(store: DynamoDBStore, namespace: str, *, payload: bool) -> list[str]:
    """What DynamoDB would refuse of this namespace's items, as sentences (none: fine)."""
    found: list[str] = []
    names = store.names
    key_names = [names.pk] if store.sort_key_attr is None else [names.pk, store.sort_key_attr]
    for name in key_names:
        if len(name.encode()) > KEY_NAME_BYTES:
            found.append(
                f"the key attribute name {name[:40]!r}... has {len(name.encode()):,} bytes; "
                f"DynamoDB allows {KEY_NAME_BYTES} for a key attribute's name"
            )
    for name in [*names, *store.extra_attribute_names()]:
        if not name or len(name.encode()) > NAME_BYTES:
            found.append(
                f"an attribute name of {len(name.encode()):,} bytes: DynamoDB takes 1 to "
                f"{NAME_BYTES:,}"
            )
    if found:
        return found

    layout = store.layout
    try:
        pk = layout.record_key(namespace, None, "probe")
        payload_hash = layout.payload_hash("probe") if payload else None
    except Exception as exc:  # a hash function that cannot hash (hashlib's shake_*, ...)
        return [f"the store's key layout cannot key a record: {type(exc).__name__}: {exc}"]
    owner = "0" * OWNER_CHARS
    if store.sort_key_attr is None:
        where, limit = "partition key", PARTITION_KEY_BYTES
    else:
        where, limit = f"sort key ({store.sort_key_attr!r})", SORT_KEY_BYTES
        static = store.static_pk_value.encode()
        if not 1 <= len(static) <= PARTITION_KEY_BYTES:
            found.append(
                f"static_pk_value has {len(static):,} bytes; DynamoDB takes a partition key "
                f"of 1 to {PARTITION_KEY_BYTES:,} bytes"
            )
    record_key = len(pk.encode())
    room = limit - (record_key - len(namespace.encode()))
    if record_key > limit:
        found.append(
            f"namespace {_shown(namespace)} makes record keys of {record_key:,} bytes "
            f"(namespace, '#' and the key's hash), and DynamoDB refuses a {where} over "
            f"{limit:,} bytes: every call would fail at its claim. Use a namespace of at most "
            f"{room:,} bytes"
        )
        return found

    widest = int(WIDEST_NUMBER)
    # A chunk item always has room (names under 64 KB each leave it over 270 KB); its room
    # sets how many chunks the largest result takes, and so the longest chunk key.
    chunk_room = store.chunk_bytes(pk, owner=owner, expiration_s=widest)
    chunks = -(-MAX_STORED_BYTES // chunk_room)
    chunk_key = len(_chunk_pk(pk, owner, chunks - 1).encode())
    if chunk_key > limit:
        room -= chunk_key - record_key
        found.append(
            f"namespace {_shown(namespace)} makes the keys of a large result's chunk items "
            f"({{key}}#chunk#{{owner}}#{{n}}) {chunk_key:,} bytes long, and DynamoDB refuses a "
            f"{where} over {limit:,} bytes: a result past the record's room would fail to be "
            f"stored after the handler ran. Use a namespace of at most {room:,} bytes"
        )
        return found

    pointer = store.pointer_record(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        expiration_s=widest,
        chunks=chunks,
        stored_bytes=MAX_STORED_BYTES,
    )
    claim = store.claim_item(
        pk,
        owner=owner,
        payload_hash=payload_hash,
        now_ms=widest,
        lease_until_ms=widest,
        expiration_s=widest,
    )
    for what, item in (("a claim", claim), ("a completed record naming its chunks", pointer)):
        size = item_size(item)
        if size > ITEM_BYTES:
            found.append(
                f"{what} would take {size:,} bytes (every attribute counted: key, names, "
                f"status, owner, payload hash, times, result) and DynamoDB refuses an item "
                f"over {ITEM_BYTES:,} bytes: shorten the namespace or the attribute names"
            )
    return found


def _shown(namespace: str) -> str:
    encoded = len(namespace.encode())
    return f"{namespace[:40]!r}... ({encoded:,} bytes)" if len(namespace) > 40 else repr(namespace)
