"""A running exec session is one object: each of its parts is built in one place, for direct ``exec`` and the daemon.

``broker exec`` and the daemon's held execs used to build the same parts (the
standing, the control socket, the renewals, the proxy's evidence writer, ...)
each in their own code, with two teardown orders, so each exec feature was two
edits. Now ``broker.core.running.session`` builds them all, and tears them down
in one order; a second place that builds one fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNING_SESSION = "broker/core/running/session.py"
#: The parts of a running session (docs/architecture.md, "A running exec session").
PARTS = (
    "Halt",
    "Standing",
    "ControlSocket",
    "RunningNetwork",
    "Rotator",
    "SecretRefresher",
    "Projector",
    "EvidenceWriter",
)


def builders() -> dict[str, set[str]]:
    """Each part, and the modules of the broker that construct it."""
    found: dict[str, set[str]] = {part: set() for part in PARTS}
    for path in sorted((ROOT / "broker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in found:
                found[name].add(str(path.relative_to(ROOT)))
    return found


def test_each_part_of_a_running_session_is_built_by_the_running_session_alone() -> None:
    assert builders() == {part: {RUNNING_SESSION} for part in PARTS}
