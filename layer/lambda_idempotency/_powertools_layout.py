"""`DynamoDBStore(layout="powertools")`: the records of Powertools for AWS Lambda's
idempotency utility, read and written on its own table, so a function can move from
Powertools to us (and back) without running anything twice.

Powertools' item, and what we add (attributes Powertools never reads):

    id / sort key   "{function name}.{module}.{qualname}#{md5}" or "{key_prefix}#{md5}"
    status          "INPROGRESS" | "COMPLETED"
    expiration      epoch seconds (TTL)
    in_progress_expiration   epoch ms: our lease end (Powertools: the remaining time)
    data            the result as JSON text (what Powertools' json.loads replays)
    validation      the payload's hash
    owner           ours: the fencing token of the claim that wrote the record
    claimed_at, completed_at   ours: epoch ms, for operators and `on_replay`
    result          ours: our packed result, only when `data` cannot carry it exactly
                    (typed values, chunked or oversized results, "not storable" markers)

The claim is Powertools' condition with our clock-skew allowance and our own-token guard;
completion (a PutItem) and release (a DeleteItem, no tombstone: Powertools would not read
one) are fenced on `owner`. See docs/migrating.md for what differs and why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Unpack

from . import _encoding
from ._errors import ConfigurationError, PayloadInvalidError
from ._limits import ITEM_BYTES
from ._record import AttributeNames, Record, Status
from ._store import (
    _CONDITION_FAILED,
    INLINE_RESULT_BYTES,
    KEY_ABSENT,
    LEASE_LAPSED,
    NOT_MINE,
    OWNED_BY_ME,
    RECORD_EXPIRED,
    STILL_IN_PROGRESS,
    DynamoDBStore,
    _optional,
    _text,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from ._options import PowertoolsOptions

IN_PROGRESS = "INPROGRESS"
COMPLETED = "COMPLETED"
_STATUSES = {IN_PROGRESS: Status.IN_PROGRESS, COMPLETED: Status.COMPLETED}
CLAIMABLE = f"{KEY_ABSENT} OR ({NOT_MINE} AND ({RECORD_EXPIRED} OR {LEASE_LAPSED}))"
"""Powertools' claim condition (no record, an expired one, or an INPROGRESS one whose
`in_progress_expiration` has passed; a record without one holds until `expiration`), with
our skew allowance and our guard against a delayed copy of our own claim."""


@functools.cache
def _encoders() -> tuple[type[json.JSONEncoder], type[json.JSONEncoder]]:
    """Powertools' own encoders, for its key hash and for `data`: the installed version's
    rules (Decimal as str, dataclasses and pydantic models as dicts, ...), not a copy."""
    from aws_lambda_powertools.shared.json_encoder import Encoder
    from aws_lambda_powertools.utilities.idempotency.persistence import base

    key_encoder: type[json.JSONEncoder] = getattr(base, "_IdempotencyKeyEncoder", Encoder)

    class KeyEncoder(key_encoder):  # type: ignore[misc,valid-type]
        """Powertools' key encoder, and what it refuses that is a Mapping (an event source
        data class nested in a selection: an `idempotent_function` argument) as the dict
        it is. Only values Powertools cannot hash at all reach the fallback, so every hash
        Powertools computes stays byte for byte its own."""

        def default(self, o: Any) -> Any:
            try:
                return super().default(o)
            except TypeError:
                if isinstance(o, Mapping):
                    return dict(o)
                raise

    return KeyEncoder, Encoder


class PowertoolsKeys:
    """Keys and payload hashes as Powertools computes them: `hash_function` hex of
    `json.dumps(selection, cls=its encoder, sort_keys=True)`.

    Powertools has no scope (tenant): a decorator with `scope=` is refused, so no key we
    write could differ from the one Powertools computes for the same event."""

    supports_scope = False

    def __init__(self, key_prefix: str | None, hash_function: str) -> None:
        hasher = getattr(hashlib, hash_function, None)
        if not callable(hasher) or hash_function.startswith("_"):
            raise ConfigurationError(f"hash_function {hash_function!r} is not in hashlib")
        self.key_prefix = key_prefix
        self._hasher: Callable[[bytes], Any] = hasher
        self._key_encoder = _encoders()[0]

    def namespace(self, function: Callable[..., Any], given: str | None) -> str:
        """A decorator's `namespace=` is Powertools' `key_prefix=`; else the store's
        `key_prefix`; else Powertools' default."""
        if given:
            return given
        if self.key_prefix:
            return self.key_prefix
        name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "test-func")
        return f"{name}.{function.__module__}.{function.__qualname__}"

    def record_key(self, namespace: str, scope: Any, key: Any) -> str:
        return f"{namespace}#{self._digest(key, 'key')}"

    def payload_hash(self, payload: Any) -> str:
        return self._digest(payload, "payload")

    def digest_text(self, text: str) -> str:
        """The hash of a JSON text already written as Powertools writes it."""
        return str(self._hasher(text.encode()).hexdigest())

    def _digest(self, value: Any, role: str) -> str:
        try:
            text = json.dumps(value, cls=self._key_encoder, sort_keys=True)
        except (TypeError, ValueError, RecursionError) as exc:
            # As in the native layout: the handler does not run, the same input is refused
            # again (Powertools itself would raise the encoder's own error).
            raise PayloadInvalidError(
                f"the selected {role} cannot be fingerprinted: {exc}"
            ) from exc
        return str(self._hasher(text.encode()).hexdigest())


