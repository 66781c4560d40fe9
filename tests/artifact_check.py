"""What a Lambda function carries when its requirements name this package: `sam build` itself
(the SAM CLI of `make sam-check`, in its own virtualenv) builds a user's functions whose
`requirements.txt` names only `lambda-idempotency` (the built wheel, as a user's requirements
reference it), on each Python runtime the package supports, and the built folders are read.

    make artifact-check    (CI runs it; `make test` does not collect this file: its name does
                            not start with test_, and the builds download from the registry)

DESIGN.md, "What a function carries": at most 3 MB unzipped, no boto3 or botocore (Lambda's
runtime ships them), no Powertools unless the `[powertools]` extra is asked for, none of the
development tooling's dependencies. Asked for, `[powertools]` adds Powertools and still no
boto3: everything else stays within the same 3 MB.

SAM's Python builder (aws-lambda-builders' `python_pip` workflow) runs pip with an interpreter
of the function's runtime: it looks for `python3.12` (then `python`, `python3`) on PATH and
keeps the first that reports that version, else the build fails ("Binary validation failed").
A function without a requirements.txt is only copied, so it builds on any machine; one with
requirements needs the real interpreter. This file finds each (on PATH, else among pyenv's
versions) and puts its folder first on PATH for the build; a runtime with no interpreter here
fails its tests, naming what is missing (never a skip, never another version passed off as it).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAM = Path(os.environ.get("SAM_CLI", ROOT / ".tools" / "sam" / "bin" / "sam"))
RUNTIMES = ("3.11", "3.12", "3.13")
BUDGET_BYTES = 3_000_000
"""DESIGN.md: a function whose requirements name only this package, at most 3 MB unzipped."""
NEVER = {
    "boto3",
    "botocore",
    "s3transfer",
    "yaml",
    "_yaml",
    "pytest",
    "_pytest",
    "moto",
    "redis",
}
"""Top-level names that must not be in any build: the runtime's SDK, the tooling's extras."""
NEVER_PREFIXES = ("aws_durable_execution_sdk_python",)
POWERTOOLS = "aws_lambda_powertools"

HANDLER = """\
from lambda_idempotency import DynamoDBStore, idempotent

store = DynamoDBStore()  # IDEMPOTENCY_TABLE


@idempotent(store=store, key={key!r})
def handler(event, context):
    return {{"ok": True}}
"""
VARIANTS = {
    # requirements.txt line (the wheel's file URL filled in), the handler's key
    "plain": ("lambda-idempotency @ {wheel}", "order_id"),
    "powertools": ("lambda-idempotency[powertools] @ {wheel}", "powertools_json(body).order_id"),
}


def resource(runtime: str, variant: str) -> str:
    return f"Py{runtime.replace('.', '')}{variant.capitalize()}Function"


@functools.cache
def interpreter(version: str) -> Path | None:
    """A real CPython `version` with pip: `pythonX.Y` on PATH if it is one (a pyenv shim for a
    version not selected is not), else the newest of pyenv's installed `X.Y.*`."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    installed = sorted(
        (pyenv_root / "versions").glob(f"{version}.*/bin/python{version}"),
        key=lambda path: [int(part) for part in re.findall(r"\d+", path.parts[-3])],
        reverse=True,
    )
    candidates += [str(path) for path in installed]
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [
                candidate,
                "-c",
                "import sys, pip; print('%d.%d' % sys.version_info[:2], sys.executable)",
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if probe.returncode == 0 and probe.stdout.split()[0] == version:
            return Path(probe.stdout.split(maxsplit=1)[1].strip())
    return None


def sizes(folder: Path) -> tuple[int, dict[str, int]]:
    """Bytes of every file under `folder` (unzipped, as Lambda's 250 MB limit counts them), and
    per top-level entry (a distribution's .dist-info counted under its own name)."""
    parts: dict[str, int] = {}
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            size = path.stat().st_size
            total += size
            top = path.relative_to(folder).parts[0]
            parts[top] = parts.get(top, 0) + size
    return total, parts


def top_level(folder: Path) -> set[str]:
    """Importable top-level names in a build: packages, modules, and what .dist-info names."""
    names = set()
    for entry in folder.iterdir():
        if entry.name.endswith((".dist-info", ".data")):
            continue
        names.add(entry.name.removesuffix(".py") if entry.is_file() else entry.name)
    return names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `python -m build` makes (from its sdist, as an index would)."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        check=True,
        timeout=300,
    )
    # named by the build's version, which names its commit (setup.py): not the source's
    (built,) = out.glob("lambda_idempotency-*-py3-none-any.whl")
    return built


class Built:
    def __init__(self, folder: Path, found: dict[str, Path | None], log: str) -> None:
        self.folder = folder
        self.interpreters = found
        self.log = log

    def function(self, runtime: str, variant: str) -> Path:
        missing = self.interpreters[runtime] is None
        assert not missing, (
            f"no Python {runtime} on this machine (`python{runtime}` on PATH, or pyenv's "
            f"versions/{runtime}.*): `sam build` needs one to build a python{runtime} function "
            "with requirements"
        )
        folder = self.folder / resource(runtime, variant)
        assert folder.is_dir(), f"sam build made no {folder.name}:\n{self.log[-3000:]}"
        return folder


