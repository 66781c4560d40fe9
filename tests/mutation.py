"""`make mutate`: mutmut over the modules the failure promises live in, on the fast tests.

As a program (`python -m tests.mutation [MODULE [MUTANT...]]`) it starts one DynamoDB Local for the
whole run, runs `mutmut run` (on one module's mutants if given, e.g. `_protocol.engine`, or on the
named mutants of it only), and prints the summary. As a pytest plugin (`-p tests.mutation`, set in
pyproject's [tool.mutmut]) it points every mutant's tests at that DynamoDB Local, with table names
unique per process, instead of starting a JVM per mutant (a mutant killed on timeout would leave its
JVM behind), and runs the moto unit tests before the DynamoDB Local ones, so most mutants die in the
first seconds. The Valkey servers are not shared: each mutant's process starts its own when a test
first asks (tests/valkey_servers.py), on an empty keyspace, and they die with that process however
it ends, a time-out's SIGXCPU or SIGKILL included (`_dev.valkey_local`'s parent-death signal).
"""

from __future__ import annotations

import fnmatch
import itertools
import math
import os
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ENDPOINT = "LAMBDA_IDEMPOTENCY_MUTATION_ENDPOINT"
ROOT = Path(__file__).resolve().parents[1]

PROMISE_MODULES = (
    "_protocol.run",
    "_protocol.engine",
    "_protocol.claiming",
    "_protocol.completing",
    "_protocol.replaying",
    "_protocol.coroutines",
    "_protocol.waiting",
    "_stores.dynamodb.store",
    "_stores.dynamodb.calls",
    "_stores.dynamodb.claim_rewrites",
    "_stores.dynamodb.decoration_check",
    "_stores.dynamodb.operator_actions",
    "_stores.dynamodb.record_items",
    "_stores.dynamodb.result_placement",
    "_stores.dynamodb.layout",
    "_base.keys",
    "_stores.record",
    "_stores.encoding",
    "_protocol.execution",
    "_stores.dynamodb.limits",
    "_protocol.callables",
    "_protocol.durable",
    "_stores.valkey.store",
    "_stores.valkey.reading",
    "_stores.valkey.replicas",
    "_stores.valkey.connection",
    "_stores.valkey.waking",
    "_stores.valkey.transport",
    "_stores.valkey.lean",
    "_stores.valkey.replies",
    "_stores.valkey.operators",
)
STORE_POLICY = (
    # What an HTTP response or a batch record stores and replays, and under which key.
    "_http.x_status_below_500",
    "_http.x_status_of",
    "_http.x__answer",
    "_http.x_mark_replayed",
    "_batch.x_record_id",
    "_batch.x_record_content",
    "_batch.x__source",
    "_batch.x__identifier",
    "_batch.x_process_batch",
)
SLOW_LAST = ("tests/integration/test_concurrency.py",)


# -- the pytest plugin -----------------------------------------------------------------------


_tables = itertools.count()


def _unique_names() -> Iterator[str]:
    """Unique across pytest sessions in one process and across forked mutant processes."""
    while True:
        yield f"idempotency-test-{os.getpid()}-{next(_tables)}"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(ENDPOINT):
        # The fixtures take table names from this generator; a mutant's process is forked
        # from mutmut's, so without the pid every mutant would reuse the same names on the
        # shared DynamoDB Local, fail on "preexisting table" and count as killed.
        from lambda_idempotency._dev import testing

        testing._names = _unique_names()
        # mutmut runs several pytest sessions in its own process (its first pass, the listing,
        # the clean run): a socket one of them left to the garbage collector (a Valkey client
        # a test dropped) is collected in a later one, whose end then raised instead of
        # returning, and mutmut stopped; in a mutant's process that would count as a kill.
        # `make test` keeps the check (filterwarnings = error).
        config.addinivalue_line("filterwarnings", "ignore::ResourceWarning")


