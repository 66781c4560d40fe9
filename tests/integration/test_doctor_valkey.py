"""`lambda-idempotency doctor --valkey-url URL` against real Valkey servers: one node, a
primary and its replica, a cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lambda_idempotency._dev import cli
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, ValkeyServer, call

pytestmark = pytest.mark.valkey

CHECKS = [
    "server",
    "role and replicas",
    "cluster mode",
    "commands",
    "persistence",
    "eviction",
    "replication",
]


def doctor(capsys: Any, url: str, *options: str) -> tuple[int, dict[str, str], str]:
    """Exit status, each check's line by its name, and the whole output."""
    status = cli.main(["doctor", "--valkey-url", url, *options])
    out = capsys.readouterr().out
    lines = {}
    for line in out.splitlines()[1:-1]:
        lines[line[6:].split("  ")[0]] = line
    return status, lines, out


def test_a_primary_with_its_replica_passes_and_warns_of_asynchronous_replication(
    valkey_pair: ValkeyPair, capsys: Any
) -> None:
    status, lines, out = doctor(capsys, valkey_pair.primary.url, "--replicas", "1")

    assert status == 0
    assert list(lines) == CHECKS
    assert out.splitlines()[0].endswith("(standalone store, replicas=1)")
    assert lines["server"].startswith("ok") and "valkey 9." in lines["server"]
    assert lines["role and replicas"].startswith("ok")
    assert "primary, 1 replica connected" in lines["role and replicas"]
    assert lines["commands"].startswith("ok") and "BLPOP and WAIT 1 ran" in lines["commands"]
    assert "appendonly yes, appendfsync everysec" in lines["persistence"]
    assert lines["eviction"].startswith("ok")
    replication = lines["replication"]
    assert replication.startswith("warn")
    assert "a failover can lose a claim the primary acknowledged" in replication
    assert "MemoryDB" in replication and "DynamoDB store" in replication
    assert out.splitlines()[-1] == "no check failed; 1 warning (replication): exit 0"


def test_the_replica_fails_as_the_stores_address(valkey_pair: ValkeyPair, capsys: Any) -> None:
    status, lines, _ = doctor(capsys, valkey_pair.replica.url)

    assert status == 1
    assert lines["role and replicas"].startswith("FAIL")
    assert f"a replica (of 127.0.0.1:{valkey_pair.primary.port})" in lines["role and replicas"]


def test_a_single_node_warns_of_no_replica_and_fails_replicas_it_lacks(
    valkey_node: ValkeyServer, capsys: Any
) -> None:
    status, lines, _ = doctor(capsys, valkey_node.url)
    assert status == 0
    assert lines["role and replicas"].startswith("warn")
    assert "ValkeyStore(replicas=1)" in lines["replication"]

    status, lines, _ = doctor(capsys, valkey_node.url, "--replicas", "1")
    assert status == 1
    assert lines["role and replicas"].startswith("FAIL")
    assert "with replicas=1 every claim is refused" in lines["role and replicas"]


def test_an_evicting_policy_and_no_aof_are_flagged(valkey_node: ValkeyServer, capsys: Any) -> None:
    call(valkey_node.port, "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
    call(valkey_node.port, "CONFIG", "SET", "maxmemory", "1gb")
    call(valkey_node.port, "CONFIG", "SET", "appendonly", "no")
    try:
        status, lines, _ = doctor(capsys, valkey_node.url)
    finally:
        call(valkey_node.port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        call(valkey_node.port, "CONFIG", "SET", "maxmemory", "0")
        call(valkey_node.port, "CONFIG", "SET", "appendonly", "yes")
    assert status == 1
    assert lines["eviction"].startswith("FAIL") and "volatile-lru" in lines["eviction"]
    assert lines["persistence"].startswith("warn") and "appendonly no" in lines["persistence"]


def test_cluster_mode_must_match_the_store(valkey_cluster: ValkeyCluster, capsys: Any) -> None:
    status, lines, _ = doctor(capsys, valkey_cluster.url)
    assert status == 1
    assert lines["cluster mode"].startswith("FAIL") and "(MOVED)" in lines["cluster mode"]

    assert lines["commands"].startswith("??")  # not tried: a standalone client meets MOVED

    status, lines, _ = doctor(capsys, valkey_cluster.url, "--cluster")
    assert status == 0
    assert "on, state ok, 3 primaries, 0 with a replica" in lines["cluster mode"]
    assert lines["commands"].startswith("ok")


def test_json_and_an_unreachable_server(valkey_node: ValkeyServer, capsys: Any) -> None:
    assert cli.main(["doctor", "--valkey-url", valkey_node.url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [check["check"] for check in shown["checks"]] == CHECKS

    assert cli.main(["doctor", "--valkey-url", "redis://user:secret@127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot ask Valkey at redis://user:***@127.0.0.1:1" in err
    assert "secret" not in err


def test_the_operations_guide_shows_what_doctor_prints(
    valkey_pair: ValkeyPair, capsys: Any
) -> None:
    """The Valkey sample in docs/operations.md is doctor's output on a primary and its
    replica, the URL aside."""
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    shown_url = "rediss://cache.example.com:6379"
    command = f"$ lambda-idempotency doctor --valkey-url {shown_url} --replicas 1\n"
    shown = guide[guide.index(command) + len(command) :].split("```", 1)[0]

    assert cli.main(["doctor", "--valkey-url", valkey_pair.primary.url, "--replicas", "1"]) == 0
    assert capsys.readouterr().out.replace(valkey_pair.primary.url, shown_url) == shown


def test_the_functions_environment_names_the_server_when_no_table_is_named(
    valkey_node: ValkeyServer, capsys: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`doctor` with no arguments in a Valkey function's environment checks its server, as
    its help says; a table named (argument, IDEMPOTENCY_TABLE) or an endpoint wins."""
    monkeypatch.chdir(tmp_path)  # no template here to name a table
    monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
    monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", valkey_node.url)
    assert cli.main(["doctor", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [check["check"] for check in shown["checks"]] == CHECKS

    for named in (["orders-idempotency"], ["--endpoint", "http://127.0.0.1:1"]):
        assert cli.main(["doctor", *named, "--endpoint", "http://127.0.0.1:1"]) == 2
        err = capsys.readouterr().err  # a table is looked for, not the server
        assert "DynamoDB" in err or "which table" in err, err
    monkeypatch.setenv("IDEMPOTENCY_TABLE", "orders-idempotency")
    assert cli.main(["doctor", "--endpoint", "http://127.0.0.1:1"]) == 2
    assert "cannot reach DynamoDB" in capsys.readouterr().err
