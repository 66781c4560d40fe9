"""`inspect`, `namespaces` and `stuck`: the operators' reads of a table, or of a Valkey
store's keys (one record, the namespaces of its records, the IN_PROGRESS ones past an age);
none writes."""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from typing import TYPE_CHECKING, Any, cast

from ..._base.errors import IdempotencyError, StoreError
from . import tables, valkey_stores
from .exits import EXIT_CODES_EPILOG, EXIT_OK, EXIT_UNREADABLE, CommandError
from .records import (
    DECODE_ERRORS,
    DEFAULT_NAMESPACE,
    call_failed,
    describe,
    duration,
    now_ms,
    print_record,
    read_record,
    record_pk,
    unreadable,
)
from .tables import on_table, operator_config, positive

if TYPE_CHECKING:
    from ..._stores.contract import OperatorStore
    from ..._stores.dynamodb.store import DynamoDBStore
    from ..._stores.record import Record


NAMESPACES_SCANNED = 1000
"""`namespaces` reads at most this many items by default (--limit)."""
HINT_SCANNED = 100
"""A "no record" line names the namespaces among at most this many items (one small page)."""
HINT_NAMED = 5
"""... and names at most this many of them."""
_DIGEST = re.compile(r"^(?P<namespace>.+)#[0-9a-f]{32,128}$")
"""A record's key: its namespace, then the key's hex digest (sha256 here, Powertools' md5
or its hash_function). Chunk items (`...#chunk#owner#n`) do not match."""


def add_commands(add: Any, table: argparse.ArgumentParser, record: argparse.ArgumentParser) -> None:
    """`inspect` (one record), `namespaces` and `stuck` (the table), with their exit codes."""
    codes = EXIT_CODES_EPILOG
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
        type=positive(int),
        default=NAMESPACES_SCANNED,
        metavar="ITEMS",
        help="read at most this many items (default: %(default)s); only their keys are read",
    )
    listing.set_defaults(run=_cmd_namespaces)
    stuck = add("stuck", parents=[table], help="IN_PROGRESS records older than N minutes", **codes)
    stuck.add_argument(
        "--older-than",
        type=positive(float),
        default=15.0,
        metavar="MINUTES",
        help="default: %(default)s",
    )
    stuck.add_argument(
        "--namespace",
        help="only records of this namespace (the scan still reads every item); "
        "`lambda-idempotency namespaces` lists them",
    )
    stuck.add_argument("--page-size", type=positive(int), help="items read per page (Scan Limit)")
    stuck.add_argument("--max-pages", type=positive(int), help="stop after this many pages")
    stuck.set_defaults(run=_cmd_stuck)


def namespaces_in(store: OperatorStore, limit: int) -> tuple[collections.Counter[str], int, bool]:
    """The namespaces of the records among the first `limit` items of a scan (only the key
    attribute is read; on Valkey only key names, `operators.record_pks`), their record
    counts, the items scanned, and whether that was all."""
    from ..._stores.valkey.store import ValkeyStore

    if not isinstance(store, ValkeyStore):
        return _table_namespaces(cast("DynamoDBStore", store), limit)
    from ..._stores.valkey.operators import record_pks

    pks, scanned, complete = record_pks(store, limit)
    found: collections.Counter[str] = collections.Counter()
    for pk in pks:
        match = _DIGEST.match(pk)
        if match is not None:
            found[match["namespace"]] += 1
    return found, scanned, complete


def _table_namespaces(
    store: DynamoDBStore, limit: int
) -> tuple[collections.Counter[str], int, bool]:
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
        except ClientError as exc:  # as the store's own calls say it (and on_table reads it)
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


def no_record(store: OperatorStore, pk: str, args: argparse.Namespace) -> str:
    """Why a record may not be found, in one line: the namespaces there are (a bounded
    scan), or how to list them, and how a default namespace is formed."""
    line = f"no record {pk} in {held_in(store, args)}"
    http = getattr(args, "http", False)
    if args.key is None and not http:
        return line
    try:
        found, scanned, complete = namespaces_in(store, HINT_SCANNED)
    except Exception:  # only a better message is at stake
        return f"{line}: list its namespaces with `lambda-idempotency namespaces`; " + (
            DEFAULT_NAMESPACE
        )
    if args.namespace in found:
        check = (
            "check the Idempotency-Key value and the scope (--event's principal, --principal "
            "or the handler's own scope= with --scope)"
            if http
            else "check --key (--json-values for a key that is not a string) and --scope; "
            "for a record of idempotent_http, add --http with --event FILE or --principal"
        )
        return f"{line}: namespace {args.namespace} has records, not this key: {check}"
    named = [namespace for namespace, _ in _by_count(found)[:HINT_NAMED]]
    whole = "the table" if getattr(args, "valkey_url", None) is None else "the store"
    among = whole if complete else f"its first {_items(scanned)}"
    there = (
        f"namespaces in {among}: {', '.join(named)}{', ...' if len(found) > len(named) else ''}"
        if named
        else f"no records in {among}"
    )
    more = (
        "" if complete and len(found) <= len(named) else " (all: `lambda-idempotency namespaces`)"
    )
    return f"{line}; {there}{more}; {DEFAULT_NAMESPACE}"


