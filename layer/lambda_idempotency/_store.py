"""DynamoDBStore: the record's I/O, and the only place botocore's errors are translated.

The store holds no decorator settings and no per-call state: times, owners and hashes come
in as arguments, so one store can serve any number of decorators without mixing them.

Timeline of one key, and what each condition closes:

    A: claim ──────── run ──────── complete(owner = A)     ✔
    B:        claim ✘ (ALL_OLD: IN_PROGRESS) → InProgressError / wait
    A: claim ── run ─ ─ ─ ─ (lease lapses) ─ ─ ─ ─ ─ complete(owner = A) ✘ fenced
    C:                          claim ✔ (lease lapsed) ── run ── complete(owner = C) ✔
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from botocore.exceptions import BotoCoreError, ClientError

from ._encoding import CHUNKED
from ._errors import CompletionConflictError, ConfigurationError, ResultTooLargeError, StoreError
from ._record import AttributeNames, Record, Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# -- Condition fragments. Expired items linger for days, so "expired" counts as "absent".
KEY_ABSENT = "attribute_not_exists(#pk)"
"""No record: nobody has claimed the key yet."""
RECORD_EXPIRED = "#expiration < :now_s"
"""A record past its TTL that DynamoDB has not deleted yet: the key is free again."""
LEASE_LAPSED = "(#status = :in_progress AND #lease_until < :now_ms)"
"""An owner that crashed or timed out: its invocation cannot still be running."""
CLAIMABLE = f"{KEY_ABSENT} OR {RECORD_EXPIRED} OR {LEASE_LAPSED}"
OWNED_BY_ME = "#owner = :owner"
"""The fence: only the claim that still holds the key may complete or release it."""
STILL_IN_PROGRESS = "#status = :in_progress"
"""Release never deletes a completed record, even our own: a completion whose answer was
lost may have landed, and deleting it would run the handler and its writes again."""

INLINE_RESULT_BYTES = 350_000
"""Larger results are split into chunk items: an item may hold at most 400 KB."""
CHUNK_BYTES = 350_000
MAX_TRANSACTION_BYTES = 3_800_000
"""TransactWriteItems carries at most 4 MB; keep room for the record and enlisted writes."""
MAX_TRANSACTION_ITEMS = 100
UNPROCESSED_ATTEMPTS = 6
"""BatchGetItem returns throttled keys as UnprocessedKeys; ask again this often, backing off."""

RUNTIME_IAM_ACTIONS = frozenset(
    {"dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem", "dynamodb:BatchGetItem"}
)
"""What a decorated function needs on the idempotency table, no more. TransactWriteItems is
authorised per item: our items in it are PutItems (record and chunks). Enlisted business
writes need their own actions on their own tables. Scan is for operators only."""

_CONDITION_FAILED = "ConditionalCheckFailedException"
_TRANSACTION_CANCELED = "TransactionCanceledException"


def _default_client(endpoint_url: str | None, region_name: str | None) -> DynamoDBClient:
    import boto3
    from botocore.config import Config

    # Our requests are built by code, not typed by people: botocore's client-side parameter
    # validation would only cost CPU on every call (about 35 µs a request). DynamoDB still
    # validates, so a malformed enlisted write fails as a ValidationException.
    config = Config(
        connect_timeout=2,
        read_timeout=10,
        retries={"mode": "standard", "max_attempts": 3},
        parameter_validation=False,
    )
    return boto3.client(
        "dynamodb", endpoint_url=endpoint_url, region_name=region_name, config=config
    )


class DynamoDBStore:
    """Reads and writes idempotency records in one DynamoDB table.

    `table_name` defaults to the `IDEMPOTENCY_TABLE` environment variable. Pass `client` to
    reuse or instrument a boto3 DynamoDB client; otherwise one is created on first use.
    """

    def __init__(
        self,
        table_name: str | None = None,
        *,
        client: DynamoDBClient | None = None,
        attribute_names: AttributeNames | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
    ) -> None:
        resolved = table_name if table_name is not None else os.environ.get("IDEMPOTENCY_TABLE")
        if not resolved:
            raise ConfigurationError(
                "no table name: pass DynamoDBStore(table_name) or set IDEMPOTENCY_TABLE"
            )
        self.table_name = resolved
        self.names = attribute_names if attribute_names is not None else AttributeNames()
        self._client = client
        self._endpoint_url = endpoint_url
        self._region_name = region_name

    def __repr__(self) -> str:
        return f"DynamoDBStore(table_name={self.table_name!r})"

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = _default_client(self._endpoint_url, self._region_name)
        return self._client

    # -- the protocol's four writes ---------------------------------------------------------

    def claim(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        now_ms: int,
        lease_until_ms: int,
        expiration_s: int,
    ) -> tuple[bool, Record | None]:
        """Write a new IN_PROGRESS record if the key is free.

        Returns (True, the expired or lapsed record we replaced, if any) when we own the key,
        else (False, the record that holds it), straight from the failed write: no second read.
        """
        names = self.names
        item: dict[str, Any] = {
            names.pk: {"S": pk},
            names.status: {"S": Status.IN_PROGRESS.value},
            names.expiration: {"N": str(expiration_s)},
            names.lease_until: {"N": str(lease_until_ms)},
            names.owner: {"S": owner},
            names.claimed_at: {"N": str(now_ms)},
        }
        if payload_hash is not None:
            item[names.payload_hash] = {"S": payload_hash}
        response, refused = self._send(
            "put_item",
            pk,
            {_CONDITION_FAILED},
            TableName=self.table_name,
            Item=item,
            ConditionExpression=CLAIMABLE,
            ExpressionAttributeNames={
                "#pk": names.pk,
                "#status": names.status,
                "#expiration": names.expiration,
                "#lease_until": names.lease_until,
            },
            ExpressionAttributeValues={
                ":now_s": {"N": str(now_ms // 1000)},
                ":now_ms": {"N": str(now_ms)},
                ":in_progress": {"S": Status.IN_PROGRESS.value},
            },
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            replaced = response.get("Attributes")
            return True, None if replaced is None else self._record(replaced)
        held = response.get("Item")
        if held is None:  # an endpoint that ignores ReturnValuesOnConditionCheckFailure
            return False, self.get(pk)
        return False, self._record(held)

    def complete(
        self,
        pk: str,
        *,
        owner: str,
        payload_hash: str | None,
        result: bytes,
        expiration_s: int,
        claimed_at_ms: int | None = None,
        writes: Sequence[Mapping[str, Any]] = (),
    ) -> bool:
        """Store the result, fenced on `owner`. Returns False when another claim took the key
        over (our lease lapsed); nothing was written then, enlisted writes included."""
        names = self.names
        chunks = self._chunk_items(pk, owner, result, expiration_s)
        stored = result if not chunks else self._chunk_pointer(owner, result, len(chunks))
        item: dict[str, Any] = {
            names.pk: {"S": pk},
            names.status: {"S": Status.COMPLETED.value},
            names.expiration: {"N": str(expiration_s)},
            names.owner: {"S": owner},
            names.result: {"B": stored},
        }
        if claimed_at_ms is not None:
            item[names.claimed_at] = {"N": str(claimed_at_ms)}
        if payload_hash is not None:
            item[names.payload_hash] = {"S": payload_hash}
        put = {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": OWNED_BY_ME,
            "ExpressionAttributeNames": {"#owner": names.owner},
            "ExpressionAttributeValues": {":owner": {"S": owner}},
        }
        if not chunks and not writes:
            _, refused = self._send("put_item", pk, {_CONDITION_FAILED}, **put)
            return refused is None
        return self._transact(pk, [{"Put": put}, *chunks, *writes])

    def release(self, pk: str, *, owner: str) -> bool:
        """Delete our IN_PROGRESS claim so a retry runs again. False when it is no longer
        ours, or is no longer in progress."""
        _, refused = self._send(
            "delete_item",
            pk,
            {_CONDITION_FAILED},
            TableName=self.table_name,
            Key={self.names.pk: {"S": pk}},
            ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",
            ExpressionAttributeNames={"#owner": self.names.owner, "#status": self.names.status},
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":in_progress": {"S": Status.IN_PROGRESS.value},
            },
        )
        return refused is None

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
            TableName=self.table_name,
            Key={self.names.pk: {"S": pk}},
            ConsistentRead=True,
        )
        item = response.get("Item")
        return None if item is None else self._record(item)

    def delete(self, pk: str) -> None:
        """Remove a record unconditionally (operators only: it breaks the fence)."""
        self._send(
            "delete_item", pk, set(), TableName=self.table_name, Key={self.names.pk: {"S": pk}}
        )

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
                ":in_progress": {"S": Status.IN_PROGRESS.value},
                ":now_s": {"N": str(now_ms // 1000)},
                ":before": {"N": str(claimed_before_ms)},
            },
            "ReturnConsumedCapacity": "TOTAL",
        }
        if page_size is not None:
            request["Limit"] = page_size
        while True:
            response, _ = self._send("scan", None, set(), **request)
            capacity = response.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0)
            yield ScanPage(
                records=[self._record(item) for item in response.get("Items", [])],
                scanned=int(response.get("ScannedCount", 0)),
                capacity_units=float(capacity),
            )
            last_key = response.get("LastEvaluatedKey")
            if last_key is None:
                return
            request["ExclusiveStartKey"] = last_key

    def load_result(self, record: Record) -> bytes | None:
        """The record's packed result, reassembled from its chunks when it was split."""
        blob = record.result
        if blob is None or blob[:1] != CHUNKED:
            return blob
        pointer = json.loads(blob[1:])
        keys = [
            {self.names.pk: {"S": _chunk_pk(record.pk, pointer["owner"], i)}}
            for i in range(pointer["count"])
        ]
        parts: dict[str, bytes] = {}
        request: dict[str, Any] = {self.table_name: {"Keys": keys, "ConsistentRead": True}}
        for attempt in range(UNPROCESSED_ATTEMPTS):
            response, _ = self._send("batch_get_item", record.pk, set(), RequestItems=request)
            for item in response.get("Responses", {}).get(self.table_name, []):
                parts[item[self.names.pk]["S"]] = item[self.names.result]["B"]
            request = response.get("UnprocessedKeys") or {}
            if not request:
                break
            time.sleep(min(0.05 * 2**attempt, 1.0))  # throttled: back off before asking again
        joined = b"".join(parts.get(key[self.names.pk]["S"], b"") for key in keys)
        if hashlib.sha256(joined).hexdigest() != pointer["sha256"]:
            raise StoreError(
                "a chunked result is incomplete or corrupt", key_hash=record.pk, record=record
            )
        return joined

    # -- internals ------------------------------------------------------------------------

    def _chunk_items(
        self, pk: str, owner: str, result: bytes, expiration_s: int
    ) -> list[dict[str, Any]]:
        if len(result) <= INLINE_RESULT_BYTES:
            return []
        if len(result) > MAX_TRANSACTION_BYTES:
            raise ResultTooLargeError(
                f"the stored result is {len(result)} bytes; at most {MAX_TRANSACTION_BYTES} fit in "
                "one DynamoDB transaction",
                key_hash=pk,
            )
        names = self.names
        return [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": {
                        names.pk: {"S": _chunk_pk(pk, owner, index)},
                        names.expiration: {"N": str(expiration_s)},
                        names.result: {"B": result[start : start + CHUNK_BYTES]},
                    },
                }
            }
            for index, start in enumerate(range(0, len(result), CHUNK_BYTES))
        ]

    @staticmethod
    def _chunk_pointer(owner: str, result: bytes, count: int) -> bytes:
        pointer = {
            "owner": owner,
            "count": count,
            "bytes": len(result),
            "sha256": hashlib.sha256(result).hexdigest(),
        }
        return CHUNKED + json.dumps(pointer).encode()

    def _transact(self, pk: str | None, items: list[Mapping[str, Any]]) -> bool:
        if len(items) > MAX_TRANSACTION_ITEMS:
            raise ResultTooLargeError(
                f"{len(items)} writes in one transaction; DynamoDB allows {MAX_TRANSACTION_ITEMS}",
                key_hash=pk,
            )
        response, refused = self._send(
            "transact_write_items", pk, {_TRANSACTION_CANCELED}, TransactItems=items
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
        )

    def _send(
        self, operation: str, pk: str | None, expected: Iterable[str], **request: Any
    ) -> tuple[dict[str, Any], str | None]:
        """Call DynamoDB. An expected refusal (a failed condition) comes back as its error code
        with the error response; anything else becomes a StoreError, chained to botocore's."""
        try:
            response: dict[str, Any] = getattr(self.client, operation)(**request)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            if code in expected:
                return dict(exc.response), code
            raise StoreError(
                f"DynamoDB {operation} failed: {code}", key_hash=pk, code=code
            ) from exc
        except BotoCoreError as exc:
            raise StoreError(
                f"DynamoDB {operation} failed: {type(exc).__name__}", key_hash=pk
            ) from exc
        except (TypeError, ValueError, AttributeError, KeyError) as exc:
            # botocore could not serialize the request: without client-side validation a
            # malformed enlisted write fails here, before anything is sent.
            raise StoreError(
                f"DynamoDB {operation} request could not be built: {type(exc).__name__}",
                key_hash=pk,
                code="InvalidRequest",
            ) from exc
        return response, None

    def _record(self, item: Mapping[str, Any]) -> Record:
        names = self.names
        lease = item.get(names.lease_until)
        owner = item.get(names.owner)
        payload = item.get(names.payload_hash)
        result = item.get(names.result)
        claimed_at = item.get(names.claimed_at)
        return Record(
            pk=item[names.pk]["S"],
            status=Status(item[names.status]["S"]),
            expiration=int(item[names.expiration]["N"]),
            lease_until=None if lease is None else int(lease["N"]),
            owner=None if owner is None else owner["S"],
            payload_hash=None if payload is None else payload["S"],
            result=None if result is None else bytes(result["B"]),
            claimed_at=None if claimed_at is None else int(claimed_at["N"]),
        )


class ScanPage(NamedTuple):
    records: list[Record]
    scanned: int
    """Items read for this page, matching or not: a scan's cost follows these."""
    capacity_units: float


def stored_result_bytes(record: Record) -> int:
    """The stored (packed) size of a record's result, chunks included."""
    if record.result is None:
        return 0
    if record.result[:1] == CHUNKED:
        return int(json.loads(record.result[1:]).get("bytes", 0))
    return len(record.result)


def _chunk_pk(pk: str, owner: str, index: int) -> str:
    """Chunks are keyed by their writer's owner token, so a later run's chunks never mix in."""
    return f"{pk}#chunk#{owner}#{index}"
