"""A record as an operator sees it: named by --pk or by --key (hashed as the store's layout
hashes it), read strongly consistent, and told in seconds from now; a record in a shape this
library does not write is one line and EXIT_UNREADABLE."""

from __future__ import annotations

import argparse
import datetime
import json
import textwrap
import time
import zlib
from typing import TYPE_CHECKING, Any

from ..._base.errors import UNREADABLE_CODES, IdempotencyError, NewerFormatError, StoreError
from ..._stores.record import Status
from .exits import EXIT_UNREADABLE, CommandError

if TYPE_CHECKING:
    from ..._stores.contract import OperatorStore
    from ..._stores.record import Record


DEFAULT_NAMESPACE = (
    "the default namespace is module.function off Lambda (app.handler; __main__.handler for "
    "`python app.py`), the function's name first on Lambda "
    "(my-stack-OrderFunction-1A2B.app.handler), its logical id first under "
    "`lambda-idempotency invoke` (OrderFunction.app.handler)"
)
"""How a decorator without namespace= names its records: what a "no record" line and
--namespace's help say."""


def record_options(table: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options that name one record (a parent parser, over the table's)."""
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
    record.add_argument(
        "--json-values",
        action="store_true",
        help="--key and --scope are JSON (with --http, --scope only)",
    )
    from . import http_records

    http_records.add_options(record)
    return record


def record_pk(args: argparse.Namespace, store: OperatorStore) -> str:
    """The record's stored key: --pk as given, or --key (and --scope) hashed as the store's
    layout hashes them, so a Powertools table is found by the same key its functions use."""
    from . import http_records

    if args.http:
        return http_records.http_pk(args, store)
    if args.event is not None or args.principal is not None:
        raise CommandError(
            "--event and --principal name an idempotent_http record's scope: add --http "
            "(--key is then the Idempotency-Key header's value)"
        )
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


DECODE_ERRORS = (
    LookupError,
    ValueError,
    TypeError,
    AttributeError,
    ArithmeticError,
    RecursionError,
    zlib.error,
)
"""What decoding a record in a shape the library does not write may raise from below it."""


def read_record(store: OperatorStore, pk: str) -> Record | None:
    """The record as stored, strongly consistent; a record that cannot be decoded is one line
    and EXIT_UNREADABLE, a call that failed a StoreError (EXIT_FAILED)."""
    try:
        return store.get(pk)
    except StoreError as exc:
        if call_failed(exc):
            raise
        raise unreadable(f"record {pk}", exc) from exc
    except DECODE_ERRORS as exc:
        raise unreadable(f"record {pk}", exc) from exc


def call_failed(exc: StoreError) -> bool:
    """DynamoDB or Valkey failed or refused the call (or it could not be sent), as opposed to
    a stored record or result the library could not decode (on Valkey a record of another
    type, WRONGTYPE, carries redis-py's error too: its code says it was the record)."""
    source = type(exc.__cause__).__module__.split(".")[0]
    if source == "botocore":
        return True
    if source == "redis":
        return exc.code not in UNREADABLE_CODES
    return exc.code in {"InvalidRequest", "UnprocessedItems"}


def unreadable(what: str, exc: BaseException) -> CommandError:
    """One sentence: what cannot be read, why, and that nothing was changed. A record of a
    newer format is said as such (its error's own message, for a handler's caller, was cut
    into this one mid-sentence)."""
    if isinstance(exc, NewerFormatError):
        return CommandError(
            f"{what} was written by a newer version of lambda-idempotency (record format "
            f"{exc.format_version}; this version reads up to {exc.known}): read it with that "
            "version's lambda-idempotency; nothing was changed",
            status=EXIT_UNREADABLE,
        )
    detail = str(exc) if isinstance(exc, IdempotencyError) else type(exc).__name__
    detail = textwrap.shorten(detail, 160, placeholder=" ...")
    return CommandError(
        f"{what} cannot be read ({detail}): it is not in a shape this library writes (a "
        "manual edit, another library?); nothing was changed",
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
    lease_end = lease_end_ms(record)
    if lease_end is not None:
        described["lease_left_s"] = (lease_end - now_ms) / 1000
        described["lease_until"] = _utc(lease_end)
    return described


def _result_bytes(record: Record) -> int | None:
    """The stored size of the result; None when its chunk pointer cannot be read."""
    from ..._stores.dynamodb.store import stored_result_bytes

    try:
        return stored_result_bytes(record)
    except (IdempotencyError, *DECODE_ERRORS):
        return None


def lease_end_ms(record: Record) -> int | None:
    """When an IN_PROGRESS record's holder must have stopped; a record without a lease
    (Powertools', or one claimed outside Lambda) holds until it expires."""
    if record.status is not Status.IN_PROGRESS:
        return None
    return record.lease_until if record.lease_until is not None else record.expiration * 1000


def print_record(described: dict[str, Any]) -> None:
    age = described["age_s"]
    rows = [
        ("pk", described["pk"]),
        (
            "status",
            described["status"] + (" (expired: counts as absent)" if described["expired"] else ""),
        ),
        ("age", "unknown" if age is None else duration(age) + " since claimed"),
    ]
    if "lease_left_s" in described:
        left = described["lease_left_s"]
        rows.append(
            ("lease", f"{duration(left)} left" if left >= 0 else f"lapsed {duration(-left)} ago")
        )
    expires = described["expires_in_s"]
    rows.append(
        ("expires", f"in {duration(expires)}" if expires >= 0 else f"{duration(-expires)} ago")
    )
    stored = described["result_bytes"]
    rows.append(
        ("result", "unreadable chunk pointer" if stored is None else f"{stored:,} bytes stored")
    )
    rows.append(("owner", described["owner"] or "-"))
    for name, value in rows:
        print(f"{name:<8} {value}")


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _utc(ms: int) -> str | None:
    """Epoch milliseconds as an ISO 8601 UTC time; None past what a datetime holds."""
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, ValueError, OSError):
        return None
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def when(ms: int, now_ms: int) -> str:
    """A moment for an operator: local time with its zone, UTC, and how far from now."""
    utc = _utc(ms)
    if utc is None:
        return f"epoch ms {ms}"
    local = datetime.datetime.fromtimestamp(ms / 1000).astimezone()
    away = (ms - now_ms) / 1000
    relative = f"in {duration(away)}" if away >= 0 else f"{duration(-away)} ago"
    return f"{local:%Y-%m-%d %H:%M:%S %Z} ({utc}, {relative})"
