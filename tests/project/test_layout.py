"""The house stays small and findable: no module of the broker, the providers, the local stack, the bench or the
tests over 400 lines, no folder of the product with more than 15 modules, and every test in the folder of what it
tests (docs/architecture.md, "Where a test goes")."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("broker", "providers", "devstack", "bench", "tests")
MAX_LINES = 400
#: The product's folders: a folder of more than MAX_MODULES modules (``__init__.py`` counted) wants rooms.
PRODUCT = ("broker", "providers", "devstack")
MAX_MODULES = 15
#: The folders a test file lives in, one per kind of test.
TEST_FOLDERS = ("unit", "providers", "integration", "security", "project")


def modules() -> list[Path]:
    return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def test_every_package_is_looked_at() -> None:
    found = {path.relative_to(ROOT).parts[0] for path in modules()}
    assert found == set(PACKAGES)


def test_no_module_is_over_400_lines() -> None:
    lengths = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in modules()}
    too_long = {name: count for name, count in lengths.items() if count > MAX_LINES}
    assert not too_long, f"split these along a seam (at most {MAX_LINES} lines each): {too_long}"


def test_no_product_folder_holds_more_than_15_modules() -> None:
    folders = {path.parent for package in PRODUCT for path in (ROOT / package).rglob("*.py")}
    counts = {str(folder.relative_to(ROOT)): len(list(folder.glob("*.py"))) for folder in folders}
    crowded = {name: count for name, count in counts.items() if count > MAX_MODULES}
    assert not crowded, f"give these folders rooms (at most {MAX_MODULES} modules each): {crowded}"


def test_every_test_file_is_in_the_folder_of_its_kind() -> None:
    tests = ROOT / "tests"
    misplaced = sorted(
        str(path.relative_to(ROOT))
        for path in tests.rglob("test_*.py")
        if path.relative_to(tests).parts[0] not in TEST_FOLDERS
    )
    assert misplaced == [], f"move these under tests/{{{','.join(TEST_FOLDERS)}}} (docs/architecture.md): {misplaced}"


def test_unit_tests_are_laid_out_like_the_packages() -> None:
    """tests/unit/<path>/ mirrors a package of the product: tests/unit/core/inputs is broker/core/inputs."""
    unit = ROOT / "tests" / "unit"
    folders = sorted({path.parent.relative_to(unit) for path in unit.rglob("test_*.py")} - {Path(".")})
    unmirrored = [
        str(folder)
        for folder in folders
        if not (ROOT / "broker" / folder).is_dir() and not (folder.parts[0] == "providers" and (ROOT / folder).is_dir())
    ]
    assert unmirrored == [], f"tests/unit/<folder> must name a package under broker/ or providers/: {unmirrored}"
