"""The house stays small: no module of the broker, the providers, the local stack or the bench over 400 lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "providers", "devstack", "bench")
MAX_LINES = 400


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_every_package_is_looked_at() -> None:
    found = {path.relative_to(ROOT).parts[0] for path in modules()}
    assert found == set(PACKAGES)


def test_no_module_is_over_400_lines() -> None:
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules()}
    too_long = {name: count for name, count in lengths.items() if count > MAX_LINES}
    assert not too_long, f"split these along a seam (at most {MAX_LINES} lines each): {too_long}"
