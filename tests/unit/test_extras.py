"""Each entry point used without its extra names the extra to install, never a bare
ModuleNotFoundError. The dependency is hidden here (`uninstalled`: its import fails as a
missing one's does); `make package-check` installs each extra alone in a
clean virtualenv and runs the entry points for real (tests/extras_check.py)."""

from __future__ import annotations

import importlib.abc
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
        "lambda_idempotency._dev.extras.MissingExtraError: lambda_idempotency.testing needs "
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
