"""Lambda Managed Instances: one execution environment runs several processes of the function,
each with its own INIT, each serving concurrent calls, all sharing the function's /tmp
(`lifecycle_driver.managed`).

Here they are K separate processes started at once (`AWS_LAMBDA_INITIALIZATION_TYPE=
lambda-managed-instances`, the function's module imported in each), their temporary folder
(TMPDIR) one shared empty folder standing for /tmp, all ready before any calls, then M
concurrent calls each on one key: one run of the effect, every call the holder's answer, and
nothing the library wrote into that folder (a lock file, a cache, a socket) for the
processes to trip over.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from lambda_idempotency._dev.local_tables import local_client
from lambda_idempotency.testing import create_idempotency_table
from tests.integration import lifecycle_driver as driver

pytestmark = pytest.mark.timeout_scale(2)

PROCESSES = 4
THREADS = 4
WORK_S = 1.0
"""The holder's run: every other call arrives while it runs, and waits."""
ANSWERED_WITHIN_S = 5.0
"""Every waiter answers this soon after the holder's run ends (polls at most 0.5 s apart on
DynamoDB, a wake-up on Valkey); the lease is 60 s."""

STORES = [
    pytest.param("dynamodb", marks=pytest.mark.dynamodb_local),
    pytest.param("valkey", marks=pytest.mark.valkey),
]


def serve(env: dict[str, str], logs: Path) -> list[Any]:
    """Start the processes, let each finish its INIT, then give them all the go: their
    reports. Every process started is gone when this returns."""
    config = {"threads": THREADS, "work_s": WORK_S}
    processes = []
    try:
        for index in range(PROCESSES):
            with (logs / f"{index}.stderr").open("wb") as stderr:
                processes.append(
                    subprocess.Popen(
                        driver.command("managed", config),
                        env=env,
                        cwd=driver.ROOT,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        start_new_session=True,
                    )
                )
        for index, process in enumerate(processes):
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line, (logs / f"{index}.stderr").read_text()
            assert json.loads(line)["ready"] == process.pid
        for process in processes:
            assert process.stdin is not None
            process.stdin.write(b"go\n")
            process.stdin.flush()
        reports = []
        for index, process in enumerate(processes):
            out, _ = process.communicate(timeout=60)
            assert process.returncode == 0, (logs / f"{index}.stderr").read_text()
            reports.append(json.loads(out.decode().strip().splitlines()[-1]))
        return reports
    finally:
        for process in processes:
            driver.end_group(process)


@pytest.mark.parametrize("kind", STORES)
def test_processes_of_one_environment_run_the_effect_once_and_leave_tmp_alone(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    if kind == "valkey":
        values = {"LIFECYCLE_VALKEY_URL": request.getfixturevalue("valkey_node").url}
    else:
        endpoint = request.getfixturevalue("dynamodb_local_endpoint")
        table = create_idempotency_table(local_client(endpoint), f"lmi-{uuid.uuid4().hex[:8]}")
        values = {"LIFECYCLE_TABLE": table, "AWS_ENDPOINT_URL_DYNAMODB": endpoint}
    function_tmp = tmp_path / "function-tmp"
    function_tmp.mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    env = driver.environment(
        tmp_path,
        kind,
        AWS_LAMBDA_INITIALIZATION_TYPE="lambda-managed-instances",
        TMPDIR=str(function_tmp),
        **values,
    )
    reports = serve(env, logs)

    assert len({report["pid"] for report in reports}) == PROCESSES
    assert {report["tempdir"] for report in reports} == {str(function_tmp)}
    assert {report["path"] for report in reports} == {"DirectWire" if kind == "dynamodb" else ""}
    ran = driver.effects(tmp_path)
    assert Counter(line["key"] for line in ran) == {"shared": 1}
    calls = [call for report in reports for call in report["calls"]]
    assert len(calls) == PROCESSES * THREADS
    assert [call.get("error") for call in calls] == [None] * len(calls)
    results = {json.dumps(call["result"], sort_keys=True) for call in calls}
    assert len(results) == 1, results
    holder = calls[0]["result"]
    assert (holder["key"], holder["input"], holder["owner"]) == (
        "shared",
        "input-of-shared",
        ran[0]["owner"],
    )
    late = [call["ended"] - holder["ended"] for call in calls]
    assert max(late) < ANSWERED_WITHIN_S, late
    # the function's /tmp as the library left it, after every process's INIT and calls
    assert sorted(function_tmp.rglob("*")) == []
