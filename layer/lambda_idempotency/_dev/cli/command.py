"""The `lambda-idempotency` command's parser, built from each command group's module, and
`main`: it runs the command and turns a failure the user can fix into one line and an exit
code."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..._base.errors import IdempotencyError, StoreError
from ..._version import COMMIT, VERSION
from . import (
    doctor_table,
    inspect_records,
    local_stack,
    records,
    release_record,
    run_functions,
    tables,
)
from .exits import EXIT_FAILED, OPERATOR_EXIT_CODES, CommandError
from .project import DEFAULT_TEMPLATE

DESCRIPTION = "The `lambda-idempotency` command (also `python -m lambda_idempotency`)."


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line that names the command's --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_FAILED, f"{self.prog}: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    root = _Parser(
        prog="lambda-idempotency",
        description=DESCRIPTION,
        epilog=OPERATOR_EXIT_CODES.replace("exit codes:", "exit codes (inspect, stuck, release):"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    root.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s {VERSION} (commit {COMMIT or 'not known'})",
        help="the package's version and the commit it was built from, then exit",
    )
    root.add_argument(
        "--template",
        default=DEFAULT_TEMPLATE,
        help="SAM template (default: %(default)s, if there is one)",
    )
    # Also after the command; SUPPRESS leaves the root's value alone when it is not given.
    template = argparse.ArgumentParser(add_help=False)
    template.add_argument("--template", default=argparse.SUPPRESS, help="SAM template")
    commands: Any = root.add_subparsers(dest="command", required=True)

    def add(name: str, parents: Sequence[argparse.ArgumentParser] = (), **options: Any) -> Any:
        return commands.add_parser(name, parents=[template, *parents], **options)

    local_stack.add_commands(add)  # local, create-table
    run_functions.add_commands(add)  # invoke, run-samples
    table = tables.table_options()
    record = records.record_options(table)
    inspect_records.add_commands(add, table, record)  # inspect, namespaces, stuck
    release_record.add_command(add, record)
    doctor_table.add_command(add)
    return root


_STORE_ERROR_HINTS = {
    "UnrecognizedClientException": "the credentials are not valid for this region",
    "InvalidSignatureException": "the credentials or region are wrong",
    "AccessDeniedException": "these credentials may not read or write this table",
    "ExpiredTokenException": "the session token has expired",
    "ValidationException": (
        "DynamoDB refused the request's shape: if the table's key is not the store's, pass "
        "--layout, --sort-key-attr or --key-attr as the functions configure the store "
        "(`lambda-idempotency doctor` names the ones that fit)"
    ),
}


def _explain(exc: BaseException) -> str:
    """One line for a failure the user can fix: what failed and what it means."""
    if isinstance(exc, StoreError) and exc.code in _STORE_ERROR_HINTS:
        return f"{exc}: {_STORE_ERROR_HINTS[exc.code]}"
    try:
        from botocore.exceptions import (
            EndpointConnectionError,
            NoCredentialsError,
            NoRegionError,
            ProfileNotFound,
        )
    except ModuleNotFoundError:  # no boto3 (the `cli` extra): no botocore error to explain
        return str(exc)

    cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
    if isinstance(cause, NoCredentialsError):
        return "no AWS credentials: configure a profile, or pass --endpoint for a local table"
    if isinstance(cause, NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION"
    if isinstance(cause, EndpointConnectionError):
        return f"cannot reach DynamoDB: {cause}"
    if isinstance(cause, ProfileNotFound):
        return str(cause)
    return str(exc)


def _botocore_errors() -> tuple[type[Exception], ...]:
    """botocore's errors a command can meet (a request refused, an endpoint not reached);
    none without boto3, whose absence a command then reports as the `cli` extra's."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ModuleNotFoundError:
        return ()
    return (ClientError, BotoCoreError)


def main(argv: Sequence[str] | None = None) -> int:
    from ..dynamodb_local import DynamoDBLocalError
    from ..extras import MissingExtraError, missing_extra

    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has printed as one line
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    explained: tuple[type[BaseException], ...] = (
        CommandError,
        IdempotencyError,
        DynamoDBLocalError,
        MissingExtraError,  # a command whose extra is not installed: it names the extra
        *_botocore_errors(),
        OSError,
    )
    try:
        return int(args.run(args))
    except ModuleNotFoundError as exc:  # boto3 or PyYAML, say: the `cli` extra brings them
        error = missing_extra(exc, f"`lambda-idempotency {args.command}`")
        if error is exc:
            raise
        print(f"lambda-idempotency: {error}", file=sys.stderr)
        return EXIT_FAILED
    except explained as exc:
        print(f"lambda-idempotency: {_explain(exc)}", file=sys.stderr)
        return exc.status if isinstance(exc, CommandError) else EXIT_FAILED
