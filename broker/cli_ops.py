"""``broker init`` and ``broker doctor``: the operator's set-up and health-check commands."""

from __future__ import annotations

import typer


def register_ops(app: typer.Typer) -> None:
    """Add the operator commands to the main application."""
