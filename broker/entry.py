"""The ``broker`` console script: a cold path (docs/architecture.md), each branch importing only what it runs.

``broker --version`` and ``broker --help`` are answered from this module and
the command table alone (the help text is ``broker.cli.help_text``, rendered
from the table by scripts/gen-docs; a test keeps it equal to what typer
renders). Every other command line is parsed once by the table's parser
(``broker.cli.parsing``); a command the daemon answers, with ``BROKER_SOCKET``
or ``[daemon] socket`` set, goes to the thin client ``broker.client`` and
never to direct mode; everything else goes to ``broker.cli.app`` with the
config file's table if the look for a daemon read it (it is parsed once).
"""

from __future__ import annotations

import sys
import warnings


def quiet_library_warnings() -> None:
    """Keep one library warning off stderr, where a command's error is one line.

    ``requests`` (under hvac) tries urllib3's optional SOCKS module, which
    warns when PySocks is missing; ``requests`` silences that warning as it
    loads, but botocore loads inside ``warnings.catch_warnings()``, and when
    the warm-up threads load both at once botocore's block restores the
    filters without requests' one, so the warning reached stderr now and
    then. The broker never uses a SOCKS proxy. A filter set here, before any
    thread starts, survives every such block.
    """
    warnings.filterwarnings("ignore", module=r"urllib3\.contrib\.socks")  # set again by the package: any way in


def run() -> None:
    quiet_library_warnings()
    args = sys.argv[1:]
    if args == ["--version"]:
        from broker import __version__

        sys.stdout.write(f"broker {__version__}\n")
        sys.exit(0)
    if args in (["--help"], ["-h"]):
        from broker.cli.help_text import TOP_LEVEL_HELP

        sys.stdout.write(TOP_LEVEL_HELP)
        sys.exit(0)
    from broker.cli.parsing import parse
    from broker.client.main import route
    from broker.vocab.errors import UsageError

    try:
        parsed = parse(args)
    except UsageError:
        parsed = None  # the command line says what is wrong, as for any command
    outcome = route(parsed) if parsed is not None else None
    if isinstance(outcome, int):
        sys.exit(outcome)
    from broker.host.process_hardening import lock_memory

    memory = lock_memory()  # before a secret can be read; see broker.host.process_hardening
    from broker.cli.app import main

    sys.exit(main(args, memory=memory, config=outcome, route=route))  # the config's table, when it was read already
