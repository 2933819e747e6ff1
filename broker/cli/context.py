"""What every command takes from the command line: the global options, the config, an open broker, output.

The command modules (``sessions``, ``policy``, ``audit``, ``ops``) import this
module, never ``app``, so there is no circle; everything is typed. The core is
imported on first use: ``broker --help`` must not pay for it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from broker.vocab.errors import BrokerError

if TYPE_CHECKING:
    from broker.core.broker import Broker
    from broker.core.inputs.config import Config
    from broker.core.store.interface import SessionStore
    from broker.host.process_hardening import MemoryLock

_CONFIG = "broker.config"  # where a command's config is kept on the click context (``ctx.meta``, shared)


@dataclass(frozen=True)
class Start:
    """What the console script hands the command line: this process's memory lock and, when the look for a
    daemon read it already, the config file's path and TOML table."""

    memory: MemoryLock | None = None
    config: tuple[Path, dict[str, Any]] | None = None


@dataclass(frozen=True)
class Options:
    """The global options, kept on the click context by the ``app`` callback."""

    config: str | None
    debug: bool
    read: tuple[Path, dict[str, Any]] | None = None  # the config file's table as ``Start`` brought it


def options(ctx: typer.Context) -> Options:
    found = ctx.find_object(Options)
    return found if found is not None else Options(config=None, debug=False)


def load_config(ctx: typer.Context) -> Config:
    """The config named by ``--config``/``BROKER_CONFIG``, or the default path: read and parsed once a command."""
    loaded: Config | None = ctx.meta.get(_CONFIG)
    if loaded is None:
        from broker.core.inputs.config import config_path
        from broker.core.inputs.config import load_config as load

        path = config_path(options(ctx).config)
        read = options(ctx).read
        loaded = ctx.meta[_CONFIG] = load(path, table=read[1] if read is not None and read[0] == path else None)
    return loaded


@contextlib.contextmanager
def open_broker(config: Config, store: SessionStore | None = None) -> Iterator[Broker]:
    """A ``Broker`` for one command (on ``store`` when the command opened it already), closed (its checkpoint
    signed) when the command is done."""
    from broker.core.broker import Broker

    try:
        broker = Broker.open(config, store)
    except BaseException:
        if store is not None:
            store.close()
        raise
    try:
        yield broker
    except BaseException:
        # The command's own failure is what to report; a checkpoint that fails now is signed by the next command.
        with contextlib.suppress(BrokerError):
            broker.close()
        raise
    broker.close()


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2))


def print_error(message: str) -> None:
    """The one error line format: ``broker: error: ...``."""
    sys.stderr.write(f"broker: error: {message}\n")
