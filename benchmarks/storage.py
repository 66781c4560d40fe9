"""Storage and cost: what a stored result weighs in DynamoDB, and the capacity it consumes.

Each library runs a handler returning a JSON result against its own fresh table on DynamoDB
Local, then replays it: repetitive results (an order with line items, which compresses well)
and high-entropy ones (random text, which does not), up to sizes that take our chunk path.
A botocore hook sees every request the library sends, reads the items it touches before it
runs, and prices it by DynamoDB's documented capacity rules; the stored items are read back
with a Scan and sized by DynamoDB's item-size rules. A second run of each case on a fresh
table, with nothing listening, takes the peak Python heap of the first run and the replay.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import tracemalloc
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .contenders import CONTENDERS, OURS, POWERTOOLS, Contender
from .report import Budget, Section, Table, kilobytes
from .workload import TEXT_ALPHABET, LambdaContext, Work, create_table, dynamodb_client, order_event

REPETITIVE = "repetitive"
RANDOM = "random"
CASES: tuple[tuple[str, int], ...] = (
    (REPETITIVE, 1024),
    (REPETITIVE, 10 * 1024),
    (REPETITIVE, 100 * 1024),
    (REPETITIVE, 350 * 1024),
    (REPETITIVE, 1024 * 1024),
    (RANDOM, 1024),
    (RANDOM, 10 * 1024),
    (RANDOM, 100 * 1024),
    (RANDOM, 300 * 1024),
    (RANDOM, 350 * 1024),
    (RANDOM, 1024 * 1024),
    (RANDOM, int(5.8 * 1024 * 1024)),
)
"""(kind, bytes of JSON) per row: 5.8 MB is about the most Lambda's 6 MB response carries."""
PLACEMENT_SIZES = (512, 1024, 2 * 1024, 4 * 1024, 16 * 1024, 64 * 1024)
"""Random-text results measured both in the record and in an item of their own."""
WRITE_UNIT_DOLLARS = 0.625e-6
READ_UNIT_DOLLARS = 0.125e-6
"""On-demand request units in US East (N. Virginia), since the price cut of 2024-11-01."""
LAMBDA_MS_DOLLARS_128MB = 0.0000166667 * 0.125 / 1000
"""A millisecond of a 128 MB x86 function (per GB-second price times 1/8 GB)."""
CAPACITY_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "GetItem", "BatchGetItem", "BatchWriteItem"}
    | {"TransactWriteItems", "TransactGetItems", "Query", "Scan"}
)
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
)
COMPRESSED_BUDGET = 25 * 1024
"""A 100 KB repetitive JSON result stores in at most 25 KB (DESIGN.md, Budgets)."""
ENTROPY_SLACK = 1.1
"""Random text stores "near its entropy": within this factor of log2(alphabet) bits a byte."""
_tables = itertools.count()


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes DynamoDB bills for one attribute value (its name is counted by the caller)."""
    (kind, content), *_ = value.items()
    if kind == "S":
        return len(content.encode())
    if kind == "B":
        return len(base64.b64decode(content)) if isinstance(content, str) else len(content)
    if kind == "N":
        digits = content.lstrip("-").replace(".", "").strip("0") or "0"
        return math.ceil(len(digits) / 2) + 1
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in content.items())
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in content)
    if kind in ("SS", "NS", "BS"):
        return sum(attribute_size({kind[0]: member}) for member in content)
    raise ValueError(f"unknown attribute type {kind}")


def item_size(item: dict[str, dict[str, Any]]) -> int:
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """1 WCU per KB of item, rounded up, at least 1."""
    return max(1, math.ceil(size / 1024))


def read_units(size: int, consistent: bool) -> float:
    """1 RCU per 4 KB, rounded up, at least 1 (a missing item too); half if eventually
    consistent."""
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


@dataclass
class Phase:
    """What one invocation sent and what it cost: as DynamoDB reported it, or by its rules
    where it reported nothing."""

    requests: list[str] = field(default_factory=list)
    write_units: float = 0.0
    read_units: float = 0.0
    reported: int = 0
    """Requests priced by the capacity DynamoDB Local reported."""
    ruled: int = 0
    """Requests priced by the documented rules (a refused condition reports nothing)."""

    @property
    def round_trips(self) -> str:
        return f"{len(self.requests)} ({', '.join(self.requests) or 'none'})"

    @property
    def dollars_per_million(self) -> float:
        """On demand, US East: what a million invocations like this one cost in requests."""
        units = self.write_units * WRITE_UNIT_DOLLARS + self.read_units * READ_UNIT_DOLLARS
        return units * 1_000_000

    @property
    def priced_by(self) -> str:
        if not self.requests:
            return "—"
        if not self.ruled:
            return "reported"
        return "rules" if not self.reported else f"reported {self.reported}, rules {self.ruled}"


class RulesMeter:
    """Prices every request a client sends: by the capacity DynamoDB Local reports where it
    reports any, and by DynamoDB's documented rules where it does not.

    Every request asks for `ReturnConsumedCapacity` (added to its parameters). In botocore's
    `before-send` (the last moment before the request leaves), the items the request touches
    are read with a separate client, so each write is priced on the larger of the item before
    and the item offered (or after, for updates, read once the request has gone): 1 WCU per
    KB, twice that inside a transaction, a failed condition billed like the write it refused;
    each item read is 1 RCU per 4 KB, half if eventually consistent. When the answer reports
    consumed capacity (DynamoDB Local does for requests that succeed), that replaces the rules'
    price; a refused request reports none, and keeps it.
    """

    def __init__(self, client: Any, endpoint_url: str) -> None:
        self._oracle = dynamodb_client(endpoint_url)
        self._keys: dict[str, list[str]] = {}
        self._pending: list[tuple[str, dict[str, Any], int, int]] = []
        """Updates awaiting their after-image: (table, key, before size, multiplier)."""
        self.phase = Phase()
        self._before_request = (0.0, 0.0)
        client.meta.events.register("provide-client-params.dynamodb", self._ask_capacity)
        client.meta.events.register("before-send.dynamodb", self._price)
        client.meta.events.register("after-call.dynamodb", self._answered)

    def take(self) -> Phase:
        self._settle()
        phase, self.phase = self.phase, Phase()
        return phase

    def _key(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        if table not in self._keys:
            schema = self._oracle.describe_table(TableName=table)["Table"]["KeySchema"]
            self._keys[table] = [entry["AttributeName"] for entry in schema]
        return {name: item[name] for name in self._keys[table]}

    def _size(self, table: str, key: dict[str, Any]) -> int:
        found = self._oracle.get_item(TableName=table, Key=key, ConsistentRead=True)
        return item_size(found["Item"]) if "Item" in found else 0

    def _settle(self) -> None:
        for table, key, before, multiplier in self._pending:
            self.phase.write_units += multiplier * write_units(max(before, self._size(table, key)))
        self._pending = []

    def _write(self, table: str, kind: str, spec: dict[str, Any], multiplier: int) -> None:
        source = spec["Item"] if kind in ("Put", "PutRequest") else spec["Key"]
        key = self._key(table, source)
        before = self._size(table, key)
        if kind in ("Put", "PutRequest"):
            self.phase.write_units += multiplier * write_units(max(before, item_size(source)))
        elif kind == "Update":
            self._pending.append((table, key, before, multiplier))
        else:  # Delete, DeleteRequest, ConditionCheck: billed on the item found
            self.phase.write_units += multiplier * write_units(before)

    @staticmethod
    def _ask_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
        if model.name in CAPACITY_OPERATIONS:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _answered(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        """A request DynamoDB rejects as invalid (an item over 400 KB) does no work and is not
        billed: take back what it was priced. One that reports its capacity is priced so."""
        if parsed.get("Error", {}).get("Code") == "ValidationException":
            self.phase.write_units, self.phase.read_units = self._before_request
            self._pending = []
            return
        consumed = parsed.get("ConsumedCapacity")
        if consumed is None:
            self.phase.ruled += 1
            return
        entries = consumed if isinstance(consumed, list) else [consumed]
        units = sum(float(entry.get("CapacityUnits", 0.0)) for entry in entries)
        self.phase.write_units, self.phase.read_units = self._before_request
        self._pending = []
        if model.name in WRITE_OPERATIONS:
            self.phase.write_units += units
        else:
            self.phase.read_units += units
        self.phase.reported += 1

    def _price(self, request: Any, event_name: str, **_: Any) -> None:
        self._settle()
        self._before_request = (self.phase.write_units, self.phase.read_units)
        operation = event_name.rsplit(".", 1)[-1]
        self.phase.requests.append(operation)
        body = json.loads(request.body or b"{}")
        if operation == "PutItem":
            self._write(body["TableName"], "Put", body, 1)
        elif operation in ("UpdateItem", "DeleteItem"):
            self._write(body["TableName"], operation.removesuffix("Item"), body, 1)
        elif operation == "TransactWriteItems":
            for action in body["TransactItems"]:
                ((kind, spec),) = action.items()
                self._write(spec["TableName"], kind, spec, 2)
        elif operation == "BatchWriteItem":
            for table, writes in body["RequestItems"].items():
                for write in writes:
                    ((kind, spec),) = write.items()
                    self._write(table, kind, spec, 1)
        elif operation == "GetItem":
            size = self._size(body["TableName"], body["Key"])
            self.phase.read_units += read_units(size, bool(body.get("ConsistentRead")))
        elif operation == "BatchGetItem":
            for table, spec in body["RequestItems"].items():
                consistent = bool(spec.get("ConsistentRead"))
                for key in spec["Keys"]:
                    self.phase.read_units += read_units(self._size(table, key), consistent)


@dataclass(frozen=True)
class Stored:
    contender: str
    kind: str
    """repetitive or random."""
    target_bytes: int
    result_bytes: int
    """The result's JSON as the handler returns it."""
    first_run: str
    first: Phase
    items: int
    stored_bytes: int
    record_bytes: int
    """The idempotency record alone (without chunk items): what a failed claim is billed on."""
    replay: str
    again: Phase
    """The replay's requests and units."""
    executions: int
    heap: tuple[int, int]
    """Peak Python heap of the first run and of the replay (a separate, unmetered run)."""
    errors: list[str]
    """What failed, as the caller saw it."""


