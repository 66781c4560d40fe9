"""The optional dependencies of the development tooling, and the error when one is missing.

The package installs only what a Lambda function imports and the runtime does not ship (the
runtime's own extras, `[aws-sdk]` and `[powertools]`, are `_base.extras`'). The command, the
pytest fixtures and local durable invoke need more, each from an extra:

    pip install 'lambda-idempotency[cli]'       the `lambda-idempotency` command (boto3 with it)
    pip install 'lambda-idempotency[testing]'   the pytest plugin's fixtures (moto, boto3)
    pip install 'lambda-idempotency[durable]'   the Durable Execution SDK

Used without its extra, an entry point names the extra to install, never a bare
ModuleNotFoundError. The error is the runtime's `MissingExtraError`, re-exported here.
"""

from __future__ import annotations

from .._base.extras import MissingExtraError
from .._base.extras import missing_extra as _missing_extra

EXTRAS = {
    "yaml": ("PyYAML", "cli"),
    "aws_durable_execution_sdk_python_testing": ("the Durable Execution SDK's local runner", "cli"),
    "aws_durable_execution_sdk_python": ("the Durable Execution SDK", "cli"),
    "boto3": ("boto3", "cli"),
    "botocore": ("botocore (boto3)", "cli"),
    "pytest": ("pytest", "testing"),
    "moto": ("moto", "testing"),
}
"""Top-level module -> (what it is, the extra that installs it), for the tooling: the command
needs boto3 for its DynamoDB commands, so the extra to name for it is `cli` (the test helpers
import boto3 after moto, whose extra brings it)."""


def missing_extra(exc: ModuleNotFoundError, purpose: str, *, sdk_extra: str = "cli") -> ImportError:
    """The error to raise `from exc` when an import for `purpose` failed: a MissingExtraError
    naming the extra when the missing module is one an extra installs, else `exc` itself (a
    module missing from inside an installed dependency is its own problem). boto3 is named
    with `sdk_extra`: the command's (`cli`) or the test helpers' (`testing`)."""
    extras = EXTRAS
    if sdk_extra != "cli":
        extras = {**EXTRAS, **{name: (EXTRAS[name][0], sdk_extra) for name in _SDK}}
    return _missing_extra(exc, purpose, extras)


_SDK = ("boto3", "botocore")


__all__ = ["EXTRAS", "MissingExtraError", "missing_extra"]
