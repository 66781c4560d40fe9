"""What a built Lambda layer must hold: every runtime module of the library with bytecode for
the runtime the layer targets, none of the development tooling, and nothing but the package
(the runtime ships boto3, botocore and jmespath; Powertools is the `powertools` extra).

    python -m tests.layer_check .aws-sam/build/IdempotencyLayer/python

(`make sam-check` runs it on what `sam build` made; tests/unit/test_layer.py on the Makefile's
build.) Standard library only: it runs with the interpreter that runs SAM.
"""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = "lambda_idempotency"
SOURCE = Path(__file__).resolve().parents[1] / "layer" / PACKAGE
DEVELOPMENT_ONLY = ("_dev", "testing.py", "__main__.py")
"""Relative to the package: what pip installs for developers and the layer leaves out."""
CACHE_TAG = "cpython-311"
MAGIC = (3495).to_bytes(2, "little") + b"\r\n"
"""CPython 3.11's bytecode magic number (importlib.util.MAGIC_NUMBER on 3.11)."""
UNCHECKED_HASH = 0b01
"""PEP 552 flags: hash-based, source not checked; a stale mtime on /opt cannot invalidate it."""


def runtime_modules(package: Path = SOURCE) -> set[str]:
    """The package's .py files a runtime needs: all of them but the development tooling."""
    return {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if "__pycache__" not in path.parts
        and path.relative_to(package).parts[0] not in DEVELOPMENT_ONLY
    }


def problems(python_dir: Path) -> list[str]:
    """Everything wrong with a built layer's python/ folder; empty when it is as it should be."""
    package = python_dir / PACKAGE
    if not package.is_dir():
        return [f"no {PACKAGE} package in {python_dir}"]
    found: list[str] = []
    shipped = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix == ".py"
    }
    expected = runtime_modules()
    found += [f"missing runtime module {PACKAGE}/{name}" for name in sorted(expected - shipped)]
    for name in DEVELOPMENT_ONLY:
        if (package / name).exists():
            found.append(f"development tooling in the layer: {PACKAGE}/{name}")
    found += [
        f"not the package's: {entry.name} (the layer is {PACKAGE} alone: Lambda's runtime "
        "ships boto3, Powertools is the `powertools` extra)"
        for entry in sorted(python_dir.iterdir())
        if entry.name != PACKAGE
    ]
    for source in sorted(python_dir.rglob("*.py")):
        if "__pycache__" in source.parts:
            continue
        compiled = source.parent / "__pycache__" / f"{source.stem}.{CACHE_TAG}.pyc"
        where = source.relative_to(python_dir).as_posix()
        if not compiled.is_file():
            found.append(f"no {CACHE_TAG} bytecode for {where}")
            continue
        header = compiled.read_bytes()[:8]
        if header[:4] != MAGIC:
            found.append(f"bytecode of {where} is not CPython 3.11's")
        elif int.from_bytes(header[4:8], "little") != UNCHECKED_HASH:
            found.append(f"bytecode of {where} is not hash-based and unchecked")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.layer_check LAYER/python", file=sys.stderr)
        return 2
    python_dir = Path(argv[0])
    found = problems(python_dir)
    for problem in found:
        print(f"layer: {problem}", file=sys.stderr)
    if found:
        return 1
    modules = sum(1 for _ in python_dir.rglob("*.py"))
    print(
        f"layer: {len(runtime_modules())} runtime modules of {PACKAGE} and nothing else, no "
        f"development tooling; {modules} .py files, each with {CACHE_TAG} bytecode (unchecked "
        "hash)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
