"""Cold start as Lambda has it: INIT and the first invocation, each library on its own defaults.

Each sample is a fresh interpreter started as Lambda's runtime starts one: `python -I -B`, the
bytecode of every module it loads already compiled and present (a warm-up interpreter writes it
under a `-X pycache_prefix` folder of this run; the timed ones only read it), no awscrt, and the
environment a function has (its name and memory size, region, temporary credentials,
AWS_LAMBDA_INITIALIZATION_TYPE, AWS_EXECUTION_ENV) with AWS_ENDPOINT_URL_DYNAMODB pointing at
DynamoDB Local, so that the client each library makes for itself, given none, reaches it.

In each interpreter `import boto3` comes first (both libraries need it; not counted), then
CPU time (`time.process_time`, the interpreter's own: DynamoDB Local's is not in it) of:

- set-up: the function's module as a user writes it: the library's import, its store built at
  module scope (ours: `DynamoDBStore(table)`; Powertools: `DynamoDBPersistenceLayer(
  table_name=table)` and an `IdempotencyConfig`), one decorated handler;
- the first invocation: a first run on a fresh key, answered by DynamoDB Local over HTTP.

The libraries alternate from one interpreter to the next; each measured twice per round, with
AWS_LAMBDA_INITIALIZATION_TYPE=on-demand and =provisioned-concurrency (the same code: what the
first request pays after an INIT that was paid in advance). Nothing assumes where a library does
its work: what it does during INIT lands in set-up, what it leaves for later lands in the first
invocation.

`python -m benchmarks.lambda_cold_start` prints this section alone (`--runs 3` for a quick look).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report import Budget, Section, Table, milliseconds, ratio, render_section
from .workload import KEY_SELECTION, PAYLOAD_SELECTION, REGION

ON_DEMAND = "on-demand"
PROVISIONED = "provisioned-concurrency"
INITIALIZATION_TYPES = (ON_DEMAND, PROVISIONED)
SUM_BUDGET = 0.5
"""DESIGN.md, Budgets, "Cold start as Lambda has it": set-up plus first invocation, at most
0.5x Powertools'."""
FIRST_BUDGET = 1.0
"""...and the first invocation alone no more than Powertools' first invocation."""
FUNCTION_NAME = "benchmark"
MEMORY_SIZE = "128"
"""The smallest function, the one the budgets speak of (a fraction of a vCPU)."""
TRACE_ID = "Root=1-67a5b3c1-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=0"
"""What the runtime puts in _X_AMZN_TRACE_ID before it calls the handler (botocore copies it
into a header when AWS_LAMBDA_FUNCTION_NAME is set)."""


@dataclass(frozen=True)
class UserCode:
    """A function's module as a user writes it from the library's documentation."""

    imports: str
    store: str
    """Statements that bind `store` (and whatever else the library's set-up needs)."""
    decorator: str
    """The decorator expression, over `store`."""

    def module(self, table: str) -> str:
        """The whole module: import, store, one decorated handler (its body counts its runs)."""
        return "\n".join(
            [
                self.imports,
                self.store.format(table=table),
                f"@{self.decorator}",
                "def handler(event, context):",
                "    executions.append(event['order_id'])",
                "    return {'order_id': event['order_id'], 'status': 'charged'}",
            ]
        )


USER_CODE = {
    "ours": UserCode(
        imports="from lambda_idempotency import DynamoDBStore, idempotent",
        store="store = DynamoDBStore({table!r})",
        decorator=f"idempotent(key={KEY_SELECTION!r}, payload={PAYLOAD_SELECTION!r}, store=store)",
    ),
    "powertools": UserCode(
        imports=(
            "from aws_lambda_powertools.utilities.idempotency import (\n"
            "    DynamoDBPersistenceLayer, IdempotencyConfig, idempotent)"
        ),
        store=(
            "store = DynamoDBPersistenceLayer(table_name={table!r})\n"
            f"config = IdempotencyConfig(event_key_jmespath={KEY_SELECTION!r}, "
            f"payload_validation_jmespath={PAYLOAD_SELECTION!r})"
        ),
        decorator="idempotent(config=config, persistence_store=store)",
    ),
}
LIBRARIES = tuple(USER_CODE)
TITLES = {"ours": "lambda-idempotency", "powertools": "Powertools"}

BLOCK_AWSCRT = "import sys; sys.modules['awscrt'] = None  # Lambda's runtime has no awscrt"

