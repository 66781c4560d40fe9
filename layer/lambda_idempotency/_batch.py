"""`process_batch` and `idempotent_record`: the batch front end, for SQS (standard and FIFO),
Kinesis Data Streams and DynamoDB Streams.

`idempotent_record` builds one record handler's engine once, at import, like the other
decorators; `process_batch` runs a batch through Powertools' processors (the partial
failure bookkeeping and the ordering rules) and each record through that engine. A record
that fails, is in flight elsewhere, mismatches its payload or meets a store error is
reported in `batchItemFailures`, so Lambda redelivers it; nothing is dropped. docs/batch.md
is the user's guide.
"""

from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, Literal, TypedDict, TypeVar, Unpack

from ._base import keys as _keys
from ._base.errors import NotABatchEventError
from ._base.extras import missing_extra, require
from ._base.keys import Selector
from ._decorators import build_engine
from ._protocol import execution as _execution
from ._protocol.callables import call_settled
from ._protocol.run import Idempotency

if TYPE_CHECKING:
    from ._options import Options

R = TypeVar("R")
EventType = Literal["SQS", "KinesisDataStreams", "DynamoDBStreams"]

_POWERTOOLS = "aws_lambda_powertools"
"""Powertools for AWS Lambda, whose batch processors `process_batch` runs on: the
`powertools` extra."""
_NEEDS_POWERTOOLS = "process_batch and idempotent_record (on Powertools' batch processors)"

_EVENT_SOURCES: dict[str, EventType] = {
    "aws:sqs": "SQS",
    "aws:kinesis": "KinesisDataStreams",
    "aws:dynamodb": "DynamoDBStreams",
}


# -- response shapes --------------------------------------------------------------------


class BatchItemFailure(TypedDict):
    """SQS: the messageId. Streams: the record's sequence number (Lambda resumes there)."""

    itemIdentifier: str


class BatchResponse(TypedDict):
    """What Lambda reads from a function with `ReportBatchItemFailures` on."""

    batchItemFailures: list[BatchItemFailure]


# -- keys and payloads ------------------------------------------------------------------


def record_id(record: Any) -> Any:
    """The default key: what the source names the record by, the same on every redelivery
    (SQS `messageId`, Kinesis and DynamoDB Streams `eventID`)."""
    if not isinstance(record, Mapping):
        return None
    return record.get("messageId") if "messageId" in record else record.get("eventID")


def record_content(record: Any) -> Any:
    """The default payload: what a redelivery repeats unchanged (SQS body, Kinesis data,
    the DynamoDB change), never what changes on each receive (receipt handle, receive
    count, timestamps)."""
    if not isinstance(record, Mapping):
        return record
    match _source(record):
        case "aws:sqs":
            return record.get("body")
        case "aws:kinesis":
            return _get(record, "kinesis", "data")
        case "aws:dynamodb":
            change = record.get("dynamodb")
            change = change if isinstance(change, Mapping) else {}
            return [
                record.get("eventName"),
                change.get("Keys"),
                change.get("NewImage"),
                change.get("OldImage"),
            ]
        case _:
            return record


def _source(record: Mapping[str, Any]) -> Any:
    """The record's `eventSource`; for a record without one (`process_batch` was given its
    `event_type`), the source its fields show, as `record_id` reads them."""
    if "eventSource" in record:
        return record["eventSource"]
    if "messageId" in record:
        return "aws:sqs"
    if isinstance(record.get("kinesis"), Mapping):
        return "aws:kinesis"
    if isinstance(record.get("dynamodb"), Mapping):
        return "aws:dynamodb"
    return None


def _get(record: Mapping[str, Any], *path: str) -> Any:
    value: Any = record
    for name in path:
        value = value.get(name) if isinstance(value, Mapping) else None
    return value


# -- the record handler -----------------------------------------------------------------


class RecordHandler(Generic[R]):
    """A record handler and its engine, built once per consumer (at import), so its
    settings and its warm result cache outlive the invocation."""

    def __init__(self, function: Callable[..., R], idempotency: Idempotency) -> None:
        self.function = function
        self.idempotency = idempotency
        self._takes_context = "lambda_context" in inspect.signature(function).parameters
        functools.update_wrapper(self, function)

    def __repr__(self) -> str:
        return f"RecordHandler({self.idempotency.settings.namespace!r})"

    def __call__(self, record: Any, lambda_context: Any = None) -> R:
        """Run one record under the protocol: the handler runs at most once per key; a
        completed key returns the stored result. `record` is a Powertools data class
        (what `process_batch` passes) or the raw record; the selectors see the raw one."""
        raw = getattr(record, "raw_event", record)
        if self._takes_context:
            call = functools.partial(self.function, record, lambda_context=lambda_context)
        else:
            call = functools.partial(self.function, record)
        token = _execution.lambda_context.set(lambda_context)
        try:
            return self.idempotency.run(raw, lambda_context, functools.partial(call_settled, call))
        finally:
            _execution.lambda_context.reset(token)