def _attempt(call: Any) -> tuple[Any, BaseException | None]:
    try:
        return call(), None
    except Exception as exc:
        return None, exc


def describe_error(exc: BaseException) -> str:
    """The error as the caller sees it, with the wrapped error when its text adds something."""
    message = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    cause = exc.__cause__
    if cause is not None and " ".join(str(cause).split()) not in message:
        message += f" (caused by {type(cause).__name__}: {' '.join(str(cause).split())})"
    return message


def _invoke(
    contender: Contender, kind: str, size: int, endpoint_url: str, meter: bool
) -> tuple[Any, Work, Callable[[str], Any], RulesMeter | None, str]:
    """A fresh table and the library wrapped around a handler returning the case's result;
    the callable invokes it with the event for a given order id."""
    client = dynamodb_client(endpoint_url)
    rules = RulesMeter(client, endpoint_url) if meter else None
    table = create_table(
        client, f"bench-storage-{contender.slug}-{next(_tables)}", contender.key_attribute
    )
    work = Work(result_bytes=size, random_text=kind == RANDOM)
    handler = contender.wrap(client, table, work.handler(), cache=False)
    context = LambdaContext()
    return client, work, lambda order: handler(order_event(order), context), rules, table


def _heap(call: Callable[[], Any]) -> int:
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        _attempt(call)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - before


