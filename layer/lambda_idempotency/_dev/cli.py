"""The `lambda-idempotency` command (also `python -m lambda_idempotency`).

Local runs, from the same template.yaml that deploys:

    create-table  --endpoint URL               the template's tables, as defined, TTL on
    invoke FUNCTION --event FILE [--endpoint]  one function, one event, a fresh process
    run-samples   [--endpoint URL]             every function with its events, in order,
                                               on an embedded DynamoDB Local

Operators, on any table (AWS or local):

    inspect  (--pk PK | --key K --namespace NS [--scope S])   one record
    stuck    [--older-than MINUTES]                           IN_PROGRESS records, paginated
    release  (--pk PK | --key ...) --yes                      force-delete one record
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import IdempotencyError, StoreError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .._record import Record
    from .._store import DynamoDBStore
    from .template import TableSpec, Template


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


# -- local runs ---------------------------------------------------------------------------


def _template(args: argparse.Namespace) -> Template:
    from .template import Template

    return Template(args.template)


def _cmd_create_table(args: argparse.Namespace) -> int:
    template = _template(args)
    tables = [template.table(args.table)] if args.table else template.tables()
    client = local_client(args.endpoint)
    for table in tables:
        created = create_table(client, table)
        ttl = f", TTL on {table.ttl_attribute}" if table.ttl_attribute else ""
        print(f"table {table.name} {'created' if created else 'already exists'}{ttl}")
    return 0


def _cmd_invoke(args: argparse.Namespace) -> int:
    from .invoke import invoke

    function = _template(args).function(args.function)
    invocation = invoke(function, _read_event(Path(args.event)), endpoint_url=args.endpoint)
    if args.verbose:
        sys.stderr.write(invocation.logs)
    if invocation.error is not None:
        print(json.dumps(invocation.error, indent=2))
        return 1
    print(json.dumps(invocation.response, indent=2))
    return 0


def _cmd_run_samples(args: argparse.Namespace) -> int:
    from .dynamodb_local import DynamoDBLocal

    template = _template(args)
    events_root = Path(args.events)
    if args.endpoint is not None:
        return _run_samples(template, events_root, args.endpoint)
    print("starting DynamoDB Local (in memory) ...", flush=True)
    with DynamoDBLocal() as local:
        return _run_samples(template, events_root, local.endpoint_url)


def _run_samples(template: Template, events_root: Path, endpoint_url: str) -> int:
    from .invoke import invoke

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
            print(f"  {path.name:<36} {invocation.summary:<36} {json.dumps(shown)}")
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


# -- operators ----------------------------------------------------------------------------


def _store(args: argparse.Namespace) -> DynamoDBStore:
    """The table from --table, else IDEMPOTENCY_TABLE, else the template's idempotency table."""
    import boto3

    from .._store import DynamoDBStore

    table = args.table or os.environ.get("IDEMPOTENCY_TABLE")
    if table is None:
        try:
            table = _template(args).idempotency_table().name
        except IdempotencyError as exc:
            raise CommandError(f"no table: pass --table or set IDEMPOTENCY_TABLE ({exc})") from exc
    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    if args.endpoint is not None and session.get_credentials() is None:
        session = boto3.Session(
            region_name=args.region or "us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
    client = session.client("dynamodb", endpoint_url=args.endpoint)
    return DynamoDBStore(table, client=client)


def _pk(args: argparse.Namespace) -> str:
    from .._keys import key_hash

    if args.pk is not None:
        return str(args.pk)
    if args.key is None or args.namespace is None:
        raise CommandError("name the record: --pk PK, or --key KEY with --namespace NAMESPACE")
    key = json.loads(args.key) if args.json_values else args.key
    scope = json.loads(args.scope) if args.json_values and args.scope is not None else args.scope
    return key_hash(args.namespace, scope, key)


def describe(record: Record, now_ms: int) -> dict[str, Any]:
    """What an operator wants to know of a record, in seconds relative to now."""
    from .._record import Status
    from .._store import stored_result_bytes

    described: dict[str, Any] = {
        "pk": record.pk,
        "status": record.status.value,
        "expired": record.is_expired(now_ms),
        "expires_in_s": record.expiration - now_ms // 1000,
        "age_s": None if record.claimed_at is None else (now_ms - record.claimed_at) / 1000,
        "owner": record.owner,
        "result_bytes": stored_result_bytes(record),
    }
    if record.status is Status.IN_PROGRESS and record.lease_until is not None:
        described["lease_left_s"] = (record.lease_until - now_ms) / 1000
    return described


def _print_record(described: dict[str, Any]) -> None:
    age = described["age_s"]
    rows = [
        ("pk", described["pk"]),
        (
            "status",
            described["status"] + (" (expired: counts as absent)" if described["expired"] else ""),
        ),
        ("age", "unknown" if age is None else _duration(age) + " since claimed"),
    ]
    if "lease_left_s" in described:
        left = described["lease_left_s"]
        rows.append(
            ("lease", f"{_duration(left)} left" if left >= 0 else f"lapsed {_duration(-left)} ago")
        )
    expires = described["expires_in_s"]
    rows.append(
        ("expires", f"in {_duration(expires)}" if expires >= 0 else f"{_duration(-expires)} ago")
    )
    rows.append(("result", f"{described['result_bytes']:,} bytes stored"))
    rows.append(("owner", described["owner"] or "-"))
    for name, value in rows:
        print(f"{name:<8} {value}")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _cmd_inspect(args: argparse.Namespace) -> int:
    store, pk = _store(args), _pk(args)
    record = store.get(pk)
    if record is None:
        raise CommandError(f"no record {pk} in table {store.table_name}")
    described = describe(record, _now_ms())
    if args.json:
        print(json.dumps(described, indent=2))
    else:
        _print_record(described)
    return 0


def _cmd_stuck(args: argparse.Namespace) -> int:
    store, now = _store(args), _now_ms()
    cutoff = now - int(args.older_than * 60_000)
    found: list[dict[str, Any]] = []
    scanned, capacity = 0, 0.0
    pages = store.scan_stuck(claimed_before_ms=cutoff, now_ms=now, page_size=args.page_size)
    for number, page in enumerate(pages, start=1):
        scanned += page.scanned
        capacity += page.capacity_units
        found.extend(describe(record, now) for record in page.records)
        progress = f"scanned {scanned:,} items in {number} pages, {len(found)} stuck ..."
        print(f"\r{progress}", end="", file=sys.stderr, flush=True)
        if args.max_pages is not None and number >= args.max_pages:
            print("\nstopped at --max-pages; the table was not read to the end", file=sys.stderr)
            break
    print(file=sys.stderr)
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for described in found:
            print(f"{described['pk']}  {_age_and_lease(described)}")
        print(f"{len(found)} IN_PROGRESS records claimed over {args.older_than:g} min ago")
    cost = f"read cost: {capacity:g} read capacity units for {scanned:,} items scanned"
    print(f"{cost} (a scan reads every item)", file=sys.stderr)
    return 0


def _age_and_lease(described: dict[str, Any]) -> str:
    age = "unknown age" if described["age_s"] is None else _duration(described["age_s"])
    left = described.get("lease_left_s")
    if left is None:
        return age
    return f"{age}, lease {_duration(left)} left" if left >= 0 else f"{age}, lease lapsed"


def _cmd_release(args: argparse.Namespace) -> int:
    store, pk = _store(args), _pk(args)
    record = store.get(pk)
    if record is None:
        raise CommandError(f"no record {pk} in table {store.table_name}")
    if not args.yes:
        _print_record(describe(record, _now_ms()))
        raise CommandError("release deletes this record and lets the key run again: add --yes")
    store.delete(pk)
    print(f"released {pk} ({record.status.value})")
    return 0


# -- parser and errors --------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="lambda-idempotency", description=(__doc__ or "").splitlines()[0]
    )
    root.add_argument(
        "--template", default="template.yaml", help="SAM template (default: %(default)s)"
    )
    commands = root.add_subparsers(dest="command", required=True)

    create = commands.add_parser(
        "create-table", help="create the template's tables on a local endpoint"
    )
    create.add_argument("--endpoint", required=True, help="DynamoDB Local or moto server URL")
    create.add_argument("--table", help="only this table (logical id in the template)")
    create.set_defaults(run=_cmd_create_table)

    run = commands.add_parser("invoke", help="invoke a function locally with an event, no Docker")
    run.add_argument("function", help="the function's logical id in the template")
    run.add_argument("--event", "-e", required=True, help="event JSON file")
    run.add_argument("--endpoint", help="DynamoDB endpoint (DynamoDB Local or moto server)")
    run.add_argument("--verbose", "-v", action="store_true", help="show the function's logs")
    run.set_defaults(run=_cmd_invoke)

    samples = commands.add_parser(
        "run-samples", help="invoke every function with events/<folder>/*.json"
    )
    samples.add_argument("--events", default="events", help="events folder (default: %(default)s)")
    samples.add_argument("--endpoint", help="use this endpoint instead of starting DynamoDB Local")
    samples.set_defaults(run=_cmd_run_samples)

    table = argparse.ArgumentParser(add_help=False)
    table.add_argument(
        "--table", help="table name (default: IDEMPOTENCY_TABLE, else the template's)"
    )
    table.add_argument("--endpoint", help="endpoint URL, e.g. a DynamoDB Local")
    table.add_argument("--region", help="AWS region (default: the environment's)")
    table.add_argument("--profile", help="AWS profile (default: the environment's)")
    table.add_argument("--json", action="store_true", help="print JSON")
    record = argparse.ArgumentParser(add_help=False, parents=[table])
    record.add_argument("--pk", help="the stored key, as in logs and errors (key_hash)")
    record.add_argument("--key", help="the raw idempotency key (hashed here, never sent)")
    record.add_argument(
        "--namespace", help="the decorator's namespace, e.g. Function.app.lambda_handler"
    )
    record.add_argument("--scope", help="the scope (tenant), if the decorator has one")
    record.add_argument("--json-values", action="store_true", help="--key and --scope are JSON")

    inspect = commands.add_parser("inspect", parents=[record], help="show one record")
    inspect.set_defaults(run=_cmd_inspect)
    stuck = commands.add_parser(
        "stuck", parents=[table], help="IN_PROGRESS records older than N minutes"
    )
    stuck.add_argument(
        "--older-than", type=float, default=15.0, metavar="MINUTES", help="default: %(default)s"
    )
    stuck.add_argument("--page-size", type=int, help="items read per page (Scan Limit)")
    stuck.add_argument("--max-pages", type=int, help="stop after this many pages")
    stuck.set_defaults(run=_cmd_stuck)
    release = commands.add_parser("release", parents=[record], help="force-delete one record")
    release.add_argument("--yes", action="store_true", help="really delete it")
    release.set_defaults(run=_cmd_release)
    return root


