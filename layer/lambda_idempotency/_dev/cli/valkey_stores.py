"""The Valkey server an operator command names (--valkey-url, --cluster, --prefix), opened as
the functions' `ValkeyStore` opens it; a server that cannot be reached, refuses the
credentials or is of the other cluster mode, told in one line (never the URL's password)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..._base.errors import ConfigurationError, StoreError
from ..._stores.valkey.connection import URL_VARIABLE
from .exits import CommandError
from .project import load_template, template_path

if TYPE_CHECKING:
    from ..._stores.valkey.store import ValkeyStore

_DYNAMODB_ONLY = {
    "table": "--table",
    "endpoint": "--endpoint",
    "region": "--region",
    "profile": "--profile",
    "sort_key_attr": "--sort-key-attr",
    "key_attr": "--key-attr",
    "expiry_attr": "--expiry-attr",
    "hash_function": "--hash-function",
}


def add_options(parser: argparse.ArgumentParser) -> None:
    """--valkey-url, --cluster and --prefix: a ValkeyStore's records instead of a table's."""
    parser.add_argument(
        "--valkey-url",
        help="the records of a ValkeyStore at this URL instead of a table's "
        "(valkey://, valkeys://, redis://, rediss://, unix://; default: IDEMPOTENCY_VALKEY_URL "
        "where no table is found: none named, no IDEMPOTENCY_TABLE, no template naming one)",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="with --valkey-url: the store uses cluster=True"
    )
    parser.add_argument(
        "--prefix", help="with --valkey-url: the store's prefix= (default: idempotency:)"
    )


def from_environment(args: argparse.Namespace) -> None:
    """A command that finds no table (no --valkey-url, no table or other DynamoDB option, even
    an empty one, no IDEMPOTENCY_TABLE, no template that names one) reads the store
    IDEMPOTENCY_VALKEY_URL names, as `ValkeyStore()` does: what `local --valkey --print-env`
    exports is enough. Only where the command would otherwise find no table: a table found
    any way is read."""
    if getattr(args, "valkey_url", None) is not None or os.environ.get("IDEMPOTENCY_TABLE"):
        return
    if any(getattr(args, name, None) is not None for name in _DYNAMODB_ONLY):
        return
    if getattr(args, "layout", "native") != "native":
        return
    if _template_names_a_table(args):
        return
    url = os.environ.get(URL_VARIABLE) or None
    if url is not None:
        args.valkey_url = url
        args.valkey_url_named_by = URL_VARIABLE  # what a line about the server says to check


def _template_names_a_table(args: argparse.Namespace) -> bool:
    """Whether the command's template (a SAM project's) names the idempotency table; one
    that cannot be read says so on the table's path, as before."""
    if getattr(args, "template", None) is None or template_path(args) is None:
        return False
    try:
        load_template(args).idempotency_table()
    except ConfigurationError:
        return False  # its functions keep no records in a table: a Valkey project's
    except CommandError:
        return True
    return True


def wanted(args: argparse.Namespace) -> bool:
    """Whether the command reads a Valkey store (--valkey-url, else `from_environment`); the
    options of the other refused."""
    from_environment(args)
    url = getattr(args, "valkey_url", None)
    if url is None:
        refuse_valkey_options(args)
        return False
    given = [flag for name, flag in _DYNAMODB_ONLY.items() if getattr(args, name, None) is not None]
    if getattr(args, "layout", "native") != "native":
        given.append("--layout")
    if given:
        raise CommandError(f"{', '.join(given)}: for a DynamoDB table, not with --valkey-url")
    return True


def refuse_valkey_options(args: argparse.Namespace) -> None:
    """A Valkey store's options where a table is read: one line, never silently ignored."""
    for flag in ("cluster", "prefix", "aof"):
        if getattr(args, flag, None):
            raise CommandError(f"--{flag} is for a Valkey store: add --valkey-url URL")
    if getattr(args, "replicas", 0):
        raise CommandError("--replicas is for a Valkey store: add --valkey-url URL")


def store_for(args: argparse.Namespace) -> ValkeyStore:
    """The store as the functions build it: URL, cluster=, prefix= (its timeouts: 5 s)."""
    from ..._stores.valkey.store import DEFAULT_PREFIX, ValkeyStore

    prefix = DEFAULT_PREFIX if args.prefix is None else args.prefix
    try:
        return ValkeyStore(args.valkey_url, cluster=args.cluster, prefix=prefix)
    except ConfigurationError as exc:  # its message never holds the URL
        raise CommandError(f"{exc}: check {named_by(args)}") from None


def named_by(args: argparse.Namespace) -> str:
    """What named the URL, for a line that says what to check: --valkey-url, or the variable
    (`from_environment`)."""
    return str(getattr(args, "valkey_url_named_by", "--valkey-url"))


def where(args: argparse.Namespace) -> str:
    """The server and prefix, as a line names them (the password masked)."""
    from ..._stores.valkey.store import DEFAULT_PREFIX
    from ..._stores.valkey.urls import masked

    prefix = DEFAULT_PREFIX if args.prefix is None else args.prefix
    return f"Valkey {masked(args.valkey_url)} (prefix {prefix})"


def check_mode(store: ValkeyStore, args: argparse.Namespace) -> None:
    """A cluster named without --cluster: a node's client would SCAN that node's keys only,
    and `namespaces` or `stuck` would tell a part as the whole. (The other way round, the
    cluster client refuses to start.) Unchecked when INFO is refused to the URL's user."""
    from redis.exceptions import RedisError, ResponseError

    if args.cluster:
        return
    try:
        enabled = str(store.client.info("cluster").get("cluster_enabled", 0)) == "1"
    except ResponseError:
        return
    except RedisError as exc:  # as the store's own calls say it, for on_server
        reason = type(exc).__name__
        raise StoreError(f"Valkey info failed ({reason})", code=reason) from exc
    if enabled:
        raise CommandError(f"{where(args)} is a cluster: add --cluster")


@contextlib.contextmanager
def on_server(args: argparse.Namespace) -> Iterator[None]:
    """A server not reached, credentials refused, a command refused to the URL's user, or a
    cluster mode other than --cluster's: one line each, with the fix."""
    from redis.exceptions import RedisClusterException

    server = where(args)
    named = named_by(args)
    try:
        yield
    except StoreError as exc:
        code = exc.code or ""
        if code == "AuthenticationError":
            raise CommandError(
                f"{server} refused the credentials in the URL: check {named}"
            ) from exc
        if code in {"ConnectionError", "TimeoutError"}:
            raise CommandError(
                f"cannot reach {server} ({code}): check {named} and the network"
            ) from exc
        if code in {"NoPermissionError", "AuthorizationError"}:
            raise CommandError(
                f"{server} refused a command to the URL's user ({code}): "
                "`lambda-idempotency doctor --valkey-url URL` names the ACL to grant"
            ) from exc
        if code in {"MovedError", "AskError"} and not args.cluster:
            raise CommandError(f"{server} is a cluster: add --cluster") from exc
        if code == "RedisClusterException":  # the cluster client could not start
            raise _not_a_cluster(server, exc.__cause__, named) from exc
        raise
    except RedisClusterException as exc:
        raise _not_a_cluster(server, exc, named) from exc


def _not_a_cluster(server: str, cause: BaseException | None, named: str) -> CommandError:
    if "not enabled" in str(cause):
        return CommandError(f"{server} is not in cluster mode: drop --cluster")
    return CommandError(f"cannot reach {server} as a cluster: check {named} and the network")