def measure_heap(contender: Contender, kind: str, size: int, endpoint_url: str) -> tuple[int, int]:
    """Peak heap of a first run and of its replay, on a fresh table, nothing listening, after
    one warm-up of each on another key (so one-time setup is not counted)."""
    _, _, invoke, _, _ = _invoke(contender, kind, size, endpoint_url, meter=False)
    _attempt(lambda: invoke("warm-up"))
    _attempt(lambda: invoke("warm-up"))
    return _heap(lambda: invoke("measured")), _heap(lambda: invoke("measured"))


def measure_one(contender: Contender, kind: str, size: int, endpoint_url: str) -> Stored:
    client, work, invoke, rules, table = _invoke(contender, kind, size, endpoint_url, meter=True)
    assert rules is not None

    def call() -> Any:
        return invoke(f"storage-{kind}-{size}")

    expected = json.loads(json.dumps(work.document))

    rules.take()
    _, first_error = _attempt(call)
    first = rules.take()
    items = [
        item
        for page in client.get_paginator("scan").paginate(TableName=table, ConsistentRead=True)
        for item in page["Items"]
    ]
    rules.take()
    value, replay_error = _attempt(call)
    again = rules.take()
    errors = []
    if first_error is None:
        first_run = "stored"
    else:
        first_run = f"failed: {type(first_error).__name__}"
        errors.append(f"first run: {describe_error(first_error)}")
    if replay_error is None:
        replay = "replayed, equal" if value == expected else "replayed, DIFFERENT"
    else:
        replay = f"failed: {type(replay_error).__name__}"
        errors.append(f"replay: {describe_error(replay_error)}")
    sizes = [item_size(item) for item in items]
    record = [
        item_size(item)
        for item in items
        if "#chunk#" not in item.get(contender.key_attribute, {}).get("S", "")
    ]
    return Stored(
        contender=contender.slug,
        kind=kind,
        target_bytes=size,
        result_bytes=len(json.dumps(work.document, separators=(",", ":")).encode()),
        first_run=first_run,
        first=first,
        items=len(items),
        stored_bytes=sum(sizes),
        record_bytes=max(record, default=0),
        replay=replay,
        again=again,
        executions=work.executions,
        heap=measure_heap(contender, kind, size, endpoint_url),
        errors=errors,
    )


