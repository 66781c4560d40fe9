"""Each entry point used without its extra names the extra to install, never a bare
ModuleNotFoundError: the tooling's (`[cli]`, `[testing]`) and the runtime's features that need
Powertools (`[powertools]`) or redis-py (`[valkey]`). The dependency is hidden here or in a
fresh interpreter (its import fails as a missing one's does); `make package-check` installs
each extra alone in a clean virtualenv and runs the entry points for real
(tests/extras_check.py)."""

from __future__ import annotations

import importlib.abc
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lambda_idempotency._dev.cli import main
from lambda_idempotency._dev.extras import MissingExtraError, missing_extra


def uninstalled(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Imports of `package` (and its modules) fail from now on as if it were not installed."""

    class Hide(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, path: object, target: object = None) -> None:
            if name.split(".", maxsplit=1)[0] == package:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for name in [n for n in sys.modules if n.split(".")[0] == package]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [Hide(), *sys.meta_path])


TEMPLATE = """\
Resources:
  EchoFunction:
    Type: AWS::Serverless::Function
    Properties: {CodeUri: echo/, Handler: app.handler, Runtime: python3.11}
"""


def test_the_command_without_pyyaml_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "template.yaml").write_text(TEMPLATE)
    (tmp_path / "event.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    uninstalled(monkeypatch, "yaml")

    status = main(["invoke", "EchoFunction", "--event", "event.json"])

    err = capsys.readouterr().err
    assert status == 2  # could not run
    assert err == (
        "lambda-idempotency: reading template.yaml needs PyYAML, which is not installed: "
        "pip install 'lambda-idempotency[cli]'\n"
    )


def test_a_durable_function_invoked_without_the_sdks_runner_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lambda_idempotency._dev.runtime import _DurableExecution

    uninstalled(monkeypatch, "aws_durable_execution_sdk_python_testing")
    run = _DurableExecution(lambda event, context: event, {"durable_timeout_s": 60})

    with pytest.raises(MissingExtraError, match=r"pip install 'lambda-idempotency\[cli\]'"):
        run({}, None)


def test_a_moto_table_without_moto_names_the_testing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lambda_idempotency.testing import IdempotencyTable

    uninstalled(monkeypatch, "moto")
    with pytest.raises(MissingExtraError) as raised:
        IdempotencyTable()
    assert raised.value.extra == "testing"
    assert "needs moto, which is not installed: pip install 'lambda-idempotency[testing]'" in (
        str(raised.value)
    )


def test_the_test_helpers_without_pytest_name_the_testing_extra() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['pytest'] = None\nimport lambda_idempotency.testing",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert completed.returncode == 1
    last = completed.stderr.strip().splitlines()[-1]
    assert last == (
        "lambda_idempotency._base.extras.MissingExtraError: lambda_idempotency.testing needs "
        "pytest, which is not installed: pip install 'lambda-idempotency[testing]'"
    )


def test_a_module_missing_inside_an_installed_dependency_is_its_own_error() -> None:
    """Only the modules an extra installs are blamed on a missing extra."""
    exc = ModuleNotFoundError("No module named 'six'", name="six")
    assert missing_extra(exc, "anything") is exc
    inside = ModuleNotFoundError("No module named 'yaml._yaml'", name="yaml._yaml")
    assert missing_extra(inside, "reading x") is inside


def test_a_valkey_store_without_redis_py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from lambda_idempotency import ValkeyStore

    uninstalled(monkeypatch, "redis")

    with pytest.raises(ImportError, match=r"pip install 'lambda-idempotency\[valkey\]'"):
        ValkeyStore("redis://localhost:6379")


WITHOUT_POWERTOOLS = """
import importlib.abc, json, sys

class Uninstalled(importlib.abc.MetaPathFinder):  # its import fails as an uninstalled one's
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "aws_lambda_powertools":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Uninstalled())
from lambda_idempotency import DynamoDBStore, idempotent, idempotent_record, process_batch

store = DynamoDBStore("orders")
shown = {}

