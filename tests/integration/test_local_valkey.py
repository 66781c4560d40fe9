"""`lambda-idempotency local --valkey`: a user's own Valkey from one documented command, in a
folder of their own (no repository around it): the URL it prints reaches a server a
`ValkeyStore()` runs each key once on and replays; `--cluster` makes a cluster a
`ValkeyStore(cluster=True)` spreads keys over; `local stop --valkey` ends what `--background`
left, and Ctrl-C what runs in the foreground. Nothing is left in the user's folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

import lambda_idempotency
from lambda_idempotency import ValkeyStore, idempotent
from lambda_idempotency._dev import valkey_local
from lambda_idempotency._dev.valkey_local import ValkeyCluster, ValkeyLocalError
from tests.local_ports import three_free_ports

pytestmark = [pytest.mark.valkey, pytest.mark.timeout_scale(3)]

LAYER = Path(lambda_idempotency.__file__).resolve().parent.parent


@pytest.fixture
def user(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A user's project folder and environment: their own cache, this package importable."""
    folder = tmp_path / "project"
    folder.mkdir()
    environment = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(LAYER))
    return folder, environment


def command(user: tuple[Path, dict[str, str]], *argv: str) -> subprocess.CompletedProcess[str]:
    folder, environment = user
    return subprocess.run(
        [sys.executable, "-m", "lambda_idempotency", *argv],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def exported_url(stdout: str) -> str:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("export IDEMPOTENCY_VALKEY_URL="), stdout
    return lines[0].partition("=")[2]


def _ports_free(*ports: int) -> bool:
    import socket

    for port in ports:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


@pytest.fixture
def port() -> int:
    """A port with the next two free too (a cluster takes three in a row): `local_ports`."""
    return three_free_ports()


def test_the_printed_url_reaches_a_server_a_store_runs_once_and_replays_on(
    user: tuple[Path, dict[str, str]], port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = command(user, "local", "--valkey", "--print-env", "--port", str(port))
    assert started.returncode == 0, started.stderr
    url = exported_url(started.stdout)
    try:
        again = command(user, "local", "--valkey", "--print-env", "--port", str(port))
        assert again.returncode == 0 and exported_url(again.stdout) == url, again.stderr
        assert "already running" in again.stderr

        monkeypatch.setenv("IDEMPOTENCY_VALKEY_URL", url)
        store = ValkeyStore(prefix=f"lv-{uuid.uuid4().hex[:6]}:")
        effects: list[str] = []

        @idempotent(key="order_id", store=store)
        def handler(event: dict[str, Any], context: Any) -> str:
            effects.append(event["order_id"])
            return f"charged {event['order_id']}"

        assert handler({"order_id": "o-1"}, None) == "charged o-1"
        assert handler({"order_id": "o-1"}, None) == "charged o-1"
        assert effects == ["o-1"]
        store.close()
        listed = command(user, "namespaces", "--valkey-url", url, "--prefix", store.prefix)
        assert listed.returncode == 0 and "handler" in listed.stdout, listed
    finally:
        stopped = command(user, "local", "stop", "--valkey", "--port", str(port))
    assert stopped.returncode == 0 and "stopped Valkey" in stopped.stdout, stopped
    assert _ports_free(port)
    assert list(user[0].iterdir()) == [], "nothing is left in the user's project"
    gone = command(user, "local", "stop", "--valkey", "--port", str(port))
    assert gone.returncode != 0 and "no Valkey started" in gone.stderr
    assert "Traceback" not in gone.stderr


def test_a_cluster_spreads_a_stores_keys_over_three_nodes(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    started = command(user, "local", "--valkey", "--cluster", "--print-env", "--port", str(port))
    assert started.returncode == 0, started.stderr
    url = exported_url(started.stdout)
    assert "ValkeyStore(cluster=True)" in started.stderr
    try:
        store = ValkeyStore(url, cluster=True, prefix=f"lv-{uuid.uuid4().hex[:6]}:")
        effects: list[int] = []

        @idempotent(key="n", store=store)
        def handler(event: dict[str, Any], context: Any) -> int:
            effects.append(event["n"])
            return int(event["n"])

        assert [handler({"n": n}, None) for n in range(30)] == list(range(30))
        assert [handler({"n": n}, None) for n in range(30)] == list(range(30))
        assert effects == list(range(30))
        used = set()
        for node_port in (port, port + 1, port + 2):
            node = redis.Redis(port=node_port)
            if node.dbsize():
                used.add(node_port)
            node.close()
        assert len(used) == 3, f"keys on {sorted(used)} only"
        store.close()
    finally:
        stopped = command(user, "local", "stop", "--valkey", "--port", str(port))
    assert stopped.returncode == 0, stopped
    assert _ports_free(port, port + 1, port + 2)


def _interruptible() -> None:
    """In the child: Ctrl-C stops it, however the test run was started."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_in_the_foreground_it_prints_the_url_and_stops_on_ctrl_c(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    folder, environment = user
    process = subprocess.Popen(
        [
            sys.executable,
            "-u",
            "-m",
            "lambda_idempotency",
            "local",
            "--valkey",
            "--port",
            str(port),
        ],
        cwd=folder,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_interruptible,  # noqa: PLW1509
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        while not lines or lines[-1] != "stop it with Ctrl-C\n":
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
        assert lines[-1] == "stop it with Ctrl-C\n", lines
        assert f"  export IDEMPOTENCY_VALKEY_URL=redis://127.0.0.1:{port}\n" in lines
        assert redis.Redis(port=port).ping()
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    assert process.returncode == 0 and rest.strip().endswith("stopped"), (lines, rest)
    assert _ports_free(port)


def test_a_port_in_use_is_one_line_and_nothing_starts(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        refused = command(user, "local", "--valkey", "--port", str(port))
    assert refused.returncode != 0
    assert f"port {port} in use" in refused.stderr and "Traceback" not in refused.stderr
    assert command(user, "local", "--valkey", "--table", "t").returncode != 0


def test_a_cluster_that_cannot_start_leaves_no_node_running(port: int) -> None:
    """A port taken between the check and the bind (here, the second node's): the start fails
    with the reason, and the node already started is stopped, detached or not (a loaded run
    once found one still running 20 minutes after `local --cluster` failed)."""
    import socket

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port + 1))
        squatter.listen()
        cluster = ValkeyCluster(size=3, port=port, detached=True)
        with pytest.raises(ValkeyLocalError, match="Address already in use"):
            cluster.start(timeout=20)
    assert not any(node.running for node in cluster.nodes)
    assert _ports_free(port, port + 2)


def test_a_fixed_port_node_retries_a_taken_cluster_bus_port(
    port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bus port is a free one picked before the bind: when another process takes it in
    between, the node starts on another bus port, even on a port the user fixed."""
    import socket

    real = valkey_local.free_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks = iter([taken])
        monkeypatch.setattr(valkey_local, "free_port", lambda: next(picks, None) or real())
        cluster = ValkeyCluster(size=1, port=port)
        with cluster:
            node = cluster.nodes[0]
            assert node.port == port and node.cluster_port not in (0, taken)
            client = redis.Redis(port=port)
            assert client.ping()
            client.close()
    assert _ports_free(port)


def test_stop_never_ends_another_valkey_that_took_a_recorded_pid(
    user: tuple[Path, dict[str, str]], port: int
) -> None:
    """What `--background` recorded outlives a reboot; a pid it names may by then be another
    valkey-server's (another port, another project): `local stop` leaves that one running."""
    import json

    environment = user[1]
    with valkey_local.ValkeyServer() as other:
        cache = Path(environment["XDG_CACHE_HOME"]) / "lambda-idempotency"
        cache.mkdir(parents=True, exist_ok=True)
        state = {"cluster": False, "pids": [other.pid], "dirs": []}
        (cache / f"valkey-local-{port}.json").write_text(json.dumps(state))

        stopped = command(user, "local", "stop", "--valkey", "--port", str(port))

        assert stopped.returncode == 0, stopped.stderr
        assert other.running
        client = redis.Redis(port=other.port)
        assert client.ping()
        client.close()
