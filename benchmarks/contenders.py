"""The two libraries under test, each wrapped around the same handler the way its docs say.

Each `wrap` call builds a fresh decorator with its own store: Powertools keeps the first
configuration of a shared persistence layer, so sharing one would skew its scenarios.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .workload import (
    KEY_SELECTION,
    PAYLOAD_SELECTION,
    Handler,
    dynamodb_client,
    our_default_client,
)

InProgressPolicy = Literal["raise", "wait"]


@dataclass(frozen=True)
class Contender:
    name: str
    """As shown in the report."""
    slug: str
    """Short name for table names and chart labels."""
    key_attribute: str
    """The table's hash key: each library's default."""
    wrap: Callable[..., Handler]
    """wrap(client, table, handler, *, cache, on_in_progress) -> the decorated handler."""
    in_progress_error: Callable[[], type[BaseException]]
    """The exception a duplicate gets while the key is in flight."""
    decorate: Callable[..., Handler]
    """decorate(store, handler, *, cache, on_in_progress) -> the handler decorated over a store
    already built (Powertools: a persistence layer), as several handlers of one function share
    the store its module builds."""
    default_client: Callable[[str], Any] = dynamodb_client
    """default_client(endpoint_url) -> the client the library makes when given none."""


def _wrap_ours(
    client: Any,
    table: str,
    handler: Handler,
    *,
    cache: bool,
    on_in_progress: InProgressPolicy = "raise",
) -> Handler:
    from lambda_idempotency import DynamoDBStore

    store = DynamoDBStore(table, client=client)
    return _decorate_ours(store, handler, cache=cache, on_in_progress=on_in_progress)


def _decorate_ours(
    store: Any, handler: Handler, *, cache: bool, on_in_progress: InProgressPolicy = "raise"
) -> Handler:
    from lambda_idempotency import idempotent

    return idempotent(
        key=KEY_SELECTION,
        payload=PAYLOAD_SELECTION,
        store=store,
        cache_size=256 if cache else 0,
        on_in_progress=on_in_progress,
    )(handler)


def _ours_in_progress() -> type[BaseException]:
    from lambda_idempotency import InProgressError

    return InProgressError


def _wrap_powertools(
    client: Any,
    table: str,
    handler: Handler,
    *,
    cache: bool,
    on_in_progress: InProgressPolicy = "raise",
) -> Handler:
    from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer

    layer = DynamoDBPersistenceLayer(table_name=table, boto3_client=client)
    return _decorate_powertools(layer, handler, cache=cache, on_in_progress=on_in_progress)


def _decorate_powertools(
    layer: Any, handler: Handler, *, cache: bool, on_in_progress: InProgressPolicy = "raise"
) -> Handler:
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig, idempotent

    if on_in_progress != "raise":
        raise ValueError("Powertools idempotency has no way to wait for an in-flight duplicate")
    config = IdempotencyConfig(
        event_key_jmespath=KEY_SELECTION,
        payload_validation_jmespath=PAYLOAD_SELECTION,
        use_local_cache=cache,
    )
    decorated: Handler = idempotent(config=config, persistence_store=layer)(handler)
    return decorated


def _powertools_in_progress() -> type[BaseException]:
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyAlreadyInProgressError,
    )

    return IdempotencyAlreadyInProgressError


OURS = Contender(
    name="lambda-idempotency",
    slug="ours",
    key_attribute="pk",
    wrap=_wrap_ours,
    in_progress_error=_ours_in_progress,
    decorate=_decorate_ours,
    default_client=our_default_client,
)
POWERTOOLS = Contender(
    name="Powertools",
    slug="powertools",
    key_attribute="id",
    wrap=_wrap_powertools,
    in_progress_error=_powertools_in_progress,
    decorate=_decorate_powertools,
)
CONTENDERS = (OURS, POWERTOOLS)
