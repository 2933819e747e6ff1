"""``broker serve``: the broker as a daemon on a Unix socket (``broker.daemon``)."""

from __future__ import annotations

from pathlib import Path

from broker.cli.context import Invocation
from broker.daemon.server import serve as run_daemon


def serve(run: Invocation, socket: Path | None) -> None:
    run_daemon(run.load_config(), socket)
