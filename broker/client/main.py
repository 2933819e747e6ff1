"""Every command the daemon answers, through the daemon: same arguments, output, codes.

``route`` is asked about every command line the command table's parser
understood (``broker.cli.parsing``): a command the daemon answers
(``Command.daemon``), with ``BROKER_SOCKET`` or the config's ``[daemon]
socket`` set, runs the thin-client call its table entry names
(``broker.client.calls``, ``issuing``, ``executing``, ``approving``) and its
exit code comes back; anything else goes to the full command line, with the
config file's path and table when this module read them (it is parsed once).
A cold path (docs/architecture.md): one request and one answer, so the chosen
command's call, and what it prints with (its renderer, the launch formats,
the sandbox), is imported by that command only; the config file is read only
without ``BROKER_SOCKET``.
"""

from __future__ import annotations

import os
import sys

from broker.cli.parsing import Parsed
from broker.commands.declaring import resolve
from broker.commands.table import CONFIG_ENV, DEFAULT_CONFIG
from broker.vocab.errors import BrokerError

TYPE_CHECKING = False  # typing itself is not imported at run time: the client's cold path
if TYPE_CHECKING:
    from typing import Any

    Read = tuple[str, dict[str, Any]]  # the config file's path and TOML table

SOCKET_ENV = "BROKER_SOCKET"
MAX_CONFIG_BYTES = 256 * 1024


def route(parsed: Parsed) -> int | Read | None:
    """The exit code when the daemon ran the command; else the config file's path and table if read (or None)."""
    if not parsed.command.daemon:
        return None
    socket = os.environ.get(SOCKET_ENV)  # BROKER_SOCKET, else the config's [daemon] socket
    if not socket:
        read = read_config_table(parsed.options["config"])
        socket = daemon_socket(*read) if read is not None else None
        if socket is None:
            return read
    try:  # the command's call, as the table names it: every daemon command has one (broker.commands.declaring)
        run = resolve(str(parsed.command.call))
        return run(parsed.command, parsed.values, socket)  # type: ignore[operator,no-any-return]
    except BrokerError as exc:
        sys.stderr.write(f"broker: error: {exc.message}\n")
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("broker: error: interrupted\n")
        return 130


def read_config_table(config: object) -> Read | None:
    """The config file named by ``--config``, ``BROKER_CONFIG`` or the default, and its TOML table (None when it
    cannot be read or is not TOML: the direct command line reports what is wrong with it)."""
    import tomllib

    from broker.vocab.files import read_bounded

    path = str(config or os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)
    try:  # the one bounded reader: a FIFO or device named as the config is refused, never waited on
        data, _ = read_bounded(path, MAX_CONFIG_BYTES)
        return path, tomllib.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return None


def daemon_socket(path: str, table: dict[str, Any]) -> str | None:
    """The config's ``[daemon] socket`` (relative to the config file), else None."""
    daemon = table.get("daemon")
    socket = daemon.get("socket") if isinstance(daemon, dict) else None
    if not isinstance(socket, str) or not socket:
        return None
    return socket if socket.startswith("/") else os.path.join(os.path.dirname(os.path.realpath(path)), socket)
