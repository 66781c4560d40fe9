"""Each Valkey topology the tests start works as a store on Valkey will need it to: atomic
claims and scripts on one node, acknowledged writes surviving a failover, hash tags in a
cluster. And no server outlives the run that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, ValkeyServer

pytestmark = pytest.mark.valkey

CLAIM = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""


def key(tag: str = "") -> str:
    return f"{tag}test-valkey-servers:{uuid.uuid4().hex}"


def test_one_node_takes_set_nx_px_once_and_runs_lua(valkey_node: ValkeyServer) -> None:
    client = redis.Redis.from_url(valkey_node.url)
    name = key()
    assert client.set(name, "first", nx=True, px=60_000) is True
    assert client.set(name, "second", nx=True, px=60_000) is None
    assert client.get(name) == b"first"
    assert 0 < client.pttl(name) <= 60_000

    other = key()
    assert client.eval(CLAIM, 1, other, "owner-a", 60_000) == 1
    assert client.eval(CLAIM, 1, other, "owner-b", 60_000) == 0
    assert client.get(other) == b"owner-a"


def test_one_claim_of_many_racing_wins_and_an_expired_claim_can_be_taken_again(
    valkey_node: ValkeyServer,
) -> None:
    pool = redis.ConnectionPool.from_url(valkey_node.url, max_connections=8)
    raced, lapsing = key(), key()

    def claim(name: str, owner: int, lease_ms: int) -> int:
        return int(redis.Redis(connection_pool=pool).eval(CLAIM, 1, name, owner, lease_ms))

    # a lease longer than the race: on a busy machine the threads may start far apart
    with ThreadPoolExecutor(max_workers=8) as threads:
        assert sum(threads.map(lambda owner: claim(raced, owner, 60_000), range(8))) == 1
    assert claim(lapsing, 1, 200) == 1
    deadline = time.monotonic() + 5
    while claim(lapsing, 99, 200) == 0:  # the 200 ms lease runs out on the server's clock
        assert time.monotonic() < deadline, "the claim never expired"
        time.sleep(0.05)
    assert redis.Redis(connection_pool=pool).get(lapsing) == b"99"
    pool.disconnect()


def test_a_write_reaches_the_replica(valkey_pair: ValkeyPair) -> None:
    primary = redis.Redis.from_url(valkey_pair.primary.url)
    replica = redis.Redis.from_url(valkey_pair.replica.url)
    name = key()
    primary.set(name, "value")
    assert primary.wait(1, 3_000) == 1
    assert replica.get(name) == b"value"
    with pytest.raises(redis.ReadOnlyError):
        replica.set(name, "from the replica")


def test_a_write_acknowledged_by_wait_survives_the_primary_killed(
    valkey_failover_pair: ValkeyPair,
) -> None:
    pair = valkey_failover_pair
    old_primary = redis.Redis.from_url(pair.primary.url)
    name = key()
    old_primary.set(name, "acknowledged")
    assert old_primary.wait(1, 3_000) == 1
    # WAITAOF numlocal numreplicas: in the AOF here and on one replica
    assert old_primary.execute_command("WAITAOF", 1, 1, 3_000) == [1, 1]

    pair.kill_primary()
    with pytest.raises(redis.ConnectionError):
        old_primary.ping()
    pair.promote_replica()

    new_primary = redis.Redis.from_url(pair.primary.url)
    assert new_primary.get(name) == b"acknowledged"
    new_primary.set(name, "written after the failover")
    assert new_primary.get(name) == b"written after the failover"

    pair.heal()  # a new replica follows the promoted node: a pair again
    assert new_primary.wait(1, 3_000) == 1
    assert redis.Redis.from_url(pair.replica.url).get(name) == b"written after the failover"


def test_a_write_no_replica_acknowledged_is_lost_with_the_primary(
    valkey_failover_pair: ValkeyPair,
) -> None:
    """What WAIT guards against: the replica's link was down when the primary took the write."""
    pair = valkey_failover_pair
    primary = redis.Redis.from_url(pair.primary.url)
    name = key()
    pair.replica.pause()  # so it cannot reconnect before the primary dies
    primary.client_kill_filter(_type="replica")
    primary.set(name, "unacknowledged")
    assert primary.wait(1, 200) == 0

    pair.kill_primary()
    pair.replica.resume()
    pair.promote_replica()
    assert redis.Redis.from_url(pair.primary.url).get(name) is None


def test_keys_of_one_hash_tag_share_a_slot_and_one_script(valkey_cluster: ValkeyCluster) -> None:
    client = redis.RedisCluster.from_url(valkey_cluster.url)
    try:
        assert len(client.get_primaries()) == 3
        first, second = key("{k}"), key("{k}")
        slot = client.keyslot(first)
        assert client.keyslot(second) == slot
        # the node serving that slot holds both keys
        client.eval(
            "redis.call('SET', KEYS[1], 1); redis.call('SET', KEYS[2], 2)", 2, first, second
        )
        node = client.get_node_from_key(first)
        assert redis.Redis(host=node.host, port=node.port).mget(first, second) == [b"1", b"2"]
        # the servers split the slots among them: keys of other tags go to other nodes
        owners = {client.get_node_from_key(key(f"{{{n}}}")).port for n in range(30)}
        assert owners == {node.port for node in valkey_cluster.nodes}
    finally:
        client.close()


def test_a_script_over_two_hash_tags_fails_crossslot(valkey_cluster: ValkeyCluster) -> None:
    script = "return redis.call('MGET', KEYS[1], KEYS[2])"
    keys = (key("{a}"), key("{b}"))
    # the server refuses it on any node, before running it (not only the client)
    for node in valkey_cluster.nodes:
        with pytest.raises(redis.exceptions.ClusterCrossSlotError):  # -CROSSSLOT ...
            redis.Redis.from_url(node.url).eval(script, 2, *keys)


ABANDON = """
import os
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyPair, ValkeyServer

servers = [ValkeyServer().start(), ValkeyPair().start(), ValkeyCluster().start()]
pids = [servers[0].pid, servers[1].primary.pid, servers[1].replica.pid]
pids += [node.pid for node in servers[2].nodes]
print(*pids, flush=True)
os._exit(0)  # what pytest-timeout does: no teardown, no atexit
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_no_server_outlives_the_process_that_started_it(tmp_path: Path) -> None:
    started = subprocess.run(
        [sys.executable, "-c", ABANDON],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the data folders it leaves behind
    )
    pids = [int(pid) for pid in started.stdout.split()]
    assert len(pids) == 6
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in pids if alive(pid)]
    for pid in left:
        os.kill(pid, 9)
    assert left == [], "Valkey servers outlived the process that started them"
