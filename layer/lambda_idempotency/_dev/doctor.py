"""`lambda-idempotency doctor TABLE`: a table checked the way an operator would, before it
surprises anyone in production.

Each check reads what DynamoDB says of the table (DescribeTable, DescribeTimeToLive,
DescribeContinuousBackups, and Application Auto Scaling's DescribeScalableTargets for a
provisioned table) and compares it with what the store needs. The names it expects (key
attributes, the TTL attribute) come from the store itself, so a store configured with
`layout="powertools"`, `sort_key_attr=` or its own attribute names is checked against its own
layout. A check that cannot be made (DynamoDB Local has no point-in-time recovery; the
credentials may not call Auto Scaling) says so instead of guessing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from .._stores.dynamodb.store import DynamoDBStore


class Status(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"
    UNKNOWN = "??"
    """The endpoint or the credentials could not answer: not counted as a failure."""


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def line(self, width: int) -> str:
        fix = f". Fix: {self.fix}" if self.fix else ""
        return f"{self.status.value:<4}  {self.name:<{width}}  {self.detail}{fix}"

    def as_dict(self) -> dict[str, str]:
        return {
            "check": self.name,
            "status": self.status.name.lower(),
            "detail": self.detail,
            "fix": self.fix,
        }


def diagnose(
    store: DynamoDBStore,
    table: Mapping[str, Any],
    *,
    layout: str,
    autoscaling: Any | None,
    autoscaling_unchecked: str = "",
) -> list[Check]:
    """Every check of the table `table` (DescribeTable's `Table`) for `store`.

    `autoscaling` is an Application Auto Scaling client, or None when it cannot be asked
    (`autoscaling_unchecked` says why, e.g. a local endpoint)."""
    client = store.client
    strong = table.get("MultiRegionConsistency") == "STRONG" and bool(table.get("Replicas"))
    return [
        key_schema(store, table, layout),
        time_to_live(store, client, multi_region_strong=strong),
        billing(table, autoscaling, autoscaling_unchecked),
        point_in_time_recovery(store.table_name, client),
        deletion_protection(table),
        regions(table),
    ]


# -- key schema ------------------------------------------------------------------------------


def _key_text(name: str, key_type: str) -> str:
    return f"{name} ({key_type})"


def key_schema(store: DynamoDBStore, table: Mapping[str, Any], layout: str) -> Check:
    """The key the store writes: its `pk` attribute as a string partition key, and with
    `sort_key_attr` a string sort key of that name."""
    types = {a["AttributeName"]: a["AttributeType"] for a in table["AttributeDefinitions"]}
    keys = {k["KeyType"]: k["AttributeName"] for k in table["KeySchema"]}
    wanted = {"HASH": store.names.pk}
    if store.sort_key_attr is not None:
        wanted["RANGE"] = store.sort_key_attr

    def describe(schema: dict[str, str], with_types: bool) -> str:
        parts = []
        for key_type, label in (("HASH", "partition key"), ("RANGE", "sort key")):
            if key_type in schema:
                name = schema[key_type]
                shown = types.get(name, "?") if with_types else "S"
                parts.append(f"{label} {_key_text(name, shown)}")
        return ", ".join(parts)

    needed = f"the {layout} layout" + (
        f" with sort_key_attr={store.sort_key_attr!r}" if store.sort_key_attr else ""
    )
    has = describe(keys, with_types=True)
    if keys == wanted and all(types.get(name) == "S" for name in keys.values()):
        return Check("key schema", Status.OK, f"{has}, as {needed} needs")
    shared_item = keys == {"HASH": store.names.pk} and types.get(store.names.pk) == "S"
    consequence = (
        "every key would land on one item (its partition key holds the store's static value)"
        if shared_item
        else "every claim would fail with a ValidationException"
    )
    return Check(
        "key schema",
        Status.FAIL,
        f"{has}; {needed} needs {describe(wanted, with_types=False)}: {consequence}",
        _key_fix(store, keys, types, layout),
    )


def _key_fix(store: DynamoDBStore, keys: dict[str, str], types: dict[str, str], layout: str) -> str:
    """The likeliest fix: the store's options that match this table, else a new table."""
    from .._stores.dynamodb.store import DynamoDBStore

    hints = []
    if all(types.get(name) in (None, "S") for name in keys.values()):
        other = "powertools" if layout == "native" else "native"
        partition = keys.get("HASH")
        if partition == DynamoDBStore(layout=other).names.pk:
            hints.append(f"--layout {other}")
        elif partition is not None and partition != store.names.pk:
            hints.append(f"--key-attr {partition}")
        if "RANGE" in keys and keys["RANGE"] != store.sort_key_attr:
            hints.append(f"--sort-key-attr {keys['RANGE']}")
        if "RANGE" not in keys and store.sort_key_attr is not None:
            hints.append("no --sort-key-attr (this table has no sort key)")
    table_fix = (
        f"a key schema cannot be changed: create a table with partition key {store.names.pk} (S)"
        + (f" and sort key {store.sort_key_attr} (S)" if store.sort_key_attr else "")
        + (" (template.yaml's IdempotencyTable is one)" if _is_templates(store) else "")
    )
    if hints:
        return (
            f"if this is the table you meant, configure the store as it is: {', '.join(hints)} "
            f"(the same options in code). Otherwise {table_fix}"
        )
    return table_fix[0].upper() + table_fix[1:]


def _is_templates(store: DynamoDBStore) -> bool:
    """The template's table has the native layout's default key."""
    from .._stores.record import AttributeNames

    return store.names.pk == AttributeNames().pk and store.sort_key_attr is None


# -- time to live ----------------------------------------------------------------------------


def time_to_live(
    store: DynamoDBStore, client: DynamoDBClient, *, multi_region_strong: bool
) -> Check:
    """TTL on the store's expiration attribute: records are deleted a while after they expire
    (they count as absent from their expiry on, so TTL is about storage and privacy, not
    correctness)."""
    expected = store.names.expiration
    table_name = store.table_name
    answer = _ask(lambda: client.describe_time_to_live(TableName=table_name))
    if isinstance(answer, str):
        return Check("TTL", Status.UNKNOWN, f"not checked: {answer}")
    description = answer["TimeToLiveDescription"]
    status = description.get("TimeToLiveStatus", "DISABLED")
    attribute = description.get("AttributeName")
    enable = (
        f"`aws dynamodb update-time-to-live --table-name {table_name} "
        f"--time-to-live-specification Enabled=true,AttributeName={expected}`"
    )
    if status in ("ENABLED", "ENABLING") and attribute == expected:
        note = " (being enabled: up to an hour)" if status == "ENABLING" else ""
        return Check(
            "TTL",
            Status.OK,
            f"on {expected}{note}: DynamoDB deletes expired records, typically within two days",
        )
    if multi_region_strong:
        return Check(
            "TTL",
            Status.WARN,
            "off; a multi-Region strongly consistent table cannot have TTL: expired records "
            "count as absent but stay stored (results included) until deleted",
            "delete expired records yourself (a scheduled scan on "
            f"{expected} < now), or keep this table single-Region",
        )
    if status in ("ENABLED", "ENABLING"):
        return Check(
            "TTL",
            Status.FAIL,
            f"on {attribute}, but the store writes its expiry to {expected}: expired records "
            "are never deleted",
            f"if {attribute} is the store's, name it: --expiry-attr {attribute}; otherwise "
            f"disable TTL on {attribute}, then {enable} (DynamoDB takes one TTL change an hour)",
        )
    if status == "DISABLING":
        return Check(
            "TTL",
            Status.FAIL,
            f"being disabled (was on {attribute}): expired records will stay stored",
            f"once it is off (up to an hour), {enable}",
        )
    return Check(
        "TTL",
        Status.FAIL,
        "off: expired records count as absent but stay stored (results included) forever",
        enable,
    )


# -- billing ---------------------------------------------------------------------------------


def billing(table: Mapping[str, Any], autoscaling: Any | None, unchecked: str) -> Check:
    """What a burst of retries meets: every replay and every refused duplicate is a
    conditional write, billed and throttled as one."""
    name = table["TableName"]
    mode = table.get("BillingModeSummary", {}).get("BillingMode", "PROVISIONED")
    if mode == "PAY_PER_REQUEST":
        cap = table.get("OnDemandThroughput", {}).get("MaxWriteRequestUnits", -1)
        capped = (
            f", capped at {cap} writes a second (MaxWriteRequestUnits): a burst past it is "
            "throttled"
            if cap > 0
            else ""
        )
        return Check(
            "billing",
            Status.OK,
            "on demand: a burst of retries (each replay is a write) is served at up to twice the "
            f"table's previous peak at once (4,000 writes a second on a new table){capped}",
        )
    writes = table.get("ProvisionedThroughput", {}).get("WriteCapacityUnits", 0)
    head = f"provisioned, {writes} WCU"
    burst = (
        f"retries past {writes} writes a second (each replay and refused duplicate is one) run "
        "on burst capacity (up to 300 s of unused capacity, best effort), then are throttled"
    )
    switch = f"`aws dynamodb update-table --table-name {name} --billing-mode PAY_PER_REQUEST`"
    answer = (
        unchecked
        if autoscaling is None
        else _ask(
            lambda: autoscaling.describe_scalable_targets(
                ServiceNamespace="dynamodb",
                ResourceIds=[f"table/{name}"],
                ScalableDimension="dynamodb:table:WriteCapacityUnits",
            )
        )
    )
    if isinstance(answer, str):
        return Check(
            "billing",
            Status.WARN,
            f"{head}, write auto scaling not checked ({answer}): {burst}",
            f"make sure write auto scaling is on, or {switch}",
        )
    targets = answer.get("ScalableTargets", [])
    if not targets:
        return Check(
            "billing",
            Status.WARN,
            f"{head}, no write auto scaling: {burst}",
            f"{switch}, or register write auto scaling (Application Auto Scaling)",
        )
    target = targets[0]
    return Check(
        "billing",
        Status.OK,
        f"{head}, write auto scaling between {target['MinCapacity']} and "
        f"{target['MaxCapacity']} WCU: {burst} until it scales up (in minutes)",
    )


# -- backups and protection ------------------------------------------------------------------


def point_in_time_recovery(table_name: str, client: DynamoDBClient) -> Check:
    """A table lost or overwritten without a backup forgets every completed key: each one's
    next retry runs its effect again."""
    answer = _ask(lambda: client.describe_continuous_backups(TableName=table_name))
    if isinstance(answer, str):
        return Check("point-in-time recovery", Status.UNKNOWN, f"not checked: {answer}")
    description = answer["ContinuousBackupsDescription"].get("PointInTimeRecoveryDescription", {})
    if description.get("PointInTimeRecoveryStatus") == "ENABLED":
        days = description.get("RecoveryPeriodInDays")
        period = f" (restorable to any second of the last {days} days)" if days else ""
        return Check("point-in-time recovery", Status.OK, f"on{period}")
    return Check(
        "point-in-time recovery",
        Status.FAIL,
        "off: a table lost or overwritten forgets every completed key, and each key's next "
        "retry runs its effect again",
        f"`aws dynamodb update-continuous-backups --table-name {table_name} "
        "--point-in-time-recovery-specification PointInTimeRecoveryEnabled=true`",
    )


def deletion_protection(table: Mapping[str, Any]) -> Check:
    if "DeletionProtectionEnabled" not in table:
        return Check("deletion protection", Status.UNKNOWN, "not reported by this endpoint")
    if table["DeletionProtectionEnabled"]:
        return Check("deletion protection", Status.OK, "on")
    return Check(
        "deletion protection",
        Status.FAIL,
        "off: one DeleteTable (a stack deleted, a script run on the wrong account) forgets "
        "every completed key",
        f"`aws dynamodb update-table --table-name {table['TableName']} "
        "--deletion-protection-enabled` (in a template: DeletionProtectionEnabled: true)",
    )


# -- Regions ---------------------------------------------------------------------------------


def regions(table: Mapping[str, Any]) -> Check:
    """A global table's consistency mode decides whether a key's claim is exclusive across
    Regions (docs/protocol.md, "Regions")."""
    replicas = sorted(r.get("RegionName", "?") for r in table.get("Replicas") or [])
    if not replicas:
        return Check("Regions", Status.OK, "single-Region table (no replicas)")
    where = ", ".join(replicas)
    if table.get("MultiRegionConsistency") == "STRONG":
        return Check(
            "Regions",
            Status.OK,
            f"global table, multi-Region strong consistency (replicas: {where}): a claim holds "
            "in every Region; enlisted writes (TransactWriteItems) are refused on it",
        )
    return Check(
        "Regions",
        Status.WARN,
        f"global table, multi-Region eventual consistency (replicas: {where}): each Region "
        "checks a claim against its own replica and concurrent writes resolve last writer "
        "wins, so a key retried in two Regions at once can run in both",
        "route each key to one Region (see docs/protocol.md, Regions), or use a table with "
        "multi-Region strong consistency",
    )


# -- helpers ---------------------------------------------------------------------------------


def _ask(call: Callable[[], Any]) -> Any:
    """The answer, or why there is none (an endpoint without the operation, a refused
    permission) as a short phrase."""
    try:
        return call()
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if code == "UnknownOperationException":
            return "this endpoint does not implement it (DynamoDB Local does not)"
        if code in ("AccessDeniedException", "AccessDenied", "UnauthorizedOperation"):
            return f"{code}: these credentials may not ask"
        return code
    except BotoCoreError as exc:
        return type(exc).__name__


def summary(checks: Sequence[Check]) -> tuple[str, int]:
    """The closing line and the exit code: 1 when a check failed, else 0 (warnings too)."""
    failed = [c.name for c in checks if c.status is Status.FAIL]
    warned = [c.name for c in checks if c.status is Status.WARN]
    unknown = [c.name for c in checks if c.status is Status.UNKNOWN]
    parts = []
    if failed:
        parts.append(f"{len(failed)} failed ({', '.join(failed)})")
    if warned:
        parts.append(f"{len(warned)} warning{'s' * (len(warned) > 1)} ({', '.join(warned)})")
    if unknown:
        parts.append(f"{len(unknown)} not checked ({', '.join(unknown)})")
    if failed:
        return "; ".join(parts) + ": exit 1", 1
    if parts:
        return "no check failed; " + "; ".join(parts) + ": exit 0", 0
    return f"all {len(checks)} checks ok", 0
