"""Each extra as a user gets it: the built wheel installed with that extra only in a fresh
virtualenv, and its entry point run there.

    make package-check    (CI runs it; `make test` does not collect this file: its name does
                           not start with test_, and the installs download from the registry)

- no extra: the package and jmespath, nothing else: no boto3 or botocore (Lambda's runtime
  ships them), no Powertools, none of the tooling's dependencies. What it does without boto3
  is the store rewrite's (a strict xfail marks it, below);
- `[aws-sdk]`: what a Lambda function has (the package, and the runtime's boto3). The handler
  runs (DynamoDB's answers stood in for in botocore's `before-send`), nothing of the tooling
  or Powertools is installed or imported; each Powertools feature, the command, the test
  helpers and ValkeyStore name the extra they need. With pytest added (a user's own), the
  plugin loads, and the moto fixture names the `testing` extra;
- `[powertools]`: Powertools and still no boto3; with `[aws-sdk]` beside it, each Powertools
  feature runs (a `powertools_json` key, `process_batch`, layout="powertools");
- `[cli]`: `lambda-idempotency` invokes a plain and a durable function of a template;
- `[testing]`: a user's pytest file on the moto fixture;
- `[durable]`: a durable handler with `@idempotent` inside `@durable_execution`;
- `[valkey]`: redis-py, and `ValkeyStore` built with it (without it, the package names the extra).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLING = {
    "pyyaml",
    "moto",
    "pytest",
    "aws-durable-execution-sdk-python",
    "aws-durable-execution-sdk-python-testing",
    "redis",
}
"""Distributions an extra brings, none of which the package alone installs."""
SDK = {"boto3", "botocore", "s3transfer"}
"""The AWS SDK for Python: Lambda's runtime ships it; outside Lambda, the `aws-sdk` extra."""
POWERTOOLS = "aws-lambda-powertools"
POWERTOOLS_MISSING = (
    " needs Powertools for AWS Lambda (aws-lambda-powertools), which is not installed: "
    "pip install 'lambda-idempotency[powertools]'"
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m build` makes (from its sdist, as an index would)."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)])
    (built,) = out.glob("lambda_idempotency-*-py3-none-any.whl")
    return built


def version_of(wheel: Path) -> str:
    """The version the build gave the wheel (setup.py: the commit's, in this checkout)."""
    return wheel.name.split("-")[1]


class Venv:
    """A fresh virtualenv: `pip install` into it, run its commands."""

    def __init__(self, path: Path) -> None:
        run([sys.executable, "-m", "venv", "--without-pip", str(path)])
        self.bin = path / "bin"
        self.python = str(self.bin / "python")

    def install(self, *requirements: str) -> None:
        # this interpreter's pip, pointed at the virtualenv (none of its own: faster)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                self.python,
                "install",
                "--quiet",
                "--disable-pip-version-check",
                *requirements,
            ],
            timeout=600,
        )

    def distributions(self) -> set[str]:
        listing = run(
            [
                self.python,
                "-c",
                "import importlib.metadata as m, json\n"
                "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))",
            ]
        )
        return {name.lower().replace("_", "-") for name in json.loads(listing.stdout)}

    def run(
        self, *argv: str, cwd: Path | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        program = self.python if argv[0] == "python" else str(self.bin / argv[0])
        return run([program, *argv[1:]], cwd=cwd, check=check)


def run(
    argv: list[str], *, cwd: Path | None = None, check: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    # nothing of this checkout on the path: the virtualenv's own packages only
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    completed = subprocess.run(
        argv, capture_output=True, text=True, check=False, cwd=cwd, timeout=timeout, env=clean
    )
    if check and completed.returncode != 0:
        raise AssertionError(
            f"{argv[0]} {' '.join(argv[1:3])}... exited {completed.returncode}\n"
            f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}"
        )
    return completed


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Venv]:
    yield Venv(tmp_path / "venv")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A user's SAM project: a plain and a durable function, one event each."""
    root = tmp_path / "project"
    for folder, code in {
        "echo": "def handler(event, context):\n    return {'echo': event['id']}\n",
        "steps": (
            "from aws_durable_execution_sdk_python import DurableContext, durable_execution\n\n"
            "@durable_execution\n"
            "def handler(event: dict, context: DurableContext) -> dict:\n"
            "    return {'doubled': context.step(lambda _: event['n'] * 2, name='double')}\n"
        ),
    }.items():
        (root / folder).mkdir(parents=True)
        (root / folder / "app.py").write_text(code)
    (root / "template.yaml").write_text(
        textwrap.dedent(
            """\
            Transform: AWS::Serverless-2016-10-31
            Resources:
              EchoFunction:
                Type: AWS::Serverless::Function
                Properties: {CodeUri: echo/, Handler: app.handler, Runtime: python3.11}
              StepsFunction:
                Type: AWS::Serverless::Function
                Properties:
                  CodeUri: steps/
                  Handler: app.handler
                  Runtime: python3.11
                  DurableConfig: {ExecutionTimeout: 60}
            """
        )
    )
    (root / "echo.json").write_text('{"id": "o-1"}')
    (root / "steps.json").write_text('{"n": 21}')
    return root


HANDLER = """
import json, sys
from botocore.awsrequest import AWSResponse
import lambda_idempotency
from lambda_idempotency import DynamoDBStore, idempotent

class Raw:
    def stream(self, **_):
        yield b"{}"

sent = []
def answer(request, **_):
    sent.append(request.headers["X-Amz-Target"].decode().split(".")[-1])
    return AWSResponse(request.url, 200, {}, Raw())

store = DynamoDBStore("orders", region_name="us-east-1")
store.client.meta.events.register("before-send.dynamodb", answer)
runs = []

@idempotent(store=store, key="id")
def handler(event, context):
    runs.append(event)
    return {"charged": event["id"]}

print(json.dumps({
    "version": lambda_idempotency.__version__,
    "result": handler({"id": "o-1"}, None),
    "runs": len(runs),
    "sent": sent,
    "tooling_imported": sorted({"yaml", "pytest", "moto"} & set(sys.modules)),
}))
"""

RUNTIME_IMPORTS = """
import ast, importlib, json, pathlib, sys
import lambda_idempotency

package = pathlib.Path(lambda_idempotency.__file__).parent
tooling = ("_dev", "testing.py", "__main__.py")
wanted = set()
for source in package.rglob("*.py"):
    if source.relative_to(package).parts[0] in tooling:
        continue
    if source.relative_to(package).parts[:2] == ("_stores", "valkey"):
        continue  # ValkeyStore's redis-py comes with the [valkey] extra (its own test)
    tree = ast.parse(source.read_text())
    checking_only = set()  # what `if TYPE_CHECKING:` blocks hold: the type checker's
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            checking_only.update(id(inner) for inner in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in checking_only:
            continue
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted.add(node.module)
from lambda_idempotency._base.extras import EXTRAS
missing, of_extras = [], {}
# SnapStart's hooks library: Lambda's Python runtimes have it, and only a SnapStart INIT
# imports it (a warning line where it is absent)
in_the_runtime = {"snapshot_restore_py"}
for name in sorted(wanted - set(sys.stdlib_module_names) - in_the_runtime):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        top = name.partition(".")[0]
        if exc.name == top and top in EXTRAS:  # an extra's, not installed: named by its extra
            of_extras[top] = EXTRAS[top][1]
        else:
            missing.append(f"{name}: {exc}")
for name in lambda_idempotency.__all__:  # the front ends imported on first use
    getattr(lambda_idempotency, name)
print(json.dumps({"imported": len(wanted), "missing": missing, "of_extras": of_extras}))
"""

USER_TESTS = """
from lambda_idempotency import idempotent

def test_charges_once(idempotency_store_moto):
    charged = []

    @idempotent(store=idempotency_store_moto, key="id")
    def handler(event, context):
        charged.append(event["id"])
        return {"charged": event["id"]}

    assert handler({"id": 1}, None) == handler({"id": 1}, None) == {"charged": 1}
    assert charged == [1]
"""


POWERTOOLS_FEATURES = """
import json
from botocore.awsrequest import AWSResponse
from lambda_idempotency import DynamoDBStore, idempotent, idempotent_record, process_batch

class Raw:
    def stream(self, **_):
        yield b"{}"

sent = []
def answer(request, **_):
    sent.append(request.headers["X-Amz-Target"].decode().split(".")[-1])
    return AWSResponse(request.url, 200, {}, Raw())

store = DynamoDBStore("orders", region_name="us-east-1")
store.client.meta.events.register("before-send.dynamodb", answer)
errors, shipped = {}, []

def attempt(name, build):
    try:
        return build()
    except ImportError as exc:
        errors[name] = f"{type(exc).__name__}: {exc}"

KEY = "powertools_json(body).order_id"
attempt("key", lambda: idempotent(store=store, key=KEY)(lambda event, context: event))
ship = attempt("idempotent_record", lambda: idempotent_record(store=store, key=KEY)(shipped.append))
batch = {"Records": [{"eventSource": "aws:sqs", "messageId": "m1", "body": '{"order_id": "o-1"}'}]}
answered = attempt("process_batch", lambda: process_batch(batch, None, ship or shipped.append))
attempt("layout", lambda: DynamoDBStore("orders", layout="powertools", region_name="us-east-1"))
print(json.dumps({"errors": errors, "batch": answered, "shipped": len(shipped), "sent": sent}))
"""


def test_the_package_alone_carries_no_sdk_and_names_the_extras_without_it(
    wheel: Path, venv: Venv, tmp_path: Path
) -> None:
    venv.install(str(wheel))
    installed = venv.distributions()
    # what a Lambda function's requirements bring: the package, and jmespath (the runtime has it)
    assert installed == {"lambda-idempotency", "jmespath"}

    imported = venv.run(
        "python", "-c", "import lambda_idempotency, sys; print(sorted(sys.modules))", check=False
    )
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert "botocore" not in imported.stdout and "aws_lambda_powertools" not in imported.stdout
    assert "run-samples" in venv.run("lambda-idempotency", "--help").stdout
    # a DynamoDBStore needs botocore, which Lambda's runtime has: elsewhere it is refused where
    # it is built, in one line naming the extra
    store = venv.run(
        "python",
        "-c",
        "from lambda_idempotency import DynamoDBStore, idempotent\n"
        "store = DynamoDBStore('orders', region_name='us-east-1')\n"
        "idempotent(store=store, key='id')(lambda event, context: event)({'id': 1}, None)",
        check=False,
    )
    assert store.returncode == 1
    assert store.stderr.strip().endswith("pip install 'lambda-idempotency[aws-sdk]'")


def test_the_package_alone_installs_no_sdk_no_powertools_and_no_tooling(
    wheel: Path, venv: Venv
) -> None:
    """What a Lambda function's requirements bring: the package, and jmespath (which the
    runtime has too; named for use outside Lambda). The runtime ships boto3 and botocore."""
    venv.install(str(wheel))
    assert venv.distributions() == {"lambda-idempotency", "jmespath"}


def test_the_package_with_the_sdk_runs_a_handler_and_names_every_other_extra(
    wheel: Path, venv: Venv, project: Path, tmp_path: Path
) -> None:
    """The package beside boto3 (`[aws-sdk]`): what a Lambda function has at run time."""
    venv.install(f"{wheel}[aws-sdk]")
    installed = venv.distributions()
    assert {"lambda-idempotency", "jmespath", "boto3", "botocore"} <= installed
    assert installed & (TOOLING | {POWERTOOLS}) == set()

    shown = json.loads(venv.run("python", "-c", HANDLER, cwd=tmp_path).stdout)
    assert shown == {
        "version": version_of(wheel),
        "result": {"charged": "o-1"},
        "runs": 1,
        "sent": ["PutItem", "PutItem"],  # the claim, the completion
        "tooling_imported": [],
    }

    # every module the runtime imports, at import or on first use, came with the package, or
    # is an extra's (Powertools, redis-py), whose features name it
    imports = json.loads(venv.run("python", "-c", RUNTIME_IMPORTS, cwd=tmp_path).stdout)
    assert imports["missing"] == []
    assert imports["of_extras"] == {"aws_lambda_powertools": "powertools"}
    assert imports["imported"] > 10

    # each Powertools feature, when it is set up: one line naming the extra, and nothing ran
    features = json.loads(venv.run("python", "-c", POWERTOOLS_FEATURES, cwd=tmp_path).stdout)
    key = "key 'powertools_json(body).order_id' (Powertools' functions)"
    batch = "process_batch and idempotent_record (on Powertools' batch processors)"
    assert features == {
        "errors": {
            "key": f"MissingExtraError: {key}{POWERTOOLS_MISSING}",
            "idempotent_record": f"MissingExtraError: {batch}{POWERTOOLS_MISSING}",
            "process_batch": f"MissingExtraError: {batch}{POWERTOOLS_MISSING}",
            "layout": f'MissingExtraError: DynamoDBStore(layout="powertools"){POWERTOOLS_MISSING}',
        },
        "batch": None,
        "shipped": 0,
        "sent": [],
    }

    assert "invoke" in venv.run("lambda-idempotency", "--help").stdout
    invoked = venv.run(
        "lambda-idempotency", "invoke", "EchoFunction", "-e", "echo.json", cwd=project, check=False
    )
    assert (invoked.returncode, invoked.stderr) == (
        2,
        "lambda-idempotency: reading template.yaml needs PyYAML, which is not installed: "
        "pip install 'lambda-idempotency[cli]'\n",
    )
    valkey = venv.run("python", "-c", VALKEY_STORE, check=False)
    assert valkey.returncode == 1
    assert valkey.stderr.strip().endswith("pip install 'lambda-idempotency[valkey]'")
    helpers = venv.run("python", "-c", "import lambda_idempotency.testing", check=False)
    assert helpers.returncode == 1
    assert helpers.stderr.strip().endswith("pip install 'lambda-idempotency[testing]'")

    # the user's own pytest, without moto: the plugin loads; its moto fixture names the extra
    venv.install("pytest")
    (tmp_path / "test_user.py").write_text(
        "from lambda_idempotency.testing import FakeClock\n\n"
        "def test_plain():\n    assert FakeClock(start_ms=5).now_ms() == 5\n" + USER_TESTS
    )
    tested = venv.run(
        "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tmp_path, check=False
    )
    assert tested.returncode == 1, tested.stdout
    assert "1 passed, 1 error" in tested.stdout
    assert (
        "the idempotency_store_moto fixture needs moto, which is not installed: "
        "pip install 'lambda-idempotency[testing]'" in tested.stdout
    )


VALKEY_STORE = """
from lambda_idempotency import ValkeyStore
print(repr(ValkeyStore("valkey://user:secret@localhost:6379", cluster=False)))
"""


def test_the_powertools_extra_brings_powertools_and_no_sdk_and_its_features_run(
    wheel: Path, venv: Venv, tmp_path: Path
) -> None:
    venv.install(f"{wheel}[powertools]")
    installed = venv.distributions()
    assert POWERTOOLS in installed
    assert installed & (SDK | TOOLING) == set()

    # the features run beside boto3, as on Lambda (a DynamoDBStore needs it)
    venv.install(f"{wheel}[aws-sdk,powertools]")
    features = json.loads(venv.run("python", "-c", POWERTOOLS_FEATURES, cwd=tmp_path).stdout)
    assert features == {
        "errors": {},
        "batch": {"batchItemFailures": []},
        "shipped": 1,
        "sent": ["PutItem", "PutItem"],  # the record's claim and completion
    }


def test_the_valkey_extra_builds_a_valkey_store(wheel: Path, venv: Venv, tmp_path: Path) -> None:
    venv.install(f"{wheel}[valkey]")
    installed = venv.distributions()
    assert "redis" in installed
    assert installed & (SDK | {POWERTOOLS, "moto", "pytest"}) == set()
    # ValkeyStore needs no boto3: the package imports without it
    shown = venv.run("python", "-c", VALKEY_STORE, cwd=tmp_path).stdout
    assert shown.strip() == "ValkeyStore('valkey://user:***@localhost:6379', prefix='idempotency:')"


def test_the_cli_extra_runs_the_command_on_a_plain_and_a_durable_function(
    wheel: Path, venv: Venv, project: Path
) -> None:
    venv.install(f"{wheel}[cli]")
    installed = venv.distributions()
    assert "boto3" in installed  # the DynamoDB commands'
    assert installed & {"moto", "pytest", POWERTOOLS} == set()

    assert "run-samples" in venv.run("python", "-m", "lambda_idempotency", "--help").stdout
    echo = venv.run("lambda-idempotency", "invoke", "EchoFunction", "-e", "echo.json", cwd=project)
    assert json.loads(echo.stdout) == {"echo": "o-1"}
    steps = venv.run(
        "lambda-idempotency", "invoke", "StepsFunction", "-e", "steps.json", cwd=project
    )
    assert json.loads(steps.stdout) == {"doubled": 42}


def test_the_testing_extra_runs_a_users_tests_on_the_moto_fixture(
    wheel: Path, venv: Venv, tmp_path: Path
) -> None:
    venv.install(f"{wheel}[testing]")
    installed = venv.distributions()
    assert "boto3" in installed  # the fixtures' client on moto
    assert installed & {"aws-durable-execution-sdk-python", POWERTOOLS} == set()
    (tmp_path / "test_user.py").write_text(USER_TESTS)

    tested = venv.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tmp_path)
    assert "1 passed" in tested.stdout


DURABLE = """
from aws_durable_execution_sdk_python import DurableContext, durable_execution
from lambda_idempotency import DynamoDBStore, durable_step_key, idempotent

@durable_execution
@idempotent(store=DynamoDBStore("orders", region_name="us-east-1"), key="order_id")
def handler(event: dict, context: DurableContext) -> dict:
    return {"step": durable_step_key(context, "charge")}

print(handler.__name__)
"""


def test_the_durable_extra_decorates_a_durable_handler(
    wheel: Path, venv: Venv, tmp_path: Path
) -> None:
    venv.install(f"{wheel}[durable]")
    installed = venv.distributions()
    assert "aws-durable-execution-sdk-python" in installed
    assert "boto3" in installed  # the SDK's own requirement
    assert installed & (TOOLING - {"aws-durable-execution-sdk-python"} | {POWERTOOLS}) == set()

    assert venv.run("python", "-c", DURABLE, cwd=tmp_path).stdout.strip() == "handler"
