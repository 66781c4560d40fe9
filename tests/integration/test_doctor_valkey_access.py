"""`doctor --valkey-url` tries what the store sends, as the URL's ACL user, on real servers:
each permission the store needs taken from a user in turn, doctor fails naming it and the
ACL to grant, and once that is granted, the same user passes. Scratch keys never outlive it,
and a user's record is never touched."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from lambda_idempotency import ValkeyStore
from lambda_idempotency._dev import cli, doctor_valkey_access
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, ValkeyServer, call

pytestmark = pytest.mark.valkey

PASSWORD = "s3cret-pw"


class Users:
    """ACL users made on servers' nodes for one test, deleted after it."""

    def __init__(self) -> None:
        self.made: list[tuple[int, str]] = []

    def make(self, ports: list[int], *rules: str, keys: str = "~*") -> str:
        name = f"doctor-{uuid.uuid4().hex[:8]}"
        for port in ports:
            call(port, "ACL", "SETUSER", name, "reset", "on", f">{PASSWORD}", keys, "&*", *rules)
            self.made.append((port, name))
        return name

    def grant(self, ports: list[int], name: str, *rules: str) -> None:
        for port in ports:
            call(port, "ACL", "SETUSER", name, *rules)


@pytest.fixture
def users() -> Iterator[Users]:
    made = Users()
    yield made
    for port, name in made.made:
        call(port, "ACL", "DELUSER", name)


def url_of(port: int, name: str) -> str:
    return f"redis://{name}:{PASSWORD}@127.0.0.1:{port}"


def doctor(capsys: Any, url: str, *options: str) -> tuple[int, str, str]:
    """Exit status, the `commands` line, the whole output (stdout and stderr)."""
    status = cli.main(["doctor", "--valkey-url", url, *options])
    captured = capsys.readouterr()
    line = next((x for x in captured.out.splitlines() if x[6:].startswith("commands ")), "")
    return status, line, captured.out + captured.err


def scratch_keys(port: int) -> list[Any]:
    return call(port, "KEYS", "*lambda-idempotency-doctor-*")  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("rules", "keys", "options", "refused", "grant"),
    [
        (
            ["+@all", "-@scripting"],
            "~*",
            [],
            "the store's scripts (SCRIPT LOAD not permitted): every claim fails",
            "+@scripting",
        ),
        (
            ["+@all", "-hset"],
            "~*",
            [],
            "the store's scripts (HSET not permitted): every claim fails",
            "+hset",
        ),
        (
            ["+@all", "-rpush"],
            "~*",
            [],
            "the completion's wake-up (SMEMBERS, RPUSH in its script): waiters poll",
            "+smembers +rpush",
        ),
        (
            ["+@all", "-blpop"],
            "~*",
            [],
            "BLPOP (not permitted): a waiter sleeps out each poll interval instead of waking",
            "+blpop",
        ),
        (
            ["+@all", "-waitaof"],
            "~*",
            ["--aof"],
            "WAITAOF (not permitted): every claim fails",
            "+waitaof",
        ),
        (
            ["+@all"],
            "~orders:*",
            [],
            "the store's scripts (keys under idempotency: not permitted): every claim fails",
            "~idempotency:*",
        ),
    ],
    ids=["no-scripting", "no-hset-in-a-script", "no-rpush", "no-blpop", "no-waitaof", "keys"],
)
def test_a_user_refused_what_the_store_sends_fails_with_the_acl_to_grant(
    rules: list[str],
    keys: str,
    options: list[str],
    refused: str,
    grant: str,
    valkey_node: ValkeyServer,
    users: Users,
    capsys: Any,
) -> None:
    name = users.make([valkey_node.port], *rules, keys=keys)
    url = url_of(valkey_node.port, name)

    status, line, out = doctor(capsys, url, *options)

    assert status == 1, out
    assert line.startswith("FAIL") and refused in line, line
    assert f"Fix: grant the user what the store sends: ACL SETUSER {name} {grant} " in line
    assert out.splitlines()[-1].startswith("1 failed (commands)")
    assert PASSWORD not in out
    assert scratch_keys(valkey_node.port) == []

    users.grant([valkey_node.port], name, *grant.split())  # the fix doctor named

    status, line, out = doctor(capsys, url, *options)
    assert status == 0 and line.startswith("ok"), out


def test_a_user_refused_wait_fails_where_the_store_waits_for_replicas(
    valkey_pair: ValkeyPair, users: Users, capsys: Any
) -> None:
    port = valkey_pair.primary.port
    name = users.make([port], "+@all", "-wait")

    status, line, out = doctor(capsys, url_of(port, name))
    assert status == 0 and line.startswith("ok"), out  # replicas=0: the store sends no WAIT

    status, line, out = doctor(capsys, url_of(port, name), "--replicas", "1")
    assert status == 1, out
    assert "WAIT (not permitted): every claim fails" in line
    assert f"ACL SETUSER {name} +wait " in line


def test_a_scratch_key_of_its_own_under_the_stores_prefix_and_no_users_record_touched(
    valkey_node: ValkeyServer, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"shop-{uuid.uuid4().hex[:6]}:"
    store = ValkeyStore(valkey_node.url, prefix=prefix)
    now = time.time_ns() // 1_000_000
    pk = f"Orders.app.handler#{uuid.uuid4().hex * 2}"
    store.claim(
        pk,
        owner="holder",
        payload_hash=None,
        now_ms=now,
        lease_until_ms=now + 60_000,
        expiration_s=now // 1000 + 3600,
    )
    before = call(valkey_node.port, "HGETALL", store.key_of(pk))
    seen: list[str] = []
    removed = doctor_valkey_access._removed

    def watch(node: Any, *keys: str) -> bool:
        seen.extend(keys)
        return removed(node, *keys)

    monkeypatch.setattr(doctor_valkey_access, "_removed", watch)

    status, line, out = doctor(capsys, valkey_node.url, "--prefix", prefix)

    assert status == 0 and line.startswith("ok") and f"under {prefix} (removed)" in line, out
    assert out.splitlines()[0].endswith(f"prefix='{prefix}')")
    assert seen and all(key.startswith(prefix + "{lambda-idempotency-doctor-") for key in seen)
    assert call(valkey_node.port, "HGETALL", store.key_of(pk)) == before
    assert call(valkey_node.port, "KEYS", f"{prefix}*") == [store.key_of(pk)]
    store.close()


def test_on_a_cluster_a_user_without_scripting_fails_on_the_keys_node(
    valkey_cluster: ValkeyCluster, users: Users, capsys: Any
) -> None:
    ports = [node.port for node in valkey_cluster.nodes]
    name = users.make(ports, "+@all", "-@scripting")
    url = url_of(valkey_cluster.nodes[0].port, name)

    status, line, out = doctor(capsys, url, "--cluster")

    assert status == 1, out
    assert "the store's scripts (SCRIPT LOAD not permitted): every claim fails" in line
    assert PASSWORD not in out
    assert all(scratch_keys(port) == [] for port in ports)

    users.grant(ports, name, "+@scripting")
    status, line, out = doctor(capsys, url, "--cluster")
    assert status == 0 and line.startswith("ok"), out
