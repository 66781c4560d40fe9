"""The record of an `idempotent_http` request, named as an operator has it (--http): the
`Idempotency-Key` header's value as the client sent it (quoted or bare, read by the front
end's own parser), and the scope the front end put it in, from the request's event
(--event FILE: the principal the handler reads from it, by the same code) or from the
principal itself (--principal KIND FIELD...), or the handler's own scope= (--scope). A
line that refuses one never repeats a key, a token or an event's values."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..._base.errors import IdempotencyError, NotAnHttpEventError
from .exits import CommandError

if TYPE_CHECKING:
    from ..._stores.contract import OperatorStore

PRINCIPAL_FIELDS: dict[str, tuple[str, ...]] = {
    "jwt": ("ISSUER", "SUB"),
    "lambda": ("PRINCIPAL_ID",),
    "lambda-context": ("CONTEXT_JSON",),
    "cognito-identity": ("POOL_ID", "IDENTITY_ID"),
    "iam": ("USER_ARN", "USER_ID"),
    "client-certificate": ("ISSUER_DN", "SUBJECT_DN"),
    "api-key": ("API_KEY_ID",),
    "anonymous": (),
}
"""Each principal kind `idempotent_http` scopes a key to (`_tenant`; docs/http.md's table),
with the fields that follow its kind, in order."""

_KINDS = ", ".join(PRINCIPAL_FIELDS)
_SOURCES = (
    "--event FILE (the request's event JSON), --principal KIND FIELD... (e.g. "
    "--principal jwt ISSUER SUB), or --scope for a handler with its own scope="
)


def add_options(record: argparse.ArgumentParser) -> None:
    """--http, --event and --principal, beside the options that name one record."""
    record.add_argument(
        "--http",
        action="store_true",
        help="an idempotent_http record: --key is the Idempotency-Key header's value as sent "
        "(quoted or bare), and its scope comes from --event or --principal",
    )
    record.add_argument(
        "--event",
        metavar="FILE",
        help="with --http: the request's event (API Gateway REST or HTTP API, ALB, Function "
        "URL JSON); its principal is the scope, as the handler reads it, and its "
        "Idempotency-Key header the key when --key is not given",
    )
    record.add_argument(
        "--principal",
        nargs="+",
        metavar=("KIND", "FIELD"),
        help=f"with --http: the caller's principal, its fields as separate words ({_usage()})",
    )


def _usage() -> str:
    return "; ".join(
        " ".join((kind, *fields)) for kind, fields in PRINCIPAL_FIELDS.items()
    ).replace("anonymous", "or anonymous")


def http_pk(args: argparse.Namespace, store: OperatorStore) -> str:
    """The pk `idempotent_http` writes for the header's value and the scope named."""
    if args.pk is not None:
        raise CommandError("--http names a record by --key and its scope, not --pk: drop one")
    if args.namespace is None:
        raise CommandError(
            "--http needs --namespace NAMESPACE: the handler's (`lambda-idempotency "
            "namespaces` lists those in the table)"
        )
    event = None if args.event is None else _read_event(args.event)
    key = _key(args.key, event, args.event)
    scope = _scope(args, store, event)
    try:
        return store.layout.record_key(args.namespace, scope, key)
    except IdempotencyError as exc:
        raise CommandError(f"the scope cannot be hashed: {exc}") from exc


def _key(header_value: str | None, event: Any, path: str | None) -> str:
    """The key as the front end reads the header's value, or the event's header."""
    from ..._http import IDEMPOTENCY_KEY, HttpRequest, InvalidKeyError, parse_key

    if header_value is None and event is None:
        raise CommandError(
            f"--http needs --key: the {IDEMPOTENCY_KEY} header's value as the client sent it "
            "(or --event FILE, whose header it is)"
        )
    flag = "--key" if header_value is not None else f"--event {path}"
    values = (
        [header_value]
        if header_value is not None
        else HttpRequest.from_event(event).header(IDEMPOTENCY_KEY)
    )
    try:
        key = parse_key(values)
    except InvalidKeyError as exc:  # its detail never repeats the value
        raise CommandError(
            f"{flag}: not a key the front end accepts ({exc.detail}); it answers 400 and "
            "stores no record"
        ) from exc
    if key is None:
        raise CommandError(
            f"{flag} has no {IDEMPOTENCY_KEY} header: pass its value with --key (the handler's "
            "header=, if it names another, is the one to read)"
        )
    return key


def _scope(args: argparse.Namespace, store: OperatorStore, event: Any) -> Any:
    given = [
        flag
        for flag, value in (
            ("--event", args.event),
            ("--principal", args.principal),
            ("--scope", args.scope),
        )
        if value is not None
    ]
    if not store.layout.supports_scope:
        if args.principal is not None or args.scope is not None:
            flag = "--principal" if args.principal is not None else "--scope"
            raise CommandError(
                f"{flag}: the Powertools layout has no scope (tenant) in its keys "
                "(idempotent_http takes only scope=None there); drop it"
            )
        return None
    if not given:
        raise CommandError(f"--http needs the record's scope: {_SOURCES}")
    if len(given) > 1:
        raise CommandError(f"{' and '.join(given)} each name the scope: give one")
    if event is not None:
        return _event_scope(event, args.event)
    if args.principal is not None:
        return principal_scope(args.principal)
    if not args.json_values:
        return args.scope
    try:
        return json.loads(args.scope)
    except (ValueError, RecursionError) as exc:
        raise CommandError(
            f"--scope is not JSON ({type(exc).__name__}); without --json-values it is taken "
            "as a string"
        ) from exc


def _read_event(path: str) -> Any:
    """The event in FILE, as JSON; one line saying why when it cannot be read as one."""
    from ..._http import HttpRequest

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CommandError(
            f"--event {path}: cannot read it ({exc.strerror or type(exc).__name__})"
        ) from exc
    except UnicodeDecodeError as exc:
        raise CommandError(f"--event {path}: not UTF-8 text") from exc
    try:
        event = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"--event {path} is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from exc
    except (ValueError, RecursionError) as exc:
        raise CommandError(f"--event {path} cannot be read as JSON ({type(exc).__name__})") from exc
    try:
        HttpRequest.from_event(event)
    except NotAnHttpEventError as exc:  # it names the event's top-level keys, not values
        raise CommandError(f"--event {path}: {exc}") from exc
    return event


def _event_scope(event: Any, path: str) -> Any:
    """The front end's default scope of the request: the same function the handler calls."""
    from ..._tenant import principal_or_anonymous

    scope = principal_or_anonymous(event)
    if scope is None:
        raise CommandError(
            f"--event {path}: its authorizer let the caller in without naming them (JWT "
            "claims without sub, or an empty Lambda authorizer context), so the handler "
            "refused the request (ScopeMissingError) and stored no record; a handler with its "
            "own scope= is named with --scope"
        )
    return scope


def principal_scope(words: list[str]) -> Any:
    """The scope of a principal given as KIND FIELD...: the tuple `_tenant` makes, or
    "anonymous". KIND:FIELD is taken for a kind of one field; a kind of two needs them
    as words, since either may hold a colon (an issuer's URL, an ARN, a pool id)."""
    from ..._tenant import ANONYMOUS

    kind, *fields = words
    if kind not in PRINCIPAL_FIELDS:
        head, colon, rest = kind.partition(":")
        if not colon or head not in PRINCIPAL_FIELDS or fields:
            raise CommandError(f"--principal: unknown kind {head!r}; one of {_KINDS}")
        names = PRINCIPAL_FIELDS[head]
        if len(names) != 1:
            raise CommandError(
                f"--principal {head}:...: give the fields as separate words, since they "
                f"may hold ':' themselves: --principal {head} {' '.join(names)}"
            )
        kind, fields = head, [rest]
    names = PRINCIPAL_FIELDS[kind]
    if len(fields) != len(names):
        takes = " ".join(names) if names else "no field"
        raise CommandError(
            f"--principal {kind} takes {takes}, not {len(fields)} "
            f"word{'' if len(fields) == 1 else 's'}"
        )
    if kind == ANONYMOUS:
        return ANONYMOUS
    if kind == "lambda-context":
        try:
            context = json.loads(fields[0])
        except (ValueError, RecursionError):
            context = None
        if not isinstance(context, dict) or not context:
            raise CommandError(
                "--principal lambda-context takes the authorizer's context as one JSON object, "
                "not empty (requestContext.authorizer.lambda, as the event has it)"
            )
        return (kind, context)
    return (kind, *fields)
