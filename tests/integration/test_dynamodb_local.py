"""The embedded DynamoDB Local never outlives the run that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.dynamodb_local

ABANDON = """
import os
from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

local = DynamoDBLocal()
local.start()
print(local._process.pid, flush=True)
os._exit(0)  # what pytest-timeout does: no teardown, no atexit
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_dynamodb_local_stops_when_its_process_dies_without_teardown() -> None:
    started = subprocess.run(
        [sys.executable, "-c", ABANDON],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=os.environ,
    )
    pid = int(started.stdout.split()[0])
    deadline = time.monotonic() + 20
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, 9)
        pytest.fail("DynamoDB Local outlived the process that started it")
