"""`invoke` and `run-samples`: the template's functions run here, in a fresh process each,
against DynamoDB (a local endpoint, or AWS); a set-up failure is one line with its fix."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..local_tables import LOCAL_ENDPOINT, create_table, local_client
from .exits import CommandError
from .project import load_template, template_function
from .reach import CONNECTION_ERRORS, CREDENTIAL_CODES, is_loopback, port_flag

if TYPE_CHECKING:
    import argparse

    from ..invoke import Invocation
    from ..template import FunctionSpec, Template


def add_commands(add: Any) -> None:
    """`invoke` and `run-samples`, with their options."""
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


def _cmd_invoke(args: argparse.Namespace) -> int:
    """The response on stdout; the handler's own output, then what the library did
    (executed, replayed, rejected), on stderr. A failure of the set-up (no DynamoDB, no table,
    no credentials) is one line naming the fix; -v adds the library's log and Lambda's error
    document."""
    from ..invoke import invoke

    template = load_template(args)
    function = template_function(template, args.function)
    unset = [name for name in function.valkey_variables if not os.environ.get(name)]
    if unset:
        raise CommandError(
            f"invoke {function.logical_id}: {unset[0]} comes from the template's Valkey cache: "
            f"set it to a local server (`{unset[0]}=redis://127.0.0.1:6379`), or use "
            "`run-samples`, which starts one"
        )
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
    if cause["type"] in CONNECTION_ERRORS:
        fix = (
            f"start one with `lambda-idempotency local{port_flag(endpoint)}`"
            if endpoint is not None and is_loopback(endpoint)
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
    if cause["code"] in CREDENTIAL_CODES:
        return (
            f"{where} refused the credentials ({cause['code']}) for table {table}: check "
            f"AWS_PROFILE and AWS_REGION, or run locally with {local_fix}"
        )
    if cause["type"] == "NoRegionError":
        return "no AWS region: set AWS_REGION"
    return None


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
    from ..dynamodb_local import DynamoDBLocal

    template = load_template(args)
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
    with contextlib.ExitStack() as servers:
        valkey_url = None
        on_valkey = [f.logical_id for f in _on_valkey(template) if _events_of(events_root, f)]
        if on_valkey:
            from ..valkey_local import ValkeyCluster, ValkeyLocalError

            # one node serving every slot: cluster mode, as ElastiCache Serverless is
            print("starting a local Valkey server (cluster mode, one node) ...", flush=True)
            try:
                valkey_url = servers.enter_context(ValkeyCluster(size=1)).url
            except (ValkeyLocalError, OSError) as exc:
                said = " ".join(str(exc).split())  # the server's own output: one line
                raise CommandError(
                    f"cannot start a local Valkey server for {', '.join(on_valkey)}: {said} "
                    "(VALKEY_SERVER names a valkey-server binary to use)"
                ) from exc
        if args.endpoint is not None:
            return _run_samples(template, events_root, args.endpoint, valkey_url)
        print("starting DynamoDB Local (in memory) ...", flush=True)
        local = servers.enter_context(DynamoDBLocal())
        return _run_samples(template, events_root, local.endpoint_url, valkey_url)


def _on_valkey(template: Template) -> list[FunctionSpec]:
    """The functions whose environment names the template's Valkey cache."""
    return [f for f in template.functions().values() if f.valkey_variables]


def _run_samples(
    template: Template, events_root: Path, endpoint_url: str, valkey_url: str | None
) -> int:
    from ..invoke import invoke

    client = local_client(endpoint_url)
    for table in template.tables():
        create_table(client, table)
        ttl = f", TTL on {table.ttl_attribute}" if table.ttl_attribute else ""
        print(f"table {table.name} ready at {endpoint_url}{ttl}")
    if valkey_url is not None:
        print(f"Valkey ready at {valkey_url}")
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
            invocation = invoke(
                function, _read_event(path), endpoint_url=endpoint_url, valkey_url=valkey_url
            )
            shown = invocation.response if invocation.error is None else invocation.error
            if invocation.error is not None and "stackTrace" in invocation.error:
                shown = {key: invocation.error[key] for key in ("errorType", "errorMessage")}
            print(f"  {path.name:<36} {invocation.summary:<36} {json.dumps(shown)}")
            failures += invocation.summary.startswith(("failed", "not run", "no idempotency"))
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
