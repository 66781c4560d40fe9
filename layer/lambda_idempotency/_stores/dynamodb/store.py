"""DynamoDBStore: the record's I/O. The protocol's main writes are built here; the rest are
rooms of their own (listed at the end).

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

The store's other ideas, each a module of functions of the store (`store_view` says what
they read of it): its items (`record_items`); a claim written again, its lease extended or
retaken after a release (`claim_rewrites`); where a result goes and its chunks
(`result_placement`); the decoration-time check (`decoration_check`); the table it reaches,
its calls and botocore's errors (`calls`, whose `TableConnection` is the store's base), and
the client it builds for itself (`client`); the operators' scan and release
(`operator_actions`). The last two are loaded when first used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..._base.errors import ConfigurationError, StoreError
from ..record import AttributeNames, Record, ScanPage, StoredForm
from . import record_items, result_placement
from .calls import CONDITION_FAILED, TableConnection, transact
from .decoration_check import decoration_problems
from .layout import (
    INLINE_RESULT_BYTES,  # noqa: F401 (its former home; still importable)
    NATIVE_KEYS,
    OWNED_BY_ME,
    RECORD_BYTES,  # noqa: F401 (its former home; still importable)
    STILL_IN_PROGRESS,
    Layout,
)
from .result_placement import (
    stored_result_bytes as stored_result_bytes,  # noqa: PLC0414 (its former home: the CLI's)
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from . import claim_rewrites
    from .powertools_layout import PowertoolsOptions


class _OnFirstUse:
    """A method whose module loads the first time it is looked up, then replaces this
    descriptor on the class: what only some handlers use costs the others no cold start."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __set_name__(self, owner: type, attribute: str) -> None:
        self.attribute = attribute

    def __get__(self, instance: object, owner: type) -> Any:
        from importlib import import_module

        function = getattr(import_module(f"{__package__}.{self.module}"), self.name)
        setattr(owner, self.attribute, function)
        return function if instance is None else function.__get__(instance, owner)


class DynamoDBStore(TableConnection):
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

    In Lambda, a store given no client sends the protocol's requests through the direct
    path (`direct.transport`: no botocore client, prepared during INIT; docs/lambda-modes.md)
    wherever the environment decides every setting; elsewhere, or with a client passed in,
    `fast_wire` (on by default, for our own client and for one passed in) sends the
    protocol's requests through a lean path over the client's own botocore parts (signer,
    credentials, endpoint, HTTP session, retry handler, `before-send`), for about 0.6 of
    boto3's CPU a call. It is on for a passed client too because it inspects that client and
    steps aside, call by call, whenever it cannot honour something the client carries (a
    Stubber, a hook on an event it skips, a patch it does not know, endpoint discovery; the
    wrappers of X-Ray, Powertools' Tracer and OpenTelemetry it calls itself): what a client
    can observe does not change. `fast_wire=False`, or
    IDEMPOTENCY_FAST_WIRE=0 in the environment (no redeploy of code needed), sends every
    request through boto3 as usual (IDEMPOTENCY_DIRECT_WIRE=0 turns off the direct path
    alone).
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
        super().__init__(
            table_name,
            client=client,
            endpoint_url=endpoint_url,
            region_name=region_name,
            fast_wire=fast_wire,
        )
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
        self._overheads: dict[tuple[int, int, int], int] = {}
        """`result_placement.record_overhead` by the lengths that vary (a few namespaces')."""

    def __repr__(self) -> str:
        shown = "" if self.layout is NATIVE_KEYS else f", layout={self.layout.name!r}"
        return f"DynamoDBStore(table_name={self._peek_table_name()!r}{shown})"

    # -- the protocol's writes and read ----------------------------------------------------

    def check_decoration(self, namespace: str, *, payload: bool) -> None:
        """Refuse, when a decorator is applied, a namespace whose items DynamoDB would refuse
        later (`decoration_check`)."""
        for problem in decoration_problems(self, namespace, payload=payload):
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
            {CONDITION_FAILED},
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
            {CONDITION_FAILED},
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
        attributes, _ = next(result_placement.placements(self, result, owner, inline=True))
        return self.write_completion(StoredForm(pk, owner, {**item, **attributes}), writes)

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
            _, refused = self._send("put_item", form.pk, {CONDITION_FAILED}, step="complete", **put)
            return refused is None
        return transact(self._send, form.pk, [{"Put": put}, *writes], token=form.owner)

    def commit_writes(self, writes: Sequence[Mapping[str, Any]]) -> None:
        """Commit enlisted writes on their own, for calls that run without a record."""
        if writes:
            transact(self._send, None, list(writes))

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

    # -- the parts' functions of the store (`store_view`), bound here as its methods --------
    # A claim written again over our own record (`claim_rewrites`): only durable executions
    # and leases extended use it, so it loads when first used, not at every cold start.

    if TYPE_CHECKING:
        retake = claim_rewrites.retake
        extend_lease = claim_rewrites.extend_lease
    else:
        retake = _OnFirstUse("claim_rewrites", "retake")
        extend_lease = _OnFirstUse("claim_rewrites", "extend_lease")

    # Where a result goes, and its chunks (`result_placement`).

    stored_form = result_placement.stored_form
    inline_limit = result_placement.inline_limit
    chunk_bytes = result_placement.chunk_bytes
    put_chunks = result_placement.put_chunks
    load_result = result_placement.load_result
    pointer_record = result_placement.pointer_record

    # The layout's items (`record_items`).

    claim_item = record_items.claim_item
    completed_item = record_items.completed_item
    _key = record_items.item_key
    _record = record_items.read_record

    def extra_attribute_names(self) -> tuple[str, ...]:
        """Attribute names the layout writes beside `AttributeNames` (Powertools' `data`)."""
        return self.layout.extra_attribute_names()

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

    # -- operators only (`operator_actions`, loaded on first use) -------------------------

    def release_version(self, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
        """Replace the record `shown` with a RELEASED tombstone if it is still exactly that
        version: (True, None), or (False, what holds the key now) with nothing written."""
        from .operator_actions import release_version

        return release_version(self, shown, now_ms=now_ms)

    def scan_stuck(
        self, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
    ) -> Iterator[ScanPage]:
        """Live IN_PROGRESS records claimed before a time, page by page (a whole-table scan)."""
        from .operator_actions import scan_stuck

        return scan_stuck(
            self, claimed_before_ms=claimed_before_ms, now_ms=now_ms, page_size=page_size
        )
