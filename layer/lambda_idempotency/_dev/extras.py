"""The optional dependencies of the development tooling, and the error when one is missing.

The package installs only what a Lambda function imports (boto3, jmespath, Powertools). The
command, the pytest fixtures and local durable invoke need more, each from an extra:

    pip install 'lambda-idempotency[cli]'       the `lambda-idempotency` command
    pip install 'lambda-idempotency[testing]'   the pytest plugin's fixtures (moto)
    pip install 'lambda-idempotency[durable]'   the Durable Execution SDK

Used without its extra, an entry point names the extra to install, never a bare
ModuleNotFoundError.
"""

from __future__ import annotations

EXTRAS = {
    "yaml": ("PyYAML", "cli"),
    "aws_durable_execution_sdk_python_testing": ("the Durable Execution SDK's local runner", "cli"),
    "aws_durable_execution_sdk_python": ("the Durable Execution SDK", "cli"),
    "pytest": ("pytest", "testing"),
    "moto": ("moto", "testing"),
}
"""Top-level module -> (what it is, the extra that installs it)."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, message: str, *, extra: str, module: str) -> None:
        super().__init__(message, name=module)
        self.extra = extra


def missing_extra(exc: ModuleNotFoundError, purpose: str) -> ImportError:
    """The error to raise `from exc` when an import for `purpose` failed: a MissingExtraError
    naming the extra when the missing module is one an extra installs, else `exc` itself (a
    module missing from inside an installed dependency is its own problem)."""
    if exc.name not in EXTRAS:  # importing a.b names a when a is missing
        return exc
    what, extra = EXTRAS[exc.name]
    return MissingExtraError(
        f"{purpose} needs {what}, which is not installed: "
        f"pip install 'lambda-idempotency[{extra}]'",
        extra=extra,
        module=exc.name,
    )