def measure(endpoint_url: str, cases: tuple[tuple[str, int], ...] = CASES) -> list[Stored]:
    return [
        measure_one(contender, kind, size, endpoint_url)
        for kind, size in cases
        for contender in CONTENDERS
    ]


def _size_label(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):g} MB"
    return f"{size // 1024} KB"


def case_label(kind: str, size: int) -> str:
    return f"{_size_label(size)} {'random text' if kind == RANDOM else 'repetitive'}"


def _units(phase: Phase) -> str:
    return f"{phase.write_units:g} WCU, {phase.read_units:g} RCU"


def entropy_bytes(stored: Stored) -> float:
    """What an ideal coder needs for a random-text result: log2(alphabet) bits a character."""
    return stored.result_bytes * math.log2(len(TEXT_ALPHABET)) / 8


def _small_result_heap(results: list[Stored]) -> list[str]:
    """Why our first run of a small result can peak far above Powertools', measured now."""
    ours = [s for s in results if s.contender == OURS.slug and s.first_run == "stored"]
    theirs = {(s.kind, s.target_bytes): s for s in results if s.contender == POWERTOOLS.slug}
    if not ours:
        return []
    small = min(ours, key=lambda s: s.target_bytes)
    other = theirs.get((small.kind, small.target_bytes))
    if other is None or small.heap[0] < 3 * other.heap[0]:
        return []
    work = Work(result_bytes=small.target_bytes, random_text=small.kind == RANDOM)
    document = json.dumps(work.document, separators=(",", ":"))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        zlib.compress(document.encode(), 6)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return [
        f"Our first run of the {case_label(small.kind, small.target_bytes)} result peaks at "
        f"{kilobytes(small.heap[0])} against Powertools' {kilobytes(other.heap[0])}: "
        f"`zlib.compress` at level 6 alone allocates {kilobytes(peak - before)} of compressor "
        "state for it, whatever the input's size (transient; a smaller `wbits`/`memLevel` "
        "for small results would cut it)."
    ]


