"""Resident memory: what each library adds to a Lambda function's RSS, path by path.

Lambda bills and limits a function by its memory setting and reports "Max Memory Used", the
process's peak resident set. Each library runs in fresh interpreters of its own (no awscrt,
as on Lambda): the resident set is read after `import boto3`, after the library's import,
after the rest of the function's init (its client made, a handler decorated), then after each
invocation path has run many times against DynamoDB Local, in the CPU section's order. What
a path adds is the growth over the step before (the first calls of a path also load what it
needs the first time); the last row is the peak (`VmHWM`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from .cold_start import LAYER_PROBES
from .contenders import CONTENDERS, OURS, POWERTOOLS
from .report import Section, Table, ratio
from .scenarios import SCENARIOS
from .workload import create_table, dynamodb_client

ROOT = Path(__file__).resolve().parents[1]
BASE = "import boto3"
IMPORTED = "library imported"
INIT = "init: its client made, a handler decorated per path"


def _resident_kb() -> dict[str, int]:
    """This process's resident set now and at its peak, in KB (Linux's /proc)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def child(slug: str, endpoint_url: str, table: str, calls: int) -> None:
    """Runs in a fresh interpreter: prints the resident set after each step as JSON."""
    from .environment import block_awscrt

    block_awscrt()
    steps: list[tuple[str, int]] = []
    import boto3  # noqa: F401

    steps.append((BASE, _resident_kb()["VmRSS"]))
    contender = next(c for c in CONTENDERS if c.slug == slug)
    exec(LAYER_PROBES[slug])  # the import a function's code makes, as in the cold start
    steps.append((IMPORTED, _resident_kb()["VmRSS"]))
    from .scenarios import Subject

    client = contender.default_client(endpoint_url)
    subjects = [Subject(scenario, contender, client, table) for scenario in SCENARIOS]
    steps.append((INIT, _resident_kb()["VmRSS"]))
    for subject in subjects:
        with subject:
            for _ in range(calls):
                subject.check(subject())
        steps.append((subject.scenario.title, _resident_kb()["VmRSS"]))
    steps.append(("peak", _resident_kb()["VmHWM"]))
    print(json.dumps(steps))


def _run_child(slug: str, endpoint_url: str, table: str, calls: int) -> list[tuple[str, int]]:
    """A fresh interpreter, run from the project's root so that it imports `benchmarks`."""
    environment = dict(os.environ)
    environment.setdefault("AWS_ACCESS_KEY_ID", "benchmark")
    environment.setdefault("AWS_SECRET_ACCESS_KEY", "benchmark")
    arguments = f"{slug!r}, {endpoint_url!r}, {table!r}, {calls}"
    code = f"from benchmarks.rss import child; child({arguments})"
    finished = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=600,
    )
    if finished.returncode:
        raise RuntimeError(f"{slug}: the memory probe failed:\n{finished.stderr[-3000:]}")
    output = finished.stdout
    return [(name, kb) for name, kb in json.loads(output.strip().splitlines()[-1])]


def measure(endpoint_url: str, *, calls: int, runs: int) -> dict[str, list[list[tuple[str, int]]]]:
    """`runs` fresh interpreters per library, the libraries alternating, each on a table of
    its own (the scenarios' keys repeat from one interpreter to the next)."""
    setup = dynamodb_client(endpoint_url)
    results: dict[str, list[list[tuple[str, int]]]] = {c.slug: [] for c in CONTENDERS}
    for _ in range(runs):
        for contender in CONTENDERS:
            table = create_table(
                setup, f"memory-{contender.slug}-{uuid.uuid4().hex[:8]}", contender.key_attribute
            )
            results[contender.slug].append(_run_child(contender.slug, endpoint_url, table, calls))
    return results


def _medians(runs: list[list[tuple[str, int]]]) -> list[tuple[str, float, float]]:
    """(step, median resident KB, median growth over the step before) per step."""
    names = [name for name, _ in runs[0]]
    rows = []
    for index, name in enumerate(names):
        resident = statistics.median(run[index][1] for run in runs)
        growth = (
            0.0
            if index == 0 or name == "peak"
            else statistics.median(run[index][1] - run[index - 1][1] for run in runs)
        )
        rows.append((name, resident, growth))
    return rows


def _mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def _plus(kb: float) -> str:
    return f"{kb / 1024:+.1f} MB"


def section(results: dict[str, list[list[tuple[str, int]]]], *, calls: int) -> Section:
    ours = _medians(results[OURS.slug])
    theirs = _medians(results[POWERTOOLS.slug])
    base_ours, base_theirs = ours[0][1], theirs[0][1]
    rows = []
    for (name, resident, growth), (_, their_resident, their_growth) in zip(
        ours, theirs, strict=True
    ):
        if name == BASE:
            rows.append([f"after `{BASE}`", _mb(resident), _mb(their_resident), "", "", ""])
            continue
        label = name if name in (IMPORTED, INIT, "peak") else f"after {calls} calls: {name.lower()}"
        rows.append(
            [
                label,
                _mb(resident),
                _mb(their_resident),
                "" if name == "peak" else f"{_plus(growth)} / {_plus(their_growth)}",
                f"{_plus(resident - base_ours)} / {_plus(their_resident - base_theirs)}",
                ratio(resident - base_ours, their_resident - base_theirs),
            ]
        )
    runs = min(len(runs) for runs in results.values())
    return Section(
        title="Resident memory",
        method=(
            "Lambda reports a function's peak resident set as its Max Memory Used. Each library "
            f"ran in {runs} fresh interpreters of its own (alternating; no awscrt, as on "
            "Lambda), on the client it makes itself, against DynamoDB Local: the resident set "
            f"(`VmRSS`) after `{BASE}`, after the library's import (as in the cold start "
            "section), after the rest of the function's init (its client made, one handler "
            f"decorated per path), and after {calls} calls of each invocation path in turn, "
            "in the CPU section's order; the last row is the peak "
            "(`VmHWM`). Medians over the interpreters."
        ),
        tables=[
            Table(
                [
                    "step",
                    "ours: resident",
                    "Powertools: resident",
                    "this step added (ours / PT)",
                    "over boto3 (ours / PT)",
                    "over boto3, ratio",
                ],
                rows,
            )
        ],
        notes=[
            "A step's growth includes what its path loads the first time it runs (botocore "
            "loads an operation's model and builds its parsers on first use, Powertools "
            "imports modules lazily), and the allocator keeps freed memory resident: later "
            "steps grow only if a path keeps or leaks memory. A warm-cache replay keeps each "
            "library's cache of results in memory."
        ],
    )
