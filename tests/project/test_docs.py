"""Every test that SECURITY.md and README.md name exists, so no claim points at nothing."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?")


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_named_test_exists() -> None:
    missing = []
    for document in ("SECURITY.md", "README.md"):
        for file_name, function in REFERENCE.findall((ROOT / document).read_text()):
            path = ROOT / file_name
            if not path.exists():
                missing.append(f"{document}: {file_name}")
            elif function and function not in functions_in(path):
                missing.append(f"{document}: {file_name}::{function}")
    assert not missing, missing


def test_every_test_the_docs_folder_names_exists() -> None:
    """docs/*.md name tests by path too (where a test goes, the layout rules): a move must take them along."""
    missing = []
    for document in sorted((ROOT / "docs").glob("*.md")):
        for file_name, function in REFERENCE.findall(document.read_text()):
            path = ROOT / file_name
            if not path.exists() or (function and function not in functions_in(path)):
                missing.append(f"{document.name}: {file_name}{'::' + function if function else ''}")
    assert not missing, missing


def test_nothing_in_the_repository_reaches_outside_it() -> None:
    """A fresh clone is all a newcomer has: no file may point at a folder beside the clone."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    outside = re.compile(r"\.\./" + r"shared\b")  # split, so this file does not match itself
    offenders = [
        name
        for name in tracked.splitlines()
        if (ROOT / name).is_file() and outside.search((ROOT / name).read_text(encoding="utf-8", errors="replace"))
    ]
    assert offenders == []