class PowertoolsStore(DynamoDBStore):
    """A DynamoDBStore on a Powertools idempotency table (`DynamoDBStore(layout=...)`)."""

    _layout_name = "powertools"
    _in_progress_text = IN_PROGRESS

    def __init__(
        self,
        table_name: str | None = None,
        *,
        client: DynamoDBClient | None = None,
        attribute_names: AttributeNames | None = None,
        endpoint_url: str | None = None,
        region_name: str | None = None,
        layout: str = "powertools",
        sort_key_attr: str | None = None,
        static_pk_value: str | None = None,
        **options: Unpack[PowertoolsOptions],
    ) -> None:
        ours = attribute_names if attribute_names is not None else AttributeNames()
        names = ours._replace(
            pk=options.get("key_attr", "id"),
            status=options.get("status_attr", "status"),
            expiration=options.get("expiry_attr", "expiration"),
            lease_until=options.get("in_progress_expiry_attr", "in_progress_expiration"),
            payload_hash=options.get("validation_key_attr", "validation"),
        )
        self.data_attr = options.get("data_attr", "data")
        taken = [name for name in names if name == self.data_attr or names.count(name) > 1]
        if taken:
            raise ConfigurationError(f"attribute names used twice: {sorted(set(taken))}")
        super().__init__(
            table_name,
            client=client,
            attribute_names=names,
            endpoint_url=endpoint_url,
            region_name=region_name,
            layout=layout,
            sort_key_attr=sort_key_attr,
            static_pk_value=static_pk_value,
        )
        self.layout = PowertoolsKeys(options.get("key_prefix"), options.get("hash_function", "md5"))

    def __repr__(self) -> str:
        return f"DynamoDBStore(table_name={self._peek_table_name()!r}, layout='powertools')"

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
            ConditionExpression=CLAIMABLE,
            ExpressionAttributeNames={
                "#pk": names.pk,
                "#status": names.status,
                "#expiration": names.expiration,
                "#lease_until": names.lease_until,
                "#owner": names.owner,
            },
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":expired_before_s": {"N": str((now_ms - skew_ms) // 1000)},
                ":lapsed_before_ms": {"N": str(now_ms - skew_ms)},
                ":in_progress": {"S": IN_PROGRESS},
            },
            ReturnValues="ALL_OLD",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, self._replaced(response.get("Attributes"), pk)
        held = response.get("Item")
        return False, self.get(pk) if held is None else self._record(held, "claim", pk)

    def inline_limit(self, pk: str, *, owner: str, payload_hash: str | None) -> int:
        """Powertools reads its results from the record itself: keep them there while the
        item holds them (every attribute counted, times at their widest), whatever a replay
        costs (its own layout)."""
        overhead = self._record_overhead(pk, owner, payload_hash)
        return max(0, ITEM_BYTES - overhead - len(self.names.result.encode()))

    def release(self, pk: str, *, owner: str, now_ms: int) -> bool:
        """Delete our INPROGRESS claim, fenced on our token. No tombstone: Powertools would
        not understand one (so a delayed copy of our claim may lock the key again, until
        its lease lapses; nothing runs twice)."""
        names = self.names
        _, refused = self._send(
            "delete_item",
            pk,
            {_CONDITION_FAILED},
            TableName=self.table_name,
            Key=self._key(pk),
            ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",
            ExpressionAttributeNames={"#owner": names.owner, "#status": names.status},
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":in_progress": {"S": IN_PROGRESS},
            },
        )
        return refused is None

    def release_version(self, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
        """Delete the record `shown` if it is still exactly that version (no tombstone:
        Powertools would not read one); else (False, what holds the key now)."""
        response, refused = self._send(
            "delete_item",
            shown.pk,
            {_CONDITION_FAILED},
            TableName=self.table_name,
            Key=self._key(shown.pk),
            **self._version_condition(shown),
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        if refused is None:
            return True, None
        held = response.get("Item")
        return False, None if held is None else self._record(held, "release", shown.pk)

    def _stored_status(self, status: Status) -> str:
        return IN_PROGRESS if status is Status.IN_PROGRESS else status.value

    def extra_attribute_names(self) -> tuple[str, ...]:
        return (self.data_attr,)

    def _placements(
        self, blob: bytes, owner: str, *, inline: bool, pk: str = ""
    ) -> Iterator[tuple[dict[str, Any], bytes | None]]:
        """`data` whenever Powertools can replay the result from it, and our packed blob
        too when `data` alone would not replay it exactly (typed values) or cannot hold it.
        Best first: what keeps `data` for a rolled-back Powertools, then what keeps the
        result in the record. When `data` and our blob together pass 400 KB, the blob goes
        to chunks and `data` stays; a result whose `data` would pass 350 KB (or that
        Powertools cannot write) has none: Powertools replays None (docs/migrating.md)."""
        tag = blob[:1]
        data: str | None = None
        if tag in (_encoding.PLAIN, _encoding.COMPRESSED):
            document, _ = _encoding.unpack(blob)
            if len(document) <= INLINE_RESULT_BYTES:
                yield {self.data_attr: {"S": document.decode()}}, None
        elif tag == _encoding.TYPED:
            text = _as_powertools_data(blob)
            if text is not None and len(text.encode()) <= INLINE_RESULT_BYTES:
                data = text
        ours = self.names.result
        if data is not None:
            if inline:
                yield {ours: {"B": blob}, self.data_attr: {"S": data}}, None
            pointer = self._pointer_to(pk, owner, blob)
            yield {ours: {"B": pointer}, self.data_attr: {"S": data}}, blob
        if inline:
            yield {ours: {"B": blob}}, None
        yield {ours: {"B": self._pointer_to(pk, owner, blob)}}, blob

    _statuses = _STATUSES

    def _result_fallback_name(self) -> str:
        return self.data_attr

    def _replayed_result(
        self, item: Mapping[str, Any], status: Status, result: bytes | None
    ) -> bytes | None:
        """Our `result`, or else Powertools' `data`: a completed record with neither (or an
        empty `data`) replays None, as Powertools replays it."""
        data = _optional(item.get(self.data_attr), _text)
        if result is None and status is Status.COMPLETED:
            return _encoding.PLAIN + (data.encode() if data else b"null")
        return result


def _as_powertools_data(typed_blob: bytes) -> str | None:
    """A typed result as Powertools would have stored it (Decimal as str, ...), or None
    when its encoder cannot write it (bytes, ...)."""
    document, typed = _encoding.unpack(typed_blob)
    try:
        value = _encoding.loads(document, typed)
        return json.dumps(value, cls=_encoders()[1], sort_keys=True)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