def attempt(name, build):
    try:
        build()
        shown[name] = None
    except ImportError as exc:
        shown[name] = [type(exc).__name__, getattr(exc, "extra", None), str(exc)]

def decorate(**options):
    return lambda: idempotent(store=store, **options)(print)

attempt("plain key", decorate(key="body.order_id"))
attempt("a field named like a function", decorate(key="powertools_x[0]"))
attempt("powertools_json key", decorate(key="powertools_json(body).id"))
attempt("powertools payload", decorate(key="id", payload="powertools_base64(data)"))
attempt("idempotent_record", lambda: idempotent_record(store=store)(print))
ran = []
attempt("process_batch", lambda: process_batch(
    {"Records": [{"eventSource": "aws:sqs", "messageId": "m1", "body": "{}"}]}, None, ran.append))
attempt("layout powertools", lambda: DynamoDBStore("orders", layout="powertools"))
shown["records run"] = len(ran)
shown["powertools imported"] = sorted(
    name for name, module in sys.modules.items()
    if name.startswith("aws_lambda_powertools"))
print(json.dumps(shown))
"""


def test_each_powertools_feature_without_powertools_names_its_extra_when_set_up() -> None:
    """A key, payload or scope expression calling Powertools' functions, `idempotent_record`,
    `process_batch` and layout="powertools": each a MissingExtraError naming `[powertools]`,
    at decoration or construction (`process_batch` of a plain function: before any record
    runs); everything else decorates as before."""
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_POWERTOOLS],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    shown = json.loads(completed.stdout)
    tail = (
        " needs Powertools for AWS Lambda (aws-lambda-powertools), which is not installed: "
        "pip install 'lambda-idempotency[powertools]'"
    )
    batch = "process_batch and idempotent_record (on Powertools' batch processors)"
    assert shown == {
        "plain key": None,
        "a field named like a function": None,
        "powertools_json key": [
            "MissingExtraError",
            "powertools",
            "key 'powertools_json(body).id' (Powertools' functions)" + tail,
        ],
        "powertools payload": [
            "MissingExtraError",
            "powertools",
            "payload 'powertools_base64(data)' (Powertools' functions)" + tail,
        ],
        "idempotent_record": ["MissingExtraError", "powertools", batch + tail],
        "process_batch": ["MissingExtraError", "powertools", batch + tail],
        "layout powertools": [
            "MissingExtraError",
            "powertools",
            'DynamoDBStore(layout="powertools")' + tail,
        ],
        "records run": 0,
        "powertools imported": [],
    }


def test_the_command_without_boto3_names_the_cli_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `cli` extra brings boto3 for the DynamoDB commands; without it, `--help` still
    answers and a command that reaches for it names the extra."""
    from lambda_idempotency._dev.cli import command

    def needs_boto3(args: object) -> int:
        import botocore.config  # noqa: F401  (what a DynamoDB command imports first)

        return 0

    uninstalled(monkeypatch, "botocore")
    parser = command.parser

    def with_a_boto3_command() -> object:
        built = parser()
        built.set_defaults(run=needs_boto3)
        return built

    monkeypatch.setattr(command, "parser", with_a_boto3_command)

    assert command.main(["stuck", "--table", "t"]) == 2
    assert capsys.readouterr().err == (
        "lambda-idempotency: `lambda-idempotency stuck` needs botocore (boto3), which is not "
        "installed: pip install 'lambda-idempotency[cli]'\n"
    )
    assert command.main(["--help"]) == 0
    assert "run-samples" in capsys.readouterr().out


def test_a_moto_table_without_boto3_names_the_testing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The test helpers' boto3 comes with `[testing]` (moto brings it): that is the extra they
    name, not the command's."""
    from lambda_idempotency.testing import IdempotencyTable

    uninstalled(monkeypatch, "boto3")
    with pytest.raises(MissingExtraError) as raised:
        IdempotencyTable()
    assert str(raised.value) == (
        "idempotency_table needs boto3, which is not installed: "
        "pip install 'lambda-idempotency[testing]'"
    )
