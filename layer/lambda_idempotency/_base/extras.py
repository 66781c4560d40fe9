"""The optional dependencies of the runtime, and the error when one is missing.

The package installs only what a Lambda function imports and Lambda's Python runtime does not
ship (jmespath, which the runtime has too, is named for use outside Lambda). What some uses
need beyond that comes with an extra:

    pip install 'lambda-idempotency[aws-sdk]'      boto3, outside Lambda (its runtime ships it)
    pip install 'lambda-idempotency[powertools]'   Powertools for AWS Lambda: its JMESPath
                                                   functions in key, payload and scope
                                                   expressions, `process_batch` and
                                                   `idempotent_record`, layout="powertools"
    pip install 'lambda-idempotency[valkey]'       redis-py, for ValkeyStore

Used without its extra, such a feature raises `MissingExtraError` (an ImportError) whose one
line names the extra to install, at decoration or construction where it can: never a bare
ModuleNotFoundError from deep inside a call. The development tooling's extras (the command,
the pytest fixtures) are `_dev.extras`', on the same error.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

EXTRAS: Mapping[str, tuple[str, str]] = {
    "aws_lambda_powertools": ("Powertools for AWS Lambda (aws-lambda-powertools)", "powertools"),
    "boto3": ("boto3", "aws-sdk"),
    "botocore": ("botocore (boto3)", "aws-sdk"),
    "redis": ("redis-py", "valkey"),
}
"""Top-level module -> (what it is, the extra that installs it), for the runtime's own uses."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, message: str, *, extra: str, module: str) -> None:
        super().__init__(message, name=module)
        self.extra = extra


def missing_extra(
    exc: ModuleNotFoundError, purpose: str, extras: Mapping[str, tuple[str, str]] = EXTRAS
) -> ImportError:
    """The error to raise `from exc` when an import for `purpose` failed: a MissingExtraError
    naming the extra when the missing module is one an extra installs (in `extras`), else `exc`
    itself (a module missing from inside an installed dependency is its own problem)."""
    module = exc.name
    if module is None or module not in extras:  # importing a.b names a when a is missing
        return exc
    what, extra = extras[module]
    return MissingExtraError(
        f"{purpose} needs {what}, which is not installed: "
        f"pip install 'lambda-idempotency[{extra}]'",
        extra=extra,
        module=module,
    )


def require(module: str, purpose: str) -> None:
    """Raise MissingExtraError for `purpose` unless the top-level `module` (one of `EXTRAS`) is
    installed: a look on sys.path, no import, for a decoration that needs it only later."""
    if module in sys.modules:
        found = sys.modules[module] is not None  # None: its import is blocked
    else:
        from importlib.util import find_spec

        try:
            found = find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
    if not found:
        raise missing_extra(
            ModuleNotFoundError(f"No module named {module!r}", name=module), purpose
        )
