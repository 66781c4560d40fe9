"""The fast wire path's plan per operation: what each of the store's requests needs, read
from the client's own model once (its target, content type, auth options, idempotency token
member, tables), and a JSON encoder compiled from the model that does what botocore's
serializer does. An operation whose model needs more than the path knows (checksums,
compression, streaming, a host prefix) has no plan: the client makes that call.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from typing import Any

OPERATIONS = {
    "put_item": "PutItem",
    "get_item": "GetItem",
    "transact_write_items": "TransactWriteItems",
    "batch_get_item": "BatchGetItem",
    "batch_write_item": "BatchWriteItem",
}
"""The requests the protocol makes; the operators' scan and delete go through the client."""

Encoder = Callable[[Any], Any]


class CannotHonourError(Exception):
    """Something this path cannot honour: the client does the call."""


USER_DATA = frozenset({"TransactWriteItems"})
"""The operations whose requests carry data the store did not build (enlisted writes): checked
as the client checks parameters. The others are built by the store's own code."""


def validate_user_data(params: Mapping[str, Any], model: Any, **_: Any) -> None:
    """botocore's parameter check, on the operations that carry data the store did not build.

    Our own client skips botocore's check on every request (the store builds them; about 35
    µs each) but carries this on `before-parameter-build` for those operations, so an enlisted
    write such as `{"SS": "vip"}` is refused (ParamValidationError) rather than sent as the
    set of its letters; the fast path does the same, and so, for a client that checks every
    request, it checks these."""
    if model.name in USER_DATA:
        from botocore.validate import validate_parameters

        validate_parameters(params, model.input_shape)


class Plan:
    """What one operation needs, read from the client's model once."""

    def __init__(self, operation_model: Any, client: Any, method: str) -> None:
        if (
            operation_model.http_checksum
            or operation_model.http_checksum_required
            or getattr(operation_model, "request_compression", None)
            or operation_model.endpoint
            or operation_model.has_streaming_input
            or operation_model.has_streaming_output
        ):
            raise CannotHonourError(operation_model.name)
        metadata = operation_model.metadata
        self.operation_model = operation_model
        self.method = method
        self.name = operation_model.name
        self.http_method = operation_model.http.get("method", "POST")
        self.headers = {
            "X-Amz-Target": f"{metadata['targetPrefix']}.{operation_model.name}",
            "Content-Type": f"application/x-amz-json-{metadata['jsonVersion']}",
        }
        self.auth_type = getattr(operation_model, "resolved_auth_type", None)
        self.unsigned_payload = getattr(operation_model, "unsigned_payload", None)
        self.auth_options = operation_model.service_model.metadata.get("auth")
        shape = operation_model.input_shape
        self.encode: Encoder = compile_encoder(shape, {}) or dict
        self.token_member = next(iter(operation_model.idempotent_members), None)
        self.tables = table_reader(operation_model.name)
        service_id = operation_model.service_model.service_id.hyphenize()
        self.created_event = f"request-created.{service_id}.{self.name}"
        self.send_event = f"before-send.{service_id}.{self.name}"
        self.context: dict[str, Any] = {
            "client_region": client.meta.region_name,
            "client_config": client.meta.config,
            "has_streaming_input": False,
            "auth_type": self.auth_type,
            "unsigned_payload": self.unsigned_payload,
            "auth_options": self.auth_options,
        }


def table_reader(operation: str) -> Callable[[Mapping[str, Any]], tuple[str, ...]]:
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return lambda params: tuple(params.get("RequestItems", ()))
    if operation == "TransactWriteItems":
        return lambda params: tuple(
            str(action.get("TableName"))
            for item in params.get("TransactItems", ())
            for action in item.values()
        )
    return lambda params: (str(params.get("TableName")),)


def compile_encoder(shape: Any, memo: dict[str, list[Encoder | None]]) -> Encoder | None:
    """An encoder for `shape` that does what botocore's JSON serializer does: unknown members
    raise KeyError, blobs become base64; None where the value goes out as it came in."""
    if shape is None:
        return None
    kind = shape.type_name
    if kind in ("string", "integer", "long", "boolean"):
        return None
    if kind == "blob":
        return base64_text
    if kind == "list":
        member = compile_encoder(shape.member, memo)
        if member is None:
            return list
        return lambda value: [member(item) for item in value]
    if kind == "map":
        inner = compile_encoder(shape.value, memo)
        if inner is None:
            return dict
        return lambda value: {key: inner(item) for key, item in value.items()}
    if kind != "structure" or shape.is_document_type:
        raise CannotHonourError(f"{kind} members")
    cell = memo.get(shape.name)
    if cell is not None:  # a recursive shape (AttributeValue's M and L): encoded once built
        built = cell
        return lambda value: built[0](value)  # type: ignore[misc]  # noqa: PLW0108
    cell = memo[shape.name] = [None]
    members: dict[str, tuple[str, Encoder | None]] = {}
    for name, member_shape in shape.members.items():
        members[name] = (member_shape.serialization.get("name", name), None)
    for name, member_shape in shape.members.items():
        members[name] = (members[name][0], compile_encoder(member_shape, memo))

    # Members sent as they come (strings, numbers, flags): a value holding only those is
    # checked for unknown members and sent as it is, no copy (most AttributeValues).
    plain = frozenset(
        name
        for name, (wire_name, encode) in members.items()
        if encode is None and wire_name == name
    )

    def structure(value: Any) -> dict[str, Any]:
        if value.keys() <= plain:
            return value  # type: ignore[no-any-return]
        out = {}
        for key, item in value.items():
            wire_name, encode = members[key]
            out[wire_name] = item if encode is None else encode(item)
        return out

    cell[0] = structure
    return structure


def base64_text(value: Any) -> str:
    if isinstance(value, str):
        value = value.encode("utf-8")
    return base64.b64encode(value).strip().decode("utf-8")
