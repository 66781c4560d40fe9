"""The Lambda layer as Lambda loads it: bytecode for its runtime, and no development tooling.

Lambda's /opt is read-only, so a layer without bytecode compiles every module it imports at
every cold start; the development tooling (CLI, local invoke, template reader, DynamoDB Local
installer, pytest plugin) is pip's, never the layer's nor the runtime import path's.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from lambda_idempotency._dev.template import LAYER_TYPE, Template
from tests import build_version
from tests.layer_check import CACHE_TAG, DEVELOPMENT_ONLY, PACKAGE, problems, runtime_modules

ROOT = Path(__file__).resolve().parents[2]
LAYER_SOURCE = ROOT / "layer"


@pytest.fixture(scope="module")
def built_layer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The layer's python/ folder from the target `sam build` runs, without its requirements
    (none today; so that no registry is ever needed here): the library as it ships."""
    artifacts = tmp_path_factory.mktemp("layer")
    subprocess.run(
        [
            "make",
            "--no-print-directory",
            "-C",
            str(LAYER_SOURCE),
            "build-IdempotencyLayer",
            f"ARTIFACTS_DIR={artifacts}",
            f"PYTHON={sys.executable}",
            "REQUIREMENTS=",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return artifacts / "python"


def fresh_interpreter(code: str, *path: Path) -> dict[str, object]:
    """Run `code` in a new interpreter (isolated, writing no bytecode) with `path` first on
    sys.path; its last line of output is JSON."""
    prelude = f"import json, sys\nsys.path[:0] = {[str(entry) for entry in path]!r}\n"
    completed = subprocess.run(
        [sys.executable, "-I", "-B", "-c", prelude + code],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    result: dict[str, object] = json.loads(completed.stdout.strip().splitlines()[-1])
    return result


def test_the_layer_has_bytecode_for_every_runtime_module_and_no_development_tooling(
    built_layer: Path,
) -> None:
    assert problems(built_layer) == []
    package = built_layer / PACKAGE
    for name in runtime_modules():
        source = package / name
        assert (source.parent / "__pycache__" / f"{source.stem}.{CACHE_TAG}.pyc").is_file()
    for name in DEVELOPMENT_ONLY:
        assert not (package / name).exists()


def test_the_layer_runs_its_own_bytecode_whatever_the_sources_say(built_layer: Path) -> None:
    """Hash-based, unchecked bytecode: a source file newer than its bytecode (as files
    extracted on /opt may look) is not compiled again. Shown by changing a source after the
    build: the import still runs what was built."""
    before = set(built_layer.rglob("*.pyc"))
    version = built_layer / PACKAGE / "_version.py"
    original = version.read_text(encoding="utf-8")
    version.write_text('raise RuntimeError("compiled from source")\n', encoding="utf-8")
    try:
        result = fresh_interpreter(
            "import lambda_idempotency\n"
            "from lambda_idempotency import idempotent_http, process_batch\n"
            "ours = {n: m for n, m in sys.modules.items() if n.startswith('lambda_idempotency')}\n"
            "print(json.dumps({'origin': lambda_idempotency.__file__,\n"
            "    'cached': {n: m.__spec__.cached for n, m in ours.items()}}))",
            built_layer,
        )
    finally:
        version.write_text(original, encoding="utf-8")

    assert str(result["origin"]).startswith(str(built_layer))
    cached = result["cached"]
    assert isinstance(cached, dict) and f"{PACKAGE}._version" in cached
    assert all(Path(path).is_file() for path in cached.values())
    assert set(built_layer.rglob("*.pyc")) == before  # nothing written


def test_the_layer_is_the_package_alone(built_layer: Path, tmp_path: Path) -> None:
    """requirements.txt names nothing (Lambda's runtime ships boto3, botocore and jmespath;
    Powertools is the `powertools` extra), and the check refuses a layer carrying more."""
    requirements = (LAYER_SOURCE / "requirements.txt").read_text(encoding="utf-8")
    named = [line for line in requirements.splitlines() if line.strip() and line[0] != "#"]
    assert named == []
    assert sorted(path.name for path in built_layer.iterdir()) == [PACKAGE]

    stray = tmp_path / "python"
    shutil.copytree(built_layer, stray)
    (stray / "aws_lambda_powertools").mkdir()
    assert problems(stray) == [
        "not the package's: aws_lambda_powertools (the layer is lambda_idempotency alone: "
        "Lambda's runtime ships boto3, Powertools is the `powertools` extra)"
    ]


def test_the_layer_has_no_test_helpers_nor_command(built_layer: Path) -> None:
    result = fresh_interpreter(
        "found = {}\n"
        "for name in ('lambda_idempotency.testing', 'lambda_idempotency._dev.cli',\n"
        "             'lambda_idempotency.__main__'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "        found[name] = True\n"
        "    except ModuleNotFoundError:\n"
        "        found[name] = False\n"
        "print(json.dumps(found))",
        built_layer,
    )
    assert result == {
        "lambda_idempotency.testing": False,
        "lambda_idempotency._dev.cli": False,
        "lambda_idempotency.__main__": False,
    }


def test_the_runtime_import_path_loads_no_development_tooling() -> None:
    """Every public name, the lazily imported front ends included, as pip installs them."""
    result = fresh_interpreter(
        "import lambda_idempotency\n"
        "for name in lambda_idempotency.__all__:\n"
        "    getattr(lambda_idempotency, name)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    loaded = result if isinstance(result, list) else []
    assert f"{PACKAGE}._http" in loaded and f"{PACKAGE}._batch" in loaded
    development = [
        name
        for name in loaded
        if name.split(".")[:2] in ([PACKAGE, "_dev"], [PACKAGE, "testing"], [PACKAGE, "__main__"])
    ]
    assert development == []
    assert "pytest" not in loaded and "argparse" not in loaded


WIRE = [
    "_wire",
    "_wire_plan",
    "_wire_guard",
    "_wire_build",
    "_wire_send",
    "_wire_lean",
    "_wire_check",
    "_wire_request",
    "_wire_parse",
]
"""The fast wire path's modules: imported by the store's first call."""


def test_a_cold_start_imports_only_what_every_invocation_needs() -> None:
    """Each module imported costs a cold start about 0.1 ms before it runs a line: the front
    ends, the option types, the wait schedule, the Powertools layout, metrics and the fast
    wire path load when first used, not at import."""
    result = fresh_interpreter(
        "from lambda_idempotency import DynamoDBStore, idempotent\n"
        "idempotent(key='id', store=DynamoDBStore('t'))(lambda event, context: event)\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    modules = result if isinstance(result, list) else []
    loaded = {name for name in modules if name.startswith(PACKAGE)}
    assert f"{PACKAGE}._protocol" in loaded
    on_first_use = ["_http", "_batch", "_options", "_waiting", "_powertools_layout", "_metrics"]
    assert loaded.isdisjoint(f"{PACKAGE}.{name}" for name in [*on_first_use, *WIRE, "_tenant"])
    assert "pydantic" not in modules


def test_pip_installs_the_tooling_under_its_documented_names() -> None:
    """`lambda-idempotency`, `python -m lambda_idempotency` and the pytest plugin's module."""
    from lambda_idempotency import testing

    assert {"FakeClock", "RoundTrips", "idempotency_store_moto"} <= set(testing.__all__)
    command = Path(sys.executable).with_name("lambda-idempotency")
    for argv in ([sys.executable, "-m", "lambda_idempotency"], [str(command)]):
        completed = subprocess.run(
            [*argv, "--help"], capture_output=True, text=True, check=True, timeout=30
        )
        assert "run-samples" in completed.stdout


def test_the_template_lists_only_the_runtime_the_layers_bytecode_is_for() -> None:
    template = Template(ROOT / "template.yaml")
    (layer,) = template.of_type(LAYER_TYPE).values()
    makefile = (LAYER_SOURCE / "Makefile").read_text(encoding="utf-8")
    version = re.search(r"^RUNTIME_VERSION := (\d+)\.(\d+)$", makefile, re.MULTILINE)
    assert version is not None
    runtime = f"python{version[1]}.{version[2]}"

    assert layer["Metadata"] == {"BuildMethod": "makefile"}
    assert layer["Properties"]["CompatibleRuntimes"] == [runtime]
    assert template.document["Globals"]["Function"]["Runtime"] == runtime
    assert f"cpython-{version[1]}{version[2]}" == CACHE_TAG


def test_the_layer_is_the_wheel_less_the_development_tooling(
    built_layer: Path, tmp_path: Path
) -> None:
    """layer/Makefile installs the package's wheel: the layer holds exactly the wheel's files
    of the package but the tooling, and neither its console script nor its metadata (whose
    pytest11 entry point names the omitted plugin: pytest would fail to load it)."""
    # from a copy, as the Makefile builds it: setuptools' build/ folder in the project may
    # hold a module deleted since
    source = tmp_path / "source"
    shutil.copytree(LAYER_SOURCE / PACKAGE, source / "layer" / PACKAGE)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    (wheel,) = tmp_path.glob(f"{PACKAGE}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        in_wheel = {
            name
            for name in archive.namelist()
            if name.startswith(f"{PACKAGE}/") and name.split("/")[1] not in DEVELOPMENT_ONLY
        }
    in_layer = {
        path.relative_to(built_layer).as_posix()
        for path in built_layer.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert in_layer == in_wheel
    assert f"{PACKAGE}/py.typed" in in_layer


def test_the_layer_says_the_version_and_commit_it_was_built_from(built_layer: Path) -> None:
    """A deployed layer names its build: the release's version only from the release's commit,
    else a development version with the commit (tests/build_version.py); read as Lambda does,
    from the layer alone."""
    said = fresh_interpreter(
        "from lambda_idempotency import _version as v\n"
        "print(json.dumps({'version': v.VERSION, 'commit': v.COMMIT}))",
        built_layer,
    )
    assert build_version.problems(str(said["version"]), str(said["commit"])) == []
