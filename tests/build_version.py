"""What a build of this checkout may call itself, worked out from git here, apart from setup.py's
own code: the tests of the wheel, the sdist and the layer hold each build to it.

A release's version only for the commit that set it (the last to change `VERSION = ` in
`_version.py`), built with nothing changed; anything else a development version naming the
commit it was built from.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = "layer/lambda_idempotency/_version.py"
SHIPPED = ("layer/lambda_idempotency", "pyproject.toml", "setup.py", "README.md", "LICENSE")


def git(*argv: str, tree: Path = ROOT) -> str:
    return subprocess.run(
        ["git", "-C", str(tree), *argv], capture_output=True, text=True, check=True
    ).stdout.strip()


def source_version(tree: Path = ROOT) -> str:
    for line in (tree / VERSION_FILE).read_text(encoding="utf-8").splitlines():
        if line.startswith("VERSION = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise AssertionError(f"no VERSION line in {VERSION_FILE}")


def is_release_build(tree: Path = ROOT) -> bool:
    """Whether a build of `tree` now is its release: the source says a release, HEAD set it
    (in a clone with its history), and nothing it ships has changed."""
    if Version(source_version(tree)).is_devrelease:
        return False
    if git("rev-parse", "--is-shallow-repository", tree=tree) == "true":
        return False
    head = git("rev-parse", "HEAD", tree=tree)
    setter = git("log", "-1", "--format=%H", "-G", "^VERSION = ", "--", VERSION_FILE, tree=tree)
    return setter == head and git("status", "--porcelain", "--", *SHIPPED, tree=tree) == ""


def problems(version: str, commit: str | None, tree: Path = ROOT) -> list[str]:
    """What is wrong with a build of `tree` that calls itself `version`, built from `commit`."""
    head = git("rev-parse", "HEAD", tree=tree)
    found = [] if commit == head else [f"built from {commit}, not HEAD {head}"]
    parsed = Version(version)
    if is_release_build(tree):
        if version != source_version(tree):
            found.append(f"the release commit built as {version}, not {source_version(tree)}")
        return found
    if not parsed.is_devrelease:
        found.append(f"{version}: a development build claims a release version")
    if not (parsed.local or "").startswith(f"g{head[:12]}"):
        found.append(f"{version}: a development build that does not name its commit {head[:12]}")
    return found
