"""Invoking a template's function locally, in a fresh process, without Docker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .template import FunctionSpec

RUNTIME = Path(__file__).with_name("runtime.py")


@dataclass
class Invocation:
    """What one local invocation returned and what the library logged while it ran."""

    response: Any = None
    error: dict[str, Any] | None = None
    outcomes: list[str] = field(default_factory=list)
    """The library's outcome log lines, in order: claimed, executed, replayed, ..."""
    logs: str = ""
    """The handler's own output: what it printed and logged (the library's lines apart)."""
    library_logs: str = ""
    cause: dict[str, str] | None = None
    """For an error: the botocore error behind it (`type`, `code`), if there is one."""

    @property
    def status_code(self) -> int | None:
        """The status of an HTTP response (API Gateway, ALB, Function URL), else None."""
        status = self.response.get("statusCode") if isinstance(self.response, dict) else None
        return status if isinstance(status, int) else None

    @property
    def summary(self) -> str:
        """executed, replayed, rejected or not run (a newer version's record), as a reader
        of the main job wants to know; with the status code when the function answered HTTP;
        records ok and failed for a batch."""
        status = "" if self.status_code is None else f" {self.status_code}"
        failures = (
            self.response.get("batchItemFailures") if isinstance(self.response, dict) else None
        )
        if isinstance(failures, list):
            ok = sum(self.outcomes.count(outcome) for outcome in ("executed", "replayed"))
            replayed = self.outcomes.count("replayed")
            return f"batch: {ok} ok, {len(failures)} failed" + (
                f" ({replayed} replayed)" if replayed else ""
            )
        if "replayed" in self.outcomes:
            return f"replayed{status}"
        if "executed" in self.outcomes:
            return f"executed{status}"
        rejected = {"payload_mismatch", "in_progress", "key_missing", "key_invalid"}
        rejected &= set(self.outcomes)
        if rejected:
            return f"rejected{status} ({', '.join(sorted(rejected))})"
        if "passed_through" in self.outcomes:
            return f"passed through{status}"
        if "newer_format" in self.outcomes:
            # a newer version's record holds the key (HTTP answers 503): nothing ran
            return f"not run{status} (newer_format)"
        if "store_error" in self.outcomes and self.error is None:
            return f"failed{status} (store_error)"
        if self.error is not None:
            return f"failed ({self.error.get('errorType')})"
        return "ran unprotected" if "unprotected" in self.outcomes else "no idempotency outcome"


def lambda_environment(
    function: FunctionSpec, endpoint_url: str | None, valkey_url: str | None = None
) -> dict[str, str]:
    """The process environment Lambda would give the function, pointed at a local endpoint;
    its Valkey variables (the template's cache endpoint) at `valkey_url`, else at what this
    environment says, else unset."""
    environment = dict(os.environ)
    environment.update(function.environment)
    for name in function.valkey_variables:
        if valkey_url is not None:
            environment[name] = valkey_url
        elif name in os.environ:
            environment[name] = os.environ[name]
        else:
            del environment[name]
    environment.setdefault("AWS_REGION", environment.get("AWS_DEFAULT_REGION", "us-east-1"))
    environment.setdefault("AWS_DEFAULT_REGION", environment["AWS_REGION"])
    environment["AWS_LAMBDA_FUNCTION_NAME"] = function.logical_id
    environment["AWS_LAMBDA_FUNCTION_MEMORY_SIZE"] = str(function.memory_mb)
    if endpoint_url is not None:
        environment["AWS_ENDPOINT_URL_DYNAMODB"] = endpoint_url
        # Local endpoints accept any credentials; never send real ones to them.
        environment["AWS_ACCESS_KEY_ID"] = "local"
        environment["AWS_SECRET_ACCESS_KEY"] = "local"
        environment.pop("AWS_SESSION_TOKEN", None)
        environment.pop("AWS_PROFILE", None)
    return environment


def invoke(
    function: FunctionSpec,
    event: Any,
    *,
    endpoint_url: str | None = None,
    valkey_url: str | None = None,
) -> Invocation:
    with tempfile.TemporaryDirectory() as scratch:
        result_path = Path(scratch) / "result.json"
        library_log_path = Path(scratch) / "library.log"
        spec = {
            "handler": function.handler,
            "code_dir": str(function.code_dir),
            "layer_dirs": [str(path) for path in function.layer_dirs],
            "function_name": function.logical_id,
            "memory_mb": function.memory_mb,
            "timeout_ms": function.timeout_seconds * 1000,
            "durable_timeout_s": function.durable_timeout_seconds,
            "event": event,
            "result_path": str(result_path),
            "library_log_path": str(library_log_path),
        }
        try:
            completed = subprocess.run(
                [sys.executable, str(RUNTIME)],
                input=json.dumps(spec),
                capture_output=True,
                text=True,
                env=lambda_environment(function, endpoint_url, valkey_url),
                timeout=function.timeout_seconds + 5,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return Invocation(
                error={
                    "errorType": "Sandbox.Timedout",
                    "errorMessage": f"Task timed out after {function.timeout_seconds} seconds",
                },
                logs=str(exc.stderr or ""),
            )
        library_logs = (
            library_log_path.read_text(encoding="utf-8") if library_log_path.exists() else ""
        )
        invocation = Invocation(
            logs=completed.stdout + completed.stderr,
            library_logs=library_logs,
            outcomes=_outcomes(library_logs),
        )
        if not result_path.exists():
            invocation.error = {
                "errorType": "Runtime.ExitError",
                "errorMessage": f"the runtime exited with {completed.returncode}",
            }
            return invocation
        outcome = json.loads(result_path.read_text(encoding="utf-8"))
        counted = outcome.get("stats") or {}
        if counted:  # the decorator's own counts; its log lines may have gone elsewhere
            invocation.outcomes = [name for name, n in counted.items() for _ in range(n)]
        if "response" in outcome:
            invocation.response = outcome["response"]
        else:
            invocation.error = outcome["error"]
            invocation.cause = outcome.get("cause")
        return invocation


def _outcomes(library_logs: str) -> list[str]:
    outcomes = []
    for line in library_logs.splitlines():
        _, brace, rest = line.partition("{")
        if not brace or "lambda_idempotency" not in line:
            continue
        try:
            record = json.loads(brace + rest)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "idempotency" in record:
            outcomes.append(str(record["idempotency"]))
    return outcomes