STALE_BYTECODE = """
def _stale_bytecode():
    # Modules this interpreter compiled from source: no bytecode, or bytecode older than
    # the source (the timed interpreters must only read bytecode, as Lambda's do).
    import os, sys
    stale = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
        if not (origin and cached and origin.endswith(".py")):
            continue
        try:
            with open(cached, "rb") as file:
                header = file.read(16)
            source = os.stat(origin)
        except OSError:
            stale.append(name)
            continue
        if int.from_bytes(header[4:8], "little") & 1:  # hash-based (PEP 552)
            continue
        if (int.from_bytes(header[8:12], "little"), int.from_bytes(header[12:16], "little")) != (
                int(source.st_mtime) & 0xFFFFFFFF, source.st_size & 0xFFFFFFFF):
            stale.append(name)
    return sorted(stale)
"""

_PROBE = """
{block_awscrt}
import gc, json, os, time
import boto3
executions = []
class Context:
    function_name = {function!r}
    memory_limit_in_mb = {memory}
    invoked_function_arn = "arn:aws:lambda:{region}:123456789012:function:{function}"
    aws_request_id = "00000000-0000-0000-0000-000000000001"
    def get_remaining_time_in_millis(self):
        return 30_000
event = {{"order_id": {key!r}, "customer_id": "cus_4242", "amount": 1250, "currency": "EUR",
         "items": [{{"sku": "SKU-0001", "quantity": 2}}, {{"sku": "SKU-0002", "quantity": 1}}]}}
gc.collect()  # boto3's garbage lands in neither library's time
# ---- INIT: the function's module
setup_start = time.process_time()
{module}
setup_done = time.process_time()
# ---- the runtime, between INIT and the first request (not timed)
import botocore.client
clients_after_init = sum(isinstance(o, botocore.client.BaseClient) for o in gc.get_objects())
os.environ["_X_AMZN_TRACE_ID"] = {trace!r}
context = Context()
# ---- the first invocation
first_start, first_wall = time.process_time(), time.perf_counter()
result = handler(event, context)
first_done, first_wall_done = time.process_time(), time.perf_counter()
{stale_bytecode}
print(json.dumps({{
    "setup": setup_done - setup_start,
    "first": first_done - first_start,
    "first_wall": first_wall_done - first_wall,
    "clients_after_init": clients_after_init,
    "executed": executions == [event["order_id"]] and result["order_id"] == event["order_id"],
    "stale": _stale_bytecode(),
}}))
"""


