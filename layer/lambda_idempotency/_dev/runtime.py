"""A Lambda-like runtime for one local invocation, run as a script in a fresh interpreter.

Run as a file, not as `-m`, so the library is first imported by the handler, from the
function's code folder and its layers, the way Lambda's /var/task and /opt/python work.
Reads a JSON spec on stdin; writes the handler's response (or Lambda's error shape) as
JSON to the file the spec names; the handler's own output goes to stdout and stderr.
"""

import importlib
import json
import logging
import os
import sys
import time
import traceback
import uuid
from typing import Any


class LocalContext:
    """The attributes and method of Lambda's context object that handlers use."""

    def __init__(self, function_name: str, memory_mb: int, timeout_ms: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        region = os.environ.get("AWS_REGION", "us-east-1")
        self.invoked_function_arn = f"arn:aws:lambda:{region}:123456789012:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_ms / 1000

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def main() -> None:
    sys.path.pop(0)  # this file's folder: the library's own modules must not be top-level
    spec = json.load(sys.stdin)
    sys.path[:0] = [spec["code_dir"], *spec["layer_dirs"]]
    os.chdir(spec["code_dir"])
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
    )
    # Routine outcomes (executed, replayed) log at DEBUG; a local invoke reads every one,
    # from a file of their own, so what the handler itself prints stays apart.
    for chatty in ("botocore", "boto3", "urllib3"):  # credential and endpoint lookups
        logging.getLogger(chatty).setLevel(logging.WARNING)
    for output in logging.getLogger().handlers:
        output.addFilter(_expected_rejection)
    library_log = logging.getLogger("lambda_idempotency")
    library_log.setLevel(logging.DEBUG)
    library_log.propagate = False
    to_file = logging.FileHandler(spec["library_log_path"], encoding="utf-8")
    to_file.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    library_log.addHandler(to_file)
    context = LocalContext(spec["function_name"], spec["memory_mb"], spec["timeout_ms"])
    module_name, _, function_name = spec["handler"].rpartition(".")
    outcome: dict[str, Any]
    # The decorator counts outcomes in handler.idempotency.stats: what this call added is
    # what happened, even when the library's log lines went elsewhere (a Powertools Logger).
    stats: dict[str, int] = {}
    handler: Any = None
    try:
        handler = getattr(importlib.import_module(module_name), function_name)
        if spec.get("durable_timeout_s") is not None:
            handler = _DurableExecution(handler, spec)
        stats = dict(getattr(getattr(handler, "idempotency", None), "stats", {}))
        outcome = {"response": handler(spec["event"], context)}
    except Exception as exc:
        outcome = {
            "error": {
                "errorType": getattr(exc, "kind", type(exc).__name__),
                "errorMessage": str(exc),
                "stackTrace": traceback.format_exception(exc),
            },
            "cause": _botocore_cause(exc),
        }
    counted = getattr(getattr(handler, "idempotency", None), "stats", {})
    outcome["stats"] = {name: n - stats.get(name, 0) for name, n in dict(counted).items()}
    with open(spec["result_path"], "w", encoding="utf-8") as result:
        json.dump(outcome, result, default=str)


REJECTIONS = ("PayloadMismatchError", "KeyMissingError", "InProgressError")
"""The library's answers to a caller (not failures): the outcome line says them."""


def _expected_rejection(record: logging.LogRecord) -> bool:
    """Drops the Durable Execution SDK's ERROR lines (a traceback, then the error object)
    for an execution the library rejected as it should: `invoke` and `run-samples` say
    `rejected (payload_mismatch)` in one line of their own. Any other error keeps its lines."""
    if not record.name.startswith("aws_durable_execution_sdk_python"):
        return True
    error = record.exc_info[1] if record.exc_info else None
    if error is not None:
        return not (
            type(error).__module__.startswith("lambda_idempotency")
            and type(error).__name__ in REJECTIONS
        )
    message = record.getMessage()
    return not any(f"lambda_idempotency.{name}'" in message for name in REJECTIONS)


class _DurableExecution:
    """A durable function (DurableConfig in the template) run as one durable execution of the
    event by the Durable Execution SDK's local runner (in-process checkpoints, waits skipped):
    without AWS that is the only way to run it. Its answer is the execution's result, or its
    error as Lambda's error shape."""

    def __init__(self, handler: Any, spec: dict[str, Any]) -> None:
        self.handler = handler
        self.spec = spec
        inner = getattr(handler, "__wrapped__", None)  # the @idempotent wrapper, if any
        self.idempotency = getattr(inner, "idempotency", None)

    def __call__(self, event: Any, context: Any) -> Any:
        try:
            from aws_durable_execution_sdk_python.lambda_service import InvocationStatus
            from aws_durable_execution_sdk_python_testing.runner import (
                DurableFunctionTestRunner,
            )
        except ModuleNotFoundError as exc:
            from .extras import missing_extra

            raise missing_extra(exc, "invoking a durable function locally") from exc

        runner = DurableFunctionTestRunner(handler=self.handler, poll_interval=0.05)
        try:
            result = runner.run(
                input=json.dumps(event),
                execution_timeout=self.spec["durable_timeout_s"],
                function_name=self.spec["function_name"],
                execution_name=str(uuid.uuid4()),
            )
        finally:
            runner.close()  # type: ignore[no-untyped-call]
        if result.status is InvocationStatus.SUCCEEDED:
            return None if result.result is None else json.loads(result.result)
        error = result.error
        kind = "" if error is None else (error.type or "").rsplit(".", 1)[-1]
        message = None if error is None else error.message
        raise _ExecutionFailedError(kind or "ExecutionFailed", message)


class _ExecutionFailedError(Exception):
    """A durable execution that ended FAILED: reported under its error's own type name."""

    def __init__(self, kind: str, message: str | None) -> None:
        super().__init__(message or kind)
        self.kind = kind


def _botocore_cause(exc: BaseException) -> dict[str, str] | None:
    """The botocore error behind a failure (chained by StoreError), for `invoke` to say what
    to fix: its class name, and the error code DynamoDB answered with, if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__module__.startswith("botocore"):
            code = getattr(current, "response", {}).get("Error", {}).get("Code")
            return {"type": type(current).__name__, "code": str(code or "")}
        current = current.__cause__ or current.__context__
    return None


if __name__ == "__main__":
    main()
