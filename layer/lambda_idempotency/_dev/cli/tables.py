"""The table an operator command names, opened as the functions' store opens it: which table
(--table, IDEMPOTENCY_TABLE, the template's), in which layout, with which session; and a
missing table told in one line with the tables there and the fix. With --valkey-url, a
ValkeyStore's records instead (`valkey_stores`).

The commands call `tables.store_for` and `tables.session_for` through this module, so a test
can stand in for either."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from ..._base.errors import ConfigurationError, IdempotencyError, StoreError
from . import valkey_stores
from .exits import CommandError
from .project import DEFAULT_TEMPLATE, load_template, template_path

if TYPE_CHECKING:
    from ..._stores.contract import OperatorStore
    from ..._stores.dynamodb.store import DynamoDBStore
    from ..._stores.valkey.store import ValkeyStore


def table_options() -> argparse.ArgumentParser:
    """The options of every command that reads one table (a parent parser)."""
    table = argparse.ArgumentParser(add_help=False)
    table.add_argument(
        "--table", help="table name (default: IDEMPOTENCY_TABLE, else the template's)"
    )
    table.add_argument("--endpoint", help="endpoint URL, e.g. a DynamoDB Local")
    table.add_argument("--region", help="AWS region (default: the environment's)")
    table.add_argument("--profile", help="AWS profile (default: the environment's)")
    table.add_argument("--json", action="store_true", help="print JSON")
    add_layout_options(table)
    valkey_stores.add_options(table)
    return table


def operator_store(args: argparse.Namespace, config: Any = None) -> OperatorStore:
    """The records the operator names: a ValkeyStore's with --valkey-url, else the table's."""
    if valkey_stores.wanted(args):
        return valkey_stores.store_for(args)
    return store_for(args, config)


def store_for(args: argparse.Namespace, config: Any = None) -> DynamoDBStore:
    """The table from --table, else IDEMPOTENCY_TABLE, else the template's idempotency table,
    in the layout the options name (--layout, --sort-key-attr, ...), as the functions
    configure their store."""
    from ..._stores.dynamodb.store import DynamoDBStore
    from ..._stores.record import AttributeNames

    table = args.table or os.environ.get("IDEMPOTENCY_TABLE")
    if table is None and template_path(args) is None:
        flag = "TABLE" if args.command == "doctor" else "--table TABLE"
        raise CommandError(
            f"which table? pass {flag} or set IDEMPOTENCY_TABLE (no {DEFAULT_TEMPLATE} here "
            "to read it from); for a ValkeyStore's records, --valkey-url URL or "
            "IDEMPOTENCY_VALKEY_URL"
        )
    if table is None:
        try:
            table = load_template(args).idempotency_table().name
        except IdempotencyError as exc:
            raise CommandError(
                f"no table: pass --table or set IDEMPOTENCY_TABLE ({exc}); for a ValkeyStore's "
                "records, --valkey-url URL or IDEMPOTENCY_VALKEY_URL"
            ) from exc
    client = session_for(args).client("dynamodb", endpoint_url=args.endpoint, config=config)
    layout = getattr(args, "layout", "native")
    key_attr, expiry_attr = getattr(args, "key_attr", None), getattr(args, "expiry_attr", None)
    names: dict[str, Any] = {}
    if layout == "powertools":
        names = {
            "key_attr": key_attr,
            "expiry_attr": expiry_attr,
            "hash_function": getattr(args, "hash_function", None),
        }
        names = {option: value for option, value in names.items() if value is not None}
    elif getattr(args, "hash_function", None) is not None:
        raise CommandError("--hash-function is only for --layout powertools")
    elif key_attr is not None or expiry_attr is not None:
        defaults = AttributeNames()
        names["attribute_names"] = defaults._replace(
            pk=key_attr or defaults.pk, expiration=expiry_attr or defaults.expiration
        )
    try:
        return DynamoDBStore(
            table,
            client=client,
            layout=layout,
            sort_key_attr=getattr(args, "sort_key_attr", None),
            **names,
        )
    except ConfigurationError as exc:
        raise CommandError(str(exc)) from exc


def session_for(args: argparse.Namespace) -> Any:
    """boto3's session for --profile and --region; for a local endpoint without credentials,
    the dummy ones DynamoDB Local accepts."""
    import boto3

    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    if session.region_name is None and os.environ.get("AWS_REGION"):
        # boto3 reads AWS_DEFAULT_REGION only; the functions' store (and the error that asks
        # for a region) take AWS_REGION too
        session = boto3.Session(profile_name=args.profile, region_name=os.environ["AWS_REGION"])
    if args.endpoint is not None and session.get_credentials() is None:
        session = boto3.Session(
            region_name=args.region or "us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
    return session


def operator_config() -> Any:
    """An operator waits for an answer: a dead endpoint is told in seconds, not after a minute
    of botocore's connection retries; a throttle is retried as the library's own client does."""
    from botocore.config import Config

    return Config(
        connect_timeout=3,
        read_timeout=10,
        retries={"mode": "standard", "total_max_attempts": 3},
    )


@contextlib.contextmanager
def on_table(store: OperatorStore, args: argparse.Namespace) -> Iterator[None]:
    """A missing table becomes one line naming it, where it was looked for, and the fix; a
    Valkey server not reached or refusing, one line too (`valkey_stores.on_server`), and
    the store's connections closed after."""
    if getattr(args, "valkey_url", None) is not None:
        try:
            with valkey_stores.on_server(args):
                valkey_stores.check_mode(cast("ValkeyStore", store), args)
                yield
        finally:
            cast("ValkeyStore", store).close()  # its connections, once the command is done
        return
    try:
        yield
    except StoreError as exc:
        if exc.code != "ResourceNotFoundException":
            raise
        raise no_table(cast("DynamoDBStore", store), args) from exc