_STORE_ERROR_HINTS = {
    "ResourceNotFoundException": "the table does not exist in this region/endpoint",
    "UnrecognizedClientException": "the credentials are not valid for this region",
    "InvalidSignatureException": "the credentials or region are wrong",
    "AccessDeniedException": "these credentials may not read or write this table",
    "ExpiredTokenException": "the session token has expired",
}


def _explain(exc: BaseException) -> str:
    """One line for a failure the user can fix: what failed and what it means."""
    from botocore.exceptions import (
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        ProfileNotFound,
    )

    cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
    if isinstance(exc, StoreError) and exc.code in _STORE_ERROR_HINTS:
        return f"{exc}: {_STORE_ERROR_HINTS[exc.code]}"
    if isinstance(cause, NoCredentialsError):
        return "no AWS credentials: configure a profile, or pass --endpoint for a local table"
    if isinstance(cause, NoRegionError):
        return "no AWS region: pass --region or set AWS_REGION"
    if isinstance(cause, EndpointConnectionError):
        return f"cannot reach DynamoDB: {cause}"
    if isinstance(cause, ProfileNotFound):
        return str(cause)
    return str(exc)


def main(argv: Sequence[str] | None = None) -> int:
    from botocore.exceptions import BotoCoreError, ClientError

    from .dynamodb_local import DynamoDBLocalError

    args = parser().parse_args(argv)
    try:
        return int(args.run(args))
    except (
        CommandError,
        IdempotencyError,
        DynamoDBLocalError,
        ClientError,
        BotoCoreError,
        OSError,
    ) as exc:
        print(f"lambda-idempotency: {_explain(exc)}", file=sys.stderr)
        return 2
