"""The exception tree. Callers act on the first group; the second group is misuse.

    IdempotencyError
    ├── KeyMissingError          the key selector found nothing (nothing ran)
    ├── PayloadMismatchError     same key, different payload (nothing ran)
    ├── PayloadInvalidError      the key or payload holds a value with no fingerprint (nothing ran)
    ├── InProgressError          another invocation holds the key; retry after `retry_after`
    ├── LeaseLostError           our lease lapsed and another claim took the key over
    ├── CompletionConflictError  an enlisted business write's condition failed; nothing landed
    ├── StoreError               DynamoDB failed or refused a request (botocore error chained),
    │   │                        or a stored record, result or chunk is in a shape this library
    │   │                        does not write (`code` says which: `UNREADABLE_CODES`)
    │   └── NewerFormatError     the record was written by a newer version (a rolling deploy):
    │                            nothing ran, nothing was written; retry after `retry_after`
    └── misuse (programmer mistakes; fix the code, do not retry)
        ├── ResultNotSerializableError   the first run returned something we cannot store:
        │                                its retries get this instead of running again
        ├── ResultTooLargeError          the same, for a result past what the store can hold
        ├── DeferredResultError          the call returned a coroutine, generator, future...
        │                                (or a result holding one): key released, nothing stored
        ├── NoActiveExecutionError       current_execution() outside a decorated call
        ├── ScopeMissingError            an explicit scope selected nothing (nothing ran)
        ├── NotAnHttpEventError          idempotent_http got an event that is no HTTP request
        ├── NotABatchEventError          process_batch got an event that is no SQS / stream batch
        └── ConfigurationError           a decorator or store was set up wrongly

Every error carries `key_hash` (the stored `pk`, never the raw key) when one is known.
"""

from __future__ import annotations

from typing import Any


class IdempotencyError(Exception):
    """Root of every error this library raises."""

    def __init__(self, message: str, *, key_hash: str | None = None) -> None:
        super().__init__(message)
        self.key_hash = key_hash


class KeyMissingError(IdempotencyError):
    """The key expression selected nothing; the handler did not run."""


class PayloadMismatchError(IdempotencyError):
    """The key was used before with a different payload; the handler did not run."""


class PayloadInvalidError(IdempotencyError, ValueError):
    """The selected key or payload cannot be fingerprinted: a value JSON has no word for
    (bytes, an arbitrary object), one that contains itself, an integer too large to convert,
    or (HTTP) a JSON body too deep to read. The handler did not run; the same input will be
    refused again."""


class InProgressError(IdempotencyError):
    """Another invocation holds the key. Retry after `retry_after` seconds."""

    def __init__(self, message: str, *, key_hash: str | None = None, retry_after: int) -> None:
        super().__init__(message, key_hash=key_hash)
        self.retry_after = retry_after


class LeaseLostError(IdempotencyError):
    """Our lease lapsed and another claim owns the key; our enlisted writes did not land."""


class CompletionConflictError(IdempotencyError):
    """A business write enlisted with `add_write` failed its condition; nothing was written.

    `reasons` holds DynamoDB's cancellation reasons, one per transaction item, the
    idempotency record first.
    """

    def __init__(
        self, message: str, *, key_hash: str | None = None, reasons: list[dict[str, Any]]
    ) -> None:
        super().__init__(message, key_hash=key_hash)
        self.reasons = reasons


class StoreError(IdempotencyError):
    """DynamoDB failed or refused a request, or what it returned cannot be read. `code` is
    botocore's error code, or one of ours (`UNREADABLE_CODES`, `ClaimRefusedRecordUnseen`).

    `retryable`: the same request may succeed later (throttling, a 5xx, a lost connection).
    `maybe_applied`: the request may have been applied although it failed on our side (a
    lost answer), so whatever it wrote may be there.
    `step`: the protocol's step whose request failed, or that was reading a stored record
    that could not be read (`claim`, `complete`, `release`, `get`, `replay`, `scan`, ...).
    """

    def __init__(
        self,
        message: str,
        *,
        key_hash: str | None = None,
        code: str | None = None,
        record: Any = None,
        retryable: bool = False,
        maybe_applied: bool = False,
        step: str | None = None,
    ) -> None:
        super().__init__(message, key_hash=key_hash)
        self.code = code
        self.record = record
        self.retryable = retryable
        self.maybe_applied = maybe_applied
        self.step = step


NEWER_RECORD_FORMAT = "NewerRecordFormat"
NEWER_FORMAT_RETRY_SECONDS = 30
"""The `retry_after` of a NewerFormatError: a gradual deployment moves traffic to the new
version within minutes, and a retry that lands on it replays (or runs) as usual."""


