"""Storage and cost: what a stored result weighs in DynamoDB, and the capacity it consumes.

Each library runs a handler returning a JSON result of 1 KB, 100 KB and 1 MB against its own
fresh table on DynamoDB Local, then replays it. A botocore hook asks every request for
`ReturnConsumedCapacity=TOTAL` and adds up what comes back; the stored items are read back
with a Scan and sized by DynamoDB's item-size rules.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from typing import Any

from .contenders import CONTENDERS, OURS, POWERTOOLS, Contender
from .report import Budget, Section, Table, kilobytes
from .workload import LambdaContext, Work, create_table, dynamodb_client, order_event

SIZES = (1024, 100 * 1024, 1024 * 1024)
COMPRESSED_BUDGET = 25 * 1024
"""A 100 KB JSON result stores in at most 25 KB (DESIGN.md, Budgets)."""
_tables = itertools.count()


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes DynamoDB bills for one attribute value (its name is counted by the caller)."""
    (kind, content), *_ = value.items()
    if kind == "S":
        return len(content.encode())
    if kind == "B":
        return len(content)
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
    return max(1, math.ceil(size / 1024))


class CapacityMeter:
    """Adds `ReturnConsumedCapacity=TOTAL` to every request that takes it, and sums what
    DynamoDB reports back, reads and writes apart."""

    WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})

    def __init__(self, client: Any) -> None:
        self.read_units = 0.0
        self.write_units = 0.0
        client.meta.events.register("provide-client-params.dynamodb", self._ask)
        client.meta.events.register("after-call.dynamodb", self._add)

    def _ask(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _add(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        consumed = parsed.get("ConsumedCapacity")
        entries = consumed if isinstance(consumed, list) else [consumed] if consumed else []
        units = sum(float(entry.get("CapacityUnits", 0)) for entry in entries)
        if model.name in self.WRITES:
            self.write_units += units
        else:
            self.read_units += units

    def take(self) -> tuple[float, float]:
        taken = self.read_units, self.write_units
        self.read_units = self.write_units = 0.0
        return taken


@dataclass(frozen=True)
class Stored:
    contender: str
    target_bytes: int
    """The size asked for: 1 KB, 100 KB or 1 MB."""
    result_bytes: int
    """The result's JSON as the handler returns it."""
    first_run: str
    first_run_wcu: float
    items: int
    stored_bytes: int
    record_bytes: int
    """The idempotency record alone (without chunk items): what a failed claim is billed on."""
    replay: str
    replay_rcu: float
    executions: int
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


def measure_one(contender: Contender, size: int, endpoint_url: str) -> Stored:
    client = dynamodb_client(endpoint_url)
    meter = CapacityMeter(client)
    table = create_table(
        client, f"bench-storage-{contender.slug}-{next(_tables)}", contender.key_attribute
    )
    meter.take()
    work = Work(result_bytes=size)
    handler = contender.wrap(client, table, work.handler(), cache=False)
    event, context = order_event(f"storage-{size}"), LambdaContext()
    expected = json.loads(json.dumps(work.document))

    _, first_error = _attempt(lambda: handler(event, context))
    _, first_wcu = meter.take()
    items = client.scan(TableName=table, ConsistentRead=True)["Items"]
    meter.take()
    value, replay_error = _attempt(lambda: handler(event, context))
    replay_rcu, _ = meter.take()
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
        target_bytes=size,
        result_bytes=len(json.dumps(work.document, separators=(",", ":")).encode()),
        first_run=first_run,
        first_run_wcu=first_wcu,
        items=len(items),
        stored_bytes=sum(sizes),
        record_bytes=max(record, default=0),
        replay=replay,
        errors=errors,
        replay_rcu=replay_rcu,
        executions=work.executions,
    )


def measure(endpoint_url: str, sizes: tuple[int, ...] = SIZES) -> list[Stored]:
    return [
        measure_one(contender, size, endpoint_url) for size in sizes for contender in CONTENDERS
    ]


def _size_label(size: int) -> str:
    return f"{size // (1024 * 1024)} MB" if size >= 1024 * 1024 else f"{size // 1024} KB"


def section(results: list[Stored]) -> Section:
    names = {contender.slug: contender.name for contender in CONTENDERS}
    rows = [
        [
            f"{_size_label(stored.target_bytes)} ({stored.result_bytes:,} B of JSON)",
            names[stored.contender],
            stored.first_run,
            f"{stored.stored_bytes:,} B in {stored.items} item(s)" if stored.items else "—",
            f"{stored.first_run_wcu:g}",
            str(write_units(stored.record_bytes)) if stored.items else "—",
            stored.replay,
            f"{stored.replay_rcu:g}",
            str(stored.executions),
        ]
        for stored in results
    ]
    by_key = {(stored.contender, stored.target_bytes): stored for stored in results}
    sizes = sorted({stored.target_bytes for stored in results})
    chart: dict[str, Any] = {"sizes": [_size_label(size) for size in sizes]}
    for slug in (OURS.slug, POWERTOOLS.slug):
        chart[slug] = [
            by_key[slug, size].stored_bytes if by_key[slug, size].first_run == "stored" else None
            for size in sizes
        ]
    budgets = []
    hundred = by_key.get((OURS.slug, 100 * 1024))
    if hundred is not None:
        budgets.append(
            Budget(
                "100 KB JSON result, stored size",
                "≤ 25 KB",
                kilobytes(hundred.stored_bytes),
                hundred.first_run == "stored" and hundred.stored_bytes <= COMPRESSED_BUDGET,
            )
        )
    large = [s for s in results if s.contender == OURS.slug and s.target_bytes > 400 * 1024]
    if large:
        budgets.append(
            Budget(
                "results past 400 KB replay",
                "replayed, equal",
                "; ".join(f"{_size_label(s.target_bytes)}: {s.replay}" for s in large),
                all(s.replay == "replayed, equal" for s in large),
            )
        )
    failures = [
        f"{names[stored.contender]}, {_size_label(stored.target_bytes)}, {error}"
        for stored in results
        for error in stored.errors
    ]
    return Section(
        title="Storage and cost",
        method=(
            "One first run and one replay per library and result size, each library on its "
            "own fresh table in DynamoDB Local. Consumed capacity is what DynamoDB Local "
            "reports for `ReturnConsumedCapacity=TOTAL` (added to every request by a botocore "
            "hook); stored bytes are the items read back with a Scan, sized by DynamoDB's "
            "rules (attribute names plus values)."
        ),
        tables=[
            Table(
                [
                    "result",
                    "library",
                    "first run",
                    "stored",
                    "WCU, first run",
                    "WCU per replay",
                    "replay",
                    "RCU per replay",
                    "handler runs",
                ],
                rows,
            )
        ],
        budgets=budgets,
        notes=[
            "WCU per replay is computed, not reported: a replay is a failed conditional "
            "write, which DynamoDB bills by the larger of the existing and the new item "
            "(1 WCU per KB, at least 1), and DynamoDB Local reports no capacity on a failed "
            "condition. Our chunk items are not part of that write; a replay reads them back "
            "with BatchGetItem (the RCU column).",
            *failures,
        ],
        chart=chart,
    )
