"""The package as it would be published: `python -m build` makes a wheel and an sdist that
`twine check` passes, with the metadata an index shows (the runtime's requirements alone, an
extra for each other use); and the dev extra leaves the benchmarks' plotting stack out.
Each extra installed in a clean virtualenv: tests/extras_check.py (`make package-check`)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

from tests import build_version

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK_ONLY = {"matplotlib", "numpy"}


def test_build_makes_a_wheel_and_an_sdist_that_twine_check_passes(tmp_path: Path) -> None:
    # The sdist first, then the wheel from it: what an index would get. No isolation: the
    # dev extra has setuptools, so no download.
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    (sdist,) = tmp_path.glob("*.tar.gz")
    assert sorted(tmp_path.iterdir()) == [wheel, sdist]
    VERSION = wheel.name.split("-")[1]  # noqa: N806

    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"lambda_idempotency-{VERSION}.dist-info"
        fields = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        built = archive.read("lambda_idempotency/_version.py").decode()
    # the build's version (setup.py): the release's only from its commit, else the commit's
    said = dict(re.findall(r'^(VERSION|COMMIT)(?:: [^=]+)? = "(.*)"$', built, re.MULTILINE))
    assert said["VERSION"] == fields["Version"] == VERSION
    assert build_version.problems(VERSION, said["COMMIT"]) == []
    assert fields["Requires-Python"] == ">=3.11"
    assert fields["License-Expression"] == "MIT"
    assert fields["Description-Content-Type"] == "text/markdown"
    assert "Typing :: Typed" in fields.get_all("Classifier")
    assert {"lambda_idempotency/py.typed", f"{info}/licenses/LICENSE"} <= names
    assert "lambda_idempotency = lambda_idempotency.testing" in entry_points  # the plugin
    # what a Lambda function imports and its runtime does not ship, and nothing else (boto3
    # and Powertools are extras); an extra for each other use
    requires = [Requirement(text) for text in fields.get_all("Requires-Dist")]
    runtime = {r.name for r in requires if r.marker is None}
    assert runtime == {"jmespath"}
    assert set(fields.get_all("Provides-Extra")) == {
        "aws-sdk",
        "powertools",
        "cli",
        "testing",
        "durable",
        "valkey",
        "dev",
        "bench",
    }

    def extra(name: str) -> set[str]:
        return {
            r.name + (f"[{','.join(sorted(r.extras))}]" if r.extras else "")
            for r in requires
            if r.marker is not None and r.marker.evaluate({"extra": name})
        }

    assert extra("aws-sdk") == {"boto3"}
    assert extra("powertools") == {"aws-lambda-powertools"}
    assert extra("cli") == {
        "boto3",
        "PyYAML",
        "aws-durable-execution-sdk-python-testing",
        "aws-durable-execution-sdk-python",
    }
    assert extra("testing") == {"pytest", "moto[dynamodb]", "boto3"}
    assert extra("durable") == {"aws-durable-execution-sdk-python"}
    assert extra("valkey") == {"redis"}
    assert "lambda-idempotency[aws-sdk,cli,durable,powertools,testing,valkey]" in extra("dev")
    with tarfile.open(sdist) as archive:
        assert f"lambda_idempotency-{VERSION}/LICENSE" in archive.getnames()
        member = archive.extractfile(f"lambda_idempotency-{VERSION}/{build_version.VERSION_FILE}")
        assert member is not None and member.read().decode() == built  # the wheel's, from it


def test_the_dev_extra_leaves_the_benchmark_plotting_stack_out() -> None:
    """`make setup` installs the dev extra; matplotlib and numpy only come with `bench`."""
    pulled = _closure(["lambda-idempotency[dev]"])
    assert "pytest" in pulled
    assert pulled & BENCHMARK_ONLY == set()
    bench = [
        Requirement(text).name
        for text in metadata.requires("lambda-idempotency") or []
        if re.search(r"extra == .bench.", text)
    ]
    assert bench == ["matplotlib"]


def _closure(roots: list[str]) -> set[str]:
    """The distribution names `roots` need, following the installed distributions'
    requirements (extras included, environment markers honoured)."""
    seen: set[str] = set()
    pending = [(Requirement(root), "") for root in roots]
    while pending:
        requirement, extra = pending.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = re.sub(r"[-_.]+", "-", requirement.name).lower()
        extras = sorted(requirement.extras)
        visits = [f"{name}[{e}]" for e in extras] or [name]
        if all(visit in seen for visit in visits) and name in seen:
            continue
        seen.add(name)
        seen.update(visits)
        try:
            needs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in needs:
            for wanted in extras or [""]:
                pending.append((Requirement(text), wanted))
    return {name for name in seen if "[" not in name}