@pytest.hookimpl(tryfirst=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Any:
    endpoint = os.environ.get(ENDPOINT)
    if fixturedef.argname != "dynamodb_local_endpoint" or not endpoint:
        return None
    fixturedef.cached_result = (endpoint, fixturedef.cache_key(request), None)
    return endpoint


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """mutmut runs each mutant's tests by id, and pytest cannot find an id it had to escape
    (a backslash, a control or non-ASCII character): such strings get an id it need not."""
    if isinstance(val, str) and not (val.isascii() and val.isprintable() and "\\" not in val):
        return ascii(val).replace("\\", "/")
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        path = item.nodeid.removeprefix("mutants/")
        if path.startswith("tests/unit"):
            return 0
        return 2 if path.startswith(SLOW_LAST) else 1

    items.sort(key=rank)


# -- the program -----------------------------------------------------------------------------


def mutant_patterns(module: str | None) -> list[str]:
    """mutmut's mutant names are `lambda_idempotency.<module>.<function>__mutmut_<n>`;
    `store-policy` names the functions of `_http` and `_batch` in STORE_POLICY."""
    if module == "store-policy":
        return [f"lambda_idempotency.{name}*" for name in STORE_POLICY]
    if module:  # several at once, comma-separated: one first pass (coverage) for all
        dotted = (name.removesuffix(".py").replace("/", ".") for name in module.split(","))
        return [f"lambda_idempotency.{name}.*" for name in dotted]  # `_protocol/engine.py` too
    return [f"lambda_idempotency.{name}.*" for name in PROMISE_MODULES] + [
        f"lambda_idempotency.{name}*" for name in STORE_POLICY
    ]


SAMPLE_SEED = 20261124
"""Fixed, so a sample can be run again after new tests and compared mutant for mutant."""


def sample_of(module: str | None, size: int, env: dict[str, str]) -> list[str]:
    """`size` of the module's mutants drawn at random: an unbiased estimate of its score when
    the whole module would take hours. mutmut names mutants only once it has made them: a run
    on a pattern that matches none makes them and tests nothing (newer mutmut then fails on
    the empty filter, after making them: the results say whether it did)."""
    patterns = mutant_patterns(module)
    if not results(patterns):
        making = [_mutmut(), "run", "lambda_idempotency.__none__"]
        subprocess.run(making, check=False, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    groups = [[pattern] for pattern in patterns] if module else [patterns]
    drawn = []
    for group in groups:  # `size` of each named module's mutants, or of all of them
        every = sorted(results(group))
        if not every:
            raise SystemExit(f"mutmut made no mutants of {module or 'the promise modules'}")
        drawn += random.Random(SAMPLE_SEED).sample(every, min(size, len(every)))
    return sorted(drawn)


def wilson_interval(caught: int, tested: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % interval of a proportion estimated from a sample (Wilson's score interval)."""
    share = caught / tested
    centre = (share + z * z / (2 * tested)) / (1 + z * z / tested)
    spread = z * math.sqrt(share * (1 - share) / tested + z * z / (4 * tested * tested))
    spread /= 1 + z * z / tested
    return 100 * (centre - spread), 100 * min(1.0, centre + spread)


def results(patterns: list[str]) -> dict[str, str]:
    """Each mutant of the run and its status (killed, survived, timeout, no tests, ...)."""
    listing = subprocess.run(
        [_mutmut(), "results", "--all", "true"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    statuses = dict(line.strip().rsplit(": ", 1) for line in listing.splitlines() if ": " in line)
    return {
        name: status
        for name, status in statuses.items()
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
    }


def _mutmut() -> str:
    return str(Path(sys.executable).with_name("mutmut"))


def refresh_copies() -> list[str]:
    """mutmut copies a module it does not mutate into mutants/ once and never again, so a run
    after a change elsewhere in the package (say `_decorators`) would test the old one: drop
    the copies that differ from the source, for mutmut to copy afresh."""
    source = ROOT / "layer" / "lambda_idempotency"
    copies = ROOT / "mutants" / "src" / "lambda_idempotency"
    mutated = {name.removeprefix("src/lambda_idempotency/") for name in _only_mutate()}
    dropped = []
    for copy in sorted(copies.rglob("*.py")) if copies.is_dir() else []:
        original = source / copy.relative_to(copies)
        if str(copy.relative_to(copies)) in mutated:
            continue
        if not original.is_file() or original.read_bytes() != copy.read_bytes():
            copy.unlink()
            dropped.append(str(copy.relative_to(copies)))
    return dropped


def _only_mutate() -> list[str]:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return list(config["tool"]["mutmut"]["only_mutate"])


def main(argv: list[str]) -> int:
    from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

    options, sample = [], 0
    while argv[:1] in (["--max-children"], ["--sample"]):
        if argv[0] == "--max-children":  # e.g. 1 on a machine shared with other work
            options += argv[:2]
        else:  # a random sample of N mutants when the whole module would take hours
            sample = int(argv[1])
        argv = argv[2:]
    module = argv[0] if argv else None
    names = argv[1:]  # given mutants only, e.g. the survivors of a run, after new tests
    link = ROOT / "src"
    if not link.exists():
        link.symlink_to("layer", target_is_directory=True)
    if dropped := refresh_copies():
        print(f"copied afresh into mutants/: {', '.join(dropped)}")
    started = time.monotonic()
    with DynamoDBLocal() as local:
        env = {**os.environ, ENDPOINT: local.endpoint_url}
        if sample and not names:
            names = sample_of(module, sample, env)
        command = [_mutmut(), "run", *options, *(names or mutant_patterns(module))]
        run = subprocess.run(command, check=False, cwd=ROOT, env=env)
    minutes = (time.monotonic() - started) / 60
    statuses = results(names if sample else mutant_patterns(module))
    count = Counter(statuses.values())
    caught = count["killed"] + count["timeout"] + count["caught by type check"]
    tested = caught + count["survived"] + count["suspicious"]
    score = 100 * caught / tested if tested else 0.0
    print(f"\nsurvived: {sorted(name for name, s in statuses.items() if s == 'survived')}")
    if sample and tested:
        low, high = wilson_interval(caught, tested)
        print(f"sampled (seed {SAMPLE_SEED}): the module's score is {low:.1f}-{high:.1f} % (95 %)")
    print(
        f"mutation testing of {module or 'the promise modules'}: {len(statuses)} mutants, "
        f"{count['killed']} killed, {count['survived']} survived, {count['timeout']} timeout, "
        f"{count['no tests']} no tests; score {score:.1f} % in {minutes:.1f} min "
        "(`.venv/bin/mutmut show NAME` shows a mutant)"
    )
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
