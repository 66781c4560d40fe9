"""The suite's time limits: a test past its limit fails alone, and the run goes on to its
summary line (docs/contributing/testing.md, "Time limits").

- pytest-timeout's `signal` method (pyproject.toml) raises in the test's main thread when its
  limit is up: sleeps, joins, lock waits, socket reads and process waits are all interrupted.
- `@pytest.mark.timeout_scale(n)`: a slow test may take n times the run's `--timeout`, so
  raising `--timeout` raises every limit and `--timeout=0` turns them all off. A bare
  `@pytest.mark.timeout(seconds)` would override the user's `--timeout`: it is refused.
- The backstop, for a test that swallows the signal's failure or is stuck where no signal
  reaches: one limit after the signal it sends it again, and one more limit later it ends
  the run itself, naming the test, with every thread's stack and the summary line of the
  tests run so far (exit status 2), instead of hanging or dying silently.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import pytest
import pytest_timeout

BACKSTOP = pytest.StashKey["Backstop"]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "timeout_scale(n): this test may take n times the run's --timeout "
        "(--timeout=0 turns every limit off)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    fixed = [item.nodeid for item in items if item.get_closest_marker("timeout")]
    if fixed:
        raise pytest.UsageError(
            "a timeout(seconds) marker overrides the run's --timeout; mark a slow test "
            f"timeout_scale(n) instead (n times --timeout): {', '.join(fixed[:5])}"
        )
    base = pytest_timeout.get_env_settings(config).timeout  # --timeout, PYTEST_TIMEOUT, ini
    if not base:
        return
    for item in items:
        scale = item.get_closest_marker("timeout_scale")
        if scale is not None:
            item.add_marker(pytest.mark.timeout(base * float(scale.args[0])))


@pytest.hookimpl(wrapper=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Any:
    result = yield
    if settings.method == "signal" and threading.current_thread() is threading.main_thread():
        item.stash[BACKSTOP] = Backstop(item, float(settings.timeout))
    return result


@pytest.hookimpl(wrapper=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> Any:
    backstop = item.stash.get(BACKSTOP, None)
    if backstop is not None:
        backstop.stop()  # before pytest-timeout puts SIGALRM's default (ending) action back
    return (yield)


class Backstop:
    """Watches one test from a thread of its own, for when the signal alone is not enough."""

    def __init__(self, item: pytest.Item, limit: float) -> None:
        self.item, self.limit, self.started = item, limit, time.monotonic()
        self.finished = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(
            target=self._watch, name=f"timeout backstop {item.nodeid}", daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        with self.lock:
            self.finished.set()

    def _watch(self) -> None:
        if self.finished.wait(2 * self.limit):
            return
        with self.lock:  # the test outlived its signal by a whole limit: signal it again
            if self.finished.is_set():
                return
            if callable(signal.getsignal(signal.SIGALRM)):  # never SIGALRM's default: it kills
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGALRM)
        if not self.finished.wait(self.limit):
            self._end_run()

    def _end_run(self) -> None:
        config = self.item.config
        capture = config.pluginmanager.getplugin("capturemanager")
        if capture is not None:
            capture.suspend_global_capture(in_=True)
        writer = config.get_terminal_writer()
        writer.line()
        writer.sep(
            "!",
            f"{self.item.nodeid} is still running {time.monotonic() - self.started:.0f} s "
            f"into its {self.limit:g} s limit, through two timeout signals: ending the run",
            red=True,
        )
        pytest_timeout.dump_stacks(writer)
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:
            reporter.summary_stats()  # the tests run so far; this one is not counted
        writer.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(pytest.ExitCode.INTERRUPTED)