def held_in(store: OperatorStore, args: argparse.Namespace) -> str:
    """Where the records are, as a line names it: a table, or a Valkey server and prefix."""
    if getattr(args, "valkey_url", None) is not None:
        return valkey_stores.where(args)
    return f"table {cast('DynamoDBStore', store).table_name}"


def _cmd_inspect(args: argparse.Namespace) -> int:
    store = tables.operator_store(args, operator_config())
    pk = record_pk(args, store)
    problem = None
    with on_table(store, args):
        record = read_record(store, pk)
        if record is None:
            raise CommandError(no_record(store, pk, args))
        described = describe(record, record.judged_at(now_ms()))
        if args.result:
            try:
                described.update(stored_result(store, record))
            except CommandError as exc:
                problem = exc
                described.update({"result": None, "result_note": str(exc)})
    if args.json:
        print(json.dumps(described, indent=2, default=repr))
    else:
        print_record(described)
        if args.result and problem is None:
            _print_result(described)
    if problem is not None:
        raise problem
    return EXIT_OK


def stored_result(store: OperatorStore, record: Record) -> dict[str, Any]:
    """The result a replay would return, decoded as the library decodes it, with its size
    as JSON; or why there is none. A result that cannot be decoded is a CommandError
    (EXIT_UNREADABLE); a failed call, a StoreError."""
    from ..._stores.encoding import loads, unpack

    what = f"the stored result of {record.pk}"
    try:
        blob = store.load_result(record)
        if blob is None:
            return {"result": None, "result_note": "no result stored"}
        document, typed = unpack(blob)
        value = loads(document, typed)
    except StoreError as exc:
        if call_failed(exc):
            raise
        raise unreadable(what, exc) from exc
    except IdempotencyError as exc:  # the first run's result could not be stored
        return {"result": None, "result_note": str(exc)}
    except DECODE_ERRORS as exc:
        raise unreadable(what, exc) from exc
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


def _cmd_namespaces(args: argparse.Namespace) -> int:
    store = tables.operator_store(args, operator_config())
    with on_table(store, args):
        found, scanned, complete = namespaces_in(store, args.limit)
    if args.json:
        print(json.dumps({"namespaces": dict(_by_count(found)), "scanned": scanned}))
    else:
        for namespace, count in _by_count(found):
            print(f"{namespace}  {counted(count, 'record')}")
    whole = "the whole table" if args.valkey_url is None else "every key under the prefix"
    where = whole if complete else f"stopped at --limit {args.limit:,}"
    print(
        f"{counted(len(found), 'namespace')} in {_items(scanned)} scanned ({where})",
        file=sys.stderr,
    )
    return EXIT_OK


def _cmd_stuck(args: argparse.Namespace) -> int:
    store = tables.operator_store(args, operator_config())
    with on_table(store, args):
        return _stuck(store, args)


def _stuck(store: OperatorStore, args: argparse.Namespace) -> int:
    now = now_ms()
    cutoff = now - int(args.older_than * 60_000)
    found: list[dict[str, Any]] = []
    unreadable: list[str] = []
    scanned, capacity = 0, 0.0
    pages = store.scan_stuck(claimed_before_ms=cutoff, now_ms=now, page_size=args.page_size)
    for number, page in enumerate(pages, start=1):
        scanned += page.scanned
        capacity += page.capacity_units
        found.extend(describe(record, record.judged_at(now)) for record in page.records)
        unreadable.extend(page.unreadable)
        progress = f"scanned {_items(scanned)} in {counted(number, 'page')}, {len(found)} stuck ..."
        print(f"\r{progress}", end="", file=sys.stderr, flush=True)
        if args.max_pages is not None and number >= args.max_pages:
            read = "the table was" if args.valkey_url is None else "the keys were"
            print(f"\nstopped at --max-pages; {read} not read to the end", file=sys.stderr)
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
    if args.valkey_url is None:
        cost = f"read cost: {capacity:g} read capacity units for {_items(scanned)} scanned"
        print(f"{cost} (a scan reads every item)", file=sys.stderr)
    else:
        cost = f"read cost: {counted(scanned, 'key')} under the prefix scanned and read"
        print(f"{cost} (SCAN visits every key)", file=sys.stderr)
    if unreadable:
        more = ", ..." if len(unreadable) > 3 else ""
        raise CommandError(
            f"{counted(len(unreadable), 'IN_PROGRESS record')} cannot be read, in a shape this "
            f"library does not write ({', '.join(unreadable[:3])}{more}): inspect them with --pk",
            status=EXIT_UNREADABLE,
        )
    return EXIT_OK


def _age_and_lease(described: dict[str, Any]) -> str:
    age = "unknown age" if described["age_s"] is None else duration(described["age_s"])
    left = described.get("lease_left_s")
    if left is None:
        return age
    return f"{age}, lease {duration(left)} left" if left >= 0 else f"{age}, lease lapsed"


def _items(count: int) -> str:
    return counted(count, "item")


def counted(count: int, noun: str) -> str:
    """`1 record`, `2 records`, `1,000 items`."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _by_count(found: collections.Counter[str]) -> list[tuple[str, int]]:
    """Most records first, then by name: the same listing whatever order the scan read."""
    return sorted(found.items(), key=lambda pair: (-pair[1], pair[0]))
