"""The operator commands on a ValkeyStore (`--valkey-url`), on a real node and a real cluster:
what an operator sees and what a retry then does. `inspect` shows a record, `namespaces`
counts them by namespace, `stuck` lists a crashed claim, `release` frees it so a retry runs,
refuses a live lease without --force (a durable one without --force-durable), and writes
nothing over a record that changed since it was shown.

Each test keeps its records under a prefix of its own (`--prefix`), so the shared servers'
other keys never reach its counts. A claim on Valkey is judged on the server's clock, so a
"crashed" holder here is a real claim made a second ago with a long lease, found with
`stuck --older-than 0.01` (0.6 s)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency import InProgressError, ValkeyStore, idempotent
from lambda_idempotency._base import keys as _keys
from lambda_idempotency._dev import cli
from lambda_idempotency._dev.cli import tables as cli_tables
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyServer
from lambda_idempotency._stores.record import Status

pytestmark = pytest.mark.valkey

NAMESPACE = "Orders.app.handler"
TEMPLATE = Path(__file__).resolve().parents[2] / "template.yaml"
MINUTE_MS = 60_000


class Where:
    """One server (a node or a cluster), a prefix of the test's own, the store the functions
    build on it, and the command's options that name that store."""

    def __init__(self, url: str, cluster: bool) -> None:
        self.prefix = f"ops-{uuid.uuid4().hex[:8]}:"
        self.store = ValkeyStore(url, cluster=cluster, prefix=self.prefix)
        self.options = ["--valkey-url", url, "--prefix", self.prefix]
        self.options += ["--cluster"] if cluster else []

    def run(self, capsys: Any, command: str, *argv: str) -> tuple[int, str, str]:
        status = cli.main([command, *self.options, *argv])
        captured = capsys.readouterr()
        return status, captured.out, captured.err

    def handler(self, runs: list[str], namespace: str = NAMESPACE) -> Callable[..., Any]:
        """A decorated function as a fresh container runs it (no warm cache)."""

        @idempotent(store=self.store, key="order_id", namespace=namespace, cache_size=0)
        def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
            runs.append(event["order_id"])
            return {"charged": event["order_id"], "run": len(runs)}

        return handler

    def crashed_claim(self, order_id: str, *, owner: str = "crashed", lease_ms: int) -> str:
        """The claim a holder that died left: its pk, held `lease_ms` from now."""
        pk = _keys.key_hash(NAMESPACE, None, order_id)
        now = time.time_ns() // 1_000_000
        won, _ = self.store.claim(
            pk,
            owner=owner,
            payload_hash=None,
            now_ms=now,
            lease_until_ms=now + lease_ms,
            expiration_s=now // 1000 + 3600,
        )
        assert won
        return pk


@pytest.fixture(params=["node", "cluster"])
def where(request: pytest.FixtureRequest) -> Iterator[Where]:
    server: ValkeyServer | ValkeyCluster = request.getfixturevalue(
        "valkey_node" if request.param == "node" else "valkey_cluster"
    )
    here = Where(server.url, cluster=request.param == "cluster")
    yield here
    here.store.close()


def test_namespaces_counts_the_records_of_each(where: Where, capsys: Any) -> None:
    runs: list[str] = []
    orders, refunds = where.handler(runs), where.handler(runs, "Refunds.app.handler")
    for order_id in ("o-1", "o-2", "o-3"):
        orders({"order_id": order_id}, None)
    refunds({"order_id": "r-1"}, None)
    where.crashed_claim("o-4", lease_ms=MINUTE_MS)  # in progress: a record too

    status, out, err = where.run(capsys, "namespaces")

    assert status == 0, err
    assert out == f"{NAMESPACE}  4 records\nRefunds.app.handler  1 record\n"
    assert err == "2 namespaces in 5 items scanned (every key under the prefix)\n"

    status, out, err = where.run(capsys, "namespaces", "--limit", "2", "--json")
    assert status == 0 and sum(json.loads(out)["namespaces"].values()) == 2
    assert "stopped at --limit 2" in err


