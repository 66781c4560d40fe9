"""Resident memory: what each library adds to a Lambda function's RSS, path by path.

Lambda bills and limits a function by its memory setting and reports "Max Memory Used", the
process's peak resident set. Each library runs in fresh interpreters of its own, started as the
cold start section starts them (`benchmarks.lambda_cold_start`: `python -I -B` reading
precompiled bytecode, no awscrt, the environment a Lambda function has, DynamoDB's endpoint in
AWS_ENDPOINT_URL_DYNAMODB), on its **own default store and client**: the benchmark passes none.
The resident set is read after `import boto3`, after the library's import, after the rest of
the function's INIT (its store built as a user writes it, one handler decorated per invocation
path over that store), after a first call on each path in the CPU section's order (the
budget's point), then after many more calls of each path; the last row is the peak (`VmHWM`).

`python -m benchmarks.rss` prints this section alone (`--runs 1 --calls 50` for a quick look).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import statistics
import subprocess
import uuid
from pathlib import Path
from typing import Any

from .contenders import CONTENDERS, OURS, POWERTOOLS
from .lambda_cold_start import (
    BLOCK_AWSCRT,
    STALE_BYTECODE,
    USER_CODE,
    Interpreters,
    interpreters,
    lambda_environment,
)
from .report import Budget, Section, Table, ratio, render_section
from .scenarios import SCENARIOS
from .workload import create_table, dynamodb_client

ROOT = Path(__file__).resolve().parents[1]
BASE = "import boto3"
IMPORTED = "library imported"
INIT = "INIT: its default store built, a handler decorated per path"
FIRST = "first call: "
CALLS = "calls: "
PEAK = "peak"
BUDGET = 0.5
"""DESIGN.md, Budgets, "Resident memory": over `import boto3`, after INIT and a first call on
each path, at most 0.5x Powertools'."""