def lambda_environment(
    endpoint_url: str, home: Path, initialization_type: str = ON_DEMAND
) -> dict[str, str]:
    """The environment Lambda gives a function (what either library or botocore reads), with
    DynamoDB's endpoint for every default client on DynamoDB Local; nothing of this machine's
    own (no AWS profile, an empty HOME: no ~/.aws)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {
        "PATH": os.defpath,
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "HOME": str(home),
        "AWS_LAMBDA_FUNCTION_NAME": FUNCTION_NAME,
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": MEMORY_SIZE,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_INITIALIZATION_TYPE": initialization_type,
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{version}",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "benchmark",
        "AWS_SECRET_ACCESS_KEY": "benchmark",
        "AWS_SESSION_TOKEN": "benchmark",
        "AWS_ENDPOINT_URL_DYNAMODB": endpoint_url,
    }


@dataclass(frozen=True)
class Interpreters:
    """How the interpreters of one run start: a bytecode folder of the run's own and an empty
    HOME, both temporary."""

    bytecode: Path
    home: Path

    def command(self, *, write_bytecode: bool = False) -> list[str]:
        flags = ["-I"] if write_bytecode else ["-I", "-B"]
        return [sys.executable, *flags, "-X", f"pycache_prefix={self.bytecode}"]


@contextlib.contextmanager
def interpreters() -> Iterator[Interpreters]:
    with tempfile.TemporaryDirectory(prefix="lambda-init-") as tmp:
        root = Path(tmp)
        (root / "bytecode").mkdir()
        (root / "home").mkdir()
        yield Interpreters(root / "bytecode", root / "home")


@dataclass(frozen=True)
class Sample:
    setup: float
    first: float
    first_wall: float
    clients_after_init: int


@dataclass
class ColdStarts:
    samples: dict[tuple[str, str], list[Sample]]
    """(initialization type, library) -> one sample per interpreter."""
    stale: set[str]
    """Modules a timed interpreter compiled from source after its retries (must be none)."""
    retries: int
    """Timed interpreters run again because a source changed under them (bytecode stale)."""
    stored: dict[str, int]
    """Library -> items in its table at the end (each first run leaves at least one)."""

    @property
    def runs(self) -> int:
        return min(len(values) for values in self.samples.values())


def _probe(
    run: Interpreters,
    endpoint_url: str,
    library: str,
    table: str,
    initialization_type: str,
    *,
    write_bytecode: bool = False,
) -> dict[str, Any]:
    code = _PROBE.format(
        block_awscrt=BLOCK_AWSCRT,
        function=FUNCTION_NAME,
        memory=MEMORY_SIZE,
        region=REGION,
        key=f"cold-{library}-{uuid.uuid4().hex}",
        module=USER_CODE[library].module(table),
        trace=TRACE_ID,
        stale_bytecode=STALE_BYTECODE,
    )
    completed = subprocess.run(
        [*run.command(write_bytecode=write_bytecode), "-c", code],
        capture_output=True,
        text=True,
        check=False,
        cwd=run.home,
        env=lambda_environment(endpoint_url, run.home, initialization_type),
        timeout=300,
    )
    if completed.returncode:
        raise RuntimeError(
            f"{library} ({initialization_type}): the cold start probe failed:\n"
            f"{completed.stderr[-3000:]}"
        )
    result: dict[str, Any] = json.loads(completed.stdout.strip().splitlines()[-1])
    if not result["executed"]:
        raise RuntimeError(f"{library}: the first invocation did not run the handler once")
    return result


def measure(endpoint_url: str, *, runs: int) -> ColdStarts:
    """`runs` rounds; each round one interpreter per library and initialization type, the
    libraries' order alternating from round to round. Each library on a table of its own
    (their default key attributes differ), a fresh key per interpreter."""
    from .contenders import CONTENDERS
    from .workload import create_table, dynamodb_client

    setup = dynamodb_client(endpoint_url)
    suffix = uuid.uuid4().hex[:8]
    tables = {
        contender.slug: create_table(
            setup, f"lambda-init-{contender.slug}-{suffix}", contender.key_attribute
        )
        for contender in CONTENDERS
    }
    samples: dict[tuple[str, str], list[Sample]] = {
        (kind, library): [] for kind in INITIALIZATION_TYPES for library in LIBRARIES
    }
    stale: set[str] = set()
    retries = 0
    with interpreters() as run:
        for kind, library in samples:  # writes the bytecode every timed interpreter reads
            _probe(run, endpoint_url, library, tables[library], kind, write_bytecode=True)
        for round_ in range(runs):
            order = LIBRARIES if round_ % 2 == 0 else LIBRARIES[::-1]
            for kind in INITIALIZATION_TYPES:
                for library in order:
                    for attempt in range(3):
                        result = _probe(run, endpoint_url, library, tables[library], kind)
                        if not result["stale"] or attempt == 2:
                            break
                        retries += 1  # a source changed: compile it again, then measure again
                        _probe(
                            run, endpoint_url, library, tables[library], kind, write_bytecode=True
                        )
                    stale.update(result["stale"])
                    samples[kind, library].append(
                        Sample(
                            setup=float(result["setup"]),
                            first=float(result["first"]),
                            first_wall=float(result["first_wall"]),
                            clients_after_init=int(result["clients_after_init"]),
                        )
                    )
    stored = {
        library: int(setup.scan(TableName=table, Select="COUNT")["Count"])
        for library, table in tables.items()
    }
    for library, count in stored.items():
        expected = (runs + 1) * len(INITIALIZATION_TYPES)
        if count < expected:
            raise RuntimeError(f"{library}: {count} items stored, {expected} first runs made")
    return ColdStarts(samples=samples, stale=stale, retries=retries, stored=stored)


def _median(values: list[Sample], part: str) -> float:
    if part == "sum":
        return statistics.median(sample.setup + sample.first for sample in values)
    return statistics.median(float(getattr(sample, part)) for sample in values)


PARTS = (
    ("setup", "set-up: import, store, one decorated handler"),
    ("first", "first invocation (a first run, answered over HTTP)"),
    ("sum", "set-up + first invocation"),
)


def commands(runs: int) -> str:
    return (
        f"`python -m benchmarks.lambda_cold_start --runs {runs}` (this section alone; it "
        "starts DynamoDB Local, or takes `--endpoint`), or within the suite "
        "`python -m benchmarks --only lambda_cold_start --out DIR --no-chart`"
    )


def section(results: ColdStarts) -> Section:
    rows = []
    budgets = []
    for kind in INITIALIZATION_TYPES:
        ours, theirs = results.samples[kind, "ours"], results.samples[kind, "powertools"]
        for part, title in PARTS:
            mine, their = _median(ours, part), _median(theirs, part)
            label = title if part != "sum" else f"**{title}**"
            rows.append(
                [f"`{kind}`", label, milliseconds(mine), milliseconds(their), ratio(mine, their)]
            )
        rows.append(
            [
                f"`{kind}`",
                "botocore clients in the process at the end of INIT",
                str(max(sample.clients_after_init for sample in ours)),
                str(max(sample.clients_after_init for sample in theirs)),
                "",
            ]
        )
        for part, limit, what in (
            ("sum", SUM_BUDGET, "set-up + first invocation"),
            ("first", FIRST_BUDGET, "first invocation alone"),
        ):
            mine, their = _median(ours, part), _median(theirs, part)
            budgets.append(
                Budget(
                    f"cold start as Lambda has it ({kind}), {what}, CPU",
                    f"≤ {limit:.1f}x Powertools'",
                    f"{milliseconds(mine)} vs {milliseconds(their)} = {ratio(mine, their)}",
                    their > 0 and mine <= limit * their,
                )
            )
    wall = {
        library: statistics.median(
            sample.first_wall
            for kind in INITIALIZATION_TYPES
            for sample in results.samples[kind, library]
        )
        for library in LIBRARIES
    }
    notes = [
        "The first invocation's wall time, for scale (DynamoDB Local's answers in it): "
        + ", ".join(f"{TITLES[library]} {milliseconds(wall[library])}" for library in LIBRARIES)
        + " (medians over both initialization types).",
        "Modules a timed interpreter compiled from source (must be none): "
        + (", ".join(sorted(results.stale)) or "none")
        + (
            f"; {results.retries} interpreters ran again after a source changed under the run"
            if results.retries
            else ""
        )
        + ".",
        f"To reproduce: {commands(results.runs)}.",
    ]
    return Section(
        title="Cold start as Lambda has it",
        method=(
            f"Medians over {results.runs} fresh interpreters per row and library, the libraries "
            "alternating, CPU time (`time.process_time`). Each interpreter starts as Lambda's "
            "runtime starts one: `python -I -B`, the bytecode of every module it loads already "
            "compiled and present (written by a warm-up interpreter, only read by the timed "
            "ones), no awscrt, the environment a function has (AWS_LAMBDA_FUNCTION_NAME, "
            f"AWS_LAMBDA_FUNCTION_MEMORY_SIZE={MEMORY_SIZE}, AWS_REGION and AWS_DEFAULT_REGION, "
            "temporary credentials, AWS_LAMBDA_INITIALIZATION_TYPE, AWS_EXECUTION_ENV) and "
            "AWS_ENDPOINT_URL_DYNAMODB on DynamoDB Local, so each library's **default** client "
            "reaches it (the benchmark passes none). `import boto3` first, not counted; then "
            "set-up, the function's module as a user writes it (ours: `DynamoDBStore(table)`; "
            "Powertools: `DynamoDBPersistenceLayer(table_name=table)` and an "
            "`IdempotencyConfig`; one `@idempotent` handler), and the first invocation, a first "
            "run on a fresh key. `provisioned-concurrency` runs the same code: what the first "
            "request pays after an INIT paid in advance."
        ),
        tables=[
            Table(
                ["initialization", "CPU", "lambda-idempotency", "Powertools", "ratio"],
                rows,
            )
        ],
        budgets=budgets,
        notes=notes,
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lambda_cold_start")
    parser.add_argument("--runs", type=int, default=9, help="interpreters per row and library")
    parser.add_argument("--endpoint", help="use this DynamoDB Local instead of starting one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        endpoint_url = args.endpoint
        if endpoint_url is None:
            from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

            endpoint_url = stack.enter_context(DynamoDBLocal()).endpoint_url
        results = measure(endpoint_url, runs=args.runs)
    print(render_section(section(results)))


if __name__ == "__main__":
    main()
