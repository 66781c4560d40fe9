"""The suite's own time limits (tests/timeouts.py): a test past its limit fails alone and the
run still ends with its summary line; no marker keeps a user from raising a limit.

Each test runs pytest in a subprocess on a generated test file, with this project's settings
(pyproject.toml's signal method) and its timeout plugin, and reads the run's last line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
Run = subprocess.CompletedProcess[str]

HANGS = """
import signal, socket, subprocess, threading, time
import pytest


def test_passes():
    pass


def test_sleeps():
    time.sleep(60)


def test_joins_a_stuck_thread():
    stuck = threading.Thread(target=threading.Event().wait, daemon=True)
    stuck.start()
    stuck.join()


def test_reads_a_silent_socket():
    left, right = socket.socketpair()
    with left, right:
        left.recv(1)


def test_waits_for_a_process():
    process = subprocess.Popen(["sleep", "60"])
    try:
        process.wait()
    finally:
        process.kill()
        process.wait()


def test_waits_on_a_lock():
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()


def test_passes_too():
    pass
"""


PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_timeout")


def run_pytest(tmp_path: Path, source: str, *args: str) -> tuple[Run, float]:
    (tmp_path / "test_generated.py").write_text(source, encoding="utf-8")
    # the project's settings: timeout_method = "signal", the 45 s default (overridden below)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\ntimeout = 45\ntimeout_method = signal\n", encoding="utf-8"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "layer")]),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # pytest-timeout and ours only: a quick start
    }
    env.pop("PYTEST_TIMEOUT", None)
    command = [sys.executable, *PYTEST, "-p", "tests.timeouts", "test_generated.py", *args]
    started = time.monotonic()
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    return result, time.monotonic() - started


def last_line(result: Run) -> str:
    return result.stdout.strip().splitlines()[-1]


def test_each_hang_fails_alone_and_the_run_ends_with_its_summary(tmp_path: Path) -> None:
    result, took = run_pytest(tmp_path, HANGS, "--timeout=1")

    assert result.returncode == 1, result.stdout + result.stderr
    assert "5 failed, 2 passed" in last_line(result), result.stdout
    for name in (
        "sleeps",
        "joins_a_stuck_thread",
        "reads_a_silent_socket",
        "waits_for_a_process",
        "waits_on_a_lock",
    ):
        assert f"FAILED test_generated.py::test_{name} - Failed: Timeout" in result.stdout
    assert took < 30  # each hang stopped at its 1 s limit, none by the backstop (2-3 s)


SCALED = """
import time
import pytest


@pytest.mark.timeout_scale(4)
def test_slow_within_its_scale():
    time.sleep(1)


@pytest.mark.timeout_scale(2)
def test_slow_past_its_scale():
    time.sleep(1.5)


def test_unmarked():
    time.sleep(0.7)
"""


@pytest.mark.parametrize(
    ("timeout", "summary"),
    [
        ("0.5", "2 failed, 1 passed"),  # limits 2 s, 1 s and 0.5 s
        ("1", "3 passed"),  # raising --timeout raises the marked tests' limits with it
        ("0", "3 passed"),  # and 0 turns every limit off
    ],
)
def test_a_marked_test_takes_a_multiple_of_the_runs_timeout(
    tmp_path: Path, timeout: str, summary: str
) -> None:
    result, _ = run_pytest(tmp_path, SCALED, f"--timeout={timeout}")

    assert summary in last_line(result), result.stdout + result.stderr


def test_a_marker_that_would_override_the_runs_timeout_is_refused(tmp_path: Path) -> None:
    source = "import pytest\n\n@pytest.mark.timeout(300)\ndef test_fixed():\n    pass\n"

    result, _ = run_pytest(tmp_path, source)

    assert result.returncode == pytest.ExitCode.USAGE_ERROR
    assert "timeout_scale(n) instead" in result.stderr
    assert "test_generated.py::test_fixed" in result.stderr


SWALLOWED = """
import signal, time


def test_swallows_its_timeout():
    try:
        time.sleep(60)
    except BaseException:
        time.sleep(60)  # a cleanup that hangs too


def test_after_it():
    pass
"""


def test_a_test_that_swallows_its_timeout_is_signalled_again(tmp_path: Path) -> None:
    result, took = run_pytest(tmp_path, SWALLOWED, "--timeout=1")

    assert "1 failed, 1 passed" in last_line(result), result.stdout + result.stderr
    assert took < 30


UNREACHABLE = """
import signal, time


def test_first():
    pass


def test_blocks_its_signal():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])  # no signal reaches it
    time.sleep(60)


def test_never_run():
    pass
"""


def test_a_test_no_signal_reaches_ends_the_run_with_its_name_and_a_summary(
    tmp_path: Path,
) -> None:
    result, took = run_pytest(tmp_path, UNREACHABLE, "--timeout=1")

    assert result.returncode == pytest.ExitCode.INTERRUPTED, result.stdout + result.stderr
    assert "test_generated.py::test_blocks_its_signal is still running" in result.stdout
    assert "through two timeout signals: ending the run" in result.stdout
    assert "Stack of MainThread" in result.stdout  # where it is stuck
    assert "1 passed" in last_line(result)
    assert took < 30