TABLES_NAMED = 20
"""A missing table's line names the first this many tables there, then "..." if more."""


def no_table(store: DynamoDBStore, args: argparse.Namespace) -> CommandError:
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    where = endpoint or f"region {store.client.meta.region_name}"
    try:
        listed = store.client.list_tables(Limit=TABLES_NAMED)
        names = listed["TableNames"] + (["..."] if "LastEvaluatedTableName" in listed else [])
        there = f" (tables there: {', '.join(names) or 'none'})"
    except Exception:  # only a better message is at stake
        there = ""
    flag = "TABLE" if args.command == "doctor" else "--table"
    fix = f"name the right one with {flag} (and --region)"
    if endpoint:
        create = (
            f"the template's with `lambda-idempotency create-table --endpoint {endpoint}`"
            if template_path(args) is not None
            else f"it with `lambda-idempotency create-table --endpoint {endpoint} "
            f"--table {store.table_name}`"
        )
        fix = f"name one of them with {flag}, or create {create}"
    return CommandError(f"no table {store.table_name} at {where}{there}: {fix}")


def positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < (0 if kind is float else 1):
            least = "0 or more" if kind is float else "1 or more"
            raise argparse.ArgumentTypeError(f"{text!r}: must be {least}")
        return value

    parse.__name__ = kind.__name__
    return parse


def add_layout_options(command: argparse.ArgumentParser) -> None:
    """The store's layout options, as the functions configure it: every command that reads
    the table must read its records and keys as they do."""
    command.add_argument(
        "--layout", choices=("native", "powertools"), default="native", help="default: native"
    )
    command.add_argument("--sort-key-attr", help="the store's sort_key_attr (composite key)")
    command.add_argument("--key-attr", help="the store's key attribute, if renamed")
    command.add_argument("--expiry-attr", help="the store's expiration (TTL) attribute, if renamed")
    command.add_argument(
        "--hash-function",
        help="Powertools layout: its hash_function (a hashlib name), if not md5",
    )