def test_inspect_shows_a_record_by_its_key_and_its_result(where: Where, capsys: Any) -> None:
    where.handler([])({"order_id": "o-1"}, None)

    status, out, err = where.run(
        capsys, "inspect", "--key", "o-1", "--namespace", NAMESPACE, "--result"
    )

    assert status == 0, err
    assert out.startswith(f"pk       {_keys.key_hash(NAMESPACE, None, 'o-1')}\n")
    assert "status   COMPLETED\n" in out and '"charged": "o-1"' in out

    status, out, err = where.run(capsys, "inspect", "--key", "o-9", "--namespace", NAMESPACE)
    assert status == 2 and out == ""
    assert f"(prefix {where.prefix}): namespace {NAMESPACE} has records, not this key" in err


def test_stuck_lists_a_crashed_claim_and_release_lets_a_retry_run(
    where: Where, capsys: Any
) -> None:
    runs: list[str] = []
    handler = where.handler(runs)
    handler({"order_id": "o-done"}, None)  # completed: never stuck
    pk = where.crashed_claim("o-1", lease_ms=10 * MINUTE_MS)
    time.sleep(1.0)
    with pytest.raises(InProgressError):
        handler({"order_id": "o-1"}, None)  # the key is locked

    status, out, err = where.run(capsys, "stuck", "--older-than", "0.01")

    assert status == 0, err
    listed, total = out.splitlines()
    assert re.fullmatch(rf"{pk}  1\.\d s, lease (9\.9|10\.0) min left", listed), out
    assert total == "1 IN_PROGRESS record claimed over 0.01 min ago"
    assert "read cost: 2 keys under the prefix scanned and read" in err

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes")
    assert status == 1 and out == "", err  # live lease: refused without --force
    assert "its holder may still be running" in err and "--force" in err
    with pytest.raises(InProgressError):
        handler({"order_id": "o-1"}, None)

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force")
    assert status == 0, err
    assert out == f"released {pk} (was IN_PROGRESS): its next call runs the handler again\n"
    assert handler({"order_id": "o-1"}, None) == {"charged": "o-1", "run": 2}
    assert handler({"order_id": "o-1"}, None) == {"charged": "o-1", "run": 2}  # a replay
    assert runs == ["o-done", "o-1"]

    status, out, _ = where.run(capsys, "stuck", "--older-than", "0.01")
    assert status == 0 and pk not in out


