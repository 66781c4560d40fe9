"""The direct path's bodies: a request as botocore's JSON serializer writes it, an answer as
botocore's JSON parser reads it, for the five operations and DynamoDB's errors.

Only blobs need more than JSON: sent as base64 text, read back as bytes, wherever an
attribute value (`{"B": ...}`, `{"BS": [...]}`) sits in an answer.
"""

from __future__ import annotations

import base64
import http.client
import json
from collections.abc import Callable
from typing import Any

from .model import ERROR_MEMBERS, OUTPUT_MEMBERS


def request_body(params: dict[str, Any]) -> bytes:
    """The JSON body botocore's serializer writes for the store's parameters (blobs as
    base64, members in the caller's order, botocore's separators)."""
    return json.dumps(params, default=_base64).encode("utf-8")


def _base64(value: Any) -> str:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).strip().decode("utf-8")
    raise TypeError(f"{type(value).__name__} is not a DynamoDB type")


def parsed_answer(operation: str, status: int, headers: Any, body: bytes) -> dict[str, Any]:
    """What botocore's parser gives for this answer: the operation's members, or for an
    error its `Error` and the error's modeled members; `ResponseMetadata` on both."""
    lowered = {str(name).lower(): value for name, value in headers.items()}
    if status >= 301:
        parsed = _error(status, lowered, body)
    else:
        document = _json(body)
        if type(document) is not dict:
            _as_botocore_fails(document)
        parsed = _members(document, OUTPUT_MEMBERS[operation], operation)
        _request_id(parsed, lowered)
    metadata = parsed.setdefault("ResponseMetadata", {})
    metadata["HTTPStatusCode"] = status
    metadata["HTTPHeaders"] = lowered
    return parsed


def _error(status: int, headers: dict[str, Any], body: bytes) -> dict[str, Any]:
    stripped = body.strip() if body is not None else b""
    if status >= 500 and (not stripped or stripped.startswith(b"<html>")):
        return {  # a proxy's or a load balancer's page: botocore reads no code from it
            "Error": {"Code": str(status), "Message": http.client.responses.get(status, "")},
            "ResponseMetadata": {},
        }
    document = _json(body)
    if type(document) is not dict:
        _as_botocore_fails(document)
    message = document.get("message", document.get("Message", ""))
    code = document.get("__type", str(status))
    if code is None:
        code = ""
    if ":" in code:
        code = code.split(":", 1)[0]
    if "#" in code:
        code = code.rsplit("#", 1)[1]
    error = {"Message": message, "Code": code}
    query_error = headers.get("x-amzn-query-error")
    if query_error is not None:  # a former query service's code, as botocore reads it
        parts = query_error.split(";")
        if len(parts) == 2 and parts[0]:
            error.update(QueryErrorCode=code, Type=parts[1], Code=parts[0])
            code = parts[0]
    parsed: dict[str, Any] = {"Error": error, "ResponseMetadata": {}}
    _request_id(parsed, headers)
    members = ERROR_MEMBERS.get(code)
    if members is not None:
        parsed.update(_members(document, members, code))
    return parsed


def _as_botocore_fails(document: Any) -> None:
    """An answer whose JSON is no object (`[]`, a string, `null` for an error): botocore's
    parser fails on it with this error, which nothing retries, and so does the direct path."""
    raise AttributeError(f"{type(document).__name__!r} object has no attribute 'get'")


def _json(body: bytes) -> Any:
    if not body:
        return {}
    text = body.decode("utf-8")
    try:
        return json.loads(text)
    except ValueError:
        return {"message": text}


def _request_id(parsed: dict[str, Any], headers: dict[str, Any]) -> None:
    if "x-amzn-requestid" in headers:
        parsed.setdefault("ResponseMetadata", {})["RequestId"] = headers["x-amzn-requestid"]


def _members(document: Any, names: tuple[str, ...], shape: str) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    if type(document) is not dict:
        return parsed
    for name in names:
        value = document.get(name)
        if value is not None:
            read = _READERS.get(name) if shape != "PutItem" else _PUT_ITEM_READERS.get(name)
            parsed[name] = value if read is None else read(value)
    return parsed


ATTRIBUTE_TYPES = ("S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL")
"""AttributeValue's members, in its model's order."""


def _value(value: Any) -> Any:
    """One attribute value, its blobs as bytes, read as botocore reads the structure: its
    members that are set, anything else (`__type`, an unknown type) left out."""
    if value is None:
        return None
    parsed: dict[str, Any] = {}
    for kind in ATTRIBUTE_TYPES:
        member = value.get(kind)  # AttributeError on a non-object, as botocore's
        if member is None:
            continue
        if kind == "B":
            member = base64.b64decode(member)
        elif kind == "BS":
            member = [base64.b64decode(blob) for blob in member]
        elif kind == "M":
            member = _item(member)
        elif kind == "L":
            member = [_value(element) for element in member]
        parsed[kind] = member
    return parsed


def _item(item: dict[str, Any]) -> dict[str, Any]:
    return {name: _value(value) for name, value in item.items()}


def _items_by_table(tables: dict[str, Any]) -> dict[str, Any]:
    return {table: [_item(item) for item in items] for table, items in tables.items()}


def _unprocessed_keys(tables: dict[str, Any]) -> dict[str, Any]:
    return {
        table: {**keys, "Keys": [_item(key) for key in keys["Keys"]]} if "Keys" in keys else keys
        for table, keys in tables.items()
    }


def _write_request(request: dict[str, Any]) -> dict[str, Any]:
    request = dict(request)
    if "PutRequest" in request:
        request["PutRequest"] = {
            **request["PutRequest"],
            "Item": _item(request["PutRequest"]["Item"]),
        }
    if "DeleteRequest" in request:
        request["DeleteRequest"] = {
            **request["DeleteRequest"],
            "Key": _item(request["DeleteRequest"]["Key"]),
        }
    return request


def _unprocessed_items(tables: dict[str, Any]) -> dict[str, Any]:
    return {
        table: [_write_request(request) for request in requests]
        for table, requests in tables.items()
    }


def _collection_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    if "ItemCollectionKey" not in metrics:
        return metrics
    return {**metrics, "ItemCollectionKey": _item(metrics["ItemCollectionKey"])}


def _item_collection_metrics(value: dict[str, Any]) -> dict[str, Any]:
    """A batch's and a transaction's: lists per table (PutItem's is one)."""
    return {
        table: [_collection_metrics(metrics) for metrics in listed]
        for table, listed in value.items()
    }


def _cancellation_reasons(reasons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**reason, "Item": _item(reason["Item"])} if "Item" in reason else reason
        for reason in reasons
    ]


_READERS: dict[str, Callable[[Any], Any]] = {
    "Item": _item,
    "Attributes": _item,
    "Responses": _items_by_table,
    "UnprocessedKeys": _unprocessed_keys,
    "UnprocessedItems": _unprocessed_items,
    "ItemCollectionMetrics": _item_collection_metrics,
    "CancellationReasons": _cancellation_reasons,
}
"""The members that hold attribute values, and how to read their blobs."""
_PUT_ITEM_READERS = {**_READERS, "ItemCollectionMetrics": _collection_metrics}
