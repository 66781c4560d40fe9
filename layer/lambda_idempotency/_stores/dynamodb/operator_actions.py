"""What the operator commands do on the table (`lambda-idempotency stuck / release`): find
stuck records with a scan, and release one record by its exact version. Loaded when an
operator command first uses them, never on a handler's import path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..._base.errors import StoreError
from ..record import Record, ScanPage, Status
from .calls import CONDITION_FAILED
from .layout import TOMBSTONE_SECONDS
from .record_items import item_key, read_record

if TYPE_CHECKING:
    from .store_view import StoreView


def release_version(store: StoreView, shown: Record, *, now_ms: int) -> tuple[bool, Record | None]:
    """Replace the record `shown`, if it is still exactly that version, with a RELEASED
    tombstone so its key runs again. (True, None) when released; else (False, what holds the
    key now, None if nothing): nothing was written.

    The condition (`version_condition`) closes the race of a record completed between
    the operator's read and this write: the completed record stays, and retries replay
    it. The tombstone keeps the record's owner token and is stamped `now_ms`, as the
    protocol's own release is: a delayed copy of a claim sent before the release cannot
    lock the key again, and a holder that was still running (a release forced over a
    live lease) may still complete over it, so its effect is recorded, not run again.
    A completed record's chunk items are left to their own TTL: they are keyed by its
    owner token, and nothing else ever reads them."""
    operation, target = store.layout.forced_release_write(
        item_key(store, shown.pk), store.names, shown, now_ms=now_ms
    )
    response, refused = store._send(
        operation,
        shown.pk,
        {CONDITION_FAILED},
        step="release",
        TableName=store.table_name,
        **target,
        **version_condition(store, shown),
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    if refused is None:
        return True, None
    held = response.get("Item")
    current = None if held is None else read_record(store, held, "release", shown.pk)
    if current is not None and current == Record(
        shown.pk, Status.RELEASED, now_ms // 1000 + TOMBSTONE_SECONDS, now_ms, shown.owner
    ):
        return True, None  # our own tombstone: botocore resent a write that had landed
    return False, current


def version_condition(store: StoreView, shown: Record) -> dict[str, Any]:
    """A condition that holds only for the record `shown`: same status, owner token, lease,
    expiration and times. Each claim has a token of its own and every completion sets a
    fresh expiration, so any write by anyone since the read fails it."""
    names = store.names
    fields = (
        ("status", names.status, {"S": store.layout.stored_status(shown.status)}),
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
    store: StoreView, *, claimed_before_ms: int, now_ms: int, page_size: int | None = None
) -> Iterator[ScanPage]:
    """Live IN_PROGRESS records claimed before a time, page by page (a scan reads the whole
    table, and each page says what it cost); one this library cannot read is listed by key
    in `unreadable`, not a reason to stop."""
    names = store.names
    request: dict[str, Any] = {
        "TableName": store.table_name,
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
            ":in_progress": {"S": store.layout.in_progress_text},
            ":now_s": {"N": str(now_ms // 1000)},
            ":before": {"N": str(claimed_before_ms)},
        },
        "ReturnConsumedCapacity": "TOTAL",
    }
    if page_size is not None:
        request["Limit"] = page_size
    while True:
        response, _ = store._send("scan", None, set(), step="scan", **request)
        capacity = response.get("ConsumedCapacity", {}).get("CapacityUnits", 0.0)
        records, unreadable = [], []
        for item in response.get("Items", []):
            try:
                records.append(read_record(store, item, "scan"))
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


def _number(value: int | None) -> dict[str, str] | None:
    return None if value is None else {"N": str(value)}
