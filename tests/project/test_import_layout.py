"""Imports at the top of a module, except in the cold paths docs/architecture.md names.

Start-up speed is bought in a few named places (the console script, the thin
client, the command line's dispatch, the warm-up, the store's factory), not
in every layer: an import inside a function anywhere else fails here. A
library a provider or the store calls is imported where it is called, so a
manifest parses and a command that opens no PostgreSQL store runs without it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = (
    "hvac", "boto3", "botocore", "requests", "jwt", "cryptography", "filelock", "psycopg", "opentelemetry",
    "broker.core.store.postgres",
)  # fmt: skip
#: The daemon's modules are being changed for its security fixes; their imports move to the top after those land.
PENDING = ("broker/daemon/holds.py", "broker/daemon/server.py", "broker/daemon/health.py")


def cold_paths() -> set[str]:
    section = (ROOT / "docs" / "architecture.md").read_text().split("## Cold paths", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(broker/[^`]+\.py)`", section))


def imports_in_functions(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Import):
                    found += [(inner.lineno, alias.name) for alias in inner.names]
                elif isinstance(inner, ast.ImportFrom):
                    found.append((inner.lineno, inner.module or ""))
    return found


def is_library(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in LIBRARIES)


def test_imports_inside_functions_only_in_the_named_cold_paths() -> None:
    named = cold_paths()
    found = []
    for path in sorted([*(ROOT / "broker").rglob("*.py"), *(ROOT / "providers").rglob("*.py")]):
        where = str(path.relative_to(ROOT))
        if where in named or where in PENDING:
            continue
        found += [f"{where}:{line} {module}" for line, module in imports_in_functions(path) if not is_library(module)]
    assert found == []


def test_every_named_cold_path_exists_and_is_one() -> None:
    named = cold_paths()
    assert len(named) >= 8
    for where in named:
        assert imports_in_functions(ROOT / where), f"{where} is named a cold path but imports nothing late"
