"""`make mutate`: mutmut over the modules the failure promises live in, on the fast tests.

As a program (`python -m tests.mutation [MODULE [MUTANT...]]`) it starts one DynamoDB Local
for the whole run, runs `mutmut run` (on one module's mutants if given, e.g. `_cache`, or on
the named mutants of it only), and prints the summary. As a pytest plugin (`-p
tests.mutation`, set in pyproject's [tool.mutmut]) it points every mutant's tests at that
DynamoDB Local, with table names unique per process, instead of starting a JVM per mutant (a
mutant killed on timeout would leave its JVM behind), and runs the moto unit tests before the
DynamoDB Local ones, so most mutants die in the first seconds.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
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
    "_protocol",
    "_waiting",
    "_store",
    "_keys",
    "_cache",
    "_record",
    "_encoding",
    "_execution",
)
STORE_POLICY = (
    # What an HTTP response or a batch record stores and replays, and under which key.
    "_http.x_status_below_500",
    "_http.x_status_of",
    "_http.x__answer",
    "_http.x_mark_replayed",
    "_batch.x_record_id",
    "_batch.x_record_content",
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
        from lambda_idempotency import testing

        testing._names = _unique_names()


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
    """mutmut's mutant names are `lambda_idempotency.<module>.<function>__mutmut_<n>`."""
    if module:
        return [f"lambda_idempotency.{module.removesuffix('.py')}.*"]
    return [f"lambda_idempotency.{name}.*" for name in PROMISE_MODULES] + [
        f"lambda_idempotency.{name}*" for name in STORE_POLICY
    ]


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


def main(argv: list[str]) -> int:
    from lambda_idempotency._dev.dynamodb_local import DynamoDBLocal

    module = argv[0] if argv else None
    names = argv[1:]  # given mutants only, e.g. the survivors of a run, after new tests
    link = ROOT / "src"
    if not link.exists():
        link.symlink_to("layer", target_is_directory=True)
    started = time.monotonic()
    with DynamoDBLocal() as local:
        env = {**os.environ, ENDPOINT: local.endpoint_url}
        command = [_mutmut(), "run", *(names or mutant_patterns(module))]
        run = subprocess.run(command, check=False, cwd=ROOT, env=env)
    minutes = (time.monotonic() - started) / 60
    statuses = results(mutant_patterns(module))
    count = Counter(statuses.values())
    caught = count["killed"] + count["timeout"] + count["caught by type check"]
    tested = caught + count["survived"] + count["suspicious"]
    score = 100 * caught / tested if tested else 0.0
    print(f"\nsurvived: {sorted(name for name, s in statuses.items() if s == 'survived')}")
    print(
        f"mutation testing of {module or 'the promise modules'}: {len(statuses)} mutants, "
        f"{count['killed']} killed, {count['survived']} survived, {count['timeout']} timeout, "
        f"{count['no tests']} no tests; score {score:.1f} % in {minutes:.1f} min "
        "(`.venv/bin/mutmut show NAME` shows a mutant)"
    )
    return run.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
