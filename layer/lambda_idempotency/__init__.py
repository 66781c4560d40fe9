"""lambda-idempotency: run a Lambda handler's side effect once, replay its result to retries.

    from lambda_idempotency import DynamoDBStore, idempotent

    @idempotent(store=DynamoDBStore(), key="order_id")
    def handler(event, context): ...

The code lives in private modules, one idea each; this module is the public surface.
"""

from ._batch import BatchResponse, idempotent_record, process_batch
from ._clock import Clock, SystemClock
from ._decorators import Options, idempotent, idempotent_function
from ._errors import (
    CompletionConflictError,
    ConfigurationError,
    IdempotencyError,
    InProgressError,
    KeyMissingError,
    LeaseLostError,
    MisuseError,
    NoActiveExecutionError,
    NotABatchEventError,
    NotAnHttpEventError,
    PayloadMismatchError,
    ResultNotSerializableError,
    ResultTooLargeError,
    ScopeMissingError,
    StoreError,
)
from ._execution import Execution, current_execution
from ._http import HttpResponse, idempotent_http
from ._record import AttributeNames, Record, Status
from ._store import DynamoDBStore

__all__ = [
    "AttributeNames",
    "BatchResponse",
    "Clock",
    "CompletionConflictError",
    "ConfigurationError",
    "DynamoDBStore",
    "Execution",
    "HttpResponse",
    "IdempotencyError",
    "InProgressError",
    "KeyMissingError",
    "LeaseLostError",
    "MisuseError",
    "NoActiveExecutionError",
    "NotABatchEventError",
    "NotAnHttpEventError",
    "Options",
    "PayloadMismatchError",
    "Record",
    "ResultNotSerializableError",
    "ResultTooLargeError",
    "ScopeMissingError",
    "Status",
    "StoreError",
    "SystemClock",
    "current_execution",
    "idempotent",
    "idempotent_function",
    "idempotent_http",
    "idempotent_record",
    "process_batch",
]
