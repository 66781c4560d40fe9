"""`doctor`: a table's set-up checked the way an operator would, one line per check with the
fix for each that fails (the checks themselves: `_dev/doctor.py`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import tables, valkey_stores
from .exits import CommandError
from .reach import CREDENTIAL_CODES, is_loopback, port_flag
from .tables import add_layout_options, no_table

if TYPE_CHECKING:
    import argparse


def add_command(add: Any) -> None:
    """`doctor`, with the store's layout options."""
    checkup = add(
        "doctor",
        help="check a table's set-up (key schema, TTL, billing, backups, Regions), or a Valkey "
        "server's (--valkey-url), with fixes",
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
            "application-autoscaling:DescribeScalableTargets. With --valkey-url it checks a "
            "Valkey (or Redis) server for ValkeyStore instead: version, role and replicas, "
            "cluster mode, persistence, eviction policy, and warns that replication is "
            "asynchronous (a failover can lose an acknowledged claim); and it tries what the "
            "store sends (its scripts, a waiter's BLPOP, WAIT or WAITAOF) on a scratch key of "
            "its own under the store's prefix, removed afterwards: a command the URL's user "
            "may not run fails, with the ACL to grant."
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
    add_layout_options(checkup)
    checkup.add_argument(
        "--valkey-url",
        help="check this Valkey/Redis server for ValkeyStore instead of a table "
        "(default: IDEMPOTENCY_VALKEY_URL when no table is named, by argument or "
        "IDEMPOTENCY_TABLE, and no --endpoint is given)",
    )
    checkup.add_argument(
        "--cluster", action="store_true", help="with --valkey-url: the store uses cluster=True"
    )
    checkup.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="with --valkey-url: the store's replicas= (replicas each write waits for)",
    )
    checkup.add_argument(
        "--aof", action="store_true", help="with --valkey-url: the store uses aof=True (WAITAOF)"
    )
    checkup.add_argument(
        "--prefix",
        help="with --valkey-url: the store's prefix= (default: idempotency:), under which "
        "doctor tries the store's commands on a scratch key of its own",
    )
    checkup.add_argument("--json", action="store_true", help="print JSON")
    checkup.set_defaults(run=_cmd_doctor)


def _cmd_doctor(args: argparse.Namespace) -> int:
    """One line per check of the table's set-up, with the fix for each that fails; exit 1 when
    one fails (warnings alone: 0), 2 when the table cannot be described at all."""
    from botocore.config import Config
    from botocore.exceptions import ClientError, EndpointConnectionError

    from .. import doctor

    valkey_stores.from_environment(args)
    if args.valkey_url is not None:
        return _cmd_doctor_valkey(args)
    valkey_stores.refuse_valkey_options(args)
    # an operator waits for an answer: no minute of botocore's connection retries
    config = Config(connect_timeout=3, read_timeout=10, retries={"total_max_attempts": 2})
    store = tables.store_for(args, config)
    where = args.endpoint or f"region {store.client.meta.region_name}"
    try:
        table = store.client.describe_table(TableName=store.table_name)["Table"]
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "Unknown")
        if code == "ResourceNotFoundException":
            raise no_table(store, args) from exc
        if code in CREDENTIAL_CODES:
            raise CommandError(
                f"cannot describe table {store.table_name} at {where} ({code}): doctor needs "
                "dynamodb:DescribeTable, DescribeTimeToLive and DescribeContinuousBackups "
                "(and application-autoscaling:DescribeScalableTargets for a provisioned table)"
            ) from exc
        raise
    except EndpointConnectionError as exc:
        fix = (
            f"start one with `lambda-idempotency local{port_flag(args.endpoint)}`"
            if args.endpoint is not None and is_loopback(args.endpoint)
            else "check --endpoint or --region, and the network"
        )
        raise CommandError(f"cannot reach DynamoDB at {where}: {fix}") from exc
    autoscaling, unchecked = None, "a local endpoint has no Application Auto Scaling"
    if args.endpoint is None:
        autoscaling = tables.session_for(args).client(
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


def _cmd_doctor_valkey(args: argparse.Namespace) -> int:
    """doctor's lines for a Valkey server: exit 1 when a check failed, 2 when it cannot be
    reached or asked."""
    from urllib.parse import urlsplit

    import redis
    import redis.cluster

    from ..._base.errors import ConfigurationError
    from ..._stores.valkey.store import DEFAULT_PREFIX
    from ..._stores.valkey.urls import SCHEMES, checked_url, masked, redis_url
    from .. import doctor, doctor_valkey

    url, named = args.valkey_url, valkey_stores.named_by(args)
    if not url.startswith(SCHEMES):
        raise CommandError(f"{named} starts with one of {', '.join(SCHEMES)}")
    try:
        checked_url(url, cluster=args.cluster)  # the store would refuse it: say why first
    except ConfigurationError as exc:
        raise CommandError(f"{exc}: check {named}") from None
    if args.replicas < 0:
        raise CommandError("--replicas is 0 or more")
    prefix = DEFAULT_PREFIX if args.prefix is None else args.prefix
    if "{" in prefix or "}" in prefix:
        raise CommandError("--prefix has no braces (the store refuses such a prefix)")
    where = masked(url)
    options: dict[str, Any] = {"socket_timeout": 5, "socket_connect_timeout": 3}
    client = redis.Redis.from_url(redis_url(url), **options)
    built: list[Any] = []

    def connect() -> Any:
        """The client the store builds: a cluster client for a cluster (it asks for the
        slots' nodes as it starts), else the node's."""
        if not args.cluster:
            return client
        built.append(redis.cluster.RedisCluster.from_url(redis_url(url), **options))
        return built[-1]

    try:
        checks = doctor_valkey.diagnose(
            client,
            cluster=args.cluster,
            replicas=args.replicas,
            aof=args.aof,
            prefix=prefix,
            connect=connect,
            user=urlsplit(url).username or "default",
        )
    except redis.exceptions.AuthenticationError as exc:
        raise CommandError(
            f"Valkey at {where} refused the credentials in the URL: check {named}"
        ) from exc
    except redis.exceptions.NoPermissionError as exc:
        raise CommandError(
            f"Valkey at {where} refused what doctor asks ({exc}): doctor needs INFO (and "
            "CLUSTER INFO, CLUSTER NODES on a cluster)"
        ) from exc
    except redis.exceptions.RedisError as exc:
        raise CommandError(
            f"cannot ask Valkey at {where} ({type(exc).__name__}): check {named} and the network"
        ) from exc
    finally:
        for each in (client, *built):
            each.close()
    closing, status = doctor.summary(checks)
    if args.json:
        print(json.dumps({"valkey": where, "checks": [c.as_dict() for c in checks]}))
        return status
    mode = "cluster" if args.cluster else "standalone"
    aof = ", aof=True" if args.aof else ""
    named = "" if args.prefix is None else f", prefix={prefix!r}"
    print(f"valkey {where} ({mode} store, replicas={args.replicas}{aof}{named})")
    width = max(len(check.name) for check in checks)
    for check in checks:
        print(check.line(width))
    print(closing)
    return status
