"""What every command takes from the command line: the global options, the config, an open broker, output.

The command modules (``sessions``, ``policy``, ``audit``, ``ops``) import this
module, never ``app``, so there is no circle; everything is typed. A command's
handler gets an ``Invocation`` first, then its options as the command table
names them. An open broker is ``broker.cli.opening``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from broker.core.inputs.config import Config, config_path
from broker.core.inputs.config import load_config as load
from broker.telemetry.command import started

Read = tuple[str, dict[str, Any]]  # a config file's path and TOML table, when the console script read it already


class Invocation:
    """What every command gets besides its own options: the global options, and the config read once."""

    def __init__(
        self, *, config: str | None = None, debug: bool = False, read: Read | None = None, command: str = ""
    ) -> None:
        self.config = config  # --config or BROKER_CONFIG, else None (the default path)
        self.debug = debug
        self.read = read
        self.command = command  # its words (``revoke``, ``audit verify``): the name of its trace
        self._loaded: Config | None = None

    def load_config(self) -> Config:
        """The config named by ``--config``/``BROKER_CONFIG``, or the default path: read and parsed once."""
        if self._loaded is None:
            path = config_path(self.config)
            read = self.read
            loaded = self._loaded = load(path, table=read[1] if read is not None and Path(read[0]) == path else None)
            started(f"broker {self.command}", loaded.telemetry, loaded.host)  # with [telemetry]: its trace starts
        return self._loaded


def load_config(invocation: Invocation) -> Config:
    return invocation.load_config()


def echo(text: str = "", *, err: bool = False) -> None:
    """One line of output, flushed now (a full or closed stream fails the command, as it should)."""
    stream = sys.stderr if err else sys.stdout
    stream.write(text + "\n")
    stream.flush()


def print_json(data: Any) -> None:
    echo(json.dumps(data, indent=2))


def print_error(message: str) -> None:
    """The one error line format: ``broker: error: ...``."""
    sys.stderr.write(f"broker: error: {message}\n")
