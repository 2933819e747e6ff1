"""The session store's implementations are reached through its factory alone, and the contract saying so names no
user: every package of the broker and every room of the core is held to it, a new one without an edit."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPLEMENTATIONS = {"broker.core.store.sqlite", "broker.core.store.postgres"}


def test_the_store_factory_contract_covers_every_module_of_the_broker_without_naming_them() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    [contract] = [c for c in contracts if IMPLEMENTATIONS & set(c.get("forbidden_modules", ()))]
    assert contract["type"] == "forbidden"
    assert set(contract["forbidden_modules"]) == IMPLEMENTATIONS
    assert sorted(contract["source_modules"]) == ["broker.*", "broker.core.*"]
    assert "ignore_imports" not in contract  # no user of the store is let off