def section(results: list[Stored]) -> Section:
    names = {contender.slug: contender.name for contender in CONTENDERS}

    def label(stored: Stored) -> str:
        return f"{case_label(stored.kind, stored.target_bytes)} ({stored.result_bytes:,} B)"

    storage_rows = [
        [
            label(stored),
            names[stored.contender],
            stored.first_run,
            f"{stored.stored_bytes:,} B in {stored.items} item(s)" if stored.items else "—",
            f"{stored.record_bytes:,} B" if stored.items else "—",
            stored.replay,
            str(stored.executions),
            f"{kilobytes(stored.heap[0])} / {kilobytes(stored.heap[1])}",
        ]
        for stored in results
    ]
    capacity_rows = [
        [
            label(stored),
            names[stored.contender],
            stored.first.round_trips,
            _units(stored.first) + ("" if stored.first_run == "stored" else ", then failed"),
            stored.again.round_trips,
            _units(stored.again) + ("" if stored.replay.startswith("replayed") else ", failed"),
            f"${stored.again.dollars_per_million:,.2f}",
            f"{stored.first.priced_by} / {stored.again.priced_by}",
        ]
        for stored in results
    ]
    by_key = {(s.contender, s.kind, s.target_bytes): s for s in results}
    cases = sorted(
        {(s.kind, s.target_bytes) for s in results}, key=lambda c: (c[0] != REPETITIVE, c[1])
    )
    chart: dict[str, Any] = {"cases": [case_label(kind, size) for kind, size in cases]}
    for slug in (OURS.slug, POWERTOOLS.slug):
        chart[slug] = [
            by_key[slug, *case].stored_bytes if by_key[slug, *case].first_run == "stored" else None
            for case in cases
        ]
        chart[f"{slug}_replay_units"] = [
            by_key[slug, *case].again.write_units + by_key[slug, *case].again.read_units
            if by_key[slug, *case].replay == "replayed, equal"
            else None
            for case in cases
        ]
    budgets = []
    hundred = by_key.get((OURS.slug, REPETITIVE, 100 * 1024))
    if hundred is not None:
        budgets.append(
            Budget(
                "100 KB repetitive JSON result, stored size",
                "≤ 25 KB",
                kilobytes(hundred.stored_bytes),
                hundred.first_run == "stored" and hundred.stored_bytes <= COMPRESSED_BUDGET,
            )
        )
    noise = by_key.get((OURS.slug, RANDOM, 100 * 1024))
    if noise is not None:
        budgets.append(
            Budget(
                "100 KB random-text result, stored size",
                f"≤ {ENTROPY_SLACK:g}x its entropy ({kilobytes(int(entropy_bytes(noise)))})",
                f"{kilobytes(noise.stored_bytes)} = "
                f"{noise.stored_bytes / entropy_bytes(noise):.2f}x",
                noise.first_run == "stored"
                and noise.stored_bytes <= entropy_bytes(noise) * ENTROPY_SLACK,
            )
        )
    hot = by_key.get((OURS.slug, RANDOM, 300 * 1024))
    if hot is not None:
        budgets.append(
            Budget(
                "replay of a 300 KB random-text result",
                "≤ 1 WCU plus its reads",
                f"{_units(hot.again)} ({hot.again.priced_by})",
                hot.replay == "replayed, equal" and hot.again.write_units <= 1,
            )
        )
    large = [s for s in results if s.contender == OURS.slug and s.target_bytes > 400 * 1024]
    if large:
        budgets.append(
            Budget(
                "results past 400 KB replay, up to Lambda's 6 MB",
                "replayed, equal",
                "; ".join(f"{case_label(s.kind, s.target_bytes)}: {s.replay}" for s in large),
                all(s.replay == "replayed, equal" for s in large),
            )
        )
    notes = _small_result_heap(results)
    failures = [
        f"{names[stored.contender]}, {case_label(stored.kind, stored.target_bytes)}, {error}"
        for stored in results
        for error in stored.errors
    ]
    return Section(
        title="Storage and cost",
        method=(
            "One first run and one replay per library and result, each library on its own "
            "fresh table in DynamoDB Local. *Repetitive* results are orders with line items "
            "(ids and prices random, words from a small vocabulary: they compress as API "
            f"responses do); *random text* is characters drawn uniformly from {len(TEXT_ALPHABET)} "
            "(about 6 bits of entropy a byte: no compressor gets far below 75 %). Stored bytes "
            "are the items read back with a Scan, sized by DynamoDB's rules (attribute names "
            "plus values); the record item is what a failed conditional claim is billed on."
        ),
        tables=[
            Table(
                [
                    "result",
                    "library",
                    "first run",
                    "stored",
                    "record item",
                    "replay",
                    "handler runs",
                    "peak heap, first run / replay",
                ],
                storage_rows,
            ),
            Table(
                [
                    "result",
                    "library",
                    "round trips, first run",
                    "first run",
                    "round trips, replay",
                    "per replay",
                    "per million replays",
                    "priced by (first run / replay)",
                ],
                capacity_rows,
                caption=(
                    "Capacity **as DynamoDB Local reports it** (`ReturnConsumedCapacity`, asked "
                    "of every request) where it reports any, and **computed from DynamoDB's "
                    "documented rules** where it does not (a refused condition, so every "
                    "replay's claim): each write 1 WCU per KB of the larger of the item before "
                    "and the item written, rounded up per item, at least 1; twice that inside a "
                    "transaction; a failed conditional write billed like the write it refused; "
                    "each item read 1 RCU per 4 KB (a missing one too), half when eventually "
                    "consistent. A botocore `before-send` hook reads every item a request "
                    "touches just before it is sent. Dollars: on-demand request units in US "
                    "East, $0.625 per million writes and $0.125 per million reads. A warm-cache "
                    "replay makes no request and costs 0."
                ),
            ),
        ],
        budgets=budgets,
        notes=[
            "Peak heap is the most Python heap (`tracemalloc`) the invocation held above what "
            "was live when it started, in a separate run of the same case with nothing "
            "listening: the result, its JSON, its compressed form and botocore's request and "
            "response bodies all count.",
            *notes,
            *failures,
        ],
        chart=chart,
    )
