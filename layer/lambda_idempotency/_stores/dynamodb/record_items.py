"""A record as the DynamoDB items the store writes, and an item read back as a record.

Built with the store's attribute names, key shape (the record's key alone, or under a
static partition value) and layout: the IN_PROGRESS item a claim, a retake and a lease
extension write, and the completed item but its result (`result_placement` places that).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..record import FORMAT_ATTRIBUTE, Record, Status

if TYPE_CHECKING:
    from .store_view import StoreView


def item_key(store: StoreView, pk: str) -> dict[str, Any]:
    """The item's primary key: `pk` alone, or under the static partition value."""
    if store.sort_key_attr is None:
        return {store.names.pk: {"S": pk}}
    return {store.names.pk: {"S": store.static_pk_value}, store.sort_key_attr: {"S": pk}}


def pk_of(store: StoreView, item: Mapping[str, Any]) -> str:
    """The record's key in an item key (`item_key`'s inverse)."""
    return str(item[store.sort_key_attr or store.names.pk]["S"])


def read_record(
    store: StoreView, item: Mapping[str, Any], step: str, pk: str | None = None
) -> Record:
    """The record in a stored item, as the layout reads it (or a StoreError)."""
    names = store.names
    return store.layout.record(item, names, store.sort_key_attr or names.pk, step, pk)


def in_progress_item(
    store: StoreView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    claimed_at_ms: int | None,
    lease_until_ms: int,
    expiration_s: int,
) -> dict[str, Any]:
    """An IN_PROGRESS record: a claim's (claimed now), a retake's, or a claim with its lease
    moved (claimed when it was, if that was recorded)."""
    names = store.names
    item: dict[str, Any] = {
        **item_key(store, pk),
        names.status: {"S": store.layout.in_progress_text},
        names.expiration: {"N": str(expiration_s)},
        names.lease_until: {"N": str(lease_until_ms)},
        names.owner: {"S": owner},
    }
    if claimed_at_ms is not None:
        item[names.claimed_at] = {"N": str(claimed_at_ms)}
    item[names.format_version] = FORMAT_ATTRIBUTE
    if payload_hash is not None:
        item[names.payload_hash] = {"S": payload_hash}
    return item


def claim_item(
    store: StoreView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    now_ms: int,
    lease_until_ms: int,
    expiration_s: int,
) -> dict[str, Any]:
    """An IN_PROGRESS record, as a claim (or a retake) writes it, claimed `now_ms`."""
    return in_progress_item(
        store,
        pk,
        owner=owner,
        payload_hash=payload_hash,
        claimed_at_ms=now_ms,
        lease_until_ms=lease_until_ms,
        expiration_s=expiration_s,
    )


def completed_item(
    store: StoreView,
    pk: str,
    *,
    owner: str,
    payload_hash: str | None,
    expiration_s: int,
    claimed_at_ms: int | None = None,
    completed_at_ms: int | None = None,
) -> dict[str, Any]:
    """The completed record's attributes but its result."""
    names = store.names
    item: dict[str, Any] = {
        **item_key(store, pk),
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
