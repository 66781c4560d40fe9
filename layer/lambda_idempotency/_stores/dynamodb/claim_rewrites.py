"""A claim written again over our own record: a durable execution's claim taken back over
its own tombstone (`retake`), and a long run's lease moved on (`extend_lease`, the
heartbeats). Each is the IN_PROGRESS item a claim writes (`record_items`), fenced on our
owner token, and answers with the record that holds the key when refused."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..record import Record, Status
from .calls import CONDITION_FAILED
from .layout import OWNED_BY_ME, STILL_IN_PROGRESS
from .record_items import claim_item, in_progress_item, read_record

if TYPE_CHECKING:
    from .store_view import StoreView


def retake(
    store: StoreView,
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
    names = store.names
    item = claim_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        now_ms=now_ms,
        lease_until_ms=lease_until_ms,
        expiration_s=expiration_s,
    )
    response, refused = store._send(
        "put_item",
        pk,
        {CONDITION_FAILED},
        TableName=store.table_name,
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
    return False, None if held is None else read_record(store, held, "claim", pk)


def extend_lease(
    store: StoreView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    claimed_at_ms: int | None,
    lease_until_ms: int,
    expiration_s: int,
    now_ms: int | None = None,
    lease_ms: int | None = None,
) -> tuple[bool, Record | None]:
    """Move our IN_PROGRESS claim's lease to `lease_until_ms`, fenced on `owner`: a
    PutItem of the claim as it was with the new lease (no permission beyond the claim's,
    and the same item in either layout). `now_ms` and `lease_ms` are not needed: every time
    in a DynamoDB record is on its callers' clocks, as the skew allowance expects. Returns
    (True, None), or (False, the record that holds the key now) when the claim is no longer
    ours: taken over after our lease lapsed, or completed or released."""
    names = store.names
    item = in_progress_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        claimed_at_ms=claimed_at_ms,
        lease_until_ms=lease_until_ms,
        expiration_s=expiration_s,
    )
    response, refused = store._send(
        "put_item",
        pk,
        {CONDITION_FAILED},
        step="extend_lease",
        TableName=store.table_name,
        Item=item,
        ConditionExpression=f"{OWNED_BY_ME} AND {STILL_IN_PROGRESS}",
        ExpressionAttributeNames={"#owner": names.owner, "#status": names.status},
        ExpressionAttributeValues={
            ":owner": {"S": owner},
            ":in_progress": {"S": store.layout.in_progress_text},
        },
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )
    if refused is None:
        return True, None
    held = response.get("Item")
    return False, None if held is None else read_record(store, held, "extend", pk)
