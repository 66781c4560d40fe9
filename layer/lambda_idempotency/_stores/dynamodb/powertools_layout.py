"""The layout a `DynamoDBStore(layout="powertools")` holds: the records (and keys) of
Powertools for AWS Lambda's idempotency utility, read and written on its own table, so a
function can move from Powertools to us (and back) without running anything twice.

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
    fmt             ours: the record format (`_stores.record.FORMAT_VERSION`); none on a record
                    Powertools wrote, which reads as format 1

The claim is Powertools' condition with our clock-skew allowance and our own-token guard;
completion (a PutItem) and release (a DeleteItem, no tombstone: Powertools would not read
one) are fenced on `owner`. See docs/migrating.md for what differs and why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, TypedDict

from ..._base.errors import ConfigurationError, PayloadInvalidError
from .. import encoding as _encoding
from ..record import AttributeNames, Record, Status
from .layout import (
    INLINE_RESULT_BYTES,
    KEY_ABSENT,
    LEASE_LAPSED,
    NOT_MINE,
    RECORD_EXPIRED,
    Layout,
    Placements,
)
from .layout import optional as _optional
from .layout import text as _text
from .limits import ITEM_BYTES


class PowertoolsOptions(TypedDict, total=False):
    """`layout="powertools"` only: DynamoDBPersistenceLayer's attribute names, and the key
    prefix and hash function of IdempotencyConfig and its decorators (same names, same
    defaults)."""

    key_attr: str
    key_prefix: str | None
    hash_function: str
    expiry_attr: str
    in_progress_expiry_attr: str
    status_attr: str
    data_attr: str
    validation_key_attr: str


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
    rules (Decimal as str, dataclasses and pydantic models as dicts, ...), not a copy. Without
    Powertools installed (the `powertools` extra), a MissingExtraError naming the extra: the
    layout asks for them when it is built, with its store."""
    try:
        from aws_lambda_powertools.shared.json_encoder import Encoder
        from aws_lambda_powertools.utilities.idempotency.persistence import base
    except ModuleNotFoundError as exc:
        from ..._base.extras import missing_extra

        raise missing_extra(exc, 'DynamoDBStore(layout="powertools")') from exc

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


class PowertoolsLayout(Layout):
    """Powertools' records, and its keys and payload hashes: `hash_function` hex of
    `json.dumps(selection, cls=its encoder, sort_keys=True)`.

    Powertools has no scope (tenant): a decorator with `scope=` is refused, so no key we
    write could differ from the one Powertools computes for the same event."""

    name = "powertools"
    supports_scope = False
    in_progress_text = IN_PROGRESS
    statuses = _STATUSES
    claim_condition = CLAIMABLE
    record_budget = ITEM_BYTES
    """Powertools reads its results from the record itself: keep them there while the item
    holds them (every attribute counted, times at their widest), whatever a replay costs."""

    def __init__(self, options: PowertoolsOptions) -> None:
        hash_function = options.get("hash_function", "md5")
        hasher = getattr(hashlib, hash_function, None)
        if not callable(hasher) or hash_function.startswith("_"):
            raise ConfigurationError(f"hash_function {hash_function!r} is not in hashlib")
        self.key_prefix = options.get("key_prefix")
        self.data_attr = options.get("data_attr", "data")
        self._hasher: Callable[[bytes], Any] = hasher
        self._key_encoder = _encoders()[0]

    @staticmethod
    def attribute_names(given: AttributeNames | None, options: PowertoolsOptions) -> AttributeNames:
        """Ours, with Powertools' names (its option names, its defaults) where it has one."""
        ours = given if given is not None else AttributeNames()
        names = ours._replace(
            pk=options.get("key_attr", "id"),
            status=options.get("status_attr", "status"),
            expiration=options.get("expiry_attr", "expiration"),
            lease_until=options.get("in_progress_expiry_attr", "in_progress_expiration"),
            payload_hash=options.get("validation_key_attr", "validation"),
        )
        data_attr = options.get("data_attr", "data")
        taken = [name for name in names if name == data_attr or names.count(name) > 1]
        if taken:
            raise ConfigurationError(f"attribute names used twice: {sorted(set(taken))}")
        return names

    # -- keys -------------------------------------------------------------------------------

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

    # -- records ----------------------------------------------------------------------------

    def claim_values(self, owner: str, now_ms: int, skew_ms: int) -> dict[str, Any]:
        return {
            ":owner": {"S": owner},
            ":expired_before_s": {"N": str((now_ms - skew_ms) // 1000)},
            ":lapsed_before_ms": {"N": str(now_ms - skew_ms)},
            ":in_progress": {"S": IN_PROGRESS},
        }

    def release_write(
        self, key: dict[str, Any], names: AttributeNames, *, owner: str, now_ms: int
    ) -> tuple[str, dict[str, Any]]:
        """Delete our INPROGRESS claim. No tombstone: Powertools would not understand one
        (so a delayed copy of our claim may lock the key again, until its lease lapses;
        nothing runs twice)."""
        return "delete_item", {"Key": key}

    def forced_release_write(
        self, key: dict[str, Any], names: AttributeNames, shown: Record, *, now_ms: int
    ) -> tuple[str, dict[str, Any]]:
        """Delete the record `shown` (no tombstone: Powertools would not read one)."""
        return "delete_item", {"Key": key}

    def stored_status(self, status: Status) -> str:
        return IN_PROGRESS if status is Status.IN_PROGRESS else status.value

    def extra_attribute_names(self) -> tuple[str, ...]:
        return (self.data_attr,)

    def placements(
        self, names: AttributeNames, blob: bytes, *, inline: bool, pointer: Callable[[], bytes]
    ) -> Placements:
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
        ours = names.result
        if data is not None:
            if inline:
                yield {ours: {"B": blob}, self.data_attr: {"S": data}}, None
            yield {ours: {"B": pointer()}, self.data_attr: {"S": data}}, blob
        if inline:
            yield {ours: {"B": blob}}, None
        yield {ours: {"B": pointer()}}, blob

    def result_fallback_name(self, names: AttributeNames) -> str:
        return self.data_attr

    def replayed_result(
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
