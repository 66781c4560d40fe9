"""lambda-idempotency: run a Lambda handler's side effect once, replay its result to retries.

    from lambda_idempotency import DynamoDBStore, idempotent

    @idempotent(store=DynamoDBStore(), key="order_id")
    def handler(event, context): ...

The code lives in private modules, one idea each; this module is the public surface.
"""

import typing as _typing

from ._base.clock import SystemClock
from ._base.errors import (
    CompletionConflictError,
    ConfigurationError,
    DeferredResultError,
    IdempotencyError,
    InProgressError,
    KeyMissingError,
    LeaseLostError,
    MisuseError,
    NewerFormatError,
    NoActiveExecutionError,
    NotABatchEventError,
    NotAnHttpEventError,
    PayloadInvalidError,
    PayloadMismatchError,
    ResultNotSerializableError,
    ResultTooLargeError,
    ScopeMissingError,
    StoreError,
)
from ._decorators import idempotent, idempotent_function
from ._protocol.execution import Execution, current_execution
from ._stores.dynamodb.store import DynamoDBStore
from ._stores.record import AttributeNames, OnReplay, Record, ReplayInfo, Status
from ._version import VERSION as _VERSION

if _typing.TYPE_CHECKING:
    from ._batch import BatchResponse, idempotent_record, process_batch
    from ._http import HttpResponse, idempotent_http
    from ._options import Clock, Options
    from ._protocol.durable import durable_step_key
    from ._stores.dynamodb.powertools_layout import PowertoolsOptions
    from ._stores.valkey.store import ValkeyStore

__version__ = _VERSION
"""This package's version (semantic versioning; CHANGELOG.md says what each one changes)."""

_FRONT_ENDS = {
    "BatchResponse": "_batch",
    "idempotent_record": "_batch",
    "durable_step_key": "_protocol.durable",
    "process_batch": "_batch",
    "HttpResponse": "_http",
    "idempotent_http": "_http",
    "Options": "_options",
    "Clock": "_options",
    "PowertoolsOptions": "_stores.dynamodb.powertools_layout",
    "ValkeyStore": "_stores.valkey.store",
}
"""Imported on first use: a handler pays at cold start only for the front end it uses, and
nothing for the option types, which only a type checker or a reader needs."""


def __getattr__(name: str) -> _typing.Any:
    module = _FRONT_ENDS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FRONT_ENDS))


__all__ = [
    "AttributeNames",
    "BatchResponse",
    "Clock",
    "CompletionConflictError",
    "ConfigurationError",
    "DeferredResultError",
    "DynamoDBStore",
    "Execution",
    "HttpResponse",
    "IdempotencyError",
    "InProgressError",
    "KeyMissingError",
    "LeaseLostError",
    "MisuseError",
    "NewerFormatError",
    "NoActiveExecutionError",
    "NotABatchEventError",
    "NotAnHttpEventError",
    "OnReplay",
    "Options",
    "PayloadInvalidError",
    "PayloadMismatchError",
    "PowertoolsOptions",
    "Record",
    "ReplayInfo",
    "ResultNotSerializableError",
    "ResultTooLargeError",
    "ScopeMissingError",
    "Status",
    "StoreError",
    "SystemClock",
    "ValkeyStore",
    "current_execution",
    "durable_step_key",
    "idempotent",
    "idempotent_function",
    "idempotent_http",
    "idempotent_record",
    "process_batch",
]
