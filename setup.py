"""The build's version: which commit a wheel, an sdist or the Lambda layer was built from.

pyproject.toml holds the package's metadata; this file adds one build step. The source's
`layer/lambda_idempotency/_version.py` says which version the code is on its way to
(`0.2.0.dev0`) or, in exactly one commit, a release (`0.2.0`). Every build writes into what
it builds (never into the source) the version it is and the commit it came from:

- a release version only when built from the commit that set it (the last commit to change
  the `VERSION = ` line), with nothing changed in what the build ships;
- any other commit, or uncommitted changes: a development version naming the commit (PEP
  440): `0.2.0.dev0+g<12 hex>`, `+g<12 hex>.dirty` for a modified tree; after a release not
  yet followed by its bump, the next patch's (`0.2.1.dev0+g...`), never the release's;
- outside git (a tarball), a development version that says it does not know its commit
  (`0.2.0.dev0+unknown`); a tree this step already wrote (an sdist) keeps what it says.

Tags are not used (the repository has none: releases are named by commit), which is why this
is not setuptools-scm: without a tag it cannot tell a release commit. Standard library only,
no import of the package (its build environment has setuptools alone); `git` is run here, at
build time, never when the package is imported. `python setup.py --version` prints it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

ROOT = Path(__file__).resolve().parent
VERSION_FILE = "layer/lambda_idempotency/_version.py"
SHIPPED = ("layer/lambda_idempotency", "pyproject.toml", "setup.py", "README.md", "LICENSE")
"""What a build ships or is built by: a change to any of it makes the build not the commit."""
SOURCE_TREE = "LAMBDA_IDEMPOTENCY_SOURCE_TREE"
"""The git checkout a copy of the sources was made from (layer/Makefile builds the layer's
wheel from a copy outside git): the commit is that checkout's."""
RELEASE = re.compile(r"^\d+(\.\d+)*$")
LINE = re.compile(r'^(VERSION|COMMIT)(?:: [^=]+)? = (".*"|None)$', re.MULTILINE)


def read(text: str) -> dict[str, str | None]:
    """The VERSION and COMMIT a `_version.py` says."""
    found = {name: value for name, value in LINE.findall(text)}
    return {name: None if value == "None" else value.strip('"') for name, value in found.items()}


def next_patch(release: str) -> str:
    parts = release.split(".")
    return ".".join([*parts[:-1], str(int(parts[-1]) + 1)])


def describe(source: str, commit: str | None, *, release_commit: bool, dirty: bool) -> str:
    """The version a build of `source` (the file's VERSION) is: `commit` None outside git;
    `release_commit` when the commit is the one that set VERSION to what it says."""
    if commit is None:
        base = source if not RELEASE.match(source) else f"{next_patch(source)}.dev0"
        return f"{base}+unknown"
    if RELEASE.match(source):
        if release_commit and not dirty:
            return source
        source = f"{next_patch(source)}.dev0"
    return f"{source}+g{commit[:12]}" + (".dirty" if dirty else "")


def _git(tree: Path, *argv: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), *argv], capture_output=True, text=True, check=False
        )
    except OSError:  # no git
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def stamp(tree: Path, source_text: str) -> tuple[str, str | None]:
    """(version, commit) of a build of `tree`, whose `_version.py` reads `source_text`."""
    said = read(source_text)
    if said.get("COMMIT") is not None or "+" in (said["VERSION"] or ""):
        return said["VERSION"] or "", said.get("COMMIT")  # written by a build already
    source = said["VERSION"] or ""
    top = _git(tree, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != tree.resolve():
        return describe(source, None, release_commit=False, dirty=False), None
    head = _git(tree, "rev-parse", "HEAD") or ""
    changes = _git(tree, "status", "--porcelain", "--", *SHIPPED)
    # A shallow clone shows its first commit as adding every line: it cannot tell.
    shallow = _git(tree, "rev-parse", "--is-shallow-repository") == "true"
    setter = _git(tree, "log", "-1", "--format=%H", "-G", "^VERSION = ", "--", VERSION_FILE)
    return describe(
        source, head, release_commit=setter == head and not shallow, dirty=changes != ""
    ), head


def write(path: Path, version: str, commit: str | None) -> None:
    """Rewrite the built copy of `_version.py` (unlinked first: sdist hard-links its files
    to the source's)."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^VERSION = .*$", f'VERSION = "{version}"', text, count=1, flags=re.M)
    said = f'"{commit}"' if commit else "None"
    text = re.sub(r"^(COMMIT(?:: [^=]+)?) = .*$", rf"\1 = {said}", text, count=1, flags=re.M)
    path.unlink()
    path.write_text(text, encoding="utf-8")


BUILT: tuple[str, str | None] = ("", None)


class BuildPy(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:  # an editable install imports the source itself
            write(Path(self.build_lib) / "lambda_idempotency" / "_version.py", *BUILT)


class Sdist(sdist):
    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        write(Path(base_dir) / VERSION_FILE, *BUILT)


if __name__ == "__main__":  # as setuptools runs it; the tests import its functions
    BUILT = stamp(
        Path(os.environ.get(SOURCE_TREE) or ROOT), (ROOT / VERSION_FILE).read_text("utf-8")
    )
    setup(version=BUILT[0], cmdclass={"build_py": BuildPy, "sdist": Sdist})
