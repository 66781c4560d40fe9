"""The examples in the docs run: docs/testing.md's examples are tests for the plugin."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown.read_text(encoding="utf-8"), re.DOTALL)


def test_testing_md_examples_pass_with_the_installed_plugin(tmp_path: Path) -> None:
    examples = [
        block for block in python_blocks(ROOT / "docs" / "testing.md") if "def test_" in block
    ]
    assert examples
    test_file = tmp_path / "test_examples.py"
    test_file.write_text("\n\n".join(examples), encoding="utf-8")

    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 passed" in completed.stdout
