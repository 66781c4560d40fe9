"""The build's version (setup.py): a release's version for the release's commit and for no
other build; a development version that names its commit for every other one; a build outside
git says it does not know its commit. On a small repository of its own, commit by commit, as
a release goes: development, the release commit, a change on top of it, the bump after it."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from packaging.version import Version

import lambda_idempotency
from tests import build_version

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = ROOT / "CHANGELOG.md"


@pytest.fixture(scope="module")
def setup_py() -> ModuleType:
    """setup.py's functions, without running setup() (it runs only as a script)."""
    spec = importlib.util.spec_from_file_location("project_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("source", "commit", "release_commit", "dirty", "version"),
    [
        ("0.2.0.dev0", "0123456789abcdef" * 2, False, False, "0.2.0.dev0+g0123456789ab"),
        ("0.2.0.dev0", "0123456789abcdef" * 2, False, True, "0.2.0.dev0+g0123456789ab.dirty"),
        ("0.2.0", "0123456789abcdef" * 2, True, False, "0.2.0"),
        ("0.2.0", "0123456789abcdef" * 2, True, True, "0.2.1.dev0+g0123456789ab.dirty"),
        ("0.2.0", "0123456789abcdef" * 2, False, False, "0.2.1.dev0+g0123456789ab"),
        ("0.2.0.dev0", None, False, False, "0.2.0.dev0+unknown"),
        ("0.2.0", None, False, False, "0.2.1.dev0+unknown"),
    ],
)
def test_only_the_release_commit_clean_is_the_release(
    setup_py: ModuleType,
    source: str,
    commit: str | None,
    release_commit: bool,
    dirty: bool,
    version: str,
) -> None:
    said = setup_py.describe(source, commit, release_commit=release_commit, dirty=dirty)
    assert said == version
    assert str(Version(said)) == said  # PEP 440, as written
    assert Version(said).is_devrelease is not (release_commit and not dirty and commit)


def git(tree: Path, *argv: str) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t", *argv],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def set_version(tree: Path, version: str) -> None:
    path = tree / build_version.VERSION_FILE
    path.write_text(re.sub(r"(?m)^VERSION = .*$", f'VERSION = "{version}"', path.read_text()))


def test_a_release_goes_commit_by_commit(setup_py: ModuleType, tmp_path: Path) -> None:
    tree = tmp_path / "repo"
    (tree / "layer" / "lambda_idempotency").mkdir(parents=True)
    shutil.copy(ROOT / build_version.VERSION_FILE, tree / build_version.VERSION_FILE)
    (tree / "README.md").write_text("r\n")
    git(tree, "init", "-q")
    git(tree, "add", ".")
    git(tree, "commit", "-qm", "development")

    def built() -> tuple[str, str | None]:
        stamped: tuple[str, str | None] = setup_py.stamp(
            tree, (tree / build_version.VERSION_FILE).read_text()
        )
        assert build_version.problems(*stamped, tree=tree) == []  # the tests' own reading
        return stamped

    head = git(tree, "rev-parse", "HEAD")
    source = build_version.source_version(tree)
    assert built() == (f"{source}+g{head[:12]}", head)

    set_version(tree, "7.1.0")
    git(tree, "commit", "-qam", "release 7.1.0")
    release = git(tree, "rev-parse", "HEAD")
    assert built() == ("7.1.0", release)

    (tree / "README.md").write_text("changed, not committed\n")
    assert built() == (f"7.1.1.dev0+g{release[:12]}.dirty", release)

    git(tree, "commit", "-qam", "a change after the release, before its bump")
    after = git(tree, "rev-parse", "HEAD")
    assert built() == (f"7.1.1.dev0+g{after[:12]}", after)  # never 7.1.0

    set_version(tree, "7.2.0.dev0")
    git(tree, "commit", "-qam", "the bump")
    bump = git(tree, "rev-parse", "HEAD")
    assert built() == (f"7.2.0.dev0+g{bump[:12]}", bump)

    git(tree, "checkout", "-q", release)  # the release, checked out again later
    assert built() == ("7.1.0", release)

    outside = tmp_path / "tarball"
    shutil.copytree(tree, outside, ignore=shutil.ignore_patterns(".git"))
    assert setup_py.stamp(outside, (outside / build_version.VERSION_FILE).read_text()) == (
        "7.1.1.dev0+unknown",
        None,
    )


def test_a_written_version_file_is_kept(setup_py: ModuleType, tmp_path: Path) -> None:
    """An sdist's _version.py, which setup.py wrote, says what the wheel built from it is."""
    written = tmp_path / "_version.py"
    shutil.copy(ROOT / build_version.VERSION_FILE, written)
    setup_py.write(written, "0.2.0.dev0+g0123456789ab", "0123456789ab" + "0" * 28)
    text = written.read_text()
    assert setup_py.stamp(tmp_path, text) == ("0.2.0.dev0+g0123456789ab", "0123456789ab" + "0" * 28)
    assert 'COMMIT: str | None = "0123456789ab' in text


def test_the_source_and_the_changelog_agree() -> None:
    """The source says a development version while the CHANGELOG's newest version is
    unreleased, and that version exactly once it has a date: a release commit that forgot
    either fails here."""
    heading = re.search(r"(?m)^## \[(\d+(?:\.\d+)*)\] - (.+)$", CHANGELOG.read_text())
    assert heading is not None
    number, when = heading[1], heading[2].strip()
    source = Version(build_version.source_version())
    assert source.base_version == number
    assert source.is_devrelease is (when == "unreleased")
    assert lambda_idempotency.__version__ == str(source)  # run from the source: not a build


def test_the_command_says_its_version_and_commit(capsys: pytest.CaptureFixture[str]) -> None:
    from lambda_idempotency._dev.cli import main

    assert main(["--version"]) == 0
    shown = capsys.readouterr().out
    assert shown == f"lambda-idempotency {lambda_idempotency.__version__} (commit not known)\n"