def test_a_release_of_a_version_that_changed_writes_nothing(
    where: Where, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holder completes between the command's read and its write: the completion
    stands, and retries replay it."""
    runs: list[str] = []
    pk = where.crashed_claim("o-1", owner="holder", lease_ms=10 * MINUTE_MS)
    build = cli_tables.operator_store

    def store_whose_holder_completes_first(*args: Any, **kwargs: Any) -> Any:
        built = build(*args, **kwargs)
        release_version = built.release_version

        def completed_first(shown: Any, *, now_ms: int) -> Any:
            result = b'j{"charged":"o-1","run":1}'
            assert built.complete(
                pk, owner="holder", payload_hash=None, result=result, expiration_s=shown.expiration
            )
            return release_version(shown, now_ms=now_ms)

        built.release_version = completed_first
        return built

    monkeypatch.setattr(cli_tables, "operator_store", store_whose_holder_completes_first)

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force")

    assert status == 3 and out == "", err
    assert f"changed: {pk} is COMPLETED now, not the IN_PROGRESS record read" in err
    record = where.store.get(pk)
    assert record is not None and record.status is Status.COMPLETED
    assert where.handler(runs)({"order_id": "o-1"}, None) == {"charged": "o-1", "run": 1}
    assert runs == []  # replayed: the effect ran once


def test_a_durable_executions_claim_needs_force_durable(where: Where, capsys: Any) -> None:
    pk = where.crashed_claim("o-1", owner=f"d-{uuid.uuid4().hex}", lease_ms=60 * MINUTE_MS)

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force")
    assert status == 1 and "held by a durable execution" in err and "--force-durable" in err
    record = where.store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force-durable")
    assert status == 0 and out.startswith(f"released {pk}"), err
    record = where.store.get(pk)
    assert record is not None and record.status is Status.RELEASED


def test_a_completed_record_released_runs_again(where: Where, capsys: Any) -> None:
    runs: list[str] = []
    handler = where.handler(runs)
    handler({"order_id": "o-1"}, None)
    pk = _keys.key_hash(NAMESPACE, None, "o-1")

    status, out, err = where.run(capsys, "release", "--pk", pk)  # a dry run
    assert status == 0 and "status   COMPLETED" in out and "add --yes" in err
    assert handler({"order_id": "o-1"}, None)["run"] == 1

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes")
    assert status == 0 and out.startswith(f"released {pk} (was COMPLETED)"), err
    assert handler({"order_id": "o-1"}, None)["run"] == 2
    assert runs == ["o-1", "o-1"]


@pytest.mark.parametrize("state", ["absent", "expired", "released"])
def test_nothing_to_release_exits_4_and_writes_nothing(
    state: str, valkey_node: ValkeyServer, capsys: Any
) -> None:
    where = Where(valkey_node.url, cluster=False)
    pk = _keys.key_hash(NAMESPACE, None, "o-1")
    now = time.time_ns() // 1_000_000
    if state != "absent":
        expiration = now // 1000 + (-10 if state == "expired" else 3600)
        where.store.claim(
            pk,
            owner="o",
            payload_hash=None,
            now_ms=now,
            lease_until_ms=now + MINUTE_MS,
            expiration_s=expiration,
        )
    if state == "released":
        assert where.store.release(pk, owner="o", now_ms=now)
    before = where.store.client.hgetall(where.store.key_of(pk))

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force")

    assert status == 4 and out == "", err
    assert "nothing to release" in err and "the key is free" in err
    assert where.store.client.hgetall(where.store.key_of(pk)) == before
    where.store.close()


def test_a_record_this_library_does_not_write_is_exit_5(
    valkey_node: ValkeyServer, capsys: Any
) -> None:
    where = Where(valkey_node.url, cluster=False)
    pk = f"{NAMESPACE}#{'ab' * 32}"
    where.store.client.hset(where.store.key_of(pk), mapping={"status": "WEIRD"})

    status, out, err = where.run(capsys, "inspect", "--pk", pk)
    assert status == 5 and "cannot be read" in err, err

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes", "--force")
    assert status == 5 and where.store.client.hget(where.store.key_of(pk), "status") == b"WEIRD"

    status, out, err = where.run(capsys, "stuck", "--older-than", "0")
    assert status == 5 and pk in err and "inspect them with --pk" in err

    other = f"{NAMESPACE}#{'cd' * 32}"
    where.store.client.set(where.store.key_of(other), b"a string, not a hash")  # WRONGTYPE
    status, out, err = where.run(capsys, "inspect", "--pk", other)
    assert status == 5 and out == "" and "cannot be read" in err, err
    where.store.close()


def test_a_server_that_cannot_serve_is_one_line_without_the_password(
    valkey_node: ValkeyServer, valkey_cluster: ValkeyCluster, capsys: Any
) -> None:
    assert cli.main(["stuck", "--valkey-url", "redis://ops:s3cret@127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "lambda-idempotency: cannot reach Valkey redis://ops:***@127.0.0.1:1 (prefix "
        "idempotency:) (ConnectionError): check --valkey-url and the network\n"
    )

    assert cli.main(["namespaces", "--valkey-url", valkey_node.url, "--cluster"]) == 2
    assert "is not in cluster mode: drop --cluster" in capsys.readouterr().err

    # one node's keys would pass for all the cluster's
    assert cli.main(["namespaces", "--valkey-url", valkey_cluster.url]) == 2
    assert "is a cluster: add --cluster" in capsys.readouterr().err

    assert cli.main(["inspect", "--valkey-url", valkey_node.url, "--pk", "p", "--table", "t"]) == 2
    assert "--table: for a DynamoDB table, not with --valkey-url" in capsys.readouterr().err

    assert cli.main(["stuck", "--prefix", "x:"]) == 2
    assert "--prefix is for a Valkey store: add --valkey-url URL" in capsys.readouterr().err


def test_a_holder_whose_clock_is_behind_keeps_its_live_lease(where: Where, capsys: Any) -> None:
    """Judged on the server's clock, as the claims are: a holder 30 minutes behind, with 10
    minutes of lease on its own clock, holds the key 10 more minutes, though its lease_until
    reads 20 minutes past on the operator's clock."""
    pk = _keys.key_hash(NAMESPACE, None, "o-1")
    behind = time.time_ns() // 1_000_000 - 30 * MINUTE_MS
    where.store.claim(
        pk,
        owner="holder",
        payload_hash=None,
        now_ms=behind,
        lease_until_ms=behind + 10 * MINUTE_MS,
        expiration_s=behind // 1000 + 3600,
    )

    status, out, err = where.run(capsys, "release", "--pk", pk, "--yes")

    assert status == 1 and "its holder may still be running" in err, (out, err)
    assert re.search(r"in (9\.9|10\.0) min", err), err
    record = where.store.get(pk)
    assert record is not None and record.status is Status.IN_PROGRESS


def test_the_url_local_exports_is_enough_for_every_operator_command(
    valkey_node: ValkeyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """What `local --valkey --print-env` exports (IDEMPOTENCY_VALKEY_URL) names the store, as
    `ValkeyStore()` reads it, where the command finds no table (none named, no template): a
    newcomer's `inspect` once answered "which table?" with no word of --valkey-url. A table
    found any way (named, IDEMPOTENCY_TABLE, a SAM project's template) is still read."""
    here = Where(valkey_node.url, cluster=False)
    try:
        here.handler([])({"order_id": "o-1"}, None)
        pk = here.crashed_claim("o-2", lease_ms=MINUTE_MS)
        monkeypatch.chdir(tmp_path)
        monkeypatch.delenv("IDEMPOTENCY_TABLE", raising=False)
        monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", valkey_node.url)
        prefix = ["--prefix", here.prefix]

        def run(*argv: str) -> tuple[int, str, str]:
            status = cli.main(list(argv))
            captured = capsys.readouterr()
            return status, captured.out, captured.err

        status, out, err = run("inspect", *prefix, "--key", "o-1", "--namespace", NAMESPACE)
        assert status == 0 and "COMPLETED" in out, err
        status, out, err = run("namespaces", *prefix)
        assert (status, out) == (0, f"{NAMESPACE}  2 records\n"), err
        status, out, err = run("stuck", *prefix, "--older-than", "0", "--json")
        assert status == 0 and out.count(pk) == 1, err

        monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", "redis://:s3cret@127.0.0.1:1")
        status, out, err = run("namespaces")
        assert (status, out) == (2, ""), err
        assert err == (
            "lambda-idempotency: cannot reach Valkey redis://:***@127.0.0.1:1 (prefix "
            "idempotency:) (ConnectionError): check IDEMPOTENCY_VALKEY_URL and the network\n"
        )
        monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", valkey_node.url)

        # a table named any way is the table's: the variable never overrides it
        status, out, err = run("inspect", "--table", "t", "--key", "o-1", "--region", "xx-1")
        assert status != 0 and "Valkey" not in err
        monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:1")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        (tmp_path / "template.yaml").write_text(TEMPLATE.read_text(encoding="utf-8"))
        status, out, err = run("inspect", "--key", "o-1", "--namespace", NAMESPACE)
        assert status != 0 and "DynamoDB" in err and "Valkey" not in err, err
        (tmp_path / "template.yaml").unlink()
        monkeypatch.setenv("IDEMPOTENCY_TABLE", "orders-idempotency")
        status, out, err = run("inspect", *prefix, "--key", "o-1")
        assert status == 2 and err.startswith("lambda-idempotency: --prefix is for a Valkey"), err
    finally:
        here.store.close()
