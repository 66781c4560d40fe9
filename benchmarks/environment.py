"""The measuring environment: made like Lambda's where it matters, and described for the report.

Lambda's Python runtime ships botocore without `awscrt`, so requests are signed by botocore's
pure-Python signer there. With `awscrt` importable, botocore would sign differently and the
CPU floor would not be Lambda's: `block_awscrt` hides it before botocore is first imported.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path

DISTRIBUTIONS = ("lambda-idempotency", "aws-lambda-powertools", "boto3", "botocore", "jmespath")


def block_awscrt() -> None:
    """Make `import awscrt` fail in this process, as it does on Lambda. Only effective before
    botocore is imported; `awscrt_status` reports what botocore actually saw."""
    if "botocore" not in sys.modules:
        sys.modules.setdefault("awscrt", None)  # type: ignore[arg-type]


def awscrt_status() -> tuple[bool, str]:
    """(Lambda-like, description): whether botocore runs without awscrt, as on Lambda."""
    from botocore.compat import HAS_CRT

    if HAS_CRT:
        return False, "present and used by botocore: CPU numbers are NOT Lambda-like"
    if version_of("awscrt") != "not installed":
        return True, "installed but blocked for this run; botocore signs in pure Python"
    return True, "not installed; botocore signs in pure Python, as on Lambda"


def version_of(distribution: str) -> str:
    if distribution == "lambda-idempotency":
        return our_version()
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def our_version() -> str:
    """The version of the code measured: an editable install's metadata keeps the commit it
    was installed at, so the source's version, and the checkout's commit where it has one."""
    import subprocess

    from lambda_idempotency._version import COMMIT, VERSION

    if COMMIT is not None:  # a build, stamped with its commit
        return VERSION
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
        )
        return done.stdout.strip()

    try:
        commit = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return VERSION
    return f"{VERSION}+g{commit}{'.dirty' if dirty else ''}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def java_version() -> str:
    try:
        completed = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = (completed.stderr or completed.stdout).splitlines()
    return lines[0].strip() if lines else "unknown"


def dynamodb_local_version() -> str:
    """The emulator's own answer to `-version`."""
    from lambda_idempotency._dev.dynamodb_local import install

    jar_dir = install()
    try:
        completed = subprocess.run(
            ["java", "-jar", str(jar_dir / "DynamoDBLocal.jar"), "-version"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
            cwd=jar_dir,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    lines = [line.strip() for line in completed.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else "unknown"


def describe_machine() -> list[tuple[str, str]]:
    """What the report states about the machine: no host names, no paths."""
    cores = os.cpu_count() or 0
    rows = [
        ("CPU", f"{cpu_model()}, {cores} cores"),
        ("OS", f"{platform.system()} {platform.release()} ({platform.machine()})"),
        ("Python", f"{platform.python_implementation()} {platform.python_version()}"),
    ]
    rows += [(name, version_of(name)) for name in DISTRIBUTIONS]
    rows.append(("awscrt", awscrt_status()[1]))
    rows.append(("DynamoDB Local", f"{dynamodb_local_version()} on {java_version()}"))
    return rows