@pytest.fixture(scope="module")
def built(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Built]:
    """A user's SAM project, one function per runtime and variant, built by `sam build`."""
    assert SAM.is_file(), f"no SAM CLI at {SAM}: `make artifact-check` installs it"
    found = {runtime: interpreter(runtime) for runtime in RUNTIMES}
    project = tmp_path_factory.mktemp("project")
    resources = {}
    for runtime, python in found.items():
        if python is None:
            continue
        for variant, (requirement, key) in VARIANTS.items():
            name = resource(runtime, variant)
            code = project / name
            code.mkdir()
            (code / "app.py").write_text(HANDLER.format(key=key))
            (code / "requirements.txt").write_text(
                requirement.format(wheel=wheel.resolve().as_uri()) + "\n"
            )
            resources[name] = {
                "Type": "AWS::Serverless::Function",
                "Properties": {
                    "CodeUri": f"{name}/",
                    "Handler": "app.handler",
                    "Runtime": f"python{runtime}",
                },
            }
    # JSON is YAML: the template needs no YAML writer
    (project / "template.yaml").write_text(
        json.dumps({"Transform": "AWS::Serverless-2016-10-31", "Resources": resources}, indent=2)
    )
    interpreters = [str(python.parent) for python in found.values() if python is not None]
    env = {
        **os.environ,
        "PATH": os.pathsep.join([*interpreters, os.environ.get("PATH", "")]),
        "SAM_CLI_TELEMETRY": "0",
    }
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"):
        env.pop(name, None)
    completed = subprocess.run(
        [str(SAM), "build", "--parallel", "--build-dir", str(project / "build")],
        capture_output=True,
        text=True,
        check=False,
        cwd=project,
        env=env,
        timeout=600,
    )
    log = completed.stdout + completed.stderr
    assert completed.returncode == 0, f"sam build exited {completed.returncode}:\n{log[-4000:]}"
    yield Built(project / "build", found, log)


def forbidden(names: set[str]) -> set[str]:
    return {name for name in names if name in NEVER or name.startswith(NEVER_PREFIXES)}


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_a_function_that_requires_the_package_carries_it_alone(built: Built, runtime: str) -> None:
    folder = built.function(runtime, "plain")
    names = top_level(folder)
    total, _ = sizes(folder)

    assert "lambda_idempotency" in names
    assert forbidden(names) == set()
    assert POWERTOOLS not in names
    assert total <= BUDGET_BYTES, f"{total / 1e6:.2f} MB unzipped"


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_powertools_extra_adds_powertools_and_still_no_sdk(built: Built, runtime: str) -> None:
    folder = built.function(runtime, "powertools")
    names = top_level(folder)
    total, parts = sizes(folder)

    assert {"lambda_idempotency", POWERTOOLS} <= names
    assert forbidden(names) == set()
    powertools = sum(size for name, size in parts.items() if name.startswith(POWERTOOLS))
    assert total - powertools <= BUDGET_BYTES, f"{(total - powertools) / 1e6:.2f} MB besides"


RUNTIME_SDK = ("boto3", "botocore", "s3transfer", "dateutil", "six", "urllib3", "jmespath")
"""What Lambda's Python runtime puts on sys.path beside a function (its boto3 and what it
needs), taken here from this interpreter's site-packages."""

IMPORT_PROBE = """
import json, sys
sys.path[:0] = [{function!r}, {sdk!r}]
import app
origins = {{name: getattr(sys.modules.get(name), "__file__", None) or ""
           for name in ("lambda_idempotency", "aws_lambda_powertools", "botocore")}}
print(json.dumps({{"version": "%d.%d" % sys.version_info[:2],
                  "from_function": sorted(n for n, o in origins.items()
                                          if o.startswith({function!r}))}}))
"""


@pytest.fixture(scope="module")
def runtime_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """boto3 and its requirements alone, as the runtime has them (pure Python: any version)."""
    folder = tmp_path_factory.mktemp("runtime-sdk")
    for name in RUNTIME_SDK:
        module = __import__(name)
        source = Path(module.__file__ or "")
        source = source.parent if source.name == "__init__.py" else source
        (folder / source.name).symlink_to(source)
    return folder


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_the_built_function_imports_on_its_runtime(
    built: Built, runtime_sdk: Path, runtime: str, variant: str
) -> None:
    """The handler module as Lambda loads it: the built folder, then the runtime's boto3, in
    that version's interpreter (`-I`: nothing else on the path). Its decorator compiles the
    key at import, so a Powertools key imports Powertools, from the build."""
    folder = built.function(runtime, variant)
    python = built.interpreters[runtime]
    assert python is not None
    completed = subprocess.run(
        [
            str(python),
            "-I",
            "-B",
            "-c",
            IMPORT_PROBE.format(function=str(folder), sdk=str(runtime_sdk)),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "IDEMPOTENCY_TABLE": "orders", "AWS_DEFAULT_REGION": "us-east-1"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    shown = json.loads(completed.stdout.strip().splitlines()[-1])
    expected = ["lambda_idempotency"] + (
        ["aws_lambda_powertools"] if variant == "powertools" else []
    )
    assert shown == {"version": runtime, "from_function": sorted(expected)}


def test_sizes(built: Built, capsys: pytest.CaptureFixture[str]) -> None:
    """The measured sizes, printed for the record (the assertions are the tests above)."""
    lines = []
    for runtime in RUNTIMES:
        if built.interpreters[runtime] is None:
            lines.append(f"python{runtime}: no interpreter here, not built")
            continue
        row = []
        for variant in VARIANTS:
            total, parts = sizes(built.function(runtime, variant))
            ours = parts.get("lambda_idempotency", 0)
            row.append(f"{variant} {total / 1e6:.2f} MB (lambda_idempotency {ours / 1e6:.2f} MB)")
        python = built.interpreters[runtime]
        lines.append(f"python{runtime} ({python}): " + ", ".join(row))
    with capsys.disabled():
        print("\nsam build, unzipped:\n  " + "\n  ".join(lines))