class NewerFormatError(StoreError):
    """The record holding the key was written by a newer version of lambda-idempotency, in a
    record format this version does not know (`format_version`, beside `known`): two versions
    serve one table during a rolling deploy. Nothing ran, nothing was written, and the key is
    not locked by this call: retry after `retry_after` seconds, when the newer version will
    answer. `retryable` is True; HTTP answers 503 with Retry-After."""

    def __init__(
        self, *, key_hash: str | None, format_version: int, known: int, step: str | None = None
    ) -> None:
        super().__init__(
            f"the record was written by a newer version of lambda-idempotency (record format "
            f"{format_version}; this version reads up to {known}): nothing ran; retry later, "
            "when the newer version serves the call",
            key_hash=key_hash,
            code=NEWER_RECORD_FORMAT,
            retryable=True,
            step=step,
        )
        self.format_version = format_version
        self.known = known
        self.retry_after = NEWER_FORMAT_RETRY_SECONDS


STORED_RECORD_UNREADABLE = "StoredRecordUnreadable"
"""A record's attributes are not what any version of this library (or Powertools) writes: a
required one missing (`expiration`), one of the wrong DynamoDB type, a number that is no
integer."""
STORED_RESULT_UNREADABLE = "StoredResultUnreadable"
"""A completed record's result cannot be turned back into what the first caller got: an
unknown format byte, JSON that does not parse, an unknown tag, a chunk pointer or chunk
that is missing or corrupt, a "not stored" marker that does not parse, no result at all."""
UNKNOWN_RECORD_STATUS = "UnknownRecordStatus"
"""A record whose status this library never writes (another library's, a hand-made one)."""
UNREADABLE_CODES = frozenset(
    {STORED_RECORD_UNREADABLE, STORED_RESULT_UNREADABLE, UNKNOWN_RECORD_STATUS}
)
"""The codes of a StoreError raised for what was read, not for a failed request. Never
retryable: the same record answers the same way until it expires or an operator removes
it. The handler never runs on such a record."""


def unreadable(
    code: str, what: str, *, key_hash: str | None = None, step: str | None = None
) -> StoreError:
    """The error for a stored record, result or chunk that cannot be read. `what` says what
    is wrong in words of our own: never the stored bytes, which may hold anyone's data."""
    noun = "result" if code == STORED_RESULT_UNREADABLE else "record"
    return StoreError(
        f"the stored {noun} cannot be read: {what}", key_hash=key_hash, code=code, step=step
    )


class MisuseError(IdempotencyError):
    """A programmer mistake: retrying will not help."""


class ResultNotSerializableError(MisuseError, TypeError):
    """The first run's result (or a part of it) has a type we cannot store. The key was
    completed all the same, so the handler's effect never runs twice: its retries get
    this error, naming the type, until the key expires."""


class ResultTooLargeError(MisuseError):
    """The first run's result is larger than the store holds (see `MAX_STORED_BYTES`); the
    key was completed all the same and its retries get this error."""


class DeferredResultError(MisuseError, TypeError):
    """The protected call returned a result still to come (a coroutine, a generator, an
    awaitable, a future, an iterator) rather than its result, or a result holding one
    anywhere inside (a forgotten `await`). Nothing was stored and the
    key was released, as when a function raises: what it did before returning runs again
    on a retry, and what it deferred was closed or cancelled where it could be."""


class NoActiveExecutionError(MisuseError, RuntimeError):
    """`current_execution()` was called outside a decorated call."""


class NotAnHttpEventError(MisuseError, TypeError):
    """`idempotent_http` was given an event from no HTTP source it knows (API Gateway REST
    or HTTP API, ALB, Function URL): it is on the wrong function, or the event is not one."""


class ScopeMissingError(MisuseError):
    """A scope expression selected nothing: running unscoped would let one tenant replay
    another's result, so nothing ran. Pass `scope=None` for one shared scope on purpose."""


class NotABatchEventError(MisuseError, TypeError):
    """`process_batch` was given an event that is no SQS, Kinesis or DynamoDB Streams batch,
    or records it cannot report on (no messageId / sequence number): nothing ran."""


class ConfigurationError(MisuseError, ValueError):
    """A decorator or a store was configured with values that cannot work."""


for _error in (
    IdempotencyError,
    KeyMissingError,
    PayloadMismatchError,
    PayloadInvalidError,
    InProgressError,
    LeaseLostError,
    CompletionConflictError,
    StoreError,
    NewerFormatError,
    MisuseError,
    ResultNotSerializableError,
    ResultTooLargeError,
    DeferredResultError,
    NoActiveExecutionError,
    NotAnHttpEventError,
    ScopeMissingError,
    NotABatchEventError,
    ConfigurationError,
):
    # Named where users import them from: a traceback, a durable execution's recorded error
    # type and a pickled error say `lambda_idempotency.StoreError`, whatever folder holds it.
    _error.__module__ = "lambda_idempotency"
del _error