def idempotent_record(
    *, key: Selector | None = None, **options: Unpack[Options]
) -> Callable[[Callable[..., R]], RecordHandler[R]]:
    """Make a batch record handler `handler(record)` (or `handler(record, lambda_context)`)
    idempotent, for `process_batch`.

    key: a JMESPath expression or callable over the raw record, e.g.
        "powertools_json(body).order_id"; default: SQS `messageId`, streams `eventID`.
    payload: what must match under a reused key; default: the SQS body, the Kinesis data,
        the DynamoDB Streams change (event name, keys, images). A mismatch is reported as a
        failure, never acknowledged. The rest of `Options` as for `idempotent`.

    `process_batch` runs on Powertools' batch processors: without Powertools installed, the
    decoration raises MissingExtraError naming the `powertools` extra.
    """
    require(_POWERTOOLS, _NEEDS_POWERTOOLS)
    options.setdefault("payload", record_content)

    def decorate(function: Callable[..., R]) -> RecordHandler[R]:
        engine = build_engine(function, key=record_id if key is None else key, **options)
        return RecordHandler(function, engine)

    return decorate


_default_handlers: weakref.WeakKeyDictionary[Callable[..., Any], RecordHandler[Any]] = (
    weakref.WeakKeyDictionary()
)
"""Plain record handlers given to `process_batch`, with their default engine: built on the
first batch, reused by the next ones. Defaults only, so there are no settings to mix up."""


def _record_handler(handler: Callable[..., Any]) -> RecordHandler[Any]:
    if isinstance(handler, RecordHandler):
        return handler
    try:
        built = _default_handlers.get(handler)
    except TypeError:  # not weakly referable (a builtin, a staticmethod object): not kept
        return idempotent_record()(handler)
    if built is None:
        built = _default_handlers[handler] = idempotent_record()(handler)
    return built


# -- the batch --------------------------------------------------------------------------


def process_batch(
    event: Any,
    context: Any,
    record_handler: Callable[..., Any],
    *,
    event_type: EventType | None = None,
    skip_group_on_error: bool = False,
) -> BatchResponse:
    """Run each record of an SQS, Kinesis or DynamoDB Streams batch through
    `record_handler` under the idempotency protocol; answer the records to redeliver.

    record_handler: decorated with `idempotent_record` to choose the key and options; a
        plain function gets the defaults (key: messageId / eventID).
    event_type: detected from the records' `eventSource`; give it for records without one.
    skip_group_on_error: SQS FIFO only: after a failure, fail only the rest of its
        message group, not the rest of the batch.

    Raises `NotABatchEventError` (nothing ran) for an event that is no such batch, and
    MissingExtraError (nothing ran) without Powertools installed (the `powertools` extra).
    """
    require(_POWERTOOLS, _NEEDS_POWERTOOLS)
    records = batch_records(event)
    if not records:
        return {"batchItemFailures": []}
    detected = detect_event_type(records, event_type)
    handler = _record_handler(record_handler)

    try:
        from aws_lambda_powertools.utilities.batch import process_partial_response

        from ._batch_processors import processor_for
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, _NEEDS_POWERTOOLS) from exc

    processor = processor_for(
        detected, fifo=is_fifo(records), skip_group_on_error=skip_group_on_error
    )

    def run_record(record: Any) -> Any:
        return handler(record, context)

    response = process_partial_response(event, run_record, processor, context)
    return {
        "batchItemFailures": [
            {"itemIdentifier": str(failure["itemIdentifier"])}
            for failure in response["batchItemFailures"]
        ]
    }


def batch_records(event: Any) -> list[Mapping[str, Any]]:
    """The event's records; NotABatchEventError when it has none to speak of."""
    records = event.get("Records") if isinstance(event, Mapping) else None
    if not isinstance(records, list) or not all(isinstance(r, Mapping) for r in records):
        raise NotABatchEventError(
            "process_batch needs an SQS, Kinesis or DynamoDB Streams event "
            f'({{"Records": [...]}}), not {_keys.describe_event(event)}'
        )
    return records


def detect_event_type(
    records: list[Mapping[str, Any]], event_type: EventType | None = None
) -> EventType:
    """The batch's source, from the records' `eventSource`; `event_type` for records that
    carry none. Every record must be one Lambda can be told about."""
    if event_type is not None and event_type not in _EVENT_SOURCES.values():
        raise NotABatchEventError(
            f"event_type must be one of {', '.join(_EVENT_SOURCES.values())}, not {event_type!r}"
        )
    found: set[EventType] = set()
    for record in records:
        source = record.get("eventSource")
        if source is None:
            continue
        if source not in _EVENT_SOURCES:
            raise NotABatchEventError(
                f"process_batch handles SQS, Kinesis and DynamoDB Streams records, "
                f"not eventSource {source!r}"
            )
        found.add(_EVENT_SOURCES[source])
    if event_type is not None:
        found.add(event_type)
    if len(found) != 1:
        raise NotABatchEventError(
            f"records from {', '.join(sorted(found))} in one batch: Lambda sends one source"
            if found
            else "the records name no eventSource: pass event_type"
        )
    detected = found.pop()
    for record in records:
        if _identifier(record, detected) is None:
            what = "messageId" if detected == "SQS" else "sequence number"
            raise NotABatchEventError(
                f"a {detected} record without its {what}: it could not be reported if it failed"
            )
    return detected


def is_fifo(records: list[Mapping[str, Any]]) -> bool:
    """A FIFO queue's records carry its `.fifo` ARN and a MessageGroupId."""
    return any(
        str(record.get("eventSourceARN", "")).endswith(".fifo")
        or _get(record, "attributes", "MessageGroupId") is not None
        for record in records
    )


def _identifier(record: Mapping[str, Any], event_type: EventType) -> Any:
    """What Lambda needs in `itemIdentifier` to redeliver the record."""
    if event_type == "SQS":
        return record.get("messageId")
    if event_type == "KinesisDataStreams":
        return _get(record, "kinesis", "sequenceNumber")
    return _get(record, "dynamodb", "SequenceNumber")
