"""Lambda durable functions (AWS's Durable Execution SDK): one execution, many invocations.

A durable execution runs its handler again from the top at every invocation (after a wait, a
callback, a retried invocation) and replays its finished steps from checkpoints. For
`@idempotent` on such a handler:

- the owner of a key is the execution, not the invocation: its fencing token is derived from
  the execution's ARN, so every invocation of the same execution finds the claim its own and
  continues, and any other execution (or a zombie invocation of an older one) is fenced out;
- the lease runs from the execution's start for its whole timeout (`lease_seconds`, else the
  longest execution Lambda allows), never for the ~15 minutes of one invocation;
- the SDK suspends an execution by raising `SuspendExecution` (a BaseException) out of the
  handler: that is no failure, and the claim stays. Only an exception that ends the execution
  as FAILED releases the key, decided by the SDK's own rule (`ends_execution`): a retryable
  error is raised for Lambda to invoke the execution again, a non-retryable one (AWS refused
  a checkpoint with a 4xx) fails it as surely as the handler's own exception does.

Nothing here imports the SDK (no cold start pays for it, and it is no dependency): its context
is recognised by shape and its exceptions by name.
"""

from __future__ import annotations

import hashlib
from typing import Any

from .._stores.record import OWNER_CHARS

SDK_PACKAGE = "aws_durable_execution_sdk_python"
MAX_EXECUTION_SECONDS = 31_622_400
"""The longest execution timeout Lambda allows (366 days): the lease when none is given."""
OWNER_PREFIX = "d-"

SDK_VERSIONS_READ = ">=3.0,<3.1"
"""The SDK releases whose execution loop (`execution.durable_execution`) `ends_execution`
follows; pyproject.toml pins the same range."""


class DurableRun:
    """The durable execution a call belongs to, as read from its durable context."""

    __slots__ = ("arn", "lambda_context", "owner", "started_ms", "state")

    def __init__(self, arn: str, lambda_context: Any, started_ms: int | None, state: Any) -> None:
        self.arn = arn
        self.owner = owner_token(arn)
        self.lambda_context = lambda_context
        self.started_ms = started_ms
        self.state = state

    def __repr__(self) -> str:
        return f"DurableRun(owner={self.owner!r})"

    def lease_until_ms(self, now_ms: int, lease_seconds: float | None) -> int:
        """The execution's own deadline: its start plus its timeout, the same at every
        invocation of it, so no other execution can claim the key while this one may live."""
        seconds = MAX_EXECUTION_SECONDS if lease_seconds is None else lease_seconds
        start = now_ms if self.started_ms is None else min(self.started_ms, now_ms)
        return start + int(seconds * 1000)

    def ends_execution(self, exc: BaseException) -> bool:
        """Whether the SDK ends the execution as FAILED on `exc` (then the key is released);
        otherwise a later invocation of the same execution goes on and keeps the key.

        The SDK's rule (its `durable_execution` wrapper, 3.0): with the checkpoint token
        revoked it answers PENDING (replayed, never failed); `SuspendExecution` is PENDING;
        a `BackgroundThreadError` fails the execution when its source is an AWS API error
        that is not retryable, else is raised again; an `InvocationError` (a
        `CheckpointError` among them) fails it when not retryable, else is raised for Lambda
        to invoke again; any other Exception (an `ExecutionError`, the handler's own) fails
        it; any other BaseException escapes the handler, and Lambda invokes it again."""
        if getattr(self.state, "is_checkpoint_token_revoked", False) is True:
            return False
        names = sdk_names(type(exc))
        if "SuspendExecution" in names:
            return False
        if "BackgroundThreadError" in names:
            source = getattr(exc, "source_exception", None)
            return (
                source is not None
                and "BotoClientError" in sdk_names(type(source))
                and not retryable(source)
            )
        if "InvocationError" in names:
            return not retryable(exc)
        return isinstance(exc, Exception)


def retryable(error: BaseException) -> bool:
    """The SDK error's own `is_retryable()` (a 4xx from AWS, but for throttling and a stale
    checkpoint token, is not). An error without one, or whose answer is not a bool, counts
    as retryable: the claim is kept (for the execution's lease) rather than risk a second
    run while the execution may go on."""
    is_retryable = getattr(error, "is_retryable", None)
    if not callable(is_retryable):
        return True
    try:
        answer = is_retryable()
    except Exception:
        return True
    return answer is not False


def durable_run(context: Any) -> DurableRun | None:
    """The durable execution behind `context` when it is the SDK's DurableContext, else None."""
    execution_context = getattr(context, "execution_context", None)
    arn = getattr(execution_context, "durable_execution_arn", None)
    if not isinstance(arn, str) or not arn:
        return None
    state = getattr(context, "state", None)
    return DurableRun(arn, getattr(context, "lambda_context", None), _started_ms(state), state)


def owner_token(arn: str) -> str:
    """The fencing token of an execution: a digest of its ARN (which may carry an execution
    name chosen from the very key, so it is never stored or logged as it is)."""
    digest = hashlib.sha256(arn.encode()).hexdigest()
    return OWNER_PREFIX + digest[: OWNER_CHARS - len(OWNER_PREFIX)]  # as long as a random token


def is_invocation_envelope(event: Any) -> bool:
    """The SDK's invocation input rather than the user's event: `@idempotent` was put outside
    `@durable_execution`."""
    if isinstance(event, dict):
        return "DurableExecutionArn" in event and "CheckpointToken" in event
    return type(event).__module__.startswith(SDK_PACKAGE) and hasattr(
        event, "durable_execution_arn"
    )


def sdk_names(cls: type) -> set[str]:
    return {base.__name__ for base in cls.__mro__ if base.__module__.startswith(SDK_PACKAGE)}


def durable_step_key(context: Any, step_name: str) -> str:
    """An effect's idempotency key inside a durable step: the execution's ARN and the step's
    name, so the effect runs once however often the step runs (a step whose invocation died
    after the effect but before its checkpoint runs again; AT_LEAST_ONCE_PER_RETRY, the SDK's
    default, retries it too). Names must be unique within the execution, as the SDK's own
    step names should be. Use it as the key of an `idempotent_function` the step calls."""
    run = durable_run(context)
    if run is None:
        from .._base.errors import ConfigurationError

        raise ConfigurationError(
            "durable_step_key needs the durable context the handler was given (DurableContext)"
        )
    return f"{run.arn}#step#{step_name}"


def _started_ms(state: Any) -> int | None:
    """When the execution started, from its EXECUTION operation; None when the first page
    of the execution's state did not carry it (the lease then runs from now)."""
    try:
        operation = state.get_execution_operation()
        started = None if operation is None else operation.start_timestamp
        return None if started is None else int(started.timestamp() * 1000)
    except Exception:  # a state this module does not know: lease from now, never crash
        return None
