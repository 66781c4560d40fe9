"""The `lambda-idempotency` command (also `python -m lambda_idempotency`): local runs.

lambda-idempotency create-table   --endpoint URL         the template's table, TTL on
lambda-idempotency invoke FUNCTION --event FILE [--endpoint URL]
lambda-idempotency run-samples    [--endpoint URL]       every function with its events,
                                                         on an embedded DynamoDB Local
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import IdempotencyError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from ._template import TableSpec


class CommandError(Exception):
    """A failure the user can fix; printed as one line, never as a traceback."""


def local_client(endpoint_url: str) -> DynamoDBClient:
    import boto3

    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


def create_table(client: DynamoDBClient, table: TableSpec) -> bool:
    """Create the table as the template defines it (on demand, TTL on). False if it exists."""
    existing = client.list_tables()["TableNames"]
    if table.name in existing:
        return False
    client.create_table(
        TableName=table.name,
        KeySchema=table.key_schema,  # type: ignore[arg-type]
        AttributeDefinitions=table.attribute_definitions,  # type: ignore[arg-type]
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table.name, WaiterConfig={"Delay": 1})
    if table.ttl_attribute is not None:
        client.update_time_to_live(
            TableName=table.name,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": table.ttl_attribute},
        )
    return True


def _cmd_create_table(args: argparse.Namespace) -> int:
    from ._template import Template

    table = Template(args.template).table(args.table)
    created = create_table(local_client(args.endpoint), table)
    print(f"table {table.name} {'created' if created else 'already exists'} at {args.endpoint}")
    return 0


def _cmd_invoke(args: argparse.Namespace) -> int:
    from ._invoke import invoke
    from ._template import Template

    function = Template(args.template).function(args.function)
    event = _read_event(Path(args.event))
    invocation = invoke(function, event, endpoint_url=args.endpoint)
    if args.verbose:
        sys.stderr.write(invocation.logs)
    if invocation.error is not None:
        print(json.dumps(invocation.error, indent=2))
        return 1
    print(json.dumps(invocation.response, indent=2))
    return 0


def _cmd_run_samples(args: argparse.Namespace) -> int:
    from ._dynamodb_local import DynamoDBLocal
    from ._template import Template

    template = Template(args.template)
    events_root = Path(args.events)
    if args.endpoint is not None:
        return _run_samples(template, events_root, args.endpoint)
    print("starting DynamoDB Local (in memory) ...", flush=True)
    with DynamoDBLocal() as local:
        return _run_samples(template, events_root, local.endpoint_url)


def _run_samples(template: Any, events_root: Path, endpoint_url: str) -> int:
    from ._invoke import invoke

    client = local_client(endpoint_url)
    for table in template.tables():
        create_table(client, table)
        ttl = f", TTL on {table.ttl_attribute}" if table.ttl_attribute else ""
        print(f"table {table.name} ready at {endpoint_url}{ttl}")
    print()
    failures = 0
    for logical_id, function in sorted(template.functions().items()):
        events = sorted((events_root / function.code_dir.name).glob("*.json"))
        if not events:
            continue
        print(f"{logical_id} ({function.handler})")
        for path in events:
            invocation = invoke(function, _read_event(path), endpoint_url=endpoint_url)
            shown = invocation.response if invocation.error is None else invocation.error
            if invocation.error is not None and "stackTrace" in invocation.error:
                shown = {key: invocation.error[key] for key in ("errorType", "errorMessage")}
            print(f"  {path.name:<36} {invocation.summary:<32} {json.dumps(shown)}")
            failures += invocation.summary.startswith(("failed", "no idempotency"))
        print()
    return 1 if failures else 0


def _read_event(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read event {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CommandError(f"event {path} is not JSON: {exc}") from exc


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="lambda-idempotency", description=__doc__.splitlines()[0])
    root.add_argument(
        "--template", default="template.yaml", help="SAM template (default: %(default)s)"
    )
    commands = root.add_subparsers(dest="command", required=True)

    create = commands.add_parser(
        "create-table", help="create the template's table on a local endpoint"
    )
    create.add_argument("--endpoint", required=True, help="DynamoDB Local or moto server URL")
    create.add_argument("--table", help="logical id of the table (when the template has several)")
    create.set_defaults(run=_cmd_create_table)

    run = commands.add_parser("invoke", help="invoke a function locally with an event, no Docker")
    run.add_argument("function", help="the function's logical id in the template")
    run.add_argument("--event", "-e", required=True, help="event JSON file")
    run.add_argument("--endpoint", help="DynamoDB endpoint (DynamoDB Local or moto server)")
    run.add_argument("--verbose", "-v", action="store_true", help="show the function's logs")
    run.set_defaults(run=_cmd_invoke)

    samples = commands.add_parser(
        "run-samples", help="invoke every function with its events/<folder>/*.json, in order"
    )
    samples.add_argument("--events", default="events", help="events folder (default: %(default)s)")
    samples.add_argument("--endpoint", help="use this endpoint instead of starting DynamoDB Local")
    samples.set_defaults(run=_cmd_run_samples)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (CommandError, IdempotencyError) as exc:
        print(f"lambda-idempotency: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # botocore, OS and emulator errors: one line, not a traceback
        from botocore.exceptions import BotoCoreError, ClientError

        from ._dynamodb_local import DynamoDBLocalError

        if isinstance(exc, ClientError | BotoCoreError | OSError | DynamoDBLocalError):
            print(f"lambda-idempotency: {exc}", file=sys.stderr)
            return 2
        raise