def _resident_kb() -> dict[str, int]:
    """This process's resident set now and at its peak, in KB (Linux's /proc)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def child(slug: str, table: str, calls: int) -> None:
    """Runs in a fresh interpreter in Lambda's environment: prints the resident set after each
    step, and the modules it had to compile, as JSON."""
    from .environment import block_awscrt
    from .scenarios import Subject

    block_awscrt()
    steps: list[tuple[str, int]] = []
    import boto3  # noqa: F401

    steps.append((BASE, _resident_kb()["VmRSS"]))
    code = USER_CODE[slug]
    namespace: dict[str, Any] = {"executions": []}
    exec(code.imports, namespace)  # the function's module, as the cold start section runs it
    steps.append((IMPORTED, _resident_kb()["VmRSS"]))
    exec(code.module(table), namespace)
    store = namespace["store"]
    contender = next(c for c in CONTENDERS if c.slug == slug)

    def wrap(client: Any, table: str, handler: Any, *, cache: bool, **options: Any) -> Any:
        return contender.decorate(store, handler, cache=cache, **options)

    sharing = dataclasses.replace(contender, wrap=wrap)
    subjects = [Subject(scenario, sharing, None, table) for scenario in SCENARIOS]
    steps.append((INIT, _resident_kb()["VmRSS"]))
    with contextlib.ExitStack() as stack:
        for subject in subjects:
            stack.enter_context(subject)
            subject.check(subject())
            steps.append((FIRST + subject.scenario.title, _resident_kb()["VmRSS"]))
        for subject in subjects:
            for _ in range(calls):
                subject.check(subject())
            steps.append((CALLS + subject.scenario.title, _resident_kb()["VmRSS"]))
    steps.append((PEAK, _resident_kb()["VmHWM"]))
    exec(STALE_BYTECODE, namespace)
    print(json.dumps({"steps": steps, "stale": namespace["_stale_bytecode"]()}))


def _run_child(
    run: Interpreters,
    endpoint_url: str,
    slug: str,
    table: str,
    calls: int,
    *,
    write_bytecode: bool = False,
) -> dict[str, Any]:
    """A fresh interpreter as Lambda starts one; the project's root first on its path so that
    it imports `benchmarks` (before `import boto3`: in every step alike)."""
    code = (
        f"{BLOCK_AWSCRT}\nsys.path.insert(0, {str(ROOT)!r})\n"
        f"from benchmarks.rss import child\nchild({slug!r}, {table!r}, {calls})"
    )
    finished = subprocess.run(
        [*run.command(write_bytecode=write_bytecode), "-c", code],
        check=False,
        capture_output=True,
        text=True,
        cwd=run.home,
        env=lambda_environment(endpoint_url, run.home),
        timeout=600,
    )
    if finished.returncode:
        raise RuntimeError(f"{slug}: the memory probe failed:\n{finished.stderr[-8000:]}")
    result: dict[str, Any] = json.loads(finished.stdout.strip().splitlines()[-1])
    return result


@dataclasses.dataclass
class Memory:
    runs: dict[str, list[list[tuple[str, int]]]]
    """Library -> one list of (step, KB) per interpreter."""
    calls: int
    stale: set[str]
    """Modules a measured interpreter compiled from source after its retries (must be none)."""
    retries: int


def measure(endpoint_url: str, *, calls: int, runs: int) -> Memory:
    """`runs` fresh interpreters per library, the libraries alternating, each on a table of
    its own (the scenarios' keys repeat from one interpreter to the next)."""
    setup = dynamodb_client(endpoint_url)
    results: dict[str, list[list[tuple[str, int]]]] = {c.slug: [] for c in CONTENDERS}
    stale: set[str] = set()
    retries = 0

    def table(slug: str, key_attribute: str) -> str:
        return create_table(setup, f"memory-{slug}-{uuid.uuid4().hex[:8]}", key_attribute)

    with interpreters() as run:
        for contender in CONTENDERS:  # writes the bytecode the measured interpreters read
            name = table(contender.slug, contender.key_attribute)
            _run_child(run, endpoint_url, contender.slug, name, 1, write_bytecode=True)
        for round_ in range(runs):
            order = CONTENDERS if round_ % 2 == 0 else CONTENDERS[::-1]
            for contender in order:
                for attempt in range(3):
                    name = table(contender.slug, contender.key_attribute)
                    result = _run_child(run, endpoint_url, contender.slug, name, calls)
                    if not result["stale"] or attempt == 2:
                        break
                    retries += 1  # a source changed under the run: compile, measure again
                    _run_child(run, endpoint_url, contender.slug, name, 1, write_bytecode=True)
                stale.update(result["stale"])
                results[contender.slug].append([(step, kb) for step, kb in result["steps"]])
    return Memory(results, calls, stale, retries)


def _medians(runs: list[list[tuple[str, int]]]) -> list[tuple[str, float, float]]:
    """(step, median resident KB, median growth over the step before) per step."""
    names = [name for name, _ in runs[0]]
    rows = []
    for index, name in enumerate(names):
        resident = statistics.median(run[index][1] for run in runs)
        growth = (
            0.0
            if index == 0 or name == PEAK
            else statistics.median(run[index][1] - run[index - 1][1] for run in runs)
        )
        rows.append((name, resident, growth))
    return rows


def _mb(kb: float) -> str:
    return f"{kb / 1024:.1f} MB"


def _plus(kb: float) -> str:
    return f"{kb / 1024:+.1f} MB"


def _label(name: str, calls: int) -> str:
    if name.startswith(FIRST):
        return f"first call: {name.removeprefix(FIRST).lower()}"
    if name.startswith(CALLS):
        return f"after {calls} more calls: {name.removeprefix(CALLS).lower()}"
    return name


def section(memory: Memory) -> Section:
    ours = _medians(memory.runs[OURS.slug])
    theirs = _medians(memory.runs[POWERTOOLS.slug])
    base_ours, base_theirs = ours[0][1], theirs[0][1]
    rows = []
    for (name, resident, growth), (_, their_resident, their_growth) in zip(
        ours, theirs, strict=True
    ):
        if name == BASE:
            rows.append([f"after `{BASE}`", _mb(resident), _mb(their_resident), "", "", ""])
            continue
        rows.append(
            [
                _label(name, memory.calls),
                _mb(resident),
                _mb(their_resident),
                "" if name == PEAK else f"{_plus(growth)} / {_plus(their_growth)}",
                f"{_plus(resident - base_ours)} / {_plus(their_resident - base_theirs)}",
                ratio(resident - base_ours, their_resident - base_theirs),
            ]
        )
    last_first = max(index for index, (name, _, _) in enumerate(ours) if name.startswith(FIRST))
    mine, their = ours[last_first][1] - base_ours, theirs[last_first][1] - base_theirs
    runs = min(len(runs) for runs in memory.runs.values())
    notes = [
        "Each library has one store, built at module scope as a user writes it (ours: "
        "`DynamoDBStore(table)`; Powertools: `DynamoDBPersistenceLayer(table_name=table)`), "
        "shared by the five handlers. Powertools' persistence layer keeps the configuration of "
        "the first handler that calls it (the first run's, without a local cache), so its "
        "warm-cache path replays from DynamoDB and keeps no cache; ours keeps 256 results.",
        "A step's growth includes what its path loads the first time it runs (botocore "
        "loads an operation's model and builds its parsers on first use, Powertools "
        "imports modules lazily; a library that makes its client at the first call makes it "
        "there), and the allocator keeps freed memory resident: later steps grow only if a "
        "path keeps or leaks memory.",
        "Modules a measured interpreter compiled from source (must be none): "
        + (", ".join(sorted(memory.stale)) or "none")
        + (f"; {memory.retries} ran again after a source changed" if memory.retries else "")
        + ".",
        f"To reproduce: `python -m benchmarks.rss --runs {runs} --calls {memory.calls}` (this "
        "section alone; it starts DynamoDB Local, or takes `--endpoint`), or within the suite "
        "`python -m benchmarks --only memory --out DIR --no-chart`.",
    ]
    return Section(
        title="Resident memory",
        method=(
            "Lambda reports a function's peak resident set as its Max Memory Used. Each library "
            f"ran in {runs} fresh interpreters of its own (alternating), started as the section "
            "**Cold start as Lambda has it** starts them (`python -I -B` reading precompiled "
            "bytecode, no awscrt, a Lambda function's environment, on-demand), each on its "
            "**own default store and client** (the benchmark passes none; "
            "AWS_ENDPOINT_URL_DYNAMODB points them at DynamoDB Local): the resident set "
            f"(`VmRSS`) after `{BASE}`, after the library's import, after the rest of INIT "
            "(the store built, one handler decorated per invocation path), after a first call "
            "on each path in the CPU section's order (what the budget reads), then after "
            f"{memory.calls} more calls of each path; the last row is the peak (`VmHWM`). "
            "Medians over the interpreters."
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
        budgets=[
            Budget(
                "resident memory over `import boto3`, after INIT and a first call on each path "
                "(each library's default store, Lambda's environment)",
                f"≤ {BUDGET:.1f}x Powertools'",
                f"{_plus(mine)} vs {_plus(their)} = {ratio(mine, their)}",
                their > 0 and mine <= BUDGET * their,
            )
        ],
        notes=notes,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rss")
    parser.add_argument("--runs", type=int, default=3, help="interpreters per library")
    parser.add_argument("--calls", type=int, default=300, help="calls per path after the first")
    parser.add_argument("--endpoint", help="use this DynamoDB Local instead of starting one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        endpoint_url = args.endpoint
        if endpoint_url is None:
            from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

            endpoint_url = stack.enter_context(DynamoDBLocal()).endpoint_url
        memory = measure(endpoint_url, calls=args.calls, runs=args.runs)
    print(render_section(section(memory)))


if __name__ == "__main__":
    main()
